/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Connecting: URLs, credentials, database selection, timeouts, and
 * re-establishing dropped connections, each against a real redis-server.
 */
#include <string.h>

#include "harness/fake_server.h"
#include "harness/test.h"

TEST(connect_refused_is_reported_at_open)
{
    rt_server *s = rt_server_start(NULL);
    char url[64];
    int err = 0;

    /* A port that was just in use and is now closed. */
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", rt_server_port(s));
    rt_server_kill(s);
    CHECK(rlock_client_open(url, NULL, &err) == NULL);
    CHECK_RC(err, RLOCK_ECONNECT);
    CHECK(strstr(rlock_client_errmsg(NULL), "127.0.0.1") != NULL);
    rt_server_stop(s);
}

TEST(password_and_acl_user)
{
    rt_server_opts so = {.password = "s3cret"};
    rt_server *s = rt_server_start(&so);
    char url[160];
    rlock_client *c;
    rlock_client_opts o;
    redisReply *r;
    int err = 0;

    /* No password: NOAUTH. Wrong password: refused. */
    CHECK(rlock_client_open(rt_server_url(s), NULL, &err) == NULL);
    CHECK_RC(err, RLOCK_EAUTH);
    snprintf(url, sizeof url, "redis://:wrong@127.0.0.1:%d", rt_server_port(s));
    CHECK(rlock_client_open(url, NULL, &err) == NULL);
    CHECK_RC(err, RLOCK_EAUTH);
    CHECK(strstr(rlock_client_errmsg(NULL), "wrong") == NULL);

    snprintf(url, sizeof url, "redis://:s3cret@127.0.0.1:%d", rt_server_port(s));
    c = rt_client(url, NULL);
    rlock_client_close(c);

    /* Options override the URL's credentials. */
    rlock_client_opts_init(&o);
    o.password = "s3cret";
    c = rt_client(rt_server_url(s), &o);
    rlock_client_close(c);

    /* An ACL user, with a password that needs percent-encoding. */
    r = rt_cmd(s, "ACL SETUSER alice on >p@ss:w/rd ~* &* +@all");
    CHECK(r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
    snprintf(url, sizeof url, "redis://alice:p%%40ss%%3Aw%%2Frd@127.0.0.1:%d",
             rt_server_port(s));
    c = rt_client(url, NULL);
    {
        rlock_mutex *m = rt_mutex(c, "acl", NULL);
        CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
        CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
        rlock_mutex_free(m);
    }
    rlock_client_close(c);
    snprintf(url, sizeof url, "redis://alice:nope@127.0.0.1:%d",
             rt_server_port(s));
    CHECK(rlock_client_open(url, NULL, &err) == NULL);
    CHECK_RC(err, RLOCK_EAUTH);
    rt_server_stop(s);
}

TEST(database_selection_tcp_and_unix)
{
    rt_server *s = rt_server_start(NULL);
    char url[200];
    rlock_client *c;
    rlock_mutex *m;
    int err = 0;

    snprintf(url, sizeof url, "%s/5", rt_server_url(s));
    c = rt_client(url, NULL);
    m = rt_mutex(c, "in-db-5", NULL);
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:in-db-5}"), ==, 0);
    freeReplyObject(rt_cmd(s, "SELECT 5"));
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:in-db-5}"), ==, 1);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    rlock_mutex_free(m);
    rlock_client_close(c);

    snprintf(url, sizeof url, "%s?db=7", rt_server_unix_url(s));
    c = rt_client(url, NULL);
    m = rt_mutex(c, "in-db-7", NULL);
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    freeReplyObject(rt_cmd(s, "SELECT 7"));
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:in-db-7}"), ==, 1);
    rlock_mutex_free(m);
    rlock_client_close(c);

    snprintf(url, sizeof url, "%s/100000", rt_server_url(s));
    CHECK(rlock_client_open(url, NULL, &err) == NULL);
    CHECK_RC(err, RLOCK_EREDIS);
    CHECK(strstr(rlock_client_errmsg(NULL), "DB index") != NULL);
    rt_server_stop(s);
}

/* Every call that talks to Redis, timed while the server is stopped. */
static int timed_call(int (*op)(rlock_mutex *), rlock_mutex *m, int64_t *took)
{
    int64_t t0 = rt_now_ms();
    int rc = op(m);

    *took = rt_now_ms() - t0;
    return rc;
}

