/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Deferred undos of abandoned attempts.
 *
 * When an acquisition fails because Redis did not answer, the request may
 * still have been carried out: the owner may hold the lock, or sit in its
 * queue, without knowing. That must be undone (never reported as
 * success), but the caller must not wait a second timeout for it, so the
 * undo is queued here and sent by the background work until Redis
 * confirms it, or until what it would remove has expired by itself (the
 * lease of an acquisition, a waiter's place). An undo reaches a node that
 * still owes the attempt's reply behind it, on the same connection
 * (backend/node.c), so it is carried out after what it undoes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "bg/bg.h"
#include "bg/events.h"
#include "layout/layout.h"
#include "util/clock.h"

#define SPACING_MS 200

struct rlock__cleanup {
    rlock__cleanup *next;
    /* What the layout's cancel request needs of the mutex, copied: the
     * mutex may be freed before the undo is sent. */
    struct rlock_mutex shadow;
    char owner[RLOCK__OWNER_MAX];
    size_t owner_len;
    uint64_t nonce;
    int said; /* sent once already, and reported (core/events.h) */
    int64_t next_at;
    int64_t give_up_at;
};

/* Failures that say nothing about the undo itself: the server was not
 * reached, or did not answer. Worth another try while it matters. */
static int transient(const rlock__result *r)
{
    return rlock__result_unknown(r) || r->rc == RLOCK_ENOREPLY ||
           r->rc == RLOCK_EIO || r->rc == RLOCK_ECONNECT ||
           r->rc == RLOCK_EUNAVAILABLE;
}

static void job_free(rlock__cleanup *j)
{
    int i;

    for (i = 0; i < j->shadow.nkeys; i++)
        free(j->shadow.keys[i]);
    free(j->shadow.channel);
    free(j->shadow.name);
    free(j);
}

static char *dup_bytes(const char *p, size_t n)
{
    char *d = malloc(n ? n : 1);

    if (d && n)
        memcpy(d, p, n);
    return d;
}

/* The undo of acquisition nonce of owner of m, as a job not yet queued
 * (NULL: out of memory; the lease and the queue place then expire on
 * their own). It is sent until lease_ms from now at most. */
static rlock__cleanup *job_new(rlock_mutex *m, uint64_t owner, uint64_t nonce,
                               int64_t lease_ms)
{
    rlock_client *c = m->c;
    rlock__cleanup *j = calloc(1, sizeof *j);
    int i, ok = j != NULL;

    for (i = 0; ok && i < m->nkeys; i++) {
        j->shadow.keys[i] = dup_bytes(m->keys[i], m->key_lens[i]);
        j->shadow.key_lens[i] = m->key_lens[i];
        j->shadow.nkeys = i + 1;
        ok = j->shadow.keys[i] != NULL;
    }
    if (ok) {
        /* The name, for the event that reports the undo. */
        j->shadow.name = dup_bytes(m->name, m->name_len);
        j->shadow.name_len = m->name_len;
        ok = j->shadow.name != NULL;
    }
    if (ok && m->channel) {
        j->shadow.channel = dup_bytes(m->channel, m->channel_len);
        j->shadow.channel_len = m->channel_len;
        ok = j->shadow.channel != NULL;
    }
    if (!ok) {
        if (j)
            job_free(j);
        return NULL;
    }
    j->shadow.c = c;
    j->shadow.layout = m->layout;
    j->shadow.opts.layout = m->opts.layout;
    if (lease_ms < m->lease_ms)
        lease_ms = m->lease_ms;
    if (lease_ms < c->opts.waiter_ttl_ms)
        lease_ms = c->opts.waiter_ttl_ms;
    j->give_up_at = rlock__after_ms(lease_ms);
    j->owner_len = m->layout->owner(c, owner, nonce, j->owner);
    j->nonce = nonce;
    return j;
}

/* Queues j for the background (mu held). */
static void job_queue(rlock_client *c, rlock__cleanup *j)
{
    rlock__call call;

    rlock__call_init(&call, 0);
    if (rlock__bg_ensure(c, &call) != RLOCK_OK) {
        job_free(j);
        return;
    }
    j->next = c->bg->cleanups;
    c->bg->cleanups = j;
    rlock__bg_kick(c);
}

void rlock__undo_later(rlock_mutex *m, uint64_t owner, uint64_t nonce, int sent)
{
    rlock__cleanup *j = job_new(m, owner, nonce, 0);

    if (!j)
        return;
    j->said = sent;
    pthread_mutex_lock(&m->c->mu);
    job_queue(m->c, j);
    pthread_mutex_unlock(&m->c->mu);
}

void rlock__undo_hold_later(rlock_client *c, const rlock__hold *h)
{
    rlock__cleanup *j = job_new(h->m, h->owner.no, h->nonce, h->owed_max_ms);

    if (j)
        job_queue(c, j);
}

/* Sends j's undo (mu not held): 1 if it must be tried again. */
static int send(rlock_client *c, rlock__cleanup *j, int64_t bound)
{
    rlock__results res;
    rlock__call call;
    rlock__req req;
    int i, again = 0;

    j->shadow.layout->cancel(&j->shadow, j->owner, j->owner_len, j->nonce,
                             &req);
    req.tag = j->nonce;
    if (rlock__req_finish(&req) != RLOCK_OK) {
        rlock__req_free(&req);
        return 1;
    }
    rlock__call_init(&call, bound);
    rlock__backend_exec(c, &req, RLOCK__X_BEHIND | RLOCK__X_BRIEF, &res, &call);
    for (i = 0; i < res.n; i++) {
        if (res.r[i].rc != RLOCK_OK && transient(&res.r[i]))
            again = 1;
        if (!j->said && (res.r[i].sent || res.r[i].rc == RLOCK_OK)) {
            j->said = 1;
            rlock__undo_sent(&j->shadow, j->owner, RLOCK_EVF_LATER);
        }
    }
    rlock__results_free(&res);
    rlock__req_free(&req);
    return again;
}

/*
 * Sends each undo that was due when the step began, once. Against a
 * server that does not answer, each send takes a whole request timeout:
 * an undo that came due again meanwhile waits for the next step, and the
 * step ends early when the client is closing or other work (a renewal) is
 * due, so that neither the watchdog nor rlock_client_close waits for a
 * queue of undos that keep failing (they did, for up to a lease).
 */
void rlock__cleanup_step(rlock_client *c, int64_t *next)
{
    const int64_t began = rlock__now_ns();
    int64_t now = began;
    rlock__cleanup **p = &c->bg->cleanups, *j;

    while ((j = *p) != NULL) {
        int64_t bound;
        int again;

        if (j->next_at > began) {
            *next = rlock__earlier(*next, j->next_at);
            p = &j->next;
            continue;
        }
        if (c->bg->stop || (now > began && *next <= now)) {
            /* Still due: the loop comes back at once. */
            *next = now;
            return;
        }
        *p = j->next; /* taken off the list while mu is released */
        bound = rlock__holds_end(&c->holds, c->shortest_lease_ms);
        pthread_mutex_unlock(&c->mu);
        again = send(c, j, bound);
        pthread_mutex_lock(&c->mu);
        /* A server that is paused or unreachable for a while (longer than
         * a few tries) must not leave a lock it granted late to expire on
         * its own: keep trying as long as it would live. */
        now = rlock__now_ns();
        if (again && now < j->give_up_at) {
            j->next_at = now + SPACING_MS * RLOCK__NS_PER_MS;
            j->next = c->bg->cleanups;
            c->bg->cleanups = j;
        } else {
            job_free(j);
        }
        p = &c->bg->cleanups; /* the list may have changed meanwhile */
    }
}

void rlock__cleanup_free(rlock_client *c)
{
    while (c->bg->cleanups) {
        rlock__cleanup *j = c->bg->cleanups;
        c->bg->cleanups = j->next;
        job_free(j);
    }
}
