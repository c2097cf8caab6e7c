/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The event loop's driver (loop/loop.h) on a loop of the test's own: a
 * poll(2) over the descriptors the driver asks it to watch, and the one
 * timer it asks for, reported back through rlock__loop_ready and
 * rlock__loop_timeout. Many waits run at once on the one thread, beside
 * threads of the blocking API on the same names; no turn may block.
 */
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/handles.h"
#include "engine/engine.h"
#include "harness/proxy.h"
#include "harness/server.h"
#include "harness/test.h"
#include "loop/loop.h"
#include "util/clock.h"

#define FDS_MAX 512

typedef struct test_loop {
    struct pollfd fds[FDS_MAX];
    int n;
    int64_t due;
    int64_t longest_ns; /* the longest turn's work */
    int turns;
} test_loop;

static void tl_watch(void *arg, int fd, short events)
{
    test_loop *p = arg;
    int i;

    for (i = 0; i < p->n; i++)
        if (p->fds[i].fd == fd)
            break;
    if (events == 0) {
        /* A descriptor is unwatched before it is closed: epoll forgets a
         * closed one and libuv forbids closing one it polls. */
        CHECK(fcntl(fd, F_GETFD) != -1);
        if (i < p->n)
            p->fds[i] = p->fds[--p->n];
        return;
    }
    if (i == p->n) {
        CHECK(p->n < FDS_MAX);
        p->n++;
    }
    p->fds[i].fd = fd;
    p->fds[i].events = events;
}

static void tl_timer(void *arg, int64_t due)
{
    ((test_loop *)arg)->due = due;
}

/* One turn: a poll of at most 50 ms (the timer's time if sooner), then
 * the callbacks. */
static void tl_turn(test_loop *p, rlock__loop *l)
{
    struct pollfd fds[FDS_MAX];
    int i, n = p->n, ms = 50;
    int64_t t0;

    if (p->due) {
        int64_t left = p->due - rlock__now_ns();
        ms = left <= 0
                 ? 0
                 : (int)((left + RLOCK__NS_PER_MS - 1) / RLOCK__NS_PER_MS);
        if (ms > 50)
            ms = 50;
    }
    memcpy(fds, p->fds, sizeof *fds * (size_t)n);
    for (i = 0; i < n; i++)
        fds[i].revents = 0;
    CHECK(poll(fds, (nfds_t)n, ms) >= 0);
    t0 = rlock__now_ns();
    for (i = 0; i < n; i++)
        CHECK(!(fds[i].revents & POLLNVAL)); /* watched, but closed */
    for (i = 0; i < n; i++)
        if (fds[i].revents)
            rlock__loop_ready(l, fds[i].fd, fds[i].revents);
    if (p->due && rlock__now_ns() >= p->due)
        rlock__loop_timeout(l);
    p->turns++;
    if (rlock__now_ns() - t0 > p->longest_ns)
        p->longest_ns = rlock__now_ns() - t0;
}

/* A task whose done sets the int its arg points to. */
static void flag_done(rlock__task *t)
{
    *(int *)t->arg = 1;
}

/* t set up to run op (stepped by step) of m as the calling thread. */
static void task_init(rlock__task *t, rlock_mutex *m, rlock__call *call,
                      rlock__step_fn step, void *op, int *done)
{
    memset(t, 0, sizeof *t);
    t->m = m;
    t->owner = rlock__as_thread();
    t->call = call;
    t->step = step;
    t->op = op;
    t->done = flag_done;
    t->arg = done;
}

/* The test's loop, and the hooks that reach it. */
static void tl_init(test_loop *tl, rlock__loop_hooks *hooks)
{
    memset(tl, 0, sizeof *tl);
    hooks->watch = tl_watch;
    hooks->timer = tl_timer;
    hooks->arg = tl;
}

#define NAMES 4
#define WAITERS 200
#define BLOCKING_ROUNDS 10

static int held[NAMES]; /* who holds name i now: 0 nobody */

typedef struct waiter {
    rlock__task t;
    rlock_owner *o;
    int name;
    int acquired, released, failed;
    rlock__call call;
    union {
        rlock__wait_op wait;
        rlock__release_op release;
    } op;
} waiter;

