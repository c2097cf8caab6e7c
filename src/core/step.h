/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What a call that runs in steps asks of whoever drives it (the engine's
 * calls, engine/ops.h; the background's renewals, bg/): each step runs
 * until it needs something it cannot have at once, and says what.
 *
 *   RLOCK__STEP_SEND   a request answered: the step's slot is built; the
 *                      driver runs slot->req with slot->flags over the
 *                      deployment (rlock__slot_run blocking, or an
 *                      rlock__bexec on an event loop: rlock__slot_start,
 *                      backend.h), sets slot->rc and slot->res, and steps
 *                      again;
 *   RLOCK__STEP_QUIET  the hold's renewal or extension in flight to end
 *                      (rlock__hold_quiet's wait): the driver steps again
 *                      when it did, or at the call's deadline;
 *   RLOCK__STEP_SLEEP  (a wait only) until its waiter is woken or until
 *                      its time;
 *   RLOCK__STEP_DONE   the call is over.
 */
#ifndef RLOCK_CORE_STEP_H
#define RLOCK_CORE_STEP_H

#include "core/call.h"
#include "core/request.h"

#define RLOCK__STEP_DONE 0
#define RLOCK__STEP_SEND 1
#define RLOCK__STEP_QUIET 2
#define RLOCK__STEP_SLEEP 3

/* One request of a call in steps, and what came of it. */
typedef struct rlock__slot {
    rlock__req req;
    int flags;          /* of rlock__backend_exec (RLOCK__X_BEHIND...) */
    rlock__call *call;  /* whose deadline it runs by, and where its error
                           detail goes */
    int rc;             /* RLOCK_OK, or RLOCK_ENOMEM (nothing was sent) */
    rlock__results res; /* c->nnodes results */
} rlock__slot;

#endif
