/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Operators' API: a lock's status, the administrative release, ping, and
 * cancelling waits.
 */
#include <ctype.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness/test.h"

TEST(status_force_unlock_ping_and_cancel)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *a = rt_client(rt_server_url(s), NULL);
    rlock_client *b = rt_client(rt_server_url(s), NULL);
    rlock_mutex *ma = rt_mutex(a, "admin", NULL);
    rlock_mutex *mb = rt_mutex(b, "admin", NULL);
    rt_locker w;
    rlock_server_info info;
    rlock_status st;
    char owner[160];
    uint64_t token;

    CHECK_RC(rlock_mutex_status(ma, &st), RLOCK_OK);
    CHECK(!st.held && st.count == 0 && st.lease_ms == -1 && st.token == 0);
    CHECK(st.last_token == 0 && st.waiters == 0 && st.holder[0] == '\0');
    CHECK_RC(rlock_mutex_lock(ma), RLOCK_OK);
    CHECK_RC(rlock_mutex_lock(ma), RLOCK_OK);
    rt_locker_start(&w, mb, 0);
    RT_WAIT_UNTIL(rt_cmd_int(s, "LLEN {rlock:admin}:queue") == 1, 5000);
    /* ma's lock was taken lean: its token is drawn now. */
    token = rlock_mutex_token(ma);
    CHECK(token > 0);
    CHECK_RC(rlock_mutex_status(mb, &st), RLOCK_OK);
    CHECK(st.held &&
          strcmp(st.holder, rt_lock_field(s, "admin", RT_OWNER, owner,
                                          sizeof owner)) == 0);
    CHECK_INT(st.count, ==, 2);
    CHECK_INT(st.lease_ms, >, 25000);
    CHECK(st.token == token && st.last_token == st.token);
    CHECK_INT(st.waiters, ==, 1);

    /* Cancelling b's waits: its lock call returns, its place is gone. */
    rlock_client_cancel_waits(b);
    CHECK_RC(rt_locker_join(&w), RLOCK_ECANCELED);
    CHECK_INT(rt_cmd_int(s, "LLEN {rlock:admin}:queue"), ==, 0);

    /* A later wait is not cancelled; the force release hands it over. */
    rt_locker_start(&w, mb, 0);
    RT_WAIT_UNTIL(rt_cmd_int(s, "LLEN {rlock:admin}:queue") == 1, 5000);
    CHECK_RC(rlock_mutex_force_unlock(ma, &st), RLOCK_OK);
    CHECK(st.held && st.count == 2 && st.token > 0);
    CHECK_RC(rt_locker_join(&w), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(ma), RLOCK_ELOST);
    CHECK_RC(rlock_mutex_force_unlock(ma, &st), RLOCK_OK); /* b's now */
    CHECK(st.held && st.count == 1);
    CHECK_RC(rlock_mutex_force_unlock(ma, &st), RLOCK_OK);
    CHECK(!st.held);

    CHECK_RC(rlock_client_ping(a, &info), RLOCK_OK);
    /* Redis 6 or 7, or Valkey 7 or 8 (RLOCK_TEST_SERVER=valkey-server),
     * each naming itself. */
    CHECK(info.version[0] >= '6' && info.version[0] <= '8' &&
          info.version[1] == '.');
    CHECK(strcmp(info.server, strstr(rt_server_binary(), "valkey")
                                  ? "valkey"
                                  : "redis") == 0);
    CHECK_INT(info.rtt_us, >=, 0);
    CHECK_RC(rlock_client_ping(a, NULL), RLOCK_EINVAL);
    CHECK_RC(rlock_mutex_status(ma, NULL), RLOCK_EINVAL);

    rlock_mutex_free(ma);
    rlock_mutex_free(mb);
    rlock_client_close(a);
    rlock_client_close(b);
    rt_server_stop(s);
}

/* ---- keys that are not locks -------------------------------------------- */

#define rt_cmd_ok(s, ...)                                                      \
    do {                                                                       \
        redisReply *r_ = rt_cmd(s, __VA_ARGS__);                               \
        CHECK(r_->type != REDIS_REPLY_ERROR);                                  \
        freeReplyObject(r_);                                                   \
    } while (0)

static rlock_mutex *layout_mutex(rlock_client *c, const char *name, int layout)
{
    rlock_mutex_opts o;

    rlock_mutex_opts_init(&o);
    o.layout = layout;
    return rt_mutex(c, name, &o);
}

/* DUMP of a key and its PTTL, to see that nothing touched it. */
static char *snapshot(rt_server *s, const char *key)
{
    redisReply *d = rt_cmd(s, "DUMP %s", key);
    long long ttl = rt_cmd_int(s, "PTTL %s", key);
    char *out;

    CHECK(d->type == REDIS_REPLY_STRING);
    out = malloc((size_t)d->len * 2 + 32);
    CHECK(out != NULL);
    for (size_t i = 0; i < (size_t)d->len; i++)
        sprintf(out + 2 * i, "%02x", (unsigned char)d->str[i]);
    /* A key without expiry keeps -1; one with an expiry only counts down. */
    sprintf(out + 2 * (size_t)d->len, "/%s", ttl < 0 ? "none" : "some");
    freeReplyObject(d);
    return out;
}

