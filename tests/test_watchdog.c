/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Leases: the watchdog renews held locks, batches its renewals, stops at
 * once when a hold ends, respects the renewal cap; a lost hold is reported
 * once through on_lost and then by unlock; rlock_with always unlocks.
 */
#include <stdatomic.h>
#include <string.h>

#include "harness/test.h"

static rlock_client *watchdog_client(rt_server *s, int64_t lease_ms)
{
    rlock_client_opts o;

    rlock_client_opts_init(&o);
    o.watchdog_lease_ms = lease_ms;
    return rt_client(rt_server_url(s), &o);
}

static atomic_int lost_calls;
static rlock_mutex *lost_mutex;

static void count_lost(rlock_mutex *m, void *arg)
{
    CHECK(arg == &lost_calls);
    lost_mutex = m;
    atomic_fetch_add(&lost_calls, 1);
}

static rlock_mutex *noticed_mutex(rlock_client *c, const char *name,
                                  int64_t lease_ms, uint32_t max_renewals)
{
    rlock_mutex_opts o;

    rlock_mutex_opts_init(&o);
    o.lease_ms = lease_ms;
    o.max_renewals = max_renewals;
    o.on_lost = count_lost;
    o.on_lost_arg = &lost_calls;
    atomic_store(&lost_calls, 0);
    return rt_mutex(c, name, &o);
}

TEST(watchdog_keeps_the_lock_for_many_leases)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *c = watchdog_client(s, 600);
    rlock_client *other = rt_client(rt_server_url(s), NULL);
    rlock_mutex *m = noticed_mutex(c, "kept", 0, 0);
    rlock_mutex *mo = rt_mutex(other, "kept", NULL);
    uint64_t token;

    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    token = rlock_mutex_token(m);
    CHECK_INT(rt_cmd_int(s, "PTTL {rlock:kept}"), <=, 600);
    rt_sleep_ms(2000); /* more than three leases */
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:kept}"), ==, 1);
    CHECK_RC(rlock_mutex_trylock(mo), RLOCK_EBUSY);
    CHECK(rlock_mutex_token(m) == token);
    CHECK_INT(atomic_load(&lost_calls), ==, 0);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:kept}"), ==, 0);

    /* Renewal stops at once on unlock: no script call for 4 periods. */
    freeReplyObject(rt_cmd(s, "CONFIG RESETSTAT"));
    rt_sleep_ms(800);
    CHECK_INT(rt_cmdstat_calls(s, "evalsha"), ==, 0);
    CHECK_INT(rt_cmdstat_calls(s, "eval"), ==, 0);
    rlock_mutex_free(m);
    rlock_mutex_free(mo);
    rlock_client_close(c);
    rlock_client_close(other);
    rt_server_stop(s);
}

TEST(renewal_stops_on_mutex_free_and_client_close)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *c = watchdog_client(s, 300);
    rlock_mutex *m = rt_mutex(c, "freed", NULL);

    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    rt_sleep_ms(250);
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:freed}"), ==, 1);
    rlock_mutex_free(m);
    freeReplyObject(rt_cmd(s, "CONFIG RESETSTAT"));
    rt_sleep_ms(500);
    CHECK_INT(rt_cmdstat_calls(s, "evalsha"), ==, 0);
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:freed}"), ==, 0); /* expired */

    m = rt_mutex(c, "closed", NULL);
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    rt_sleep_ms(250);
    /* Closing with a mutex alive is against the contract; free it first,
     * after checking the lease is renewed up to this point. */
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:closed}"), ==, 1);
    rlock_mutex_free(m);
    rlock_client_close(c);
    freeReplyObject(rt_cmd(s, "CONFIG RESETSTAT"));
    rt_sleep_ms(500);
    CHECK_INT(rt_cmdstat_calls(s, "evalsha"), ==, 0);
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:closed}"), ==, 0);
    rt_server_stop(s);
}

