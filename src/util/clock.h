/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Time: the monotonic clock every lease and deadline is counted on, and
 * the random spread of retries.
 *
 * Leases are counted on CLOCK_MONOTONIC: a wall-clock jump (an NTP step,
 * an operator's date command) must neither shorten nor lengthen what the
 * library believes about a hold.
 */
#ifndef RLOCK_UTIL_CLOCK_H
#define RLOCK_UTIL_CLOCK_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

#define RLOCK__NS_PER_MS INT64_C(1000000)

/* CLOCK_MONOTONIC, in ns. */
int64_t rlock__now_ns(void);

/* ms from now, as an absolute monotonic time in ns. */
static inline int64_t rlock__after_ms(int64_t ms)
{
    return rlock__now_ns() + ms * RLOCK__NS_PER_MS;
}

/* The earlier of two absolute times, 0 meaning "none". */
static inline int64_t rlock__earlier(int64_t a, int64_t b)
{
    if (a == 0)
        return b;
    if (b == 0)
        return a;
    return a < b ? a : b;
}

/* An absolute monotonic time as a timespec (pthread_cond_timedwait on a
 * condition variable that runs on CLOCK_MONOTONIC). */
struct timespec rlock__timespec(int64_t ns);

/* Initialises cv to time its waits on CLOCK_MONOTONIC, as every wait of
 * the library is (rlock__timespec). */
void rlock__cond_init(pthread_cond_t *cv);

/* Uniform random integer in [lo, hi]; not for secrets. Thread-safe. */
int64_t rlock__jitter(int64_t lo, int64_t hi);

#endif
