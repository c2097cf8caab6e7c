/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Time, CPU time and quantiles for rlock-bench.
 */
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

#include "bench.h"

double bench_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

double bench_cpu_usec(void)
{
    struct rusage u;

    getrusage(RUSAGE_SELF, &u);
    return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e6 +
           (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

double bench_quantile(double *v, size_t n, double q)
{
    size_t i;

    if (n == 0)
        return 0;
    qsort(v, n, sizeof *v, by_value);
    i = (size_t)(q * (double)(n - 1) + 0.5);
    return v[i < n ? i : n - 1];
}
