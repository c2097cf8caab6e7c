/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * rlock-bench: measures rlock beside the Redis floor, in the same run, on
 * the same server (docs/performance.md).
 *
 *   rlock-bench [--redis URL] [--seconds S] [--quick] [--json] [--plot DIR]
 *               [--sync-replicas N] [--count-events] (the uncontended
 *               scenario's client: replicas to wait for; an event
 *               callback that counts, for a whole-process comparison)
 *               [--pin] [--holds N] (the async scenario's holds,
 *               default 100,000) [SCENARIO...]
 *
 * Without --redis it starts a private redis-server on a unix socket and
 * stops it at the end. --pin (private server only) gives that server the
 * first CPU the bench may use and the bench (its threads and worker
 * processes) the others, so that Redis has a core of its own: on a
 * machine with few cores this tells Redis's own limit from the client's
 * CPU competing with it. Scenarios: uncontended, threads, contended, scale,
 * waiters, interop, events, syscalls, redlock, async (default: all; redlock
 * starts five redis-servers of its own on loopback TCP). --syscall-run SIDE
 * PAIRS is the syscalls scenario's own child, run under strace.
 * Readable tables go to stdout; with --json, one JSON document goes to
 * stdout and the tables to stderr. --plot DIR writes the contended
 * scenario's waits there, for bench/plot.sh. Exits 0, 1 if a scenario failed,
 * 64 on bad arguments, 69 if no Redis could be reached or started.
 */
#include <errno.h>
#include <sched.h>
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
    {"events", scenario_events},           {"syscalls", scenario_syscalls},
    {"redlock", scenario_redlock},         {"async", scenario_async},
};
#define NSCEN (sizeof scenarios / sizeof scenarios[0])

static int usage(FILE *f, int code)
{
    size_t i;

    fprintf(f, "usage: rlock-bench [--redis URL] [--seconds S] [--quick] "
               "[--json] [--plot DIR] [--sync-replicas N] [--count-events] "
               "[--pin] [--holds N] "
               "[SCENARIO...]\n"
               "scenarios:");
    for (i = 0; i < NSCEN; i++)
        fprintf(f, " %s", scenarios[i].name);
    fprintf(f, " (default: all)\n");
    return code;
}

/* "0,2,3": the CPUs in *set. */
static void cpu_list(const cpu_set_t *set, char *buf, size_t len)
{
    size_t used = 0;
    int cpu;

    buf[0] = '\0';
    for (cpu = 0; cpu < CPU_SETSIZE && used + 12 < len; cpu++)
        if (CPU_ISSET(cpu, set))
            used += (size_t)snprintf(buf + used, len - used, "%s%d",
                                     used ? "," : "", cpu);
}

/*
 * Redis on the first CPU this process may run on, this process on the
 * rest (threads and forked workers inherit it). What the kernel then
 * reports for each is printed, not what was asked. 0, or -1 after a
 * message (fewer than two CPUs, or the kernel refused).
 */
static int pin(pid_t server, FILE *out)
{
    cpu_set_t all, redis, rest;
    char a[256], b[256];
    int cpu, first = -1;

    if (sched_getaffinity(0, sizeof all, &all) != 0) {
        perror("rlock-bench: sched_getaffinity");
        return -1;
    }
    CPU_ZERO(&redis);
    CPU_ZERO(&rest);
    for (cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, &all))
            continue;
        if (first < 0) {
            first = cpu;
            CPU_SET(cpu, &redis);
        } else {
            CPU_SET(cpu, &rest);
        }
    }
    if (CPU_COUNT(&rest) == 0) {
        fprintf(stderr, "rlock-bench: --pin needs two CPUs or more\n");
        return -1;
    }
    if (sched_setaffinity(server, sizeof redis, &redis) != 0 ||
        sched_setaffinity(0, sizeof rest, &rest) != 0 ||
        sched_getaffinity(server, sizeof redis, &redis) != 0 ||
        sched_getaffinity(0, sizeof rest, &rest) != 0) {
        perror("rlock-bench: --pin");
        return -1;
    }
    cpu_list(&redis, a, sizeof a);
    cpu_list(&rest, b, sizeof b);
    fprintf(out, "pinned: redis-server on CPU %s, the bench on CPU %s\n", a,
            b);
    return 0;
}

int main(int argc, char **argv)
{
    bench b;
    int want[NSCEN] = {0}, any = 0, i, rc = 0, pinned = 0;
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
        if (strcmp(a, "--syscall-run") == 0 && i + 2 < argc && b.url)
            return syscall_run(b.url, argv[i + 1], atoi(argv[i + 2]));
        if (strcmp(a, "--quick") == 0) {
            b.quick = 1;
        } else if (strcmp(a, "--pin") == 0) {
            pinned = 1;
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
        } else if (strcmp(a, "--holds") == 0 && i + 1 < argc) {
            char *end;
            errno = 0;
            b.holds = strtol(argv[++i], &end, 10);
            if (errno || *end || !argv[i][0] || b.holds < 1 ||
                b.holds > 10000000) {
                fprintf(stderr, "rlock-bench: --holds takes 1 to 10000000\n");
                return 64;
            }
        } else if (strcmp(a, "--count-events") == 0) {
            b.count_events = 1;
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
    if (pinned && b.url) {
        fprintf(stderr, "rlock-bench: --pin works on the private server "
                        "only (without --redis)\n");
        return 64;
    }
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
    if (pinned && pin(server, b.out) != 0) {
        private_server_stop(server, dir);
        rmdir(dir);
        return 71;
    }
    if (b.json)
        fprintf(b.json,
                "{\"rlock_version\": \"%s\", \"quick\": %s, "
                "\"pinned\": %s, \"results\": [",
                rlock_version(), b.quick ? "true" : "false",
                pinned ? "true" : "false");
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
