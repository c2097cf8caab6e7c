/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Redlock (redlock://): a lock over five independent masters, each a real
 * redis-server. A majority must take it within its validity; two stopped
 * nodes are survived, three are reported as RLOCK_EQUORUM without leaving
 * anything on the live ones; fencing tokens increase across acquisitions
 * whichever majority answers; the checker finds no overlap.
 */
#include <stdio.h>
#include <string.h>

#include "harness/test.h"

#define NODES 5

static rt_server *nodes[NODES];
static char url[512];

/* Starts five masters and builds their redlock:// URL (with params). */
static const char *start_nodes(const char *params)
{
    size_t len = (size_t)snprintf(url, sizeof url, "redlock://");
    int i;

    for (i = 0; i < NODES; i++) {
        nodes[i] = rt_server_start(NULL);
        len += (size_t)snprintf(url + len, sizeof url - len, "%s127.0.0.1:%d",
                                i ? "," : "", rt_server_port(nodes[i]));
    }
    if (params)
        snprintf(url + len, sizeof url - len, "?%s", params);
    return url;
}

static void stop_nodes(void)
{
    int i;

    for (i = 0; i < NODES; i++)
        rt_server_stop(nodes[i]);
}

/* Nodes that have the lock key of name. */
static int nodes_with(const char *name)
{
    int i, n = 0;

    for (i = 0; i < NODES; i++)
        n += (int)rt_cmd_int(nodes[i], "EXISTS {rlock:%s}", name);
    return n;
}

static int has_text(rlock_client *c, const char *text)
{
    if (strstr(rlock_client_errmsg(c), text))
        return 1;
    fprintf(stderr, "error detail: %s\n", rlock_client_errmsg(c));
    return 0;
}

TEST(redlock_takes_a_majority_and_releases_everywhere)
{
    rlock_client *c = rt_client(start_nodes(NULL), NULL);
    rlock_client *other = rt_client(url, NULL);
    rlock_mutex *m = rt_mutex(c, "rl", NULL);
    rlock_mutex *mo = rt_mutex(other, "rl", NULL);
    rlock_status st;
    uint64_t token;
    int i;

    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    token = rlock_mutex_token(m);
    CHECK(token > 0);
    CHECK_INT(nodes_with("rl"), ==, NODES);
    for (i = 0; i < NODES; i++) { /* one token on every node */
        char tok[32];
        CHECK(strtoull(rt_lock_field(nodes[i], "rl", RT_TOKEN, tok,
                                     sizeof tok),
                       NULL, 10) == token);
    }
    CHECK_RC(rlock_mutex_trylock(mo), RLOCK_EBUSY);
    CHECK_RC(rlock_mutex_timedlock(mo, 150), RLOCK_ETIMEDOUT);
    CHECK_RC(rlock_mutex_status(mo, &st), RLOCK_OK);
    CHECK(st.held && st.token == token && st.lease_ms > 0);
    /* Re-entry is counted by the client; the nodes see one hold. */
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    CHECK_INT(nodes_with("rl"), ==, NODES);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    CHECK_INT(nodes_with("rl"), ==, 0);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_ENOTOWNER);
    CHECK_RC(rlock_mutex_trylock(mo), RLOCK_OK);
    CHECK(rlock_mutex_token(mo) > token);
    CHECK_RC(rlock_mutex_extend(mo, 5000), RLOCK_OK);
    CHECK_INT(rt_cmd_int(nodes[2], "PTTL {rlock:rl}"), >, 4000);
    CHECK_RC(rlock_mutex_force_unlock(m, &st), RLOCK_OK);
    CHECK(st.held);
    CHECK_INT(nodes_with("rl"), ==, 0);
    CHECK_RC(rlock_mutex_unlock(mo), RLOCK_ELOST);
    rlock_mutex_free(m);
    rlock_mutex_free(mo);
    rlock_client_close(c);
    rlock_client_close(other);
    stop_nodes();
}

