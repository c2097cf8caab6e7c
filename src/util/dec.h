/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Numbers as decimal text, without printf: every request carries a few
 * (counts, leases, nonces, argument lengths), and snprintf's generality
 * cost more client CPU per lock than the rest of the request's building
 * (docs/performance.md).
 */
#ifndef RLOCK_UTIL_DEC_H
#define RLOCK_UTIL_DEC_H

#include <stddef.h>
#include <stdint.h>

/* Most bytes either writes: "-9223372036854775808", 18446744073709551615. */
#define RLOCK__DEC_MAX 20

/* How many digits v has (1 to 20). */
size_t rlock__dec_len(uint64_t v);
/* The digits of v at buf (no NUL); returns how many (1 to 20). */
size_t rlock__dec_u64(char *buf, uint64_t v);
/* The same for a signed value, '-' first if negative. */
size_t rlock__dec_i64(char *buf, int64_t v);

#endif
