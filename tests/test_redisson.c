/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The Redisson layout (RLOCK_LAYOUT_REDISSON): rlock keeps the lock the
 * way Redisson's RLock does, so that a C service and a Java service
 * exclude each other, wake each other's waiters, and count re-entries in
 * the same place.
 *
 * Redisson itself needs a JVM and Maven Central, which this project's
 * machines do not reach, so the tests play it: peers/redisson_peer.h
 * does on the wire what Redisson's RLock, RFencedLock and LockPubSub do.
 * Each peer uses its own connection, as another process would.
 */
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness/test.h"
#include "../peers/redisson_peer.h"

/* A field Redisson writes: its client's UUID and a Java thread id. */
#define PEER "0b9ec2a6-2a4f-4b39-9d52-4a8b8c2f1e11:57"

/* ---- the peer (peers/redisson_peer.c) ---------------------------- */

static redisContext *peer_connect(rt_server *s)
{
    redisContext *x = redisConnectUnix(rt_server_socket(s));

    if (!x || x->err)
        rt_fail(__FILE__, __LINE__, "peer cannot connect");
    return x;
}

/* A connection of its own listening on the lock's channel. */
static redisContext *peer_listen(rt_server *s, const char *name, int sharded)
{
    redisContext *x = peer_connect(s);

    CHECK(rp_listen(x, name, sharded) == 0);
    return x;
}

/* RLock.lock() on a thread: try, subscribe, and after each message (or
 * after the PTTL the last try answered) try again. */
typedef struct peer_waiter {
    rt_server *s;
    const char *name;
    atomic_int subscribed;
    atomic_int held;
    int messages;
    int64_t held_at;
    pthread_t thread;
} peer_waiter;

static void *peer_wait_thread(void *arg)
{
    peer_waiter *pw = arg;
    redisContext *x = peer_connect(pw->s), *sub = NULL;
    char msg[32];
    long long ttl;
    int held, got;

    while ((held = rp_try(x, pw->name, PEER, 30000, 0, &ttl)) == 0) {
        if (!sub) {
            sub = peer_listen(pw->s, pw->name, 0);
            atomic_store(&pw->subscribed, 1);
            continue; /* Redisson tries once more once subscribed */
        }
        /* No expiry (-1): Redisson waits for a message however long. */
        got = rp_message(sub, ttl < 0 ? 60000 : ttl > 0 ? (int)ttl : 1, msg,
                         sizeof msg);
        CHECK(got >= 0);
        pw->messages += got;
    }
    CHECK(held == 1);
    pw->held_at = rt_now_ms();
    atomic_store(&pw->held, 1);
    if (sub)
        redisFree(sub);
    redisFree(x);
    return NULL;
}

static void peer_wait_start(peer_waiter *pw, rt_server *s, const char *name)
{
    memset(pw, 0, sizeof *pw);
    pw->s = s;
    pw->name = name;
    CHECK(pthread_create(&pw->thread, NULL, peer_wait_thread, pw) == 0);
}

/* ---- rlock's side ------------------------------------------------------- */

static rlock_mutex *redisson_mutex(rlock_client *c, const char *name,
                                   int64_t lease_ms)
{
    rlock_mutex_opts o;

    rlock_mutex_opts_init(&o);
    o.layout = RLOCK_LAYOUT_REDISSON;
    o.lease_ms = lease_ms;
    o.on_lost = rt_count_lost;
    return rt_mutex(c, name, &o);
}

/* A client whose waiters never wake on their own for 40 s (a third of
 * waiter_ttl_ms; a peer's lease is longer still): only a release message
 * can wake them sooner. */
static rlock_client *message_woken_client(rt_server *s)
{
    rlock_client_opts co;

    rlock_client_opts_init(&co);
    co.waiter_ttl_ms = 120000;
    return rt_client(rt_server_url(s), &co);
}

/* The owner fields of the lock's hash (rlock's "rlock-holder" field
 * aside): how many, and the first with its count. */
static int hash_field(rt_server *s, const char *name, char *field, size_t flen,
                      long long *count)
{
    redisReply *r = rt_cmd(s, "HGETALL %s", name);
    int n = 0;
    size_t i;

    for (i = 0; i + 1 < r->elements; i += 2) {
        if (strcmp(r->element[i]->str, "rlock-holder") == 0)
            continue;
        if (n++ == 0) {
            snprintf(field, flen, "%s", r->element[i]->str);
            *count = strtoll(r->element[i + 1]->str, NULL, 10);
        }
    }
    freeReplyObject(r);
    return n;
}

