/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Walking the keys (rlock_scan): every key of every server the client's
 * deployment keeps keys on comes, in steps of about COUNT keys; MATCH and
 * TYPE filter on the server; a step costs one SCAN (and one DBSIZE the
 * first time a server is asked), as the server's own command counts say;
 * a user whom the ACL refuses SCAN gets RLOCK_EPERM naming the command.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/test.h"

/* The keys a walk answered: names without a NUL (the test's own) and a
 * count of repeats. */
typedef struct seen {
    char **keys;
    size_t n, cap;
    int binary_ok; /* the key with a NUL and controls came whole */
} seen;

static const char binary_key[] = "bin\0\033[2J\377:k";

static void collect(void *arg, const char *key, size_t len)
{
    seen *s = arg;

    if (len == sizeof binary_key - 1 && memcmp(key, binary_key, len) == 0) {
        s->binary_ok++;
        return;
    }
    CHECK_INT(strlen(key), ==, len);
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 1024;
        s->keys = realloc(s->keys, s->cap * sizeof *s->keys);
        CHECK(s->keys != NULL);
    }
    s->keys[s->n] = strdup(key);
    CHECK(s->keys[s->n] != NULL);
    s->n++;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Distinct keys seen, and each of want[0..nwant) among them. */
static size_t distinct(seen *s)
{
    size_t i, d = 0;

    qsort(s->keys, s->n, sizeof *s->keys, by_name);
    for (i = 0; i < s->n; i++)
        if (i == 0 || strcmp(s->keys[i], s->keys[i - 1]) != 0)
            d++;
    return d;
}

static int has(seen *s, const char *key)
{
    return bsearch(&key, s->keys, s->n, sizeof *s->keys, by_name) != NULL;
}

static void forget(seen *s)
{
    size_t i;

    for (i = 0; i < s->n; i++)
        free(s->keys[i]);
    free(s->keys);
    memset(s, 0, sizeof *s);
}

/* Walks to the end in steps of count; returns the steps taken. */
static int64_t walk(rlock_client *c, const char *match, const char *type,
                    int count, seen *out)
{
    int err, rc;
    int64_t steps = 0;
    rlock_scan *s = rlock_scan_new(c, match, type, &err);

    CHECK(s != NULL);
    while ((rc = rlock_scan_next(s, count, collect, out)) == 1)
        steps++;
    CHECK_RC(rc, 0);
    steps++;
    CHECK_INT(rlock_scan_info(s, RLOCK_SCAN_STEPS), ==, steps);
    CHECK_INT(rlock_scan_info(s, RLOCK_SCAN_DONE), ==,
              rlock_scan_info(s, RLOCK_SCAN_SERVERS));
    /* The end was said: another step sends nothing. */
    CHECK_RC(rlock_scan_next(s, count, collect, out), 0);
    CHECK_INT(rlock_scan_info(s, RLOCK_SCAN_STEPS), ==, steps);
    rlock_scan_free(s);
    return steps;
}

/* n keys "k:<i>" as strings and every tenth a hash "h:<i>", over
 * server s. */
static void fill(rt_server *s, int n)
{
    redisContext *ctx = rt_server_ctx(s);
    redisReply *r;
    int i;

    for (i = 0; i < n; i++) {
        if (i % 10 == 0)
            redisAppendCommand(ctx, "HSET h:%d f v", i);
        else
            redisAppendCommand(ctx, "SET k:%d v", i);
    }
    for (i = 0; i < n; i++) {
        CHECK(redisGetReply(ctx, (void **)&r) == REDIS_OK);
        CHECK(r->type != REDIS_REPLY_ERROR);
        freeReplyObject(r);
    }
}

