/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The wrappers behind harness/oom.h. The linker sends the library's calls
 * of malloc & co. to __wrap_malloc & co., and __real_malloc is libc's (a
 * sanitizer's, under one). One count for every thread: the allocations
 * from the armed one to the end of its span fail, and the others pass.
 */
#include <execinfo.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "harness/oom.h"

void *__real_malloc(size_t n);
void *__real_calloc(size_t k, size_t n);
void *__real_realloc(void *p, size_t n);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t k, size_t n);
void *__wrap_realloc(void *p, size_t n);
char *__wrap_strdup(const char *s);
char *__wrap_strndup(const char *s, size_t n);

static atomic_long first; /* the first allocation to fail (< 1: none) */
static atomic_long last;  /* and the last */
static atomic_long counted;
static atomic_int failed;

void rt_oom_arm(long nth)
{
    rt_oom_arm_span(nth, 1);
}

void rt_oom_arm_span(long nth, long span)
{
    atomic_store(&first, 0);
    atomic_store(&failed, 0);
    atomic_store(&counted, 0);
    atomic_store(&last, nth + span - 1);
    atomic_store(&first, nth);
}

int rt_oom_disarm(void)
{
    atomic_store(&first, 0);
    return atomic_load(&failed);
}

long rt_oom_count(void)
{
    return atomic_load(&counted);
}

/* Whether this allocation is one to fail. */
static int fails(void)
{
    long from = atomic_load_explicit(&first, memory_order_relaxed), k;

    if (from < 1)
        return 0;
    k = atomic_fetch_add(&counted, 1) + 1;
    if (k < from || k > atomic_load(&last))
        return 0;
    atomic_store(&failed, 1);
    if (getenv("RT_OOM_TRACE")) {
        /* Where it failed (RT_OOM_TRACE=1: for debugging a run). */
        void *at[32];
        backtrace_symbols_fd(at, backtrace(at, 32), 2);
    }
    return 1;
}

void *__wrap_malloc(size_t n)
{
    return fails() ? NULL : __real_malloc(n);
}

void *__wrap_calloc(size_t k, size_t n)
{
    return fails() ? NULL : __real_calloc(k, n);
}

void *__wrap_realloc(void *p, size_t n)
{
    return fails() ? NULL : __real_realloc(p, n);
}

char *__wrap_strdup(const char *s)
{
    return fails() ? NULL : __real_strdup(s);
}

char *__wrap_strndup(const char *s, size_t n)
{
    return fails() ? NULL : __real_strndup(s, n);
}
