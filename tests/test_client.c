/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Connecting: URLs, credentials, database selection, timeouts, and
 * re-establishing dropped connections, each against a real redis-server.
 */
#include <string.h>

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
