/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Scenario "threads": T threads of one client, each on a name of its own,
 * against the floor with T connections (T = 1, 2, 4, 8). Aggregate pairs
 * per second; runs of the two alternate (target: rlock >= 0.9 x floor).
 */
#include <pthread.h>
#include <stdlib.h>

#include "bench.h"

#define MAX_T 8

struct runner {
    rlock_mutex *m;    /* rlock run */
    redisContext *raw; /* floor run */
    char key[32];
    double until;
    long pairs;
    int failed;
};

static void *rlock_runner(void *p)
{
    struct runner *r = p;

    while (bench_now() < r->until) {
        if (rlock_mutex_lock(r->m) != RLOCK_OK ||
            rlock_mutex_unlock(r->m) != RLOCK_OK) {
            r->failed = 1;
            break;
        }
        r->pairs++;
    }
    return NULL;
}

static void *floor_runner(void *p)
{
    struct runner *r = p;

    while (bench_now() < r->until) {
        if (floor_pair(r->raw, r->key, "token") != 0) {
            r->failed = 1;
            break;
        }
        r->pairs++;
    }
    return NULL;
}

/* Runs T threads of fn for the bench's time; pairs per second, or -1. */
static double run(bench *b, struct runner *rs, int t, void *(*fn)(void *))
{
    pthread_t th[MAX_T];
    double t0 = bench_now(), until = t0 + b->seconds / 2;
    long total = 0;
    int i, failed = 0;

    for (i = 0; i < t; i++) {
        rs[i].until = until;
        rs[i].pairs = 0;
        pthread_create(&th[i], NULL, fn, &rs[i]);
    }
    for (i = 0; i < t; i++) {
        pthread_join(th[i], NULL);
        total += rs[i].pairs;
        failed |= rs[i].failed;
    }
    return failed ? -1 : (double)total / (bench_now() - t0);
}

int scenario_threads(bench *b)
{
    static const int ts[] = {1, 2, 4, 8};
    struct runner rs[MAX_T];
    size_t k;
    int rc = 0;

    fprintf(b->out,
            "threads: T threads, a name each, one client (T connections) vs "
            "the floor on T connections; %.1f s each\n",
            b->seconds);
    for (k = 0; k < sizeof ts / sizeof ts[0] && rc == 0; k++) {
        int t = ts[k], i, err, round;
        rlock_client_opts o;
        rlock_client *c;
        double r_sum = 0, f_sum = 0;

        rlock_client_opts_init(&o);
        o.max_connections = t;
        c = rlock_client_open(b->url, &o, &err);
        if (!c) {
            fprintf(stderr, "rlock-bench: %s\n", rlock_strerror(err));
            return 1;
        }
        for (i = 0; i < t; i++) {
            char name[32];
            snprintf(name, sizeof name, "bench:threads:%d", i);
            snprintf(rs[i].key, sizeof rs[i].key, "bench:floor:%d", i);
            rs[i].m = rlock_mutex_new(c, name, NULL, &err);
            rs[i].raw = floor_connect(b->url);
            rs[i].failed = 0;
            if (!rs[i].m || !rs[i].raw)
                rc = 1;
        }
        /* Two rounds each, alternating: half the time per run. */
        for (round = 0; round < 2 && rc == 0; round++) {
            double r = run(b, rs, t, rlock_runner);
            double f = run(b, rs, t, floor_runner);
            if (r < 0 || f < 0)
                rc = 1;
            r_sum += r;
            f_sum += f;
        }
        if (rc == 0) {
            fprintf(b->out,
                    "  T=%d  rlock %9.0f pairs/s  floor %9.0f pairs/s  "
                    "ratio %.3f (target >= 0.9)\n",
                    t, r_sum / 2, f_sum / 2, r_sum / f_sum);
            report_open(b, "threads");
            report_num(b, "threads", t);
            report_num(b, "rlock_pairs_per_s", r_sum / 2);
            report_num(b, "floor_pairs_per_s", f_sum / 2);
            report_num(b, "ratio", r_sum / f_sum);
            report_close(b);
        } else {
            fprintf(stderr, "rlock-bench: threads: a lock or the floor "
                            "failed\n");
        }
        for (i = 0; i < t; i++) {
            if (rs[i].m)
                rlock_mutex_free(rs[i].m);
            if (rs[i].raw)
                redisFree(rs[i].raw);
        }
        rlock_client_close(c);
    }
    return rc;
}
