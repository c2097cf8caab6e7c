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
#include <unistd.h>

#include "core/handles.h"
#include "engine/engine.h"
#include "harness/proxy.h"
#include "harness/server.h"
#include "harness/test.h"
#include "loop/loop.h"
#include "loop/loop_impl.h"
#include "util/clock.h"

#define FDS_MAX 512

typedef struct test_loop {
    struct pollfd fds[FDS_MAX];
    int n;
    int64_t due;
    int64_t longest_ns; /* the longest turn's work */
    int turns;
    int watches; /* calls that watch a descriptor (for events, not 0) */
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
    p->watches++;
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

/* Turns tl until *flag is set, for up to ms. */
static void turn_until(test_loop *tl, rlock__loop *l, const int *flag, int ms)
{
    int64_t t0 = rlock__now_ns();

    while (!*flag && rlock__now_ns() - t0 < ms * RLOCK__NS_PER_MS)
        tl_turn(tl, l);
}

/* t set up to wait for m as owner for up to ms (its op wait, its call
 * call), done set when it ends. */
static void wait_task(rlock__task *t, rlock__wait_op *wait, rlock__call *call,
                      rlock_mutex *m, rlock__as owner, int ms, int *done)
{
    rlock__call_end(call);
    rlock__call_begin(call, m);
    rlock__wait_op_init(wait, call, m, owner, rlock__after_ms(ms), 0);
    task_init(t, m, call, (rlock__step_fn)rlock__wait_step, wait, done);
    t->owner = owner;
    t->wait = wait;
}

/* Takes m as the calling thread with a wait on the loop (a client whose
 * background the loop drives takes no lock with the blocking API). */
static int loop_lock(test_loop *tl, rlock__loop *l, rlock_mutex *m, int ms)
{
    rlock__wait_op wait;
    rlock__call call = {0};
    rlock__task t;
    int done = 0;

    wait_task(&t, &wait, &call, m, rlock__as_thread(), ms, &done);
    rlock__loop_start(l, &t);
    turn_until(tl, l, &done, ms + 5000);
    CHECK(done);
    rlock__call_end(&call);
    return wait.rc;
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
        fprintf(stderr, "release: %d %s\n", w->op.release.rc,
                rlock__call_msg(&w->call));
        failures++;
    }
}

