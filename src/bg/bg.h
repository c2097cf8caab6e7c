/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Background work of a client: what must happen while no call of the
 * application is running.
 *
 *   watchdog.c    renews leases, notices holds that ran out, calls on_lost
 *   subscriber.c  the one subscriber connection: its channels and what a
 *                 message wakes
 *   cleanup.c     undoes abandoned attempts, later, in order
 *   notify.c      calls on_lost, on threads of its own
 *   thread.c      the driver: one thread per client that runs the three,
 *                 sleeping in poll(2) until the next is due
 *
 * The three steps do not care who drives them: thread.c for the blocking
 * API, an application's event loop for the event-loop API to come. They
 * run with the client's mu held and release it around each round trip.
 */
#ifndef RLOCK_BG_BG_H
#define RLOCK_BG_BG_H

#include <stdint.h>

#include "core/call.h"
#include "core/handles.h"
#include "core/owner.h"
#include "core/step.h"
#include "bg/driver.h"
#include "bg/notify.h"
#include "net/conn.h"

typedef struct rlock__sub rlock__sub;         /* subscriber.c */
typedef struct rlock__cleanup rlock__cleanup; /* cleanup.c */
struct rlock__notify;                         /* notify.c */

struct rlock__bg {
    const struct rlock__driver *driver; /* bg/driver.h */
    void *drv; /* the driver's own state (an event loop's driver) */
    /* The thread (thread.c). */
    int running;
    int started; /* it has begun running (start-up handshake) */
    int stop;
    pthread_t thread;
    int64_t sleep_until; /* its poll ends by then; 0: it is busy */
    int pipe[2];
    /* The subscriber (subscriber.c). The connection is read by the
     * thread, or by a sleeping waiter that took it over (sub_reader), so
     * that a message wakes the thread it is for with no hand-over between
     * threads; nobody else touches it meanwhile. ring is the pipe that
     * interrupts that waiter's poll. */
    rlock__sub *subs;
    rlock__conn *sub_conn;
    unsigned sub_moves; /* c->moves before sub_conn was made */
    int sub_up;
    int sub_broken; /* it failed since it was last made (reported) */
    int64_t sub_retry_at;
    struct rlock__waiter *sub_reader;
    int sub_polled; /* the thread's poll watches the connection now */
    int sub_busy;   /* the thread reads the connection now (mu not held) */
    int sub_connecting; /* a driver makes the connection in steps */
    int ring[2];
    /* Undos still to send (cleanup.c). */
    rlock__cleanup *cleanups;
    /* Loss notices and the threads that call on_lost (notify.c). */
    struct rlock__notify *notify;
};

/* ---- lifecycle (bg.c) --------------------------------------------------- */

/* The background state of a new client, driven by driver (nothing
 * started). */
int rlock__bg_new(rlock_client *c, const struct rlock__driver *driver);
/* Stops the driver and frees everything (mu not held). */
void rlock__bg_free(rlock_client *c);
/* In a forked child: no driver running, no subscriber, no undos of the
 * parent's. */
void rlock__bg_after_fork(rlock_client *c);

/* ---- the steps ------------------------------------------------------------
 */

/* Each runs with mu held (released around round trips) and lowers *next
 * to when it wants to run again. */
void rlock__watchdog_step(rlock_client *c, int64_t *next);
/* The watchdog's step in parts, for a driver that runs the renewals
 * (rlock__renew_begin below) as a call of its own: sweep marks lost the
 * holds whose lease ended unrenewed, forgets those of freed owners, and
 * hands what it reported to the driver's notices hook; next lowers *next
 * to the holds' next lease end or renewal. */
void rlock__watchdog_sweep(rlock_client *c, int64_t *next);
void rlock__watchdog_next(rlock_client *c, int64_t *next);
void rlock__cleanup_step(rlock_client *c, int64_t *next);
void rlock__sub_step(rlock_client *c, int64_t *next);

/* The watchdog's renewals that are due, as a call in steps (core/step.h)
 * for a driver of the steps' own (rlock__watchdog_step drives one on the
 * background thread): begin collects the holds due and marks them
 * renewing (mu held; NULL: none is due, or out of memory); step, with mu
 * held, asks for a request at a time (RLOCK__STEP_SEND: the driver
 * releases mu while it runs) until RLOCK__STEP_DONE, by when every hold
 * it renewed, failed to renew or found gone is recorded; end frees it. */