TEST(renewal_cap_lets_the_key_expire_and_reports_the_loss)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *c = watchdog_client(s, 600);
    rlock_mutex *m = noticed_mutex(c, "capped", 0, 2);
    int64_t t0 = rt_now_ms();

    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    rt_sleep_ms(750);
    /* Past the first lease: it was renewed. */
    if (rt_now_ms() - t0 < 950)
        CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:capped}"), ==, 1);
    /* Two renewals (at ~200 and ~400 ms) end the lease near 1 s. */
    RT_WAIT_UNTIL(rt_cmd_int(s, "EXISTS {rlock:capped}") == 0, 3000);
    RT_WAIT_UNTIL(atomic_load(&lost_calls) == 1, 3000);
    CHECK(lost_mutex == m);
    rt_sleep_ms(300);
    CHECK_INT(atomic_load(&lost_calls), ==, 1);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_ELOST);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_ENOTOWNER);
    rlock_mutex_free(m);
    rlock_client_close(c);
    rt_server_stop(s);
}

TEST(thousand_locks_renew_in_batches)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *c = watchdog_client(s, 600);
    rlock_mutex *m[1000];
    long long calls;
    char name[32];
    int i;

    for (i = 0; i < 1000; i++) {
        snprintf(name, sizeof name, "many:%d", i);
        m[i] = rt_mutex(c, name, NULL);
        CHECK_RC(rlock_mutex_lock(m[i]), RLOCK_OK);
    }
    freeReplyObject(rt_cmd(s, "CONFIG RESETSTAT"));
    rt_sleep_ms(1500); /* 2.5 leases, ~7 renewal periods */
    calls = rt_cmdstat_calls(s, "evalsha") + rt_cmdstat_calls(s, "eval");
    printf("script calls for 1000 locks over 1.5 s: %lld\n", calls);
    /* One call per lock per period would be ~7000. */
    CHECK_INT(calls, >=, 3);
    CHECK_INT(calls, <=, 40);
    CHECK_INT(rt_cmdstat_calls(s, "pexpire"), >=, 3000);
    for (i = 0; i < 1000; i++) {
        snprintf(name, sizeof name, "{rlock:many:%d}", i);
        CHECK_INT(rt_cmd_int(s, "PTTL %s", name), >, 0);
    }
    for (i = 0; i < 1000; i++) {
        CHECK_RC(rlock_mutex_unlock(m[i]), RLOCK_OK);
        rlock_mutex_free(m[i]);
    }
    rlock_client_close(c);
    rt_server_stop(s);
}

TEST(on_lost_fires_once_when_the_key_is_deleted_or_overwritten)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *c = watchdog_client(s, 300);
    rlock_mutex *m = noticed_mutex(c, "deleted", 0, 0);
    redisReply *r;

    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    CHECK_INT(rt_cmd_int(s, "DEL {rlock:deleted}"), ==, 1);
    RT_WAIT_UNTIL(atomic_load(&lost_calls) == 1, 2000);
    rt_sleep_ms(300);
    CHECK_INT(atomic_load(&lost_calls), ==, 1);
    CHECK(rlock_mutex_token(m) == 0);
    CHECK_RC(rlock_mutex_extend(m, 1000), RLOCK_ELOST);
    rlock_mutex_free(m);

    m = noticed_mutex(c, "overwritten", 0, 0);
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    r = rt_cmd(s, "SET {rlock:overwritten} %s KEEPTTL", "intruder:1 999 1 0 1");
    freeReplyObject(r);
    RT_WAIT_UNTIL(atomic_load(&lost_calls) == 1, 2000);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_ELOST);
    /* The intruder's lock is untouched. */
    r = rt_cmd(s, "GET {rlock:overwritten}");
    CHECK(r->type == REDIS_REPLY_STRING &&
          strcmp(r->str, "intruder:1 999 1 0 1") == 0);
    freeReplyObject(r);
    rlock_mutex_free(m);
    rlock_client_close(c);
    rt_server_stop(s);
}

TEST(on_lost_fires_when_redis_restarts_or_stays_unreachable)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client_opts o;
    rlock_client *c;
    rlock_mutex *m;

    rlock_client_opts_init(&o);
    o.watchdog_lease_ms = 300;
    o.command_timeout_ms = 100;
    o.connect_timeout_ms = 100;
    c = rt_client(rt_server_url(s), &o);
    m = noticed_mutex(c, "restarted", 0, 0);
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    rt_server_restart(s); /* no persistence: the lock is gone */
    RT_WAIT_UNTIL(atomic_load(&lost_calls) == 1, 3000);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_ELOST);

    /* Unreachable past the lease end: paused, renewals time out. */
    atomic_store(&lost_calls, 0);
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    rt_server_pause(s);
    RT_WAIT_UNTIL(atomic_load(&lost_calls) == 1, 3000);
    rt_server_resume(s);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_ELOST);
    CHECK_INT(atomic_load(&lost_calls), ==, 1);
    rlock_mutex_free(m);
    rlock_client_close(c);
    rt_server_stop(s);
}