static void acquired(rlock__task *t)
{
    waiter *w = t->arg;

    if (w->op.wait.rc != RLOCK_OK) {
        fprintf(stderr, "wait: %d %s\n", w->op.wait.rc,
                rlock__call_msg(&w->call));
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
    rlock__call_end(&w->call);
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
    /* Few connections for many requests at once: the loop's exchanges
     * wait for a pooled one in rounds, never in the pool's condition
     * variable. */
    co.max_connections = 8;
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
        rlock__call_end(&w[i].call);
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
    for (i = 0; i < WAITERS; i++)
        rlock__call_end(&w[i].call);
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
 * What a callback costs does not grow with the requests in flight: with
 * a hundred rounds on their connections at once, beside sleeping waits,
 * a readiness looks at the tasks whose connection it is, and the timer at
 * the tasks whose time came. (A pass that looked at every task in flight
 * would look at dozens each time.)
 */
#define ROUNDS_AT_ONCE 100
#define SLEEPERS 50

TEST(a_readiness_looks_at_its_own_task_and_not_at_every_one)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client_opts co;
    rlock_client *c, *other;
    rlock_mutex *m[ROUNDS_AT_ONCE], *busy, *busy_other;
    rlock__loop_hooks hooks;
    rlock__loop *l;
    test_loop tl;
    waiter *w;
    int i, err, done[ROUNDS_AT_ONCE] = {0}, all;
    int64_t t0, passes, looks;

    tl_init(&tl, &hooks);
    rlock_client_opts_init(&co);
    co.max_connections = ROUNDS_AT_ONCE + SLEEPERS;
    /* What is counted is looks, not time: a sanitizer's slow build must
     * not time requests out (a turn of 150 tasks takes tens of ms). */
    co.command_timeout_ms = 30000;
    CHECK((c = rlock_client_open(rt_server_url(s), &co, &err)) != NULL);
    CHECK((other = rlock_client_open(rt_server_url(s), NULL, &err)) != NULL);
    CHECK((l = rlock__loop_new(c, &hooks, &err)) != NULL);
    CHECK((busy = rlock_mutex_new(c, "looks-busy", NULL, &err)) != NULL);
    CHECK((busy_other = rlock_mutex_new(other, "looks-busy", NULL, &err)) !=
          NULL);
    CHECK_RC(rlock_mutex_trylock(busy_other), RLOCK_OK);
    /* Sleepers: waits for a lock held elsewhere. */
    CHECK((w = calloc(SLEEPERS + ROUNDS_AT_ONCE, sizeof *w)) != NULL);
    for (i = 0; i < SLEEPERS; i++) {
        CHECK((w[i].o = rlock_owner_new(&err)) != NULL);
        wait_task(&w[i].t, &w[i].op.wait, &w[i].call, busy,
                  rlock__as_owner(w[i].o), 60000, &w[i].acquired);
        rlock__loop_start(l, &w[i].t);
    }
    t0 = rlock__now_ns();
    while (rlock__now_ns() - t0 < 300 * RLOCK__NS_PER_MS)
        tl_turn(&tl, l);
    CHECK_INT(rlock__loop_tasks(l), ==, SLEEPERS);
    /* The rounds: a hundred acquisitions of names of their own at once
     * (their connections opened already by the sleepers' first tries or
     * now). */
    for (i = 0; i < ROUNDS_AT_ONCE; i++) {
        char name[32];
        waiter *x = &w[SLEEPERS + i];
        snprintf(name, sizeof name, "looks-%d", i);
        CHECK((m[i] = rlock_mutex_new(c, name, NULL, &err)) != NULL);
        CHECK((x->o = rlock_owner_new(&err)) != NULL);
        wait_task(&x->t, &x->op.wait, &x->call, m[i], rlock__as_owner(x->o),
                  60000, &done[i]);
    }
    passes = l->passes;
    looks = l->looks;
    for (i = 0; i < ROUNDS_AT_ONCE; i++)
        rlock__loop_start(l, &w[SLEEPERS + i].t);
    t0 = rlock__now_ns();
    do {
        tl_turn(&tl, l);
        for (i = 0, all = 1; i < ROUNDS_AT_ONCE; i++)
            all &= done[i];
    } while (!all && rlock__now_ns() - t0 < 30000 * RLOCK__NS_PER_MS);
    CHECK(all);
    passes = l->passes - passes;
    looks = l->looks - looks;
    printf("%d rounds at once beside %d sleepers: %lld passes looked at "
           "%lld tasks\n",
           ROUNDS_AT_ONCE, SLEEPERS, (long long)passes, (long long)looks);
    for (i = 0; i < ROUNDS_AT_ONCE; i++)
        CHECK_RC(w[SLEEPERS + i].op.wait.rc, RLOCK_OK);
    /* The rounds share the node's connections (a readiness brings many
     * of their replies at once): each round's task is looked at about
     * once, the sleepers not at all. A pass that looked at every task
     * would have looked at 150 each time. */
    CHECK_INT(passes, >=, 1);
    CHECK_INT(looks, <=, ROUNDS_AT_ONCE + 2 * passes);
    CHECK_INT(rlock__loop_tasks(l), ==, SLEEPERS);

    for (i = 0; i < SLEEPERS; i++)
        rlock__loop_cancel(l, &w[i].t);
    rlock__loop_free(l);
    for (i = 0; i < SLEEPERS + ROUNDS_AT_ONCE; i++)
        rlock_owner_free(w[i].o);
    for (i = 0; i < SLEEPERS + ROUNDS_AT_ONCE; i++)
        rlock__call_end(&w[i].call);
    free(w);
    for (i = 0; i < ROUNDS_AT_ONCE; i++)
        rlock_mutex_free(m[i]);
    rlock_mutex_free(busy);
    CHECK_RC(rlock_mutex_unlock(busy_other), RLOCK_OK);
    rlock_mutex_free(busy_other);
    rlock_client_close(c);
    rlock_client_close(other);
    rt_server_stop(s);
}

/*
 * A hand-over among many sleepers costs what concerns the one woken: the
 * release's message is compared with the waiters of its owner string
 * alone (the client's index), and the loop takes the woken sleeper from
 * its ring's list rather than looking through every sleeper. (Before,
 * each message walked every waiter, and each ring a scan of the heap:
 * 10,000 waiters made every hand-over cost 10,000 looks twice.)
 */
#define MANY_SLEEPERS 1000

TEST(a_hand_over_among_many_sleepers_looks_at_the_one_woken)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *c, *other;
    rlock_mutex *busy, *busy_other;
    rlock__loop_hooks hooks;
    rlock__loop *l;
    rlock_client_opts co;
    test_loop tl;
    waiter *w;
    int i, err, n_done;
    int64_t t0, ring_looks, looked;

    tl_init(&tl, &hooks);
    /* What is counted is looks, not time: a sanitizer's slow build must
     * not time requests out (a turn of 1,000 tasks takes tens of ms). */
    rlock_client_opts_init(&co);
    co.command_timeout_ms = 30000;
    CHECK((c = rlock_client_open(rt_server_url(s), &co, &err)) != NULL);
    CHECK((other = rlock_client_open(rt_server_url(s), NULL, &err)) != NULL);
    CHECK((l = rlock__loop_new(c, &hooks, &err)) != NULL);
    CHECK((busy = rlock_mutex_new(c, "many-busy", NULL, &err)) != NULL);
    CHECK((busy_other = rlock_mutex_new(other, "many-busy", NULL, &err)) !=
          NULL);
    CHECK_RC(rlock_mutex_trylock(busy_other), RLOCK_OK);
    CHECK((w = calloc(MANY_SLEEPERS, sizeof *w)) != NULL);
    for (i = 0; i < MANY_SLEEPERS; i++) {
        CHECK((w[i].o = rlock_owner_new(&err)) != NULL);
        wait_task(&w[i].t, &w[i].op.wait, &w[i].call, busy,
                  rlock__as_owner(w[i].o), 60000, &w[i].acquired);
        rlock__loop_start(l, &w[i].t);
    }
    /* Every one queued in Redis and asleep. */
    t0 = rlock__now_ns();
    while (rt_cmd_int(s, "LLEN {rlock:many-busy}:queue") < MANY_SLEEPERS &&
           rlock__now_ns() - t0 < 30000 * RLOCK__NS_PER_MS)
        tl_turn(&tl, l);
    t0 = rlock__now_ns();
    while (rlock__now_ns() - t0 < 300 * RLOCK__NS_PER_MS)
        tl_turn(&tl, l);
    CHECK_INT(rt_cmd_int(s, "LLEN {rlock:many-busy}:queue"), ==, MANY_SLEEPERS);
    CHECK_INT(rlock__loop_tasks(l), ==, MANY_SLEEPERS);
    /* A sleeper keeps no room for its steps and no error detail (its
     * attempts found the lock busy): 10,000 of them on a loop. (Every
     * attempt's answer taken first: a sanitizer's build is slow.) */
    t0 = rlock__now_ns();
    do {
        for (i = 0, n_done = 0; i < MANY_SLEEPERS; i++)
            n_done += w[i].op.wait.sub == NULL;
        if (n_done < MANY_SLEEPERS)
            tl_turn(&tl, l);
    } while (n_done < MANY_SLEEPERS &&
             rlock__now_ns() - t0 < 30000 * RLOCK__NS_PER_MS);
    CHECK_INT(n_done, ==, MANY_SLEEPERS);
    for (i = 0, n_done = 0; i < MANY_SLEEPERS; i++)
        n_done += w[i].call.msg == NULL;
    CHECK_INT(n_done, ==, MANY_SLEEPERS);

    /* The release hands the lock to the first of them. */
    ring_looks = l->ring_looks;
    pthread_mutex_lock(&c->mu);
    looked = (int64_t)c->waiters_looked;
    pthread_mutex_unlock(&c->mu);
    CHECK_RC(rlock_mutex_unlock(busy_other), RLOCK_OK);
    t0 = rlock__now_ns();
    do {
        tl_turn(&tl, l);
        for (i = 0, n_done = 0; i < MANY_SLEEPERS; i++)
            n_done += w[i].acquired;
    } while (n_done == 0 && rlock__now_ns() - t0 < 10000 * RLOCK__NS_PER_MS);
    CHECK_INT(n_done, ==, 1);
    ring_looks = l->ring_looks - ring_looks;
    pthread_mutex_lock(&c->mu);
    looked = (int64_t)c->waiters_looked - looked;
    pthread_mutex_unlock(&c->mu);
    printf("a hand-over among %d sleepers: the message compared with %lld "
           "waiters, the loop took %lld woken sleepers from its ring\n",
           MANY_SLEEPERS, (long long)looked, (long long)ring_looks);
    CHECK_INT(looked, >=, 1);
    CHECK_INT(looked, <=, 8);
    CHECK_INT(ring_looks, >=, 1);
    CHECK_INT(ring_looks, <=, 2);

    for (i = 0; i < MANY_SLEEPERS; i++)
        if (!w[i].acquired)
            rlock__loop_cancel(l, &w[i].t);
    rlock__loop_free(l);
    rlock_mutex_free(busy);
    rlock_mutex_free(busy_other);
    rlock_client_close(c);
    rlock_client_close(other);
    for (i = 0; i < MANY_SLEEPERS; i++)
        rlock_owner_free(w[i].o);
    for (i = 0; i < MANY_SLEEPERS; i++)
        rlock__call_end(&w[i].call);
    free(w);
    rt_server_stop(s);
}