/* status and force_unlock of name under layout both refuse, saying what
 * the key is, and key is as it was. */
static void refused(rt_server *s, rlock_client *c, const char *name,
                    int layout, const char *key, const char *what)
{
    rlock_mutex *m = layout_mutex(c, name, layout);
    char *before = snapshot(s, key), *after;
    rlock_status st;

    CHECK_RC(rlock_mutex_status(m, &st), RLOCK_ENOTLOCK);
    if (!strstr(rlock_client_errmsg(c), what) ||
        !strstr(rlock_client_errmsg(c), "not a lock"))
        rt_fail(__FILE__, __LINE__, "status of %s (layout %d): %s", name,
                layout, rlock_client_errmsg(c));
    CHECK_RC(rlock_mutex_force_unlock(m, &st), RLOCK_ENOTLOCK);
    if (!strstr(rlock_client_errmsg(c), what))
        rt_fail(__FILE__, __LINE__, "force of %s (layout %d): %s", name,
                layout, rlock_client_errmsg(c));
    after = snapshot(s, key);
    if (strcmp(before, after) != 0)
        rt_fail(__FILE__, __LINE__, "%s changed under layout %d", key, layout);
    free(before);
    free(after);
    rlock_mutex_free(m);
}

TEST(operators_refuse_keys_that_are_not_locks)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *c = rt_client(rt_server_url(s), NULL);
    static const int layouts[] = {RLOCK_LAYOUT_NATIVE, RLOCK_LAYOUT_TOKEN,
                                  RLOCK_LAYOUT_REDISSON};
    rlock_mutex *m;
    rlock_status st;
    size_t i;

    /* A plain string, a hash and a list under each layout's lock key. */
    for (i = 0; i < 3; i++) {
        int l = layouts[i];
        const char *pre = l == RLOCK_LAYOUT_NATIVE ? "{rlock:" : "";
        const char *post = l == RLOCK_LAYOUT_NATIVE ? "}" : "";
        char key[64];
        snprintf(key, sizeof key, "%sstr%s", pre, post);
        rt_cmd_ok(s, "SET %s %s", key, "hello world");
        refused(s, c, "str", l, key,
                l == RLOCK_LAYOUT_TOKEN    ? "no lock token"
                : l == RLOCK_LAYOUT_NATIVE ? "no rlock lock"
                                           : "string");
        snprintf(key, sizeof key, "%shash%s", pre, post);
        rt_cmd_ok(s, "HSET %s %s %s", key, "name", "Ada");
        refused(s, c, "hash", l, key, "hash");
        snprintf(key, sizeof key, "%slist%s", pre, post);
        rt_cmd_ok(s, "RPUSH %s %s", key, "job-1");
        refused(s, c, "list", l, key, "list");
        rt_cmd_ok(s, "FLUSHALL");
    }

    /* Native: a value with a field too many, waiters flagged but no
     * lease end, or no expiry; a queue key of the wrong type. */
    rt_cmd_ok(s, "SET {rlock:f} %s", "x 5 1 0 7 red");
    rt_cmd_ok(s, "PEXPIRE {rlock:f} 60000");
    refused(s, c, "f", RLOCK_LAYOUT_NATIVE, "{rlock:f}", "no rlock lock");
    rt_cmd_ok(s, "SET {rlock:w} %s", "x 5 1 1 7");
    rt_cmd_ok(s, "PEXPIRE {rlock:w} 60000");
    refused(s, c, "w", RLOCK_LAYOUT_NATIVE, "{rlock:w}", "no rlock lock");
    rt_cmd_ok(s, "SET {rlock:e} %s", "x 5 1 0 7");
    refused(s, c, "e", RLOCK_LAYOUT_NATIVE, "{rlock:e}", "no expiry");
    rt_cmd_ok(s, "SET {rlock:q}:queue x");
    refused(s, c, "q", RLOCK_LAYOUT_NATIVE, "{rlock:q}:queue", "queue key");

    /* Token: an empty value and one starting with NUL are data, not a
     * free lock (and are not deleted); so are text and short numbers. */
    rt_cmd_ok(s, "SET empty %b", "", (size_t)0);
    refused(s, c, "empty", RLOCK_LAYOUT_TOKEN, "empty", "empty string");
    rt_cmd_ok(s, "SET nul %b", "\0abcdefghij", (size_t)11);
    refused(s, c, "nul", RLOCK_LAYOUT_TOKEN, "nul", "NUL byte");
    rt_cmd_ok(s, "SET counter 42");
    refused(s, c, "counter", RLOCK_LAYOUT_TOKEN, "counter", "no lock token");
    rt_cmd_ok(s, "SET blob %b", "0123456789\x01", (size_t)11);
    refused(s, c, "blob", RLOCK_LAYOUT_TOKEN, "blob", "no lock token");
    /* ... but a peer's token, with or without expiry, is a lock to look
     * at; one without expiry (redis-py's Lock without a timeout, or an
     * application's string) is removed only when the caller says so. */
    rt_cmd_ok(s, "SET peer 3f2a9c1e7b6d4a5f8e9d0c1b2a3f4e5d");
    m = layout_mutex(c, "peer", RLOCK_LAYOUT_TOKEN);
    CHECK_RC(rlock_mutex_status(m, &st), RLOCK_OK);
    CHECK(st.held && st.lease_ms == -1 && st.holder_host[0] == '\0' &&
          st.holder_pid == 0);
    CHECK_RC(rlock_mutex_force_unlock(m, &st), RLOCK_ENOTLOCK);
    CHECK(strstr(rlock_client_errmsg(c), "no expiry") != NULL);
    CHECK_INT(rt_cmd_int(s, "EXISTS peer"), ==, 1);
    CHECK_RC(rlock_mutex_force_unlock_ex(m, RLOCK_FORCE_NO_EXPIRY, &st),
             RLOCK_OK);
    CHECK(st.held && strcmp(st.holder, "3f2a9c1e7b6d4a5f8e9d0c1b2a3f4e5d") == 0);
    CHECK_INT(rt_cmd_int(s, "EXISTS peer"), ==, 0);
    rlock_mutex_free(m);

    /* Redisson: a read-write lock's hash, a lock hash without expiry, a
     * field whose count is not a count. */
    rt_cmd_ok(s, "HSET rw mode read 9b2c1d4e-0000-4000-8000-000000000001:1 1");
    rt_cmd_ok(s, "PEXPIRE rw 60000");
    refused(s, c, "rw", RLOCK_LAYOUT_REDISSON, "rw", "fields no Redisson");
    rt_cmd_ok(s, "HSET forever 9b2c1d4e-0000-4000-8000-000000000001:1 1");
    refused(s, c, "forever", RLOCK_LAYOUT_REDISSON, "forever", "no expiry");
    rt_cmd_ok(s, "HSET odd 9b2c1d4e-0000-4000-8000-000000000001:1 yes");
    rt_cmd_ok(s, "PEXPIRE odd 60000");
    refused(s, c, "odd", RLOCK_LAYOUT_REDISSON, "odd", "fields no Redisson");

    /* A free lock is not refused. */
    m = layout_mutex(c, "nothing", RLOCK_LAYOUT_TOKEN);
    CHECK_RC(rlock_mutex_status(m, &st), RLOCK_OK);
    CHECK(!st.held);
    CHECK_RC(rlock_mutex_force_unlock(m, &st), RLOCK_OK);
    CHECK(!st.held);
    rlock_mutex_free(m);

    rlock_client_close(c);
    rt_server_stop(s);
}

