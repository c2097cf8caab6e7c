/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Loss notices (notify.c): a hold marked lost, and its on_lost callback,
 * delivered on threads that never renew a lease.
 */
#ifndef RLOCK_BG_NOTIFY_H
#define RLOCK_BG_NOTIFY_H

#include <stdint.h>

#include "core/handles.h"
#include "core/hold.h"

/* Marks h lost (mu held) for cause (RLOCK_LOST_*), found as how says,
 * reports it (core/events.h) and queues its on_lost notice, which nothing
 * done to the hold afterwards can drop; a hold with a request that was
 * never answered is given back behind it (bg.h, rlock__undo_hold_later).
 * Returns 1 if h was not lost before. */
int rlock__bg_lose(rlock_client *c, rlock__hold *h, int cause, const char *how);
/* Drops the notices of m not yet delivered (m is being freed; mu held). */
void rlock__notify_forget(rlock_client *c, const rlock_mutex *m);

/* The events and log lines the background thread reported so far go to
 * a notifier thread, which delivers them in order (mu held). */
void rlock__notify_events(rlock_client *c);

/* For the background's driver: starts a notifier thread when notices wait
 * and every notifier is busy (mu held; lowers *next to when to look
 * again). */
void rlock__notify_step(rlock_client *c, int64_t *next);
/* For a driver that delivers notices on its own thread (an event loop),
 * instead of notifier threads: takes the oldest notice (mu held) and
 * returns 1 with *m (NULL: the client's queued events), which the driver
 * delivers with rlock__notify_call; 0: none waits. */
int rlock__notify_take(rlock_client *c, rlock_mutex **m);
/* Delivers a notice on this thread (mu held, released around it): calls
 * m's on_lost, counted in m->callbacks meanwhile, or (m NULL) the
 * client's queued events. */
void rlock__notify_call(rlock_client *c, rlock_mutex *m);
/* Whether a notice waits (mu held). */
int rlock__notify_waiting(const rlock_client *c);
/* Stops the notifier threads, waiting for a callback under way (mu not
 * held), and drops what was not delivered. */
void rlock__notify_free(rlock_client *c);
void rlock__notify_after_fork(rlock_client *c);

#endif
