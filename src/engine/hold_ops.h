/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What the engine's files share among themselves: recording a hold Redis
 * granted, the replica check of a new hold, undoing an attempt, and the
 * count of the nodes' answers. Not for use outside src/engine.
 */
#ifndef RLOCK_ENGINE_HOLD_OPS_H
#define RLOCK_ENGINE_HOLD_OPS_H

#include <stdint.h>

#include "core/call.h"
#include "core/hold.h"
#include "core/handles.h"
#include "core/owner.h"
#include "core/request.h"

/* Records (or updates) owner's hold of m after Redis granted it: token
 * (0: not drawn yet), the nonce of the acquisition that took it, count,
 * the lease counted from t0, Redis having set granted_ms of it so far (mu
 * held). Starts the background work first: a hold nobody renews or
 * watches must not be recorded. */
int rlock__hold_record(rlock__call *call, rlock_mutex *m, rlock__as owner,
                       uint64_t token, uint64_t nonce, int64_t count,
                       int64_t t0, int64_t granted_ms);

/* Owner's hold of m (or NULL) once no request that sets its lease is in
 * flight: a renewal, an extension, a re-entry whose count Redis keeps
 * (mu held, waited on, no later than the call's deadline: then NULL and
 * *late set). One at a time, each request's confirmed lease is the last
 * one set, unless a request never answered runs later
 * (rlock__hold_owe). The caller marks its own with h->extending. */
rlock__hold *rlock__hold_quiet(rlock__call *call, rlock_mutex *m,
                              uint64_t owner, int *late);
/* The same, without waiting: *wait 1 (NULL returned) while such a
 * request is in flight (an op steps again after rlock__hold_quiet's
 * wait: RLOCK__STEP_QUIET), -1 when the call's deadline has passed too;
 * else 0 and the hold or NULL. */
rlock__hold *rlock__hold_quiet_now(rlock__call *call, rlock_mutex *m,
                                   uint64_t owner, int *wait);
/* Ends an owner's request that set h->extending, h the hold of that
 * serial, if it is still there (mu held). */
void rlock__hold_settled(rlock_client *c, uint64_t serial);

/* Sends req and fills res (mu not held); RLOCK_OK or RLOCK_ENOMEM. */
int rlock__send(rlock__call *call, rlock_mutex *m, rlock__req *req, int flags,
                rlock__results *res);

#endif
