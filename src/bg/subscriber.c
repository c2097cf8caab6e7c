/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The subscriber connection: one per client, shared by every waiting
 * owner and every lock name of the client (a connection per waiter would
 * multiply connections under load, the failure Redisson users report as
 * "Unable to acquire subscription").
 *
 * The layout names the channel (rlock's own: one per lock and client, so
 * a release wakes one process; Redisson's: one per lock) and says what a
 * message on it wakes. A channel is subscribed the first time a mutex of
 * that name has to wait and stays subscribed while that mutex exists, so
 * a busy waiter pays for SUBSCRIBE once, not on every wait.
 *
 * When the connection breaks, every waiter is woken at once: it retries,
 * and waits with jittered backoff until the connection and its
 * subscriptions are back, so a message lost in the outage costs one retry.
 * The same happens when the backend points the client at another server
 * (c->moves, a Sentinel failover): the connection may still be open to the
 * old master, which stalled rather than died, and hears nothing of the
 * releases on the new one; it is replaced, and every channel subscribed
 * again there.
 *
 * Who reads it: the background thread, or a waiter about to sleep for a
 * message (rlock__sub_read). Read by the background thread, a message for
 * a waiter wakes two threads in turn, the background's and then the
 * waiter's, and the second wake-up is most of a hand-over's cost on a busy
 * machine (docs/performance.md). So a waiter that finds the connection
 * idle, with nobody reading it and nothing to send, waits on it itself;
 * the background thread leaves it alone meanwhile, and gets it back when
 * it has something to send (it rings the waiter) or when the waiter leaves
 * and others still wait.
 */
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "bg/bg.h"
#include "core/reply.h"
#include "layout/layout.h"
#include "util/clock.h"

enum { WANTED, SENT, ACTIVE };

struct rlock__sub {
    rlock__sub *next;
    char *channel;
    size_t channel_len;
    const rlock__layout *layout;
    int users; /* mutexes that want it */
    int state;
};

static rlock__sub *sub_find(rlock_client *c, const char *ch, size_t len)
{
    rlock__sub *s;

    for (s = c->bg->subs; s; s = s->next)
        if (s->channel_len == len && memcmp(s->channel, ch, len) == 0)
            return s;
    return NULL;
}

static rlock__sub *sub_of(rlock_client *c, const rlock_mutex *m)
{
    rlock__sub *s;

    for (s = c->bg->subs; s; s = s->next)
        if (s->layout == m->layout &&
            m->layout->is_channel(c, m, s->channel, s->channel_len))
            return s;
    return NULL;
}

/* Whether the connection was made to the server the backend names now
 * (no move since). */
static int sub_current(const rlock_client *c)
{
    return c->bg->sub_moves == __atomic_load_n(&c->moves, __ATOMIC_ACQUIRE);
}

/* Wakes the waiters of one channel, or all of them (ch == NULL). */
static void wake_waiters(rlock_client *c, const char *ch, size_t len)
{
    rlock__waiter *w;

    for (w = c->waiters.list; w; w = w->next) {
        const rlock__layout *lay = w->m->layout;
        if (ch && (!lay->wakes || !lay->is_channel(c, w->m, ch, len)))
            continue;
        rlock__waiter_wake(w);
    }
}

int rlock__sub_want(rlock_client *c, rlock_mutex *m, rlock__call *call)
{
    rlock__sub *s = sub_of(c, m);
    int rc;

    if (m->subscribed && m->sub_gen != c->fork_gen)
        m->subscribed = 0; /* taken in the parent of a fork: not ours */
    if (!m->subscribed) {
        if (!s) {
            s = calloc(1, sizeof *s);
            if (!s ||
                !(s->channel = m->layout->sub_channel(c, m, &s->channel_len))) {
                free(s);
                return rlock__fail(call, RLOCK_ENOMEM, "out of memory");
            }
            s->layout = m->layout;
            s->state = WANTED;
            s->next = c->bg->subs;
            c->bg->subs = s;
        }
        s->users++;
        m->subscribed = 1;
        m->sub_gen = c->fork_gen;
    }
    if ((rc = rlock__bg_ensure(c, call)) != RLOCK_OK)
        return rc;
    if (s->state == WANTED || (c->bg->sub_conn && !sub_current(c))) {
        rlock__bg_kick(c);
        return 0;
    }
    return s->state == ACTIVE && c->bg->sub_up;
}

void rlock__sub_release(rlock_client *c, rlock_mutex *m)
{
    rlock__sub *s = m->sub_gen == c->fork_gen ? sub_of(c, m) : NULL;

    m->subscribed = 0;
    if (s && --s->users == 0)
        rlock__bg_kick(c);
}

static void sub_remove(rlock_client *c, rlock__sub *s)
{
    rlock__sub **p;

    for (p = &c->bg->subs; *p; p = &(*p)->next) {
        if (*p == s) {
            *p = s->next;
            free(s->channel);
            free(s);
            return;
        }
    }
}

/* Wakes the waiter reading the connection, if any (mu held). */
static void ring(struct rlock__bg *bg)
{
    if (bg->sub_reader && bg->ring[1] >= 0) {
        ssize_t n = write(bg->ring[1], "", 1);
        (void)n; /* a full pipe is a ring already */
    }
}

static void ring_close(struct rlock__bg *bg)
{
    if (bg->ring[0] >= 0) {
        close(bg->ring[0]);
        close(bg->ring[1]);
        bg->ring[0] = bg->ring[1] = -1;
    }
}

/* Closes the connection, unwatched first. */
static void sub_close(rlock_client *c)
{
    struct rlock__bg *bg = c->bg;

    if (bg->driver->unwatch)
        bg->driver->unwatch(c, rlock__conn_fd(bg->sub_conn));
    rlock__conn_close(bg->sub_conn);
    bg->sub_conn = NULL;
}

/* Forgets the connection; every subscription must be sent again. */
static void sub_drop(rlock_client *c)
{
    struct rlock__bg *bg = c->bg;
    rlock__sub *s, *next;

    if (bg->sub_conn)
        sub_close(c);
    bg->sub_up = 0;
    for (s = bg->subs; s; s = next) {
        next = s->next;
        if (s->users == 0)
            sub_remove(c, s);
        else
            s->state = WANTED;
    }
    wake_waiters(c, NULL, 0);
}

/* The subscriber connection failed (code, detail why): counted; the
 * first failure since it was made is reported. */
static void sub_failed_report(rlock_client *c, int code, const char *why)
{
    char msg[RLOCK__ERR_MAX + 32];

    if (c->bg->sub_broken) {
        rlock__obs_count(c->obs, RLOCK__ST_CONN_ERRORS);
        return;
    }
    c->bg->sub_broken = 1;
    snprintf(msg, sizeof msg, "subscriber connection: %s", why);
    rlock__obs_node(c->obs, RLOCK_EV_CONN_ERROR, code, c->where, msg);
}

/* The connection broke: reported, and forgotten. */
static void sub_failed(rlock_client *c)
{
    const rlock__neterr *e = rlock__conn_error(c->bg->sub_conn);

    sub_failed_report(c, e->code ? e->code : RLOCK_EIO,
                      e->msg[0] ? e->msg : "lost");
    sub_drop(c);
}

static void handle(rlock_client *c, const redisReply *r)
{
    rlock__pubsub p;
    rlock__sub *s;

    if (rlock__parse_pubsub(r, &p) != RLOCK_OK)
        return;
    s = sub_find(c, p.channel, p.channel_len);
    if (!s)
        return;
    if (p.kind == RLOCK__PS_MESSAGE) {
        s->layout->message(c, &p);
    } else if (p.kind == RLOCK__PS_SUBSCRIBE && s->state == SENT) {
        s->state = ACTIVE;
        /* Waiters that were waiting for the subscription retry now: a
         * release before this point sent no message they heard. */
        wake_waiters(c, p.channel, p.channel_len);
    }
}

/* Handles every reply the connection has read (mu held). */
static void drain(rlock_client *c, rlock__conn *conn)
{
    redisReply *r;

    for (;;) {
        r = NULL;
        if (!rlock__conn_take(conn, &r))
            break;
        handle(c, r);
        freeReplyObject(r);
    }
}

/* Whether sub_step has something to do on the connection: close it (no
 * channel wanted, or made before a move), or send a SUBSCRIBE or
 * UNSUBSCRIBE. */
static int conn_work(const rlock_client *c)
{
    const struct rlock__bg *bg = c->bg;
    const rlock__sub *s;

    if (bg->sub_conn && !sub_current(c))
        return 1;
    if (!bg->subs)
        return bg->sub_conn != NULL;
    for (s = bg->subs; s; s = s->next)
        if ((s->users == 0) != (s->state == WANTED))
            return 1;
    return 0;
}

int rlock__sub_need(rlock_client *c, int64_t *next, rlock__call *call)
{
    struct rlock__bg *bg = c->bg;

    if (bg->sub_reader) {
        /* A waiter reads the connection: it hands it back when rung, and
         * wakes the driver then. */
        if (conn_work(c))
            ring(bg);
        return RLOCK__SUB_NOTHING;
    }
    if (bg->sub_connecting)
        return RLOCK__SUB_NOTHING; /* the driver is making it */
    if (bg->sub_conn && !sub_current(c)) {
        /* Made to a server that is no longer the master: the waiters
         * retry, and subscribe again on a new connection. */
        sub_drop(c);
        bg->sub_retry_at = 0;
    }
    if (!bg->subs) {
        /* Nobody waits for anything: keep no idle connection open. */
        if (bg->sub_conn)
            sub_drop(c);
        return RLOCK__SUB_NOTHING;
    }
    if (bg->sub_conn)
        return RLOCK__SUB_SEND;
    if (rlock__now_ns() < bg->sub_retry_at) {
        *next = rlock__earlier(*next, bg->sub_retry_at);
        return RLOCK__SUB_NOTHING;
    }
    rlock__call_end(call); /* an attempt before's detail, if any */
    rlock__call_init(call, rlock__holds_end(&c->holds, c->shortest_lease_ms));
    /* Read before connecting: a move while it connects makes the
     * connection old at once, and it is made again. */
    bg->sub_moves = __atomic_load_n(&c->moves, __ATOMIC_ACQUIRE);
    return RLOCK__SUB_CONNECT;
}

void rlock__sub_unreached(rlock_client *c, int rc, const char *why,
                          int64_t *next)
{
    struct rlock__bg *bg = c->bg;

    sub_failed_report(c, rc, why);
    bg->sub_retry_at = rlock__after_ms(
        rlock__jitter(c->opts.backoff_min_ms, c->opts.backoff_max_ms));
    *next = rlock__earlier(*next, bg->sub_retry_at);
}

void rlock__sub_attach(rlock_client *c, rlock__conn *conn)
{
    struct rlock__bg *bg = c->bg;
    rlock__sub *s;

    if (bg->sub_broken) {
        bg->sub_broken = 0;
        rlock__obs_node(c->obs, RLOCK_EV_RECONNECT, 0, c->where,
                        "subscriber connection made again");
    }
    rlock__conn_set_push(conn, 1);
    bg->sub_conn = conn;
    bg->sub_up = 1;
    for (s = bg->subs; s; s = s->next)
        s->state = WANTED;
}

void rlock__sub_send(rlock_client *c)
{
    struct rlock__bg *bg = c->bg;
    rlock__sub *s, *nexts;
    int pending = 0;

    if (!bg->sub_conn || bg->sub_reader)
        return;
    for (s = bg->subs; s; s = nexts) {
        const char *argv[2];
        size_t lens[2];

        nexts = s->next;
        if (s->users == 0) {
            if (s->state != WANTED) {
                argv[0] = "UNSUBSCRIBE";
                lens[0] = 11;
                argv[1] = s->channel;
                lens[1] = s->channel_len;
                rlock__conn_append(bg->sub_conn, 2, argv, lens);
                pending = 1;
            }
            sub_remove(c, s);
        } else if (s->state == WANTED) {
            argv[0] = "SUBSCRIBE";
            lens[0] = 9;
            argv[1] = s->channel;
            lens[1] = s->channel_len;
            rlock__conn_append(bg->sub_conn, 2, argv, lens);
            s->state = SENT;
            pending = 1;
        }
    }
    /* Written at once as far as the socket takes it, never waiting: what
     * is left goes out when the driver's poll finds the socket writable
     * (rlock__sub_events). The same call reads what has arrived already,
     * and a confirmation read here leaves nothing on the socket for the
     * poll to see: it is handled now (drain), or it would wait in the
     * buffer for the next message while waiters, never told they are
     * subscribed, polled with backoff. */
    if (pending && rlock__conn_io(bg->sub_conn, 0) != RLOCK_OK)
        sub_failed(c);
    else if (pending)
        drain(c, bg->sub_conn);
}

void rlock__sub_step(rlock_client *c, int64_t *next)
{
    rlock__call call = {0};
    int need = rlock__sub_need(c, next, &call);

    if (need == RLOCK__SUB_NOTHING)
        return;
    if (need == RLOCK__SUB_CONNECT) {
        rlock__conn *conn = NULL;
        int rc;

        pthread_mutex_unlock(&c->mu);
        rc = rlock__sub_connect(c, &conn, &call);
        pthread_mutex_lock(&c->mu);
        if (rc != RLOCK_OK) {
            rlock__sub_unreached(c, rc, rlock__call_msg(&call), next);
            rlock__call_end(&call);
            return;
        }
        rlock__sub_attach(c, conn);
    }
    rlock__call_end(&call);
    rlock__sub_send(c);
}

void rlock__sub_io(rlock_client *c, short revents)
{
    struct rlock__bg *bg = c->bg;
    rlock__conn *conn;
    int failed;

    /* Only this thread touches the connection after creating it, unless
     * a waiter took it over after this thread's poll began. */
    pthread_mutex_lock(&c->mu);
    conn = bg->sub_reader ? NULL : bg->sub_conn;
    bg->sub_busy = conn != NULL;
    pthread_mutex_unlock(&c->mu);
    if (!conn)
        return;
    failed = rlock__conn_io(conn, revents) != RLOCK_OK;
    pthread_mutex_lock(&c->mu);
    bg->sub_busy = 0;
    drain(c, conn);
    if (failed) {
        sub_failed(c);
        bg->sub_retry_at = 0;
    }
    pthread_mutex_unlock(&c->mu);
}

short rlock__sub_events(rlock_client *c, int *fd)
{
    if (!c->bg->sub_conn || c->bg->sub_reader)
        return 0;
    *fd = rlock__conn_fd(c->bg->sub_conn);
    return rlock__conn_events(c->bg->sub_conn);
}

int rlock__sub_read(rlock_client *c, rlock__waiter *w, int64_t until)
{
    struct rlock__bg *bg = c->bg;
    rlock__conn *conn = bg ? bg->sub_conn : NULL;
    struct pollfd fds[2];
    int64_t left;
    int failed = 0, others = 0;
    rlock__waiter *o;
    char buf[64];

    if (!conn || !bg->sub_up || bg->sub_reader || bg->sub_busy ||
        !bg->running || conn_work(c) || rlock__conn_events(conn) != POLLIN)
        return 0;
    if (bg->ring[0] < 0 && pipe2(bg->ring, O_NONBLOCK | O_CLOEXEC) != 0) {
        bg->ring[0] = bg->ring[1] = -1;
        return 0;
    }
    left = until - rlock__now_ns();
    if (left <= 0)
        return 0;
    bg->sub_reader = w;
    w->ring_fd = bg->ring[1];
    /* The background thread may be polling the connection: it must stop
     * (woken now, it leaves the connection out of its next poll). */
    if (bg->sub_polled)
        bg->driver->kick(c);
    pthread_mutex_unlock(&c->mu);

    fds[0].fd = rlock__conn_fd(conn);
    fds[0].events = POLLIN;
    fds[0].revents = 0;
    fds[1].fd = bg->ring[0];
    fds[1].events = POLLIN;
    fds[1].revents = 0;
    poll(fds, 2, (int)((left + RLOCK__NS_PER_MS - 1) / RLOCK__NS_PER_MS));
    if (fds[1].revents)
        while (read(fds[1].fd, buf, sizeof buf) > 0)
            ;
    if (fds[0].revents)
        failed = rlock__conn_io(conn, fds[0].revents) != RLOCK_OK;

    pthread_mutex_lock(&c->mu);
    bg->sub_reader = NULL;
    w->ring_fd = -1;
    drain(c, conn);
    if (failed) {
        sub_failed(c);
        bg->sub_retry_at = 0;
    }
    for (o = c->waiters.list; o; o = o->next)
        others |= o != w;
    /* The background thread takes the connection back: to reconnect, to
     * send, or to read for the other waiters. */
    if (failed || others || conn_work(c))
        bg->driver->kick(c);
    return 1;
}

void rlock__sub_shutdown(rlock_client *c)
{
    if (c->bg->sub_conn)
        sub_close(c);
    c->bg->sub_up = 0;
}

void rlock__sub_free(rlock_client *c)
{
    /* (In a forked child the pipe is the child's own copy.) */
    ring_close(c->bg);
    while (c->bg->subs) {
        rlock__sub *s = c->bg->subs;
        c->bg->subs = s->next;
        free(s->channel);
        free(s);
    }
}