typedef struct rlock__renew_op rlock__renew_op;
rlock__renew_op *rlock__renew_begin(rlock_client *c);
int rlock__renew_step(rlock__renew_op *o, rlock__slot **slot);
void rlock__renew_end(rlock__renew_op *o);

/* The cleanup step as a call in steps, the same way (rlock__cleanup_step
 * drives one): begin (mu held) starts it, lowering *next (which must
 * outlive it) as the step would; step asks for one undo at a time. Its
 * struct is the caller's (it holds a request's slot). */
typedef struct rlock__cleanup_op {
    rlock_client *c;
    int64_t began, now;
    int64_t *next;
    rlock__cleanup *j; /* sent, off the list while mu is released */
    rlock__call call;
    rlock__slot s;
} rlock__cleanup_op;
void rlock__cleanup_begin(rlock_client *c, rlock__cleanup_op *o, int64_t *next);
int rlock__cleanup_op_step(rlock__cleanup_op *o, rlock__slot **slot);

/* ---- the subscriber (subscriber.c) --------------------------------------- */

/* The subscriber's step in parts, for a driver that makes the
 * connection in steps of its own (rlock__sub_step is need, a blocking
 * rlock__sub_connect, attach or unreached, and send). need (mu held)
 * says what the subscriber needs now: nothing (lowering *next to when
 * it may), a connection (call is its context: the driver makes one,
 * with bg->sub_connecting set meanwhile, then calls attach with it, or
 * unreached), or its subscriptions sent on the connection it has
 * (send). call is inited (an earlier detail given back: it starts zeroed
 * or inited); the driver ends it. */
enum { RLOCK__SUB_NOTHING, RLOCK__SUB_CONNECT, RLOCK__SUB_SEND };
int rlock__sub_need(rlock_client *c, int64_t *next, rlock__call *call);
void rlock__sub_attach(rlock_client *c, rlock__conn *conn);
void rlock__sub_unreached(rlock_client *c, int rc, const char *why,
                          int64_t *next);
void rlock__sub_send(rlock_client *c);

/* m's channel is wanted (mu held): subscribed while m exists. Returns 1
 * if the subscription is active, 0 if not yet, or an error. */
int rlock__sub_want(rlock_client *c, rlock_mutex *m, rlock__call *call);
/* m no longer wants its channel (mu held). */
void rlock__sub_release(rlock_client *c, rlock_mutex *m);
/* The subscriber connection's descriptor and the events it waits for (0:
 * none). Background thread only. */
short rlock__sub_events(rlock_client *c, int *fd);
/* Serves the subscriber connection after poll reported revents (mu not
 * held). */
void rlock__sub_io(rlock_client *c, short revents);
/* Called by waiter w about to sleep until `until` for a message (mu
 * held): if the subscriber connection is idle and nobody else reads it,
 * w's own thread waits on it, up to until, for one batch of messages (or
 * a ring: a wake-up for w, or the background wanting the connection back)
 * and hands them out as the background thread would. Returns 1 if it
 * waited so, 0 if it could not (then w sleeps on its condition variable).
 * Whatever it read may have woken w. */
int rlock__sub_read(rlock_client *c, struct rlock__waiter *w, int64_t until);
/* Closes the subscriber connection. */
void rlock__sub_shutdown(rlock_client *c);
void rlock__sub_free(rlock_client *c);

/* ---- undos (cleanup.c) --------------------------------------------------- */

/* Undoes owner's acquisition nonce of m later, in the background, until
 * Redis confirms it or what it would remove has expired by itself (mu not
 * held). sent: it was sent once already (and reported). */
void rlock__undo_later(rlock_mutex *m, uint64_t owner, uint64_t nonce,
                       int sent);
/* Gives hold h back in the background (mu held): it is lost, and a
 * request of it that was never answered (h->owed_max_ms) may still set
 * a lease that nobody would own. The undo goes behind that request. */
void rlock__undo_hold_later(rlock_client *c, const rlock__hold *h);
void rlock__cleanup_free(rlock_client *c);

#endif
