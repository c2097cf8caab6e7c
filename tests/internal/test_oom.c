/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Out of memory at every allocation in turn (harness/oom.h), as curl's
 * torture tests do: a sequence of the API's calls is run again and again,
 * the nth of rlock's own allocations failing in the nth run, until a run
 * makes fewer allocations than n. Whatever fails, each call returns one
 * of the documented codes (or its callback runs once with one), nothing
 * crashes or hangs, no descriptor is left open once the client is closed,
 * the sanitizers and valgrind find no leak at exit, and Redis keeps no
 * lock past its lease or after an unlock that said it released.
 *
 * RT_OOM_VERBOSE=1 prints every unexpected code with its call, and
 * RT_OOM_TRACE=1 the stack of each failed allocation (harness/oom.c).
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hiredis/hiredis.h>
#include <rlock/async.h>
#include <rlock/rlock.h>

#include "harness/aloop.h"
#include "harness/oom.h"
#include "harness/server.h"
#include "harness/test.h"

/* The most runs a sequence gets (its allocations are far fewer). */
#define MOST_RUNS 4000

/* The sequences run so far: each names its locks apart, so that what a
 * failed run of one left for its lease never stands in another's way. */
static int part;

static int open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    int n = 0;

    CHECK(d != NULL);
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n - 1; /* the directory's own */
}

/* What the runs of one sequence saw. */
typedef struct tally {
    int runs, failed_calls, enomem;
    long allocations; /* of the run that was not failed */
} tally;

/* rc is what a call may return: want, or after a failure any documented
 * error (RLOCK_ENOMEM where the failure was the call's own, others for
 * what follows from it: a connection given up, a hold never taken). Never
 * success where want is an error: with one failure a run, the first owner
 * holds (its second try takes the lock if its first failed) whenever the
 * second tries, so a second owner's lock would be two holders. */
#define seen_rc(t, rc, want, d) seen_rc_(t, rc, want, d, #rc)
static int seen_rc_(tally *t, int rc, int want, int *disturbed,
                    const char *what)
{
    if (rc == want)
        return rc;
    if (getenv("RT_OOM_VERBOSE") || rc >= 0)
        fprintf(stderr, "  %s: got %d (%s), want %d\n", what, rc,
                rlock_strerror(rc), want);
    CHECK_INT(rc, <, 0);
    CHECK_INT(rc, >=, RLOCK_ENOTIFY);
    CHECK(rlock_strerror(rc) != NULL && *rlock_strerror(rc) != '\0');
    t->failed_calls++;
    t->enomem += rc == RLOCK_ENOMEM;
    *disturbed = 1;
    return rc;
}

/* The lock key of name after a run: gone, or with a lease that ends
 * (never a key without expiry, never longer than the longest lease the
 * run asked for). */
static void check_key(rt_server *s, const char *name, int must_be_gone)
{
    long long pttl = rt_cmd_int(s, "PTTL {rlock:%s}", name);

    if (must_be_gone)
        CHECK_INT(pttl, ==, -2);
    else
        CHECK(pttl == -2 || (pttl > 0 && pttl <= 30000));
}

/* ---- the blocking API -------------------------------------------------- */

/* One run: open, two owners on one name, a try, a re-entry, a fencing
 * token, an extension, a try and a wait refused, the releases, the other
 * owner's try, its status and release, and everything freed. Returns
 * whether the armed failure happened. */