static int op_lock(rlock_mutex *m) { return rlock_mutex_lock(m); }
static int op_trylock(rlock_mutex *m) { return rlock_mutex_trylock(m); }
static int op_timedlock(rlock_mutex *m) { return rlock_mutex_timedlock(m, 60000); }
static int op_unlock(rlock_mutex *m) { return rlock_mutex_unlock(m); }
static int op_extend(rlock_mutex *m) { return rlock_mutex_extend(m, 60000); }
static int op_fence(rlock_mutex *m)
{
    uint64_t token;
    return rlock_mutex_fence(m, &token);
}
static int op_status(rlock_mutex *m)
{
    rlock_status st;
    return rlock_mutex_status(m, &st);
}
static int op_force(rlock_mutex *m) { return rlock_mutex_force_unlock(m, NULL); }
static int op_ping(rlock_mutex *m)
{
    rlock_server_info info;
    return rlock_client_ping(rlock_mutex_client(m), &info);
}
static int never_called;
static int critical(void *arg, uint64_t token)
{
    (void)arg;
    (void)token;
    never_called = 1;
    return 0;
}
static int op_with(rlock_mutex *m) { return rlock_with(m, 60000, critical, NULL); }

TEST(a_hung_server_times_out_every_call_and_recovers)
{
    static const struct {
        const char *what;
        int (*op)(rlock_mutex *);
        int on_held; /* 1: on the mutex the thread holds; 2: on one it
                        holds without a token drawn yet */
    } calls[] = {
        {"lock", op_lock, 0},         {"trylock", op_trylock, 0},
        {"timedlock", op_timedlock, 0}, {"unlock", op_unlock, 1},
        {"extend", op_extend, 1},     {"fence", op_fence, 2},
        {"status", op_status, 0},
        {"force_unlock", op_force, 0}, {"ping", op_ping, 0},
        {"with", op_with, 0},
    };
    rt_server *s = rt_server_start(NULL);
    rlock_client_opts o;
    rlock_client *c;
    rlock_mutex *held, *other, *lean;
    uint64_t token;
    char tok[32];
    int64_t took, t0;
    size_t i;
    int err = 0;

    rlock_client_opts_init(&o);
    o.connect_timeout_ms = 300;
    o.command_timeout_ms = 300;
    c = rt_client(rt_server_url(s), &o);
    held = rt_mutex(c, "held", NULL);
    other = rt_mutex(c, "other", NULL);
    lean = rt_mutex(c, "lean", NULL);
    CHECK_RC(rlock_mutex_lock(held), RLOCK_OK);
    CHECK(rlock_mutex_token(held) > 0);
    CHECK_RC(rlock_mutex_lock(lean), RLOCK_OK);
    rt_server_pause(s);

    for (i = 0; i < sizeof calls / sizeof calls[0]; i++) {
        rlock_mutex *on = calls[i].on_held == 2   ? lean
                          : calls[i].on_held == 1 ? held
                                                  : other;
        int rc = timed_call(calls[i].op, on, &took);
        if (rc != RLOCK_ENOREPLY)
            rt_fail(__FILE__, __LINE__, "%s returned %s", calls[i].what,
                    rlock_strerror(rc));
        /* The command timeout, plus a margin for a loaded machine. */
        if (took < 250 || took > 300 + 2000)
            rt_fail(__FILE__, __LINE__, "%s took %lld ms", calls[i].what,
                    (long long)took);
        CHECK(strstr(rlock_client_errmsg(c), "within 300 ms") != NULL);
    }
    CHECK(!never_called);

    /* A new client: the server accepts the connection, never answers. */
    t0 = rt_now_ms();
    CHECK(rlock_client_open(rt_server_url(s), &o, &err) == NULL);
    CHECK_RC(err, RLOCK_ENOREPLY);
    CHECK_INT(rt_now_ms() - t0, <, 300 + 2000);
    CHECK(strstr(rlock_client_errmsg(NULL), "connecting to") != NULL);

    /* Freeing a mutex sends nothing and cannot hang. */
    t0 = rt_now_ms();
    rlock_mutex_free(other);
    CHECK_INT(rt_now_ms() - t0, <, 300 + 2000);

    /* After SIGCONT everything works again. What the stopped server
     * received late is carried out then: the lock attempts are undone by
     * the client in the background, and the timed-out unlock may have
     * released the hold, so calling unlock again is what the caller does
     * (it reports success either way). */
    rt_server_resume(s);
    other = rt_mutex(c, "other", NULL);
    RT_WAIT_UNTIL(rt_cmd_int(s, "EXISTS {rlock:other} {rlock:other}:queue") == 0,
                  5000);
    CHECK(rlock_mutex_token(held) > 0); /* drawn before: nothing sent */
    CHECK_RC(rlock_mutex_unlock(held), RLOCK_OK);
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:held}"), ==, 0);
    /* The token asked for now is the one Redis keeps with the hold (the
     * stopped server drew it late, or draws it now). */
    token = rlock_mutex_token(lean);
    CHECK(token > 0 && strtoull(rt_lock_field(s, "lean", RT_TOKEN, tok,
                                              sizeof tok),
                                NULL, 10) == token);
    CHECK_RC(rlock_mutex_unlock(lean), RLOCK_OK);
    CHECK_RC(rlock_mutex_trylock(other), RLOCK_OK);
    CHECK_RC(rlock_mutex_extend(other, 60000), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(other), RLOCK_OK);
    CHECK_RC(op_ping(held), RLOCK_OK);
    rlock_mutex_free(held);
    rlock_mutex_free(other);
    rlock_mutex_free(lean);
    rlock_client_close(c);
    c = rt_client(rt_server_url(s), &o);
    rlock_client_close(c);
    rt_server_stop(s);
}