static long long subscribers(rt_server *s, const char *channel)
{
    redisReply *r = rt_cmd(s, "PUBSUB NUMSUB %s", channel);
    long long n = r->type == REDIS_REPLY_ARRAY && r->elements == 2
                      ? r->element[1]->integer
                      : -1;

    freeReplyObject(r);
    return n;
}

static int matches(const char *s, const char *re)
{
    regex_t rx;
    int ok;

    CHECK(regcomp(&rx, re, REG_EXTENDED | REG_NOSUB) == 0);
    ok = regexec(&rx, s, 0, NULL, 0) == 0;
    regfree(&rx);
    return ok;
}

static long long get_int(rt_server *s, const char *key)
{
    redisReply *r = rt_cmd(s, "GET %s", key);
    long long v =
        r->type == REDIS_REPLY_STRING ? strtoll(r->str, NULL, 10) : -1;

    freeReplyObject(r);
    return v;
}

TEST(redisson_layout_is_redissons_hash_field_and_channel)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *c = rt_client(rt_server_url(s), NULL);
    rlock_mutex *m = redisson_mutex(c, "orders:42", 0);
    rlock_mutex *tagged = redisson_mutex(c, "{user}:7", 0);
    redisContext *sub = peer_listen(s, "orders:42", 0);
    redisContext *sharded = peer_listen(s, "orders:42", 1);
    redisContext *sub_tagged = peer_listen(s, "{user}:7", 0);
    char field[128], msg[32];
    long long count = 0;
    uint64_t t1;

    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    t1 = rlock_mutex_token(m);
    /* The name itself, a hash with one field "<UUID>:<thread id>" holding
     * the count, expiring with the lease. */
    CHECK_INT(hash_field(s, "orders:42", field, sizeof field, &count), ==, 1);
    CHECK(matches(field, "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-"
                         "[0-9a-f]{12}:[1-9][0-9]*$"));
    CHECK_INT(count, ==, 1);
    /* Beside it, for operators, the holder's "host/pid" (Redisson's own
     * scripts look only at their own field). */
    {
        redisReply *r = rt_cmd(s, "HGET orders:42 rlock-holder");
        char want[64];
        snprintf(want, sizeof want, "^[A-Za-z0-9._-]+/%ld$", (long)getpid());
        CHECK(r->type == REDIS_REPLY_STRING && matches(r->str, want));
        freeReplyObject(r);
    }
    CHECK_INT(rt_cmd_int(s, "HLEN orders:42"), ==, 2);
    CHECK_INT(rt_cmd_int(s, "PTTL orders:42"), >, 25000);
    CHECK_INT(rt_cmd_int(s, "PTTL orders:42"), <=, 30000);
    /* The token is RFencedLock's counter. */
    CHECK_INT(get_int(s, "redisson_lock_token:{orders:42}"), ==, (long long)t1);
    /* A re-entry counts in the field, as Redisson's do; the token stays. */
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    CHECK_INT(hash_field(s, "orders:42", field, sizeof field, &count), ==, 1);
    CHECK_INT(count, ==, 2);
    CHECK(rlock_mutex_token(m) == t1);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    CHECK_INT(hash_field(s, "orders:42", field, sizeof field, &count), ==, 1);
    CHECK_INT(count, ==, 1);
    /* Only the final release publishes, "0", on Redisson's channel. */
    CHECK(0 == rp_message(sub, 200, msg, sizeof msg));
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    CHECK_INT(rt_cmd_int(s, "EXISTS orders:42"), ==, 0);
    CHECK(1 == rp_message(sub, 5000, msg, sizeof msg));
    CHECK(strcmp(msg, "0") == 0);
    CHECK(0 == rp_message(sub, 200, msg, sizeof msg));
    /* And on the sharded channel, for Redisson's sharded subscriptions. */
    CHECK(1 == rp_message(sharded, 5000, msg, sizeof msg));
    CHECK(strcmp(msg, "0") == 0);
    /* A name with a brace is its own hash tag, as in Redisson. */
    CHECK_RC(rlock_mutex_lock(tagged), RLOCK_OK);
    CHECK_INT(hash_field(s, "{user}:7", field, sizeof field, &count), ==, 1);
    CHECK_INT(get_int(s, "redisson_lock_token:{user}:7"), ==,
              (long long)rlock_mutex_token(tagged));
    CHECK_RC(rlock_mutex_unlock(tagged), RLOCK_OK);
    CHECK(1 == rp_message(sub_tagged, 5000, msg, sizeof msg));
    CHECK(strcmp(msg, "0") == 0);
    /* Nothing else is written than the locks and their counters. */
    CHECK_INT(rt_cmd_int(s, "DBSIZE"), ==, 2);
    redisFree(sub);
    redisFree(sharded);
    redisFree(sub_tagged);
    rlock_mutex_free(m);
    rlock_mutex_free(tagged);
    rlock_client_close(c);
    rt_server_stop(s);
}

