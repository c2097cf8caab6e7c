/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Redlock (redlock://): a lock over five independent masters, each a real
 * redis-server. A majority must take it within its validity; two stopped
 * nodes are survived, three are reported as RLOCK_EQUORUM without leaving
 * anything on the live ones; fencing tokens increase across acquisitions
 * whichever majority answers; the checker finds no overlap. Each server
 * counts once, whatever address reaches it (its run_id), and clients of
 * node lists of different lengths never both hold a lock.
 */
#include <stdio.h>
#include <string.h>

#include "harness/aloop.h"
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

/* This process's established TCP connections to port (IPv4). */
static int connections_to(int port)
{
    FILE *f = fopen("/proc/self/net/tcp", "r");
    char line[512];
    unsigned rport, st;
    int n = 0;

    CHECK(f != NULL);
    while (fgets(line, sizeof line, f))
        if (sscanf(line, " %*d: %*x:%*x %*x:%x %x", &rport, &st) == 2 &&
            (int)rport == port && st == 1)
            n++;
    fclose(f);
    return n;
}

typedef struct pairs_arg {
    rlock_client *c;
    int k, pairs, failed;
} pairs_arg;

/* Lock and unlock pairs on a name of the thread's own. */
static void *pairs(void *arg)
{
    pairs_arg *a = arg;
    rlock_mutex *m;
    char name[32];
    int i;

    snprintf(name, sizeof name, "thr-%d", a->k);
    m = rt_mutex(a->c, name, NULL);
    for (i = 0; i < a->pairs; i++) {
        if (rlock_mutex_trylock(m) != RLOCK_OK) {
            fprintf(stderr, "thread %d: %s\n", a->k, rlock_client_errmsg(a->c));
            a->failed++;
            continue;
        }
        a->failed += rlock_mutex_unlock(m) != RLOCK_OK;
    }
    rlock_mutex_free(m);
    return NULL;
}

static int run_threads(rlock_client *c, int t, int n)
{
    pthread_t th[16];
    pairs_arg a[16];
    int i, failed = 0;

    for (i = 0; i < t; i++) {
        a[i].c = c;
        a[i].k = i;
        a[i].pairs = n;
        a[i].failed = 0;
        CHECK(pthread_create(&th[i], NULL, pairs, &a[i]) == 0);
    }
    for (i = 0; i < t; i++) {
        pthread_join(th[i], NULL);
        failed += a[i].failed;
    }
    return failed;
}

/* Threads of one Redlock client each have a connection to every node, as
 * on one server: none fails because another's request is in flight (a
 * node's pool used to be two connections, and a third thread's request
 * failed at once, so that 8 threads failed most of their locks). A
 * stalled node still gets no more connections once two owe it replies:
 * its requests fail at once, and the majority of the others serves. */
TEST(redlock_threads_of_one_client_never_fail_each_other)
{
    rlock_client *c = rt_client(start_nodes("node_timeout_ms=100"), NULL);
    int before;

    CHECK_INT(run_threads(c, 8, 200), ==, 0);
    /* Node 0 stalls: every request's leg there gives up after 100 ms. */
    rt_server_pause(nodes[0]);
    before = connections_to(rt_server_port(nodes[0]));
    CHECK_INT(before, <=, 8 + 1);
    CHECK_INT(run_threads(c, 8, 30), ==, 0);
    /* 240 requests: the connections the threads had, and new ones only
     * until two owed it replies. */
    CHECK_INT(connections_to(rt_server_port(nodes[0])), <=, before + 8 + 2);
    printf("node 0: %d connections before it stalled, %d after 240 "
           "requests\n",
           before, connections_to(rt_server_port(nodes[0])));
    rt_server_resume(nodes[0]);
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

/* ---- one server behind two entries; lists that differ (issue 33) ------- */

/* Where each test keeps the URLs it builds. */
static char url_a[400], url_b[400];

/* The last failure's detail (of c; NULL: of this thread) names text. */
static int said(rlock_client *c, const char *text)
{
    if (strstr(rlock_client_errmsg(c), text))
        return 1;
    fprintf(stderr, "error detail: %s\n", rlock_client_errmsg(c));
    return 0;
}

/* "host:port" of s under another address. */
static const char *as(const char *host, rt_server *s, char *buf, size_t len)
{
    snprintf(buf, len, "%s:%d", host, rt_server_port(s));
    return buf;
}

/* One server listening on the IPv4 and the IPv6 loopback, as Debian's
 * redis.conf has it. */
static rt_server *start_dual(void)
{
    rt_server_opts o;

    memset(&o, 0, sizeof o);
    o.extra[0] = "--bind";
    o.extra[1] = "127.0.0.1 ::1";
    return rt_server_start(&o);
}

/* n servers, listening on 127.0.0.1 only; s[i] at hp[i] ("127.0.0.1:N"). */
static void start_servers(rt_server **s, char (*hp)[64], int n)
{
    int i;

    for (i = 0; i < n; i++) {
        s[i] = rt_server_start(NULL);
        as("127.0.0.1", s[i], hp[i], sizeof hp[i]);
    }
}

/* P, Q and R (s[0..3), at hp[0..3)); url_a lists P, P again as host
 * (alias, "host:P") and Q, url_b the three servers as they are. */
static void alias_and_true_lists(rt_server **s, char (*hp)[64],
                                 const char *host, char *alias)
{
    start_servers(s, hp, 3);
    snprintf(url_a, sizeof url_a, "redlock://%s,%s,%s", hp[0],
             as(host, s[0], alias, 64), hp[1]);
    snprintf(url_b, sizeof url_b, "redlock://%s,%s,%s", hp[0], hp[1], hp[2]);
}

/* The end of a test of two clients (NULL ones too) over n servers. */
static void finish(rlock_mutex *ma, rlock_mutex *mb, rlock_client *ca,
                   rlock_client *cb, rt_server **s, int n)
{
    int i;

    rlock_mutex_free(ma);
    rlock_mutex_free(mb);
    rlock_client_close(ca);
    rlock_client_close(cb);
    for (i = 0; i < n; i++)
        rt_server_stop(s[i]);
}

/* Redis's 0.0.0.0 and the IPv6 loopback reach the server of 127.0.0.1:P
 * without either being its address: the address check cannot see it, the
 * server's run_id does. Refused at open, naming both entries. */
TEST(redlock_an_alias_of_a_node_is_refused_at_open)
{
    rt_server_opts no_info;
    rt_server *s[3];
    char a[64], b[64], c[64];
    const char *alias[] = {"0.0.0.0", "[::1]"};
    rlock_client *cl;
    rlock_mutex *m;
    size_t i;
    int err = 0;

    s[0] = start_dual();
    s[1] = rt_server_start(NULL);
    for (i = 0; i < sizeof alias / sizeof alias[0]; i++) {
        snprintf(url_a, sizeof url_a, "redlock://%s,%s,%s",
                 as("127.0.0.1", s[0], a, sizeof a),
                 as(alias[i], s[0], b, sizeof b),
                 as("127.0.0.1", s[1], c, sizeof c));
        cl = rlock_client_open(url_a, NULL, &err);
        if (cl || err != RLOCK_EINVAL)
            rt_fail(__FILE__, __LINE__, "%s: got %d (%s)", url_a, err,
                    rlock_client_errmsg(NULL));
        CHECK(said(NULL, a) && said(NULL, b) && said(NULL, "same server"));
    }
    {
        /* INFO server's text (over 1 KiB) is read under the tightest
         * bound on replies: the alias is still found, rather than the
         * connection refused. */
        rlock_client_opts tight;
        rlock_client_opts_init(&tight);
        tight.max_reply_bytes = 1024;
        tight.max_bulk_bytes = 64;
        cl = rlock_client_open(url_a, &tight, &err);
        if (cl || err != RLOCK_EINVAL)
            rt_fail(__FILE__, __LINE__, "%s: got %d (%s)", url_a, err,
                    rlock_client_errmsg(NULL));
        CHECK(said(NULL, "same server"));
    }
    /* The same servers, each named once, open; so does a server with INFO
     * renamed away (or denied by an ACL): it is not known by its run_id,
     * only by its address, as before. */
    memset(&no_info, 0, sizeof no_info);
    no_info.extra[0] = "--rename-command";
    no_info.extra[1] = "INFO";
    no_info.extra[2] = "";
    s[2] = rt_server_start(&no_info);
    snprintf(url_a, sizeof url_a, "redlock://%s,%s,%s",
             as("[::1]", s[0], a, sizeof a), as("127.0.0.1", s[1], b, sizeof b),
             as("127.0.0.1", s[2], c, sizeof c));
    cl = rt_client(url_a, NULL);
    m = rt_mutex(cl, "named_once", NULL);
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    CHECK_INT(rt_cmd_int(s[2], "EXISTS {rlock:named_once}"), ==, 1);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    finish(m, NULL, cl, NULL, s, 3);
}

/* The reproduction. A lists P twice (as 127.0.0.1:P and
 * 0.0.0.0:P) beside Q, B the three servers as they are. With Q out of
 * service for 400 ms (killed and started again: a stopped server would
 * run A's request when it resumed, and be A's too), A took the lock from
 * P alone, and 600 ms later B took Q and R: both held it. */
TEST(redlock_an_alias_list_never_overlaps_the_true_list)
{
    rt_server *s[3];
    char hp[3][64], alias[64];
    rlock_client *ca, *cb;
    rlock_mutex *ma = NULL, *mb;
    int err = 0, a_holds = 0, b_rc;

    alias_and_true_lists(s, hp, "0.0.0.0", alias);
    rt_server_kill(s[1]);
    ca = rlock_client_open(url_a, NULL, &err);
    if (ca) {
        ma = rt_mutex(ca, "twice", NULL);
        a_holds = rlock_mutex_trylock(ma) == RLOCK_OK;
    } else {
        CHECK_RC(err, RLOCK_EINVAL);
        CHECK(said(NULL, hp[0]) && said(NULL, alias));
    }
    rt_sleep_ms(400);
    rt_server_restart(s[1]);
    rt_sleep_ms(600);
    cb = rt_client(url_b, NULL);
    mb = rt_mutex(cb, "twice", NULL);
    b_rc = rlock_mutex_trylock(mb);
    if (a_holds && b_rc == RLOCK_OK)
        rt_fail(__FILE__, __LINE__, "A (%s) and B (%s) both hold the lock",
                url_a, url_b);
    CHECK(!a_holds);
    CHECK_RC(b_rc, RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(mb), RLOCK_OK);
    finish(ma, mb, ca, cb, s, 3);
}

/* [::1]:P is down when A opens (P listens on 127.0.0.1 only), so nothing
 * can be compared then; P then listens on ::1 too. Its answers are P's
 * and count once: with Q down, P alone is no majority of three (the alias
 * is a failed node, naming P), and B, with the true list, takes the lock.
 * With Q back, A holds through P and Q (a true majority), the alias still
 * not counted. */
TEST(redlock_a_node_that_comes_up_as_an_alias_is_not_counted)
{
    rt_server *s[3];
    char hp[3][64], alias[64];
    rlock_client *ca, *cb;
    rlock_mutex *ma, *mb;
    int rc;

    alias_and_true_lists(s, hp, "[::1]", alias);
    ca = rt_client(url_a, NULL);
    ma = rt_mutex(ca, "late", NULL);
    freeReplyObject(rt_cmd(s[0], "CONFIG SET bind %s", "127.0.0.1 ::1"));
    rt_server_kill(s[1]);
    rc = rlock_mutex_trylock(ma);
    if (rc == RLOCK_OK)
        rt_fail(__FILE__, __LINE__, "%s: held through P alone", url_a);
    CHECK_RC(rc, RLOCK_EQUORUM);
    CHECK(said(ca, hp[0]) && said(ca, alias) && said(ca, "same server"));
    /* Nothing of A's is left on P. */
    RT_WAIT_UNTIL(rt_cmd_int(s[0], "EXISTS {rlock:late}") == 0, 2000);
    rt_server_restart(s[1]);
    cb = rt_client(url_b, NULL);
    mb = rt_mutex(cb, "late", NULL);
    CHECK_RC(rlock_mutex_trylock(mb), RLOCK_OK);
    CHECK_RC(rlock_mutex_trylock(ma), RLOCK_EBUSY);
    CHECK_RC(rlock_mutex_unlock(mb), RLOCK_OK);
    CHECK_RC(rlock_mutex_trylock(ma), RLOCK_OK);
    CHECK_RC(rlock_mutex_trylock(mb), RLOCK_EBUSY);
    CHECK_RC(rlock_mutex_unlock(ma), RLOCK_OK);
    finish(ma, mb, ca, cb, s, 3);
}

/* A node restarted (a new run_id behind the same address) is the same
 * entry, not a duplicate: it counts. What is compared is the servers that
 * answer one request, so an alias of the restarted node is known by its
 * new run_id. Four entries, a majority of three: P, Q, R and [::1]:Q,
 * down at open. */
TEST(redlock_a_restarted_node_counts_and_its_alias_does_not)
{
    rt_server *s[3];
    char hp[3][64], alias[64];
    rlock_client *ca;
    rlock_mutex *m;
    int rc;

    start_servers(s, hp, 3);
    snprintf(url_a, sizeof url_a, "redlock://%s,%s,%s,%s", hp[0], hp[1], hp[2],
             as("[::1]", s[1], alias, sizeof alias));
    ca = rt_client(url_a, NULL);
    m = rt_mutex(ca, "again", NULL);
    CHECK_RC(rlock_mutex_trylock(m), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    rt_server_restart(s[1]);
    /* P, the new Q and R: the only majority there is. */
    CHECK_RC(rlock_mutex_trylock(m), RLOCK_OK);
    CHECK_INT(rt_cmd_int(s[1], "EXISTS {rlock:again}"), ==, 1);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    freeReplyObject(rt_cmd(s[1], "CONFIG SET bind %s", "127.0.0.1 ::1"));
    rt_server_kill(s[2]);
    rc = rlock_mutex_trylock(m);
    if (rc == RLOCK_OK)
        rt_fail(__FILE__, __LINE__, "%s: held through P and Q alone", url_a);
    CHECK(said(ca, hp[1]) && said(ca, alias) && said(ca, "same server"));
    rt_server_restart(s[2]);
    CHECK_RC(rlock_mutex_trylock(m), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    finish(m, NULL, ca, NULL, s, 3);
}

/* Issue 33, item 9: A lists P, Q, R (a majority of 2), B the same and S,
 * T (a majority of 3). Two majorities that share no node: A's P and Q
 * while R is down, then B's R, S and T; and the other way round. The
 * second to come sees the first's hold on a node it shares, written by a
 * client of another node count, and is refused; nothing of its attempt is
 * left. */
TEST(redlock_clients_of_different_node_lists_never_both_hold)
{
    rt_server *s[5];
    char hp[5][64];
    rlock_client *ca, *cb;
    rlock_mutex *ma, *mb;
    int i, rc;

    start_servers(s, hp, 5);
    snprintf(url_a, sizeof url_a, "redlock://%s,%s,%s", hp[0], hp[1], hp[2]);
    snprintf(url_b, sizeof url_b, "redlock://%s,%s,%s,%s,%s", hp[0], hp[1],
             hp[2], hp[3], hp[4]);
    ca = rt_client(url_a, NULL);
    cb = rt_client(url_b, NULL);
    ma = rt_mutex(ca, "lists", NULL);
    mb = rt_mutex(cb, "lists", NULL);

    rt_server_kill(s[2]);
    CHECK_RC(rlock_mutex_trylock(ma), RLOCK_OK);
    rt_server_restart(s[2]);
    rc = rlock_mutex_trylock(mb);
    if (rc == RLOCK_OK)
        rt_fail(__FILE__, __LINE__, "A (3 nodes) and B (5 nodes) both hold");
    CHECK_RC(rc, RLOCK_EINVAL);
    CHECK(said(cb, "3 nodes") && said(cb, "5") && said(cb, "same node list"));
    for (i = 2; i < 5; i++)
        RT_WAIT_UNTIL(rt_cmd_int(s[i], "EXISTS {rlock:lists}") == 0, 2000);
    CHECK_RC(rlock_mutex_unlock(ma), RLOCK_OK);

    rt_server_kill(s[0]);
    rt_server_kill(s[1]);
    CHECK_RC(rlock_mutex_trylock(mb), RLOCK_OK);
    rt_server_restart(s[0]);
    rt_server_restart(s[1]);
    rc = rlock_mutex_trylock(ma);
    if (rc == RLOCK_OK)
        rt_fail(__FILE__, __LINE__, "B (5 nodes) and A (3 nodes) both hold");
    CHECK_RC(rc, RLOCK_EINVAL);
    CHECK(said(ca, "5 nodes") && said(ca, "3"));
    for (i = 0; i < 2; i++)
        RT_WAIT_UNTIL(rt_cmd_int(s[i], "EXISTS {rlock:lists}") == 0, 2000);
    CHECK_RC(rlock_mutex_unlock(mb), RLOCK_OK);
    finish(ma, mb, ca, cb, s, 5);
}

static void redlock_take_away(const char *name, void *arg)
{
    int i;

    (void)arg;
    for (i = 0; i < NODES; i++)
        CHECK_INT(rt_cmd_int(nodes[i], "DEL {rlock:%s}", name), ==, 1);
}

/* The event-loop API on Redlock: every node in one turn of the loop, a
 * quorum for each hold, renewals and tokens agreed over the nodes. A
 * release does not wake Redlock's waiters (they poll, with backoff): the
 * hand-over may take longer. */
TEST(async_on_redlock)
{
    rt_async_deployment("redlock", start_nodes(NULL), NULL, 5000,
                        redlock_take_away, NULL);
    stop_nodes();
}

/* An event loop's Redlock requests, one after another on 16 handles,
 * their deadlines apart, while one node of five is stopped: its legs ride
 * the node's shared connections and give up one by one, and the node gets
 * at most one new connection (a shared connection one leg gave up on
 * counts as owing from then on, not only when its last leg leaves, and
 * then one whose handshake is unanswered too), so the requests it would
 * run when it wakes stay few. Every lock still holds by the other four.
 * (It used to get a connection each few requests: 9 in 2 s.) */
#define CHAINS 16

typedef struct chain {
    rlock_async_mutex *m;
    int busy, held, failed;
} chain;

static void chain_unlocked(rlock_async_mutex *m, int status, void *arg)
{
    chain *ch = arg;

    (void)m;
    ch->failed += status != RLOCK_OK;
    ch->busy = 0;
}

static void chain_locked(rlock_async_mutex *m, int status, uint64_t token,
                         void *arg)
{
    chain *ch = arg;

    (void)token;
    if (status != RLOCK_OK) {
        ch->failed++;
        ch->busy = 0;
        return;
    }
    ch->held++;
    CHECK_RC(rlock_async_unlock(m, chain_unlocked, ch), RLOCK_OK);
}

TEST(async_redlock_piles_no_connections_on_a_stopped_node)
{
    rlock_client_opts o;
    rlock_async *a;
    chain ch[CHAINS];
    rt_aloop p;
    char name[32];
    int i, err, held = 0, failed = 0, before, after;
    int64_t t0, start[CHAINS];

    start_nodes("node_timeout_ms=100");
    rlock_client_opts_init(&o);
    CHECK((a = rlock_async_open(url, &o, &err)) != NULL);
    rt_al_attach(&p, a);
    memset(ch, 0, sizeof ch);
    for (i = 0; i < CHAINS; i++) {
        snprintf(name, sizeof name, "pile-%d", i);
        CHECK((ch[i].m = rlock_async_mutex_new(a, name, NULL, &err)) != NULL);
    }
    /* The node's connections up and shared first. */
    for (i = 0; i < CHAINS; i++)
        CHECK_RC(rt_al_lock(&p, ch[i].m, 0), RLOCK_OK);
    for (i = 0; i < CHAINS; i++)
        CHECK_RC(rt_al_unlock(&p, ch[i].m), RLOCK_OK);
    rt_server_pause(nodes[0]);
    before = connections_to(rt_server_port(nodes[0]));
    t0 = rt_now_ms();
    for (i = 0; i < CHAINS; i++)
        start[i] = t0 + 7 * i; /* apart */
    while (rt_now_ms() - t0 < 2000) {
        for (i = 0; i < CHAINS; i++)
            if (!ch[i].busy && rt_now_ms() >= start[i]) {
                ch[i].busy = 1;
                CHECK_RC(rlock_async_lock(ch[i].m, 0, chain_locked, &ch[i]),
                         RLOCK_OK);
            }
        rt_al_turn(&p);
    }
    for (i = 0; i < CHAINS; i++) {
        int64_t t1 = rt_now_ms();
        while (ch[i].busy && rt_now_ms() - t1 < 5000)
            rt_al_turn(&p);
        CHECK_INT(ch[i].busy, ==, 0);
        held += ch[i].held;
        failed += ch[i].failed;
    }
    after = connections_to(rt_server_port(nodes[0]));
    printf("stopped node: %d connections before, %d after %d locks (%d "
           "failed)\n",
           before, after, held + failed, failed);
    CHECK_INT(failed, ==, 0);
    CHECK_INT(held, >=, CHAINS);
    CHECK_INT(after, <=, before + 2);
    for (i = 0; i < CHAINS; i++)
        rlock_async_mutex_free(ch[i].m);
    rlock_async_close(a);
    rt_server_resume(nodes[0]);
    stop_nodes();
}
