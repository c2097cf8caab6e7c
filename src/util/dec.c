/* SPDX-License-Identifier: BSD-3-Clause */
#include <string.h>

#include "util/dec.h"

size_t rlock__dec_len(uint64_t v)
{
    size_t n = 1;

    while (v >= 10) {
        v /= 10;
        n++;
    }
    return n;
}

size_t rlock__dec_u64(char *buf, uint64_t v)
{
    char tmp[RLOCK__DEC_MAX];
    size_t n = 0;

    /* Backwards into tmp, then copied in order. */
    do {
        tmp[sizeof tmp - ++n] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    memcpy(buf, tmp + sizeof tmp - n, n);
    return n;
}

size_t rlock__dec_i64(char *buf, int64_t v)
{
    if (v >= 0)
        return rlock__dec_u64(buf, (uint64_t)v);
    buf[0] = '-';
    /* -(v + 1) + 1: INT64_MIN has no positive counterpart in int64_t. */
    return 1 + rlock__dec_u64(buf + 1, (uint64_t)(-(v + 1)) + 1);
}
