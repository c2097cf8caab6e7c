/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * rlock's event-loop API on libev 4 (Debian: libev-dev; pkg-config:
 * rlock-libev). Header only, built on rlock/async.h's public hooks alone:
 * one ev_io per descriptor the library watches, one ev_timer.
 *
 *     struct ev_loop *loop = EV_DEFAULT;
 *     rlock_async *a = rlock_async_open(url, NULL, &err);
 *     rlock_libev_attach(a, loop);
 *     ... rlock_async_lock(m, -1, on_locked, arg) ...
 *     ev_run(loop, 0);
 *
 * The watchers are the client's until rlock_async_close, which stops and
 * frees them; the loop must outlive the client.
 */
#ifndef RLOCK_ADAPTERS_LIBEV_H
#define RLOCK_ADAPTERS_LIBEV_H

#include <stdlib.h>

#include <ev.h>

#include <rlock/async.h>

struct rlock__libev;

typedef struct rlock__libev_fd {
    ev_io io; /* first: the watcher is the struct */
    struct rlock__libev *e;
    struct rlock__libev_fd *next;
} rlock__libev_fd;

typedef struct rlock__libev {
    ev_timer timer; /* first: the watcher is the struct */
    rlock_async *a;
    struct ev_loop *loop;
    rlock__libev_fd *fds;
    int busy; /* our callback is on the stack */
    int dead; /* cleaned up meanwhile: freed when it returns */
} rlock__libev;

static inline void rlock__libev_free(rlock__libev *e)
{
    while (e->fds) {
        rlock__libev_fd *f = e->fds;
        e->fds = f->next;
        ev_io_stop(e->loop, &f->io);
        free(f);
    }
    ev_timer_stop(e->loop, &e->timer);
    free(e);
}

static inline void rlock__libev_on_fd(struct ev_loop *loop, ev_io *w,
                                      int revents)
{
    rlock__libev_fd *f = (rlock__libev_fd *)w;
    rlock__libev *e = f->e;
    int events = 0;

    (void)loop;
    if (revents & (EV_READ | EV_ERROR))
        events |= RLOCK_ASYNC_READ;
    if (revents & (EV_WRITE | EV_ERROR))
        events |= RLOCK_ASYNC_WRITE;
    e->busy++;
    rlock_async_ready(e->a, w->fd, events);
    if (--e->busy == 0 && e->dead)
        rlock__libev_free(e);
}

static inline void rlock__libev_on_timer(struct ev_loop *loop, ev_timer *w,
                                         int revents)
{
    rlock__libev *e = (rlock__libev *)w;

    (void)loop;
    (void)revents;
    e->busy++;
    rlock_async_timeout(e->a);
    if (--e->busy == 0 && e->dead)
        rlock__libev_free(e);
}

static inline void rlock__libev_watch(void *arg, int fd, int events)
{
    rlock__libev *e = (rlock__libev *)arg;
    rlock__libev_fd **p, *f;
    int what = 0;

    for (p = &e->fds; *p && (*p)->io.fd != fd; p = &(*p)->next)
        ;
    if ((f = *p) != NULL)
        ev_io_stop(e->loop, &f->io);
    if (events == 0) {
        if (f) {
            *p = f->next;
            free(f);
        }
        return;
    }
    if (!f) {
        if (!(f = (rlock__libev_fd *)calloc(1, sizeof *f)))
            return; /* the calls waiting on it end by their deadlines */
        f->e = e;
        f->next = e->fds;
        e->fds = f;
        ev_io_init(&f->io, rlock__libev_on_fd, fd, 0);
    }
    if (events & RLOCK_ASYNC_READ)
        what |= EV_READ;
    if (events & RLOCK_ASYNC_WRITE)
        what |= EV_WRITE;
    ev_io_set(&f->io, fd, what);
    ev_io_start(e->loop, &f->io);
}

static inline void rlock__libev_timer(void *arg, int64_t after_ms)
{
    rlock__libev *e = (rlock__libev *)arg;

    ev_timer_stop(e->loop, &e->timer);
    if (after_ms < 0)
        return;
    /* libev counts from the loop's cached time: bring it up to now. */
    ev_now_update(e->loop);
    ev_timer_set(&e->timer, (ev_tstamp)after_ms / 1000.0, 0.0);
    ev_timer_start(e->loop, &e->timer);
}

static inline void rlock__libev_cleanup(void *arg)
{
    rlock__libev *e = (rlock__libev *)arg;

    if (e->busy)
        e->dead = 1;
    else
        rlock__libev_free(e);
}

/* Drives a on loop, from the calling thread (a's thread from now on).
 * RLOCK_OK, RLOCK_ENOMEM, or rlock_async_attach's RLOCK_EINVAL. */
static inline int rlock_libev_attach(rlock_async *a, struct ev_loop *loop)
{
    rlock_async_hooks h;
    rlock__libev *e;
    int rc;

    if (!a || !loop)
        return RLOCK_EINVAL;
    if (!(e = (rlock__libev *)calloc(1, sizeof *e)))
        return RLOCK_ENOMEM;
    e->a = a;
    e->loop = loop;
    ev_timer_init(&e->timer, rlock__libev_on_timer, 0.0, 0.0);
    h.watch = rlock__libev_watch;
    h.timer = rlock__libev_timer;
    h.cleanup = rlock__libev_cleanup;
    h.arg = e;
    if ((rc = rlock_async_attach(a, &h)) != RLOCK_OK)
        rlock__libev_free(e);
    return rc;
}

#endif
