/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The subscriber connection: one per client, shared by every waiting
 * thread and every lock name of the client (a connection per waiter would
 * multiply connections under load, the failure Redisson users report as
 * "Unable to acquire subscription").
 *
 * Each client listens on its own channel per lock name: the lock's wake
 * channel followed by ":<client id>". The releasing script publishes only
 * to the channel of the client whose waiter is first in the queue, so a
 * release wakes one process, not every process waiting for the lock.
 *
 * A channel is subscribed the first time a mutex of that name has to wait
 * and stays subscribed while that mutex exists, so a busy waiter pays for
 * SUBSCRIBE once, not on every wait. Messages name the waiter to wake (its
 * owner id); the background thread wakes just that thread.
 *
 * When the connection breaks, every waiter is woken at once: it retries,
 * and waits with jittered backoff until the connection and its
 * subscriptions are back, so a message lost in the outage costs one retry.
 *
 * The Redisson layout listens where Redisson's waiters listen: one channel
 * per lock, "redisson_lock__channel:{name}", shared by every client, with
 * "0" published at each final release (and "1", which wakes everyone, by
 * Redisson's read-write lock). As Redisson does, a message wakes one
 * waiting thread per client: there is no queue, so the woken thread
 * retries, and a thread that leaves without the lock wakes the next one
 * (rlock__wake_one) so that the message is not lost with it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "reply.h"

static rlock__sub *sub_find(rlock_client *c, const char *ch, size_t len)
{
    rlock__sub *s;

    for (s = c->subs; s; s = s->next)
        if (s->channel_len == len && memcmp(s->channel, ch, len) == 0)
            return s;
    return NULL;
}

static int redisson(const rlock_mutex *m)
{
    return m->opts.layout == RLOCK_LAYOUT_REDISSON;
}

/* Is ch this client's channel for m's lock? */
static int channel_of(const rlock_client *c, const rlock_mutex *m,
                      const char *ch, size_t len)
{
    if (redisson(m))
        return len == m->channel_len && memcmp(ch, m->channel, len) == 0;
    return len == m->channel_len + 1 + RLOCK__ID_LEN &&
           memcmp(ch, m->channel, m->channel_len) == 0 &&
           ch[m->channel_len] == ':' &&
           memcmp(ch + m->channel_len + 1, c->id, RLOCK__ID_LEN) == 0;
}

/* Wakes the waiters of one channel, or all of them (ch == NULL). */
static void wake_waiters(rlock_client *c, const char *ch, size_t len)
{
    rlock__waiter *w;

    for (w = c->waiters; w; w = w->next) {
        if (ch && !channel_of(c, w->m, ch, len))
            continue;
        w->woken = 1;
        pthread_cond_signal(&w->cv);
    }
}

/* m's lock's channel for this client, in a new buffer. */
static char *make_channel(const rlock_client *c, const rlock_mutex *m,
                          size_t *len)
{
    char *ch = malloc(m->channel_len + 1 + RLOCK__ID_LEN);

    if (ch && redisson(m)) {
        memcpy(ch, m->channel, m->channel_len);
        *len = m->channel_len;
    } else if (ch) {
        memcpy(ch, m->channel, m->channel_len);
        ch[m->channel_len] = ':';
        memcpy(ch + m->channel_len + 1, c->id, RLOCK__ID_LEN);
        *len = m->channel_len + 1 + RLOCK__ID_LEN;
    }
    return ch;
}

static rlock__sub *sub_of(rlock_client *c, const rlock_mutex *m)
{
    rlock__sub *s;

    for (s = c->subs; s; s = s->next)
        if (channel_of(c, m, s->channel, s->channel_len))
            return s;
    return NULL;
}

int rlock__sub_want(rlock_client *c, rlock_mutex *m)
{
    rlock__sub *s = sub_of(c, m);
    int rc;

    if (m->subscribed && m->sub_gen != c->fork_gen)
        m->subscribed = 0; /* taken in the parent of a fork: not ours */
    if (!m->subscribed) {
        if (!s) {
            s = calloc(1, sizeof *s);
            if (!s || !(s->channel = make_channel(c, m, &s->channel_len))) {
                free(s);
                return rlock__fail(c, RLOCK_ENOMEM, "out of memory");
            }
            s->state = RLOCK__SUB_WANTED;
            s->next = c->subs;
            c->subs = s;
        }
        s->users++;
        m->subscribed = 1;
        m->sub_gen = c->fork_gen;
    }
    if ((rc = rlock__bg_ensure(c)) != RLOCK_OK)
        return rc;
    if (s->state == RLOCK__SUB_WANTED)
        rlock__bg_kick(c);
    return s->state == RLOCK__SUB_ACTIVE && c->sub_up;
}

void rlock__sub_release(rlock_client *c, rlock_mutex *m)
{
    rlock__sub *s = sub_of(c, m);

    if (m->sub_gen != c->fork_gen)
        s = NULL;
    m->subscribed = 0;
    if (s && --s->users == 0)
        rlock__bg_kick(c);
}

static void sub_remove(rlock_client *c, rlock__sub *s)
{
    rlock__sub **p;

    for (p = &c->subs; *p; p = &(*p)->next) {
        if (*p == s) {
            *p = s->next;
            free(s->channel);
            free(s);
            return;
        }
    }
}

/* Forgets the connection; every subscription must be sent again. */
static void sub_drop(rlock_client *c)
{
    rlock__sub *s, *next;

    if (c->sub_ctx) {
        rlock__conn_close(c->sub_ctx);
        c->sub_ctx = NULL;
    }
    c->sub_up = 0;
    for (s = c->subs; s; s = next) {
        next = s->next;
        if (s->users == 0)
            sub_remove(c, s);
        else
            s->state = RLOCK__SUB_WANTED;
    }
    wake_waiters(c, NULL, 0);
}

static void drain(rlock_client *c, rlock__conn *ctx);

void rlock__sub_step(rlock_client *c, int64_t *next)
{
    rlock__sub *s, *nexts;
    int pending = 0;

    if (!c->subs) {
        /* Nobody waits for anything: keep no idle connection open. */
        if (c->sub_ctx)
            sub_drop(c);
        return;
    }
    if (!c->sub_ctx) {
        rlock__conn *ctx = NULL;
        int64_t now = rlock__now_ns();
        int rc;

        if (now < c->sub_retry_at) {
            if (c->sub_retry_at < *next)
                *next = c->sub_retry_at;
            return;
        }
        pthread_mutex_unlock(&c->mu);
        rc = rlock__connect(c, &ctx);
        pthread_mutex_lock(&c->mu);
        if (rc != RLOCK_OK) {
            c->sub_retry_at = rlock__now_ns() +
                           rlock__jitter(c->opts.backoff_min_ms,
                                         c->opts.backoff_max_ms) *
                               RLOCK__NS_PER_MS;
            if (c->sub_retry_at < *next)
                *next = c->sub_retry_at;
            return;
        }
        rlock__conn_set_push(ctx, 1);
        c->sub_ctx = ctx;
        c->sub_up = 1;
        for (s = c->subs; s; s = s->next)
            s->state = RLOCK__SUB_WANTED;
    }
    for (s = c->subs; s; s = nexts) {
        const char *argv[2];
        size_t lens[2];

        nexts = s->next;
        if (s->users == 0) {
            if (s->state != RLOCK__SUB_WANTED) {
                argv[0] = "UNSUBSCRIBE";
                lens[0] = 11;
                argv[1] = s->channel;
                lens[1] = s->channel_len;
                rlock__conn_append(c->sub_ctx, 2, argv, lens);
                pending = 1;
            }
            sub_remove(c, s);
        } else if (s->state == RLOCK__SUB_WANTED) {
            argv[0] = "SUBSCRIBE";
            lens[0] = 9;
            argv[1] = s->channel;
            lens[1] = s->channel_len;
            rlock__conn_append(c->sub_ctx, 2, argv, lens);
            s->state = RLOCK__SUB_SENT;
            pending = 1;
        }
    }
    /* Written at once as far as the socket takes it, never waiting: what
     * is left goes out when the background thread's poll finds the socket
     * writable (rlock__sub_events). The same call reads what has arrived
     * already, and a confirmation read here leaves nothing on the socket
     * for the poll to see: it is handled now (drain), or it would wait in
     * the buffer for the next message while waiters, never told they are
     * subscribed, polled with backoff (seen on a loaded machine). */
    if (pending && rlock__conn_io(c->sub_ctx, 0) != RLOCK_OK)
        sub_drop(c);
    else if (pending)
        drain(c, c->sub_ctx);
}

/* The longest-waiting thread of the Redisson channel ch that is not
 * woken already (the list is newest first), or NULL. */
static rlock__waiter *first_asleep(rlock_client *c, const char *ch, size_t len)
{
    rlock__waiter *w, *found = NULL;

    for (w = c->waiters; w; w = w->next)
        if (redisson(w->m) && !w->woken && channel_of(c, w->m, ch, len))
            found = w;
    return found;
}

void rlock__wake_one(rlock_client *c, const rlock_mutex *m)
{
    rlock__waiter *w = first_asleep(c, m->channel, m->channel_len);

    if (w) {
        w->woken = 1;
        pthread_cond_signal(&w->cv);
    }
}

/* A message on a Redisson channel: "1" wakes every waiter of the lock,
 * anything else ("0") one. A waiter already woken will try again after
 * this release anyway, so it does not count. */
static void redisson_message(rlock_client *c, const rlock__pubsub *p)
{
    rlock__waiter *w;

    if (p->who_len == 1 && p->who[0] == '1') {
        wake_waiters(c, p->channel, p->channel_len);
    } else if ((w = first_asleep(c, p->channel, p->channel_len)) != NULL) {
        w->woken = 1;
        pthread_cond_signal(&w->cv);
    }
}

static void handle(rlock_client *c, const redisReply *r)
{
    rlock__pubsub p;
    rlock__waiter *w;
    rlock__sub *s;

    if (rlock__parse_pubsub(r, &p) != RLOCK_OK)
        return;
    if (p.kind == RLOCK__PS_MESSAGE) {
        /* Redisson's channels carry no owner: no waiter of rlock's own
         * layout matches their messages below. */
        redisson_message(c, &p);
        /* "<owner>" asks a waiter to try again; a grant tells it the lock
         * was handed to it. */
        for (w = c->waiters; w; w = w->next) {
            if (redisson(w->m) || w->owner_len != p.who_len ||
                memcmp(w->owner, p.who, p.who_len) != 0 ||
                !channel_of(c, w->m, p.channel, p.channel_len))
                continue;
            /* A grant for another acquisition of this thread (one that
             * gave up) is not this wait's to take; but the lock may be
             * this owner's now, so try again at once: the attempt claims
             * it with a lease of its own. */
            if (p.grant && w->nonce == p.nonce) {
                w->granted = 1;
                w->grant_token = p.token;
                w->grant_ms = p.lease_ms;
            }
            w->woken = 1;
            pthread_cond_signal(&w->cv);
        }
    } else if (p.kind == RLOCK__PS_SUBSCRIBE) {
        s = sub_find(c, p.channel, p.channel_len);
        if (s && s->state == RLOCK__SUB_SENT) {
            s->state = RLOCK__SUB_ACTIVE;
            /* Waiters that were waiting for the subscription retry now:
             * a release before this point sent no message they heard. */
            wake_waiters(c, p.channel, p.channel_len);
        }
    }
}

/* Handles every reply the connection has read (mu held). */
static void drain(rlock_client *c, rlock__conn *ctx)
{
    redisReply *r;

    for (;;) {
        r = NULL;
        if (!rlock__conn_take(ctx, &r))
            break;
        handle(c, r);
        freeReplyObject(r);
    }
}

void rlock__sub_read(rlock_client *c, short revents)
{
    rlock__conn *ctx;
    int failed;

    /* Only this thread touches sub_ctx after creating it. */
    pthread_mutex_lock(&c->mu);
    ctx = c->sub_ctx;
    pthread_mutex_unlock(&c->mu);
    if (!ctx)
        return;
    failed = rlock__conn_io(ctx, revents) != RLOCK_OK;
    pthread_mutex_lock(&c->mu);
    drain(c, ctx);
    if (failed) {
        sub_drop(c);
        c->sub_retry_at = 0;
    }
    pthread_mutex_unlock(&c->mu);
}

short rlock__sub_events(rlock_client *c, int *fd)
{
    if (!c->sub_ctx)
        return 0;
    *fd = rlock__conn_fd(c->sub_ctx);
    return rlock__conn_events(c->sub_ctx);
}

void rlock__sub_shutdown(rlock_client *c)
{
    if (c->sub_ctx) {
        rlock__conn_close(c->sub_ctx);
        c->sub_ctx = NULL;
    }
    c->sub_up = 0;
}