TEST(a_walk_gives_every_key_in_steps_of_about_count)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *c = rt_client(rt_server_url(s), NULL);
    rlock_scan *sc;
    seen got = {0};
    int64_t steps;
    int err;

    fill(s, 5000);
    freeReplyObject(
        rt_cmd(s, "SET %b x", binary_key, (size_t)(sizeof binary_key - 1)));
    freeReplyObject(rt_cmd(s, "CONFIG RESETSTAT"));
    steps = walk(c, NULL, NULL, 500, &got);
    CHECK_INT(distinct(&got), ==, 5000);
    CHECK_INT(got.binary_ok, >=, 1);
    CHECK(has(&got, "k:4999") && has(&got, "h:0"));
    /* About 5001 / 500 steps (SCAN may answer a few more keys a step). */
    CHECK_INT(steps, >=, 8);
    CHECK_INT(steps, <=, 14);
    CHECK_INT(rt_cmdstat_calls(s, "scan"), ==, steps);
    CHECK_INT(rt_cmdstat_calls(s, "dbsize"), ==, 1);
    forget(&got);

    /* MATCH and TYPE are the server's. */
    walk(c, "k:1*", NULL, 1000, &got);
    CHECK_INT(distinct(&got), ==, 1000); /* k:1, k:1x, k:1xx, k:1xxx */
    CHECK(has(&got, "k:1999") && !has(&got, "k:2000"));
    forget(&got);
    walk(c, NULL, "hash", 1000, &got);
    CHECK_INT(distinct(&got), ==, 500);
    CHECK(has(&got, "h:4990") && !has(&got, "k:1"));
    forget(&got);

    /* The figures of one walk, step by step. */
    sc = rlock_scan_new(c, NULL, NULL, &err);
    CHECK(sc != NULL);
    CHECK_INT(rlock_scan_info(sc, RLOCK_SCAN_SERVERS), ==, 1);
    CHECK_INT(rlock_scan_info(sc, RLOCK_SCAN_DBSIZE), ==, -1);
    CHECK_INT(rlock_scan_info(sc, RLOCK_SCAN_COMMANDS), ==, 0);
    CHECK_RC(rlock_scan_next(sc, 10, collect, &got), 1);
    CHECK_INT(rlock_scan_info(sc, RLOCK_SCAN_DBSIZE), ==, 5001);
    CHECK_INT(rlock_scan_info(sc, RLOCK_SCAN_REACHED), ==, 1);
    CHECK_INT(rlock_scan_info(sc, RLOCK_SCAN_COMMANDS), ==, 2);
    /* The binary key is counted apart from the names (collect). */
    CHECK_INT(rlock_scan_info(sc, RLOCK_SCAN_KEYS), ==,
              (int64_t)got.n + got.binary_ok);
    CHECK_RC(rlock_scan_next(sc, 10, collect, &got), 1);
    CHECK_INT(rlock_scan_info(sc, RLOCK_SCAN_COMMANDS), ==, 3);
    CHECK_INT(rlock_scan_info(sc, RLOCK_SCAN_DONE), ==, 0);
    CHECK_INT(rlock_scan_info(sc, 0), ==, -1);
    rlock_scan_free(sc);
    forget(&got);
    rlock_client_close(c);
    rt_server_stop(s);
}

TEST(a_walk_the_acl_refuses_is_eperm_and_a_refused_dbsize_is_no_error)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *c;
    rlock_scan *sc;
    seen got = {0};
    char url[160];
    int err;

    fill(s, 100);
    freeReplyObject(rt_cmd(s, "ACL SETUSER noscan on >pw ~* &* +@all -scan"));
    freeReplyObject(rt_cmd(s, "ACL SETUSER nosize on >pw ~* &* +@all -dbsize"));
    snprintf(url, sizeof url, "redis://noscan:pw@127.0.0.1:%d",
             rt_server_port(s));
    c = rt_client(url, NULL);
    sc = rlock_scan_new(c, NULL, NULL, &err);
    CHECK(sc != NULL);
    CHECK_RC(rlock_scan_next(sc, 100, collect, &got), RLOCK_EPERM);
    CHECK(strstr(rlock_client_errmsg(c), "scan") != NULL);
    CHECK(strstr(rlock_client_errmsg(c), "NOPERM") != NULL);
    /* Nothing moved: the same step fails again, and nothing came. */
    CHECK_RC(rlock_scan_next(sc, 100, collect, &got), RLOCK_EPERM);
    CHECK_INT(got.n, ==, 0);
    CHECK_INT(rlock_scan_info(sc, RLOCK_SCAN_STEPS), ==, 0);
    rlock_scan_free(sc);
    rlock_client_close(c);

    snprintf(url, sizeof url, "redis://nosize:pw@127.0.0.1:%d",
             rt_server_port(s));
    c = rt_client(url, NULL);
    sc = rlock_scan_new(c, NULL, NULL, &err);
    CHECK(sc != NULL);
    while (rlock_scan_next(sc, 1000, collect, &got) == 1)
        ;
    CHECK_INT(distinct(&got), ==, 100);
    CHECK_INT(rlock_scan_info(sc, RLOCK_SCAN_DBSIZE), ==, -1);
    rlock_scan_free(sc);
    forget(&got);
    rlock_client_close(c);
    rt_server_stop(s);
}