/*
 * The client's index of waiters, by hand: many owners in few buckets
 * (grown as they come), each found by its owner string among the others
 * of its bucket, removed in any order; a ring's list of the woken, a
 * waiter taken off it from the middle; and a waiter a forked child's
 * first call forgot (its thread goes on in the child, and its wait ends
 * there) is not unlinked from the child's new waiters, which stay found.
 */
#define INDEXED 300

/* The test's owner strings: "owner-<no>:7". */
static size_t owner_of(uint64_t no, char buf[64])
{
    return (size_t)snprintf(buf, 64, "owner-%llu:7", (unsigned long long)no);
}

static void set_owner(rlock__waiter *w, uint64_t no)
{
    char buf[64];
    size_t len = owner_of(no, buf);

    w->owner_no = no;
    w->hash = rlock__owner_hash(buf, len);
}

static int found_in_index(const rlock__waiters *ws, const rlock__waiter *w)
{
    const rlock__waiter *x;
    char buf[64];
    size_t len = owner_of(w->owner_no, buf);
    int by_list;

    for (x = rlock__waiter_first(ws, buf, len, &by_list); x;
         x = by_list ? x->next : x->hnext)
        if (x == w)
            return 1;
    return 0;
}

TEST(the_waiters_index_finds_each_owner_and_survives_a_fork)
{
    rlock__waiters ws;
    rlock__waiter *w, child;
    rlock__ring ring;
    int i, p[2];

    memset(&ws, 0, sizeof ws);
    CHECK((w = calloc(INDEXED, sizeof *w)) != NULL);
    for (i = 0; i < INDEXED; i++) {
        set_owner(&w[i], (uint64_t)i);
        rlock__waiter_add(&ws, &w[i]);
    }
    CHECK_INT((long long)ws.count, ==, INDEXED);
    CHECK_INT((long long)ws.nbuckets, >=, INDEXED / 2);
    for (i = 0; i < INDEXED; i++)
        CHECK(found_in_index(&ws, &w[i]));
    /* Every third removed: the others are still found, those not. */
    for (i = 0; i < INDEXED; i += 3)
        rlock__waiter_remove(&ws, &w[i]);
    for (i = 0; i < INDEXED; i++)
        CHECK_INT(found_in_index(&ws, &w[i]), ==, i % 3 != 0);

    /* The woken, listed on a ring; one taken off from the middle. */
    CHECK(pipe2(p, O_NONBLOCK | O_CLOEXEC) == 0);
    ring.fd = p[1];
    ring.woken = NULL;
    for (i = 1; i <= 3; i++)
        w[i].ring = &ring;
    rlock__waiter_wake(&w[1]);
    rlock__waiter_wake(&w[2]);
    rlock__waiter_wake(&w[2]); /* listed once */
    rlock__waiter_wake(&w[4]); /* no ring: not listed */
    CHECK(ring.woken == &w[2] && w[2].next_woken == &w[1] &&
          w[1].next_woken == NULL);
    rlock__waiter_unring(&w[2]);
    CHECK(ring.woken == &w[1] && w[1].prev_woken == NULL);
    rlock__waiter_unring(&w[1]);
    rlock__waiter_unring(&w[3]); /* never woken */
    CHECK(ring.woken == NULL);
    close(p[0]);
    close(p[1]);

    /* A fork: the child forgets them, adds its own, and the wait the
     * forking thread was in ends there. */
    rlock__waiters_forget(&ws);
    set_owner(&child, 100000);
    rlock__waiter_add(&ws, &child);
    rlock__waiter_remove(&ws, &w[1]);
    CHECK_INT((long long)ws.count, ==, 1);
    CHECK(ws.list == &child && child.next == NULL);
    CHECK(found_in_index(&ws, &child));
    rlock__waiter_remove(&ws, &child);
    CHECK_INT((long long)ws.count, ==, 0);
    CHECK(ws.list == NULL);
    rlock__waiters_free(&ws);
    free(w);
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
    rlock__call call = {0};
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
    rlock__call_end(&call);
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
           (long long)took_ms, tl.turns, rlock__call_msg(&call));
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
    rlock__call_end(&call);
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
    rlock__call call = {0};
    test_loop tl;
    int err, i, cut_done = 0;
    int64_t t0;

    tl_init(&tl, &hooks);
    rlock_mutex_opts_init(&mo);
    mo.lease_ms = 20000;
    CHECK((c = rlock_client_open(rt_proxy_url(p), NULL, &err)) != NULL);
    CHECK((m = rlock_mutex_new(c, "lp-cut", &mo, &err)) != NULL);
    CHECK((l = rlock__loop_new(c, &hooks, &err)) != NULL);
    CHECK_RC(loop_lock(&tl, l, m, 5000), RLOCK_OK);
    /* The request is held on its way: the round waits. */
    rt_proxy_blackhole(p, RT_PROXY_TO_SERVER | RT_PROXY_TO_CLIENT);
    rlock__call_end(&call);
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
           rlock__call_msg(&call), tl.n);
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
    rlock__call_end(&call);
}

