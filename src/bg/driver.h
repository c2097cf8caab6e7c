/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The driver of a client's background work: the hooks through which the
 * engine and the steps ask for the steps to run.
 */
#ifndef RLOCK_BG_DRIVER_H
#define RLOCK_BG_DRIVER_H

#include <stdint.h>

#include "core/call.h"
#include "core/handles.h"

/*
 * Who drives the steps: the hooks the steps and the engine use to have
 * the background work run, filled by the driver (thread.c: one thread per
 * client; an event loop's adapter will fill the same table). mu is held
 * for ensure, kick and kick_before, not for stop.
 */
typedef struct rlock__driver {
    const char *name;
    /* Makes sure the steps run from now on (starts the thread). */
    int (*ensure)(rlock_client *c, rlock__call *call);
    /* The steps should run again soon: something changed. */
    void (*kick)(rlock_client *c);
    /* The steps should run again by due_ns at the latest. */
    void (*kick_before)(rlock_client *c, int64_t due_ns);
    /* Stops driving, and waits until no step runs. */
    void (*stop)(rlock_client *c);
    /* In a forked child: the parent's driver is not the child's. */
    void (*after_fork)(rlock_client *c);
    /* Loss notices and events wait to be delivered (bg/notify.h; mu
     * held): the thread driver has notifier threads call them
     * (rlock__notify_step), a loop calls them on its own thread
     * (rlock__notify_take). Lowers *next to when to look again. */
    void (*notices)(rlock_client *c, int64_t *next);
    /* fd (the subscriber's) is about to be closed: no longer watched
     * (mu held; NULL: nothing to do). A loop must forget a descriptor
     * before it is closed. */
    void (*unwatch)(rlock_client *c, int fd);
} rlock__driver;

/* The driver of the blocking API (thread.c). */
extern const rlock__driver rlock__thread_driver;

/* The client's driver's hooks (mu held). */
int rlock__bg_ensure(rlock_client *c, rlock__call *call);
void rlock__bg_kick(rlock_client *c);
void rlock__bg_kick_before(rlock_client *c, int64_t due_ns);

#endif