static int acquired_total, released_total, failures;
static rlock__loop *the_loop; /* the loop the waits run on */

static void released(rlock__task *t)
{
    waiter *w = t->arg;

    if (w->op.release.rc == RLOCK_OK) {
        w->released++;
        released_total++;
    } else {
        fprintf(stderr, "release: %d %s\n", w->op.release.rc, w->call.err.msg);
        failures++;
    }
}

static void acquired(rlock__task *t)
{
    waiter *w = t->arg;

    if (w->op.wait.rc != RLOCK_OK) {
        fprintf(stderr, "wait: %d %s\n", w->op.wait.rc, w->call.err.msg);
        failures++;
        return;
    }
    if (__atomic_exchange_n(&held[w->name], 2, __ATOMIC_SEQ_CST) != 0) {
        fprintf(stderr, "two holders of name %d\n", w->name);
        failures++;
    }
    w->acquired++;
    acquired_total++;
    /* Done with it: released at once, as a task of its own. */
    __atomic_store_n(&held[w->name], 0, __ATOMIC_SEQ_CST);
    rlock__call_begin(&w->call, t->m);
    rlock__release_op_init(&w->op.release, &w->call, t->m, t->owner);
    t->step = (rlock__step_fn)rlock__release_step;
    t->op = &w->op.release;
    t->wait = NULL;
    t->call = &w->call;
    t->done = released;
    /* t is no longer the loop's (done is called after it left): started
     * again here. */
    rlock__loop_start(the_loop, t);
}

typedef struct blocking {
    rlock_mutex *m[NAMES];
    int ok;
} blocking;

static void *blocking_main(void *arg)
{
    blocking *b = arg;
    int r, i;

    for (r = 0; r < BLOCKING_ROUNDS; r++)
        for (i = 0; i < NAMES; i++) {
            if (rlock_mutex_lock(b->m[i]) != RLOCK_OK)
                continue;
            if (__atomic_exchange_n(&held[i], 1, __ATOMIC_SEQ_CST) != 0)
                fprintf(stderr, "two holders of name %d (blocking)\n", i);
            else
                b->ok++;
            poll(NULL, 0, 1);
            __atomic_store_n(&held[i], 0, __ATOMIC_SEQ_CST);
            CHECK_RC(rlock_mutex_unlock(b->m[i]), RLOCK_OK);
        }
    return NULL;
}

/*
 * 200 waits on 4 names, each its own owner, run by one loop thread at
 * once, while a thread of the blocking API (another client) takes the
 * same names 10 times each: every wait gets its lock exactly once, no
 * two holders ever overlap, every release succeeds, and no turn of the
 * loop takes long.
 */
