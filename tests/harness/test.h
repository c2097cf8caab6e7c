/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A small test framework in libuv's manner: each test is a function
 * registered in tests/list.h, run in its own process by the runner, and
 * driven by CTest. A failed CHECK prints where and why and exits 1; the
 * harness then stops every server the test started.
 */
#ifndef RLOCK_TEST_TEST_H
#define RLOCK_TEST_TEST_H

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <rlock/rlock.h>

#include "../checker/checker.h"
#include "server.h"

#define TEST(name)                                                             \
    void test_##name(void);                                                    \
    void test_##name(void)

void rt_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 3, 4)));

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond))                                                           \
            rt_fail(__FILE__, __LINE__, "CHECK(%s) failed", #cond);            \
    } while (0)

#define CHECK_INT(a, op, b)                                                    \
    do {                                                                       \
        long long a_ = (long long)(a), b_ = (long long)(b);                    \
        if (!(a_ op b_))                                                       \
            rt_fail(__FILE__, __LINE__, "%s %s %s failed: %lld vs %lld", #a,   \
                    #op, #b, a_, b_);                                          \
    } while (0)

/* Checks an rlock return code, naming both codes on failure. */
#define CHECK_RC(expr, want)                                                   \
    do {                                                                       \
        int got_ = (expr), want_ = (want);                                     \
        if (got_ != want_)                                                     \
            rt_fail(__FILE__, __LINE__, "%s returned %d (%s), want %d (%s)",   \
                    #expr, got_, rlock_strerror(got_), want_,                  \
                    rlock_strerror(want_));                                    \
    } while (0)

/* Polls until cond holds, at most ms milliseconds; fails the test
 * otherwise. For conditions that become true eventually (a background
 * renewal, a child queued in Redis), never as a timing assertion. */
#define RT_WAIT_UNTIL(cond, ms)                                                \
    do {                                                                       \
        int64_t until_ = rt_now_ms() + (ms);                                   \
        while (!(cond)) {                                                      \
            if (rt_now_ms() > until_)                                          \
                rt_fail(__FILE__, __LINE__, "timed out waiting for %s",        \
                        #cond);                                                \
            rt_sleep_ms(2);                                                    \
        }                                                                      \
    } while (0)

/* rlock_mutex_lock(m) on a thread of its own (the hold belongs to that
 * thread). With unlock_after, the thread unlocks once it holds the lock.
 * rt_locker_join waits for the thread and returns the lock's result. */
typedef struct rt_locker {
    rlock_mutex *m;
    int unlock_after;
    int rc;
    uint64_t token;  /* the hold's token, 0 if none */
    atomic_int done; /* the lock call returned (read while it runs) */
    pthread_t thread;
} rt_locker;

void rt_locker_start(rt_locker *l, rlock_mutex *m, int unlock_after);
int rt_locker_join(rt_locker *l);

/* An on_lost callback that counts its calls in rt_lost_calls (reset it
 * before the hold); arg is ignored. */
extern atomic_int rt_lost_calls;
void rt_count_lost(rlock_mutex *m, void *arg);

/* Runs the checker (checker/checker.h) and prints its summary; fails the
 * test if it found a violation. Returns the figures. */
rt_check_result rt_checker_passes(const rt_check_opts *o);
/* As rt_checker_passes, and every worker made all its holds, the counter
 * is exact and no holds overlapped: a run no fault was meant to disturb. */
rt_check_result rt_checker_completes(const rt_check_opts *o);

/* Checks that rlock_client_open refuses each of n URLs with RLOCK_EINVAL
 * (and opens nothing). */
void rt_check_urls_refused(const char *const *urls, size_t n);

/* Helpers shared by the tests (harness/util.c). */
int64_t rt_now_ms(void);
void rt_sleep_ms(int64_t ms);
/* Threads of this process now (/proc/self/status). */
int rt_thread_count(void);
/* Opens a client on url with opts (NULL: defaults), failing the test if it
 * cannot. */
rlock_client *rt_client(const char *url, const rlock_client_opts *opts);
rlock_mutex *rt_mutex(rlock_client *c, const char *name,
                      const rlock_mutex_opts *opts);
/* Forks a child that runs fn(arg) and exits with its result. */
pid_t rt_fork(int (*fn)(void *arg), void *arg);
/* Waits for a child and returns its exit status (128+N if killed by N). */
int rt_wait(pid_t pid);

#endif