TEST(fixed_lease_is_not_renewed_and_its_end_is_reported)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *c = watchdog_client(s, 300);
    rlock_mutex *m = noticed_mutex(c, "fixed", 1000, 0);

    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    rt_sleep_ms(500);
    CHECK_RC(rlock_mutex_extend(m, 1000), RLOCK_OK); /* by hand */
    rt_sleep_ms(700); /* past the first lease: the extension held */
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:fixed}"), ==, 1);
    CHECK_INT(atomic_load(&lost_calls), ==, 0);
    RT_WAIT_UNTIL(atomic_load(&lost_calls) == 1, 3000);
    /* The client counts the lease from before its request left, so Redis
     * may keep the key up to a round trip longer. */
    RT_WAIT_UNTIL(rt_cmd_int(s, "EXISTS {rlock:fixed}") == 0, 1000);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_ELOST);
    rlock_mutex_free(m);
    rlock_client_close(c);
    rt_server_stop(s);
}

struct with_ctx {
    rt_server *s;
    int calls;
    uint64_t token;
    int sleep_ms;
    int delete_key;
};

static int critical(void *arg, uint64_t token)
{
    struct with_ctx *w = arg;

    w->calls++;
    w->token = token;
    if (w->delete_key)
        CHECK_INT(rt_cmd_int(w->s, "DEL {rlock:with}"), ==, 1);
    if (w->sleep_ms)
        rt_sleep_ms(w->sleep_ms);
    return 42;
}

TEST(rlock_with_unlocks_on_every_path_and_reports_loss)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *c = watchdog_client(s, 300);
    rlock_client *other = rt_client(rt_server_url(s), NULL);
    rlock_mutex *m = rt_mutex(c, "with", NULL);
    rlock_mutex *mo = rt_mutex(other, "with", NULL);
    struct with_ctx w = {s, 0, 0, 0, 0};

    CHECK_RC(rlock_with(m, RLOCK_WAIT_FOREVER, critical, &w), 42);
    CHECK_INT(w.calls, ==, 1);
    CHECK(w.token > 0);
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:with}"), ==, 0);

    /* Not obtained: fn is not called. */
    CHECK_RC(rlock_mutex_lock(mo), RLOCK_OK);
    CHECK_RC(rlock_with(m, 100, critical, &w), RLOCK_ETIMEDOUT);
    CHECK_RC(rlock_with(m, 0, critical, &w), RLOCK_ETIMEDOUT);
    CHECK_INT(w.calls, ==, 1);
    CHECK_RC(rlock_mutex_unlock(mo), RLOCK_OK);

    /* Lost while fn ran: fn's work is done, then the caller hears of it. */
    w.delete_key = 1;
    w.sleep_ms = 500;
    CHECK_RC(rlock_with(m, 1000, critical, &w), RLOCK_ELOST);
    CHECK_INT(w.calls, ==, 2);
    CHECK(rlock_mutex_token(m) == 0);
    rlock_mutex_free(m);
    rlock_mutex_free(mo);
    rlock_client_close(c);
    rlock_client_close(other);
    rt_server_stop(s);
}

/* The background thread bounds its own round trips by its holds' lease
 * ends; code the application runs in on_lost must not inherit that bound.
 * The callback asks a second server, stopped for 1 s, for a lock's status:
 * with that client's 2 s timeout the call waits and succeeds. */
struct slow_call {
    rt_server *other;
    rlock_mutex *other_mutex;
    int rc;
    int64_t took_ms;
};

static void *resume_later(void *arg)
{
    rt_sleep_ms(1000);
    rt_server_resume(arg);
    return NULL;
}

static void status_from_callback(rlock_mutex *m, void *arg)
{
    struct slow_call *p = arg;
    rlock_status st;
    pthread_t t;
    int64_t t0 = rt_now_ms();

    (void)m;
    rt_server_pause(p->other);
    pthread_create(&t, NULL, resume_later, p->other);
    p->rc = rlock_mutex_status(p->other_mutex, &st);
    p->took_ms = rt_now_ms() - t0;
    pthread_join(t, NULL);
}

