/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The hold table: what a client knows about the locks its owners hold.
 *
 * Redis is the authority on who holds a lock; this table is the client's
 * bookkeeping of its own holds: what names the hold to Redis (the nonce
 * of the acquisition that took it, or its token), a mirror of the hold
 * count, and when the lease ends on the monotonic clock. The
 * watchdog walks it to renew leases and to notice holds that ran out.
 * Everything here runs with the client's mu held.
 */
#ifndef RLOCK_CORE_HOLD_H
#define RLOCK_CORE_HOLD_H

#include <stddef.h>
#include <stdint.h>

#include <rlock/rlock.h>

#include "core/owner.h"

typedef struct rlock__hold {
    struct rlock__hold *next, *prev; /* the client's list of holds */
    struct rlock__hold *m_next;      /* the mutex's holds */
    struct rlock__hold *key_next;    /* hash chain by (name, owner) */
    struct rlock__hold *serial_next; /* hash chain by serial */
    uint64_t serial; /* unique in the client, for in-flight renewals */
    rlock_mutex *m;
    rlock__as owner; /* owns a reference on owner.obj */
    uint64_t token;       /* 0: not drawn yet (the layout's fence) */
    uint64_t nonce;       /* of the acquisition that took it */
    int64_t since;        /* monotonic ns: when it was taken (the
                             request sent), for its hold time */
    int64_t count;
    int64_t lease_ms;     /* the lease asked for */
    int64_t cur_lease_ms; /* the lease Redis last set (a grant may be
                             shorter; the watchdog tops it up) */
    int watchdog;         /* renewed by the background thread */
    uint32_t renewals;    /* renewals done so far */
    int64_t valid_until;  /* monotonic ns: lease end as far as we know */
    int64_t renew_at;     /* monotonic ns: next renewal (watchdog) */
    int lost;             /* the hold is gone (the next call on it says
                             ELOST; on_lost was queued, bg/notify.c) */
    int unreturned;       /* taken by a call that has not returned it yet:
                             a loss is that call's to handle (it gives the
                             hold back), never an on_lost */
    int releasing;        /* an unlock that may end the hold is in flight */
    int release_unknown;  /* a final unlock's reply was lost: it may have
                             released the lock already */
    int extending;        /* an owner's request that sets the lease is
                             in flight: rlock_mutex_extend, or a re-entry
                             whose count Redis keeps */
    int renewing;         /* a renewal of this hold is in flight */
    int64_t owed_ms;      /* the shortest lease that a request of this
                             hold never answered may still set (0: none) */
    int64_t owed_max_ms;  /* and the longest: a hold lost with such a
                             request out is given back after it */
} rlock__hold;

typedef struct rlock__holds {
    rlock__hold *list;       /* every hold, newest first */
    rlock__hold **by_key;    /* hash of holds by (name, layout, owner) */
    rlock__hold **by_serial; /* hash of holds by serial */
    size_t slots;            /* size of both, a power of two, or 0 */
    size_t n;
    uint64_t next_serial;
} rlock__holds;

/* Owner's hold of the lock m names (same name and layout, through any
 * mutex handle of the client), or NULL. */
rlock__hold *rlock__hold_find(rlock__holds *t, const rlock_mutex *m,
                              uint64_t owner);
rlock__hold *rlock__hold_by_serial(rlock__holds *t, uint64_t serial);
/* A new hold of m by owner, added to the table (serial set, a reference
 * on owner.obj taken); NULL if memory ran out. */
rlock__hold *rlock__hold_new(rlock__holds *t, rlock_mutex *m, rlock__as owner);
/*
 * Leases and requests that were never answered.
 *
 * A request that sets a hold's lease (a renewal, an extension, a re-entry)
 * and whose answer never came may still reach Redis later: held up in a
 * network, or queued behind a stalled server, it can run after a request
 * sent after it on another connection, and the lease it sets is then the
 * last one set. A shorter one would end the hold before the end the client
 * counted from the later request. So the client remembers the shortest
 * lease of its unanswered requests, for as long as the hold lasts (how late
 * such a request can run has no bound the client knows), and counts no
 * confirmed lease as longer than that.
 */
/* How long a lease of lease_ms that Redis confirmed setting for h is
 * counted: no longer than any of h's unanswered requests may still set. */
int64_t rlock__hold_countable(const rlock__hold *h, int64_t lease_ms);
/* A request of h that sets a lease of lease_ms got no answer. */
void rlock__hold_owe(rlock__hold *h, int64_t lease_ms);
/* A request of h that sets a lease, and that the client does not count,
 * may have run: the lease may end at end_ns (the request's sending plus
 * its lease, less the drift margin), if that is sooner than counted. A
 * renewal is then due at once (the caller wakes the background). */
void rlock__hold_may_end(rlock__hold *h, int64_t end_ns, int64_t now_ns);

/* When h's next renewal is due if t is when its period says: not before
 * a renewal, which sets h's own lease, would end the hold no sooner than
 * its lease end now. An extension may have set a lease longer than the
 * one renewals set; renewing it early would shorten the end the owner was
 * told of (rlock_mutex_lease_left), and a holder that stalls then would
 * lose the lock before that end. */
int64_t rlock__hold_renew_due(const rlock__hold *h, int64_t t);

/* The earliest lease end of the holds of t that are not lost or being
 * released, and no later than shortest_ms from now (for holds taken while
 * a round trip is under way, whose leases end no sooner than that): the
 * deadline of the background's round trips, so that no server can keep
 * it from telling a holder that its lease ran out (mu held). */
int64_t rlock__holds_end(const rlock__holds *t, int64_t shortest_ms);

/* Removes h from the table and frees it. */
void rlock__hold_remove(rlock__holds *t, rlock__hold *h);
/* Forgets every hold of m, or of the whole table (m NULL), which is then
 * freed (it grows again on the next add). */
void rlock__hold_clear(rlock__holds *t, rlock_mutex *m);

#endif
