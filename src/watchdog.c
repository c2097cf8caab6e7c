/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Lease timers, run by the background thread.
 *
 * Watchdog holds (lease_ms = 0) are renewed every third of their lease.
 * A hold handed over by a release may have been granted a shorter lease
 * than it asked for (no longer than its place in the queue had left); it
 * is topped up to its own lease at a third of the granted one, watchdog or
 * not, and that top-up does not count as a renewal.
 * All renewals that are due, or will be within half of that period, go
 * to Redis together, a thousand per script call: one round trip per tick
 * for every thousand locks the client holds. A renewal checks owner and
 * token, so it can never revive a lock that was released or taken by
 * someone else.
 *
 * A hold whose lease end passes without a successful renewal (Redis
 * unreachable, the renewal cap reached, a fixed lease never extended) is
 * lost, and so is one that a renewal finds gone. A lost hold gets its
 * on_lost callback exactly once, from this thread, and its next unlock or
 * extend returns RLOCK_ELOST.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "reply.h"

/* Most holds renewed by one script call. */
#define RENEW_BATCH 1000
/* The renewal groups of the peers' layouts' holds: above any cluster
 * slot. */
#define GROUP_TOKEN (1 << 15)
#define GROUP_REDISSON (1 << 16)

typedef struct {
    uint64_t serial;
    int64_t lease_ms;
    int replicas; /* sync_replicas of the hold's mutex */
    int group;    /* batches hold one group: the layout's script and,
                     on a cluster, the key's slot */
    char *key;
    size_t key_len;
    char owner[RLOCK__OWNER_MAX];
    char token[24];
    char lease[24];
} renewal;

static int64_t period_ns(const rlock__hold *h)
{
    return h->cur_lease_ms * RLOCK__NS_PER_MS / 3;
}

static int topping_up(const rlock__hold *h)
{
    return h->cur_lease_ms < h->lease_ms;
}

static int may_renew(const rlock__hold *h)
{
    if (h->lost || h->renewing || h->releasing || h->extending)
        return 0;
    return topping_up(h) ||
           (h->watchdog && (h->m->opts.max_renewals == 0 ||
                            h->renewals < h->m->opts.max_renewals));
}

static void mark_lost(rlock__hold *h)
{
    if (!h->lost) {
        h->lost = 1;
        h->notify = 1;
    }
}

/* Sends one batch; mu is released meanwhile. t_step: when the step that
 * collected it began. */