TEST(on_lost_callbacks_get_the_clients_own_timeouts)
{
    rt_server *s = rt_server_start(NULL), *other = rt_server_start(NULL);
    struct slow_call p = {other, NULL, 99, 0};
    rlock_client_opts o;
    rlock_mutex_opts mo;
    rlock_client *c, *c2;
    rlock_mutex *m;

    rlock_client_opts_init(&o);
    o.watchdog_lease_ms = 300;
    c = rt_client(rt_server_url(s), &o);
    c2 = rt_client(rt_server_url(other), NULL);
    p.other_mutex = rt_mutex(c2, "elsewhere", NULL);
    rlock_mutex_opts_init(&mo);
    mo.on_lost = status_from_callback;
    mo.on_lost_arg = &p;
    m = rt_mutex(c, "callback-timeouts", &mo);
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    /* Renewals time out at the lease end; the loss is reported. */
    rt_server_pause(s);
    RT_WAIT_UNTIL(p.rc != 99, 10000);
    rt_server_resume(s);
    CHECK_RC(p.rc, RLOCK_OK);
    CHECK_INT(p.took_ms, >=, 900);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_ELOST);
    rlock_mutex_free(m);
    rlock_client_close(c);
    rlock_mutex_free(p.other_mutex);
    rlock_client_close(c2);
    rt_server_stop(other);
    rt_server_stop(s);
}

/* One key of another type under one lock's name (someone's data put there
 * after the hold was taken) fails that hold only: the batched renewal goes
 * on for the client's other holds. Each layout. */
static atomic_int bad_lost, good_lost;

static void count_into(rlock_mutex *m, void *arg)
{
    (void)m;
    atomic_fetch_add((atomic_int *)arg, 1);
}

TEST(a_key_of_another_type_fails_only_its_own_hold_in_a_renewal_batch)
{
    static const int layouts[] = {RLOCK_LAYOUT_NATIVE, RLOCK_LAYOUT_TOKEN,
                                  RLOCK_LAYOUT_REDISSON};
    static const char *const bad_keys[] = {"{rlock:bad}", "bad", "bad"};
    static const char *const good_keys[] = {"{rlock:good}", "good", "good"};
    rt_server *s = rt_server_start(NULL);
    /* A 1.2 s lease, renewed every 400 ms: room for a renewal that a
     * busy machine delays, so that only the bad key can end a hold. */
    rlock_client *c = watchdog_client(s, 1200);
    size_t i;

    for (i = 0; i < 3; i++) {
        rlock_mutex_opts o;
        rlock_mutex *good, *bad;

        rlock_mutex_opts_init(&o);
        o.layout = layouts[i];
        o.on_lost = count_into;
        o.on_lost_arg = &good_lost;
        good = rt_mutex(c, "good", &o);
        o.on_lost_arg = &bad_lost;
        bad = rt_mutex(c, "bad", &o);
        atomic_store(&good_lost, 0);
        atomic_store(&bad_lost, 0);
        CHECK_RC(rlock_mutex_lock(good), RLOCK_OK);
        CHECK_RC(rlock_mutex_lock(bad), RLOCK_OK);
        /* Both renew in one batch; then bad's key becomes a list. */
        freeReplyObject(rt_cmd(s, "DEL %s", bad_keys[i]));
        freeReplyObject(rt_cmd(s, "RPUSH %s someone's-data", bad_keys[i]));
        RT_WAIT_UNTIL(atomic_load(&bad_lost) == 1, 5000);
        /* Two more leases' worth of renewals: good is still held. */
        rt_sleep_ms(2400);
        CHECK_INT(atomic_load(&good_lost), ==, 0);
        CHECK_INT(rt_cmd_int(s, "PTTL %s", good_keys[i]), >, 0);
        CHECK_RC(rlock_mutex_unlock(good), RLOCK_OK);
        CHECK_RC(rlock_mutex_unlock(bad), RLOCK_ELOST);
        /* The list is someone's data: untouched. */
        CHECK_INT(rt_cmd_int(s, "LLEN %s", bad_keys[i]), ==, 1);
        freeReplyObject(rt_cmd(s, "DEL %s", bad_keys[i]));
        rlock_mutex_free(good);
        rlock_mutex_free(bad);
    }
    rlock_client_close(c);
    rt_server_stop(s);
}

