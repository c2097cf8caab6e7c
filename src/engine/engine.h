/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The lock engine: one acquire / wait / release / extend logic for every
 * layout and backend. It builds each request with the mutex's layout,
 * hands it to the client's backend, and counts the nodes' answers against
 * the client's quorum (1 of 1 but for Redlock), keeping the client's hold
 * table true to what Redis did. Nothing here asks which layout or backend
 * it runs on; what differs between them is in their tables.
 *
 * Every function takes the call's context (deadline, error detail) and
 * the owner the call acts as, with the client's mu not held.
 */
#ifndef RLOCK_ENGINE_ENGINE_H
#define RLOCK_ENGINE_ENGINE_H

#include <stdint.h>

#include <rlock/rlock.h>

#include "core/call.h"
#include "core/handles.h"
#include "core/owner.h"

/* A call on m starts: its deadline is the command timeout from now (and
 * the sync timeout more for a mutex whose writes wait for replicas). */
void rlock__call_begin(rlock__call *call, const rlock_mutex *m);

/* A new nonce for one acquisition (all attempts of a wait share it). */
uint64_t rlock__new_nonce(rlock_client *c);

/* One attempt to acquire m as owner, without waiting. mode 't' try, 'w'
 * wait (join the queue where the layout has one); an owner that holds m
 * re-enters instead. RLOCK_OK: held, recorded. RLOCK_EBUSY: *hint_ms (if
 * not NULL) is how long the holder's lease lasts at most (-1: unknown).
 * If the attempt had to be undone, *nonce is replaced by a fresh one for
 * the attempts that follow. */
int rlock__attempt(rlock__call *call, rlock_mutex *m, rlock__as owner,
                   char mode, uint64_t *nonce, int64_t *hint_ms);

/* Acquires m as owner, waiting until deadline_ns (or for ever): the
 * layout's queue and messages where it has them, retries after a random
 * delay where not. RLOCK_ETIMEDOUT at the deadline, leaving no trace. */
int rlock__acquire(rlock__call *call, rlock_mutex *m, rlock__as owner,
                   int64_t deadline_ns, int forever);

/* Releases one level of owner's hold of m. */
int rlock__release(rlock__call *call, rlock_mutex *m, rlock__as owner);

/* Sets owner's lease of m to lease_ms from now. */
int rlock__extend(rlock__call *call, rlock_mutex *m, rlock__as owner,
                  int64_t lease_ms);

/* The fencing token of owner's hold of m into *token (0 on error): the
 * one the acquisition drew, or one drawn now from Redis (fence.c), which
 * also makes m's later acquisitions draw theirs at once. RLOCK_OK,
 * RLOCK_ENOTOWNER, RLOCK_ELOST (the hold is gone: it is marked lost),
 * RLOCK_EREPLICAS, or the request's error. */
int rlock__token(rlock__call *call, rlock_mutex *m, rlock__as owner,
                 uint64_t *token);

/* How long owner's hold of m lasts as counted (mu taken here): RLOCK_OK
 * and *left_ms > 0, RLOCK_ELOST (the hold is marked lost, not forgotten),
 * RLOCK_ENOTOWNER. */
int rlock__lease_left(rlock__call *call, rlock_mutex *m, rlock__as owner,
                      int64_t *left_ms);

/* Makes m's acquisitions draw their token at once (rlock_with passes it
 * to its callback). */
void rlock__want_tokens(rlock_mutex *m);

/* Makes m's acquisitions that nobody contends lean again (no token drawn
 * until asked for), as a new mutex's are. Only the form of the next
 * acquisitions changes: a lean hold draws its token within its hold,
 * which keeps every token greater than those of the holds before. */
void rlock__tokens_on_demand(rlock_mutex *m);

/* Forgets one level of owner's hold of m without telling Redis: the last
 * level forgets the hold (its lease runs out); an inner one only lowers
 * the client's count. */
void rlock__forget(rlock_mutex *m, rlock__as owner);

/* As rlock__forget, but a last level is given back to Redis in the
 * background (the undo of its acquisition, which hands the lock on to the
 * next waiter), rather than left standing for the rest of its lease: for
 * a hold taken that its call cannot return (its token could not be had). */
void rlock__give_up(rlock_mutex *m, rlock__as owner);

/* ---- what the calls tell the client's observers (report.c) ------------ */

/* An acquisition call on m as owner, begun at t0 (monotonic ns), ended
 * with rc after attempts requests: counted, and reported (mu not held).
 * waited: it found the lock busy first; handed: the hold was handed over
 * by its releaser. */
void rlock__report_acquire(rlock_mutex *m, rlock__as owner, int rc, int64_t t0,
                           int attempts, int waited, int handed);
/* One level of hold h of m was released, remaining are left (mu held,
 * h still in the table). */
void rlock__report_release(rlock_mutex *m, const rlock__hold *h,
                           int64_t remaining);
/* An extension of owner's hold of m to lease_ms succeeded (mu not
 * held). */
void rlock__report_extend(rlock_mutex *m, rlock__as owner, int64_t lease_ms);

/* The operators' calls: m's lock as Redis has it, and its removal. */
int rlock__status(rlock__call *call, rlock_mutex *m, rlock_status *st);
int rlock__force(rlock__call *call, rlock_mutex *m, unsigned flags,
                 rlock_status *removed);

#endif