TEST(a_loop_thread_runs_many_waits_beside_blocking_holders)
{
    rt_server *s = rt_server_start(NULL);
    static const char *names[NAMES] = {"lp-a", "lp-b", "lp-c", "lp-d"};
    rlock_client_opts co;
    rlock_mutex_opts mo;
    rlock_client *c, *other;
    rlock_mutex *m[NAMES];
    rlock__loop_hooks hooks;
    rlock__loop *l;
    test_loop tl;
    blocking b;
    pthread_t th;
    waiter *w;
    int i, err;
    int64_t t0;

    tl_init(&tl, &hooks);
    memset(&b, 0, sizeof b);
    rlock_client_opts_init(&co);
    /* (A full pool still makes an exchange wait for a connection, which
     * a loop must not: see loop.h.) */
    co.max_connections = 4 * WAITERS;
    rlock_mutex_opts_init(&mo);
    mo.lease_ms = 5000;
    CHECK((c = rlock_client_open(rt_server_url(s), &co, &err)) != NULL);
    CHECK((other = rlock_client_open(rt_server_url(s), &co, &err)) != NULL);
    CHECK((l = rlock__loop_new(c, &hooks, &err)) != NULL);
    the_loop = l;
    for (i = 0; i < NAMES; i++) {
        CHECK((m[i] = rlock_mutex_new(c, names[i], &mo, &err)) != NULL);
        CHECK((b.m[i] = rlock_mutex_new(other, names[i], &mo, &err)) != NULL);
    }
    CHECK((w = calloc(WAITERS, sizeof *w)) != NULL);
    CHECK(pthread_create(&th, NULL, blocking_main, &b) == 0);
    t0 = rlock__now_ns();
    for (i = 0; i < WAITERS; i++) {
        CHECK((w[i].o = rlock_owner_new(&err)) != NULL);
        w[i].name = i % NAMES;
        rlock__call_begin(&w[i].call, m[w[i].name]);
        rlock__wait_op_init(&w[i].op.wait, &w[i].call, m[w[i].name],
                            rlock__as_owner(w[i].o), rlock__after_ms(60000), 0);
        w[i].t.m = m[w[i].name];
        w[i].t.owner = rlock__as_owner(w[i].o);
        w[i].t.call = &w[i].call;
        w[i].t.step = (rlock__step_fn)rlock__wait_step;
        w[i].t.op = &w[i].op.wait;
        w[i].t.wait = &w[i].op.wait;
        w[i].t.done = acquired;
        w[i].t.arg = &w[i];
        rlock__loop_start(l, &w[i].t);
    }
    while (rlock__loop_tasks(l) > 0 &&
           rlock__now_ns() - t0 < 90000 * RLOCK__NS_PER_MS)
        tl_turn(&tl, l);
    pthread_join(th, NULL);
    printf("%d acquired, %d released, %d failures in %lld ms, %d turns, "
           "longest turn %lld us; blocking %d of %d\n",
           acquired_total, released_total, failures,
           (long long)((rlock__now_ns() - t0) / RLOCK__NS_PER_MS), tl.turns,
           (long long)(tl.longest_ns / 1000), b.ok, NAMES * BLOCKING_ROUNDS);
    CHECK_INT(rlock__loop_tasks(l), ==, 0);
    CHECK_INT(failures, ==, 0);
    CHECK_INT(acquired_total, ==, WAITERS);
    CHECK_INT(released_total, ==, WAITERS);
    for (i = 0; i < WAITERS; i++)
        CHECK(w[i].acquired == 1 && w[i].released == 1);
    CHECK_INT(b.ok, ==, NAMES * BLOCKING_ROUNDS);
    /* The first turns open 200 connections and step 200 waits: generous
     * for a sanitizer's build on a busy machine. */
    CHECK_INT(tl.longest_ns, <, 1000 * RLOCK__NS_PER_MS);
    for (i = 0; i < NAMES; i++)
        CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:%s}", names[i]), ==, 0);

    rlock__loop_free(l);
    for (i = 0; i < WAITERS; i++)
        rlock_owner_free(w[i].o);
    free(w);
    for (i = 0; i < NAMES; i++) {
        rlock_mutex_free(m[i]);
        rlock_mutex_free(b.m[i]);
    }
    rlock_client_close(c);
    rlock_client_close(other);
    rt_server_stop(s);
}

/*
 * A wait on the loop for a lock another client holds ends at its own
 * deadline (by the loop's timer), with RLOCK_ETIMEDOUT, the loop turning
 * all the while.
 */