/* ---- the native compare-and-set renewal --------------------------------- */

static atomic_int calm_lost, counted_lost, typed_lost, queued_lost;

static rlock_mutex *counting_mutex(rlock_client *c, const char *name,
                                   atomic_int *lost)
{
    rlock_mutex_opts o;

    rlock_mutex_opts_init(&o);
    o.on_lost = count_into;
    o.on_lost_arg = lost;
    atomic_store(lost, 0);
    return rt_mutex(c, name, &o);
}

/* The end in the value of a lock with waiters queued (0 if none). */
static long long end_ms(rt_server *s, const char *name)
{
    char buf[32];

    return strtoll(rt_lock_field(s, name, RT_END, buf, sizeof buf), NULL, 10);
}

/* On a server with SET IFEQ (Valkey 8.1), a calm hold, whose whole value
 * its client knows, is renewed by a SET ... IFEQ ... PX, one pipeline per
 * batch: the count and the token are in the value it compares, a
 * hold with waiters queued (the lease's end in its value) is left to the
 * script, and a hold whose key went, or became another type, is lost. */
TEST(watchdog_renews_calm_holds_with_set_ifeq_on_valkey_8_1)
{
    rt_server_opts so;
    rt_server *s;
    rlock_client *c, *w;
    rlock_mutex *calm, *counted, *typed, *queued, *mw;
    uint64_t token;
    long long end1;
    rt_locker l;

    memset(&so, 0, sizeof so);
    so.binary = rt_valkey81_binary();
    s = rt_server_start(&so);
    /* A 1.2 s lease, renewed every 400 ms. */
    c = watchdog_client(s, 1200);
    w = rt_client(rt_server_url(s), NULL);
    calm = counting_mutex(c, "calm", &calm_lost);
    counted = counting_mutex(c, "counted", &counted_lost);
    typed = counting_mutex(c, "typed", &typed_lost);
    queued = counting_mutex(c, "queued", &queued_lost);
    mw = rt_mutex(w, "queued", NULL);
    CHECK_RC(rlock_mutex_lock(calm), RLOCK_OK); /* "... 1 0 0" */
    CHECK_RC(rlock_mutex_lock(counted), RLOCK_OK);
    CHECK_RC(rlock_mutex_lock(counted), RLOCK_OK); /* count 2 */
    CHECK_RC(rlock_mutex_fence(counted, &token), RLOCK_OK); /* a token */
    CHECK(token > 0);
    CHECK_RC(rlock_mutex_lock(typed), RLOCK_OK);
    CHECK_RC(rlock_mutex_lock(queued), RLOCK_OK);
    rt_locker_start(&l, mw, 1);
    RT_WAIT_UNTIL(end_ms(s, "queued") > 0, 10000);
    end1 = end_ms(s, "queued");
    freeReplyObject(rt_cmd(s, "CONFIG RESETSTAT"));

    /* Four periods: every hold renewed, natively but the queued one. */
    rt_sleep_ms(1600);
    CHECK_INT(atomic_load(&calm_lost) + atomic_load(&counted_lost) +
                  atomic_load(&typed_lost) + atomic_load(&queued_lost),
              ==, 0);
    /* The calm three by SET IFEQ (at least three rounds), none by the
     * script's PEXPIRE; the queued one by the script. */
    CHECK_INT(rt_cmdstat_calls(s, "set"), >=, 9);
    CHECK_INT(rt_cmdstat_calls(s, "pexpire"), ==, 0);
    CHECK_INT(rt_cmdstat_calls(s, "evalsha"), >=, 3);
    CHECK_INT(rt_cmd_int(s, "PTTL {rlock:calm}"), >, 0);
    CHECK_INT(rt_cmd_int(s, "PTTL {rlock:counted}"), >, 0);
    CHECK_INT(rt_lock_count(s, "counted"), ==, 2);
    CHECK_INT(end_ms(s, "queued"), >, end1); /* the script moved it */
    CHECK(!l.done);

    /* A key gone, a key of another type: those holds are lost, alone. */
    freeReplyObject(rt_cmd(s, "DEL {rlock:calm}"));
    freeReplyObject(rt_cmd(s, "DEL {rlock:typed}"));
    freeReplyObject(rt_cmd(s, "HSET {rlock:typed} someone data"));
    RT_WAIT_UNTIL(atomic_load(&calm_lost) == 1 && atomic_load(&typed_lost) == 1,
                  5000);
    /* Those answers (nil, WRONGTYPE) do not make the client give up the
     * native form: the calm hold left is still renewed without PEXPIRE. */
    freeReplyObject(rt_cmd(s, "CONFIG RESETSTAT"));
    rt_sleep_ms(1200);
    CHECK_INT(atomic_load(&counted_lost) + atomic_load(&queued_lost), ==, 0);
    CHECK_INT(rt_cmdstat_calls(s, "pexpire"), ==, 0);
    CHECK_INT(rt_cmdstat_calls(s, "set"), >=, 2);
    CHECK_INT(rt_cmd_int(s, "HLEN {rlock:typed}"), ==, 1);
    CHECK_RC(rlock_mutex_unlock(calm), RLOCK_ELOST);
    CHECK_RC(rlock_mutex_unlock(typed), RLOCK_ELOST);
    CHECK_RC(rlock_mutex_unlock(counted), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(counted), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(queued), RLOCK_OK);
    CHECK_RC(rt_locker_join(&l), RLOCK_OK);
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:counted} {rlock:queued}"), ==, 0);
    rlock_mutex_free(calm);
    rlock_mutex_free(counted);
    rlock_mutex_free(typed);
    rlock_mutex_free(queued);
    rlock_mutex_free(mw);
    rlock_client_close(c);
    rlock_client_close(w);
    rt_server_stop(s);
}