TEST(a_walk_covers_every_master_of_a_cluster)
{
    rt_server *n[3];
    rt_server_opts o;
    rlock_client *c;
    rlock_scan *sc;
    seen got = {0};
    char cmd[256], url[64], key[32];
    int i, k, err, on[3] = {0};

    memset(&o, 0, sizeof o);
    o.cluster_enabled = 1;
    for (i = 0; i < 3; i++)
        n[i] = rt_server_start(&o);
    snprintf(cmd, sizeof cmd,
             "redis-cli --cluster create 127.0.0.1:%d 127.0.0.1:%d "
             "127.0.0.1:%d --cluster-yes >/dev/null 2>&1",
             rt_server_port(n[0]), rt_server_port(n[1]), rt_server_port(n[2]));
    CHECK_INT(system(cmd), ==, 0);
    for (i = 0; i < 3; i++)
        RT_WAIT_UNTIL(rt_cluster_ok(n[i]), 20000);
    snprintf(url, sizeof url, "redis-cluster://127.0.0.1:%d",
             rt_server_port(n[0]));
    /* 300 keys over the slots: each on the master of its slot. */
    for (k = 0; k < 300; k++) {
        snprintf(key, sizeof key, "c:%d", k);
        for (i = 0; i < 3; i++) {
            redisReply *r = rt_cmd(n[i], "SET %s v", key);
            int ok = r->type == REDIS_REPLY_STATUS;
            freeReplyObject(r);
            if (ok) {
                on[i]++;
                break;
            }
        }
        CHECK(i < 3);
    }
    CHECK(on[0] > 0 && on[1] > 0 && on[2] > 0);
    for (i = 0; i < 3; i++)
        freeReplyObject(rt_cmd(n[i], "CONFIG RESETSTAT"));
    c = rt_client(url, NULL);
    sc = rlock_scan_new(c, "c:*", NULL, &err);
    CHECK(sc != NULL);
    CHECK_INT(rlock_scan_info(sc, RLOCK_SCAN_SERVERS), ==, 3);
    while (rlock_scan_next(sc, 1000, collect, &got) == 1)
        ;
    CHECK_INT(distinct(&got), ==, 300);
    CHECK_INT(rlock_scan_info(sc, RLOCK_SCAN_DBSIZE), ==, 300);
    CHECK_INT(rlock_scan_info(sc, RLOCK_SCAN_REACHED), ==, 3);
    /* One SCAN on each master (the servers take turns). */
    for (i = 0; i < 3; i++)
        CHECK_INT(rt_cmdstat_calls(n[i], "scan"), ==, 1);
    CHECK_INT(rlock_scan_info(sc, RLOCK_SCAN_COMMANDS), ==, 1 + 3 + 3);
    rlock_scan_free(sc);
    forget(&got);
    rlock_client_close(c);
    for (i = 0; i < 3; i++)
        rt_server_stop(n[i]);
}

TEST(a_walk_covers_every_redlock_node)
{
    rt_server *n[3];
    rlock_client *c;
    rlock_scan *sc;
    seen got = {0};
    char url[128];
    int i, err;

    for (i = 0; i < 3; i++) {
        n[i] = rt_server_start(NULL);
        freeReplyObject(rt_cmd(n[i], "SET only-on-%d v", i));
        freeReplyObject(rt_cmd(n[i], "SET everywhere v"));
    }
    snprintf(url, sizeof url,
             "redlock://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d",
             rt_server_port(n[0]), rt_server_port(n[1]), rt_server_port(n[2]));
    c = rt_client(url, NULL);
    sc = rlock_scan_new(c, NULL, NULL, &err);
    CHECK(sc != NULL);
    CHECK_INT(rlock_scan_info(sc, RLOCK_SCAN_SERVERS), ==, 3);
    while (rlock_scan_next(sc, 100, collect, &got) == 1)
        ;
    CHECK_INT(distinct(&got), ==, 4);
    CHECK_INT(got.n, ==, 6); /* "everywhere" from each node */
    CHECK(has(&got, "only-on-0") && has(&got, "only-on-2"));
    rlock_scan_free(sc);
    forget(&got);
    rlock_client_close(c);
    for (i = 0; i < 3; i++)
        rt_server_stop(n[i]);
}
