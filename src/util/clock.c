/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Time, and the jitter of retries: a per-thread xorshift seeded from the
 * OS random source. Jitter needs no secrecy (owner ids do, random.c).
 */
#include "util/clock.h"
#include "util/random.h"

int64_t rlock__now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * INT64_C(1000000000) + ts.tv_nsec;
}

struct timespec rlock__timespec(int64_t ns)
{
    struct timespec ts;

    ts.tv_sec = (time_t)(ns / 1000000000);
    ts.tv_nsec = (long)(ns % 1000000000);
    return ts;
}

static _Thread_local uint64_t tl_rng;

int64_t rlock__jitter(int64_t lo, int64_t hi)
{
    uint64_t x;

    if (hi <= lo)
        return lo;
    while (tl_rng == 0) {
        if (rlock__random_bytes(&tl_rng, sizeof tl_rng) != 0)
            tl_rng = (uint64_t)rlock__now_ns() | 1;
    }
    /* xorshift64: plenty for spreading retries apart. */
    x = tl_rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    tl_rng = x;
    return lo + (int64_t)(x % (uint64_t)(hi - lo + 1));
}

void rlock__cond_init(pthread_cond_t *cv)
{
    pthread_condattr_t a;

    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
}