/* The server's command connections, but the test's own. */
static int command_conns(rt_server *s)
{
    redisReply *r = rt_cmd(s, "CLIENT LIST TYPE normal");
    int n = 0;
    const char *p;

    CHECK(r->type == REDIS_REPLY_STRING);
    for (p = r->str; (p = strchr(p, '\n')) != NULL; p++)
        n++;
    freeReplyObject(r);
    return n - 1;
}

struct burst {
    rlock_mutex *m;
    int pairs, failed;
};

static void *burst_pairs(void *arg)
{
    struct burst *b = arg;
    int i;

    for (i = 0; i < b->pairs; i++)
        if (rlock_mutex_lock(b->m) != RLOCK_OK ||
            rlock_mutex_unlock(b->m) != RLOCK_OK)
            b->failed = 1;
    return NULL;
}

/* Eight threads, a name each, pairs pairs: how many connections that
 * took. */
static int burst_of(rlock_client *c, rt_server *s, int pairs)
{
    pthread_t th[8];
    struct burst b[8];
    int i;

    for (i = 0; i < 8; i++) {
        char name[16];
        snprintf(name, sizeof name, "burst%d", i);
        b[i].m = rt_mutex(c, name, NULL);
        b[i].pairs = pairs;
        b[i].failed = 0;
        CHECK(pthread_create(&th[i], NULL, burst_pairs, &b[i]) == 0);
    }
    for (i = 0; i < 8; i++) {
        CHECK(pthread_join(th[i], NULL) == 0);
        CHECK(!b[i].failed);
        rlock_mutex_free(b[i].m);
    }
    return command_conns(s);
}

static int burst(rlock_client *c, rt_server *s)
{
    return burst_of(c, s, 200);
}

/*
 * A connection in steady use (answered a moment ago) is reused without
 * the poll that looks for an EOF (two system calls a request: rlock-bench
 * syscalls). Killed right after its last answer, it is still found: the
 * next call either finds it closed and opens another (OK), or writes on
 * it and fails with a connection error, never silently sending its
 * request again; either way the lock's state is what the answer says, and
 * the call after it works.
 */
TEST(a_connection_killed_in_steady_use_is_found_by_its_next_request)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *c = rt_client(rt_server_url(s), NULL);
    rlock_mutex *m = rt_mutex(c, "steady", NULL);
    int i, rc, failed = 0, pooled;

    for (i = 0; i < 10; i++) {
        /* Several connections, answered a moment ago. */
        pooled = burst(c, s);
        burst_of(c, s, 1); /* one pair each, at once */
        CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
        CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
        freeReplyObject(rt_cmd(s, "CLIENT KILL TYPE normal SKIPME yes"));
        rc = rlock_mutex_trylock(m);
        if (rc != RLOCK_OK) {
            failed++;
            if (rc != RLOCK_EIO && rc != RLOCK_ENOREPLY && rc != RLOCK_ECONNECT)
                rt_fail(__FILE__, __LINE__, "trylock: %d (%s): %s", rc,
                        rlock_strerror(rc), rlock_client_errmsg(c));
            /* The server never read the request: no hold. The other
             * pooled connections, dead too, are looked at now: one
             * request paid for the kill, not one per connection. */
            CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:steady}"), ==, 0);
            CHECK_RC(rlock_mutex_trylock(m), RLOCK_OK);
        }
        CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:steady}"), ==, 1);
        CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
        /* A waiting lock meets the kill too, and gets the lock. */
        pooled = burst(c, s);
        freeReplyObject(rt_cmd(s, "CLIENT KILL TYPE normal SKIPME yes"));
        CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
        CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    }
    fprintf(stderr, "%d of 10 kills were met by a request (%d pooled)\n",
            failed, pooled);
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:steady}"), ==, 0);
    rlock_mutex_free(m);
    rlock_client_close(c);
    rt_server_stop(s);
}

