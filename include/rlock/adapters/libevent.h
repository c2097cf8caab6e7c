/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * rlock's event-loop API on libevent 2 (Debian: libevent-dev; pkg-config:
 * rlock-libevent). Header only, built on rlock/async.h's public hooks
 * alone: one event per descriptor the library watches, one timer.
 *
 *     struct event_base *base = event_base_new();
 *     rlock_async *a = rlock_async_open(url, NULL, &err);
 *     rlock_libevent_attach(a, base);
 *     ... rlock_async_lock(m, -1, on_locked, arg) ...
 *     event_base_dispatch(base);
 *
 * The events are the client's until rlock_async_close, which removes and
 * frees them; the base must outlive the client.
 */
#ifndef RLOCK_ADAPTERS_LIBEVENT_H
#define RLOCK_ADAPTERS_LIBEVENT_H

#include <stdlib.h>

#include <event2/event.h>

#include <rlock/async.h>

typedef struct rlock__libevent_fd {
    int fd;
    struct event *ev;
    struct rlock__libevent_fd *next;
} rlock__libevent_fd;

typedef struct rlock__libevent {
    rlock_async *a;
    struct event_base *base;
    struct event *timer;
    rlock__libevent_fd *fds;
    int busy; /* our callback is on the stack */
    int dead; /* cleaned up meanwhile: freed when it returns */
} rlock__libevent;

static inline void rlock__libevent_free(rlock__libevent *e)
{
    while (e->fds) {
        rlock__libevent_fd *f = e->fds;
        e->fds = f->next;
        event_free(f->ev);
        free(f);
    }
    event_free(e->timer);
    free(e);
}

static inline void rlock__libevent_on_fd(evutil_socket_t fd, short what,
                                         void *arg)
{
    rlock__libevent *e = (rlock__libevent *)arg;
    int events = 0;

    if (what & EV_READ)
        events |= RLOCK_ASYNC_READ;
    if (what & EV_WRITE)
        events |= RLOCK_ASYNC_WRITE;
    e->busy++;
    rlock_async_ready(e->a, (int)fd, events);
    if (--e->busy == 0 && e->dead)
        rlock__libevent_free(e);
}

static inline void rlock__libevent_on_timer(evutil_socket_t fd, short what,
                                            void *arg)
{
    rlock__libevent *e = (rlock__libevent *)arg;

    (void)fd;
    (void)what;
    e->busy++;
    rlock_async_timeout(e->a);
    if (--e->busy == 0 && e->dead)
        rlock__libevent_free(e);
}

static inline void rlock__libevent_watch(void *arg, int fd, int events)
{
    rlock__libevent *e = (rlock__libevent *)arg;
    rlock__libevent_fd **p, *f;
    short what = EV_PERSIST;

    for (p = &e->fds; *p && (*p)->fd != fd; p = &(*p)->next)
        ;
    if ((f = *p) != NULL) {
        event_del(f->ev);
        event_free(f->ev);
        f->ev = NULL;
    }
    if (events == 0) {
        if (f) {
            *p = f->next;
            free(f);
        }
        return;
    }
    if (!f) {
        if (!(f = (rlock__libevent_fd *)calloc(1, sizeof *f)))
            return; /* the calls waiting on it end by their deadlines */
        f->fd = fd;
        f->next = e->fds;
        e->fds = f;
    }
    if (events & RLOCK_ASYNC_READ)
        what |= EV_READ;
    if (events & RLOCK_ASYNC_WRITE)
        what |= EV_WRITE;
    f->ev = event_new(e->base, fd, what, rlock__libevent_on_fd, e);
    if (f->ev) {
        event_add(f->ev, NULL);
        return;
    }
    /* Out of memory: not watched (the calls waiting on it end by their
     * deadlines). */
    for (p = &e->fds; *p != f; p = &(*p)->next)
        ;
    *p = f->next;
    free(f);
}

static inline void rlock__libevent_timer(void *arg, int64_t after_ms)
{
    rlock__libevent *e = (rlock__libevent *)arg;
    struct timeval tv;

    if (after_ms < 0) {
        evtimer_del(e->timer);
        return;
    }
    tv.tv_sec = (time_t)(after_ms / 1000);
    tv.tv_usec = (suseconds_t)(after_ms % 1000) * 1000;
    evtimer_add(e->timer, &tv);
}

static inline void rlock__libevent_cleanup(void *arg)
{
    rlock__libevent *e = (rlock__libevent *)arg;

    if (e->busy)
        e->dead = 1;
    else
        rlock__libevent_free(e);
}

/* Drives a on base, from the calling thread (a's thread from now on).
 * RLOCK_OK, RLOCK_ENOMEM, or rlock_async_attach's RLOCK_EINVAL. */
static inline int rlock_libevent_attach(rlock_async *a, struct event_base *base)
{
    rlock_async_hooks h;
    rlock__libevent *e;
    int rc;

    if (!a || !base)
        return RLOCK_EINVAL;
    if (!(e = (rlock__libevent *)calloc(1, sizeof *e)))
        return RLOCK_ENOMEM;
    e->a = a;
    e->base = base;
    if (!(e->timer = evtimer_new(base, rlock__libevent_on_timer, e))) {
        free(e);
        return RLOCK_ENOMEM;
    }
    h.watch = rlock__libevent_watch;
    h.timer = rlock__libevent_timer;
    h.cleanup = rlock__libevent_cleanup;
    h.arg = e;
    if ((rc = rlock_async_attach(a, &h)) != RLOCK_OK)
        rlock__libevent_free(e);
    return rc;
}

#endif