/* A server without SET IFEQ (Redis 7, Valkey 8.0) answers the native
 * renewal with errors: that batch goes to the script at once, nothing is
 * lost, and the client tries the native form no more for a while. */
TEST(watchdog_renews_with_the_script_where_set_ifeq_is_unknown)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *c = watchdog_client(s, 600); /* renewed every 200 ms */
    rlock_mutex *m = noticed_mutex(c, "older", 0, 0);

    freeReplyObject(rt_cmd(s, "CONFIG RESETSTAT"));
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK); /* a SET NX */
    rt_sleep_ms(1500);
    CHECK_INT(atomic_load(&lost_calls), ==, 0);
    CHECK_INT(rt_cmd_int(s, "PTTL {rlock:older}"), >, 0);
    /* One SET IFEQ tried (refused), then the script every period. */
    CHECK_INT(rt_cmdstat_calls(s, "set"), ==, 2);
    CHECK_INT(rt_cmdstat_calls(s, "evalsha"), >=, 4);
    CHECK_INT(rt_cmdstat_calls(s, "pexpire"), >=, 4);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    rlock_mutex_free(m);
    rlock_client_close(c);
    rt_server_stop(s);
}

/* A thousand calm holds on Valkey 8.1: a pipeline per period renews
 * them all, and no script runs. */
TEST(thousand_calm_holds_renew_without_a_script_on_valkey_8_1)
{
    rt_server_opts so;
    rt_server *s;
    rlock_client *c;
    rlock_mutex *m[1000];
    char name[32];
    int i;

    memset(&so, 0, sizeof so);
    so.binary = rt_valkey81_binary();
    s = rt_server_start(&so);
    c = watchdog_client(s, 900);
    for (i = 0; i < 1000; i++) {
        snprintf(name, sizeof name, "many:%d", i);
        m[i] = rt_mutex(c, name, NULL);
        CHECK_RC(rlock_mutex_lock(m[i]), RLOCK_OK);
    }
    freeReplyObject(rt_cmd(s, "CONFIG RESETSTAT"));
    rt_sleep_ms(1500); /* ~5 renewal periods */
    CHECK_INT(rt_cmdstat_calls(s, "set"), >=, 3000);
    CHECK_INT(rt_cmdstat_calls(s, "evalsha") + rt_cmdstat_calls(s, "eval"),
              ==, 0);
    for (i = 0; i < 1000; i++) {
        snprintf(name, sizeof name, "{rlock:many:%d}", i);
        CHECK_INT(rt_cmd_int(s, "PTTL %s", name), >, 300);
    }
    for (i = 0; i < 1000; i++) {
        CHECK_RC(rlock_mutex_unlock(m[i]), RLOCK_OK);
        rlock_mutex_free(m[i]);
    }
    rlock_client_close(c);
    rt_server_stop(s);
}
