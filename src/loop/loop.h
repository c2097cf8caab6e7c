/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The event loop's driver (issue 30, step 4): runs the engine's calls in
 * steps (engine/ops.h) on one thread that never blocks, from a loop's
 * readiness and timer callbacks, the way the blocking API runs the same
 * ops on the calling thread. The loop is reached only through two hooks:
 * the driver says which descriptors to watch for which events, and when
 * its next timer is due; the loop reports readiness (rlock__loop_ready)
 * and the timer (rlock__loop_timeout) back. That is what the public
 * event-loop API and its adapters will be built on.
 *
 * A task is one op in flight: each of its requests runs as an
 * rlock__bexec whose connections the loop watches; a pause of the backend
 * is a timer; a wait's sleep is a timer and its waiter's ring (a pipe the
 * loop watches), which the subscriber writes when it wakes the waiter.
 * The client's background work (renewals, the subscriber, undos, loss
 * notices) runs on the same loop (bg.c): the client starts no thread.
 *
 * Everything here runs on the loop's thread; nothing blocks (a host name
 * is looked up in the connection's first stage, net/resolve.h; only a
 * build without c-ares falls back on getaddrinfo, which blocks). A
 * connection whose lookup ends has the socket take the lookup's
 * descriptor's number (rlock__conn_on_renumber): the loop stops
 * watching the number first and watches it again after. A request whose
 * node has all of its max_connections busy waits in the node's queue, in
 * rounds of its own (RLOCK__X_NOWAIT).
 */
#ifndef RLOCK_LOOP_LOOP_H
#define RLOCK_LOOP_LOOP_H

#include <stdint.h>

#include "backend/backend.h"
#include "core/step.h"
#include "engine/ops.h"

typedef struct rlock__loop_hooks {
    /* Watch fd for events (POLLIN, POLLOUT or both; 0: no longer). */
    void (*watch)(void *arg, int fd, short events);
    /* Call rlock__loop_timeout at due_ns (monotonic, rlock__now_ns),
     * instead of the time asked for before; 0: no timer. */
    void (*timer)(void *arg, int64_t due_ns);
    void *arg;
} rlock__loop_hooks;

typedef struct rlock__loop rlock__loop;

/* One op in flight. The caller fills the first fields and keeps the
 * struct until done is called (on the loop's thread, once). */
typedef struct rlock__task {
    rlock_mutex *m;
    rlock__as owner;
    rlock__call *call; /* the op's: a quiet wait ends by its deadline */
    rlock__step_fn step;
    void *op;
    rlock__wait_op *wait; /* op, if it is a wait: its sleeps */
    void (*done)(struct rlock__task *t);
    void *arg;
    /* The driver's. */
    struct rlock__task *next, *prev; /* in the list (out of memory) */
    int heap_i;                      /* in the heap of waiting tasks, or -1 */
    int state;
    rlock__slot *slot;
    /* The request in flight and its round's connections: room the task
     * has only while it sends (NULL while it sleeps or waits). */
    struct rlock__task_io {
        rlock__bexec b;
        rlock__loop *l; /* for the pool's "served" */
        rlock__conn *conns[RLOCK__NODES_MAX];
        size_t want[RLOCK__NODES_MAX];
        /* conns[i]'s place among the tasks whose round waits on its
         * descriptor (fd -1: none): a connection may carry several
         * tasks' requests at once (shared, node.c). */
        struct rlock__fdlink {
            struct rlock__task *t;
            int fd;
            struct rlock__fdlink *prev, *next;
        } links[RLOCK__NODES_MAX];
    } * io;
    int n;
    int listed; /* in the list */
    int64_t until;
} rlock__task;

/* A driver for client c's ops on a loop reached through hooks (copied),
 * and of its background work (bg.c; c must not be driven by its thread
 * or another loop yet: RLOCK_EINVAL). NULL with *err on failure. */
rlock__loop *rlock__loop_new(rlock_client *c, const rlock__loop_hooks *hooks,
                             int *err);
/* Frees l: the loop is told to forget every descriptor and the timer,
 * and the background's tasks are canceled. No other task may be in
 * flight. */
void rlock__loop_free(rlock__loop *l);
/* Starts t: stepped at once (its done may be called before this
 * returns). */
void rlock__loop_start(rlock__loop *l, rlock__task *t);
/* Takes t off the loop at once and ends it: its round's connections are
 * failed and closed (what they carried may still run, as a request whose
 * reply never came, and the op treats it so), the op is stepped to its
 * end with every further request failing unsent (RLOCK_ECANCELED) and
 * its sleeps over, and done is called before this returns. */
void rlock__loop_cancel(rlock__loop *l, rlock__task *t);
/* fd is ready for revents. */
void rlock__loop_ready(rlock__loop *l, int fd, short revents);
/* The timer came. */
void rlock__loop_timeout(rlock__loop *l);
/* Tasks in flight. */
int rlock__loop_tasks(const rlock__loop *l);

#endif