/*
 * The start of a reply nobody asked for, read with the last answer, sits
 * in the connection's buffer where no poll sees it: reused, it would be
 * the head of the next request's answer ("-ERR stray+OK"). Such a
 * connection is not reused.
 */
TEST(a_connection_holding_part_of_a_stray_reply_is_not_reused)
{
    static const rt_fake_mode cases[] = {
        RT_FAKE_EXTRA,       /* would have been "-ERR stray+OK" */
        RT_FAKE_EXTRA_ARRAY, /* would have been the array [1, OK] */
    };
    size_t i;

    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rt_fake *f = rt_fake_start(cases[i], 0);
        rlock_client_opts o;
        rlock_client *c;
        rlock_mutex *m;

        rlock_client_opts_init(&o);
        o.use_pubsub = 0; /* the fake server knows no pub/sub */
        o.max_connections = 1;
        c = rt_client(rt_fake_url(f), &o);
        m = rt_mutex(c, "stray", NULL);
        CHECK_RC(rlock_mutex_trylock(m), RLOCK_OK); /* "+OK": the lean SET */
        CHECK_INT(rt_fake_accepted(f), ==, 1);
        /* On a fresh connection: the release script is answered "+OK",
         * which it never says. */
        CHECK_RC(rlock_mutex_unlock(m), RLOCK_EPROTO);
        CHECK_INT(rt_fake_accepted(f), >=, 2); /* not the first one */
        rlock_mutex_free(m);
        rlock_client_close(c);
        rt_fake_stop(f);
    }
}

/*
 * With the default options the pool grows with the threads that use it
 * at once (a thread does not wait behind another's round trip while it
 * can open a connection), and shrinks to one after 5 s unused. A
 * max_connections that is set stays a hard limit.
 */
TEST(the_pool_grows_with_its_threads_and_shrinks_when_idle)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client_opts o;
    rlock_client *c = rt_client(rt_server_url(s), NULL);
    rlock_mutex *m = rt_mutex(c, "after", NULL);
    int grown;

    CHECK_INT(command_conns(s), ==, 1); /* the open's */
    grown = burst(c, s);
    fprintf(stderr, "eight threads opened %d connections\n", grown);
    CHECK_INT(grown, >=, 2);
    CHECK_INT(grown, <=, 8);
    rt_sleep_ms(5500);
    /* The next request gives back what sat idle, but one. */
    CHECK_RC(rlock_mutex_trylock(m), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    CHECK_INT(command_conns(s), ==, 1);
    rlock_mutex_free(m);
    rlock_client_close(c);
    RT_WAIT_UNTIL(command_conns(s) == 0, 5000);

    rlock_client_opts_init(&o);
    o.max_connections = 2;
    c = rt_client(rt_server_url(s), &o);
    CHECK_INT(burst(c, s), <=, 2);
    rlock_client_close(c);
    rt_server_stop(s);
}

TEST(dropped_connections_are_reestablished)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *c = rt_client(rt_server_url(s), NULL);
    rlock_mutex *m = rt_mutex(c, "reconnect", NULL);
    redisReply *r;

    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);

    /* The server closes every other client's connection. */
    r = rt_cmd(s, "CLIENT KILL TYPE normal SKIPME yes");
    CHECK(r->type == REDIS_REPLY_INTEGER && r->integer >= 1);
    freeReplyObject(r);
    rt_sleep_ms(50);
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);

    /* A restart: new process, empty script cache. */
    rt_server_restart(s);
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:reconnect}"), ==, 1);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    rlock_mutex_free(m);
    rlock_client_close(c);
    rt_server_stop(s);
}
