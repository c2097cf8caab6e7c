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

TEST(calls_never_hang_past_their_timeouts)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client_opts o;
    rlock_client *c;
    rlock_mutex *m;
    int64_t t0, took;
    int err = 0;

    rlock_client_opts_init(&o);
    o.connect_timeout_ms = 300;
    o.command_timeout_ms = 300;
    c = rt_client(rt_server_url(s), &o);
    m = rt_mutex(c, "paused", NULL);
    rt_server_pause(s);

    t0 = rt_now_ms();
    CHECK_RC(rlock_mutex_trylock(m), RLOCK_EIO);
    took = rt_now_ms() - t0;
    CHECK_INT(took, >=, 250);
    CHECK_INT(took, <, 3000); /* the command timeout plus cleanup, roomy */
    CHECK(strstr(rlock_client_errmsg(c), "300 ms") != NULL);

    t0 = rt_now_ms();
    CHECK(rlock_client_open(rt_server_url(s), &o, &err) == NULL);
    CHECK_RC(err, RLOCK_ECONNECT);
    CHECK_INT(rt_now_ms() - t0, <, 3000);

    rt_server_resume(s);
    CHECK_RC(rlock_mutex_trylock(m), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    rlock_mutex_free(m);
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
