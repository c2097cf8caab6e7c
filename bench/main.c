/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * rlock-bench: measures rlock beside the Redis floor, in the same run, on
 * the same server (docs/performance.md).
 *
 *   rlock-bench [--redis URL] [--seconds S] [--quick] [--json] [--plot DIR]
 *               [--sync-replicas N] (the uncontended scenario's client)
 *               [SCENARIO...]
 *
 * Without --redis it starts a private redis-server on a unix socket and
 * stops it at the end. Scenarios: uncontended, threads, contended, scale,
 * waiters, interop (default: all).
 * Readable tables go to stdout; with --json, one JSON document goes to
 * stdout and the tables to stderr. --plot DIR writes the contended
 * scenario's waits there, for bench/plot.sh. Exits 0, 1 if a scenario failed,
 * 64 on bad arguments, 69 if no Redis could be reached or started.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../cli/private_server.h"
#include "bench.h"

static const struct {
    const char *name;
    int (*run)(bench *b);
} scenarios[] = {
    {"uncontended", scenario_uncontended}, {"threads", scenario_threads},
    {"contended", scenario_contended},     {"scale", scenario_scale},
    {"waiters", scenario_waiters},         {"interop", scenario_interop},
};
#define NSCEN (sizeof scenarios / sizeof scenarios[0])

static int usage(FILE *f, int code)
{
    size_t i;

    fprintf(f, "usage: rlock-bench [--redis URL] [--seconds S] [--quick] "
               "[--json] [--plot DIR] [--sync-replicas N] [SCENARIO...]\n"
               "scenarios:");
    for (i = 0; i < NSCEN; i++)
        fprintf(f, " %s", scenarios[i].name);
    fprintf(f, " (default: all)\n");
    return code;
}

int main(int argc, char **argv)
{
    bench b;
    int want[NSCEN] = {0}, any = 0, i, rc = 0;
    char dir[] = "/tmp/rlock-bench-XXXXXX", url[300];
    pid_t server = -1;
    size_t k;

    memset(&b, 0, sizeof b);
    b.seconds = 2;
    b.out = stdout;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)
            return usage(stdout, 0);
        if (strcmp(a, "--version") == 0) {
            printf("rlock-bench %s\n", rlock_version());
            return 0;
        }
        if (strcmp(a, "--quick") == 0) {
            b.quick = 1;
        } else if (strcmp(a, "--plot") == 0 && i + 1 < argc && argv[i + 1][0]) {
            b.plot_dir = argv[++i];
        } else if (strcmp(a, "--json") == 0) {
            b.json = stdout;
            b.out = stderr;
        } else if (strcmp(a, "--redis") == 0 && i + 1 < argc &&
                   argv[i + 1][0]) {
            b.url = argv[++i];
        } else if (strcmp(a, "--sync-replicas") == 0 && i + 1 < argc) {
            char *end;
            long n;
            errno = 0;
            n = strtol(argv[++i], &end, 10);
            if (errno || *end || !argv[i][0] || n < 0 || n > 64) {
                fprintf(stderr, "rlock-bench: --sync-replicas takes 0 to 64\n");
                return 64;
            }
            b.sync_replicas = (int)n;
        } else if (strcmp(a, "--seconds") == 0 && i + 1 < argc) {
            char *end;
            errno = 0;
            b.seconds = strtod(argv[++i], &end);
            if (errno || *end || !(b.seconds >= 0.1 && b.seconds <= 3600)) {
                fprintf(stderr, "rlock-bench: --seconds takes 0.1 to 3600\n");
                return 64;
            }
        } else {
            for (k = 0; k < NSCEN && strcmp(a, scenarios[k].name) != 0; k++)
                ;
            if (k == NSCEN) {
                fprintf(stderr, "rlock-bench: unknown argument '%s'\n", a);
                return usage(stderr, 64);
            }
            want[k] = any = 1;
        }
    }
    if (b.quick)
        b.seconds = 0.2;
    if (!b.url) {
        if (!mkdtemp(dir)) {
            perror("rlock-bench: mkdtemp");
            return 71;
        }
        server = private_server_start(dir, NULL, url, sizeof url);
        if (server < 0) {
            rmdir(dir);
            return 69;
        }
        b.url = url;
    }
    fprintf(b.out, "rlock-bench %s on %s%s\n", rlock_version(), b.url,
            server > 0 ? " (a private redis-server)" : "");
    if (b.json)
        fprintf(b.json,
                "{\"rlock_version\": \"%s\", \"quick\": %s, "
                "\"results\": [",
                rlock_version(), b.quick ? "true" : "false");
    for (k = 0; k < NSCEN; k++)
        if (!any || want[k])
            rc |= scenarios[k].run(&b);
    if (b.json)
        fprintf(b.json, "\n]}\n");
    if (server > 0) {
        private_server_stop(server, dir);
        rmdir(dir);
    }
    return rc ? 1 : 0;
}
