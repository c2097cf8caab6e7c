/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The API's contract apart from locking: error names, version, defaults,
 * and bad input, which must be refused with RLOCK_EINVAL and a message
 * before anything is sent to Redis.
 */
#include <string.h>

#include "harness/test.h"

TEST(strerror_names_every_code)
{
    int codes[] = {RLOCK_OK,      RLOCK_EINVAL,   RLOCK_ENOMEM,
                   RLOCK_ECONNECT, RLOCK_ETIMEDOUT, RLOCK_EBUSY,
                   RLOCK_ENOTOWNER, RLOCK_ELOST,   RLOCK_EAUTH,
                   RLOCK_EREDIS,  RLOCK_EPROTO,   RLOCK_EIO,
                   RLOCK_ECANCELED, RLOCK_EREPLICAS, RLOCK_EUNAVAILABLE,
                   RLOCK_EQUORUM, RLOCK_ENOREPLY, RLOCK_EPERM,
                   RLOCK_ENOTLOCK, RLOCK_ENOTIFY};
    size_t i, j;

    for (i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        const char *s = rlock_strerror(codes[i]);
        CHECK(s && *s);
        CHECK(strcmp(s, rlock_strerror(-999)) != 0);
        for (j = 0; j < i; j++)
            CHECK(strcmp(s, rlock_strerror(codes[j])) != 0);
    }
    CHECK(strcmp(rlock_strerror(1), "unknown error code") == 0);
    /* The values are part of the ABI. */
    CHECK_INT(RLOCK_EINVAL, ==, -1);
    CHECK_INT(RLOCK_EPROTO, ==, -10);
    CHECK_INT(RLOCK_EIO, ==, -11);
    CHECK_INT(RLOCK_EREPLICAS, ==, -13);
    CHECK_INT(RLOCK_EUNAVAILABLE, ==, -14);
    CHECK_INT(RLOCK_EQUORUM, ==, -15);
    CHECK_INT(RLOCK_ENOREPLY, ==, -16);
    CHECK_INT(RLOCK_EPERM, ==, -17);
    CHECK_INT(RLOCK_ENOTLOCK, ==, -18);
    CHECK_INT(RLOCK_ENOTIFY, ==, -19);
}

TEST(version_matches_header)
{
    CHECK(strcmp(rlock_version(), RLOCK_VERSION_STRING) == 0);
    CHECK_INT(RLOCK_VERSION_NUM, ==,
              (RLOCK_VERSION_MAJOR << 16) | (RLOCK_VERSION_MINOR << 8) |
                  RLOCK_VERSION_PATCH);
}

TEST(options_have_documented_defaults)
{
    rlock_client_opts co;
    rlock_mutex_opts mo;

    memset(&co, 0x55, sizeof co);
    rlock_client_opts_init(&co);
    CHECK_INT(co.connect_timeout_ms, ==, 2000);
    CHECK_INT(co.command_timeout_ms, ==, 2000);
    CHECK_INT(co.watchdog_lease_ms, ==, 30000);
    CHECK_INT(co.waiter_ttl_ms, ==, 5000);
    CHECK_INT(co.use_pubsub, ==, 1);
    CHECK_INT(co.max_connections, ==, 64);
    CHECK(strcmp(co.key_prefix, "rlock") == 0);
    CHECK(co.username == NULL && co.password == NULL);
    CHECK_INT(co.sync_replicas, ==, 0);
    CHECK_INT(co.sync_timeout_ms, ==, 1000);
    memset(&mo, 0x55, sizeof mo);
    rlock_mutex_opts_init(&mo);
    CHECK_INT(mo.lease_ms, ==, 0);
    CHECK_INT(mo.max_renewals, ==, 0);
    CHECK(mo.on_lost == NULL && mo.on_lost_arg == NULL);
    CHECK_INT(mo.sync_replicas, ==, 0);
}