TEST(a_redisson_peers_lock_blocks_rlock_until_its_last_release_wakes_it)
{
    rt_server *s = rt_server_start(NULL);
    redisContext *peer = peer_connect(s);
    rlock_client *c = message_woken_client(s);
    rlock_mutex *m = redisson_mutex(c, "shared", 0);
    rlock_status st;
    rt_locker l;
    char field[128];
    long long count = 0, ttl = 0;
    int64_t t0;


    CHECK_INT(rp_try(peer, "shared", PEER, 60000, 0, NULL), ==, 1);
    CHECK_INT(rp_try(peer, "shared", PEER, 60000, 0, NULL), ==, 1);
    CHECK_RC(rlock_mutex_trylock(m), RLOCK_EBUSY);
    CHECK_RC(rlock_mutex_timedlock(m, 150), RLOCK_ETIMEDOUT);
    CHECK_RC(rlock_mutex_status(m, &st), RLOCK_OK);
    CHECK(st.held && strcmp(st.holder, PEER) == 0);
    CHECK_INT(st.count, ==, 2);
    CHECK_INT(st.lease_ms, >, 50000);
    CHECK(st.token == 0); /* the peer's plain RLock has none */

    rt_locker_start(&l, m, 0);
    /* rlock's waiter listens on Redisson's channel before the peer lets
     * go (on a busy machine its subscription can take a while; the test
     * is about the message, not about that). */
    RT_WAIT_UNTIL(subscribers(s, "redisson_lock__channel:{shared}") >= 1,
                  10000);
    rt_sleep_ms(500);
    /* The peer's first unlock leaves it held once: no message, no entry. */
    CHECK_INT(rp_unlock(peer, "shared", PEER, 60000), ==, 0);
    rt_sleep_ms(500);
    CHECK(!atomic_load(&l.done));
    t0 = rt_now_ms();
    CHECK_INT(rp_unlock(peer, "shared", PEER, 60000), ==, 1);
    CHECK_RC(rt_locker_join(&l), RLOCK_OK);
    CHECK_INT(rt_now_ms() - t0, <, 5000);
    CHECK(l.token > 0);
    /* Now rlock's field is there, and the peer is kept out. */
    CHECK_INT(hash_field(s, "shared", field, sizeof field, &count), ==, 1);
    CHECK(strcmp(field, PEER) != 0 && count == 1);
    CHECK_INT(rp_try(peer, "shared", PEER, 60000, 0, &ttl), ==, 0);
    CHECK_INT(ttl, >, 0);
    CHECK_INT(rp_unlock(peer, "shared", PEER, 60000), ==, -2);
    redisFree(peer);
    rlock_mutex_free(m);
    rlock_client_close(c);
    rt_server_stop(s);
}

TEST(rlocks_release_wakes_a_redisson_peers_waiter)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *c = rt_client(rt_server_url(s), NULL);
    rlock_mutex *m = redisson_mutex(c, "jobs", 0); /* watchdog, 30 s */
    redisContext *peer = peer_connect(s);
    peer_waiter pw;
    char field[128];
    long long count = 0;
    int64_t t0;

    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    peer_wait_start(&pw, s, "jobs");
    RT_WAIT_UNTIL(atomic_load(&pw.subscribed), 5000);
    rt_sleep_ms(300); /* its try after subscribing said: 30 s to go */
    /* rlock's first unlock leaves it held once: the peer stays out. */
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    CHECK_INT(hash_field(s, "jobs", field, sizeof field, &count), ==, 1);
    CHECK_INT(count, ==, 1);
    rt_sleep_ms(500);
    CHECK(!atomic_load(&pw.held));
    t0 = rt_now_ms();
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    RT_WAIT_UNTIL(atomic_load(&pw.held), 10000);
    pthread_join(pw.thread, NULL);
    /* Woken by the message, not by the 30 s PTTL it was told. */
    CHECK_INT(pw.held_at - t0, <, 5000);
    CHECK_INT(pw.messages, >=, 1);
    CHECK_INT(hash_field(s, "jobs", field, sizeof field, &count), ==, 1);
    CHECK(strcmp(field, PEER) == 0 && count == 1);

    CHECK_RC(rlock_mutex_trylock(m), RLOCK_EBUSY);
    CHECK_INT(rp_unlock(peer, "jobs", PEER, 30000), ==, 1);
    redisFree(peer);
    rlock_mutex_free(m);
    rlock_client_close(c);
    rt_server_stop(s);
}

