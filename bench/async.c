/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Scenario "async": the event-loop API (rlock/async.h) on one libevent
 * loop thread (issue 30).
 *
 *   holds    N locks taken and kept by one loop, renewed by its watchdog:
 *            the client's heap per hold (glibc's bytes in use, after
 *            minus before, over N), and the loop's CPU per renewal tick
 *            (a tick renews every hold once);
 *   waiters  N waits queued behind 100 holders: the heap per waiter;
 *   chains   C acquire + release chains on the loop (each on a name of
 *            its own: the next lock when the release's callback comes),
 *            against hiredis's own async API running the floor's two
 *            commands (SET NX PX, the compare-and-delete script) at the
 *            same concurrency on one connection, on the same loop.
 *            rlock runs twice: with its handles' tokens drawn at once
 *            (the default: each lock's callback has its fencing token,
 *            so each acquisition is a script), and on demand
 *            (rlock_async_mutex_tokens: the uncontended acquisition is a
 *            bare SET NX PX, the floor's own first command). Rounds
 *            alternate between the three sides, so that all see the same
 *            moments of a noisy machine; the figures are the ratios of
 *            their pairs per second, for C = 1, 16 and 256.
 *
 * Needs libevent (built with it when found); otherwise it says so and
 * passes.
 */
#include <inttypes.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#ifndef BENCH_LIBEVENT

int scenario_async(bench *b)
{
    fprintf(b->out, "async: rlock-bench was built without libevent: "
                    "skipped\n");
    return 0;
}

#else

#include <event2/event.h>
#include <hiredis/adapters/libevent.h>
#include <hiredis/async.h>
#include <rlock/adapters/libevent.h>

#define NAMES 100 /* the waiters' names, each with a holder */
#define ROUNDS 4  /* per side, alternating, for each C */

static struct event_base *base;

/* Turns of the loop until *done reaches want, or until deadline (bench
 * clock): 0, or -1 at the deadline. */
static int turn_until(const long *done, long want, double deadline)
{
    while (*done < want) {
        if (bench_now() > deadline)
            return -1;
        event_base_loop(base, EVLOOP_ONCE);
    }
    return 0;
}

static size_t heap_in_use(void)
{
    struct mallinfo2 mi = mallinfo2();

    return mi.uordblks + mi.hblkhd;
}

/* ---- holds and their renewals ------------------------------------------ */

static long locked, lock_failed;
/* The holds still to take, WINDOW of them in flight at a time: a burst
 * of 100,000 requests would wait for the pool's connections past their
 * deadline (each call has one), which is not what is measured here. */
#define WINDOW 256
static rlock_async_mutex **to_lock;
static long next_lock, locks_total;

static void hold_locked(rlock_async_mutex *m, int status, uint64_t token,
                        void *arg)
{
    (void)token;
    (void)arg;
    if (status == RLOCK_OK)
        locked++;
    else if (lock_failed++ == 0)
        fprintf(stderr, "rlock-bench: async: lock: %s\n",
                rlock_async_errmsg(m));
    if (next_lock < locks_total &&
        rlock_async_lock(to_lock[next_lock++], 0, hold_locked, NULL) !=
            RLOCK_OK)
        lock_failed++;
}

static int run_holds(bench *b)
{
    long n = b->holds ? b->holds : b->quick ? 2000 : 100000, i;
    rlock_client_opts co;
    rlock_async_mutex **m = calloc((size_t)n, sizeof *m);
    rlock_async *a;
    rlock_stats st0 = RLOCK_STATS_INIT, st1 = RLOCK_STATS_INIT;
    size_t heap0, heap1;
    double t0, cpu0, cpu1, window = b->quick ? 4.5 : 11.0;
    int err = RLOCK_ENOMEM, rc = 1;
    char name[64];

    rlock_client_opts_init(&co);
    /* A tick every 5 s (every 2 s in a quick run): two of them in the
     * window. */
    co.watchdog_lease_ms = b->quick ? 6000 : 15000;
    if (!m || !(a = rlock_async_open(b->url, &co, &err))) {
        fprintf(stderr, "rlock-bench: async: open: %s\n", rlock_strerror(err));
        free(m);
        return 1;
    }
    rlock_libevent_attach(a, base);
    locked = lock_failed = 0;
    heap0 = heap_in_use();
    t0 = bench_now();
    for (i = 0; i < n; i++) {
        snprintf(name, sizeof name, "bench:async:hold:%ld", i);
        if (!(m[i] = rlock_async_mutex_new(a, name, NULL, &err))) {
            fprintf(stderr, "rlock-bench: async: mutex %ld: %s\n", i,
                    rlock_strerror(err));
            goto out;
        }
    }
    fprintf(b->out, "async handles: %.0f bytes each\n",
            (double)(heap_in_use() - heap0) / (double)n);
    report_num(b, "heap_per_handle_bytes",
               (double)(heap_in_use() - heap0) / (double)n);
    to_lock = m;
    locks_total = n;
    for (next_lock = 0; next_lock < WINDOW && next_lock < n; next_lock++)
        if (rlock_async_lock(m[next_lock], 0, hold_locked, NULL) != RLOCK_OK)
            goto out;
    while (locked + lock_failed < n && !lock_failed && bench_now() - t0 < 300)
        event_base_loop(base, EVLOOP_ONCE);
    if (locked < n) {
        fprintf(stderr, "rlock-bench: async: %ld of %ld holds taken\n", locked,
                n);
        goto out;
    }
    heap1 = heap_in_use();
    fprintf(b->out,
            "async holds: %ld taken in %.2f s; client heap %.0f bytes per "
            "hold\n",
            n, bench_now() - t0, (double)(heap1 - heap0) / (double)n);
    report_num(b, "holds", (double)n);
    report_num(b, "heap_per_hold_bytes", (double)(heap1 - heap0) / (double)n);
    /* The renewals: the loop's CPU over whole ticks. */
    rlock_async_stats(a, &st0);
    cpu0 = bench_cpu_usec();
    t0 = bench_now();
    while (bench_now() - t0 < window)
        event_base_loop(base, EVLOOP_ONCE);
    cpu1 = bench_cpu_usec();
    rlock_async_stats(a, &st1);
    {
        double renewed = (double)(st1.renewals - st0.renewals);
        double ticks = renewed / (double)n;
        double lost = (double)(st1.losses - st0.losses);
        fprintf(b->out,
                "async renewals: %.0f in %.1f s (%.2f ticks of %ld), %.0f "
                "lost; loop CPU %.1f ms per tick, %.2f us per renewal\n",
                renewed, bench_now() - t0, ticks, n, lost,
                ticks > 0 ? (cpu1 - cpu0) / ticks / 1000 : 0,
                renewed > 0 ? (cpu1 - cpu0) / renewed : 0);
        report_num(b, "renewals", renewed);
        report_num(b, "renewal_ticks", ticks);
        report_num(b, "losses", lost);
        report_num(b, "cpu_ms_per_tick",
                   ticks > 0 ? (cpu1 - cpu0) / ticks / 1000 : 0);
        report_num(b, "cpu_us_per_renewal",
                   renewed > 0 ? (cpu1 - cpu0) / renewed : 0);
        rc = renewed > 0 && lost == 0 ? 0 : 1;
        if (rc)
            fprintf(stderr, "rlock-bench: async: no renewal, or a hold "
                            "lost\n");
    }
out:
    /* Closed with its holds: their leases run out. */
    rlock_async_close(a);
    free(m);
    return rc;
}

/* ---- waiters ------------------------------------------------------------ */

static long waiters_ended;

static void waiter_ended(rlock_async_mutex *m, int status, uint64_t token,
                         void *arg)
{
    (void)token;
    (void)arg;
    /* None ends while the run lasts: the first that does says why. */
    if (waiters_ended++ == 0 && status != RLOCK_ECANCELED)
        fprintf(stderr, "rlock-bench: async: a waiter ended: %s (%s)\n",
                rlock_strerror(status), rlock_async_errmsg(m));
}

static long long queued(redisContext *raw)
{
    redisReply *r = redisCommand(
        raw, "EVAL %s 0",
        "local n = 0 for i = 0, 99 do n = n + redis.call('LLEN', "
        "'{rlock:bench:async:wait:' .. i .. '}:queue') end return n");
    long long v = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;

    if (r)
        freeReplyObject(r);
    return v;
}

static int run_waiters(bench *b, redisContext *raw)
{
    long n = b->quick ? 1000 : 20000, i;
    rlock_client_opts co;
    rlock_async_mutex *holder[NAMES];
    rlock_async *a;
    size_t heap0, heap1;
    double t0;
    int err, rc = 1;
    char name[64];

    rlock_client_opts_init(&co);
    /* Each waiter's place is refreshed every third of waiter_ttl_ms: the
     * memory is the figure here, not that load. */
    co.waiter_ttl_ms = 120000;
    if (!(a = rlock_async_open(b->url, &co, &err))) {
        fprintf(stderr, "rlock-bench: async: open: %s\n", rlock_strerror(err));
        return 1;
    }
    rlock_libevent_attach(a, base);
    locked = lock_failed = 0;
    next_lock = locks_total = 0;
    for (i = 0; i < NAMES; i++) {
        snprintf(name, sizeof name, "bench:async:wait:%ld", i);
        if (!(holder[i] = rlock_async_mutex_new(a, name, NULL, &err)) ||
            rlock_async_lock(holder[i], 0, hold_locked, NULL) != RLOCK_OK)
            goto out;
    }
    if (turn_until(&locked, NAMES, bench_now() + 60) < 0)
        goto out;
    waiters_ended = 0;
    heap0 = heap_in_use();
    t0 = bench_now();
    for (i = 0; i < n; i++) {
        rlock_async_mutex *w;
        long long q;
        snprintf(name, sizeof name, "bench:async:wait:%ld", i % NAMES);
        if (!(w = rlock_async_mutex_new(a, name, NULL, &err)) ||
            rlock_async_lock(w, -1, waiter_ended, NULL) != RLOCK_OK)
            goto out;
        /* In waves of WINDOW, each in Redis's queues before the next. */
        if ((i + 1) % WINDOW != 0 && i + 1 < n)
            continue;
        while ((q = queued(raw)) >= 0 && q < i + 1 && !waiters_ended &&
               bench_now() - t0 < 300)
            event_base_loop(base, EVLOOP_ONCE);
    }
    while (queued(raw) < n) {
        if (bench_now() - t0 > 300 || waiters_ended > 0) {
            fprintf(stderr, "rlock-bench: async: %lld of %ld waiters queued\n",
                    queued(raw), n);
            goto out;
        }
        for (i = 0; i < 100; i++)
            event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
        event_base_loop(base, EVLOOP_ONCE);
    }
    heap1 = heap_in_use();
    fprintf(b->out,
            "async waiters: %ld queued in %.2f s; client heap %.0f bytes per "
            "waiter\n",
            n, bench_now() - t0, (double)(heap1 - heap0) / (double)n);
    report_num(b, "waiters", (double)n);
    report_num(b, "heap_per_waiter_bytes", (double)(heap1 - heap0) / (double)n);
    rc = 0;
out:
    /* Every wait's callback runs once, canceled; the holders' leases run
     * out. (The waiters' handles go with the client.) */
    rlock_async_close(a);
    return rc;
}

/* ---- chains against the floor ------------------------------------------ */

static int stopping;
static long pairs_done, chains_out, chain_failed;

typedef struct chain {
    rlock_async_mutex *m;
    char key[64], token[32];
} chain;

static void chain_locked(rlock_async_mutex *m, int status, uint64_t token,
                         void *arg);

static void chain_unlocked(rlock_async_mutex *m, int status, void *arg)
{
    if (status != RLOCK_OK) {
        chain_failed++;
        chains_out--;
        return;
    }
    pairs_done++;
    if (stopping || rlock_async_lock(m, 0, chain_locked, arg) != RLOCK_OK)
        chains_out--;
}

static void chain_locked(rlock_async_mutex *m, int status, uint64_t token,
                         void *arg)
{
    (void)token;
    if (status != RLOCK_OK ||
        rlock_async_unlock(m, chain_unlocked, arg) != RLOCK_OK) {
        if (chain_failed++ == 0)
            fprintf(stderr, "rlock-bench: async: chain: %s\n",
                    rlock_async_errmsg(m));
        chains_out--;
    }
}

static void floor_set(redisAsyncContext *ac, void *reply, void *arg);

static void floor_released(redisAsyncContext *ac, void *reply, void *arg)
{
    redisReply *r = reply;
    chain *ch = arg;

    if (!r || r->type != REDIS_REPLY_INTEGER || r->integer != 1) {
        chain_failed++;
        chains_out--;
        return;
    }
    pairs_done++;
    if (stopping ||
        redisAsyncCommand(ac, floor_set, ch, "SET %s %s NX PX 30000", ch->key,
                          ch->token) != REDIS_OK)
        chains_out--;
}

static void floor_set(redisAsyncContext *ac, void *reply, void *arg)
{
    redisReply *r = reply;
    chain *ch = arg;

    if (!r || r->type != REDIS_REPLY_STATUS ||
        redisAsyncCommand(ac, floor_released, ch, "EVALSHA %s 1 %s %s",
                          floor_release_sha(), ch->key,
                          ch->token) != REDIS_OK) {
        if (chain_failed++ == 0)
            fprintf(stderr, "rlock-bench: async: floor chain failed\n");
        chains_out--;
    }
}

/* The sides of a round. */
enum { SIDE_RLOCK, SIDE_FLOOR, SIDE_LEAN, SIDES };

/* One timed round of C chains on one side: pairs per second, or < 0. */
static double round_of(int side, int c, chain *ch, redisAsyncContext *fac,
                       double seconds)
{
    double t0;
    int i;

    for (i = 0; side != SIDE_FLOOR && i < c; i++)
        if (rlock_async_mutex_tokens(
                ch[i].m, side == SIDE_LEAN
                             ? RLOCK_ASYNC_TOKENS_ON_DEMAND
                             : RLOCK_ASYNC_TOKENS_AT_ONCE) != RLOCK_OK)
            return -1;
    stopping = 0;
    pairs_done = chain_failed = 0;
    chains_out = c;
    t0 = bench_now();
    for (i = 0; i < c; i++) {
        int ok =
            side != SIDE_FLOOR
                ? rlock_async_lock(ch[i].m, 0, chain_locked, &ch[i]) == RLOCK_OK
                : redisAsyncCommand(fac, floor_set, &ch[i],
                                    "SET %s %s NX PX 30000", ch[i].key,
                                    ch[i].token) == REDIS_OK;
        if (!ok)
            chains_out--;
    }
    while (bench_now() - t0 < seconds && chains_out == c)
        event_base_loop(base, EVLOOP_ONCE);
    stopping = 1;
    {
        double took = bench_now() - t0;
        long done = pairs_done;
        /* The chains end their pair in flight. */
        while (chains_out > 0 && bench_now() - t0 < seconds + 30)
            event_base_loop(base, EVLOOP_ONCE);
        if (chain_failed || chains_out > 0)
            return -1;
        return (double)done / took;
    }
}

static void floor_connected(const redisAsyncContext *ac, int status)
{
    (void)ac;
    if (status != REDIS_OK)
        fprintf(stderr, "rlock-bench: async: floor connection failed\n");
}

static redisAsyncContext *floor_async(const char *url)
{
    char host[256], path[256];
    int port;
    redisAsyncContext *ac = NULL;

    switch (floor_where(url, host, &port, path)) {
    case FLOOR_UNIX:
        ac = redisAsyncConnectUnix(path);
        break;
    case FLOOR_TCP:
        ac = redisAsyncConnect(host, port);
        break;
    }
    if (!ac || ac->err) {
        fprintf(stderr, "rlock-bench: async: floor: cannot connect to %s\n",
                url);
        return NULL;
    }
    redisLibeventAttach(ac, base);
    redisAsyncSetConnectCallback(ac, floor_connected);
    return ac;
}

static int run_chains(bench *b)
{
    static const int cs[] = {1, 16, 256};
    double seconds = b->seconds / 2;
    redisAsyncContext *fac;
    rlock_async *a;
    chain *ch = calloc(256, sizeof *ch);
    int k, i, round, err, rc = 0;

    if (!ch || !(a = rlock_async_open(b->url, NULL, &err))) {
        free(ch);
        return 1;
    }
    rlock_libevent_attach(a, base);
    if (!(fac = floor_async(b->url))) {
        rlock_async_close(a);
        free(ch);
        return 1;
    }
    for (i = 0; i < 256; i++) {
        snprintf(ch[i].key, sizeof ch[i].key, "bench:async:floor:%d", i);
        snprintf(ch[i].token, sizeof ch[i].token, "t%d-%ld", i,
                 (long)bench_now());
        {
            char name[64];
            snprintf(name, sizeof name, "bench:async:chain:%d", i);
            if (!(ch[i].m = rlock_async_mutex_new(a, name, NULL, &err)))
                rc = 1;
        }
    }
    /* Warm up all: connections opened, scripts loaded. */
    for (k = 0; !rc && k < SIDES; k++)
        if (round_of(k, 256, ch, fac, 0.2) < 0)
            rc = 1;
    for (k = 0; !rc && k < 3; k++) {
        int c = cs[k];
        double sum[SIDES] = {0, 0, 0};
        for (round = 0; !rc && round < SIDES * ROUNDS; round++) {
            double v = round_of(round % SIDES, c, ch, fac, seconds / ROUNDS);
            if (v < 0)
                rc = 1;
            sum[round % SIDES] += v;
        }
        if (rc)
            break;
        fprintf(b->out,
                "async chains C=%-3d rlock %8.0f pairs/s (tokens on demand "
                "%8.0f), hiredis async floor %8.0f pairs/s: %.2fx (%.2fx)\n",
                c, sum[SIDE_RLOCK] / ROUNDS, sum[SIDE_LEAN] / ROUNDS,
                sum[SIDE_FLOOR] / ROUNDS, sum[SIDE_RLOCK] / sum[SIDE_FLOOR],
                sum[SIDE_LEAN] / sum[SIDE_FLOOR]);
        {
            char key[64];
            snprintf(key, sizeof key, "chains_%d_rlock_pairs_per_s", c);
            report_num(b, key, sum[SIDE_RLOCK] / ROUNDS);
            snprintf(key, sizeof key, "chains_%d_lean_pairs_per_s", c);
            report_num(b, key, sum[SIDE_LEAN] / ROUNDS);
            snprintf(key, sizeof key, "chains_%d_floor_pairs_per_s", c);
            report_num(b, key, sum[SIDE_FLOOR] / ROUNDS);
            snprintf(key, sizeof key, "chains_%d_ratio", c);
            report_num(b, key, sum[SIDE_RLOCK] / sum[SIDE_FLOOR]);
            snprintf(key, sizeof key, "chains_%d_lean_ratio", c);
            report_num(b, key, sum[SIDE_LEAN] / sum[SIDE_FLOOR]);
        }
    }
    if (rc)
        fprintf(stderr, "rlock-bench: async: a chain failed\n");
    redisAsyncFree(fac);
    for (i = 0; i < 256; i++)
        if (ch[i].m)
            rlock_async_mutex_free(ch[i].m);
    rlock_async_close(a);
    free(ch);
    return rc;
}

int scenario_async(bench *b)
{
    redisContext *raw = floor_connect(b->url);
    int rc = 1;

    if (!raw || !(base = event_base_new())) {
        if (raw)
            redisFree(raw);
        return 1;
    }
    report_open(b, "async");
    rc = run_holds(b);
    rc |= run_waiters(b, raw);
    rc |= run_chains(b);
    report_close(b);
    event_base_free(base);
    base = NULL;
    redisFree(raw);
    return rc;
}

#endif