/* Turns tl for ms. */
static void turn_for(test_loop *tl, rlock__loop *l, int ms)
{
    static const int never = 0;

    turn_until(tl, l, &never, ms);
}

/* Extends m's hold (of the calling thread) by the loop. */
static int loop_extend(test_loop *tl, rlock__loop *l, rlock_mutex *m,
                       int64_t ms)
{
    rlock__extend_op e;
    rlock__call call = {0};
    rlock__task t;
    int done = 0;

    rlock__call_end(&call);
    rlock__call_begin(&call, m);
    rlock__extend_op_init(&e, &call, m, rlock__as_thread(), ms, "extend",
                          "unchanged");
    task_init(&t, m, &call, (rlock__step_fn)rlock__extend_step, &e, &done);
    rlock__loop_start(l, &t);
    turn_until(tl, l, &done, 10000);
    CHECK(done);
    rlock__call_end(&call);
    return e.rc;
}

typedef struct lost_seen {
    int calls;
    pthread_t thread;
    int64_t at;
} lost_seen;

/*
 * A pooled connection's watch for replies outlives its request: the
 * requests after it on the same connection change no watch (each would
 * otherwise cost the loop two calls, and epoll two system calls). A
 * connection the server closes while it is idle is unwatched when that
 * readiness comes, once (no loop spinning on it), and every connection
 * is unwatched before it closes (tl_watch checks the descriptor is still
 * open).
 */