TEST(redlock_survives_two_stopped_nodes_and_refuses_with_three)
{
    rlock_client_opts co;
    rlock_client *c;
    rlock_mutex *m;
    int64_t t0;
    int i, live;

    /* A short lease: see the end. */
    rlock_client_opts_init(&co);
    co.watchdog_lease_ms = 900;
    c = rt_client(start_nodes("node_timeout_ms=50"), &co);
    m = rt_mutex(c, "down", NULL);

    rt_server_pause(nodes[0]);
    rt_server_pause(nodes[1]);
    for (i = 0; i < 3; i++) {
        t0 = rt_now_ms();
        CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
        /* The per-node timeout and a few round trips, with margin. */
        CHECK_INT(rt_now_ms() - t0, <, 50 + 1000);
        CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    }
    rt_server_pause(nodes[2]);
    t0 = rt_now_ms();
    CHECK_RC(rlock_mutex_trylock(m), RLOCK_EQUORUM);
    CHECK_INT(rt_now_ms() - t0, <, 50 + 1000);
    CHECK(has_text(c, "2 of 5 nodes") || has_text(c, "0 of 5 nodes"));
    CHECK(has_text(c, "majority is 3"));
    CHECK_RC(rlock_mutex_lock(m), RLOCK_EQUORUM);
    /* Nothing is left on the live nodes. */
    for (live = 3; live < NODES; live++)
        CHECK_INT(rt_cmd_int(nodes[live], "EXISTS {rlock:down}"), ==, 0);
    for (i = 0; i < 3; i++)
        rt_server_resume(nodes[i]);
    RT_WAIT_UNTIL(rlock_mutex_trylock(m) == RLOCK_OK, 10000);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    /* A stopped node runs, when it resumes, what was sent to it before
     * the client gave up on it; a hold taken that way is nobody's and
     * expires with its lease (docs/deployments.md). */
    RT_WAIT_UNTIL(nodes_with("down") == 0, 900 + 5000);
    rlock_mutex_free(m);
    rlock_client_close(c);
    stop_nodes();
}

TEST(redlock_tokens_increase_whichever_majority_answers)
{
    rlock_client *c = rt_client(start_nodes(NULL), NULL);
    rlock_mutex *m = rt_mutex(c, "tk", NULL);
    uint64_t t1, t2, t3;
    int i;

    /* Node 0's counter far ahead of the others'. */
    freeReplyObject(rt_cmd(nodes[0], "SET {rlock:tk}:fence 5000000000000000"));
    CHECK_RC(rlock_mutex_trylock(m), RLOCK_OK);
    t1 = rlock_mutex_token(m);
    CHECK(t1 > UINT64_C(5000000000000000));
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    /* Without node 0 (and node 1), the others must still go beyond t1:
     * the token was written back to a majority. */
    rt_server_pause(nodes[0]);
    rt_server_pause(nodes[1]);
    CHECK_RC(rlock_mutex_trylock(m), RLOCK_OK);
    t2 = rlock_mutex_token(m);
    CHECK(t2 > t1);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    rt_server_resume(nodes[0]);
    rt_server_resume(nodes[1]);
    rt_server_pause(nodes[3]);
    rt_server_pause(nodes[4]);
    RT_WAIT_UNTIL(rlock_mutex_trylock(m) == RLOCK_OK, 5000);
    t3 = rlock_mutex_token(m);
    CHECK(t3 > t2);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    for (i = 0; i < NODES; i++)
        rt_server_resume(nodes[i]);
    rlock_mutex_free(m);
    rlock_client_close(c);
    stop_nodes();
}

TEST(redlock_watchdog_renews_by_majority_and_reports_the_loss)
{
    rlock_client_opts co;
    rlock_mutex_opts mo;
    rlock_client *c;
    rlock_mutex *m;
    int64_t t0;
    int i;

    rlock_client_opts_init(&co);
    co.watchdog_lease_ms = 900;
    c = rt_client(start_nodes("node_timeout_ms=50"), &co);
    rlock_mutex_opts_init(&mo);
    mo.on_lost = rt_count_lost;
    m = rt_mutex(c, "wd", &mo);
    atomic_store(&rt_lost_calls, 0);
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    rt_server_pause(nodes[4]); /* one node down changes nothing */
    rt_sleep_ms(2500);         /* almost three leases */
    CHECK_INT(atomic_load(&rt_lost_calls), ==, 0);
    for (i = 0; i < 4; i++) /* the live ones */
        CHECK_INT(rt_cmd_int(nodes[i], "PTTL {rlock:wd}"), >, 0);
    rt_server_pause(nodes[3]);
    rt_server_pause(nodes[2]);
    t0 = rt_now_ms();
    RT_WAIT_UNTIL(atomic_load(&rt_lost_calls) == 1, 5000);
    CHECK_INT(rt_now_ms() - t0, <=, 900 + 1000);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_ELOST);
    for (i = 0; i < NODES; i++)
        rt_server_resume(nodes[i]);
    rlock_mutex_free(m);
    rlock_client_close(c);
    stop_nodes();
}

TEST(redlock_checker_finds_no_overlap_with_a_node_down)
{
    rt_check_opts o;

    rt_check_opts_init(&o);
    o.url = start_nodes("node_timeout_ms=50");
    o.name = "chk";
    o.workers = 4;
    o.iterations = 30;
    o.client.watchdog_lease_ms = 900;
    o.client.backoff_min_ms = 1;
    o.client.backoff_max_ms = 10;
    o.deadline_ms = 60000;
    rt_checker_completes(&o);
    rt_server_pause(nodes[1]);
    o.name = "chk2";
    rt_checker_completes(&o);
    rt_server_resume(nodes[1]);
    stop_nodes();
}

