/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Replica-synced holds (sync_replicas) and the replies of a deployment
 * that cannot serve locks. A master and a replica of it, both real
 * redis-server processes; the replica is paused (SIGSTOP) to make it miss
 * writes.
 */
#include <stdio.h>
#include <string.h>

#include "harness/test.h"

/* A replica of master, started and caught up with it. */
static rt_server *start_replica(rt_server *master, const char *more_name,
                                const char *more_value)
{
    return rt_replica_start(master, more_name, more_value);
}

static rlock_client *synced_client(rt_server *s, int replicas, int wait_ms,
                                   int64_t lease_ms)
{
    rlock_client_opts o;

    rlock_client_opts_init(&o);
    o.sync_replicas = replicas;
    o.sync_timeout_ms = wait_ms;
    o.watchdog_lease_ms = lease_ms;
    return rt_client(rt_server_url(s), &o);
}

static rlock_mutex *mutex_synced(rlock_client *c, const char *name,
                                 int64_t lease_ms, int sync)
{
    rlock_mutex_opts o;

    rlock_mutex_opts_init(&o);
    o.lease_ms = lease_ms;
    o.sync_replicas = sync;
    return rt_mutex(c, name, &o);
}

/* Whether the last error's detail on c has text; says what it was if
 * not. */
/* Frees m and c and stops both servers. */
static void finish(rlock_client *c, rlock_mutex *m, rt_server *replica,
                   rt_server *master)
{
    rlock_mutex_free(m);
    rlock_client_close(c);
    rt_server_stop(replica);
    rt_server_stop(master);
}

static int has_text(rlock_client *c, const char *text)
{
    if (strstr(rlock_client_errmsg(c), text))
        return 1;
    fprintf(stderr, "error detail: %s\n", rlock_client_errmsg(c));
    return 0;
}

TEST(synced_acquisition_is_on_the_replica_when_lock_returns)
{
    rt_server *s = rt_server_start(NULL);
    rt_server *r = start_replica(s, NULL, NULL);
    rlock_client *c = synced_client(s, 1, 2000, 30000);
    rlock_mutex *m = rt_mutex(c, "synced", NULL);
    rt_locker l;

    freeReplyObject(rt_cmd(s, "CONFIG RESETSTAT"));
    if (rlock_mutex_lock(m) != RLOCK_OK)
        CHECK(has_text(c, "(nothing: the lock should have been taken)"));
    /* WAIT said the replica has it: no polling needed. */
    CHECK_INT(rt_cmd_int(r, "EXISTS {rlock:synced}"), ==, 1);
    CHECK_INT(rt_cmdstat_calls(s, "wait"), >=, 1);
    /* A hand-over is synced as well, by the new holder. */
    rt_locker_start(&l, m, 0);
    RT_WAIT_UNTIL(rt_cmd_int(s, "LLEN {rlock:synced}:queue") == 1, 5000);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    CHECK_RC(rt_locker_join(&l), RLOCK_OK);
    CHECK(l.token > 0);
    {
        char want[32], got[32];
        snprintf(want, sizeof want, "%llu", (unsigned long long)l.token);
        CHECK(strcmp(rt_lock_field(r, "synced", RT_TOKEN, got, sizeof got),
                     want) == 0);
    }
    finish(c, m, r, s);
}

TEST(too_few_replicas_fail_the_acquisition_and_release_it)
{
    rt_server *s = rt_server_start(NULL);
    rt_server *r = start_replica(s, NULL, NULL);
    rlock_client *c = synced_client(s, 1, 200, 30000);
    rlock_client *plain = rt_client(rt_server_url(s), NULL);
    rlock_mutex *m = rt_mutex(c, "short", NULL);
    rlock_mutex *off = mutex_synced(c, "off", 0, RLOCK_SYNC_OFF);
    rlock_mutex *two = mutex_synced(plain, "two", 0, 2);
    rlock_mutex *other = rt_mutex(plain, "short", NULL);

    rt_server_pause(r);
    CHECK_RC(rlock_mutex_trylock(m), RLOCK_EREPLICAS);
    CHECK(has_text(c, "0 of 1 replicas"));
    CHECK(has_text(c, "released again"));
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:short}"), ==, 0);
    CHECK_RC(rlock_mutex_trylock(other), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(other), RLOCK_OK);
    CHECK_RC(rlock_mutex_lock(m), RLOCK_EREPLICAS);
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:short}"), ==, 0);
    /* The mutex option overrides the client's, both ways. */
    CHECK_RC(rlock_mutex_trylock(off), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(off), RLOCK_OK);
    rt_server_resume(r);
    CHECK_RC(rlock_mutex_trylock(two), RLOCK_EREPLICAS);
    CHECK(has_text(plain, "1 of 2 replicas"));
    CHECK_RC(rlock_mutex_trylock(m), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    rlock_mutex_free(m);
    rlock_mutex_free(off);
    rlock_mutex_free(two);
    rlock_mutex_free(other);
    rlock_client_close(c);
    rlock_client_close(plain);
    rt_server_stop(r);
    rt_server_stop(s);
}

