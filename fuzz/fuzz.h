/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Shared by the fuzz targets and their standalone driver.
 *
 * Each target defines LLVMFuzzerTestOneInput. Built with RLOCK_FUZZ (clang)
 * it is linked with libFuzzer; otherwise with standalone.c, which replays
 * the files it is given, so that every seed and every past crash runs as an
 * ordinary test in the sanitizer builds.
 */
#ifndef RLOCK_FUZZ_H
#define RLOCK_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* An invariant of the code under test. A violation aborts, which libFuzzer
 * reports as a crash (saving the input) and which fails a replay test. */
#define FUZZ_CHECK(cond)                                                       \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: invariant violated: %s\n", __FILE__,       \
                    __LINE__, #cond);                                          \
            abort();                                                           \
        }                                                                      \
    } while (0)

/* The input as a C string, cut at its first NUL byte (malloc'ed; exits on
 * out of memory). */
static inline char *fuzz_cstr(const uint8_t *data, size_t size)
{
    const uint8_t *nul = size ? memchr(data, '\0', size) : NULL;
    size_t n = nul ? (size_t)(nul - data) : size;
    char *s = malloc(n + 1);

    if (!s)
        abort();
    if (n)
        memcpy(s, data, n);
    s[n] = '\0';
    return s;
}

#endif
