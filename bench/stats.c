/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Time and quantiles for rlock-bench.
 */
#include <stdlib.h>
#include <time.h>

#include "bench.h"

double bench_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
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
