/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Scenario "events": what an event callback costs on the uncontended
 * acquire + release pair (issue 31: at most 2 %). One client, one name;
 * rounds alternate between no callback and a callback that counts the
 * events (an atomic increment), so that both see the same moments of a
 * noisy machine. The figure to read is the ratio of their mean pair
 * times. The counters (rlock_client_stats) are kept in both.
 */
#include <stdatomic.h>
#include <stdlib.h>

#include "bench.h"

#define ROUNDS 20

static atomic_ullong events_seen;

static void count_event(const rlock_event *ev, void *arg)
{
    (void)ev;
    (void)arg;
    atomic_fetch_add_explicit(&events_seen, 1, memory_order_relaxed);
}

/* per pairs, timed; their total time, or < 0 on a failure. */
static double pairs(rlock_mutex *m, int per, double *lat)
{
    double sum = 0;
    int i;

    for (i = 0; i < per; i++) {
        double t0 = bench_now();
        if (rlock_mutex_lock(m) != RLOCK_OK ||
            rlock_mutex_unlock(m) != RLOCK_OK)
            return -1;
        lat[i] = bench_now() - t0;
        sum += lat[i];
    }
    return sum;
}

int scenario_events(bench *b)
{
    int total = b->quick ? 400 : 40000, per = total / ROUNDS / 2, round, err;
    double *lat_off = calloc((size_t)total, sizeof *lat_off);
    double *lat_on = calloc((size_t)total, sizeof *lat_on);
    double sum_off = 0, sum_on = 0, t;
    rlock_client *c = rlock_client_open(b->url, NULL, &err);
    rlock_mutex *m = c ? rlock_mutex_new(c, "bench:events", NULL, &err) : NULL;
    int n_off = 0, n_on = 0, rc = 1;

    if (!m || !lat_off || !lat_on) {
        fprintf(stderr, "rlock-bench: events: %s: %s\n", rlock_strerror(err),
                rlock_client_errmsg(c));
        goto out;
    }
    if (pairs(m, per, lat_off) < 0) /* warm up */
        goto failed;
    atomic_store(&events_seen, 0);
    for (round = 0; round < ROUNDS; round++) {
        /* Which goes first alternates too. */
        int on_first = round % 2;
        int k;
        for (k = 0; k < 2; k++) {
            int on = k == 0 ? on_first : !on_first;
            rlock_client_set_event_cb(c, on ? count_event : NULL, NULL);
            t = pairs(m, per, on ? lat_on + n_on : lat_off + n_off);
            if (t < 0)
                goto failed;
            if (on) {
                sum_on += t;
                n_on += per;
            } else {
                sum_off += t;
                n_off += per;
            }
        }
    }
    rlock_client_set_event_cb(c, NULL, NULL);
    fprintf(b->out,
            "events: %d acquire+release pairs without a callback, %d with "
            "one that counts (%llu events)\n",
            n_off, n_on, (unsigned long long)atomic_load(&events_seen));
    fprintf(b->out, "  %-8s %10.0f pairs/s  p50 %7.1f us  p99 %7.1f us\n",
            "none", n_off / sum_off,
            bench_quantile(lat_off, (size_t)n_off, 0.5) * 1e6,
            bench_quantile(lat_off, (size_t)n_off, 0.99) * 1e6);
    fprintf(b->out, "  %-8s %10.0f pairs/s  p50 %7.1f us  p99 %7.1f us\n",
            "counting", n_on / sum_on,
            bench_quantile(lat_on, (size_t)n_on, 0.5) * 1e6,
            bench_quantile(lat_on, (size_t)n_on, 0.99) * 1e6);
    fprintf(b->out,
            "  ratio    %.4f x the time per pair without a callback "
            "(target <= 1.02)\n",
            (sum_on / n_on) / (sum_off / n_off));
    report_open(b, "events");
    report_num(b, "pairs_each", n_off);
    report_num(b, "events_counted", (double)atomic_load(&events_seen));
    report_num(b, "none_pairs_per_s", n_off / sum_off);
    report_num(b, "counting_pairs_per_s", n_on / sum_on);
    report_num(b, "none_p50_us",
               bench_quantile(lat_off, (size_t)n_off, 0.5) * 1e6);
    report_num(b, "counting_p50_us",
               bench_quantile(lat_on, (size_t)n_on, 0.5) * 1e6);
    report_num(b, "ratio", (sum_on / n_on) / (sum_off / n_off));
    report_close(b);
    rc = 0;
    goto out;
failed:
    fprintf(stderr, "rlock-bench: events: a lock failed: %s\n",
            rlock_client_errmsg(c));
out:
    if (m)
        rlock_mutex_free(m);
    rlock_client_close(c);
    free(lat_off);
    free(lat_on);
    return rc;
}