/* A hold under sync_replicas 1 whose renewals stop reaching the replica
 * is given up at the end of its last acknowledged lease. native: the
 * master is Valkey 8.1 (so is its replica), which renews by SET IFEQ with
 * WAIT behind the pipeline; else the default server and the script. */
static void unacknowledged_renewals_end_in_a_loss(int native)
{
    rt_server_opts so;
    rt_server *s, *r;
    rlock_client *c;
    rlock_mutex_opts o;
    rlock_mutex *m;
    int64_t t0;

    memset(&so, 0, sizeof so);
    so.binary = native ? rt_valkey81_binary() : NULL;
    s = rt_server_start(&so);
    r = start_replica(s, NULL, NULL);
    /* A 3 s lease renewed every second, each renewal waiting up to 1 s
     * for the replica: on a machine busy with other work a replica can
     * take some hundred milliseconds to acknowledge, which must not read
     * as a loss (with 900 ms and 100 ms it did). */
    c = synced_client(s, 1, 1000, 3000);
    rlock_mutex_opts_init(&o);
    o.on_lost = rt_count_lost;
    m = rt_mutex(c, "renewed", &o);
    atomic_store(&rt_lost_calls, 0);
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    freeReplyObject(rt_cmd(s, "CONFIG RESETSTAT"));
    rt_sleep_ms(2500); /* two renewals reach the replica: still held */
    CHECK_INT(atomic_load(&rt_lost_calls), ==, 0);
    if (native) { /* by SET IFEQ, no script */
        CHECK_INT(rt_cmdstat_calls(s, "set"), >=, 2);
        CHECK_INT(rt_cmdstat_calls(s, "evalsha"), ==, 0);
    }
    t0 = rt_now_ms();
    rt_server_pause(r);
    /* The master keeps renewing (the key is there a second later, before
     * the last acknowledged lease, at least 2 s, can end), but none of it
     * is acknowledged: the hold is given up at the end of the last
     * acknowledged lease (3 s at most after the pause; 2 s of margin for
     * a busy machine). A renewal that got no answer may still run, and
     * the master's key is then given back. */
    rt_sleep_ms(1000);
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:renewed}"), ==, 1);
    RT_WAIT_UNTIL(atomic_load(&rt_lost_calls) == 1, 8000);
    CHECK_INT(rt_now_ms() - t0, <=, 3000 + 2000);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_ELOST);
    rt_server_resume(r);
    CHECK_INT(atomic_load(&rt_lost_calls), ==, 1);
    finish(c, m, r, s);
}

TEST(renewals_the_replicas_never_get_end_in_a_loss_notice)
{
    unacknowledged_renewals_end_in_a_loss(0);
}

/* The same with the native renewal (Valkey 8.1's SET IFEQ, a pipeline
 * with WAIT behind it): a renewal counts only once the replica has it. */
TEST(native_renewals_the_replicas_never_get_end_in_a_loss_notice)
{
    unacknowledged_renewals_end_in_a_loss(1);
}

TEST(extend_without_the_replicas_says_so_and_keeps_the_hold)
{
    rt_server *s = rt_server_start(NULL);
    rt_server *r = start_replica(s, NULL, NULL);
    rlock_client *c = synced_client(s, 1, 200, 30000);
    rlock_mutex *m = mutex_synced(c, "ext", 5000, 0);

    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    rt_server_pause(r);
    CHECK_RC(rlock_mutex_extend(m, 20000), RLOCK_EREPLICAS);
    CHECK(has_text(c, "unchanged"));
    CHECK_INT(rt_cmd_int(s, "PTTL {rlock:ext}"), >, 10000); /* master did */
    rt_server_resume(r);
    CHECK_RC(rlock_mutex_extend(m, 20000), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    finish(c, m, r, s);
}

/* A re-entry (the count Redis keeps) sets the lease as well, and waits
 * for the replicas in its round trip: without them it says so, and the
 * lease end the client counts stays the last one confirmed, though the
 * master's key now lasts longer. */
TEST(a_reentry_without_the_replicas_says_so_and_keeps_the_lease_end)
{
    rt_server *s = rt_server_start(NULL);
    rt_server *r = start_replica(s, NULL, NULL);
    rlock_client *c = synced_client(s, 1, 200, 30000);
    rlock_mutex *m = mutex_synced(c, "reenter", 5000, 0);
    int64_t t_lock;
    uint64_t token;
    long long pttl;

    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    /* With the replica there, a re-entry waits for it and is done. */
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    t_lock = rt_now_ms();
    CHECK_RC(rlock_mutex_extend(m, 5000), RLOCK_OK);
    rt_sleep_ms(1500);
    rt_server_pause(r);
    CHECK_RC(rlock_mutex_lock(m), RLOCK_EREPLICAS);
    CHECK(has_text(c, "re-entry"));
    rt_server_resume(r);
    /* The master did set the re-entry's lease: the key outlives the one
     * counted by more than a second. */
    pttl = rt_cmd_int(s, "PTTL {rlock:reenter}");
    CHECK_INT(pttl, >, t_lock + 5000 - rt_now_ms() + 1000);
    /* Past the extension's lease (5 s), before the re-entry's (6.5 s):
     * the client no longer believes it holds. */
    rt_sleep_ms(t_lock + 5500 - rt_now_ms());
    CHECK_RC(rlock_mutex_fence(m, &token), RLOCK_ELOST);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_ELOST);
    finish(c, m, r, s);
}

