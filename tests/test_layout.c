/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The token layout (RLOCK_LAYOUT_TOKEN): the lock is the plain string key
 * that SET NX PX peers use, so rlock and a peer exclude each other; the
 * peer's own release lets rlock in; rlock's watchdog renews it and
 * notices when a peer took it over.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/test.h"

static rlock_mutex *token_mutex(rlock_client *c, const char *name)
{
    rlock_mutex_opts o;

    rlock_mutex_opts_init(&o);
    o.layout = RLOCK_LAYOUT_TOKEN;
    o.on_lost = rt_count_lost;
    return rt_mutex(c, name, &o);
}

/* What a peer does: SET NX PX, then compare-and-delete. */
static int peer_set(rt_server *s, const char *key, const char *value)
{
    redisReply *r = rt_cmd(s, "SET %s %s NX PX 30000", key, value);
    int ok = r->type == REDIS_REPLY_STATUS;

    freeReplyObject(r);
    return ok;
}

static void peer_release(rt_server *s, const char *key, const char *value)
{
    CHECK_INT(rt_cmd_int(s, "EVAL %s 1 %s %s",
                         "if redis.call('GET', KEYS[1]) == ARGV[1] then "
                         "return redis.call('DEL', KEYS[1]) end return 0",
                         key, value),
              ==, 1);
}

static char *get(rt_server *s, const char *key, char *buf, size_t len)
{
    redisReply *r = rt_cmd(s, "GET %s", key);

    snprintf(buf, len, "%s", r->type == REDIS_REPLY_STRING ? r->str : "");
    freeReplyObject(r);
    return buf;
}

TEST(token_layout_is_a_plain_set_nx_px_key)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *c = rt_client(rt_server_url(s), NULL);
    rlock_client *other = rt_client(rt_server_url(s), NULL);
    rlock_mutex *m = token_mutex(c, "orders:42");
    rlock_mutex *mo = token_mutex(other, "orders:42");
    char v[128], want[64];
    uint64_t t1;

    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    t1 = rlock_mutex_token(m);
    CHECK(t1 > 0);
    /* The name itself, a string ending in the token, with a lease. */
    snprintf(want, sizeof want, ":%llu", (unsigned long long)t1);
    get(s, "orders:42", v, sizeof v);
    CHECK(strlen(v) > strlen(want) &&
          strcmp(v + strlen(v) - strlen(want), want) == 0);
    CHECK_INT(rt_cmd_int(s, "PTTL orders:42"), >, 0);
    CHECK(!peer_set(s, "orders:42", "peer"));
    CHECK_RC(rlock_mutex_trylock(mo), RLOCK_EBUSY);
    /* Re-entry is the client's; Redis sees one hold. */
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    CHECK_INT(rt_cmd_int(s, "EXISTS orders:42"), ==, 1);
    CHECK_RC(rlock_mutex_extend(m, 20000), RLOCK_OK);
    CHECK_INT(rt_cmd_int(s, "PTTL orders:42"), >, 15000);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    CHECK_INT(rt_cmd_int(s, "EXISTS orders:42"), ==, 0);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_ENOTOWNER);
    CHECK_RC(rlock_mutex_trylock(mo), RLOCK_OK);
    CHECK(rlock_mutex_token(mo) > t1); /* rlock's own counter */
    CHECK_RC(rlock_mutex_unlock(mo), RLOCK_OK);
    /* Nothing else is written than the key and the counter. */
    CHECK_INT(rt_cmd_int(s, "DBSIZE"), ==, 1);
    CHECK_INT(rt_cmd_int(s, "EXISTS orders:42:rlock-fence"), ==, 1);
    rlock_mutex_free(m);
    rlock_mutex_free(mo);
    rlock_client_close(c);
    rlock_client_close(other);
    rt_server_stop(s);
}