TEST(a_connection_stays_watched_between_requests_and_not_after_it_closes)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client_opts co;
    rlock_mutex_opts mo;
    rlock_client *c;
    rlock_mutex *m;
    rlock__loop_hooks hooks;
    rlock__loop *l;
    test_loop tl;
    int err, i, watches, rc;
    int64_t passes, t0;

    tl_init(&tl, &hooks);
    rlock_client_opts_init(&co);
    co.max_connections = 1;
    rlock_mutex_opts_init(&mo);
    mo.lease_ms = 20000;
    CHECK((c = rlock_client_open(rt_server_url(s), &co, &err)) != NULL);
    CHECK((m = rlock_mutex_new(c, "lp-keep", &mo, &err)) != NULL);
    CHECK((l = rlock__loop_new(c, &hooks, &err)) != NULL);
    CHECK_RC(loop_lock(&tl, l, m, 5000), RLOCK_OK);
    CHECK_RC(loop_extend(&tl, l, m, 20000), RLOCK_OK);
    watches = tl.watches;
    for (i = 0; i < 20; i++)
        CHECK_RC(loop_extend(&tl, l, m, 20000), RLOCK_OK);
    printf("20 extensions on one connection: %d watch calls\n",
           tl.watches - watches);
    CHECK_INT(tl.watches - watches, <=, 2);
    /* Between requests: the loop's ring and the idle connection (the
     * subscriber is not made before a wait needs it). */
    for (i = 0; i < 3; i++)
        tl_turn(&tl, l);
    CHECK_INT(tl.n, ==, 2);

    /* The server closes it while it is idle. */
    CHECK_INT(rt_cmd_int(s, "CLIENT KILL TYPE normal"), >=, 1);
    passes = l->passes;
    t0 = rlock__now_ns();
    while (rlock__now_ns() - t0 < 300 * RLOCK__NS_PER_MS)
        tl_turn(&tl, l);
    printf("after the server closed it: %d watched, %lld passes in 300 ms\n",
           tl.n, (long long)(l->passes - passes));
    CHECK_INT(tl.n, ==, 1);
    CHECK_INT(l->passes - passes, <, 50);
    /* The pool finds it closed (the first request may be the one that
     * does), and a new connection serves. */
    rc = loop_extend(&tl, l, m, 20000);
    if (rc != RLOCK_OK)
        rc = loop_extend(&tl, l, m, 20000);
    CHECK_RC(rc, RLOCK_OK);
    CHECK_INT(tl.n, ==, 2);

    rlock__loop_free(l);
    CHECK_INT(tl.n, ==, 0);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    rlock_mutex_free(m);
    rlock_client_close(c);
    rt_server_stop(s);
}

