/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Deferred cleanup of abandoned attempts.
 *
 * When an acquire fails because Redis did not answer, the request may still
 * have been applied: the caller may hold the lock, or sit in its queue,
 * without knowing. That must be undone (never reported as success), but the
 * caller must not wait a second timeout for it, so the undo is queued here
 * and sent by the background thread, a few times, until Redis answers. If
 * it never does, nothing is lost: the lease and the queue place expire on
 * their own.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define CLEANUP_SPACING_MS 200

struct rlock__cleanup {
    struct rlock__cleanup *next;
    char *keys[RLOCK__K_COUNT];
    size_t key_lens[RLOCK__K_COUNT];
    char *channel;
    size_t channel_len;
    char owner[RLOCK__OWNER_MAX];
    uint64_t thread;
    char attempt[24]; /* "" when only the queue place is to go */
    int64_t next_at;
    /* Past this, what the undo would remove has expired by itself (the
     * lease of an acquisition, a waiter's place): no use trying on. */
    int64_t give_up_at;
};

/* Failures that say nothing about the undo itself: the server was not
 * reached, or did not answer. Worth another try while it matters. */
static int transient(int rc)
{
    return rc == RLOCK_ENOREPLY || rc == RLOCK_EIO || rc == RLOCK_ECONNECT ||
           rc == RLOCK_EUNAVAILABLE;
}

static void cleanup_free(rlock__cleanup *j)
{
    int i;

    for (i = 0; i < RLOCK__K_COUNT; i++)
        free(j->keys[i]);
    free(j->channel);
    free(j);
}

static char *dup_bytes(const char *p, size_t n)
{
    char *d = malloc(n ? n : 1);

    if (d)
        memcpy(d, p, n);
    return d;
}

int rlock__cancel_now(rlock_client *c, char *const keys[RLOCK__K_COUNT],
                      const size_t key_lens[RLOCK__K_COUNT],
                      const char *channel, size_t channel_len,
                      const char *owner, const char *attempt)
{
    const char *args[3];
    size_t lens[3];
    redisReply *r = NULL;
    int rc;

    args[0] = owner;
    lens[0] = strlen(owner);
    args[1] = channel;
    lens[1] = channel_len;
    args[2] = attempt;
    lens[2] = strlen(attempt);
    rc = rlock__eval(c, RLOCK__S_CANCEL, &r, RLOCK__K_COUNT,
                     (const char **)keys, key_lens, 3, args, lens);
    if (r)
        freeReplyObject(r);
    return rc;
}

void rlock__defer_cancel(rlock_mutex *m, uint64_t attempt)
{
    rlock_client *c = m->c;
    rlock__cleanup *j = calloc(1, sizeof *j);
    int i, ok = j != NULL;
    int64_t lease;

    for (i = 0; ok && i < RLOCK__K_COUNT; i++) {
        j->keys[i] = dup_bytes(m->keys[i], m->key_lens[i]);
        j->key_lens[i] = m->key_lens[i];
        ok = j->keys[i] != NULL;
    }
    if (ok) {
        j->channel = dup_bytes(m->channel, m->channel_len);
        j->channel_len = m->channel_len;
        ok = j->channel != NULL;
    }
    if (!ok) {
        if (j)
            cleanup_free(j);
        return; /* out of memory: the lease and queue place expire anyway */
    }
    lease = m->opts.lease_ms > 0 ? m->opts.lease_ms : c->opts.watchdog_lease_ms;
    if (lease < c->opts.waiter_ttl_ms)
        lease = c->opts.waiter_ttl_ms;
    j->give_up_at = rlock__now_ns() + lease * RLOCK__NS_PER_MS;
    j->thread = rlock__thread_number();
    rlock__owner(c, j->thread, j->owner);
    if (attempt)
        snprintf(j->attempt, sizeof j->attempt, "%llu",
                 (unsigned long long)attempt);
    pthread_mutex_lock(&c->mu);
    if (rlock__bg_ensure(c) != RLOCK_OK) {
        pthread_mutex_unlock(&c->mu);
        cleanup_free(j);
        return;
    }
    j->next = c->cleanups;
    c->cleanups = j;
    rlock__bg_kick(c);
    pthread_mutex_unlock(&c->mu);
}

void rlock__cleanup_step(rlock_client *c, int64_t *next)
{
    int64_t now = rlock__now_ns();
    rlock__cleanup **p = &c->cleanups, *j;

    while ((j = *p) != NULL) {
        int rc;

        if (j->next_at > now) {
            if (j->next_at < *next)
                *next = j->next_at;
            p = &j->next;
            continue;
        }
        *p = j->next; /* taken off the list while mu is released */
        pthread_mutex_unlock(&c->mu);
        rc = rlock__cancel_now(c, j->keys, j->key_lens, j->channel,
                               j->channel_len, j->owner, j->attempt);
        pthread_mutex_lock(&c->mu);
        /* A server that is paused or unreachable for a while (longer
         * than a few tries) must not leave a lock it granted late to
         * expire on its own: keep trying as long as it would live. */
        if ((rlock__outcome_unknown(rc) || transient(rc)) &&
            rlock__now_ns() < j->give_up_at) {
            j->next_at =
                rlock__now_ns() + CLEANUP_SPACING_MS * RLOCK__NS_PER_MS;
            j->next = c->cleanups;
            c->cleanups = j;
            p = &c->cleanups; /* the list changed while unlocked */
            now = rlock__now_ns();
            continue;
        }
        cleanup_free(j);
        p = &c->cleanups;
    }
}

void rlock__cleanup_discard(rlock_client *c)
{
    while (c->cleanups) {
        rlock__cleanup *j = c->cleanups;
        c->cleanups = j->next;
        cleanup_free(j);
    }
}