static int blocking_run(rt_server *s, const char *url, long nth, tally *t,
                        int k)
{
    rlock_client_opts o;
    rlock_client *c;
    rlock_mutex *m1 = NULL, *m2 = NULL;
    rlock_owner *o2 = NULL;
    rlock_status st;
    uint64_t token = 0;
    char name[64];
    int err = 0, d = 0, last = RLOCK_EINVAL, failed;

    snprintf(name, sizeof name, "oom-b-%d-%d", part, k);
    rlock_client_opts_init(&o);
    o.connect_timeout_ms = 5000;
    o.command_timeout_ms = 5000;
    o.watchdog_lease_ms = 20000;
    if (getenv("RT_OOM_VERBOSE"))
        fprintf(stderr, "run %ld\n", nth);
    rt_oom_arm(nth);
    c = rlock_client_open(url, &o, &err);
    if (!c) {
        seen_rc(t, err, RLOCK_OK, &d);
    } else {
        if (!(m1 = rlock_mutex_new(c, name, NULL, &err)))
            seen_rc(t, err, RLOCK_OK, &d);
        if (!(m2 = rlock_mutex_new(c, name, NULL, &err)))
            seen_rc(t, err, RLOCK_OK, &d);
        if (!(o2 = rlock_owner_new(&err)))
            seen_rc(t, err, RLOCK_OK, &d);
    }
    if (m1 && m2 && o2) {
        seen_rc(t, rlock_mutex_trylock(m1), RLOCK_OK, &d);
        seen_rc(t, rlock_mutex_trylock(m1), RLOCK_OK, &d);
        if (seen_rc(t, rlock_mutex_fence(m1, &token), RLOCK_OK, &d) == RLOCK_OK)
            CHECK(token > 0);
        seen_rc(t, rlock_mutex_extend(m1, 25000), RLOCK_OK, &d);
        seen_rc(t, rlock_mutex_trylock_as(m2, o2), RLOCK_EBUSY, &d);
        seen_rc(t, rlock_mutex_timedlock_as(m2, o2, 30), RLOCK_ETIMEDOUT, &d);
        seen_rc(t, rlock_mutex_unlock(m1), RLOCK_OK, &d);
        seen_rc(t, rlock_mutex_unlock(m1), RLOCK_OK, &d);
        seen_rc(t, rlock_mutex_trylock_as(m2, o2), RLOCK_OK, &d);
        seen_rc(t, rlock_mutex_status(m2, &st), RLOCK_OK, &d);
        last = seen_rc(t, rlock_mutex_unlock_as(m2, o2), RLOCK_OK, &d);
    }
    if (m1)
        rlock_mutex_free(m1);
    if (m2)
        rlock_mutex_free(m2);
    if (o2)
        rlock_owner_free(o2);
    if (c)
        rlock_client_close(c);
    failed = rt_oom_disarm();
    CHECK(failed || !d); /* nothing goes wrong without a failure */
    if (!failed)
        t->allocations = rt_oom_count();
    /* The second owner's release said it released: the first had
     * released before it could take the lock, so nobody holds it. */
    if (s)
        check_key(s, name, last == RLOCK_OK);
    t->runs++;
    return failed;
}

static void blocking_runs(const char *what, rt_server *s, const char *url)
{
    tally t;
    long n;
    int fds;

    memset(&t, 0, sizeof t);
    part++;
    /* A first run, so that what is made once per process (the owner's
     * id, the scripts' digests) is counted where it stays. */
    CHECK(!blocking_run(s, url, 0, &t, 0));
    fds = open_fds();
    for (n = 1; n <= MOST_RUNS; n++) {
        if (!blocking_run(s, url, n, &t, (int)n))
            break;
        CHECK_INT(open_fds(), ==, fds);
    }
    CHECK_INT(n, <=, MOST_RUNS);
    CHECK_INT(open_fds(), ==, fds);
    printf("%s: %d runs, %ld allocations in a whole one; %d calls failed, "
           "%d of them with RLOCK_ENOMEM\n",
           what, t.runs, t.allocations, t.failed_calls, t.enomem);
    CHECK_INT(t.allocations, >=, 10); /* the wrappers saw the library */
    CHECK_INT(t.enomem, >, 0);
}

/* The Redlock URL of three servers. */
static const char *redlock_url(rt_server *r[3], char *url, size_t len)
{
    snprintf(url, len, "redlock://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d",
             rt_server_port(r[0]), rt_server_port(r[1]), rt_server_port(r[2]));
    return url;
}

TEST(every_allocation_of_the_blocking_api_may_fail_and_nothing_breaks)
{
    rt_server *s = rt_server_start(NULL), *r[3];
    char url[256];
    int i;

    blocking_runs("blocking, one server", s, rt_server_url(s));
    for (i = 0; i < 3; i++)
        r[i] = rt_server_start(NULL);
    blocking_runs("blocking, Redlock of 3", NULL,
                  redlock_url(r, url, sizeof url));
    for (i = 0; i < 3; i++)
        rt_server_stop(r[i]);
    rt_server_stop(s);
}

/* ---- the event-loop API ------------------------------------------------ */

#define HANDLES 6 /* (more than two: they share connections) */

typedef struct call {
    int calls, status;
} call;

typedef struct arun {
    call lock[HANDLES], unlock[HANDLES], extend;
    call wlock, wunlock; /* the waiter behind handle 0 */
} arun;

