/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Fuzz target: the numbers rlock(1) reads from its arguments and
 * environment: durations (parse_duration: -w, -l, --seconds,
 * RLOCK_WATCHDOG_LEASE) and integers (parse_number: -E, --workers).
 *
 * The checks are the tool's documented contract (rlock(1): "DUR is a
 * duration: 250ms, 30s, 5m, 1h, or plain seconds such as 2.5. Anything
 * else is a usage error"):
 *  - an accepted duration is in [0, RLOCK_MS_MAX] ms and is written as
 *    digits with at most one '.', then nothing, "ms", "s", "m" or "h";
 *  - a whole number of such units is accepted exactly when it is in range,
 *    and gives exactly that many milliseconds;
 *  - an accepted integer is in [lo, hi] and is written as an optional sign
 *    and digits; plain digits in range are always accepted, exactly.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#include "fuzz.h"

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* Splits s into its number and unit as the man page writes them; returns
 * the unit's scale in ms, or 0 if s is not of that form. *whole is set if
 * the number is plain digits, with *value their value (when it fits). */
static uint64_t grammar(const char *s, int *whole, uint64_t *value)
{
    size_t i = 0, digits = 0, dots = 0;
    const char *unit;

    *whole = 1;
    *value = 0;
    for (; is_digit(s[i]) || s[i] == '.'; i++) {
        if (s[i] == '.') {
            dots++;
            *whole = 0;
        } else {
            digits++;
            if (*value <= UINT64_MAX / 10 - 9)
                *value = *value * 10 + (uint64_t)(s[i] - '0');
            else
                *whole = 0; /* too long to check exactly */
        }
    }
    if (digits == 0 || dots > 1)
        return 0;
    unit = s + i;
    if (strcmp(unit, "") == 0 || strcmp(unit, "s") == 0)
        return 1000;
    if (strcmp(unit, "ms") == 0)
        return 1;
    if (strcmp(unit, "m") == 0)
        return 60 * 1000;
    if (strcmp(unit, "h") == 0)
        return 3600 * 1000;
    return 0;
}

static void check_duration(const char *s)
{
    int64_t ms = -12345;
    int rc = parse_duration(s, &ms), whole;
    uint64_t value, scale = grammar(s, &whole, &value);

    FUZZ_CHECK(rc == 0 || rc == -1);
    if (rc == 0) {
        FUZZ_CHECK(ms >= 0 && ms <= RLOCK_MS_MAX);
        FUZZ_CHECK(scale != 0);
    } else {
        FUZZ_CHECK(ms == -12345); /* untouched on failure */
    }
    if (scale != 0 && whole && value <= UINT64_MAX / scale) {
        int in_range = value * scale <= (uint64_t)RLOCK_MS_MAX;
        FUZZ_CHECK((rc == 0) == in_range);
        FUZZ_CHECK(!in_range || (uint64_t)ms == value * scale);
    }
}

static void check_number(const char *s, long lo, long hi)
{
    long v = 12345;
    int rc = parse_number(s, lo, hi, &v);
    size_t i = (s[0] == '-' || s[0] == '+') ? 1 : 0, digits = 0;
    unsigned long long plain = 0;
    int all_digits = 1;

    FUZZ_CHECK(rc == 0 || rc == -1);
    for (; s[i]; i++) {
        if (!is_digit(s[i])) {
            all_digits = 0;
            break;
        }
        digits++;
        if (digits <= 18)
            plain = plain * 10 + (unsigned long long)(s[i] - '0');
    }
    if (rc == 0) {
        FUZZ_CHECK(v >= lo && v <= hi);
        FUZZ_CHECK(all_digits && digits > 0);
    } else {
        FUZZ_CHECK(v == 12345);
    }
    if (all_digits && digits > 0 && digits <= 18 && is_digit(s[0])) {
        int in_range = (lo <= 0 || plain >= (unsigned long long)lo) &&
                       (hi >= 0 && plain <= (unsigned long long)hi);
        FUZZ_CHECK((rc == 0) == in_range);
        FUZZ_CHECK(!in_range || (unsigned long long)v == plain);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = fuzz_cstr(data, size);

    check_duration(s);
    check_number(s, 0, 255); /* rlock run -E */
    check_number(s, 1, 64);  /* rlock demo --workers */
    check_number(s, LONG_MIN, LONG_MAX);
    free(s);
    return 0;
}