/*
 * A wait canceled while its attempt is on the wire (taken in Redis, the
 * answer held back) leaves an undo for the background, and the loop's
 * timer is asked for it at once: the lock the canceled attempt took is
 * given back now, not when the loop's next timer would have come.
 */
TEST(a_canceled_attempt_asks_the_timer_for_its_undo_at_once)
{
    rt_server *s = rt_server_start(NULL);
    rt_proxy *p = rt_proxy_start(rt_server_port(s));
    rlock_client_opts co;
    rlock_client *c;
    rlock_mutex *m;
    rlock__loop_hooks hooks;
    rlock__loop *l;
    rlock__wait_op wait;
    rlock__call call = {0};
    rlock__task t;
    test_loop tl;
    int err, done = 0;
    int64_t t0;

    tl_init(&tl, &hooks);
    rlock_client_opts_init(&co);
    co.command_timeout_ms = 5000;
    CHECK((c = rlock_client_open(rt_proxy_url(p), &co, &err)) != NULL);
    CHECK((m = rlock_mutex_new(c, "lp-undo", NULL, &err)) != NULL);
    CHECK((l = rlock__loop_new(c, &hooks, &err)) != NULL);
    rt_proxy_blackhole(p, RT_PROXY_TO_CLIENT);
    wait_task(&t, &wait, &call, m, rlock__as_thread(), 4000, &done);
    rlock__loop_start(l, &t);
    t0 = rlock__now_ns();
    while (rt_cmd_int(s, "EXISTS {rlock:lp-undo}") == 0 &&
           rlock__now_ns() - t0 < 5000 * RLOCK__NS_PER_MS)
        tl_turn(&tl, l);
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:lp-undo}"), ==, 1);
    CHECK(!done);
    rlock__loop_cancel(l, &t);
    CHECK(done);
    CHECK(wait.rc != RLOCK_OK);
    printf("after the cancel the timer is due in %lld us\n",
           (long long)((tl.due - rlock__now_ns()) / 1000));
    CHECK(tl.due != 0);
    CHECK(tl.due <= rlock__now_ns());
    /* The answers come; the undo gives the lock back. */
    rt_proxy_blackhole(p, 0);
    t0 = rlock__now_ns();
    while (rt_cmd_int(s, "EXISTS {rlock:lp-undo}") == 1 &&
           rlock__now_ns() - t0 < 5000 * RLOCK__NS_PER_MS)
        tl_turn(&tl, l);
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:lp-undo}"), ==, 0);

    rlock__loop_free(l);
    rlock_mutex_free(m);
    rlock_client_close(c);
    rt_proxy_stop(p);
    rt_server_stop(s);
    rlock__call_end(&call);
}

static void on_lost_seen(rlock_mutex *m, void *arg)
{
    lost_seen *ls = arg;

    (void)m;
    ls->calls++;
    ls->thread = pthread_self();
    ls->at = rlock__now_ns();
}

/*
 * A client whose background the loop drives starts no thread: its hold's
 * lease (300 ms) is renewed by the loop's turns for five leases, and the
 * hold is still the client's at the end. The renewals are the loop's
 * tasks: its longest turn stays short.
 */
TEST(the_loop_renews_holds_and_starts_no_thread)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client_opts co;
    rlock_client *c;
    rlock_mutex *m;
    rlock__loop_hooks hooks;
    rlock__loop *l;
    test_loop tl;
    int err, before;

    tl_init(&tl, &hooks);
    rlock_client_opts_init(&co);
    co.watchdog_lease_ms = 300;
    CHECK((c = rlock_client_open(rt_server_url(s), &co, &err)) != NULL);
    CHECK((m = rlock_mutex_new(c, "lp-renew", NULL, &err)) != NULL);
    before = rt_thread_count();
    CHECK((l = rlock__loop_new(c, &hooks, &err)) != NULL);
    CHECK_RC(loop_lock(&tl, l, m, 5000), RLOCK_OK);
    turn_for(&tl, l, 1500);
    printf("after 1500 ms: pttl %lld ms, %d turns, longest %lld us, "
           "threads %d (%d before)\n",
           rt_cmd_int(s, "PTTL {rlock:lp-renew}"), tl.turns,
           (long long)(tl.longest_ns / 1000), rt_thread_count(), before);
    CHECK_INT(rt_cmd_int(s, "PTTL {rlock:lp-renew}"), >, 0);
    {
        rlock_stats st = RLOCK_STATS_INIT;
        CHECK_RC(rlock_client_stats(c, &st), RLOCK_OK);
        CHECK_INT(st.renewals, >=, 3);
    }
    /* The timer is not due over and over: turns sleep in between. */
    CHECK_INT(tl.turns, <, 1000);
    CHECK_INT(rt_thread_count(), ==, before);
    CHECK(!c->bg->running);
    CHECK_RC(loop_extend(&tl, l, m, 300), RLOCK_OK);
    CHECK_INT(tl.longest_ns, <, 200 * RLOCK__NS_PER_MS);
    rlock__loop_free(l);
    rlock_mutex_free(m);
    rlock_client_close(c);
    rt_server_stop(s);
}