static void on_locked(rlock_async_mutex *m, int status, uint64_t token,
                      void *arg)
{
    call *c = arg;

    c->calls++;
    c->status = status;
    if (status == RLOCK_OK)
        CHECK(token > 0);
    else if (getenv("RT_OOM_VERBOSE"))
        fprintf(stderr, "  lock: %s\n", rlock_async_errmsg(m));
}

static void on_done(rlock_async_mutex *m, int status, void *arg)
{
    call *c = arg;

    (void)m;
    c->calls++;
    c->status = status;
}

/* Turns the loop until every callback of calls[0..n) ran (each once). */
static void until_called(rt_aloop *p, const call *calls, int n)
{
    int64_t t0 = rt_now_ms();
    int i, all;

    do {
        all = 1;
        for (i = 0; i < n; i++) {
            CHECK_INT(calls[i].calls, <=, 1);
            all &= calls[i].calls == 1;
        }
        if (all)
            return;
        rt_al_turn(p);
    } while (rt_now_ms() - t0 < 20000);
    CHECK(!"a callback never came");
}

/* One run on one loop: open and attach, HANDLES handles locking names of
 * their own at once (their requests share the node's connections), an
 * extension, the releases, everything freed and the client closed. A
 * call refused at once has no callback; one accepted has exactly one. */
static int async_run(rt_server *s, const char *url, long nth, long span,
                     tally *t, int k)
{
    rlock_client_opts o;
    rlock_async *a;
    rlock_async_mutex *m[HANDLES], *w = NULL;
    rt_aloop p;
    arun r;
    char name[HANDLES][64];
    int i, err = 0, d = 0, failed, rc;

    memset(&r, 0, sizeof r);
    memset(m, 0, sizeof m);
    rlock_client_opts_init(&o);
    o.connect_timeout_ms = 5000;
    o.command_timeout_ms = 5000;
    o.watchdog_lease_ms = 20000;
    rt_oom_arm_span(nth, span);
    a = rlock_async_open(url, &o, &err);
    if (!a)
        seen_rc(t, err, RLOCK_OK, &d);
    else if (seen_rc(t, rt_al_try_attach(&p, a), RLOCK_OK, &d) != RLOCK_OK) {
        rlock_async_close(a);
        a = NULL;
    }
    for (i = 0; a && i < HANDLES; i++) {
        snprintf(name[i], sizeof name[i], "oom-a-%d-%d-%d", part, k, i);
        if (!(m[i] = rlock_async_mutex_new(a, name[i], NULL, &err)))
            seen_rc(t, err, RLOCK_OK, &d);
    }
    for (i = 0; a && i < HANDLES; i++) {
        rc = m[i] ? rlock_async_lock(m[i], 1000, on_locked, &r.lock[i]) : 1;
        if (rc != RLOCK_OK) {
            if (rc != 1)
                seen_rc(t, rc, RLOCK_OK, &d);
            r.lock[i].calls = 1; /* no callback to wait for */
            r.lock[i].status = RLOCK_ECANCELED;
        }
    }
    if (a) {
        until_called(&p, r.lock, HANDLES);
        for (i = 0; i < HANDLES; i++)
            if (m[i] && r.lock[i].status != RLOCK_ECANCELED)
                seen_rc(t, r.lock[i].status, RLOCK_OK, &d);
        /* One server: a second handle waits for handle 0's lock. */
        if (s && m[0] && r.lock[0].status == RLOCK_OK) {
            if (!(w = rlock_async_mutex_new(a, name[0], NULL, &err))) {
                seen_rc(t, err, RLOCK_OK, &d);
            } else if (seen_rc(t,
                               rlock_async_lock(w, 5000, on_locked, &r.wlock),
                               RLOCK_OK, &d) != RLOCK_OK) {
                rlock_async_mutex_free(w);
                w = NULL;
            } else {
                /* It queues (or fails: never holds with handle 0). */
                rt_al_for(&p, 20);
                CHECK(r.wlock.calls == 0 || r.wlock.status != RLOCK_OK);
            }
        }
        if (m[0] && r.lock[0].status == RLOCK_OK) {
            rc = rlock_async_extend(m[0], 25000, on_done, &r.extend);
            if (rc != RLOCK_OK) {
                seen_rc(t, rc, RLOCK_OK, &d);
            } else {
                until_called(&p, &r.extend, 1);
                seen_rc(t, r.extend.status, RLOCK_OK, &d);
            }
        }
        for (i = 0; i < HANDLES; i++) {
            rc = m[i] && r.lock[i].status == RLOCK_OK
                     ? rlock_async_unlock(m[i], on_done, &r.unlock[i])
                     : 1;
            if (rc != RLOCK_OK) {
                if (rc != 1)
                    seen_rc(t, rc, RLOCK_OK, &d);
                r.unlock[i].calls = 1;
                r.unlock[i].status = RLOCK_ECANCELED;
            }
        }
        until_called(&p, r.unlock, HANDLES);
        for (i = 0; i < HANDLES; i++)
            if (r.unlock[i].status != RLOCK_ECANCELED)
                seen_rc(t, r.unlock[i].status, RLOCK_OK, &d);
        if (w) {
            /* The waiter: woken by handle 0's release (a message on the
             * subscriber connection), or its own retries. */
            /* Handle 0 still holds if its release failed: the waiter
             * is canceled, not left to its wait's end. */
            if (r.unlock[0].status != RLOCK_OK && r.wlock.calls == 0)
                seen_rc(t, rlock_async_cancel(w), RLOCK_OK, &d);
            until_called(&p, &r.wlock, 1);
            if (seen_rc(t, r.wlock.status, RLOCK_OK, &d) == RLOCK_OK) {
                rc = rlock_async_unlock(w, on_done, &r.wunlock);
                if (seen_rc(t, rc, RLOCK_OK, &d) == RLOCK_OK) {
                    until_called(&p, &r.wunlock, 1);
                    seen_rc(t, r.wunlock.status, RLOCK_OK, &d);
                }
            }
            rlock_async_mutex_free(w);
        }
        for (i = 0; i < HANDLES; i++)
            if (m[i])
                rlock_async_mutex_free(m[i]);
        rlock_async_close(a);
        CHECK_INT(p.cleanups, ==, 1);
    }
    failed = rt_oom_disarm();
    CHECK(failed || !d);
    if (!failed)
        t->allocations = rt_oom_count();
    /* (With failures in a row, what gives a hold back after a failure may
     * fail too: then the hold's lease runs out.) */
    for (i = 0; a && i < HANDLES; i++)
        if (s)
            check_key(s, name[i],
                      span == 1 && r.unlock[i].status == RLOCK_OK &&
                          (i > 0 || r.wlock.calls == 0 ||
                           r.wlock.status != RLOCK_OK ||
                           (r.wunlock.calls && r.wunlock.status == RLOCK_OK)));
    t->runs++;
    return failed;
}

