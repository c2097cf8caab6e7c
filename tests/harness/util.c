/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The test runner's helpers: failing a test, time, clients, children.
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test.h"

void rt_fail(const char *file, int line, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "%s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    fflush(stderr);
    exit(1);
}

int64_t rt_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int rt_thread_count(void)
{
    char line[256];
    int n = -1;
    FILE *f = fopen("/proc/self/status", "r");

    CHECK(f != NULL);
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "Threads: %d", &n) == 1)
            break;
    fclose(f);
    return n;
}

void rt_sleep_ms(int64_t ms)
{
    struct timespec ts;

    ts.tv_sec = (time_t)(ms / 1000);
    ts.tv_nsec = (long)(ms % 1000) * 1000000L;
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

rlock_client *rt_client(const char *url, const rlock_client_opts *opts)
{
    int err = 0;
    rlock_client *c = rlock_client_open(url, opts, &err);

    if (!c)
        rt_fail(__FILE__, __LINE__, "rlock_client_open(%s): %s: %s", url,
                rlock_strerror(err), rlock_client_errmsg(NULL));
    return c;
}

rlock_mutex *rt_mutex(rlock_client *c, const char *name,
                      const rlock_mutex_opts *opts)
{
    int err = 0;
    rlock_mutex *m = rlock_mutex_new(c, name, opts, &err);

    if (!m)
        rt_fail(__FILE__, __LINE__, "rlock_mutex_new(%s): %s", name,
                rlock_strerror(err));
    return m;
}

pid_t rt_fork(int (*fn)(void *arg), void *arg)
{
    pid_t pid;

    fflush(NULL);
    pid = fork();
    if (pid < 0)
        rt_fail(__FILE__, __LINE__, "fork: %s", strerror(errno));
    if (pid == 0)
        _exit(fn(arg));
    return pid;
}

int rt_wait(pid_t pid)
{
    int status;

    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            rt_fail(__FILE__, __LINE__, "waitpid: %s", strerror(errno));
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return WEXITSTATUS(status);
}

static void *locker_main(void *p)
{
    rt_locker *l = p;

    l->rc = rlock_mutex_lock(l->m);
    l->token = l->rc == RLOCK_OK ? rlock_mutex_token(l->m) : 0;
    l->done = 1;
    if (l->rc == RLOCK_OK && l->unlock_after)
        rlock_mutex_unlock(l->m);
    return NULL;
}

void rt_locker_start(rt_locker *l, rlock_mutex *m, int unlock_after)
{
    l->m = m;
    l->unlock_after = unlock_after;
    l->rc = 0;
    l->token = 0;
    l->done = 0;
    if (pthread_create(&l->thread, NULL, locker_main, l) != 0)
        rt_fail(__FILE__, __LINE__, "pthread_create failed");
}

int rt_locker_join(rt_locker *l)
{
    pthread_join(l->thread, NULL);
    return l->rc;
}

atomic_int rt_lost_calls;

void rt_count_lost(rlock_mutex *m, void *arg)
{
    (void)m;
    (void)arg;
    atomic_fetch_add(&rt_lost_calls, 1);
}

void rt_check_urls_refused(const char *const *urls, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++) {
        int err = 0;
        rlock_client *c = rlock_client_open(urls[i], NULL, &err);
        if (c || err != RLOCK_EINVAL)
            rt_fail(__FILE__, __LINE__, "%s: got %d (%s)", urls[i], err,
                    rlock_client_errmsg(NULL));
    }
}

rt_check_result rt_checker_passes(const rt_check_opts *o)
{
    rt_check_result r;
    int rc = rt_check_run(o, &r);

    rt_check_print(stderr, &r);
    if (rc != 0)
        rt_fail(__FILE__, __LINE__, "the checker found a violation");
    return r;
}

rt_check_result rt_checker_completes(const rt_check_opts *o)
{
    rt_check_result r = rt_checker_passes(o);

    CHECK_INT(r.holds, ==, (long)o->workers * o->iterations);
    CHECK_INT(r.counter, ==, r.holds);
    CHECK_INT(r.overlaps, ==, 0);
    return r;
}