/*
 * Losses on the loop. A hold whose key is deleted behind its back is
 * found gone by the next renewal, and on_lost is called once, on the
 * loop's own thread. A hold whose loop stalled (the application's code
 * kept the thread) past its lease is reported lost when the loop turns
 * again, and never renewed late as if it were held: no request of the
 * client reaches the server after the stall.
 */
TEST(losses_are_told_on_the_loop_thread_never_renewed_late)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client_opts co;
    rlock_mutex_opts mo;
    rlock_client *c;
    rlock_mutex *gone, *stalled;
    rlock__loop_hooks hooks;
    rlock__loop *l;
    test_loop tl;
    lost_seen seen_gone, seen_stalled;
    long long before;
    int64_t t0;
    int err;

    memset(&seen_gone, 0, sizeof seen_gone);
    memset(&seen_stalled, 0, sizeof seen_stalled);
    tl_init(&tl, &hooks);
    rlock_client_opts_init(&co);
    co.watchdog_lease_ms = 300; /* renewed every 100 ms */
    CHECK((c = rlock_client_open(rt_server_url(s), &co, &err)) != NULL);
    CHECK((l = rlock__loop_new(c, &hooks, &err)) != NULL);
    rlock_mutex_opts_init(&mo);
    mo.on_lost = on_lost_seen;
    mo.on_lost_arg = &seen_gone;
    CHECK((gone = rlock_mutex_new(c, "lp-gone", &mo, &err)) != NULL);
    CHECK_RC(loop_lock(&tl, l, gone, 5000), RLOCK_OK);
    CHECK_INT(rt_cmd_int(s, "DEL {rlock:lp-gone}"), ==, 1);
    t0 = rlock__now_ns();
    turn_until(&tl, l, &seen_gone.calls, 3000);
    /* By the next renewal (100 ms), not by the lease's end (300 ms). */
    printf("gone: told after %lld ms\n",
           (long long)((seen_gone.at - t0) / RLOCK__NS_PER_MS));
    CHECK_INT(seen_gone.at - t0, <, 250 * RLOCK__NS_PER_MS);
    turn_for(&tl, l, 400); /* once, not again */
    CHECK_INT(seen_gone.calls, ==, 1);
    CHECK(pthread_equal(seen_gone.thread, pthread_self()));
    CHECK_RC(loop_extend(&tl, l, gone, 300), RLOCK_ELOST);

    mo.on_lost_arg = &seen_stalled;
    CHECK((stalled = rlock_mutex_new(c, "lp-stalled", &mo, &err)) != NULL);
    CHECK_RC(loop_lock(&tl, l, stalled, 5000), RLOCK_OK);
    poll(NULL, 0, 600); /* the loop stalls past the lease */
    before = rt_commands_from_clients(s);
    turn_until(&tl, l, &seen_stalled.calls, 3000);
    turn_for(&tl, l, 300);
    printf("stalled: told %d time(s); %lld commands after the stall\n",
           seen_stalled.calls, rt_commands_from_clients(s) - before);
    CHECK_INT(seen_stalled.calls, ==, 1);
    CHECK(pthread_equal(seen_stalled.thread, pthread_self()));
    CHECK_INT(rt_commands_from_clients(s) - before, ==, 0);
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:lp-stalled}"), ==, 0);
    CHECK(!c->bg->running);

    rlock__loop_free(l);
    rlock_mutex_free(gone);
    rlock_mutex_free(stalled);
    rlock_client_close(c);
    rt_server_stop(s);
}

/* The proxy's policy: connections after the first get nothing through
 * while the flag it points to is set. */
static int64_t hold_later_conns(void *arg, long conn_no, int dir, size_t len)
{
    (void)dir;
    (void)len;
    return conn_no >= 1 && __atomic_load_n((int *)arg, __ATOMIC_SEQ_CST)
               ? 100000
               : 0;
}

