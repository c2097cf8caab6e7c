/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * rlock's event-loop API on libuv (Debian: libuv1-dev; pkg-config:
 * rlock-libuv). Header only, built on rlock/async.h's public hooks alone:
 * one uv_poll_t per descriptor the library watches, one uv_timer_t.
 *
 *     uv_loop_t *loop = uv_default_loop();
 *     rlock_async *a = rlock_async_open(url, NULL, &err);
 *     rlock_libuv_attach(a, loop);
 *     ... rlock_async_lock(m, -1, on_locked, arg) ...
 *     uv_run(loop, UV_RUN_DEFAULT);
 *
 * The handles are the client's until rlock_async_close, which closes them
 * (uv_close): as with any libuv handle, their memory is freed by the
 * loop's next turn, so run the loop once more (uv_run with
 * UV_RUN_NOWAIT) before uv_loop_close.
 */
#ifndef RLOCK_ADAPTERS_LIBUV_H
#define RLOCK_ADAPTERS_LIBUV_H

#include <stdlib.h>

#include <uv.h>

#include <rlock/async.h>

struct rlock__libuv;

typedef struct rlock__libuv_fd {
    uv_poll_t poll; /* first: the handle is the struct */
    int fd;
    struct rlock__libuv *e;
    struct rlock__libuv_fd *next;
} rlock__libuv_fd;

typedef struct rlock__libuv {
    uv_timer_t timer; /* first: the handle is the struct */
    rlock_async *a;
    uv_loop_t *loop;
    rlock__libuv_fd *fds;
    int handles; /* open or closing: the struct lives until none is */
    int dead;    /* cleaned up: freed with its last handle */
} rlock__libuv;

static inline void rlock__libuv_closed(uv_handle_t *h)
{
    rlock__libuv *e = (rlock__libuv *)h->data;

    if ((void *)h != (void *)&e->timer)
        free(h);
    if (--e->handles == 0 && e->dead)
        free(e);
}

static inline void rlock__libuv_on_fd(uv_poll_t *h, int status, int uvev)
{
    rlock__libuv_fd *f = (rlock__libuv_fd *)h;
    int events = 0;

    if (status < 0 || (uvev & UV_READABLE))
        events |= RLOCK_ASYNC_READ;
    if (status < 0 || (uvev & UV_WRITABLE))
        events |= RLOCK_ASYNC_WRITE;
    /* (The handles are closed, never freed, under this callback: the
     * structs outlive it whatever the client does.) */
    rlock_async_ready(f->e->a, f->fd, events);
}

static inline void rlock__libuv_on_timer(uv_timer_t *t)
{
    rlock_async_timeout(((rlock__libuv *)t)->a);
}

static inline void rlock__libuv_watch(void *arg, int fd, int events)
{
    rlock__libuv *e = (rlock__libuv *)arg;
    rlock__libuv_fd **p, *f;
    int what = 0;

    for (p = &e->fds; *p && (*p)->fd != fd; p = &(*p)->next)
        ;
    f = *p;
    if (events == 0) {
        if (f) {
            /* Before the descriptor closes: stopped and closed now (the
             * memory goes on the loop's next turn). */
            *p = f->next;
            uv_poll_stop(&f->poll);
            uv_close((uv_handle_t *)&f->poll, rlock__libuv_closed);
        }
        return;
    }
    if (!f) {
        if (!(f = (rlock__libuv_fd *)calloc(1, sizeof *f)))
            return; /* the calls waiting on it end by their deadlines */
        if (uv_poll_init(e->loop, &f->poll, fd) != 0) {
            free(f);
            return;
        }
        f->poll.data = e;
        f->fd = fd;
        f->e = e;
        f->next = e->fds;
        e->fds = f;
        e->handles++;
    }
    if (events & RLOCK_ASYNC_READ)
        what |= UV_READABLE;
    if (events & RLOCK_ASYNC_WRITE)
        what |= UV_WRITABLE;
    uv_poll_start(&f->poll, what, rlock__libuv_on_fd);
}

static inline void rlock__libuv_timer(void *arg, int64_t after_ms)
{
    rlock__libuv *e = (rlock__libuv *)arg;

    if (after_ms < 0) {
        uv_timer_stop(&e->timer);
        return;
    }
    /* libuv counts from the loop's cached time: bring it up to now. */
    uv_update_time(e->loop);
    uv_timer_start(&e->timer, rlock__libuv_on_timer, (uint64_t)after_ms, 0);
}

static inline void rlock__libuv_cleanup(void *arg)
{
    rlock__libuv *e = (rlock__libuv *)arg;

    /* Every descriptor was forgotten (closed) already; the timer goes. */
    e->dead = 1;
    uv_close((uv_handle_t *)&e->timer, rlock__libuv_closed);
}

/* Drives a on loop, from the calling thread (a's thread from now on).
 * RLOCK_OK, RLOCK_ENOMEM, or rlock_async_attach's RLOCK_EINVAL. */
static inline int rlock_libuv_attach(rlock_async *a, uv_loop_t *loop)
{
    rlock_async_hooks h;
    rlock__libuv *e;
    int rc;

    if (!a || !loop)
        return RLOCK_EINVAL;
    if (!(e = (rlock__libuv *)calloc(1, sizeof *e)))
        return RLOCK_ENOMEM;
    e->a = a;
    e->loop = loop;
    if (uv_timer_init(loop, &e->timer) != 0) {
        free(e);
        return RLOCK_ENOMEM;
    }
    e->timer.data = e;
    e->handles = 1;
    h.watch = rlock__libuv_watch;
    h.timer = rlock__libuv_timer;
    h.cleanup = rlock__libuv_cleanup;
    h.arg = e;
    if ((rc = rlock_async_attach(a, &h)) != RLOCK_OK) {
        e->dead = 1;
        uv_close((uv_handle_t *)&e->timer, rlock__libuv_closed);
    }
    return rc;
}

#endif
