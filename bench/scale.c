/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Scenario "scale": one client holds K locks (1,000, 10,000, 100,000)
 * under the watchdog for a fixed time. Reported: renewal round trips
 * (script calls and, where the server renews natively, pipelines of SET
 * IFEQ, counted by Redis) per tick and per 1,000 locks, commands per
 * second, the client's CPU (all its threads) as a share of one core,
 * Redis's CPU (its main thread) as a share of one core, client memory per
 * held lock (resident set growth), Redis memory per held lock
 * (used_memory growth) and how many holds were lost (on_lost). Targets:
 * <= 1 round trip per 1,000 locks per renewal tick; client CPU <= 2 % of
 * a core at 10,000 locks; none lost. Counting starts one lease after the
 * last lock is taken (steady state).
 */
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "bench.h"

#define LEASE_MS 1500 /* renewed every 500 ms */

static long rss_kb(void)
{
    long pages = 0, rss = 0;
    FILE *f = fopen("/proc/self/statm", "r");

    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &rss) != 2)
            rss = 0;
        fclose(f);
    }
    return rss * (sysconf(_SC_PAGESIZE) / 1024);
}

static double cpu_s(void)
{
    struct rusage ru;

    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

/* Seconds of counting: at least ten ticks, so that a batch cut by the
 * window's ends weighs little (a smoke run: one second). */
static double scale_window(const bench *b)
{
    if (b->quick)
        return 1;
    return b->seconds < 5 ? 5 : b->seconds;
}

/* Holds lost so far (on_lost: their lease ended unrenewed). */
static long lost;

static void count_lost(rlock_mutex *m, void *arg)
{
    (void)m;
    (void)arg;
    __atomic_add_fetch(&lost, 1, __ATOMIC_RELAXED);
}

/* Round trips of renewal: script calls, and on a server with SET IFEQ
 * the pipelines of native renewals, which the server counts only as the
 * SETs they hold. The k holds are renewed together, in pipelines of a
 * thousand (the watchdog's batch): sets / k rounds of ceil(k / 1000)
 * pipelines. No other SET runs while counting. */
static double renewal_trips(long long scripts, long long sets, long k)
{
    return (double)scripts +
           (double)sets / (double)k * (double)((k + 999) / 1000);
}

static int hold_many(bench *b, redisContext *raw, long k)
{
    rlock_mutex_opts mo;
    rlock_client_opts o;
    rlock_client *c;
    rlock_mutex **ms = calloc((size_t)k, sizeof *ms);
    long i, held = 0;
    long long mem0, mem1, calls0, calls1, sets0, sets1, rcpu0, rcpu1;
    long rss0, rss1;
    double window = scale_window(b), t0, c0, wall, cpu;
    int err, rc = 1;

    rlock_client_opts_init(&o);
    o.watchdog_lease_ms = LEASE_MS;
    c = rlock_client_open(b->url, &o, &err);
    if (!c || !ms) {
        fprintf(stderr, "rlock-bench: scale: %s\n", rlock_strerror(err));
        free(ms);
        return 1;
    }
    rlock_mutex_opts_init(&mo);
    mo.on_lost = count_lost;
    __atomic_store_n(&lost, 0, __ATOMIC_RELAXED);
    mem0 = server_info_field(raw, "memory", "used_memory");
    rss0 = rss_kb();
    for (i = 0; i < k; i++) {
        char name[32];
        snprintf(name, sizeof name, "bench:scale:%ld", i);
        ms[i] = rlock_mutex_new(c, name, &mo, &err);
        if (!ms[i] || rlock_mutex_lock(ms[i]) != RLOCK_OK)
            goto out;
        held++;
    }
    mem1 = server_info_field(raw, "memory", "used_memory");
    rss1 = rss_kb();
    /* Held; the watchdog renews them. Holds taken over a second or more
     * start out in many phases; the first renewals bring them into step
     * (due ones go with others that will be due within half a period).
     * Count the steady state, after one lease of that. */
    if (!b->quick)
        usleep(LEASE_MS * 1000);
    calls0 = server_calls(raw, "evalsha");
    sets0 = server_calls(raw, "set");
    rcpu0 = server_cpu_usec(raw);
    c0 = cpu_s();
    t0 = bench_now();
    usleep((useconds_t)(window * 1e6));
    wall = bench_now() - t0;
    cpu = cpu_s() - c0;
    calls1 = server_calls(raw, "evalsha");
    sets1 = server_calls(raw, "set");
    rcpu1 = server_cpu_usec(raw);
    {
        double ticks = wall / (LEASE_MS / 3.0 / 1000.0);
        double trips = renewal_trips(calls1 - calls0, sets1 - sets0, k);
        double rcpu = 100 * (double)(rcpu1 - rcpu0) / 1e6 / wall;
        long gone = __atomic_load_n(&lost, __ATOMIC_RELAXED);
        fprintf(b->out,
                "  K=%-6ld %5.1f round trips/tick (%.2f per 1,000 locks; "
                "target <= 1)  %6.1f commands/s  client CPU %5.2f %%  "
                "Redis CPU %5.1f %%  client %6.0f B/lock  Redis %5.0f "
                "B/lock  lost %ld\n",
                k, trips / ticks, trips / ticks / ((double)k / 1000),
                trips / wall, 100 * cpu / wall, rcpu,
                1024.0 * (double)(rss1 - rss0) / (double)k,
                (double)(mem1 - mem0) / (double)k, gone);
        report_open(b, "scale");
        report_num(b, "locks", (double)k);
        report_num(b, "round_trips_per_tick", trips / ticks);
        report_num(b, "round_trips_per_tick_per_1000_locks",
                   trips / ticks / ((double)k / 1000));
        report_num(b, "commands_per_s", trips / wall);
        report_num(b, "client_cpu_percent", 100 * cpu / wall);
        report_num(b, "redis_cpu_percent", rcpu);
        report_num(b, "lost", (double)gone);
        report_num(b, "client_bytes_per_lock",
                   1024.0 * (double)(rss1 - rss0) / (double)k);
        report_num(b, "redis_bytes_per_lock",
                   (double)(mem1 - mem0) / (double)k);
        report_close(b);
    }
    rc = 0;
out:
    if (rc)
        fprintf(stderr, "rlock-bench: scale: lock %ld failed: %s\n", held,
                rlock_client_errmsg(c));
    for (i = 0; i < held; i++)
        rlock_mutex_unlock(ms[i]);
    for (i = 0; i < k && ms[i]; i++)
        rlock_mutex_free(ms[i]);
    free(ms);
    rlock_client_close(c);
    return rc;
}

int scenario_scale(bench *b)
{
    static const long ks[] = {1000, 10000, 100000};
    static const long quick_ks[] = {100, 1000};
    const long *k = b->quick ? quick_ks : ks;
    size_t i, n = b->quick ? 2 : 3;
    redisContext *raw = floor_connect(b->url);
    int rc = 0;

    if (!raw)
        return 1;
    fprintf(b->out,
            "scale: one client holds K locks under the watchdog "
            "(lease %d ms, a tick every %d ms) for %.1f s\n",
            LEASE_MS, LEASE_MS / 3, scale_window(b));
    for (i = 0; i < n && rc == 0; i++)
        rc = hold_many(b, raw, k[i]);
    redisFree(raw);
    return rc;
}