/*
 * The subscriber's connection is made in steps on the loop: against a
 * server that accepts it and never answers its handshake (the proxy
 * holds every connection but the first, the requests'; db 1 makes the
 * handshake a SELECT), a wait on the loop keeps trying while the
 * subscriber's connects run out their timeouts (400 ms), and no turn of
 * the loop waits for one. Once connections pass again, the wait gets the
 * lock when its holder lets go. Freeing the loop then, with a renewal of
 * the hold held up in flight, cancels it: nothing waits and nothing
 * leaks.
 */
TEST(the_loops_subscriber_connects_in_steps_and_a_free_cancels)
{
    rt_server *s = rt_server_start(NULL);
    rt_proxy *p = rt_proxy_start(rt_server_port(s));
    rlock_client_opts co;
    rlock_client *c, *other;
    rlock_mutex *m, *m2;
    rlock__loop_hooks hooks;
    rlock__loop *l;
    rlock__wait_op wait;
    rlock__call call = {0};
    rlock__task t;
    test_loop tl;
    char url[128];
    int err, done = 0, holding = 1;
    long accepted;
    int64_t t0;

    tl_init(&tl, &hooks);
    rlock_client_opts_init(&co);
    co.connect_timeout_ms = 400;
    co.command_timeout_ms = 400;
    co.watchdog_lease_ms = 600;
    snprintf(url, sizeof url, "%s/1", rt_proxy_url(p));
    CHECK((c = rlock_client_open(url, &co, &err)) != NULL);
    snprintf(url, sizeof url, "%s/1", rt_server_url(s));
    CHECK((other = rlock_client_open(url, NULL, &err)) != NULL);
    CHECK((m = rlock_mutex_new(c, "lp-sub", NULL, &err)) != NULL);
    CHECK((m2 = rlock_mutex_new(other, "lp-sub", NULL, &err)) != NULL);
    CHECK_RC(rlock_mutex_lock(m2), RLOCK_OK);
    CHECK((l = rlock__loop_new(c, &hooks, &err)) != NULL);
    rt_proxy_set_policy(p, hold_later_conns, &holding);
    rlock__call_end(&call);
    rlock__call_begin(&call, m);
    rlock__wait_op_init(&wait, &call, m, rlock__as_thread(),
                        rlock__after_ms(20000), 0);
    task_init(&t, m, &call, (rlock__step_fn)rlock__wait_step, &wait, &done);
    t.wait = &wait;
    rlock__loop_start(l, &t);
    turn_for(&tl, l, 1500);
    if (done)
        printf("the wait ended: %d %s\n", wait.rc, rlock__call_msg(&call));
    CHECK(!done);
    accepted = rt_proxy_accepted(p);
    printf("held for 1500 ms: %ld connections, %d turns, longest %lld us\n",
           accepted, tl.turns, (long long)(tl.longest_ns / 1000));
    CHECK_INT(accepted, >=, 3); /* the requests', and two tries at least */
    CHECK_INT(tl.longest_ns, <, 150 * RLOCK__NS_PER_MS);
    __atomic_store_n(&holding, 0, __ATOMIC_SEQ_CST);
    turn_for(&tl, l, 300);
    CHECK(!done);
    CHECK_RC(rlock_mutex_unlock(m2), RLOCK_OK);
    t0 = rlock__now_ns();
    turn_until(&tl, l, &done, 15000);
    printf("got it %lld ms after the release: %d %s\n",
           (long long)((rlock__now_ns() - t0) / RLOCK__NS_PER_MS), wait.rc,
           rlock__call_msg(&call));
    CHECK(done);
    CHECK_RC(wait.rc, RLOCK_OK);
    CHECK(!c->bg->running);

    /* A renewal held up on its way, then the loop freed. */
    rt_proxy_blackhole(p, RT_PROXY_TO_SERVER | RT_PROXY_TO_CLIENT);
    t0 = rlock__now_ns();
    while (!(l->bg.renew && l->bg.renew_task.state == T_ROUND) &&
           rlock__now_ns() - t0 < 2000 * RLOCK__NS_PER_MS)
        tl_turn(&tl, l);
    CHECK(l->bg.renew != NULL);
    turn_for(&tl, l, 30);
    CHECK(l->bg.renew != NULL);
    t0 = rlock__now_ns();
    rlock__loop_free(l);
    CHECK_INT(tl.n, ==, 0);
    CHECK_INT(rlock__now_ns() - t0, <, 150 * RLOCK__NS_PER_MS);
    rt_proxy_blackhole(p, 0);
    rlock_mutex_free(m);
    rlock_mutex_free(m2);
    rlock_client_close(c);
    rlock_client_close(other);
    rt_proxy_stop(p);
    rt_server_stop(s);
    rlock__call_end(&call);
}
