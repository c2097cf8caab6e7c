/*
 * Contention on one lock name, as issue 3 measures it.
 *
 *   bench_contention URL [WORKERS=8] [SECONDS=10] [WORK_US=1000]
 *
 * WORKERS processes each loop: lock, WORK_US of work, unlock, for SECONDS.
 * Reported: acquisitions per second; the longest and 99th-percentile wait
 * (lock call to lock held); per-worker minimum and maximum acquisitions;
 * commands sent by clients per acquisition, counted with MONITOR (lines of
 * commands run inside scripts are marked "lua" and not counted; neither
 * is the benchmark's own bookkeeping); and throughput relative to one
 * worker running the same loop alone.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>
#include <rlock/rlock.h>

#include "raw.h"

#define MAX_WAITS 200000

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Shared with the workers through an anonymous shared mapping. */
struct shared {
    volatile int go;
    long count[64];
    int nwaits[64];
    float waits[64][MAX_WAITS]; /* ms */
};

static int worker(const char *url, struct shared *sh, int id, double seconds,
                  int work_us)
{
    int err;
    rlock_client *c = rlock_client_open(url, NULL, &err);
    rlock_mutex *m = c ? rlock_mutex_new(c, "bench:contention", NULL, &err)
                       : NULL;
    double end;

    if (!m) {
        fprintf(stderr, "worker %d: %s\n", id, rlock_strerror(err));
        return 1;
    }
    while (!sh->go)
        usleep(1000);
    end = now_s() + seconds;
    while (now_s() < end) {
        double t0 = now_s(), t1;
        if (rlock_mutex_lock(m) != RLOCK_OK) {
            fprintf(stderr, "lock: %s\n", rlock_client_errmsg(c));
            return 1;
        }
        t1 = now_s();
        if (sh->nwaits[id] < MAX_WAITS)
            sh->waits[id][sh->nwaits[id]++] = (float)((t1 - t0) * 1000);
        usleep((useconds_t)work_us);
        if (rlock_mutex_unlock(m) != RLOCK_OK) {
            fprintf(stderr, "unlock: %s\n", rlock_client_errmsg(c));
            return 1;
        }
        sh->count[id]++;
    }
    rlock_mutex_free(m);
    rlock_client_close(c);
    return 0;
}

/* Counts MONITOR lines of client commands between the two ECHO markers. */
struct monitor {
    const char *url;
    long commands;
    volatile int ready;
};

static void *monitor_main(void *p)
{
    struct monitor *mo = p;
    redisContext *ctx = raw_connect(mo->url);
    redisReply *r;
    int counting = 0;

    r = redisCommand(ctx, "MONITOR");
    freeReplyObject(r);
    mo->ready = 1;
    while (redisGetReply(ctx, (void **)&r) == REDIS_OK && r) {
        const char *line = r->str ? r->str : "";
        if (strstr(line, "\"bench-start\""))
            counting = 1;
        else if (strstr(line, "\"bench-end\"")) {
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

static int cmpf(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

struct result {
    double per_s;
    long total, min, max, commands;
    double max_wait, p99_wait;
};

static struct result run(const char *url, int workers, double seconds,
                         int work_us)
{
    struct shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE,
                             MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    struct monitor mo = {url, 0, 0};
    struct result res = {0};
    redisContext *ctl = raw_connect(url);
    pthread_t mt;
    pid_t pids[64];
    float *all;
    long n = 0;
    int i, j;

    memset(sh, 0, sizeof *sh);
    for (i = 0; i < workers; i++) {
        pids[i] = fork();
        if (pids[i] == 0)
            _exit(worker(url, sh, i, seconds, work_us));
    }
    pthread_create(&mt, NULL, monitor_main, &mo);
    while (!mo.ready)
        usleep(1000);
    usleep(300 * 1000); /* workers connected and waiting for go */
    freeReplyObject(redisCommand(ctl, "ECHO bench-start"));
    sh->go = 1;
    for (i = 0; i < workers; i++)
        waitpid(pids[i], NULL, 0);
    freeReplyObject(redisCommand(ctl, "ECHO bench-end"));
    pthread_join(mt, NULL);
    redisFree(ctl);

    res.min = -1;
    for (i = 0; i < workers; i++) {
        res.total += sh->count[i];
        if (res.min < 0 || sh->count[i] < res.min)
            res.min = sh->count[i];
        if (sh->count[i] > res.max)
            res.max = sh->count[i];
        n += sh->nwaits[i];
    }
    all = malloc(sizeof *all * (size_t)(n ? n : 1));
    n = 0;
    for (i = 0; i < workers; i++)
        for (j = 0; j < sh->nwaits[i]; j++)
            all[n++] = sh->waits[i][j];
    qsort(all, (size_t)n, sizeof *all, cmpf);
    res.max_wait = n ? all[n - 1] : 0;
    res.p99_wait = n ? all[n * 99 / 100] : 0;
    res.per_s = (double)res.total / seconds;
    /* Workers' connections, AUTH, SCRIPT LOAD and SUBSCRIBE at start-up
     * happen before the start marker; what is counted is the loop. */
    res.commands = mo.commands;
    free(all);
    munmap(sh, sizeof *sh);
    return res;
}

int main(int argc, char **argv)
{
    const char *url = argc > 1 ? argv[1] : "redis://127.0.0.1:6379";
    int workers = argc > 2 ? atoi(argv[2]) : 8;
    double seconds = argc > 3 ? atof(argv[3]) : 10;
    int work_us = argc > 4 ? atoi(argv[4]) : 1000;
    struct result alone, many;

    if (workers < 1 || workers > 64 || seconds <= 0) {
        fprintf(stderr, "usage: %s URL [WORKERS<=64] [SECONDS] [WORK_US]\n",
                argv[0]);
        return 64;
    }
    alone = run(url, 1, seconds, work_us);
    many = run(url, workers, seconds, work_us);
    printf("one worker alone:      %.0f acquisitions/s, %.2f client commands "
           "per acquisition\n",
           alone.per_s, (double)alone.commands / (double)alone.total);
    printf("%d workers, %.0f s, %d us of work under the lock:\n", workers,
           seconds, work_us);
    printf("  throughput           %.0f acquisitions/s (%.3f x one worker "
           "alone)\n",
           many.per_s, many.per_s / alone.per_s);
    printf("  wait                 max %.1f ms, p99 %.1f ms\n", many.max_wait,
           many.p99_wait);
    printf("  per worker           min %ld, max %ld acquisitions "
           "(min/max %.3f)\n",
           many.min, many.max, (double)many.min / (double)many.max);
    printf("  client commands      %.2f per acquisition (%ld for %ld)\n",
           (double)many.commands / (double)many.total, many.commands,
           many.total);
    return 0;
}