static void renew_batch(rlock_client *c, renewal *rn, int n, int64_t t_step)
{
    const char **keys = malloc(sizeof *keys * (size_t)n);
    size_t *key_lens = malloc(sizeof *key_lens * (size_t)n);
    const char **args = malloc(sizeof *args * (size_t)n * 3);
    size_t *arg_lens = malloc(sizeof *arg_lens * (size_t)n * 3);
    redisReply *r = NULL;
    int64_t t_send;
    int i, rc = RLOCK_ENOMEM, replicas = 0, *outcome = NULL;
    long long acks = 0;

    /* One WAIT covers the batch: the most any of its holds asks for. */
    for (i = 0; i < n; i++)
        if (rn[i].replicas > replicas)
            replicas = rn[i].replicas;

    pthread_mutex_unlock(&c->mu);
    t_send = rlock__now_ns();
    if (keys && key_lens && args && arg_lens) {
        for (i = 0; i < n; i++) {
            keys[i] = rn[i].key;
            key_lens[i] = rn[i].key_len;
            args[3 * i] = rn[i].owner;
            arg_lens[3 * i] = strlen(rn[i].owner);
            args[3 * i + 1] = rn[i].token;
            arg_lens[3 * i + 1] = strlen(rn[i].token);
            args[3 * i + 2] = rn[i].lease;
            arg_lens[3 * i + 2] = strlen(rn[i].lease);
        }
        if (c->nnodes) {
            outcome = malloc(sizeof *outcome * (size_t)n);
            rc = outcome ? rlock__rl_renew(c, n, keys, key_lens, args, arg_lens,
                                           outcome)
                         : RLOCK_ENOMEM;
        } else {
            rc = rlock__eval_sync(
                c,
                rn[0].group & GROUP_TOKEN      ? RLOCK__S_TK_RENEW
                : rn[0].group & GROUP_REDISSON ? RLOCK__S_RS_RENEW
                                               : RLOCK__S_RENEW,
                &r, n, keys, key_lens, 3 * n, args, arg_lens, replicas, &acks);
            if (rc == RLOCK_OK && rlock__parse_renew(r, (size_t)n) != RLOCK_OK)
                rc = RLOCK_EPROTO;
        }
    }
    free(keys);
    free(key_lens);
    free(args);
    free(arg_lens);
    pthread_mutex_lock(&c->mu);

    for (i = 0; i < n; i++) {
        rlock__hold *h = rlock__hold_by_serial(c, rn[i].serial);
        /* 1 renewed, 0 gone; Redlock: -1 for no majority either way. */
        int renewed = rc != RLOCK_OK ? -1
                      : outcome      ? outcome[i]
                                     : rlock__renewed(r, (size_t)i);
        if (!h)
            continue; /* unlocked or freed meanwhile */
        h->renewing = 0;
        if (renewed < 0 || (renewed && acks < rn[i].replicas)) {
            /* Failed, or (sync_replicas) renewed on the master only,
             * which a failover could undo, so it does not move the lease
             * end we count with. Try again soon; the lease end decides
             * when to give up. */
            int64_t retry = period_ns(h) / 10;
            if (retry < 10 * RLOCK__NS_PER_MS)
                retry = 10 * RLOCK__NS_PER_MS;
            h->renew_at = rlock__now_ns() + retry;
        } else if (renewed) {
            /* What this request set, not what the hold asks for now. */
            if (!topping_up(h))
                h->renewals++;
            h->cur_lease_ms = rn[i].lease_ms;
            h->valid_until = t_send + rn[i].lease_ms * RLOCK__NS_PER_MS;
            h->valid_until -= c->nnodes
                                  ? rlock__rl_drift_ns(c, rn[i].lease_ms)
                                  : rlock__margin_ns(rn[i].lease_ms);
            /* Every batch of a step is due again at the same moment, a
             * period after the step began (a little early for the later
             * batches), so that the holds renewed together stay together
             * and the next step again sends full batches. */
            h->renew_at = t_step + period_ns(h);
        } else if (!h->releasing) {
            mark_lost(h);
        }
    }
    if (r)
        freeReplyObject(r);
    free(outcome);
    pthread_cond_broadcast(&c->callback_cv); /* extends wait for this */
}

static int by_group(const void *a, const void *b)
{
    return ((const renewal *)a)->group - ((const renewal *)b)->group;
}

static void renew_due(rlock_client *c)
{
    renewal *rn = NULL;
    rlock__hold *h;
    int n = 0, cap = 0, off, mixed = 0;
    int64_t now = rlock__now_ns();

    /* One walk collects every hold that is due or will be within half a
     * period (renewing a little early costs nothing); they go out in
     * script calls of RENEW_BATCH, one after the other. */
    for (h = c->holds; h; h = h->next) {
        if (!may_renew(h) || h->renew_at > now + period_ns(h) / 2)
            continue;
        if (n == cap) {
            renewal *bigger;
            cap = cap ? cap * 2 : 16;
            bigger = realloc(rn, sizeof *rn * (size_t)cap);
            if (!bigger)
                break;
            rn = bigger;
        }
        /* Copy what the request needs: the mutex may be freed while mu is
         * released for the round trip. */
        rn[n].key = malloc(h->m->key_lens[RLOCK__K_LOCK]);
        if (!rn[n].key)
            break;
        memcpy(rn[n].key, h->m->keys[RLOCK__K_LOCK],
               h->m->key_lens[RLOCK__K_LOCK]);
        rn[n].key_len = h->m->key_lens[RLOCK__K_LOCK];
        rn[n].serial = h->serial;
        rn[n].lease_ms = h->lease_ms;
        rn[n].replicas = rlock__sync_replicas(h->m);
        rn[n].group = h->m->opts.layout == RLOCK_LAYOUT_TOKEN ? GROUP_TOKEN
                      : h->m->opts.layout == RLOCK_LAYOUT_REDISSON
                          ? GROUP_REDISSON
                          : 0;
        rlock__owner_of(h->m, h->thread, rn[n].owner);
        snprintf(rn[n].token, sizeof rn[n].token, "%" PRIu64, h->token);
        snprintf(rn[n].lease, sizeof rn[n].lease, "%" PRId64, h->lease_ms);
        h->renewing = 1;
        n++;
    }
    /* The bound computed before the first call stays right for the others:
     * renewals only move lease ends later. On a cluster a script's keys
     * must share a slot: one batch per slot. */
    for (off = 0; off < n; off++) {
        if (c->cluster)
            rn[off].group |= rlock__key_slot(rn[off].key, rn[off].key_len);
        mixed |= rn[off].group != rn[0].group;
    }
    if (mixed)
        qsort(rn, (size_t)n, sizeof *rn, by_group);
    for (off = 0; off < n;) {
        int len = 1;
        while (off + len < n && len < RENEW_BATCH &&
               rn[off + len].group == rn[off].group)
            len++;
        renew_batch(c, rn + off, len, now);
        off += len;
    }
    while (n-- > 0)
        free(rn[n].key);
    free(rn);
}