/* ---- who holds it -------------------------------------------------------- */

static char host[64];

static void this_host(void)
{
    size_t i;

    CHECK(gethostname(host, sizeof host - 1) == 0);
    host[48] = '\0';
    for (i = 0; host[i]; i++)
        if (!isalnum((unsigned char)host[i]) && !strchr("._-", host[i]))
            host[i] = '_';
}

struct child_lock {
    rt_server *s;
    int layout;
};

/* Takes the lock and keeps it (the parent kills it). */
static int child_holds(void *p)
{
    struct child_lock *cl = p;
    rlock_client *c = rt_client(rt_server_url(cl->s), NULL);
    rlock_mutex *m = layout_mutex(c, "who", cl->layout);

    if (rlock_mutex_lock(m) != RLOCK_OK)
        return 1;
    for (;;)
        pause();
}

TEST(status_names_the_holders_host_and_pid)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *c = rt_client(rt_server_url(s), NULL);
    static const int layouts[] = {RLOCK_LAYOUT_NATIVE, RLOCK_LAYOUT_TOKEN,
                                  RLOCK_LAYOUT_REDISSON};
    size_t i;

    this_host();
    for (i = 0; i < 3; i++) {
        rlock_mutex *m = layout_mutex(c, "who", layouts[i]);
        struct child_lock cl = {s, layouts[i]};
        rlock_status st;
        pid_t pid;

        /* This process's hold. */
        CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
        CHECK_RC(rlock_mutex_status(m, &st), RLOCK_OK);
        CHECK(st.held && strcmp(st.holder_host, host) == 0);
        CHECK_INT(st.holder_pid, ==, (int64_t)getpid());
        CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);

        /* Another process's, seen from here; force_unlock names it too. */
        pid = rt_fork(child_holds, &cl);
        RT_WAIT_UNTIL(rlock_mutex_status(m, &st) == RLOCK_OK && st.held, 10000);
        CHECK(strcmp(st.holder_host, host) == 0);
        CHECK_INT(st.holder_pid, ==, (int64_t)pid);
        CHECK_RC(rlock_mutex_force_unlock(m, &st), RLOCK_OK);
        CHECK(st.held && strcmp(st.holder_host, host) == 0);
        CHECK_INT(st.holder_pid, ==, (int64_t)pid);
        kill(pid, SIGKILL);
        rt_wait(pid);
        rlock_mutex_free(m);
    }
    rlock_client_close(c);
    rt_server_stop(s);
}
