/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The engine's calls as objects (issue 30, step 3): an acquisition
 * attempt, a release, an extension, a token drawn, the replica check of a
 * new hold, an undo, a wait. Each is a struct and a step function that
 * returns what it needs next (core/step.h: a request answered, the hold's
 * renewal to end, a sleep) or that it is done: its code is then the op's
 * rc, its detail in its call.
 *
 * Nothing in a step blocks: the client's mu is taken for work in memory
 * only. The blocking API runs each op to its end with rlock__run (a
 * request in poll(2) on the calling thread, as before); an event loop
 * runs the same ops from its callbacks. The ops nest (an attempt may
 * renew its new hold, which may give it back): an op steps its inner op
 * and passes its slot up.
 *
 * Not for use outside src/engine and the drivers.
 */
#ifndef RLOCK_ENGINE_OPS_H
#define RLOCK_ENGINE_OPS_H

#include <stdint.h>

#include "core/call.h"
#include "core/handles.h"
#include "core/owner.h"
#include "core/request.h"
#include "core/step.h"
#include "core/waiter.h"
#include "layout/layout.h"

/* Gives up acquisition nonce of owner now, by deadline_ns; where any
 * node did not confirm it, the background sends it again until one does
 * (rlock__undo_later). */
typedef struct rlock__undo_op {
    rlock_mutex *m;
    rlock__as owner;
    uint64_t nonce;
    int stage;
    rlock__call call; /* its own: the caller's detail stays */
    char who[RLOCK__OWNER_MAX];
    rlock__slot s;
} rlock__undo_op;

void rlock__undo_op_init(rlock__undo_op *u, int64_t deadline_ns, rlock_mutex *m,
                         rlock__as owner, uint64_t nonce);
int rlock__undo_step(rlock__undo_op *u, rlock__slot **slot);

/* Sets owner's lease of m to lease_ms from now (extend, a re-entry the
 * client counts, the renewal of a new hold). what names the call in
 * messages, what_done says what became of the hold when too few replicas
 * took it. */
typedef struct rlock__extend_op {
    rlock__call *call;
    rlock_mutex *m;
    rlock__as owner;
    int64_t lease_ms;
    const char *what, *what_done;
    int stage;
    int rc;
    uint64_t id, serial;
    int64_t t0, valid_until;
    char who[RLOCK__OWNER_MAX];
    rlock__slot s;
    rlock__undo_op undo;
} rlock__extend_op;

void rlock__extend_op_init(rlock__extend_op *e, rlock__call *call,
                           rlock_mutex *m, rlock__as owner, int64_t lease_ms,
                           const char *what, const char *what_done);
int rlock__extend_step(rlock__extend_op *e, rlock__slot **slot);

/* A re-entry of owner's hold of m that the client counts (Redis sees one
 * hold) is an extension to the mutex's lease, then the count goes up:
 * the extension op, ended by rlock__reenter_done. */
void rlock__reenter_op_init(rlock__extend_op *e, rlock__call *call,
                            rlock_mutex *m, rlock__as owner);
void rlock__reenter_done(rlock__extend_op *e);

/*
 * The new hold's check, as an op: owner's hold of m that this call just
 * took (recorded) is returned as held only with lease left: RLOCK_OK. A
 * hold whose counted lease is
 * already over, or that was marked lost, is given back: RLOCK_EBUSY (the
 * caller spends the acquisition's nonce and may try again). With the
 * mutex's replicas, it makes sure they have it; a hold with less than a
 * third of its lease left is renewed first; either failing gives it back
 * and returns the error (RLOCK_EREPLICAS, a connection error). Within the
 * call's deadline.
 */
typedef struct rlock__keep_op {
    rlock__call *call;
    rlock_mutex *m;
    rlock__as owner;
    int stage;
    int rc;
    uint64_t nonce;
    rlock__err why;
    union {
        rlock__extend_op extend;
        rlock__undo_op undo;
    } in;
} rlock__keep_op;

void rlock__keep_op_init(rlock__keep_op *k, rlock__call *call, rlock_mutex *m,
                         rlock__as owner);
int rlock__keep_step(rlock__keep_op *k, rlock__slot **slot);

/* What the nodes answered to one attempt (acquire.c). */
typedef struct rlock__tally {
    int got[RLOCK__NODES_MAX]; /* the node holds it for us */
    uint64_t tok[RLOCK__NODES_MAX];
    int held, busy, gone, unknown;
    int again;      /* a fast form asked for the full one */
    int plain;      /* a holding node found the lock free, nobody queued */
    uint64_t token; /* the largest of the holding nodes' */
    int64_t count;  /* the count a holding node reported */
    int64_t hint;   /* the longest lease left of a busy node's holder */
    int other_list; /* a busy node's holder lists that many nodes, not as
                       many as this client (0: none seen) */
} rlock__tally;

/* rlock__attempt (engine.h) as an op: *nonce_io and *hint_ms (may be
 * NULL) are the caller's, written as rlock__attempt writes them. */
