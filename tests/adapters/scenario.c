/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The event-loop adapters (rlock/adapters/): the mutex's behaviours
 * driven by libevent, libuv and libev themselves. One scenario, run on
 * each loop: a try and a wait woken by the release (pub/sub, FIFO), an
 * extension, the watchdog renewing on the loop, on_lost on the loop's
 * thread, and a callback that closes the client while another call
 * waits (called back with RLOCK_ECANCELED) after which the loop holds
 * nothing of rlock's. Each loop's library is needed to build its test
 * (RLOCK_ADAPTERS, CMakeLists.txt); a build without one says so.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <rlock/async.h>

#include "adapters/scenario.h"
#include "harness/test.h"

typedef struct result {
    int calls, status;
    uint64_t token;
} result;

static void on_lock(rlock_async_mutex *m, int status, uint64_t token, void *arg)
{
    result *r = arg;

    (void)m;
    r->calls++;
    r->status = status;
    r->token = token;
}

static void on_done(rlock_async_mutex *m, int status, void *arg)
{
    result *r = arg;

    (void)m;
    r->calls++;
    r->status = status;
}

static pthread_t the_loop_thread;

static void on_lost(rlock_mutex *m, void *arg)
{
    result *r = arg;

    r->calls++;
    r->status = rlock_async_mutex_of(m) != NULL &&
                pthread_equal(pthread_self(), the_loop_thread);
}

typedef struct closer {
    rlock_async *a;
    int closed;
} closer;

static void closes(rlock_async_mutex *m, int status, uint64_t token, void *arg)
{
    closer *cl = arg;

    (void)m;
    (void)token;
    CHECK_RC(status, RLOCK_OK);
    rlock_async_close(cl->a);
    cl->closed = 1;
}

static void turn_until(const rt_loop_kind *k, void *loop, const int *flag,
                       int64_t ms)
{
    int64_t t0 = rt_now_ms();

    while (!*flag && rt_now_ms() - t0 < ms)
        k->turn(loop);
    CHECK(*flag);
}

void rt_adapter_scenario(const rt_loop_kind *k)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client_opts co;
    rlock_mutex_opts mo;
    rlock_async *a;
    rlock_async_mutex *m1, *m2, *m3, *w;
    result r1, r2, r3, lost, rw;
    closer cl;
    void *loop = k->make();
    int err;
    int64_t t0;

    printf("%s\n", k->name);
    the_loop_thread = pthread_self();
    rlock_client_opts_init(&co);
    co.watchdog_lease_ms = 300;
    CHECK((a = rlock_async_open(rt_server_url(s), &co, &err)) != NULL);
    CHECK_RC(k->attach(a, loop), RLOCK_OK);
    CHECK((m1 = rlock_async_mutex_new(a, "ad-x", NULL, &err)) != NULL);
    CHECK((m2 = rlock_async_mutex_new(a, "ad-x", NULL, &err)) != NULL);
    memset(&r1, 0, sizeof r1);
    memset(&r2, 0, sizeof r2);
    CHECK_RC(rlock_async_lock(m1, 0, on_lock, &r1), RLOCK_OK);
    turn_until(k, loop, &r1.calls, 10000);
    CHECK_RC(r1.status, RLOCK_OK);
    CHECK(r1.token > 0);
    CHECK_RC(rlock_async_lock(m2, 10000, on_lock, &r2), RLOCK_OK);
    /* Held past three leases: renewed by the loop. */
    t0 = rt_now_ms();
    while (rt_now_ms() - t0 < 1000)
        k->turn(loop);
    CHECK_INT(r2.calls, ==, 0);
    CHECK_INT(rt_cmd_int(s, "PTTL {rlock:ad-x}"), >, 0);
    memset(&r3, 0, sizeof r3);
    CHECK_RC(rlock_async_extend(m1, 5000, on_done, &r3), RLOCK_OK);
    turn_until(k, loop, &r3.calls, 10000);
    CHECK_RC(r3.status, RLOCK_OK);
    memset(&r3, 0, sizeof r3);
    CHECK_RC(rlock_async_unlock(m1, on_done, &r3), RLOCK_OK);
    t0 = rt_now_ms();
    turn_until(k, loop, &r2.calls, 10000);
    CHECK_RC(r3.status, RLOCK_OK);
    CHECK_RC(r2.status, RLOCK_OK);
    CHECK(r2.token > r1.token);
    CHECK_INT(rt_now_ms() - t0, <, 1000); /* woken, not polled for */
    memset(&r3, 0, sizeof r3);
    CHECK_RC(rlock_async_unlock(m2, on_done, &r3), RLOCK_OK);
    turn_until(k, loop, &r3.calls, 10000);
    CHECK_RC(r3.status, RLOCK_OK);

    /* on_lost. */
    memset(&lost, 0, sizeof lost);
    rlock_mutex_opts_init(&mo);
    mo.on_lost = on_lost;
    mo.on_lost_arg = &lost;
    CHECK((m3 = rlock_async_mutex_new(a, "ad-lost", &mo, &err)) != NULL);
    memset(&r3, 0, sizeof r3);
    CHECK_RC(rlock_async_lock(m3, 0, on_lock, &r3), RLOCK_OK);
    turn_until(k, loop, &r3.calls, 10000);
    CHECK_RC(r3.status, RLOCK_OK);
    CHECK_INT(rt_cmd_int(s, "DEL {rlock:ad-lost}"), ==, 1);
    turn_until(k, loop, &lost.calls, 5000);
    CHECK(lost.status); /* its handle, on the loop's thread */

    /* A callback that closes the client while another call waits. */
    memset(&rw, 0, sizeof rw);
    memset(&cl, 0, sizeof cl);
    cl.a = a;
    memset(&r1, 0, sizeof r1);
    CHECK_RC(rlock_async_lock(m1, 0, on_lock, &r1), RLOCK_OK);
    turn_until(k, loop, &r1.calls, 10000);
    CHECK_RC(r1.status, RLOCK_OK);
    CHECK((w = rlock_async_mutex_new(a, "ad-x", NULL, &err)) != NULL);
    CHECK_RC(rlock_async_lock(w, -1, on_lock, &rw), RLOCK_OK);
    {
        rlock_async_mutex *m4;
        CHECK((m4 = rlock_async_mutex_new(a, "ad-other", NULL, &err)) != NULL);
        CHECK_RC(rlock_async_lock(m4, 0, closes, &cl), RLOCK_OK);
    }
    turn_until(k, loop, &cl.closed, 10000);
    CHECK_INT(rw.calls, ==, 1);
    CHECK_RC(rw.status, RLOCK_ECANCELED);
    k->check_and_free(loop);
    rt_server_stop(s);
}
