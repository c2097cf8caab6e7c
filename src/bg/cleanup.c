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
    free(j->shadow.name);
    free(j);
}

/* n bytes at p and a NUL. */
static char *dup_bytes(const char *p, size_t n)
{
    char *d = malloc(n + 1);

    if (d) {
        memcpy(d, p, n);
        d[n] = '\0';
    }
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

    /* The name: the layout spells the keys from it, and the event that
     * reports the undo names it. */
    if (j && !(j->shadow.name = dup_bytes(m->name, m->name_len))) {
        free(j);
        j = NULL;
    }
    if (!j)
        return NULL;
    j->shadow.name_len = m->name_len;
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
    rlock__call call = {0};

    rlock__call_init(&call, 0);
    if (rlock__bg_ensure(c, &call) != RLOCK_OK) {
        rlock__call_end(&call);
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

/* j's undo as a request in slot s, by bound (a driver runs it). */
static void job_request(rlock__cleanup *j, rlock__slot *s, rlock__call *call,
                        int64_t bound)
{
    j->shadow.layout->cancel(&j->shadow, j->owner, j->owner_len, j->nonce,
                             &s->req);
    s->req.tag = j->nonce;
    s->flags = RLOCK__X_BEHIND | RLOCK__X_BRIEF;
    rlock__call_init(call, bound);
    s->call = call;
}

/* What came of j's undo: 1 if it must be tried again. */
static int job_read(rlock__cleanup *j, rlock__slot *s)
{
    int i, again = s->rc != RLOCK_OK; /* not sent: out of memory */

    for (i = 0; i < s->res.n; i++) {
        if (s->res.r[i].rc != RLOCK_OK && transient(&s->res.r[i]))
            again = 1;
        if (!j->said && (s->res.r[i].sent || s->res.r[i].rc == RLOCK_OK)) {
            j->said = 1;
            rlock__undo_sent(&j->shadow, j->owner, RLOCK_EVF_LATER);
        }
    }
    rlock__results_free(&s->res);
    rlock__req_free(&s->req);
    return again;
}

/*
 * Sends each undo that was due when the step began, once, as a call in
 * steps (core/step.h; stepped with mu held, released by the driver
 * around each request). Against a server that does not answer, each send
 * takes a whole request timeout: an undo that came due again meanwhile
 * waits for the next step, and the step ends early when the client is
 * closing or other work (a renewal) is due, so that neither the watchdog
 * nor rlock_client_close waits for a queue of undos that keep failing
 * (they did, for up to a lease).
 */
void rlock__cleanup_begin(rlock_client *c, rlock__cleanup_op *o, int64_t *next)
{
    o->c = c;
    o->began = o->now = rlock__now_ns();
    o->next = next;
    o->j = NULL;
}

int rlock__cleanup_op_step(rlock__cleanup_op *o, rlock__slot **slot)
{
    rlock_client *c = o->c;
    rlock__cleanup **p = &c->bg->cleanups, *j;

    if ((j = o->j) != NULL) {
        int again = job_read(j, &o->s);
        rlock__call_end(&o->call);
        o->j = NULL;
        /* A server that is paused or unreachable for a while (longer than
         * a few tries) must not leave a lock it granted late to expire on
         * its own: keep trying as long as it would live. */
        o->now = rlock__now_ns();
        if (again && o->now < j->give_up_at) {
            j->next_at = o->now + SPACING_MS * RLOCK__NS_PER_MS;
            j->next = c->bg->cleanups;
            c->bg->cleanups = j;
        } else {
            job_free(j);
        }
        /* (From the head again: the list may have changed meanwhile.) */
    }
    while ((j = *p) != NULL) {
        if (j->next_at > o->began) {
            *o->next = rlock__earlier(*o->next, j->next_at);
            p = &j->next;
            continue;
        }
        if (c->bg->stop || (o->now > o->began && *o->next <= o->now)) {
            /* Still due: the loop comes back at once. */
            *o->next = o->now;
            return RLOCK__STEP_DONE;
        }
        *p = j->next;
        o->j = j;
        job_request(j, &o->s, &o->call,
                    rlock__holds_end(&c->holds, c->shortest_lease_ms));
        *slot = &o->s;
        return RLOCK__STEP_SEND;
    }
    return RLOCK__STEP_DONE;
}

void rlock__cleanup_step(rlock_client *c, int64_t *next)
{
    rlock__cleanup_op o;
    rlock__slot *slot;

    rlock__cleanup_begin(c, &o, next);
    while (rlock__cleanup_op_step(&o, &slot) == RLOCK__STEP_SEND) {
        pthread_mutex_unlock(&c->mu);
        rlock__slot_run(slot, c);
        pthread_mutex_lock(&c->mu);
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