typedef struct rlock__attempt_op {
    rlock__call *call;
    rlock_mutex *m;
    rlock__as owner;
    char mode;
    uint64_t *nonce_io;
    int64_t *hint_ms;
    int stage;
    int rc;
    int fresh;
    uint64_t serial;
    int64_t t0;
    char who[RLOCK__OWNER_MAX];
    rlock__acq a;
    rlock__tally t;
    rlock__slot s; /* the acquisition */
    union {
        rlock__slot again;       /* Redlock's second round (retoken) */
        rlock__extend_op extend; /* a re-entry the client counts */
        rlock__keep_op keep;
        rlock__undo_op undo;
    } in;
} rlock__attempt_op;

void rlock__attempt_op_init(rlock__attempt_op *o, rlock__call *call,
                            rlock_mutex *m, rlock__as owner, char mode,
                            uint64_t *nonce_io, int64_t *hint_ms);
int rlock__attempt_step(rlock__attempt_op *o, rlock__slot **slot);

/* rlock__acquire (engine.h) as an op: a wait for the lock, in steps of
 * attempts, sleeps, the new hold's check and leaving the queue (wait.c).
 * init registers its waiter with the client; the op ends (DONE) with it
 * removed again. */
typedef struct rlock__wait_op {
    rlock__call *call;
    rlock_mutex *m;
    rlock__as owner;
    int64_t deadline;
    int stage;
    int rc;
    rlock__waiter w;
    uint64_t nonce, old_nonce;
    int64_t bound;  /* no step ends later (0: none, a wait for ever) */
    int64_t t_base; /* a grant under nonce was made after this instant:
                       before the first attempt under it */
    unsigned cancel_gen;
    int drops;       /* connections lost under attempts in a row */
    int fails;       /* attempts failed as in a failover, in a row */
    unsigned moves;  /* c->moves when the subscription was looked at */
    int attempts;    /* requests sent */
    /* Yes or no, a byte each, in the ints' padding (10,000 waits on a
     * loop): */
    char forever;
    char wakes;       /* messages wake it */
    char queued;      /* it waits in Redis's queue: leaving takes its
                         place back */
    char attempted;   /* an attempt was made */
    char awaited_sub; /* it waited for the subscription once */
    char subscribed;  /* the subscription was active at the last look */
    char granted;     /* the lock was handed over, not taken */
    char gave_up;     /* the deadline came */
    char waited;      /* it slept at least once: the lock was busy */
    char messages;    /* a sleep that a message may end */
    int64_t hint_ms;  /* the last busy answer's lease left, -1 unknown */
    int64_t until;    /* a sleep's end */
    /* The current step's call (attempt, check, leave) and its op: room
     * the wait has while it is awake only, so that a sleeping waiter
     * costs little (10,000 of them on one loop). NULL while asleep. */
    struct rlock__wait_sub {
        rlock__call one;
        union {
            rlock__attempt_op attempt;
            rlock__keep_op keep;
            rlock__undo_op undo;
        } in;
    } * sub;
} rlock__wait_op;

void rlock__wait_op_init(rlock__wait_op *s, rlock__call *call, rlock_mutex *m,
                         rlock__as owner, int64_t deadline_ns, int forever);
int rlock__wait_step(rlock__wait_op *s, rlock__slot **slot);
/* The wait is canceled (stepped to its end by a driver that sends
 * nothing more): every limit of its own has passed, the deadline, the
 * bound of its steps and the deadline of the step under way (a quiet
 * step then ends at once rather than when that step's own call would),
 * and its sleep. */
void rlock__wait_op_expire(rlock__wait_op *s);

/* rlock__token (engine.h) as an op: the token into token. */
typedef struct rlock__fence_op {
    rlock__call *call;
    rlock_mutex *m;
    rlock__as owner;
    int stage;
    int rc;
    /* Set after init: only the token the hold has (0: none yet) is read;
     * nothing is asked of Redis and m is not marked (the async API's
     * lock, on a handle that draws tokens on demand). */
    int peek;
    uint64_t token, nonce, serial;
    char who[RLOCK__OWNER_MAX];
    rlock__slot s;
} rlock__fence_op;

void rlock__fence_op_init(rlock__fence_op *f, rlock__call *call, rlock_mutex *m,
                          rlock__as owner);
int rlock__fence_step(rlock__fence_op *f, rlock__slot **slot);

/* rlock__release (engine.h) as an op. */
typedef struct rlock__release_op {
    rlock__call *call;
    rlock_mutex *m;
    rlock__as owner;
    int stage;
    int rc;
    uint64_t id, token;
    int64_t count, remaining;
    int released, gone, unsure, unknown, fast, again, refused;
    const rlock__script *cad;
    char who[RLOCK__OWNER_MAX];
    char unnotified[200];
    rlock__slot s;
} rlock__release_op;

void rlock__release_op_init(rlock__release_op *r, rlock__call *call,
                            rlock_mutex *m, rlock__as owner);
int rlock__release_step(rlock__release_op *r, rlock__slot **slot);

/* The blocking driver: runs op (stepped by step) to its end on the
 * calling thread, each request by its slot's call, each quiet wait on
 * owner's hold of m by call's deadline. */
typedef int (*rlock__step_fn)(void *op, rlock__slot **slot);
void rlock__run(rlock__call *call, rlock_mutex *m, rlock__as owner,
                rlock__step_fn step, void *op);
/* Its RLOCK__STEP_QUIET: waits until owner's hold of m has no renewal or
 * extension in flight, or until call's deadline. */
void rlock__run_quiet(rlock__call *call, rlock_mutex *m, rlock__as owner);

#endif