TEST(a_wait_on_a_loop_ends_at_its_deadline)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *c, *other;
    rlock_mutex *m, *m2;
    rlock__loop_hooks hooks;
    rlock__loop *l;
    rlock__wait_op wait;
    rlock__task t;
    rlock__call call;
    test_loop tl;
    int err, timed_done = 0;
    int64_t t0, took_ms;

    tl_init(&tl, &hooks);
    CHECK((c = rlock_client_open(rt_server_url(s), NULL, &err)) != NULL);
    CHECK((other = rlock_client_open(rt_server_url(s), NULL, &err)) != NULL);
    CHECK((m = rlock_mutex_new(c, "lp-t", NULL, &err)) != NULL);
    CHECK((m2 = rlock_mutex_new(other, "lp-t", NULL, &err)) != NULL);
    CHECK_RC(rlock_mutex_lock(m2), RLOCK_OK);
    CHECK((l = rlock__loop_new(c, &hooks, &err)) != NULL);
    t0 = rlock__now_ns();
    rlock__call_begin(&call, m);
    rlock__wait_op_init(&wait, &call, m, rlock__as_thread(),
                        rlock__after_ms(400), 0);
    task_init(&t, m, &call, (rlock__step_fn)rlock__wait_step, &wait,
              &timed_done);
    t.wait = &wait;
    rlock__loop_start(l, &t);
    while (!timed_done && rlock__now_ns() - t0 < 10000 * RLOCK__NS_PER_MS)
        tl_turn(&tl, l);
    took_ms = (rlock__now_ns() - t0) / RLOCK__NS_PER_MS;
    printf("ended with %d after %lld ms, %d turns: %s\n", wait.rc,
           (long long)took_ms, tl.turns, call.err.msg);
    CHECK(timed_done);
    CHECK_RC(wait.rc, RLOCK_ETIMEDOUT);
    CHECK_INT(took_ms, >=, 390);
    CHECK_INT(took_ms, <, 5000);
    CHECK_INT(tl.longest_ns, <, 200 * RLOCK__NS_PER_MS);
    rlock__loop_free(l);
    CHECK_RC(rlock_mutex_unlock(m2), RLOCK_OK);
    rlock_mutex_free(m);
    rlock_mutex_free(m2);
    rlock_client_close(c);
    rlock_client_close(other);
    rt_server_stop(s);
}

/*
 * A connection that breaks under a round (the proxy drops it) is closed
 * when the round ends: the loop is told to stop watching it first (the
 * test's watch hook checks that every descriptor it is told to forget is
 * still open, and its poll that none it watches is closed). An extension
 * is the op: it opens no other connection afterwards (an attempt's undo
 * would, and could reuse the number). It ends with the connection's
 * error, and the loop watches nothing of it afterwards.
 */
TEST(a_broken_connection_is_unwatched_before_it_closes)
{
    rt_server *s = rt_server_start(NULL);
    rt_proxy *p = rt_proxy_start(rt_server_port(s));
    rlock_mutex_opts mo;
    rlock_client *c;
    rlock_mutex *m;
    rlock__loop_hooks hooks;
    rlock__loop *l;
    rlock__extend_op e;
    rlock__task t;
    rlock__call call;
    test_loop tl;
    int err, i, cut_done = 0;
    int64_t t0;

    tl_init(&tl, &hooks);
    rlock_mutex_opts_init(&mo);
    mo.lease_ms = 20000;
    CHECK((c = rlock_client_open(rt_proxy_url(p), NULL, &err)) != NULL);
    CHECK((m = rlock_mutex_new(c, "lp-cut", &mo, &err)) != NULL);
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    CHECK((l = rlock__loop_new(c, &hooks, &err)) != NULL);
    /* The request is held on its way: the round waits. */
    rt_proxy_blackhole(p, RT_PROXY_TO_SERVER | RT_PROXY_TO_CLIENT);
    rlock__call_begin(&call, m);
    rlock__extend_op_init(&e, &call, m, rlock__as_thread(), 30000, "extend",
                          "unchanged");
    task_init(&t, m, &call, (rlock__step_fn)rlock__extend_step, &e, &cut_done);
    rlock__loop_start(l, &t);
    for (i = 0; i < 5; i++)
        tl_turn(&tl, l);
    CHECK(!cut_done);
    CHECK_INT(tl.n, ==, 2); /* the loop's ring, and the connection */
    rt_proxy_cut_all(p);
    t0 = rlock__now_ns();
    while (!cut_done && rlock__now_ns() - t0 < 10000 * RLOCK__NS_PER_MS)
        tl_turn(&tl, l);
    printf("extension ended with %d: %s; %d descriptors watched\n", e.rc,
           call.err.msg, tl.n);
    CHECK(cut_done);
    CHECK(e.rc != RLOCK_OK);
    CHECK_INT(tl.n, ==, 1); /* the ring only */
    rlock__loop_free(l);
    CHECK_INT(tl.n, ==, 0);
    rt_proxy_blackhole(p, 0);
    rlock_mutex_free(m);
    rlock_client_close(c);
    rt_proxy_stop(p);
    rt_server_stop(s);
}
