/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Scenario "interop": how fast a lock passes between rlock and another
 * library's client on one name, from the moment one side starts its
 * release to the moment the other side's waiting thread holds the lock.
 *
 *  - Redisson layout, both ways, against peers/redisson_peer.c (what
 *    Redisson's RLock does on the wire): a release publishes on Redisson's
 *    channel, so the waiter should follow within a round trip or two;
 *  - token layout, a SET NX PX peer releasing to rlock: nobody publishes,
 *    so rlock's waiter finds out at its next retry (backoff_min_ms to
 *    backoff_max_ms, 5 to 100 ms by default).
 * Each round starts the waiter, gives it 20 ms to try, subscribe and go
 * to sleep, then releases. Needs a single server (redis:// or unix://).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../peers/redisson_peer.h"
#include "bench.h"

#define PEER "7c1e5d2a-0f3b-4d8e-9a61-2b4c6d8e0f13:1"

struct round {
    const char *url;
    rlock_mutex *m;
    double got; /* when the waiter held the lock */
    int failed;
};

/* rlock waits: lock, note the time, unlock. */
static void *rlock_waiter(void *p)
{
    struct round *r = p;

    if (rlock_mutex_lock(r->m) != RLOCK_OK) {
        r->failed = 1;
        return NULL;
    }
    r->got = bench_now();
    if (rlock_mutex_unlock(r->m) != RLOCK_OK)
        r->failed = 1;
    return NULL;
}

/* The Redisson peer waits as RLock.lock() does: try, subscribe, and try
 * again at each message or when the PTTL it was told has passed. */
static void *peer_waiter(void *p)
{
    struct round *r = p;
    redisContext *x = floor_connect(r->url), *sub = floor_connect(r->url);
    long long ttl = 0;
    char msg[16];
    int held = -1, listening = 0;

    if (!x || !sub)
        goto out;
    while ((held = rp_try(x, "bench:interop:redisson", PEER, 30000, 0,
                          &ttl)) == 0) {
        if (!listening) {
            if (rp_listen(sub, "bench:interop:redisson", 0) != 0)
                break;
            listening = 1;
            continue;
        }
        if (rp_message(sub, ttl > 0 ? (int)ttl : 1, msg, sizeof msg) < 0)
            break;
    }
    if (held == 1) {
        r->got = bench_now();
        held = rp_unlock(x, "bench:interop:redisson", PEER, 30000) == 1;
    }
out:
    r->failed = held != 1;
    if (x)
        redisFree(x);
    if (sub)
        redisFree(sub);
    return NULL;
}

/* The SET NX PX peer's release. */
static const char compare_and_delete[] =
    "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end\n"
    "return redis.call('DEL', KEYS[1])\n";

enum { PEER_TO_RLOCK, RLOCK_TO_PEER, TOKEN_PEER_TO_RLOCK, WAYS };

static const char *way_name[WAYS] = {
    "redisson  peer -> rlock", "redisson  rlock -> peer",
    "token     peer -> rlock"};
static const char *way_key[WAYS] = {"redisson_peer_to_rlock",
                                    "redisson_rlock_to_peer",
                                    "token_peer_to_rlock"};

/* One hand-over of way w; its latency in seconds, or -1. */
static double hand_over(bench *b, int w, rlock_mutex *rs, rlock_mutex *tk,
                        redisContext *raw)
{
    struct round r = {b->url, w == TOKEN_PEER_TO_RLOCK ? tk : rs, 0, 0};
    redisReply *rep;
    pthread_t th;
    double t0;
    int ok = 1;

    if (w == PEER_TO_RLOCK)
        ok = rp_try(raw, "bench:interop:redisson", PEER, 30000, 0, NULL) == 1;
    else if (w == RLOCK_TO_PEER)
        ok = rlock_mutex_lock(rs) == RLOCK_OK;
    else if ((rep = redisCommand(raw, "SET bench:interop:token peer NX PX "
                                      "30000")) != NULL) {
        ok = rep->type == REDIS_REPLY_STATUS;
        freeReplyObject(rep);
    }
    if (!ok || pthread_create(&th, NULL,
                              w == RLOCK_TO_PEER ? peer_waiter : rlock_waiter,
                              &r) != 0)
        return -1;
    usleep(20000);
    t0 = bench_now();
    if (w == PEER_TO_RLOCK)
        ok = rp_unlock(raw, "bench:interop:redisson", PEER, 30000) == 1;
    else if (w == RLOCK_TO_PEER)
        ok = rlock_mutex_unlock(rs) == RLOCK_OK;
    else if ((rep = redisCommand(raw, "EVAL %s 1 bench:interop:token peer",
                                 compare_and_delete)) != NULL) {
        ok = rep->type == REDIS_REPLY_INTEGER && rep->integer == 1;
        freeReplyObject(rep);
    } else {
        ok = 0;
    }
    pthread_join(th, NULL);
    return ok && !r.failed ? r.got - t0 : -1;
}

int scenario_interop(bench *b)
{
    int rounds = b->quick ? 5 : 200, i, w, err, rc = 1;
    int single = strncmp(b->url, "redis://", 8) == 0 ||
                 strncmp(b->url, "unix://", 7) == 0;
    double *lat = calloc((size_t)rounds, sizeof *lat);
    redisContext *raw = single ? floor_connect(b->url) : NULL;
    rlock_mutex_opts o;
    rlock_client *c = NULL;
    rlock_mutex *rs = NULL, *tk = NULL;

    if (!single) {
        fprintf(b->out, "interop: skipped (the peers need a single server)\n");
        free(lat);
        return 0;
    }
    c = raw && lat ? rlock_client_open(b->url, NULL, &err) : NULL;
    rlock_mutex_opts_init(&o);
    o.layout = RLOCK_LAYOUT_REDISSON;
    rs = c ? rlock_mutex_new(c, "bench:interop:redisson", &o, &err) : NULL;
    o.layout = RLOCK_LAYOUT_TOKEN;
    tk = rs ? rlock_mutex_new(c, "bench:interop:token", &o, &err) : NULL;
    if (!tk)
        goto out;
    fprintf(b->out,
            "interop: hand-over between rlock and a peer on one name, %d "
            "rounds each way\n",
            rounds);
    report_open(b, "interop");
    report_num(b, "rounds", rounds);
    for (w = 0; w < WAYS; w++) {
        char key[64];
        for (i = 0; i < rounds; i++)
            if ((lat[i] = hand_over(b, w, rs, tk, raw)) < 0)
                goto failed;
        fprintf(b->out, "  %s  p50 %8.0f us  p99 %8.0f us  max %8.0f us\n",
                way_name[w], bench_quantile(lat, (size_t)rounds, 0.5) * 1e6,
                bench_quantile(lat, (size_t)rounds, 0.99) * 1e6,
                bench_quantile(lat, (size_t)rounds, 1.0) * 1e6);
        snprintf(key, sizeof key, "%s_p50_us", way_key[w]);
        report_num(b, key, bench_quantile(lat, (size_t)rounds, 0.5) * 1e6);
        snprintf(key, sizeof key, "%s_p99_us", way_key[w]);
        report_num(b, key, bench_quantile(lat, (size_t)rounds, 0.99) * 1e6);
    }
    report_close(b);
    rc = 0;
    goto out;
failed:
    report_close(b);
    fprintf(stderr, "rlock-bench: interop: a hand-over failed: %s\n",
            rlock_client_errmsg(c));
out:
    if (!tk && single)
        fprintf(stderr, "rlock-bench: interop: cannot start: %s\n",
                c ? rlock_client_errmsg(c) : "no connection");
    rlock_mutex_free(rs);
    rlock_mutex_free(tk);
    rlock_client_close(c);
    if (raw)
        redisFree(raw);
    free(lat);
    return rc;
}
