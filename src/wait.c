/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Waiting for a lock.
 *
 * A waiter joins the lock's queue in Redis with its first attempt (arrival
 * order is decided by Redis, not by who retries fastest) and then sleeps
 * on its own condition variable until one of:
 *  - the background thread saw a grant naming this waiter and this wait's
 *    nonce: the releasing script hands the lock to the first live waiter
 *    and publishes the grant on that waiter's client's channel. The waiter
 *    then holds the lock without another round trip. Its lease is counted
 *    from before its first attempt of this wait, which was sent before the
 *    grant could happen, so the count is never later than Redis's;
 *  - the current lease or the head waiter's place runs out (the hint the
 *    acquire script returned): a holder that crashed, or a message that
 *    was lost, never strands a waiter longer than that;
 *  - a third of waiter_ttl_ms passed: the waiter must refresh its place in
 *    the queue or it will be dropped as dead;
 *  - the deadline of timedlock.
 * Then it tries again; the acquire script re-checks everything, so a
 * spurious wake costs one round trip and is never wrong.
 *
 * No missed wake-ups: the waiter is registered (and its "woken" flag
 * cleared) before each attempt, and the subscription to the lock's channel
 * is confirmed by Redis before the attempt whose failure the waiter sleeps
 * on. A release that happens after that attempt publishes a message that
 * reaches the background thread, which sets the flag even if the waiter
 * has not started sleeping yet.
 *
 * Without pub/sub (use_pubsub = 0, or while the subscriber connection is
 * down) the sleep is a random delay in [backoff_min_ms, backoff_max_ms],
 * so that many waiters do not retry in step.
 *
 * The Redisson layout waits the same way without the queue: Redisson has
 * none, and its releases publish on a channel of the lock, not to a
 * waiter. A waiter joins nothing, is woken by the release message (from
 * rlock or from Redisson) or by the end of the holder's lease, and tries
 * again; whoever comes first takes the lock. A waiter that leaves without
 * the lock hands a wake-up on to the next waiting thread of its client
 * (subscriber.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

static void register_waiter(rlock_client *c, rlock__waiter *w,
                            const rlock_mutex *m, uint64_t nonce)
{
    pthread_condattr_t ca;

    memset(w, 0, sizeof *w);
    w->m = m;
    w->owner_len = rlock__owner(c, rlock__thread_number(), w->owner);
    w->nonce = nonce;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_lock(&c->mu);
    w->next = c->waiters;
    c->waiters = w;
    pthread_mutex_unlock(&c->mu);
}

static void unregister_waiter(rlock_client *c, rlock__waiter *w)
{
    rlock__waiter **p;

    pthread_mutex_lock(&c->mu);
    for (p = &c->waiters; *p; p = &(*p)->next) {
        if (*p == w) {
            *p = w->next;
            break;
        }
    }
    pthread_mutex_unlock(&c->mu);
    pthread_cond_destroy(&w->cv);
}

/*
 * Takes a grant that arrived for this wait (mu held). Returns 1 if the
 * calling thread now holds the lock. A grant whose lease would already
 * have ended by our count is not taken: the next attempt claims it afresh
 * with a new lease if it is still ours.
 */
static int accept_grant(rlock_mutex *m, rlock__waiter *w, int64_t t_first)
{
    if (!w->granted)
        return 0;
    w->granted = 0;
    if (rlock__now_ns() >= t_first + w->grant_ms * RLOCK__NS_PER_MS)
        return 0;
    return rlock__hold_record(m, rlock__thread_number(), w->grant_token, 1,
                              t_first, w->grant_ms) == RLOCK_OK;
}

static struct timespec ns_to_ts(int64_t ns)
{
    struct timespec ts;

    ts.tv_sec = (time_t)(ns / 1000000000);
    ts.tv_nsec = (long)(ns % 1000000000);
    return ts;
}

/* Sleeps until w is woken or until (monotonic ns); mu held. */
static void sleep_until(rlock_client *c, rlock__waiter *w, int64_t until)
{
    struct timespec ts = ns_to_ts(until);

    while (!w->woken && rlock__now_ns() < until)
        pthread_cond_timedwait(&w->cv, &c->mu, &ts);
}

/*
 * Redlock and the token layout: no queue, no notifications (a release on
 * one Redlock node says nothing about the others; the token layout's
 * peers publish nothing), so a waiter tries again after a random delay in
 * [backoff_min_ms, backoff_max_ms], at most until its deadline. Only a
 * busy lock is waited for; other failures are reported.
 */
static int wait_retrying(rlock_mutex *m, int64_t deadline_ns, int forever)
{
    rlock_client *c = m->c;
    rlock__waiter w;
    unsigned cancel_gen;
    uint64_t unused = 0;
    int rc;

    register_waiter(c, &w, m, 0);
    pthread_mutex_lock(&c->mu);
    cancel_gen = c->cancel_gen;
    pthread_mutex_unlock(&c->mu);
    for (;;) {
        int64_t now, until;

        /* Each attempt is an exchange of its own, with its own
         * deadline; the wait's deadline bounds the waiting between. */
        rlock__call_begin(c);
        rc = rlock__try_acquire(m, 't', &unused, NULL);
        if (rc != RLOCK_EBUSY)
            break;
        now = rlock__now_ns();
        if (!forever && now >= deadline_ns) {
            rc = rlock__fail(c, RLOCK_ETIMEDOUT,
                             "lock not obtained within the wait");
            break;
        }
        until = now + rlock__jitter(c->opts.backoff_min_ms,
                                    c->opts.backoff_max_ms) *
                          RLOCK__NS_PER_MS;
        if (!forever && until > deadline_ns)
            until = deadline_ns;
        pthread_mutex_lock(&c->mu);
        sleep_until(c, &w, until);
        w.woken = 0;
        if (c->cancel_gen != cancel_gen) {
            pthread_mutex_unlock(&c->mu);
            rc = rlock__fail(c, RLOCK_ECANCELED, "the wait was cancelled");
            break;
        }
        pthread_mutex_unlock(&c->mu);
    }
    unregister_waiter(c, &w);
    return rc;
}

int rlock__wait_acquire(rlock_mutex *m, int64_t deadline_ns, int forever)
{
    rlock_client *c = m->c;
    rlock__waiter w;
    int64_t keepalive_ms = c->opts.waiter_ttl_ms / 3;
    int64_t t_first;
    uint64_t nonce; /* this acquisition's; w.nonce is the subscriber's copy */
    unsigned cancel_gen;
    int rc, attempted = 0, waited_for_sub = 0, gave_up = 0, dropped = 0;
    int granted = 0; /* handed over by a release, not taken by an attempt */
    int queued = m->opts.layout == RLOCK_LAYOUT_NATIVE; /* else Redisson's */

    if (c->nnodes || m->opts.layout == RLOCK_LAYOUT_TOKEN)
        return wait_retrying(m, deadline_ns, forever);
    nonce = rlock__new_nonce(c);
    t_first = rlock__now_ns();
    register_waiter(c, &w, m, nonce);
    pthread_mutex_lock(&c->mu);
    cancel_gen = c->cancel_gen;
    pthread_mutex_unlock(&c->mu);
    for (;;) {
        int64_t hint_ms = -1, sleep_ms, now, until;
        int subscribed = 0;
        struct timespec ts;

        pthread_mutex_lock(&c->mu);
        if (accept_grant(m, &w, t_first)) {
            pthread_mutex_unlock(&c->mu);
            rc = RLOCK_OK;
            granted = 1;
            break;
        }
        if (c->cancel_gen != cancel_gen) {
            pthread_mutex_unlock(&c->mu);
            rc = rlock__fail(c, RLOCK_ECANCELED, "the wait was cancelled");
            break;
        }
        w.woken = 0;
        /* The first attempt needs no subscription unless the mutex has one
         * already: an uncontended lock costs one round trip and no
         * subscriber connection. */
        if (c->opts.use_pubsub && (attempted || m->subscribed)) {
            rc = rlock__sub_want(c, m);
            if (rc < 0) {
                pthread_mutex_unlock(&c->mu);
                break;
            }
            subscribed = rc;
            if (!subscribed && attempted && !waited_for_sub) {
                /* First contention on this mutex: let Redis confirm the
                 * subscription before the attempt we will sleep on. Not
                 * for long: without pub/sub we back off instead. */
                int64_t lim = rlock__now_ns() +
                              c->opts.backoff_max_ms * RLOCK__NS_PER_MS;
                if (!forever && lim > deadline_ns)
                    lim = deadline_ns;
                ts = ns_to_ts(lim);
                waited_for_sub = 1;
                while (!w.woken && rlock__now_ns() < lim)
                    pthread_cond_timedwait(&w.cv, &c->mu, &ts);
                subscribed = rlock__sub_want(c, m) > 0;
                w.woken = 0;
            }
        }
        pthread_mutex_unlock(&c->mu);

        rlock__call_begin(c);
        rc = rlock__try_acquire(m, 'w', &nonce, &hint_ms);
        attempted = 1;
        if (nonce != w.nonce) {
            /* The attempt was undone and its nonce spent: a grant under the
             * old one is no longer ours to take, and the next attempts
             * (which refresh our place) carry the new one. */
            pthread_mutex_lock(&c->mu);
            w.nonce = nonce;
            w.granted = 0;
            t_first = rlock__now_ns(); /* before the next attempt */
            pthread_mutex_unlock(&c->mu);
        }
        /* A connection that dropped under an attempt (the server closed
         * it, a proxy restarted) is replaced and the wait goes on, within
         * the deadline; the attempt itself is being undone. Twice in a row
         * is a server that is going away: tell the caller. A timeout is
         * not retried: the caller asked for a bound. */
        if (rc == RLOCK_EIO && ++dropped < 2 &&
            (forever || rlock__now_ns() < deadline_ns))
            continue;
        if (rc != RLOCK_EBUSY)
            break;
        dropped = 0;

        now = rlock__now_ns();
        if (!forever && now >= deadline_ns) {
            pthread_mutex_lock(&c->mu);
            rc = accept_grant(m, &w, t_first);
            pthread_mutex_unlock(&c->mu);
            if (rc) {
                rc = RLOCK_OK;
                granted = 1;
                break;
            }
            rc = RLOCK_ETIMEDOUT;
            gave_up = 1;
            break;
        }
        if (c->opts.use_pubsub && !subscribed && !waited_for_sub)
            continue; /* subscribe now, then try again before sleeping */
        if (subscribed) {
            /* Sleep until told; wake on our own when the lease or the
             * head's place ends, or to refresh our place. */
            sleep_ms = hint_ms >= 0 ? hint_ms + 1 : keepalive_ms;
        } else {
            sleep_ms = rlock__jitter(c->opts.backoff_min_ms,
                                     c->opts.backoff_max_ms);
            if (hint_ms >= 0 && hint_ms + 1 < sleep_ms)
                sleep_ms = hint_ms + 1;
        }
        if (sleep_ms > keepalive_ms)
            sleep_ms = keepalive_ms;
        until = now + sleep_ms * RLOCK__NS_PER_MS;
        if (!forever && until > deadline_ns)
            until = deadline_ns;
        pthread_mutex_lock(&c->mu);
        sleep_until(c, &w, until);
        pthread_mutex_unlock(&c->mu);
    }
    unregister_waiter(c, &w);
    if (granted)
        return rlock__sync_new_hold(m);
    if (!queued) {
        /* Nothing to leave in Redis; a release message this thread may
         * have taken goes to the next waiter. */
        if (rc != RLOCK_OK) {
            pthread_mutex_lock(&c->mu);
            rlock__wake_one(c, m);
            pthread_mutex_unlock(&c->mu);
        }
        if (gave_up)
            rlock__fail(c, rc, "lock not obtained within the wait");
        return rc;
    }
    if (gave_up || rc == RLOCK_ECANCELED) {
        /* The undo gets a deadline of its own; if it fails, the
         * background thread sends it later. */
        rlock__call_begin(c);
        /* Leave no trace: a waiter that gives up must not hold up those
         * queued behind it, and when this call returns its place is gone.
         * Keep the detail of the timeout, not of the cancel. */
        char owner[RLOCK__OWNER_MAX];
        char nonce_s[24];
        rlock__owner(c, rlock__thread_number(), owner);
        snprintf(nonce_s, sizeof nonce_s, "%llu", (unsigned long long)nonce);
        /* With the nonce: a grant that raced with giving up is returned. */
        if (rlock__cancel_now(c, m->keys, m->key_lens, m->channel,
                              m->channel_len, owner, nonce_s) != RLOCK_OK)
            rlock__defer_cancel(m, nonce);
        rlock__fail(c, rc, gave_up ? "lock not obtained within the wait"
                                   : "the wait was cancelled");
    } else if (rc != RLOCK_OK && rc != RLOCK_EINVAL &&
               !rlock__outcome_unknown(rc)) {
        /* (An attempt whose reply never came queued its own undo; a
         * server that did not answer is RLOCK_ENOREPLY, not a deadline.) */
        rlock__defer_cancel(m, nonce);
    }
    return rc;
}