TEST(a_peers_lock_blocks_rlock_and_its_release_lets_it_in)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client_opts co;
    rlock_client *c;
    rlock_mutex *m;
    rlock_status st;
    rt_locker l;
    int64_t t0;

    rlock_client_opts_init(&co);
    co.backoff_min_ms = 5;
    co.backoff_max_ms = 50;
    c = rt_client(rt_server_url(s), &co);
    m = token_mutex(c, "shared");
    CHECK(peer_set(s, "shared", "peer-token-1"));
    CHECK_RC(rlock_mutex_trylock(m), RLOCK_EBUSY);
    CHECK_RC(rlock_mutex_timedlock(m, 150), RLOCK_ETIMEDOUT);
    CHECK_RC(rlock_mutex_status(m, &st), RLOCK_OK);
    CHECK(st.held && strcmp(st.holder, "peer-token-1") == 0 && st.token == 0 &&
          st.lease_ms > 0);
    rt_locker_start(&l, m, 1);
    rt_sleep_ms(100);
    t0 = rt_now_ms();
    peer_release(s, "shared", "peer-token-1");
    CHECK_RC(rt_locker_join(&l), RLOCK_OK);
    /* Retries, not notifications: within a few backoff periods. */
    CHECK_INT(rt_now_ms() - t0, <, 1000);
    CHECK(l.token > 0);
    CHECK_INT(rt_cmd_int(s, "EXISTS shared"), ==, 0);
    /* And the other way: rlock holds, the peer cannot. */
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    CHECK(!peer_set(s, "shared", "peer-token-2"));
    CHECK_RC(rlock_mutex_force_unlock(m, &st), RLOCK_OK);
    CHECK(st.held && st.token == rlock_mutex_token(m));
    CHECK(peer_set(s, "shared", "peer-token-2"));
    rlock_mutex_free(m);
    rlock_client_close(c);
    rt_server_stop(s);
}

TEST(token_layout_watchdog_renews_and_notices_a_takeover)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client_opts co;
    rlock_client *c;
    rlock_mutex *m;
    char v[128];

    rlock_client_opts_init(&co);
    co.watchdog_lease_ms = 600;
    c = rt_client(rt_server_url(s), &co);
    m = token_mutex(c, "renewed");
    atomic_store(&rt_lost_calls, 0);
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    rt_sleep_ms(1500); /* more than two leases */
    CHECK_INT(rt_cmd_int(s, "PTTL renewed"), >, 0);
    CHECK_INT(atomic_load(&rt_lost_calls), ==, 0);
    /* A peer that ignores the lock overwrites it: the holder is told. */
    freeReplyObject(rt_cmd(s, "SET renewed intruder PX 30000"));
    RT_WAIT_UNTIL(atomic_load(&rt_lost_calls) == 1, 5000);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_ELOST);
    CHECK(strcmp(get(s, "renewed", v, sizeof v), "intruder") == 0);
    rlock_mutex_free(m);
    rlock_client_close(c);
    rt_server_stop(s);
}

TEST(layout_option_is_checked)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *c = rt_client(rt_server_url(s), NULL);
    rlock_mutex_opts o;
    int err = 0;

    rlock_client *rl;
    char url[64];

    rlock_mutex_opts_init(&o);
    o.layout = 3;
    CHECK(!rlock_mutex_new(c, "x", &o, &err));
    CHECK_RC(err, RLOCK_EINVAL);
    CHECK(strstr(rlock_client_errmsg(c), "layout") != NULL);
    o.layout = -1;
    CHECK(!rlock_mutex_new(c, "x", &o, &err));
    CHECK_RC(err, RLOCK_EINVAL);
    /* The peers' layouts keep one key on one server: not over Redlock. */
    snprintf(url, sizeof url, "redlock://127.0.0.1:%d", rt_server_port(s));
    rl = rt_client(url, NULL);
    o.layout = RLOCK_LAYOUT_TOKEN;
    CHECK(!rlock_mutex_new(rl, "x", &o, &err));
    CHECK_RC(err, RLOCK_EINVAL);
    CHECK(strstr(rlock_client_errmsg(rl), "token layout") != NULL);
    o.layout = RLOCK_LAYOUT_REDISSON;
    CHECK(!rlock_mutex_new(rl, "x", &o, &err));
    CHECK_RC(err, RLOCK_EINVAL);
    CHECK(strstr(rlock_client_errmsg(rl), "Redisson layout") != NULL);
    CHECK_INT(rt_cmd_int(s, "DBSIZE"), ==, 0);
    rlock_client_close(rl);
    rlock_client_close(c);
    rt_server_stop(s);
}

TEST(token_layout_checker_finds_no_overlap)
{
    rt_server *s = rt_server_start(NULL);
    rt_check_opts o;

    rt_check_opts_init(&o);
    o.url = rt_server_url(s);
    o.name = "checked";
    o.layout = RLOCK_LAYOUT_TOKEN;
    o.workers = 4;
    o.iterations = 40;
    o.client.watchdog_lease_ms = 900;
    o.client.backoff_min_ms = 1;
    o.client.backoff_max_ms = 10;
    o.deadline_ms = 60000;
    rt_checker_completes(&o);
    /* The plain key is gone; only rlock's counter stays. */
    CHECK_INT(rt_cmd_int(s, "EXISTS checked"), ==, 0);
    CHECK_INT(rt_cmd_int(s, "EXISTS checked:rlock-fence"), ==, 1);
    rt_server_stop(s);
}
