/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Faults, each injected into a run of the mutual-exclusion checker
 * (tests/checker) against real redis-server processes: holders killed and
 * stopped, Redis stopped, restarted and out of memory, connections cut.
 * Whatever happens, the history must show no overlap, no stale write
 * accepted, tokens that grow, and every loss told to its holder.
 */
#include <signal.h>
#include <string.h>

#include "harness/proxy.h"
#include "harness/test.h"

/* Runs the checker, which must find a violation; returns its figures. */
static rt_check_result expect_violation(const rt_check_opts *o)
{
    rt_check_result r;

    CHECK_INT(rt_check_run(o, &r), ==, 1);
    rt_check_print(stdout, &r);
    return r;
}

/* Runs the checker and fails the test on any violation. */
/* Four workers, 40 holds each, a 900 ms lease renewed every 300 ms. */
static void checker_opts(rt_check_opts *o, rt_server *s, const char *name)
{
    rt_check_opts_init(o);
    o->url = rt_server_url(s);
    o->name = name;
    o->workers = 4;
    o->iterations = 40;
    o->client.watchdog_lease_ms = 900;
    o->deadline_ms = 40000;
}

static rt_check_result run_fault(rt_check_opts *o,
                                 void (*during)(rt_check *, void *), void *arg)
{
    o->during = during;
    o->arg = arg;
    return rt_checker_passes(o);
}

/* No key of the lock is left but the fencing counter. */
static void check_no_trace(rt_server *s, const char *name)
{
    RT_WAIT_UNTIL(rt_cmd_int(s,
                             "EXISTS {rlock:%s} {rlock:%s}:queue "
                             "{rlock:%s}:qinfo",
                             name, name, name) == 0,
                  5000);
}

TEST(checker_finds_no_violation_in_a_normal_run)
{
    rt_server *s = rt_server_start(NULL);
    rt_check_opts o;
    rt_check_result r;

    checker_opts(&o, s, "normal");
    o.workers = 6;
    o.iterations = 80;
    r = rt_checker_passes(&o);
    CHECK_INT(r.holds, ==, 6 * 80);
    CHECK_INT(r.clean, ==, 6 * 80);
    CHECK_INT(r.counter, ==, 6 * 80);
    CHECK_INT(r.lost, ==, 0);
    check_no_trace(s, "normal");
    rt_server_stop(s);
}

/* The checker must be able to fail: without the lock it sees overlaps and
 * lost updates; with tokens that go down it sees them out of order (and
 * each write as stale) though holds never overlap; with the resource's
 * fencing off, a paused holder's stale write is accepted and reported. */
static void pause_a_holder(rt_check *chk, void *arg)
{
    pid_t pid = rt_check_stall(chk, 0, 20000);
    int next;

    (void)arg;
    CHECK(pid > 0);
    kill(pid, SIGSTOP);
    /* Someone else takes the expired lock and uses the resource. */
    next = rt_check_stall_next(chk, 0, 20000);
    CHECK(next > 0);
    rt_check_release(chk, next);
    rt_sleep_ms(100);
    rt_check_release(chk, 0);
    kill(pid, SIGCONT);
}

TEST(checker_detects_broken_locks_and_stale_writes)
{
    rt_server *s = rt_server_start(NULL);
    rt_check_opts o;
    rt_check_result r;

    checker_opts(&o, s, "unsafe");
    o.unsafe = 1;
    o.workers = 4;
    o.iterations = 100;
    o.hold_us = 500;
    r = expect_violation(&o);
    CHECK(r.overlaps > 0);
    CHECK(r.counter_mismatch > 0);
    CHECK(r.token_order > 0);

    checker_opts(&o, s, "reversed");
    o.reverse_tokens = 1;
    o.no_fence = 1;
    r = expect_violation(&o);
    CHECK(r.token_order > 0);
    CHECK_INT(r.overlaps, ==, 0);
    CHECK_INT(r.counter_mismatch, ==, 0);

    checker_opts(&o, s, "nofence");
    o.no_fence = 1;
    o.workers = 3;
    o.iterations = 10;
    o.during = pause_a_holder;
    r = expect_violation(&o);
    /* The paused holder's write is accepted without fencing. On a busy
     * machine (sanitizers, other work) another holder may genuinely miss
     * its renewal too and be reported lost: each such loss may add one
     * stale write, never an overlap. */
    CHECK_INT(r.stale_accepted, >=, 1);
    CHECK_INT(r.lost, >=, 1);
    CHECK_INT(r.stale_accepted, <=, r.lost);
    CHECK_INT(r.overlaps, ==, 0);
    rt_server_stop(s);
}

/* Scenario 1: a holder SIGKILLed inside its hold. */
struct kill_ctx {
    int64_t handover_ms;
};

