/* SPDX-License-Identifier: BSD-3-Clause */
/* The tests' own loop for the event-loop API, and the mutex's behaviour
 * over any deployment through it (aloop.h). */
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <rlock/async.h>

#include "harness/aloop.h"
#include "harness/test.h"

static void watch(void *arg, int fd, int events)
{
    rt_aloop *p = arg;
    struct stat st;
    int i;

    for (i = 0; i < p->n; i++)
        if (p->fds[i].fd == fd)
            break;
    if (events == 0) {
        CHECK(fcntl(fd, F_GETFD) != -1); /* forgotten before it closes */
        if (i < p->n) {
            /* ... and still the file it watched (not one that took its
             * number meanwhile). */
            CHECK(fstat(fd, &st) == 0);
            CHECK(p->file[i][0] == (uint64_t)st.st_dev &&
                  p->file[i][1] == (uint64_t)st.st_ino);
            p->fds[i] = p->fds[--p->n];
            memcpy(p->file[i], p->file[p->n], sizeof p->file[i]);
        }
        return;
    }
    CHECK(fstat(fd, &st) == 0);
    if (i == p->n) {
        CHECK(p->n < RT_ALOOP_FDS);
        p->n++;
        p->file[i][0] = (uint64_t)st.st_dev;
        p->file[i][1] = (uint64_t)st.st_ino;
    } else {
        /* Still the file that was registered (an epoll set follows the
         * file, not the number). */
        CHECK(p->file[i][0] == (uint64_t)st.st_dev &&
              p->file[i][1] == (uint64_t)st.st_ino);
    }
    p->fds[i].fd = fd;
    p->fds[i].events = (short)(((events & RLOCK_ASYNC_READ) ? POLLIN : 0) |
                               ((events & RLOCK_ASYNC_WRITE) ? POLLOUT : 0));
}

static void timer(void *arg, int64_t after_ms)
{
    rt_aloop *p = arg;

    p->due_ms = after_ms < 0 ? -1 : rt_now_ms() + after_ms;
}

static void cleanup(void *arg)
{
    rt_aloop *p = arg;

    CHECK_INT(p->n, ==, 0);       /* every descriptor forgotten first */
    CHECK_INT(p->due_ms, ==, -1); /* and the timer */
    p->cleanups++;
}

int rt_al_try_attach(rt_aloop *p, rlock_async *a)
{
    rlock_async_hooks h;

    memset(p, 0, sizeof *p);
    memset(&h, 0, sizeof h);
    p->due_ms = -1;
    p->a = a;
    h.cleanup = cleanup;
    h.watch = watch;
    h.timer = timer;
    h.arg = p;
    return rlock_async_attach(a, &h);
}

void rt_al_attach(rt_aloop *p, rlock_async *a)
{
    CHECK_RC(rt_al_try_attach(p, a), RLOCK_OK);
}

void rt_al_turn(rt_aloop *p)
{
    struct pollfd fds[RT_ALOOP_FDS];
    int i, n = p->n, ms = 50;
    int64_t t0;

    if (p->due_ms >= 0) {
        int64_t left = p->due_ms - rt_now_ms();
        ms = left < 0 ? 0 : left < 50 ? (int)left : 50;
    }
    memcpy(fds, p->fds, sizeof *fds * (size_t)n);
    for (i = 0; i < n; i++) {
        struct stat st;
        fds[i].revents = 0;
        /* Every watched number still names the file registered. */
        CHECK(fstat(fds[i].fd, &st) == 0);
        CHECK(p->file[i][0] == (uint64_t)st.st_dev &&
              p->file[i][1] == (uint64_t)st.st_ino);
    }
    CHECK(poll(fds, (nfds_t)n, ms) >= 0);
    t0 = rt_now_ms();
    for (i = 0; i < n; i++) {
        int ev = 0;
        CHECK(!(fds[i].revents & POLLNVAL));
        if (fds[i].revents & (POLLIN | POLLERR | POLLHUP))
            ev |= RLOCK_ASYNC_READ;
        if (fds[i].revents & (POLLOUT | POLLERR | POLLHUP))
            ev |= RLOCK_ASYNC_WRITE;
        /* (A callback may have closed the client: p->a is NULL then.) */
        if (ev && p->a)
            rlock_async_ready(p->a, fds[i].fd, ev);
    }
    if (p->a && p->due_ms >= 0 && rt_now_ms() >= p->due_ms) {
        p->due_ms = -1;
        p->timers++;
        rlock_async_timeout(p->a);
    }
    p->turns++;
    if (rt_now_ms() - t0 > p->longest_ms)
        p->longest_ms = rt_now_ms() - t0;
}

void rt_al_until(rt_aloop *p, const int *flag, int64_t ms)
{
    int64_t t0 = rt_now_ms();

    while (!*flag && rt_now_ms() - t0 < ms)
        rt_al_turn(p);
}

void rt_al_for(rt_aloop *p, int64_t ms)
{
    static const int never = 0;

    rt_al_until(p, &never, ms);
}