/* Runs the sequence with the 1st, 2nd, ... allocation failing, and the
 * span - 1 after it. */
static void async_runs(const char *what, rt_server *s, const char *url,
                       long span)
{
    tally t;
    long n;
    int fds;

    memset(&t, 0, sizeof t);
    part++;
    CHECK(!async_run(s, url, 0, 1, &t, 0));
    fds = open_fds();
    for (n = 1; n <= MOST_RUNS; n++) {
        int64_t t0 = rt_now_ms();
        int more = async_run(s, url, n, span, &t, (int)n);
        if (getenv("RT_OOM_VERBOSE") && rt_now_ms() - t0 > 300)
            fprintf(stderr, "run %ld took %lld ms\n", n,
                    (long long)(rt_now_ms() - t0));
        if (!more)
            break;
        CHECK_INT(open_fds(), ==, fds);
    }
    CHECK_INT(n, <=, MOST_RUNS);
    printf("%s: %d runs, %ld allocations in a whole one; %d calls failed, "
           "%d of them with RLOCK_ENOMEM\n",
           what, t.runs, t.allocations, t.failed_calls, t.enomem);
    CHECK_INT(t.allocations, >=, 10);
    CHECK_INT(t.enomem, >, 0);
}

TEST(every_allocation_of_the_event_loop_api_may_fail_and_nothing_breaks)
{
    rt_server *s = rt_server_start(NULL), *r[3];
    char url[256];
    int i;

    async_runs("event loop, one server", s, rt_server_url(s), 1);
    {
        /* Descriptors numbered past the loop's first 64 slots, and three
         * allocations failing in a row: a connection the loop has no
         * slot for when its round is watched (its request fails at
         * once, rather than at its deadline). */
        int k, fd[80];
        for (k = 0; k < 80; k++)
            CHECK((fd[k] = fcntl(2, F_DUPFD_CLOEXEC, 0)) >= 0);
        async_runs("event loop, one server, 3 in a row, descriptors past 80", s,
                   rt_server_url(s), 3);
        for (k = 0; k < 80; k++)
            close(fd[k]);
    }
    for (i = 0; i < 3; i++)
        r[i] = rt_server_start(NULL);
    async_runs("event loop, Redlock of 3", NULL,
               redlock_url(r, url, sizeof url), 1);
    for (i = 0; i < 3; i++)
        rt_server_stop(r[i]);
    rt_server_stop(s);
}

