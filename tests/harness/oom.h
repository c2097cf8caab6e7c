/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Allocation failures on demand, for the tests of the library's interior.
 * rlock_internal_tests is linked with --wrap for malloc, calloc, realloc,
 * strdup and strndup, so every allocation rlock's own code makes (the
 * static library's objects) passes through here, on any thread; the
 * allocations of hiredis, OpenSSL, c-ares and libc itself do not.
 * Disarmed, the wrappers only pass the call on.
 */
#ifndef RLOCK_TEST_OOM_H
#define RLOCK_TEST_OOM_H

/* From now on the nth allocation (1: the next) fails, once, whichever
 * thread makes it; the others succeed. */
void rt_oom_arm(long nth);
/* The same for span allocations from the nth on (a lasting shortage:
 * what a fallback that itself allocates meets). */
void rt_oom_arm_span(long nth, long span);
/* Disarms; returns whether the armed failure happened. */
int rt_oom_disarm(void);
/* Allocations made since the last arm (all of them, once none failed). */
long rt_oom_count(void);

#endif
