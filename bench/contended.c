/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Scenario "contended": W processes (1, 2, 4, 8, 16) loop lock -> work ->
 * unlock on one name for a fixed time, with 0 and 1 ms of work. Reported:
 * acquisitions per second (and against W = 1), the wait from the lock
 * call to the lock held (p50, p99, max), per-worker minimum and maximum
 * acquisitions, and, in a separate run watched by MONITOR, the commands
 * clients send per acquisition (lines of commands run inside scripts are
 * marked "lua" and not counted; INFO's totals would count them).
 * Targets at W = 8, 1 ms: max wait <= 10 ms, min/max >= 0.9, <= 2.05
 * commands, throughput >= 0.97 x W = 1.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

#define MAX_W 16
#define MAX_WAITS 100000

/* Shared with the worker processes. */
struct board {
    int go;
    long count[MAX_W];
    int nwaits[MAX_W];
    float waits[MAX_W][MAX_WAITS]; /* ms */
};

static int worker(const char *url, struct board *sh, int id, double seconds,
                  int work_us)
{
    int err;
    rlock_client *c = rlock_client_open(url, NULL, &err);
    rlock_mutex *m =
        c ? rlock_mutex_new(c, "bench:contended", NULL, &err) : NULL;
    double end;

    if (!m) {
        fprintf(stderr, "rlock-bench: worker %d: %s\n", id,
                rlock_strerror(err));
        return 1;
    }
    while (!__atomic_load_n(&sh->go, __ATOMIC_SEQ_CST))
        usleep(1000);
    end = bench_now() + seconds;
    while (bench_now() < end) {
        double t0 = bench_now(), t1;
        if (rlock_mutex_lock(m) != RLOCK_OK)
            return 1;
        t1 = bench_now();
        if (sh->nwaits[id] < MAX_WAITS)
            sh->waits[id][sh->nwaits[id]++] = (float)((t1 - t0) * 1000);
        if (work_us > 0)
            usleep((useconds_t)work_us);
        if (rlock_mutex_unlock(m) != RLOCK_OK)
            return 1;
        sh->count[id]++;
    }
    rlock_mutex_free(m);
    rlock_client_close(c);
    return 0;
}

/* Counts MONITOR lines of client commands between two ECHO markers. */
struct monitor {
    const char *url;
    long commands;
    int ready;
};

static void *monitor_main(void *p)
{
    struct monitor *mo = p;
    redisContext *ctx = floor_connect(mo->url);
    redisReply *r;
    int counting = 0;

    if (!ctx) {
        __atomic_store_n(&mo->ready, -1, __ATOMIC_SEQ_CST);
        return NULL;
    }
    freeReplyObject(redisCommand(ctx, "MONITOR"));
    __atomic_store_n(&mo->ready, 1, __ATOMIC_SEQ_CST);
    while (redisGetReply(ctx, (void **)&r) == REDIS_OK && r) {
        const char *line = r->str ? r->str : "";
        if (strstr(line, "\"bench-start\"")) {
            counting = 1;
        } else if (strstr(line, "\"bench-end\"")) {
            freeReplyObject(r);
            break;
        } else if (counting && !strstr(line, " lua] ")) {
            mo->commands++;
        }
        freeReplyObject(r);
    }
    redisFree(ctx);
    return NULL;
}

struct result {
    double per_s, p50, p99, max;
    long total, min_w, max_w, commands;
};

/* DIR/waits-w<W>-work<US>.dat: each wait (ms, sorted) and the share of
 * waits up to it, for bench/plot.sh. */
static void write_waits(const bench *b, int workers, int work_us,
                        const double *sorted, long n)
{
    char path[512];
    FILE *f;
    long i;

    snprintf(path, sizeof path, "%s/waits-w%d-work%d.dat", b->plot_dir, workers,
             work_us);
    if (!(f = fopen(path, "w"))) {
        perror(path);
        return;
    }
    for (i = 0; i < n; i++)
        fprintf(f, "%.4f %.6f\n", sorted[i], (double)(i + 1) / (double)n);
    fclose(f);
}

/* One run; with monitor, only the command count is of interest. */
static int run(bench *b, int workers, int work_us, int monitor,
               struct result *res)
{
    struct board *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE,
                            MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    struct monitor mo = {b->url, 0, 0};
    redisContext *ctl = floor_connect(b->url);
    double seconds = monitor ? b->seconds / 2 : b->seconds, *all;
    pthread_t mt;
    pid_t pids[MAX_W];
    long n = 0;
    int i, j, failed = 0;

    if (sh == MAP_FAILED || !ctl)
        return -1;
    memset(sh, 0, sizeof *sh);
    memset(res, 0, sizeof *res);
    fflush(NULL);
    for (i = 0; i < workers; i++) {
        pids[i] = fork();
        if (pids[i] == 0)
            _exit(worker(b->url, sh, i, seconds, work_us));
    }
    if (monitor) {
        pthread_create(&mt, NULL, monitor_main, &mo);
        while (!__atomic_load_n(&mo.ready, __ATOMIC_SEQ_CST))
            usleep(1000);
    }
    usleep(300 * 1000); /* workers connected, waiting for go */
    freeReplyObject(redisCommand(ctl, "ECHO bench-start"));
    __atomic_store_n(&sh->go, 1, __ATOMIC_SEQ_CST);
    for (i = 0; i < workers; i++) {
        int st;
        waitpid(pids[i], &st, 0);
        failed |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    }
    freeReplyObject(redisCommand(ctl, "ECHO bench-end"));
    if (monitor)
        pthread_join(mt, NULL);
    redisFree(ctl);

    res->min_w = -1;
    for (i = 0; i < workers; i++) {
        res->total += sh->count[i];
        if (res->min_w < 0 || sh->count[i] < res->min_w)
            res->min_w = sh->count[i];
        if (sh->count[i] > res->max_w)
            res->max_w = sh->count[i];
        n += sh->nwaits[i];
    }
    all = malloc(sizeof *all * (size_t)(n ? n : 1));
    n = 0;
    for (i = 0; all && i < workers; i++)
        for (j = 0; j < sh->nwaits[i]; j++)
            all[n++] = sh->waits[i][j];
    res->p50 = all ? bench_quantile(all, (size_t)n, 0.5) : 0;
    res->p99 = all ? bench_quantile(all, (size_t)n, 0.99) : 0;
    res->max = all && n ? all[n - 1] : 0; /* sorted by bench_quantile */
    if (all && n && !monitor && b->plot_dir)
        write_waits(b, workers, work_us, all, n);
    res->per_s = (double)res->total / seconds;
    res->commands = mo.commands;
    free(all);
    munmap(sh, sizeof *sh);
    return failed || mo.ready < 0 ? -1 : 0;
}

int scenario_contended(bench *b)
{
    static const int ws[] = {1, 2, 4, 8, 16};
    static const int works[] = {0, 1000};
    size_t wi, ki;

    fprintf(b->out,
            "contended: W processes, one name, lock -> work -> "
            "unlock for %.1f s; commands counted in a separate "
            "run with MONITOR\n",
            b->seconds);
    for (ki = 0; ki < sizeof works / sizeof works[0]; ki++) {
        double alone = 0;
        for (wi = 0; wi < sizeof ws / sizeof ws[0]; wi++) {
            struct result r, mr;
            int w = ws[wi];
            if (run(b, w, works[ki], 0, &r) != 0 ||
                run(b, w, works[ki], 1, &mr) != 0) {
                fprintf(stderr, "rlock-bench: contended: a worker failed\n");
                return 1;
            }
            if (w == 1)
                alone = r.per_s;
            fprintf(b->out,
                    "  work %4d us  W=%-2d %7.0f acq/s (%.3f x W=1)  wait "
                    "p50 %6.2f p99 %6.2f max %6.2f ms  min/max %ld/%ld "
                    "(%.3f)  %.2f commands/acq\n",
                    works[ki], w, r.per_s, r.per_s / alone, r.p50, r.p99, r.max,
                    r.min_w, r.max_w,
                    r.max_w ? (double)r.min_w / (double)r.max_w : 0,
                    mr.total ? (double)mr.commands / (double)mr.total : 0);
            report_open(b, "contended");
            report_num(b, "workers", w);
            report_num(b, "work_us", works[ki]);
            report_num(b, "acquisitions_per_s", r.per_s);
            report_num(b, "vs_one_worker", r.per_s / alone);
            report_num(b, "wait_p50_ms", r.p50);
            report_num(b, "wait_p99_ms", r.p99);
            report_num(b, "wait_max_ms", r.max);
            report_num(b, "per_worker_min", (double)r.min_w);
            report_num(b, "per_worker_max", (double)r.max_w);
            report_num(b, "commands_per_acquisition",
                       mr.total ? (double)mr.commands / (double)mr.total : 0);
            report_close(b);
        }
    }
    return 0;
}