/* ---- the mutex's behaviour on a deployment ------------------------------ */

typedef struct dep_seen {
    int calls, status;
    uint64_t token;
} dep_seen;

static void dep_locked(rlock_async_mutex *m, int status, uint64_t token,
                       void *arg)
{
    dep_seen *s = arg;

    (void)m;
    s->calls++;
    s->status = status;
    s->token = token;
}

static void dep_done(rlock_async_mutex *m, int status, void *arg)
{
    dep_seen *s = arg;

    (void)m;
    s->calls++;
    s->status = status;
}

static pthread_t dep_loop_thread;

static void dep_lost(rlock_mutex *m, void *arg)
{
    dep_seen *s = arg;

    (void)m;
    /* On the loop's thread. */
    CHECK(pthread_equal(pthread_self(), dep_loop_thread));
    s->calls++;
}

static int dep_call(rt_aloop *p, dep_seen *s, int rc)
{
    CHECK_RC(rc, RLOCK_OK);
    CHECK_INT(s->calls, ==, 0); /* never inside the call */
    rt_al_until(p, &s->calls, 30000);
    CHECK_INT(s->calls, ==, 1);
    return s->status;
}

int rt_al_lock(rt_aloop *p, rlock_async_mutex *m, int64_t wait_ms)
{
    dep_seen s;

    memset(&s, 0, sizeof s);
    return dep_call(p, &s, rlock_async_lock(m, wait_ms, dep_locked, &s));
}

int rt_al_unlock(rt_aloop *p, rlock_async_mutex *m)
{
    dep_seen s;

    memset(&s, 0, sizeof s);
    return dep_call(p, &s, rlock_async_unlock(m, dep_done, &s));
}

rlock_async *rt_async_past_a_silent_node(rt_aloop *p, const char *what,
                                         const char *url, const char *name,
                                         int64_t connect_ms,
                                         rlock_async_mutex **m)
{
    rlock_client_opts o;
    rlock_async *a;
    int64_t t0, took;
    int err;

    rlock_client_opts_init(&o);
    o.connect_timeout_ms = (int)connect_ms;
    o.command_timeout_ms = 5000;
    t0 = rt_now_ms();
    CHECK((a = rlock_async_open(url, &o, &err)) != NULL);
    CHECK_INT(rt_now_ms() - t0, <, connect_ms / 2);
    rt_al_attach(p, a);
    CHECK((*m = rlock_async_mutex_new(a, name, NULL, &err)) != NULL);
    t0 = rt_now_ms();
    CHECK_RC(rt_al_lock(p, *m, 0), RLOCK_OK);
    took = rt_now_ms() - t0;
    printf("%s: the first lock past a silent node took %lld ms; longest "
           "turn %lld ms in %d turns\n",
           what, (long long)took, (long long)p->longest_ms, p->turns);
    CHECK_INT(took, >=, connect_ms - 50); /* the silent one was asked */
    CHECK_INT(p->longest_ms, <, connect_ms / 2);
    /* Where the lock lives is known now: nobody is asked again. */
    t0 = rt_now_ms();
    CHECK_RC(rt_al_unlock(p, *m), RLOCK_OK);
    CHECK_RC(rt_al_lock(p, *m, 0), RLOCK_OK);
    CHECK_INT(rt_now_ms() - t0, <, connect_ms / 2);
    return a;
}

int rt_async_nobody_answers(rt_aloop *p, const char *what, const char *url,
                            const char *name, int64_t connect_ms, char *msg,
                            size_t len)
{
    rlock_client_opts o;
    rlock_async *a;
    rlock_async_mutex *m;
    int64_t t0, took;
    int err, rc;

    rlock_client_opts_init(&o);
    o.connect_timeout_ms = (int)connect_ms;
    o.command_timeout_ms = 5000;
    CHECK((a = rlock_async_open(url, &o, &err)) != NULL);
    rt_al_attach(p, a);
    CHECK((m = rlock_async_mutex_new(a, name, NULL, &err)) != NULL);
    t0 = rt_now_ms();
    rc = rt_al_lock(p, m, 0);
    took = rt_now_ms() - t0;
    snprintf(msg, len, "%s", rlock_async_errmsg(m));
    printf("%s, nobody answers: %s in %lld ms (%s), longest turn %lld ms\n",
           what, rlock_strerror(rc), (long long)took, msg,
           (long long)p->longest_ms);
    CHECK_INT(took, >=, connect_ms - 50);
    CHECK_INT(took, <, 4000);
    CHECK_INT(p->longest_ms, <, connect_ms / 2);
    rlock_async_mutex_free(m);
    rlock_async_close(a);
    CHECK_INT(p->n, ==, 0);
    return rc;
}