TEST(redlock_bad_configuration_is_refused)
{
    static const char *bad[] = {
        "redlock://",
        "redlock://127.0.0.1:1,,127.0.0.1:2",
        "redlock://127.0.0.1:1,",
        "redlock://,127.0.0.1:1",
        "redlock://127.0.0.1:1?drift=1",
        "redlock://127.0.0.1:1?drift=-0.1",
        "redlock://127.0.0.1:1?drift=abc",
        "redlock://127.0.0.1:1?drift= 0.1",
        "redlock://127.0.0.1:1?drift=1e-2",
        "redlock://127.0.0.1:1?drift=0x0.1",
        "redlock://127.0.0.1:1?drift=nan",
        "redlock://127.0.0.1:1?node_timeout_ms=0",
        "redlock://127.0.0.1:1?node_timeout_ms=60001",
        "redlock://127.0.0.1:1?node_timeout_ms=+5",
        "redlock://127.0.0.1:1?bogus=1",
        "redlock://user:pw@127.0.0.1:1",
        "redlock://127.0.0.1:1/0",
        ("redlock://1:1,2:2,3:3,4:4,5:5,6:6,7:7,8:8,9:9,10:10,11:11,12:12,"
         "13:13,14:14,15:15,16:16,17:17"),
    };
    /* The same server twice: by the same text, by another spelling, or
     * by a name and its address. Refused at open, before connecting. */
    static const char *twice[] = {
        "redlock://127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7001",
        "redlock://LOCALHOST:7001,127.0.0.1:7002,localhost:7001",
        "redlock://localhost:7001,127.0.0.1:7002,127.0.0.1:7001",
    };
    size_t i;

    rlock_client_opts o;
    int err = 0;

    for (i = 0; i < sizeof twice / sizeof twice[0]; i++) {
        rlock_client *c = rlock_client_open(twice[i], NULL, &err);
        if (c || err != RLOCK_EINVAL ||
            !strstr(rlock_client_errmsg(NULL), "the same server"))
            rt_fail(__FILE__, __LINE__, "%s: got %d (%s)", twice[i], err,
                    rlock_client_errmsg(NULL));
    }

    /* Options that do not fit Redlock. */
    rlock_client_opts_init(&o);
    o.sync_replicas = 1;
    CHECK(!rlock_client_open("redlock://127.0.0.1:1", &o, &err));
    CHECK_RC(err, RLOCK_EINVAL);
    CHECK(strstr(rlock_client_errmsg(NULL), "sync_replicas") != NULL);
    rlock_client_opts_init(&o);
    o.watchdog_lease_ms = 900;
    CHECK(!rlock_client_open("redlock://127.0.0.1:1?node_timeout_ms=100", &o,
                             &err));
    CHECK_RC(err, RLOCK_EINVAL);
    CHECK(strstr(rlock_client_errmsg(NULL), "node_timeout_ms") != NULL);
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rlock_client *c = rlock_client_open(bad[i], NULL, &err);
        if (c || err != RLOCK_EINVAL)
            rt_fail(__FILE__, __LINE__, "%s: got %d (%s)", bad[i], err,
                    rlock_client_errmsg(NULL));
        CHECK(strstr(rlock_client_errmsg(NULL), "redlock URL") != NULL);
    }
}

/* Status and force release act only where the keys are a lock: a node
 * holding someone's data under the lock's key refuses, and keeps it. */
TEST(redlock_operators_refuse_a_node_holding_data)
{
    rlock_client *c = rt_client(start_nodes(NULL), NULL);
    rlock_mutex *m = rt_mutex(c, "data", NULL);
    rlock_status st;
    redisReply *r;

    freeReplyObject(rt_cmd(nodes[3], "SET {rlock:data} precious"));
    CHECK_RC(rlock_mutex_status(m, &st), RLOCK_ENOTLOCK);
    CHECK(has_text(c, "on node 127.0.0.1:"));
    CHECK(has_text(c, "lock key holds a value no rlock lock has"));
    CHECK_RC(rlock_mutex_force_unlock(m, &st), RLOCK_ENOTLOCK);
    r = rt_cmd(nodes[3], "GET {rlock:data}");
    CHECK(r->type == REDIS_REPLY_STRING && strcmp(r->str, "precious") == 0);
    freeReplyObject(r);
    rlock_mutex_free(m);
    rlock_client_close(c);
    stop_nodes();
}