TEST(redisson_layout_tokens_are_rfencedlocks_counter)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *c = rt_client(rt_server_url(s), NULL);
    rlock_mutex *m = redisson_mutex(c, "fenced", 0);
    rlock_mutex *fresh = redisson_mutex(c, "fresh", 0);
    redisContext *peer = peer_connect(s);
    long long p1 = 0, p2 = 0;
    uint64_t t;

    /* The peer's RFencedLock comes first: its counter starts at 1. */
    CHECK_INT(rp_try(peer, "fenced", PEER, 30000, 1, &p1), ==, 1);
    CHECK_INT(p1, ==, 1);
    CHECK_INT(rp_unlock(peer, "fenced", PEER, 30000), ==, 1);
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    t = rlock_mutex_token(m);
    CHECK_INT((long long)t, ==, p1 + 1);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    CHECK_INT(rp_try(peer, "fenced", PEER, 30000, 1, &p2), ==, 1);
    CHECK_INT(p2, >, (long long)t);
    CHECK_INT(rp_unlock(peer, "fenced", PEER, 30000), ==, 1);
    /* rlock first: the counter starts at the server's clock in
     * microseconds, as rlock's own does, and the peer goes on above it. */
    CHECK_RC(rlock_mutex_lock(fresh), RLOCK_OK);
    t = rlock_mutex_token(fresh);
    CHECK(t > UINT64_C(1000000000000000));
    CHECK_RC(rlock_mutex_unlock(fresh), RLOCK_OK);
    CHECK_INT(rp_try(peer, "fresh", PEER, 30000, 1, &p2), ==, 1);
    CHECK_INT(p2, ==, (long long)t + 1);
    redisFree(peer);
    rlock_mutex_free(m);
    rlock_mutex_free(fresh);
    rlock_client_close(c);
    rt_server_stop(s);
}

TEST(redisson_layout_watchdog_renews_and_reports_a_forced_unlock)
{
    rt_server *s = rt_server_start(NULL);
    redisContext *peer = peer_connect(s);
    rlock_client_opts co;
    rlock_client *c;
    rlock_mutex *m, *fixed;

    rlock_client_opts_init(&co);
    co.watchdog_lease_ms = 600;
    c = rt_client(rt_server_url(s), &co);
    m = redisson_mutex(c, "renewed", 0);
    fixed = redisson_mutex(c, "fixed", 5000);
    atomic_store(&rt_lost_calls, 0);
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    rt_sleep_ms(1500); /* more than two leases */
    CHECK_INT(rt_cmd_int(s, "PTTL renewed"), >, 0);
    CHECK_INT(atomic_load(&rt_lost_calls), ==, 0);
    /* Redisson's forceUnlock deletes it: the holder is told. */
    CHECK_INT(rp_force_unlock(peer, "renewed"), ==, 1);
    RT_WAIT_UNTIL(atomic_load(&rt_lost_calls) == 1, 5000);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_ELOST);
    /* A fixed lease is extended by hand, never revived. */
    CHECK_RC(rlock_mutex_lock(fixed), RLOCK_OK);
    CHECK_INT(rt_cmd_int(s, "PTTL fixed"), <=, 5000);
    CHECK_RC(rlock_mutex_extend(fixed, 20000), RLOCK_OK);
    CHECK_INT(rt_cmd_int(s, "PTTL fixed"), >, 15000);
    CHECK_INT(rp_force_unlock(peer, "fixed"), ==, 1);
    CHECK_RC(rlock_mutex_extend(fixed, 20000), RLOCK_ELOST);
    CHECK_INT(rt_cmd_int(s, "EXISTS fixed"), ==, 0);
    redisFree(peer);
    rlock_mutex_free(m);
    rlock_mutex_free(fixed);
    rlock_client_close(c);
    rt_server_stop(s);
}