/* Calls pending on_lost callbacks one at a time, mu released around each;
 * rlock_mutex_free waits for a callback on its mutex to finish. */
static void notify_lost(rlock_client *c)
{
    uint64_t resume = 0; /* serial of the hold to go on from, 0: the head */
    int called = 0;

    /* One pass over the holds, not one per loss: 100,000 holds lost at
     * once must not cost 100,000 walks. mu is released around each
     * callback, so the pass goes on from the next hold by its serial (it
     * may have gone meanwhile: then from the head, which sees everything
     * again). */
    for (;;) {
        rlock__hold *h = resume ? rlock__hold_by_serial(c, resume) : NULL;
        rlock__hold *start = h ? h : c->holds;
        rlock_mutex *m;

        for (h = start; h && (!h->notify || !h->m->opts.on_lost); h = h->next)
            h->notify = 0; /* nothing to call for it */
        if (!h) {
            if (start != c->holds) {
                resume = 0; /* once more from the head, for what came
                               meanwhile */
                continue;
            }
            /* The callbacks ran unbounded; bound what follows again. */
            if (called)
                rlock__bound_background(c);
            return;
        }
        h->notify = 0;
        m = h->m;
        resume = h->next ? h->next->serial : 0;
        c->in_callback = m;
        pthread_mutex_unlock(&c->mu);
        /* The callback is the application's code: it may fork, and the
         * calls it makes get the client's own timeouts. */
        rlock__busy_end();
        rlock__limit_round_trips(0);
        m->opts.on_lost(m, m->opts.on_lost_arg);
        rlock__busy_begin();
        pthread_mutex_lock(&c->mu);
        called = 1;
        c->in_callback = NULL;
        pthread_cond_broadcast(&c->callback_cv);
    }
}

void rlock__bound_background(rlock_client *c)
{
    const rlock__hold *h;
    int64_t end = rlock__now_ns() + c->shortest_lease_ms * RLOCK__NS_PER_MS;

    /* The earliest lease end of the holds there are; and for holds taken
     * while the round trip is under way (whose lease ends no sooner than
     * the shortest lease after they were taken), the shortest lease. */
    for (h = c->holds; h; h = h->next)
        if (!h->lost && !h->releasing && h->valid_until < end)
            end = h->valid_until;
    rlock__limit_round_trips(end);
}

/* Holds whose lease ended unrenewed are lost. */
static void mark_expired(rlock_client *c)
{
    rlock__hold *h;
    int64_t now = rlock__now_ns();

    for (h = c->holds; h; h = h->next)
        if (!h->lost && !h->releasing && !h->renewing && h->valid_until <= now)
            mark_lost(h);
}

void rlock__watchdog_step(rlock_client *c, int64_t *next)
{
    rlock__hold *h;

    mark_expired(c);
    rlock__bound_background(c);
    renew_due(c);
    mark_expired(c);
    notify_lost(c);
    for (h = c->holds; h; h = h->next) {
        if (h->lost || h->releasing)
            continue;
        if (h->valid_until < *next)
            *next = h->valid_until;
        if (may_renew(h) && h->renew_at < *next)
            *next = h->renew_at;
    }
}