/* Redlock's tokens under allocation failures: a node whose counter is far
 * ahead makes every acquisition draw its token there and write it, in a
 * second round, to the other nodes that hold. Whichever allocation fails,
 * a hold the call returns has its token on a majority of the nodes, each
 * of whose counters has reached it (so that any later majority draws a
 * larger one). The second round failing as a whole used to leave the
 * nodes it should have raised counted for the hold: it was returned with
 * a token one node knew. */
TEST(a_redlock_token_is_on_a_majority_whatever_allocation_fails)
{
    rt_server *r[3];
    rlock_client_opts o;
    rlock_client *c;
    rlock_mutex *m;
    char url[256], name[64], buf[32];
    uint64_t token;
    long n;
    int i, rc, err, failed, held = 0, on;

    for (i = 0; i < 3; i++)
        r[i] = rt_server_start(NULL);
    redlock_url(r, url, sizeof url);
    rlock_client_opts_init(&o);
    o.connect_timeout_ms = 5000;
    o.command_timeout_ms = 5000;
    for (n = 0; n <= MOST_RUNS; n++) {
        snprintf(name, sizeof name, "oom-tk-%ld", n);
        freeReplyObject(
            rt_cmd(r[0], "SET {rlock:%s}:fence 5000000000000000", name));
        rt_oom_arm(n);
        c = rlock_client_open(url, &o, &err);
        m = c ? rlock_mutex_new(c, name, NULL, &err) : NULL;
        rc = m ? rlock_mutex_trylock(m) : RLOCK_ENOMEM;
        token = rc == RLOCK_OK ? rlock_mutex_token(m) : 0;
        failed = rt_oom_disarm();
        CHECK(failed || rc == RLOCK_OK);
        if (rc == RLOCK_OK) {
            held++;
            CHECK(token > UINT64_C(5000000000000000));
            for (i = on = 0; i < 3; i++)
                on += strtoull(
                          rt_lock_field(r[i], name, RT_TOKEN, buf, sizeof buf),
                          NULL, 10) == token &&
                      rt_fence_counter(r[i], name) >= token;
            CHECK_INT(on, >=, 2);
            CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
        }
        if (m)
            rlock_mutex_free(m);
        if (c)
            rlock_client_close(c);
        if (n > 0 && !failed)
            break;
    }
    CHECK_INT(n, <=, MOST_RUNS);
    printf("%ld runs, %d of them held\n", n, held);
    for (i = 0; i < 3; i++)
        rt_server_stop(r[i]);
}

/* The same sequences over Sentinel (a master and one sentinel: the
 * sentinel's question and its answer's parts are allocated too) and a
 * cluster of one node with every slot (the slot map). */
TEST(sentinel_and_cluster_survive_every_allocation_failing)
{
    rt_server_opts so;
    rt_server *m, *sen, *node;
    char monitor[64], url[256];

    m = rt_server_start(NULL);
    snprintf(monitor, sizeof monitor, "mymaster 127.0.0.1 %d 1",
             rt_server_port(m));
    memset(&so, 0, sizeof so);
    so.sentinel_monitor = monitor;
    sen = rt_server_start(&so);
    snprintf(url, sizeof url, "redis-sentinel://127.0.0.1:%d/mymaster",
             rt_server_port(sen));
    blocking_runs("blocking, Sentinel", m, url);
    async_runs("event loop, Sentinel", m, url, 1);
    rt_server_stop(sen);
    rt_server_stop(m);

    memset(&so, 0, sizeof so);
    so.cluster_enabled = 1;
    node = rt_server_start(&so);
    freeReplyObject(rt_cmd(node, "CLUSTER ADDSLOTSRANGE 0 16383"));
    RT_WAIT_UNTIL(rt_cluster_ok(node), 20000);
    snprintf(url, sizeof url, "redis-cluster://127.0.0.1:%d",
             rt_server_port(node));
    blocking_runs("blocking, Cluster", node, url);
    async_runs("event loop, Cluster", node, url, 1);
    rt_server_stop(node);
}