static void kill_a_holder(rt_check *chk, void *arg)
{
    struct kill_ctx *k = arg;
    pid_t pid;
    uint64_t token;
    int64_t t_kill, t_next;

    while (rt_check_holds(chk) < 20)
        rt_sleep_ms(5);
    pid = rt_check_stall(chk, 1, 20000);
    CHECK(pid > 0);
    token = rt_check_stalled_token(chk, 1);
    t_kill = rt_now_ms();
    kill(pid, SIGKILL);
    t_next = rt_check_wait_newer_hold(chk, token, 20000);
    CHECK(t_next > 0);
    k->handover_ms = t_next - t_kill;
}

TEST(killed_holder_is_replaced_within_the_lease)
{
    rt_server *s = rt_server_start(NULL);
    struct kill_ctx k = {0};
    rt_check_opts o;
    rt_check_result r;

    checker_opts(&o, s, "killed");
    r = run_fault(&o, kill_a_holder, &k);
    printf("hand-over after SIGKILL: %lld ms (lease 900 ms)\n",
           (long long)k.handover_ms);
    CHECK_INT(r.killed, ==, 1);
    CHECK_INT(r.counter, ==, r.accepted_writes);
    /* The lease, plus a generous margin for a loaded machine. */
    CHECK_INT(k.handover_ms, <=, 900 + 2000);
    check_no_trace(s, "killed");
    rt_server_stop(s);
}

/* Scenario 2: a holder SIGSTOPped past its lease, then resumed. */
struct stop_ctx {
    rt_server *s;
    int64_t takeover_ms;
    int new_holder_untouched;
};

/* The lock's value: owner, token, nonce, count (docs/protocol.md). */
static redisReply *lock_hash(rt_server *s, const char *name)
{
    return rt_cmd(s, "GET {rlock:%s}", name);
}

static int same_hash(const redisReply *a, const redisReply *b)
{
    return a->type == REDIS_REPLY_STRING && b->type == REDIS_REPLY_STRING &&
           a->len == b->len && memcmp(a->str, b->str, (size_t)a->len) == 0;
}

static void stop_a_holder(rt_check *chk, void *arg)
{
    struct stop_ctx *sc = arg;
    redisReply *before, *after;
    int64_t t_stop;
    pid_t pid;
    int next;

    while (rt_check_holds(chk) < 20)
        rt_sleep_ms(5);
    pid = rt_check_stall(chk, 0, 20000);
    CHECK(pid > 0);
    t_stop = rt_now_ms();
    kill(pid, SIGSTOP);
    /* Its lease runs out unrenewed; the next holder stays inside. */
    next = rt_check_stall_next(chk, 0, 20000);
    CHECK(next > 0);
    sc->takeover_ms = rt_now_ms() - t_stop;
    before = lock_hash(sc->s, "stopped");
    /* The stopped holder wakes up, writes with its old token, unlocks. */
    rt_check_release(chk, 0);
    kill(pid, SIGCONT);
    CHECK_INT(rt_check_wait_idle(chk, 0, 20000), ==, 0);
    after = lock_hash(sc->s, "stopped");
    sc->new_holder_untouched = same_hash(before, after);
    freeReplyObject(before);
    freeReplyObject(after);
    rt_check_release(chk, next);
}

TEST(stopped_holder_learns_the_loss_and_its_write_is_refused)
{
    rt_server *s = rt_server_start(NULL);
    struct stop_ctx sc = {s, 0, 0};
    rt_check_opts o;
    rt_check_result r;

    checker_opts(&o, s, "stopped");
    r = run_fault(&o, stop_a_holder, &sc);
    printf("taken over %lld ms after SIGSTOP (lease 900 ms)\n",
           (long long)sc.takeover_ms);
    CHECK(sc.new_holder_untouched);
    CHECK_INT(r.lost, ==, 1);
    CHECK_INT(r.stale_rejected, ==, 1);
    CHECK_INT(r.counter, ==, 4 * 40 - 1);
    check_no_trace(s, "stopped");
    rt_server_stop(s);
}

/* Scenario 3 with the checker: Redis stopped for longer than the command
 * timeout and the lease while the workers contend and one of them holds
 * the lock. The holder cannot renew: its client counts the lease out and
 * reports the loss; the resumed server expires the key. */
static void stop_redis(rt_check *chk, void *arg)
{
    rt_server *s = arg;

    while (rt_check_holds(chk) < 30)
        rt_sleep_ms(5);
    CHECK(rt_check_stall(chk, 0, 20000) > 0);
    rt_server_pause(s);
    rt_sleep_ms(1500);
    CHECK(rt_check_current_lost(chk, 0));
    rt_server_resume(s);
    rt_check_release(chk, 0);
}