TEST(a_token_drawn_without_the_replicas_says_so_and_is_kept)
{
    rt_server *s = rt_server_start(NULL);
    rt_server *r = start_replica(s, NULL, NULL);
    rlock_client *c = synced_client(s, 1, 200, 30000);
    rlock_mutex *m = rt_mutex(c, "drawn", NULL);
    uint64_t t = 7, again;
    char tok[32];

    /* Taken lean (and synced); its token is drawn later, with the
     * replica stopped: drawn on the master, but not acknowledged. */
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    rt_server_pause(r);
    CHECK_RC(rlock_mutex_fence(m, &t), RLOCK_EREPLICAS);
    CHECK(t == 0);
    CHECK(has_text(c, "0 of 1 replicas"));
    rt_lock_field(s, "drawn", RT_TOKEN, tok, sizeof tok);
    CHECK(strtoull(tok, NULL, 10) > 0); /* kept with the hold */
    /* Asked again once the replica is back: the same token, now safe. */
    rt_server_resume(r);
    CHECK_RC(rlock_mutex_fence(m, &again), RLOCK_OK);
    CHECK(again == strtoull(tok, NULL, 10));
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    finish(c, m, r, s);
}

TEST(a_replica_or_a_master_without_replicas_gives_clear_codes)
{
    rt_server *s = rt_server_start(NULL);
    rt_server *r = start_replica(s, "--replica-serve-stale-data", "no");
    rlock_client *on_replica = rt_client(rt_server_url(r), NULL);
    rlock_mutex *m = rt_mutex(on_replica, "ro", NULL);
    rlock_client *c;
    rlock_mutex *mm;

    /* A client pointed at a replica: READONLY. */
    CHECK_RC(rlock_mutex_trylock(m), RLOCK_EUNAVAILABLE);
    CHECK(has_text(on_replica, "read-only replica"));
    CHECK(has_text(on_replica, "READONLY"));
    /* A master that needs a replica it does not have: NOREPLICAS. */
    freeReplyObject(rt_cmd(s, "CONFIG SET min-replicas-to-write 2"));
    c = rt_client(rt_server_url(s), NULL);
    mm = rt_mutex(c, "norep", NULL);
    CHECK_RC(rlock_mutex_trylock(mm), RLOCK_EREPLICAS);
    CHECK(has_text(c, "min-replicas-to-write"));
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:norep}"), ==, 0);
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:norep}:fence"), ==, 0);
    rlock_mutex_free(mm);
    rlock_client_close(c);
    /* A replica that lost its master and serves no stale data:
     * MASTERDOWN, to a script (a plain SET is READONLY first): once m's
     * callers have asked for a token, its acquisitions are scripts. */
    CHECK(rlock_mutex_token(m) == 0);
    rt_server_kill(s);
    RT_WAIT_UNTIL(rlock_mutex_trylock(m) == RLOCK_EUNAVAILABLE &&
                      has_text(on_replica, "MASTERDOWN"),
                  10000);
    CHECK(has_text(on_replica, "lost its master"));
    rlock_mutex_free(m);
    rlock_client_close(on_replica);
    rt_server_stop(r);
    rt_server_stop(s);
}

TEST(a_loading_server_is_unavailable_until_it_has_loaded)
{
    rt_server_opts so;
    rt_server *s;
    rlock_client *c;
    rlock_mutex *m;

    /* Loading slowed down (0.5 ms a key) and answering while it loads. */
    memset(&so, 0, sizeof so);
    so.extra[0] = "--key-load-delay";
    so.extra[1] = "500";
    so.extra[2] = "--loading-process-events-interval-bytes";
    so.extra[3] = "1024";
    s = rt_server_start(&so);
    c = rt_client(rt_server_url(s), NULL);
    m = rt_mutex(c, "loading", NULL);
    freeReplyObject(
        rt_cmd(s, "EVAL %s 0",
               "for i = 1, 4000 do redis.call('SET', 'k' .. i, i) end"));
    freeReplyObject(rt_cmd(s, "SAVE"));
    rt_server_restart(s); /* answers (LOADING) at once, loads for 2 s */
    CHECK_RC(rlock_mutex_trylock(m), RLOCK_EUNAVAILABLE);
    CHECK(has_text(c, "still loading its data"));
    CHECK(has_text(c, "LOADING"));
    RT_WAIT_UNTIL(rlock_mutex_trylock(m) == RLOCK_OK, 20000);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    rlock_mutex_free(m);
    rlock_client_close(c);
    rt_server_stop(s);
}
