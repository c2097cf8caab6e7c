/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Time and randomness.
 *
 * Leases are counted on CLOCK_MONOTONIC: a wall-clock jump (NTP step, an
 * operator's date command) must neither shorten nor lengthen what we
 * believe about a hold. Jitter needs no secrecy, but owner ids do, so ids
 * come from getrandom(2) and jitter from a per-thread xorshift seeded there.
 */
#include <errno.h>
#include <sys/random.h>
#include <time.h>

#include "internal.h"

int64_t rlock__now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * INT64_C(1000000000) + ts.tv_nsec;
}

int rlock__random_bytes(void *buf, size_t len)
{
    unsigned char *p = buf;

    while (len > 0) {
        ssize_t n = getrandom(p, len, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
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