TEST(a_stopped_redis_breaks_no_exclusion)
{
    rt_server *s = rt_server_start(NULL);
    rt_check_opts o;
    rt_check_result r;

    checker_opts(&o, s, "hung");
    o.client.command_timeout_ms = 300;
    r = run_fault(&o, stop_redis, s);
    CHECK_INT(r.lost, ==, 1);
    CHECK_INT(r.counter, ==, r.accepted_writes);
    check_no_trace(s, "hung");
    rt_server_stop(s);
}

/* Scenario 4: Redis restarted without persistence while a lock is held. */
struct restart_ctx {
    rt_server *s;
    int64_t told_ms;
    int64_t waiter_ms;
};

static void restart_redis(rt_check *chk, void *arg)
{
    struct restart_ctx *rc = arg;
    uint64_t token;
    int64_t t0, t1;

    while (rt_check_holds(chk) < 20)
        rt_sleep_ms(5);
    CHECK(rt_check_stall(chk, 0, 20000) > 0);
    token = rt_check_stalled_token(chk, 0);
    rt_server_restart(rc->s);
    t0 = rt_now_ms();
    RT_WAIT_UNTIL(rt_check_current_lost(chk, 0), 10000);
    rc->told_ms = rt_now_ms() - t0;
    /* A waiter gets the lock; its token is above the lost one although
     * the counter was lost with the rest of Redis's memory. */
    t1 = rt_check_wait_newer_hold(chk, token, 20000);
    CHECK(t1 > 0);
    rc->waiter_ms = t1 - t0;
    rt_check_release(chk, 0);
}

TEST(redis_restart_tells_holders_and_lets_waiters_in)
{
    rt_server *s = rt_server_start(NULL);
    struct restart_ctx rc = {s, 0, 0};
    rt_check_opts o;
    rt_check_result r;

    checker_opts(&o, s, "restart");
    r = run_fault(&o, restart_redis, &rc);
    printf("holder told %lld ms after the restart, waiter in after %lld ms "
           "(renewal tick 300 ms)\n",
           (long long)rc.told_ms, (long long)rc.waiter_ms);
    CHECK_INT(r.lost, >=, 1);
    /* One renewal tick, plus a margin for a loaded machine. */
    CHECK_INT(rc.told_ms, <=, 300 + 1500);
    /* Scripts were reloaded: the restarted server's empty script cache
     * answered NOSCRIPT, the clients sent the bodies (EVAL), and later
     * calls found them cached again (EVALSHA that did not fail). */
    CHECK_INT(rt_cmdstat_calls(s, "eval"), >, 0);
    CHECK_INT(rt_cmdstat_calls(s, "evalsha"), >, rt_cmdstat_calls(s, "eval"));
    check_no_trace(s, "restart");
    rt_server_stop(s);
}

/* Scenario 5: the server cuts the clients' connections, command and
 * subscriber alike, over and over while they contend. */
static void cut_connections(rt_check *chk, void *arg)
{
    rt_server *s = arg;
    int i;

    while (rt_check_holds(chk) < 10)
        rt_sleep_ms(5);
    for (i = 0; i < 20; i++) {
        freeReplyObject(rt_cmd(s, "CLIENT KILL TYPE %s SKIPME yes",
                               i % 2 ? "pubsub" : "normal"));
        rt_sleep_ms(50);
    }
}

TEST(connections_cut_again_and_again_break_no_exclusion)
{
    rt_server *s = rt_server_start(NULL);
    rt_check_opts o;
    rt_check_result r;

    checker_opts(&o, s, "cut");
    o.hold_us = 2000;
    r = run_fault(&o, cut_connections, s);
    CHECK_INT(r.counter, ==, r.accepted_writes);
    check_no_trace(s, "cut");
    rt_server_stop(s);
}

/* ...and a waiter whose subscriber connection was cut is subscribed again
 * and still handed the lock by the release. */
static long long wake_channels(rt_server *s)
{
    redisReply *r = rt_cmd(s, "PUBSUB CHANNELS {rlock:cutsub}:wake:*");
    long long n = r->type == REDIS_REPLY_ARRAY ? (long long)r->elements : -1;

    freeReplyObject(r);
    return n;
}

/* The id of the one subscriber connection (0 if none). */
static long long subscriber_id(rt_server *s)
{
    redisReply *r = rt_cmd(s, "CLIENT LIST TYPE pubsub");
    const char *id =
        r->type == REDIS_REPLY_STRING ? strstr(r->str, "id=") : NULL;
    long long n = id ? atoll(id + 3) : 0;

    freeReplyObject(r);
    return n;
}

