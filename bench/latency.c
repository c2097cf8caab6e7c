/*
 * Uncontended acquire + release, next to two raw Redis round trips.
 *
 *   bench_latency URL [ROUNDS]
 *
 * One client, one thread, one lock name; each round is lock then unlock.
 * The baseline is two PINGs on a plain hiredis connection to the same
 * server: the least any lock needing one round trip to acquire and one to
 * release can cost.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hiredis/hiredis.h>
#include <rlock/rlock.h>

#include "raw.h"

static double now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void report(const char *what, double *v, int n)
{
    double sum = 0;
    int i;

    qsort(v, (size_t)n, sizeof *v, cmp);
    for (i = 0; i < n; i++)
        sum += v[i];
    printf("%-28s mean %7.1f us  median %7.1f us  p99 %7.1f us\n", what,
           sum / n, v[n / 2], v[n * 99 / 100]);
}

int main(int argc, char **argv)
{
    const char *url = argc > 1 ? argv[1] : "redis://127.0.0.1:6379";
    int n = argc > 2 ? atoi(argv[2]) : 20000, i, err;
    double *lat = malloc(sizeof *lat * (size_t)n);
    rlock_client *c = rlock_client_open(url, NULL, &err);
    redisContext *raw = raw_connect(url);
    rlock_mutex *m;

    if (!c || !raw || raw->err || !lat) {
        fprintf(stderr, "cannot connect to %s\n", url);
        return 1;
    }
    m = rlock_mutex_new(c, "bench:latency", NULL, &err);
    for (i = 0; i < 1000; i++) { /* warm up */
        rlock_mutex_lock(m);
        rlock_mutex_unlock(m);
    }
    for (i = 0; i < n; i++) {
        double t0 = now_us();
        if (rlock_mutex_lock(m) != RLOCK_OK || rlock_mutex_unlock(m) != RLOCK_OK) {
            fprintf(stderr, "lock failed: %s\n", rlock_client_errmsg(c));
            return 1;
        }
        lat[i] = now_us() - t0;
    }
    report("rlock lock + unlock", lat, n);
    for (i = 0; i < n; i++) {
        double t0 = now_us();
        freeReplyObject(redisCommand(raw, "PING"));
        freeReplyObject(redisCommand(raw, "PING"));
        lat[i] = now_us() - t0;
    }
    report("two raw PING round trips", lat, n);
    rlock_mutex_free(m);
    rlock_client_close(c);
    redisFree(raw);
    free(lat);
    return 0;
}
