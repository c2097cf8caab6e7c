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

#include <stdint.h>

#include "util/err.h"

typedef struct rlock__call {
    int64_t deadline_ns; /* monotonic; 0: none (each exchange its own) */
    rlock__err err;      /* what went wrong, if anything */
} rlock__call;

/* A fresh context that ends at deadline_ns (0: no call-wide deadline). */
void rlock__call_init(rlock__call *call, int64_t deadline_ns);

/* Records code and its detail in call and returns code. */
int rlock__fail(rlock__call *call, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* When an exchange that may take timeout_ms must end: timeout_ms from
 * now, or the call's deadline if that is sooner. */
int64_t rlock__call_until(const rlock__call *call, int timeout_ms);

#endif