void rt_async_deployment(const char *what, const char *url,
                         const rlock_client_opts *opts, int64_t wake_ms,
                         void (*take_away)(const char *name, void *arg),
                         void *arg)
{
    rlock_client_opts co;
    rlock_mutex_opts mo;
    rlock_async *a;
    rlock_async_mutex *m1, *m2, *m3, *w;
    rlock_client *bc;
    rlock_mutex *bm;
    dep_seen s1, s2, s3, lost, sw;
    rt_aloop p;
    int64_t t0, handed_ms;
    int err;

    dep_loop_thread = pthread_self();
    if (opts)
        co = *opts;
    else
        rlock_client_opts_init(&co);
    /* Leases short enough that the test sees the loop renew them (and
     * over nine times Redlock's default node timeout). */
    co.watchdog_lease_ms = 1500;
    if (!(a = rlock_async_open(url, &co, &err)))
        rt_fail(__FILE__, __LINE__, "%s: %s", what, rlock_client_errmsg(NULL));
    rt_al_attach(&p, a);
    CHECK((m1 = rlock_async_mutex_new(a, "dep-x", NULL, &err)) != NULL);
    CHECK((m2 = rlock_async_mutex_new(a, "dep-x", NULL, &err)) != NULL);
    memset(&s1, 0, sizeof s1);
    CHECK_RC(dep_call(&p, &s1, rlock_async_lock(m1, 0, dep_locked, &s1)),
             RLOCK_OK);
    CHECK(s1.token > 0);
    memset(&s2, 0, sizeof s2);
    CHECK_RC(rlock_async_lock(m2, 20000, dep_locked, &s2), RLOCK_OK);
    /* Held past two leases: renewed by the loop; the wait goes on, and
     * a blocking client of the same deployment is refused meanwhile. */
    CHECK((bc = rlock_client_open(url, opts, &err)) != NULL);
    CHECK((bm = rlock_mutex_new(bc, "dep-x", NULL, &err)) != NULL);
    rt_al_for(&p, 3500);
    CHECK_INT(s2.calls, ==, 0);
    CHECK_RC(rlock_mutex_trylock(bm), RLOCK_EBUSY);
    memset(&s3, 0, sizeof s3);
    CHECK_RC(dep_call(&p, &s3, rlock_async_extend(m1, 5000, dep_done, &s3)),
             RLOCK_OK);
    memset(&s3, 0, sizeof s3);
    t0 = rt_now_ms();
    CHECK_RC(dep_call(&p, &s3, rlock_async_unlock(m1, dep_done, &s3)),
             RLOCK_OK);
    rt_al_until(&p, &s2.calls, 20000);
    handed_ms = rt_now_ms() - t0;
    CHECK_INT(s2.calls, ==, 1);
    CHECK_RC(s2.status, RLOCK_OK);
    CHECK(s2.token > s1.token);
    CHECK_INT(handed_ms, <, wake_ms);
    memset(&s3, 0, sizeof s3);
    CHECK_RC(dep_call(&p, &s3, rlock_async_unlock(m2, dep_done, &s3)),
             RLOCK_OK);
    /* Free now for the blocking client: its token is larger still. */
    CHECK_RC(rlock_mutex_trylock(bm), RLOCK_OK);
    {
        uint64_t tok = 0;
        CHECK_RC(rlock_mutex_fence(bm, &tok), RLOCK_OK);
        CHECK(tok > s2.token);
    }
    CHECK_RC(rlock_mutex_unlock(bm), RLOCK_OK);
    rlock_mutex_free(bm);
    rlock_client_close(bc);

    /* on_lost, on the loop's thread, when the lock is taken away. */
    if (take_away) {
        memset(&lost, 0, sizeof lost);
        rlock_mutex_opts_init(&mo);
        mo.on_lost = dep_lost;
        mo.on_lost_arg = &lost;
        CHECK((m3 = rlock_async_mutex_new(a, "dep-lost", &mo, &err)) != NULL);
        memset(&s3, 0, sizeof s3);
        CHECK_RC(dep_call(&p, &s3, rlock_async_lock(m3, 0, dep_locked, &s3)),
                 RLOCK_OK);
        take_away("dep-lost", arg);
        rt_al_until(&p, &lost.calls, 10000);
        CHECK_INT(lost.calls, ==, 1);
    }

    /* A close cancels a pending wait: its callback runs once. */
    memset(&s1, 0, sizeof s1);
    CHECK_RC(dep_call(&p, &s1, rlock_async_lock(m1, 0, dep_locked, &s1)),
             RLOCK_OK);
    CHECK((w = rlock_async_mutex_new(a, "dep-x", NULL, &err)) != NULL);
    memset(&sw, 0, sizeof sw);
    CHECK_RC(rlock_async_lock(w, -1, dep_locked, &sw), RLOCK_OK);
    rt_al_for(&p, 300);
    CHECK_INT(sw.calls, ==, 0);
    rlock_async_close(a);
    CHECK_INT(sw.calls, ==, 1);
    CHECK_RC(sw.status, RLOCK_ECANCELED);
    CHECK_INT(p.cleanups, ==, 1);
    printf("%s: hand-over %lld ms; longest turn %lld ms in %d turns\n", what,
           (long long)handed_ms, (long long)p.longest_ms, p.turns);
    CHECK_INT(p.longest_ms, <, 1000); /* generous: a busy machine */
}
