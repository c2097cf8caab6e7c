/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * One call's context: its deadline and the detail of its error, passed
 * explicitly from the public function that starts the call down to the
 * connection that carries each exchange.
 *
 * Every API call fixes its deadline when it starts (the command timeout
 * from then, see rlock.h's Deadlines); every exchange it makes ends by
 * it. A waiting call starts a fresh context for each attempt. The
 * background thread's calls carry the earliest lease end of the client's
 * holds instead, so that no server can keep it from telling a holder that
 * its lease ran out.
 */
#ifndef RLOCK_CORE_CALL_H
#define RLOCK_CORE_CALL_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

/*
 * The detail of a call's error is kept in a buffer of RLOCK__ERR_MAX bytes
 * allocated at its first failure (msg NULL before): most calls never
 * fail, and an async waiter keeps its call for as long as it waits
 * (10,000 of them on one loop: 512 bytes each was a third of a waiter).
 * So whoever inits a call ends it (rlock__call_end, or rlock__api_done
 * for a public call's), and before it inits it again.
 */
typedef struct rlock__call {
    int64_t deadline_ns; /* monotonic; 0: none (each exchange its own) */
    int code;            /* RLOCK_OK while nothing failed */
    char *msg;           /* the detail, NUL-terminated, or NULL: none */
} rlock__call;

/* A fresh context that ends at deadline_ns (0: no call-wide deadline),
 * with no error. call's memory is taken as new: a detail from an earlier
 * use must have been given back (rlock__call_end). */
void rlock__call_init(rlock__call *call, int64_t deadline_ns);
/* Gives back call's detail (call stays usable, with no error). */
void rlock__call_end(rlock__call *call);

/* Records code and its detail in call and returns code. Out of memory,
 * the code is kept and the detail lost. */
int rlock__fail(rlock__call *call, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The detail ("" when none). */
const char *rlock__call_msg(const rlock__call *call);
/* The detail's buffer, RLOCK__ERR_MAX bytes, allocated (as "") if call
 * had none: for code that gathers causes in it. NULL out of memory. */
char *rlock__call_buf(rlock__call *call);
/* Cuts the detail back to its first len bytes (as it was before causes
 * were gathered in its buffer): none at all when len is 0. */
void rlock__call_cut(rlock__call *call, size_t len);
/* e (code and detail) into call, and returns e's code. */
int rlock__call_set(rlock__call *call, const rlock__err *e);
/* call's code and detail into e. */
void rlock__call_get(const rlock__call *call, rlock__err *e);
/* from's code and detail move to call (from is left with no error). */
void rlock__call_take(rlock__call *call, rlock__call *from);

/* When an exchange that may take timeout_ms must end: timeout_ms from
 * now, or the call's deadline if that is sooner. */
int64_t rlock__call_until(const rlock__call *call, int timeout_ms);

#endif
