/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Scenario "uncontended": acquire + release pairs on one name, one
 * client, against the floor's two round trips on a connection of its own.
 * The two alternate in rounds, so that both see the same moments of a
 * noisy machine; the ratio of their mean pair times is the figure to
 * read (target: rlock <= 1.05 x floor).
 */
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define ROUNDS 10

static unsigned long long events_counted;

/* --count-events: what a program that counts its events pays. */
static void count_event(const rlock_event *ev, void *arg)
{
    (void)ev;
    (void)arg;
    __atomic_fetch_add(&events_counted, 1, __ATOMIC_RELAXED);
}

int scenario_uncontended(bench *b)
{
    int pairs = b->quick ? 200 : 20000, per = pairs / ROUNDS, round, i, err;
    double *lat_r = calloc((size_t)pairs, sizeof *lat_r);
    double *lat_f = calloc((size_t)pairs, sizeof *lat_f);
    double sum_r = 0, sum_f = 0;
    long long us0, us1, us2; /* Redis running the requests, so far */
    long long us_r = 0, us_f = 0; /* Redis running the requests */
    long long cpu0, cpu1, cpu_r = 0, cpu_f = 0; /* Redis's CPU time */
    rlock_client_opts o;
    rlock_client *c;
    rlock_mutex *m;
    /* The floor is one server's: behind Sentinel or over Redlock nodes
     * rlock is measured alone. */
    int single = strncmp(b->url, "redis://", 8) == 0 ||
                 strncmp(b->url, "unix://", 7) == 0;
    redisContext *raw = single ? floor_connect(b->url) : NULL;
    int n = 0, rc = 1;

    rlock_client_opts_init(&o);
    o.sync_replicas = b->sync_replicas;
    c = rlock_client_open(b->url, &o, &err);
    m = c ? rlock_mutex_new(c, "bench:uncontended", NULL, &err) : NULL;
    if (c && b->count_events)
        rlock_client_set_event_cb(c, count_event, NULL);
    if (!m || (single && !raw) || !lat_r || !lat_f) {
        if (!m)
            fprintf(stderr, "rlock-bench: %s: %s\n", rlock_strerror(err),
                    rlock_client_errmsg(c));
        goto out;
    }
    for (i = 0; i < per; i++) { /* warm up both */
        if (rlock_mutex_lock(m) != RLOCK_OK ||
            rlock_mutex_unlock(m) != RLOCK_OK ||
            (raw && floor_pair(raw, "bench:floor", "warm") != 0))
            goto failed;
    }
    for (round = 0; round < ROUNDS; round++) {
        int base = n;
        us0 = 0;
        if (raw)
            server_request_usec(raw, &us0);
        cpu0 = raw ? server_cpu_usec(raw) : 0;
        for (i = 0; i < per; i++) {
            double t0 = bench_now();
            if (rlock_mutex_lock(m) != RLOCK_OK ||
                rlock_mutex_unlock(m) != RLOCK_OK)
                goto failed;
            lat_r[n++] = bench_now() - t0;
        }
        us1 = 0;
        if (raw)
            server_request_usec(raw, &us1);
        cpu1 = raw ? server_cpu_usec(raw) : 0;
        us_r += us1 - us0;
        cpu_r += cpu1 - cpu0;
        for (i = 0; i < per && raw; i++) {
            double t0 = bench_now();
            if (floor_pair(raw, "bench:floor", "token") != 0)
                goto failed;
            lat_f[base + i] = bench_now() - t0;
        }
        if (raw) {
            server_request_usec(raw, &us2);
            us_f += us2 - us1;
            cpu_f += server_cpu_usec(raw) - cpu1;
        }
    }
    for (i = 0; i < n; i++) {
        sum_r += lat_r[i];
        sum_f += lat_f[i];
    }
    fprintf(b->out,
            "uncontended: %d acquire+release pairs, one client, one name\n", n);
    if (!raw) {
        fprintf(b->out,
                "  %-8s %10.0f pairs/s  p50 %7.1f us  p99 %7.1f us  (no "
                "floor: not a single server)\n",
                "rlock", n / sum_r, bench_quantile(lat_r, (size_t)n, 0.5) * 1e6,
                bench_quantile(lat_r, (size_t)n, 0.99) * 1e6);
        report_open(b, "uncontended");
        report_num(b, "pairs", n);
        report_num(b, "rlock_pairs_per_s", n / sum_r);
        report_num(b, "rlock_p50_us",
                   bench_quantile(lat_r, (size_t)n, 0.5) * 1e6);
        report_num(b, "rlock_p99_us",
                   bench_quantile(lat_r, (size_t)n, 0.99) * 1e6);
        report_close(b);
        rc = 0;
        goto out;
    }
    fprintf(b->out, "  %-8s %10.0f pairs/s  p50 %7.1f us  p99 %7.1f us\n",
            "rlock", n / sum_r, bench_quantile(lat_r, (size_t)n, 0.5) * 1e6,
            bench_quantile(lat_r, (size_t)n, 0.99) * 1e6);
    fprintf(b->out, "  %-8s %10.0f pairs/s  p50 %7.1f us  p99 %7.1f us\n",
            "floor", n / sum_f, bench_quantile(lat_f, (size_t)n, 0.5) * 1e6,
            bench_quantile(lat_f, (size_t)n, 0.99) * 1e6);
    fprintf(b->out,
            "  ratio    %.3f x the floor's time per pair (target <= 1.05)\n",
            sum_r / sum_f);
    /* Where the difference is spent, and what a shared Redis pays: its
     * main thread's CPU for everything a pair needs (reading, running,
     * replying), and the part of it spent running commands. */
    fprintf(b->out,
            "  Redis CPU: rlock %.1f us/pair, floor %.1f us/pair: %.2f x "
            "(target <= 2.5; INFO cpu)\n",
            (double)cpu_r / n, (double)cpu_f / n,
            cpu_f > 0 ? (double)cpu_r / (double)cpu_f : 0.0);
    fprintf(b->out,
            "  of which running the requests: rlock %.1f us/pair, floor "
            "%.1f us/pair: %.2f x (INFO commandstats)\n",
            (double)us_r / n, (double)us_f / n,
            us_f > 0 ? (double)us_r / (double)us_f : 0.0);
    report_open(b, "uncontended");
    report_num(b, "pairs", n);
    report_num(b, "rlock_pairs_per_s", n / sum_r);
    report_num(b, "rlock_p50_us", bench_quantile(lat_r, (size_t)n, 0.5) * 1e6);
    report_num(b, "rlock_p99_us", bench_quantile(lat_r, (size_t)n, 0.99) * 1e6);
    report_num(b, "floor_pairs_per_s", n / sum_f);
    report_num(b, "floor_p50_us", bench_quantile(lat_f, (size_t)n, 0.5) * 1e6);
    report_num(b, "floor_p99_us", bench_quantile(lat_f, (size_t)n, 0.99) * 1e6);
    report_num(b, "ratio", sum_r / sum_f);
    report_num(b, "rlock_redis_us_per_pair", (double)us_r / n);
    report_num(b, "floor_redis_us_per_pair", (double)us_f / n);
    report_num(b, "rlock_redis_cpu_us_per_pair", (double)cpu_r / n);
    report_num(b, "floor_redis_cpu_us_per_pair", (double)cpu_f / n);
    report_num(b, "redis_cpu_ratio",
               cpu_f > 0 ? (double)cpu_r / (double)cpu_f : 0.0);
    report_close(b);
    rc = 0;
    goto out;
failed:
    fprintf(stderr,
            "rlock-bench: uncontended: a lock or the floor failed: "
            "%s\n",
            rlock_client_errmsg(c));
out:
    if (m)
        rlock_mutex_free(m);
    rlock_client_close(c);
    if (raw)
        redisFree(raw);
    free(lat_r);
    free(lat_f);
    return rc;
}