TEST(redisson_waiters_of_one_client_are_woken_one_at_a_time)
{
    enum { N = 4 };
    rt_server *s = rt_server_start(NULL);
    redisContext *peer = peer_connect(s);
    rlock_client *c = message_woken_client(s);
    rlock_mutex *m = redisson_mutex(c, "queue", 0);
    rt_locker l[N];
    int64_t t0;
    int i;

    CHECK_INT(rp_try(peer, "queue", PEER, 60000, 0, NULL), ==, 1);
    for (i = 0; i < N; i++)
        rt_locker_start(&l[i], m, 1);
    RT_WAIT_UNTIL(subscribers(s, "redisson_lock__channel:{queue}") == 1, 5000);
    /* Every waiter has tried once more, subscribed: wait until no script
     * call has come for 1.5 s (on a machine busy with other work, under
     * ASan, a waiter's retry was seen to come more than half a second
     * late and be counted as a hand-over), so that only the hand-overs
     * are counted. */
    {
        long long calls = -1, now_calls;
        int64_t until = rt_now_ms() + 20000;
        while ((now_calls = rt_cmdstat_calls(s, "evalsha")) != calls &&
               rt_now_ms() < until) {
            calls = now_calls;
            rt_sleep_ms(1500);
        }
    }
    freeReplyObject(rt_cmd(s, "CONFIG RESETSTAT"));
    t0 = rt_now_ms();
    CHECK_INT(rp_unlock(peer, "queue", PEER, 60000), ==, 1);
    /* Each release wakes the next: the whole chain, long before 40 s. */
    for (i = 0; i < N; i++)
        CHECK_RC(rt_locker_join(&l[i]), RLOCK_OK);
    CHECK_INT(rt_now_ms() - t0, <, 10000);
    /* One attempt and one release per waiter: 8 calls. Waking every
     * waiter at each release made 11 or 12 (docs/interop.md). */
    CHECK_INT(rt_cmdstat_calls(s, "evalsha"), <=, 2 * N + 2);
    redisFree(peer);
    rlock_mutex_free(m);
    rlock_client_close(c);
    rt_server_stop(s);
}

TEST(a_redisson_waiter_that_leaves_hands_its_wake_up_on)
{
    rt_server *s = rt_server_start(NULL);
    redisContext *peer = peer_connect(s);
    rlock_client *c = message_woken_client(s);
    rlock_mutex *m = redisson_mutex(c, "handed", 0);
    rt_locker first, second;

    CHECK_INT(rp_try(peer, "handed", PEER, 60000, 0, NULL), ==, 1);
    rt_locker_start(&first, m, 1);
    rt_sleep_ms(500);
    rt_locker_start(&second, m, 1);
    rt_sleep_ms(1000); /* both subscribed, tried, and asleep */
    /* One message wakes the longest-waiting thread, whose attempt then
     * fails (the name is now another type): it must hand the wake-up to
     * the other, which would otherwise sleep for 40 s. */
    freeReplyObject(rt_cmd(s, "DEL handed"));
    freeReplyObject(rt_cmd(s, "SET handed not-a-hash"));
    freeReplyObject(rt_cmd(s, "PUBLISH redisson_lock__channel:{handed} 0"));
    RT_WAIT_UNTIL(atomic_load(&first.done), 5000);
    RT_WAIT_UNTIL(atomic_load(&second.done), 5000);
    CHECK_RC(rt_locker_join(&first), RLOCK_EREDIS);
    CHECK_RC(rt_locker_join(&second), RLOCK_EREDIS);
    redisFree(peer);
    rlock_mutex_free(m);
    rlock_client_close(c);
    rt_server_stop(s);
}

TEST(redisson_layout_checker_finds_no_overlap)
{
    rt_server *s = rt_server_start(NULL);
    rt_check_opts o;
    rt_check_result r;

    rt_check_opts_init(&o);
    o.url = rt_server_url(s);
    o.name = "checked";
    o.layout = RLOCK_LAYOUT_REDISSON;
    o.workers = 4;
    o.iterations = 40;
    /* A waiter that missed a release would sleep for the lease (30 s) or a
     * third of its waiter_ttl_ms (20 s). */
    o.client.waiter_ttl_ms = 60000;
    o.deadline_ms = 60000;
    r = rt_checker_completes(&o);
    /* Hand-overs follow the release message, not a timer of 20 s. */
    CHECK_INT(r.longest_handover_ms, <, 5000);
    CHECK_INT(rt_cmd_int(s, "EXISTS checked"), ==, 0);
    CHECK_INT(rt_cmd_int(s, "EXISTS redisson_lock_token:{checked}"), ==, 1);
    rt_server_stop(s);
}