TEST(waiter_resubscribes_after_its_connections_are_cut)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *a = rt_client(rt_server_url(s), NULL);
    rlock_client *b = rt_client(rt_server_url(s), NULL);
    rlock_mutex *ma = rt_mutex(a, "cutsub", NULL);
    rlock_mutex *mb = rt_mutex(b, "cutsub", NULL);
    rt_locker l;
    int64_t t0;
    long long first;

    CHECK_RC(rlock_mutex_lock(ma), RLOCK_OK);
    rt_locker_start(&l, mb, 1);
    RT_WAIT_UNTIL(wake_channels(s) == 1, 5000);
    RT_WAIT_UNTIL(rt_cmd_int(s, "LLEN {rlock:cutsub}:queue") == 1, 5000);
    first = subscriber_id(s);
    CHECK(first > 0);
    freeReplyObject(rt_cmd(s, "CLIENT KILL TYPE pubsub"));
    freeReplyObject(rt_cmd(s, "CLIENT KILL TYPE normal SKIPME yes"));
    /* Subscribed again, on a new connection, on its own. */
    RT_WAIT_UNTIL(subscriber_id(s) > first && wake_channels(s) == 1, 10000);
    CHECK(!l.done);
    t0 = rt_now_ms();
    CHECK_RC(rlock_mutex_unlock(ma), RLOCK_OK);
    CHECK_RC(rt_locker_join(&l), RLOCK_OK);
    /* Handed over at once: long before the 30 s lease or a retry. */
    CHECK_INT(rt_now_ms() - t0, <, 2000);
    rlock_mutex_free(ma);
    rlock_mutex_free(mb);
    rlock_client_close(a);
    rlock_client_close(b);
    rt_server_stop(s);
}

/* Scenario 7 with the checker: every worker reaches Redis through a
 * proxy whose delay grows past the lease for a while, in both directions,
 * while some hold the lock. Late replies and renewals must cost holds, not
 * exclusion. (tests/test_faults_net.c looks at each case alone.) */
static void slow_network(rt_check *chk, void *arg)
{
    rt_proxy *p = arg;

    /* Only now, with every worker forked (see rt_proxy_new). */
    rt_proxy_run(p);
    while (rt_check_holds(chk) < 30)
        rt_sleep_ms(5);
    CHECK(rt_check_stall(chk, 0, 20000) > 0);
    rt_proxy_set_delay(p, 700, 700);
    rt_sleep_ms(2500);
    rt_check_release(chk, 0);
    rt_sleep_ms(500);
    rt_proxy_set_delay(p, 0, 0);
}

TEST(a_network_slower_than_the_lease_breaks_no_exclusion)
{
    rt_server *s = rt_server_start(NULL);
    rt_proxy *p = rt_proxy_new(rt_server_port(s));
    rt_check_opts o;
    rt_check_result r;

    checker_opts(&o, s, "slow");
    o.url = rt_proxy_url(p);
    o.client.command_timeout_ms = 10000;
    r = run_fault(&o, slow_network, p);
    CHECK_INT(r.lost, >=, 1); /* the stalled holder could not renew */
    CHECK_INT(r.counter, ==, r.accepted_writes);
    check_no_trace(s, "slow");
    rt_proxy_stop(p);
    rt_server_stop(s);
}

/* Scenario 6: Redis at maxmemory with noeviction. */
TEST(out_of_memory_is_reported_and_nothing_is_claimed)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *c = rt_client(rt_server_url(s), NULL);
    rlock_mutex *m = rt_mutex(c, "oom", NULL);
    rlock_mutex *held = rt_mutex(c, "held-before", NULL);

    CHECK_RC(rlock_mutex_lock(held), RLOCK_OK);
    freeReplyObject(rt_cmd(s, "CONFIG SET maxmemory-policy noeviction"));
    freeReplyObject(rt_cmd(s, "CONFIG SET maxmemory 1"));

    CHECK_RC(rlock_mutex_trylock(m), RLOCK_EREDIS);
    CHECK(strstr(rlock_client_errmsg(c), "OOM") != NULL);
    CHECK_RC(rlock_mutex_timedlock(m, 200), RLOCK_EREDIS);
    CHECK(strstr(rlock_client_errmsg(c), "OOM") != NULL);
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:oom} {rlock:oom}:fence "
                            "{rlock:oom}:queue {rlock:oom}:qinfo"),
              ==, 0);
    /* A hold taken before still releases: deleting needs no memory. */
    CHECK_RC(rlock_mutex_unlock(held), RLOCK_OK);
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:held-before}"), ==, 0);

    freeReplyObject(rt_cmd(s, "CONFIG SET maxmemory 0"));
    CHECK_RC(rlock_mutex_trylock(m), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    rlock_mutex_free(m);
    rlock_mutex_free(held);
    rlock_client_close(c);
    rt_server_stop(s);
}
