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

/* pattern with each 'P' replaced by the prefix and each 'N' by the name. */
static void spell(char *out, size_t cap, const char *pattern,
                  const char *prefix, const char *name)
{
    size_t n = 0;
    const char *p;

    for (p = pattern; *p; p++) {
        const char *put = *p == 'P' ? prefix : *p == 'N' ? name : NULL;
        size_t len = put ? strlen(put) : 1;

        CHECK(n + len < cap);
        memcpy(out + n, put ? put : p, len);
        n += len;
    }
    out[n] = '\0';
}

/* Whether some channel with a subscriber is want (want_len bytes of it
 * if prefix_only, the rest being the client's id). */
static int has_channel(rt_server *s, const char *want, int prefix_only)
{
    redisReply *r = rt_cmd(s, "PUBSUB CHANNELS");
    size_t i, len = strlen(want);
    int found = 0;

    CHECK(r->type == REDIS_REPLY_ARRAY);
    for (i = 0; i < r->elements; i++)
        if (prefix_only ? r->element[i]->len > len &&
                              memcmp(r->element[i]->str, want, len) == 0
                        : r->element[i]->len == len &&
                              memcmp(r->element[i]->str, want, len) == 0)
            found = 1;
    freeReplyObject(r);
    return found;
}

/* A handle keeps its lock's name only: each layout spells the keys and
 * the channel from it when a request is built (rlock__layout.key). With
 * the longest name under the longest key prefix: the lock and fencing
 * keys are the ones the layout documents, a waiter of another client
 * listens on the documented channel and a release's message wakes it
 * (not the waiter's own retry: its keep-alive and the holder's lease are
 * 30 s away), and the watchdog renews the documented key. */
TEST(every_layout_spells_the_longest_name_under_the_longest_prefix)
{
    static const struct {
        int layout;
        const char *lock, *fence, *channel;
        int channel_is_prefix; /* the client's id follows */
    } rows[] = {
        {RLOCK_LAYOUT_NATIVE, "{P:N}", "{P:N}:fence", "{P:N}:wake:", 1},
        {RLOCK_LAYOUT_TOKEN, "N", "N:rlock-fence", NULL, 0},
        {RLOCK_LAYOUT_REDISSON, "N", "redisson_lock_token:{N}",
         "redisson_lock__channel:{N}", 0},
    };
    static char prefix[64 + 1], name[RLOCK_NAME_MAX + 1];
    static char lock_key[2048], fence_key[2048], channel[2048];
    rt_server *s = rt_server_start(NULL);
    size_t i;

    memset(prefix, 'p', sizeof prefix - 1);
    for (i = 0; i < RLOCK_NAME_MAX; i++)
        name[i] = (char)('a' + i % 26);
    for (i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        rlock_client_opts co;
        rlock_mutex_opts mo;
        rlock_client *holder, *waiter, *renewer;
        rlock_mutex *mh, *mw, *mr;
        uint64_t token = 0;
        rt_locker l;
        int64_t t0;

        spell(lock_key, sizeof lock_key, rows[i].lock, prefix, name);
        spell(fence_key, sizeof fence_key, rows[i].fence, prefix, name);
        rlock_client_opts_init(&co);
        co.key_prefix = prefix;
        holder = rt_client(rt_server_url(s), &co);
        co.waiter_ttl_ms = 30000;
        waiter = rt_client(rt_server_url(s), &co);
        co.watchdog_lease_ms = 300;
        renewer = rt_client(rt_server_url(s), &co);
        rlock_mutex_opts_init(&mo);
        mo.layout = rows[i].layout;
        mo.on_lost = rt_count_lost;
        mh = rt_mutex(holder, name, &mo);
        mw = rt_mutex(waiter, name, &mo);
        mr = rt_mutex(renewer, name, &mo);

        CHECK_RC(rlock_mutex_lock(mh), RLOCK_OK);
        CHECK_RC(rlock_mutex_fence(mh, &token), RLOCK_OK);
        CHECK(token > 0);
        CHECK_INT(rt_cmd_int(s, "EXISTS %s", lock_key), ==, 1);
        CHECK_INT(rt_cmd_int(s, "EXISTS %s", fence_key), ==, 1);
        CHECK_INT(rt_cmd_int(s, "DBSIZE"), <=, 4);

        rt_locker_start(&l, mw, 1);
        if (rows[i].channel) {
            spell(channel, sizeof channel, rows[i].channel, prefix, name);
            RT_WAIT_UNTIL(has_channel(s, channel, rows[i].channel_is_prefix),
                          10000);
        }
        rt_sleep_ms(200);
        CHECK(!atomic_load(&l.done));
        t0 = rt_now_ms();
        CHECK_RC(rlock_mutex_unlock(mh), RLOCK_OK);
        CHECK_RC(rt_locker_join(&l), RLOCK_OK);
        CHECK_INT(rt_now_ms() - t0, <, 2500);
        CHECK_INT(rt_cmd_int(s, "EXISTS %s", lock_key), ==, 0);

        /* Three leases of 300 ms, renewed under the documented key. */
        rt_lost_calls = 0;
        CHECK_RC(rlock_mutex_lock(mr), RLOCK_OK);
        rt_sleep_ms(1000);
        CHECK_INT(rt_cmd_int(s, "PTTL %s", lock_key), >, 0);
        CHECK_INT(rt_lost_calls, ==, 0);
        CHECK_RC(rlock_mutex_unlock(mr), RLOCK_OK);
        CHECK_INT(rt_cmd_int(s, "EXISTS %s", lock_key), ==, 0);

        rlock_mutex_free(mh);
        rlock_mutex_free(mw);
        rlock_mutex_free(mr);
        rlock_client_close(holder);
        rlock_client_close(waiter);
        rlock_client_close(renewer);
        freeReplyObject(rt_cmd(s, "FLUSHALL"));
    }
    rt_server_stop(s);
}
