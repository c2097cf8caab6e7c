/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A network slower than the lease (fault scenario 7). The client reaches
 * Redis through the delaying proxy of harness/proxy.c, so that requests
 * arrive, or replies come back, after the lease they are about has ended;
 * the other owner, B, talks to Redis directly. An acquisition answered too
 * late must not be reported and must leave nothing behind; a release or an
 * extension that arrives late must never touch the lock B took meanwhile;
 * a watchdog that cannot renew in time must report the loss.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "harness/proxy.h"
#include "harness/test.h"

#define BOTH (RT_PROXY_TO_SERVER | RT_PROXY_TO_CLIENT)

/* A client behind proxy p whose command timeout outlasts every delay of
 * these tests: a late reply is a late reply, not a timeout. */
static rlock_client *proxied_client(rt_proxy *p, int64_t watchdog_lease_ms)
{
    rlock_client_opts o;

    rlock_client_opts_init(&o);
    o.command_timeout_ms = 15000;
    if (watchdog_lease_ms)
        o.watchdog_lease_ms = watchdog_lease_ms;
    return rt_client(rt_proxy_url(p), &o);
}

static rlock_mutex *fixed_lease(rlock_client *c, const char *name,
                                int64_t lease_ms)
{
    rlock_mutex_opts o;

    rlock_mutex_opts_init(&o);
    o.lease_ms = lease_ms;
    return rt_mutex(c, name, &o);
}

/* How many of the lock's keys exist, the fencing counter aside (it is meant
 * to stay forever). */
static long long traces(rt_server *s, const char *name)
{
    return rt_cmd_int(s,
                      "EXISTS {rlock:%s} {rlock:%s}:queue {rlock:%s}:qinfo",
                      name, name, name);
}

/* How many acquisitions Redis has carried out so far, as far as these
 * tests can tell: the lean form's SET NX and every other SET (a fenced
 * form writes the lock with SET too), counted by Redis. */
static long long sets(rt_server *s)
{
    return rt_cmdstat_calls(s, "set");
}

/* The lock's value ("owner nonce count w token") and remaining lease,
 * into buf. */
static void lock_hash(rt_server *s, const char *name, char *buf, size_t len,
                      long long *pttl)
{
    redisReply *r = rt_cmd(s, "GET {rlock:%s}", name);

    if (r->type != REDIS_REPLY_STRING)
        rt_fail(__FILE__, __LINE__, "{rlock:%s} is gone", name);
    CHECK((size_t)r->len < len);
    snprintf(buf, len, "%s", r->str);
    freeReplyObject(r);
    *pttl = rt_cmd_int(s, "PTTL {rlock:%s}", name);
}

/* ---- one owner's calls on a thread of its own --------------------------- */

/* Owner A lives on this thread, so that the test can act as B while one of
 * A's calls waits for the network. */
typedef struct actor {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    rlock_mutex *m;
    int (*op)(rlock_mutex *m, int64_t arg); /* the call to make, or NULL */
    int64_t arg;
    int busy; /* a call was asked for and has not returned */
    int rc;
    int quit;
} actor;