TEST(bad_input_is_refused_and_nothing_is_sent)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *c = rt_client(rt_server_url(s), NULL);
    rlock_mutex *m = rt_mutex(c, "bad-input", NULL), *held;
    rlock_mutex_opts mo;
    char long_name[RLOCK_NAME_MAX + 2];
    int err;

    held = rt_mutex(c, "bad-input-held", NULL);
    CHECK_RC(rlock_mutex_lock(held), RLOCK_OK);
    memset(long_name, 'x', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    freeReplyObject(rt_cmd(s, "CONFIG RESETSTAT"));

    CHECK(rlock_mutex_new(NULL, "x", NULL, &err) == NULL);
    CHECK_RC(err, RLOCK_EINVAL);
    CHECK(rlock_mutex_new(c, NULL, NULL, &err) == NULL);
    CHECK_RC(err, RLOCK_EINVAL);
    CHECK(strstr(rlock_client_errmsg(c), "NULL") != NULL);
    CHECK(rlock_mutex_new(c, "", NULL, &err) == NULL);
    CHECK_RC(err, RLOCK_EINVAL);
    CHECK(strstr(rlock_client_errmsg(c), "1 to") != NULL);
    CHECK(rlock_mutex_new(c, long_name, NULL, &err) == NULL);
    CHECK_RC(err, RLOCK_EINVAL);
    long_name[RLOCK_NAME_MAX] = '\0'; /* exactly the limit is fine */
    {
        rlock_mutex *ok = rlock_mutex_new(c, long_name, NULL, &err);
        CHECK(ok != NULL);
        rlock_mutex_free(ok);
    }
    rlock_mutex_opts_init(&mo);
    mo.lease_ms = -1;
    CHECK(rlock_mutex_new(c, "x", &mo, &err) == NULL);
    CHECK_RC(err, RLOCK_EINVAL);
    mo.lease_ms = RLOCK_MS_MAX + 1;
    CHECK(rlock_mutex_new(c, "x", &mo, &err) == NULL);
    CHECK_RC(err, RLOCK_EINVAL);
    mo.lease_ms = INT64_MAX;
    CHECK(rlock_mutex_new(c, "x", &mo, &err) == NULL);
    CHECK_RC(err, RLOCK_EINVAL);

    CHECK_RC(rlock_mutex_lock(NULL), RLOCK_EINVAL);
    CHECK_RC(rlock_mutex_trylock(NULL), RLOCK_EINVAL);
    CHECK_RC(rlock_mutex_timedlock(NULL, 10), RLOCK_EINVAL);
    CHECK_RC(rlock_mutex_unlock(NULL), RLOCK_EINVAL);
    CHECK_RC(rlock_mutex_extend(NULL, 10), RLOCK_EINVAL);
    CHECK_RC(rlock_mutex_timedlock(m, -1), RLOCK_EINVAL);
    CHECK_RC(rlock_mutex_timedlock(m, RLOCK_MS_MAX + 1), RLOCK_EINVAL);
    CHECK_RC(rlock_mutex_extend(held, 0), RLOCK_EINVAL);
    CHECK_RC(rlock_mutex_extend(held, -5), RLOCK_EINVAL);
    CHECK_RC(rlock_mutex_extend(held, INT64_MAX), RLOCK_EINVAL);
    CHECK_RC(rlock_with(m, 0, NULL, NULL), RLOCK_EINVAL);
    CHECK_RC(rlock_with(m, -7, NULL, NULL), RLOCK_EINVAL);
    CHECK(rlock_mutex_token(NULL) == 0);
    /* Unlocking what the thread does not hold is answered locally. */
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_ENOTOWNER);
    CHECK_RC(rlock_mutex_extend(m, 1000), RLOCK_ENOTOWNER);
    rlock_mutex_free(NULL);
    rlock_client_close(NULL);

    CHECK_INT(rt_commands_from_clients(s), ==, 0);

    rlock_mutex_free(m);
    CHECK_RC(rlock_mutex_unlock(held), RLOCK_OK);
    rlock_mutex_free(held);
    rlock_client_close(c);
    rt_server_stop(s);
}

TEST(bad_urls_and_options_are_refused)
{
    static const char *bad[] = {
        NULL,
        "",
        "http://127.0.0.1",
        "redis://",
        "redis://:6379",
        "redis://host:0",
        "redis://host:65536",
        "redis://host:12ab",
        "redis://host/db",
        "redis://host/-1",
        "redis://host?x=1",
        "redis://user@host",
        "redis://user:@host",
        "redis://u:p%zz@host",
        "redis://[::1",
        "rediss://host?tls=0",
        "rediss://host?insecure=yes",
        "redis://host?cacert=",
        "redis://host?tls=0&cacert=/ca.pem",
        "redis-cluster://host:1?tls=2",
        "redis-cluster://host:1?sni=",
        "redis-sentinel://host:1/m?tls=0&insecure=1",
        "redis-sentinel://host:1/m?insecure=1&foo=1",
        "redlock://host:1?insecure=1&foo=1",
        "redlock://host:1?cacert=%zz",
        "unix://",
        "unix://relative/path",
        "unix:///tmp/x.sock?foo=1",
        "unix:///tmp/x.sock?db=x",
        /* The database twice: which was meant is unknown. */
        "redis://host/3?db=4",
        "redis://host/3?db=3",
        "redis://host?db=1&db=2",
        "redis://host?sni=a&sni=b",
        /* TLS over a unix socket has no name to check: sni= or insecure=1. */
        "unix:///tmp/x.sock?tls=1",
        "unix:///tmp/x.sock?cacert=/ca.pem",
    };
    rlock_client_opts o;
    size_t i;
    int err;

    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err = 0;
        CHECK(rlock_client_open(bad[i], NULL, &err) == NULL);
        if (err != RLOCK_EINVAL)
            rt_fail(__FILE__, __LINE__, "URL '%s' gave %d", bad[i] ? bad[i] : "(null)", err);
        CHECK(strstr(rlock_client_errmsg(NULL), "URL") != NULL);
    }
    rlock_client_opts_init(&o);
    o.command_timeout_ms = 0;
    CHECK(rlock_client_open("redis://127.0.0.1:1", &o, &err) == NULL);
    CHECK_RC(err, RLOCK_EINVAL);
    rlock_client_opts_init(&o);
    o.key_prefix = "a{b";
    CHECK(rlock_client_open("redis://127.0.0.1:1", &o, &err) == NULL);
    CHECK_RC(err, RLOCK_EINVAL);
    rlock_client_opts_init(&o);
    o.backoff_min_ms = 10;
    o.backoff_max_ms = 5;
    CHECK(rlock_client_open("redis://127.0.0.1:1", &o, &err) == NULL);
    CHECK_RC(err, RLOCK_EINVAL);
    rlock_client_opts_init(&o);
    o.watchdog_lease_ms = 29;
    CHECK(rlock_client_open("redis://127.0.0.1:1", &o, &err) == NULL);
    CHECK_RC(err, RLOCK_EINVAL);
    rlock_client_opts_init(&o);
    o.username = "u";
    CHECK(rlock_client_open("redis://127.0.0.1:1", &o, &err) == NULL);
    CHECK_RC(err, RLOCK_EINVAL);
}