static void *actor_main(void *p)
{
    actor *a = p;
    int rc;

    pthread_mutex_lock(&a->mu);
    for (;;) {
        while (!a->op && !a->quit)
            pthread_cond_wait(&a->cv, &a->mu);
        if (!a->op)
            break;
        pthread_mutex_unlock(&a->mu);
        rc = a->op(a->m, a->arg);
        pthread_mutex_lock(&a->mu);
        a->op = NULL;
        a->rc = rc;
        a->busy = 0;
        pthread_cond_broadcast(&a->cv);
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

static void actor_start(actor *a, rlock_mutex *m)
{
    memset(a, 0, sizeof *a);
    a->m = m;
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    if (pthread_create(&a->thread, NULL, actor_main, a) != 0)
        rt_fail(__FILE__, __LINE__, "pthread_create failed");
}

/* Starts op(m, arg) on the actor's thread and returns at once. */
static void actor_begin(actor *a, int (*op)(rlock_mutex *, int64_t),
                        int64_t arg)
{
    pthread_mutex_lock(&a->mu);
    a->op = op;
    a->arg = arg;
    a->busy = 1;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

static int actor_busy(actor *a)
{
    int busy;

    pthread_mutex_lock(&a->mu);
    busy = a->busy;
    pthread_mutex_unlock(&a->mu);
    return busy;
}

/* Waits for the call begun last and returns its result. */
static int actor_end(actor *a)
{
    int rc;

    pthread_mutex_lock(&a->mu);
    while (a->busy)
        pthread_cond_wait(&a->cv, &a->mu);
    rc = a->rc;
    pthread_mutex_unlock(&a->mu);
    return rc;
}

static int actor_call(actor *a, int (*op)(rlock_mutex *, int64_t), int64_t arg)
{
    actor_begin(a, op, arg);
    return actor_end(a);
}

static void actor_stop(actor *a)
{
    pthread_mutex_lock(&a->mu);
    a->quit = 1;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    pthread_join(a->thread, NULL);
    pthread_cond_destroy(&a->cv);
    pthread_mutex_destroy(&a->mu);
}

static int op_lock(rlock_mutex *m, int64_t arg)
{
    (void)arg;
    return rlock_mutex_lock(m);
}

static int op_trylock(rlock_mutex *m, int64_t arg)
{
    (void)arg;
    return rlock_mutex_trylock(m);
}

static int op_unlock(rlock_mutex *m, int64_t arg)
{
    (void)arg;
    return rlock_mutex_unlock(m);
}

static int op_extend(rlock_mutex *m, int64_t lease_ms)
{
    return rlock_mutex_extend(m, lease_ms);
}

/* ---- acquisitions answered after their lease ---------------------------- */

/* With the proxy slower than the 300 ms lease in one direction, no way of
 * acquiring reports a hold; once the delay is gone nothing is left in
 * Redis, and both another client and this one lock at once. */
static void late_acquisitions_fail(rt_server *s, rt_proxy *p, rlock_client *b,
                                   const char *name, int64_t to_server_ms,
                                   int64_t to_client_ms)
{
    rlock_client *a = proxied_client(p, 0);
    rlock_mutex *ma = fixed_lease(a, name, 300);
    rlock_mutex *mb = rt_mutex(b, name, NULL);
    uint64_t handed_out;
    rt_locker l;

    /* Connected, scripts loaded: the delay below is all there is. */
    CHECK_RC(rlock_mutex_lock(ma), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(ma), RLOCK_OK);
    rt_proxy_set_delay(p, to_server_ms, to_client_ms);

    /* Redis grants each of these (the lock is written), but the answer
     * comes too late. */
    handed_out = (uint64_t)sets(s);
    CHECK_RC(rlock_mutex_trylock(ma), RLOCK_EBUSY);
    CHECK((uint64_t)sets(s) > handed_out);
    CHECK(rlock_mutex_token(ma) == 0);
    CHECK_RC(rlock_mutex_unlock(ma), RLOCK_ENOTOWNER);
    handed_out = (uint64_t)sets(s);
    CHECK_RC(rlock_mutex_timedlock(ma, 2000), RLOCK_ETIMEDOUT);
    CHECK((uint64_t)sets(s) > handed_out);
    CHECK(rlock_mutex_token(ma) == 0);
    /* lock() keeps trying, and takes the lock only once answers come in
     * time again. */
    rt_locker_start(&l, ma, 1);
    rt_sleep_ms(2500);
    CHECK(!l.done);

    rt_proxy_set_delay(p, 0, 0);
    CHECK_RC(rt_locker_join(&l), RLOCK_OK);
    RT_WAIT_UNTIL(rt_proxy_pending(p, BOTH) == 0, 10000);
    RT_WAIT_UNTIL(traces(s, name) == 0, 5000);
    CHECK_RC(rlock_mutex_trylock(mb), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(mb), RLOCK_OK);
    CHECK_RC(rlock_mutex_trylock(ma), RLOCK_OK);
    CHECK(rlock_mutex_token(ma) > 0);
    CHECK_RC(rlock_mutex_unlock(ma), RLOCK_OK);
    CHECK_INT(traces(s, name), ==, 0);
    rlock_mutex_free(mb);
    rlock_mutex_free(ma);
    rlock_client_close(a);
}

TEST(reply_later_than_the_lease_is_a_failure_and_cleaned_up)
{
    rt_server *s = rt_server_start(NULL);
    rt_proxy *p = rt_proxy_start(rt_server_port(s));
    rlock_client *b = rt_client(rt_server_url(s), NULL);
    rlock_client *a;
    rlock_mutex *ma, *mb;
    actor act;

    /* Replies held 800 ms, then requests held 800 ms. */
    late_acquisitions_fail(s, p, b, "late_reply", 0, 800);
    late_acquisitions_fail(s, p, b, "late_request", 800, 0);

    /* The undo is sent, not left to the lease: a request held 4 s takes
     * a 3 s lease that the late answer gives up at once. */
    a = proxied_client(p, 0);
    ma = fixed_lease(a, "late_undo", 3000);
    mb = rt_mutex(b, "late_undo", NULL);
    CHECK_RC(rlock_mutex_lock(ma), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(ma), RLOCK_OK);
    actor_start(&act, ma);
    rt_proxy_set_delay(p, 4000, 0);
    actor_begin(&act, op_trylock, 0);
    RT_WAIT_UNTIL(rt_proxy_pending(p, RT_PROXY_TO_SERVER) > 0, 5000);
    rt_proxy_set_delay(p, 0, 0); /* for the undo that follows */
    CHECK_RC(actor_end(&act), RLOCK_EBUSY);
    /* Redis set 3 s of lease just before answering: only the undo can
     * remove the key this soon. */
    RT_WAIT_UNTIL(traces(s, "late_undo") == 0, 1500);
    CHECK_RC(rlock_mutex_trylock(mb), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(mb), RLOCK_OK);
    CHECK_RC(actor_call(&act, op_trylock, 0), RLOCK_OK);
    CHECK_RC(actor_call(&act, op_unlock, 0), RLOCK_OK);
    actor_stop(&act);
    rlock_mutex_free(mb);
    rlock_mutex_free(ma);
    rlock_client_close(a);
    rlock_client_close(b);
    rt_proxy_stop(p);
    rt_server_stop(s);
}

/* ---- releases and extensions that arrive after the lease ---------------- */

/*
 * A holds name through the proxy with a 2 s lease and sends op; the proxy
 * holds the request back for delay_ms, or with delay_ms = 0 until B holds
 * (then the order below never depends on the machine's speed). Meanwhile
 * A's lease ends and B takes the lock through mb. Then the request reaches
 * Redis: B's lock must be exactly as it was, and op must report the loss.
 */
static void late_call_while_b_holds(rt_server *s, rt_proxy *p, rlock_mutex *mb,
                                    const char *name, int64_t delay_ms,
                                    int (*op)(rlock_mutex *, int64_t),
                                    int64_t arg)
{
    rlock_client *a = proxied_client(p, 0);
    rlock_mutex *ma = fixed_lease(a, name, 2000);
    char before[256], after[256];
    long long pttl_before, pttl_after;
    uint64_t token_b;
    char tok[32];
    actor act;
    int rc;

    actor_start(&act, ma);
    CHECK_RC(actor_call(&act, op_lock, 0), RLOCK_OK);
    if (delay_ms)
        rt_proxy_set_delay(p, delay_ms, 0);
    else
        rt_proxy_blackhole(p, RT_PROXY_TO_SERVER);
    actor_begin(&act, op, arg);
    /* A's request left while A's lease was running and waits in the
     * proxy. */
    RT_WAIT_UNTIL(rt_proxy_pending(p, RT_PROXY_TO_SERVER) > 0, 5000);
    rt_proxy_set_delay(p, 0, 0); /* for what follows it */
    CHECK_RC(rlock_mutex_timedlock(mb, 10000), RLOCK_OK);
    CHECK(actor_busy(&act));
    lock_hash(s, name, before, sizeof before, &pttl_before);
    rt_proxy_blackhole(p, 0);
    rc = actor_end(&act);
    CHECK_INT(rt_proxy_pending(p, BOTH), ==, 0);
    lock_hash(s, name, after, sizeof after, &pttl_after);
    printf("B's lock before: %s (%lld ms); after A's late call: %s (%lld ms)"
           "; A's call returned %d\n",
           before, pttl_before, after, pttl_after, rc);
    CHECK(strcmp(before, after) == 0);
    CHECK_INT(pttl_after, >, 0);
    CHECK_INT(pttl_after, <=, pttl_before);
    token_b = rlock_mutex_token(mb); /* drawn now if B's lock has none */
    CHECK(token_b > 0 &&
          strtoull(rt_lock_field(s, name, RT_TOKEN, tok, sizeof tok), NULL,
                   10) == token_b);
    CHECK_RC(rc, RLOCK_ELOST);
    /* A has forgotten its hold. */
    CHECK_RC(actor_call(&act, op_unlock, 0), RLOCK_ENOTOWNER);
    actor_stop(&act);
    rlock_mutex_free(ma);
    rlock_client_close(a);
}

TEST(delayed_release_never_deletes_a_newer_holders_lock)
{
    rt_server *s = rt_server_start(NULL);
    rt_proxy *p = rt_proxy_start(rt_server_port(s));
    rlock_client *b = rt_client(rt_server_url(s), NULL);
    rlock_mutex *mb = rt_mutex(b, "late_release", NULL);

    /* Held 6 s against a 2 s lease; then held until B holds. */
    late_call_while_b_holds(s, p, mb, "late_release", 6000, op_unlock, 0);
    CHECK_RC(rlock_mutex_unlock(mb), RLOCK_OK);
    CHECK_INT(traces(s, "late_release"), ==, 0);
    late_call_while_b_holds(s, p, mb, "late_release", 0, op_unlock, 0);
    CHECK_RC(rlock_mutex_unlock(mb), RLOCK_OK);
    CHECK_INT(traces(s, "late_release"), ==, 0);
    rlock_mutex_free(mb);
    rlock_client_close(b);
    rt_proxy_stop(p);
    rt_server_stop(s);
}

TEST(delayed_extend_never_extends_or_recreates_a_newer_holders_lock)
{
    rt_server *s = rt_server_start(NULL);
    rt_proxy *p = rt_proxy_start(rt_server_port(s));
    rlock_client *b = rt_client(rt_server_url(s), NULL);
    rlock_mutex *mb = fixed_lease(b, "late_extend", 20000);
    rlock_client *a;
    rlock_mutex *ma;
    actor act;

    /* A asks for 120 s while B holds with 20 s: held 6 s against A's 2 s
     * lease, then held until B holds. */
    late_call_while_b_holds(s, p, mb, "late_extend", 6000, op_extend, 120000);
    CHECK_RC(rlock_mutex_unlock(mb), RLOCK_OK);
    CHECK_INT(traces(s, "late_extend"), ==, 0);
    late_call_while_b_holds(s, p, mb, "late_extend", 0, op_extend, 120000);
    CHECK_RC(rlock_mutex_unlock(mb), RLOCK_OK);
    CHECK_INT(traces(s, "late_extend"), ==, 0);

    /* Nobody holds it when the extension arrives: it stays gone. */
    a = proxied_client(p, 0);
    ma = fixed_lease(a, "late_extend", 2000);
    actor_start(&act, ma);
    CHECK_RC(actor_call(&act, op_lock, 0), RLOCK_OK);
    rt_proxy_blackhole(p, RT_PROXY_TO_SERVER);
    actor_begin(&act, op_extend, 120000);
    RT_WAIT_UNTIL(rt_proxy_pending(p, RT_PROXY_TO_SERVER) > 0, 5000);
    RT_WAIT_UNTIL(traces(s, "late_extend") == 0, 5000);
    rt_proxy_blackhole(p, 0);
    CHECK_RC(actor_end(&act), RLOCK_ELOST);
    CHECK_INT(rt_proxy_pending(p, BOTH), ==, 0);
    CHECK_INT(traces(s, "late_extend"), ==, 0);
    CHECK_RC(rlock_mutex_trylock(mb), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(mb), RLOCK_OK);
    actor_stop(&act);
    rlock_mutex_free(ma);
    rlock_client_close(a);
    rlock_mutex_free(mb);
    rlock_client_close(b);
    rt_proxy_stop(p);
    rt_server_stop(s);
}

/* ---- the watchdog behind a slowing network ------------------------------ */

struct lost {
    atomic_int calls;
    atomic_llong first_ms; /* rt_now_ms() of the first call */
};

static void on_lost(rlock_mutex *m, void *arg)
{
    struct lost *l = arg;
    long long none = 0;

    (void)m;
    atomic_compare_exchange_strong(&l->first_ms, &none, rt_now_ms());
    atomic_fetch_add(&l->calls, 1);
}

TEST(watchdog_behind_a_slowing_proxy_reports_the_loss_and_leaves_nothing)
{
    rt_server *s = rt_server_start(NULL);
    rt_proxy *p = rt_proxy_start(rt_server_port(s));
    rlock_client *a = proxied_client(p, 600);
    rlock_client *b = rt_client(rt_server_url(s), NULL);
    rlock_client *c = rt_client(rt_server_url(s), NULL);
    struct lost lost;
    rlock_mutex_opts o;
    rlock_mutex *ma, *mb, *mc;
    int64_t slowed, b_took;

    atomic_init(&lost.calls, 0);
    atomic_init(&lost.first_ms, 0);
    rlock_mutex_opts_init(&o); /* lease_ms 0: renewed every 200 ms */
    o.on_lost = on_lost;
    o.on_lost_arg = &lost;
    ma = rt_mutex(a, "slowing", &o);
    mb = rt_mutex(b, "slowing", NULL);
    mc = rt_mutex(c, "slowing", NULL);

    CHECK_RC(rlock_mutex_lock(ma), RLOCK_OK);
    /* A round trip of 100 ms, well within the lease: renewals keep up. */
    rt_proxy_set_delay(p, 50, 50);
    rt_sleep_ms(2000);
    CHECK_INT(atomic_load(&lost.calls), ==, 0);
    CHECK_RC(rlock_mutex_trylock(mb), RLOCK_EBUSY);

    /* A round trip of 2 s: no renewal can arrive within the lease. */
    rt_proxy_set_delay(p, 1000, 1000);
    slowed = rt_now_ms();
    CHECK_RC(rlock_mutex_timedlock(mb, 10000), RLOCK_OK);
    b_took = rt_now_ms();
    RT_WAIT_UNTIL(atomic_load(&lost.calls) == 1, 10000);
    printf("delay raised at 0 ms; B took the lock at %lld ms; A's on_lost "
           "at %lld ms\n",
           (long long)(b_took - slowed), atomic_load(&lost.first_ms) - slowed);
    /* A counts its lease from before each renewal left, so it is told
     * before Redis lets the key go, and so before B can hold it; the
     * slack is for a busy machine's scheduling, well below the 1.5 s a
     * renewal still on its way used to add. */
    CHECK_INT(atomic_load(&lost.first_ms), <=, b_took + 1000);

    /* The network recovers: A's renewals are over, nothing of A's is in
     * the way. */
    rt_proxy_set_delay(p, 0, 0);
    RT_WAIT_UNTIL(rt_proxy_pending(p, BOTH) == 0, 10000);
    CHECK_RC(rlock_mutex_unlock(ma), RLOCK_ELOST);
    CHECK(rlock_mutex_token(ma) == 0);
    CHECK_RC(rlock_mutex_unlock(mb), RLOCK_OK);
    CHECK_INT(traces(s, "slowing"), ==, 0);
    CHECK_RC(rlock_mutex_trylock(mc), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(mc), RLOCK_OK);
    /* A takes it again, and keeps it for several leases. */
    CHECK_RC(rlock_mutex_trylock(ma), RLOCK_OK);
    rt_sleep_ms(1500);
    CHECK_RC(rlock_mutex_trylock(mc), RLOCK_EBUSY);
    CHECK_RC(rlock_mutex_unlock(ma), RLOCK_OK);
    CHECK_INT(atomic_load(&lost.calls), ==, 1);
    CHECK_INT(traces(s, "slowing"), ==, 0);

    rlock_mutex_free(mc);
    rlock_mutex_free(mb);
    rlock_mutex_free(ma);
    rlock_client_close(c);
    rlock_client_close(b);
    rlock_client_close(a);
    rt_proxy_stop(p);
    rt_server_stop(s);
}

/* ---- the proxy itself --------------------------------------------------- */

static void flush_all(redisContext *ctx)
{
    int done = 0;

    while (!done)
        CHECK(redisBufferWrite(ctx, &done) == REDIS_OK);
}

static long long reply_int(redisContext *ctx)
{
    redisReply *r = NULL;
    long long v;

    CHECK(redisGetReply(ctx, (void **)&r) == REDIS_OK && r);
    CHECK(r->type == REDIS_REPLY_INTEGER);
    v = r->integer;
    freeReplyObject(r);
    return v;
}

/* ---- a request answered never, run last ---------------------------------- */

/* A client behind p that gives up on a reply after timeout_ms. */
static rlock_client *impatient_client(rt_proxy *p, int64_t watchdog_lease_ms,
                                      int timeout_ms)
{
    rlock_client_opts o;

    rlock_client_opts_init(&o);
    o.command_timeout_ms = timeout_ms;
    if (watchdog_lease_ms)
        o.watchdog_lease_ms = watchdog_lease_ms;
    return rt_client(rt_proxy_url(p), &o);
}

/*
 * A request whose answer never came may still reach Redis, after a request
 * sent later on another connection: the lease it sets is then the last one
 * set. A holds name with 5 s and its token; late, a request that sets a
 * 2 s lease (through ma, or ma2, a handle of the same name with a 2 s
 * lease), is held in the proxy for 4 s and A's call gives up on it; A
 * extends to 20 s on a fresh connection, confirmed at once; then the 2 s
 * request runs, and the key goes 2 s later. B then holds the lock: A must
 * not believe it holds it still (its token must not be handed out as
 * valid).
 */
static void unanswered_shorter_runs_last(const char *name,
                                         int (*late)(rlock_mutex *ma,
                                                     rlock_mutex *ma2))
{
    rt_server *s = rt_server_start(NULL);
    rt_proxy *p = rt_proxy_start(rt_server_port(s));
    rlock_client *a = impatient_client(p, 0, 1000);
    rlock_client *b = rt_client(rt_server_url(s), NULL);
    rlock_mutex *ma = fixed_lease(a, name, 5000);
    rlock_mutex *ma2 = fixed_lease(a, name, 2000);
    rlock_mutex *mb = rt_mutex(b, name, NULL);
    uint64_t token;

    CHECK_RC(rlock_mutex_lock(ma), RLOCK_OK);
    CHECK_RC(rlock_mutex_fence(ma, &token), RLOCK_OK);
    rt_proxy_set_delay(p, 4000, 0);
    CHECK_RC(late(ma, ma2), RLOCK_ENOREPLY);
    CHECK_INT(rt_proxy_pending(p, RT_PROXY_TO_SERVER), >, 0);
    rt_proxy_set_delay(p, 0, 0);
    CHECK_RC(rlock_mutex_extend(ma, 20000), RLOCK_OK);
    /* The order this test is about: the 20 s extension ran first. */
    CHECK_INT(rt_proxy_pending(p, RT_PROXY_TO_SERVER), >, 0);
    CHECK_INT(rt_cmd_int(s, "PTTL {rlock:%s}", name), >, 10000);
    RT_WAIT_UNTIL(rt_proxy_pending(p, RT_PROXY_TO_SERVER) == 0, 10000);
    RT_WAIT_UNTIL(rt_cmd_int(s, "PTTL {rlock:%s}", name) <= 2000, 5000);
    CHECK_RC(rlock_mutex_timedlock(mb, 10000), RLOCK_OK);
    CHECK_RC(rlock_mutex_fence(ma, &token), RLOCK_ELOST);
    CHECK_RC(rlock_mutex_unlock(ma), RLOCK_ELOST);
    CHECK_RC(rlock_mutex_unlock(mb), RLOCK_OK);
    rlock_mutex_free(ma);
    rlock_mutex_free(ma2);
    rlock_mutex_free(mb);
    rlock_client_close(a);
    rlock_client_close(b);
    rt_proxy_stop(p);
    rt_server_stop(s);
}

static int extend_to_2s(rlock_mutex *ma, rlock_mutex *ma2)
{
    (void)ma2;
    return rlock_mutex_extend(ma, 2000);
}

/* A re-entry, whose count Redis keeps (one server), sets its handle's
 * lease. */
static int reenter_with_2s(rlock_mutex *ma, rlock_mutex *ma2)
{
    (void)ma;
    return rlock_mutex_trylock(ma2);
}

TEST(an_unanswered_shorter_extend_that_runs_last_is_counted_with)
{
    unanswered_shorter_runs_last("late_short", extend_to_2s);
}

TEST(an_unanswered_reentry_that_runs_last_is_counted_with)
{
    unanswered_shorter_runs_last("late_reentry", reenter_with_2s);
}

/*
 * The same with the watchdog's renewal (3 s lease) as the request that
 * runs last, after A's extension to 120 s: the script's PEXPIRE on a server
 * without SET IFEQ, the native SET ... IFEQ ... PX on Valkey 8.1. Until the
 * test ends (past when the key would have gone), B must never hold the
 * lock while A's token is still handed out as valid.
 */
static void unanswered_renewal_runs_last(const char *binary)
{
    rt_server_opts so;
    rt_server *s;
    rt_proxy *p;
    rlock_client *a, *b;
    rlock_mutex *ma, *mb;
    uint64_t token;
    int64_t t_end;
    int b_held = 0;

    memset(&so, 0, sizeof so);
    so.binary = binary;
    s = rt_server_start(&so);
    p = rt_proxy_start(rt_server_port(s));
    a = impatient_client(p, 3000, 1000);
    b = rt_client(rt_server_url(s), NULL);
    ma = rt_mutex(a, "late_renewal", NULL);
    mb = rt_mutex(b, "late_renewal", NULL);

    CHECK_RC(rlock_mutex_lock(ma), RLOCK_OK);
    CHECK_RC(rlock_mutex_fence(ma, &token), RLOCK_OK);
    /* A first renewal (a server without SET IFEQ has said so by then, and
     * the script renews), then one held for 4 s, given up after 1 s. */
    rt_sleep_ms(1500);
    rt_proxy_set_delay(p, 4000, 0);
    RT_WAIT_UNTIL(rt_proxy_pending(p, RT_PROXY_TO_SERVER) > 0, 5000);
    rt_proxy_set_delay(p, 0, 0);
    rt_sleep_ms(1200);
    /* The extension runs before the held renewal. */
    CHECK_RC(rlock_mutex_extend(ma, 120000), RLOCK_OK);
    CHECK_INT(rt_proxy_pending(p, RT_PROXY_TO_SERVER), >, 0);
    RT_WAIT_UNTIL(rt_proxy_pending(p, RT_PROXY_TO_SERVER) == 0, 10000);
    /* A's next renewal, as a 120 s lease would have it, is 20 s or more
     * after the extension; the late renewal's lease ends 3 s after it
     * ran. */
    t_end = rt_now_ms() + 5000;
    while (rt_now_ms() < t_end && !b_held) {
        int rc = rlock_mutex_trylock(mb);
        CHECK(rc == RLOCK_OK || rc == RLOCK_EBUSY);
        if (rc == RLOCK_OK) {
            b_held = 1;
            CHECK_RC(rlock_mutex_fence(ma, &token), RLOCK_ELOST);
            CHECK_RC(rlock_mutex_unlock(mb), RLOCK_OK);
        }
        rt_sleep_ms(20);
    }
    printf("B %s the lock while A's watchdog ran\n",
           b_held ? "took" : "never took");
    if (!b_held) {
        CHECK_RC(rlock_mutex_fence(ma, &token), RLOCK_OK);
        CHECK_RC(rlock_mutex_unlock(ma), RLOCK_OK);
    }
    rlock_mutex_free(ma);
    rlock_mutex_free(mb);
    rlock_client_close(a);
    rlock_client_close(b);
    rt_proxy_stop(p);
    rt_server_stop(s);
}

TEST(an_unanswered_renewal_that_runs_last_is_counted_with)
{
    unanswered_renewal_runs_last(NULL);
}

TEST(an_unanswered_native_renewal_that_runs_last_is_counted_with)
{
    unanswered_renewal_runs_last(rt_valkey81_binary());
}

TEST(proxy_delays_each_direction_in_order_and_holds_back_on_demand)
{
    rt_server *s = rt_server_start(NULL);
    rt_proxy *p = rt_proxy_start(rt_server_port(s));
    struct timeval tv = {10, 0};
    redisContext *ctx =
        redisConnectWithTimeout("127.0.0.1", rt_proxy_port(p), tv);
    int64_t t0;
    int i;

    CHECK(ctx && !ctx->err);
    CHECK(redisSetTimeout(ctx, tv) == REDIS_OK);
    RT_WAIT_UNTIL(rt_proxy_accepted(p) == 1, 5000);

    /* Each direction on its own. */
    rt_proxy_set_delay(p, 300, 0);
    t0 = rt_now_ms();
    redisAppendCommand(ctx, "INCR n");
    CHECK_INT(reply_int(ctx), ==, 1);
    CHECK_INT(rt_now_ms() - t0, >=, 300);
    rt_proxy_set_delay(p, 0, 300);
    t0 = rt_now_ms();
    redisAppendCommand(ctx, "INCR n");
    CHECK_INT(reply_int(ctx), ==, 2);
    CHECK_INT(rt_now_ms() - t0, >=, 300);

    /* Bytes read after the delay was lowered wait for those before. */
    rt_proxy_set_delay(p, 500, 0);
    t0 = rt_now_ms();
    for (i = 0; i < 50; i++)
        redisAppendCommand(ctx, "INCR n");
    flush_all(ctx);
    RT_WAIT_UNTIL(rt_proxy_pending(p, RT_PROXY_TO_SERVER) > 0, 5000);
    rt_proxy_set_delay(p, 0, 0);
    for (i = 0; i < 50; i++)
        redisAppendCommand(ctx, "INCR n");
    flush_all(ctx);
    for (i = 0; i < 100; i++)
        CHECK_INT(reply_int(ctx), ==, 3 + i);
    CHECK_INT(rt_now_ms() - t0, >=, 500);

    /* Held back until released. */
    rt_proxy_blackhole(p, RT_PROXY_TO_SERVER);
    redisAppendCommand(ctx, "INCR n");
    flush_all(ctx);
    RT_WAIT_UNTIL(rt_proxy_pending(p, RT_PROXY_TO_SERVER) > 0, 5000);
    rt_sleep_ms(300);
    CHECK_INT(rt_cmd_int(s, "INCRBY n 0"), ==, 102);
    rt_proxy_blackhole(p, RT_PROXY_TO_CLIENT);
    RT_WAIT_UNTIL(rt_proxy_pending(p, RT_PROXY_TO_CLIENT) > 0, 5000);
    CHECK_INT(rt_cmd_int(s, "INCRBY n 0"), ==, 103);
    rt_sleep_ms(300);
    CHECK_INT(rt_proxy_pending(p, RT_PROXY_TO_CLIENT), >, 0);
    rt_proxy_blackhole(p, 0);
    CHECK_INT(reply_int(ctx), ==, 103);
    CHECK_INT(rt_proxy_pending(p, BOTH), ==, 0);

    /* A second connection is a second pair; stopping closes both. */
    {
        redisContext *ctx2 =
            redisConnectWithTimeout("127.0.0.1", rt_proxy_port(p), tv);
        CHECK(ctx2 && !ctx2->err);
        redisAppendCommand(ctx2, "INCR n");
        CHECK_INT(reply_int(ctx2), ==, 104);
        CHECK_INT(rt_proxy_accepted(p), ==, 2);
        rt_proxy_stop(p);
        CHECK(redisCommand(ctx2, "PING") == NULL);
        redisFree(ctx2);
    }
    CHECK(redisCommand(ctx, "PING") == NULL);
    redisFree(ctx);
    rt_server_stop(s);
}
