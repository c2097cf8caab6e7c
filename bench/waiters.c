/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Scenario "waiters": P processes of T threads each wait on N names (few
 * names, many waiters). Each thread loops lock -> unlock on its name; the
 * figure is the wake-up latency: from the moment a holder calls unlock to
 * the moment the next holder of that name holds it, which is the release
 * round trip, the hand-over message and the waking of a thread. Also
 * reported: the subscriber connections Redis sees, one per process
 * however many threads wait in it.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

#define PROCS 4
#define THREADS 8
#define NAMES 4
#define MAX_SAMPLES 20000

struct board {
    int go;
    int pubsub_seen;
    /* When each name's holder called unlock, in ns of bench_now(); it is
     * read by the next holder, in another thread or process. */
    int64_t release_ns[NAMES];
    int n[PROCS * THREADS];
    float lat[PROCS * THREADS][MAX_SAMPLES]; /* us */
};

struct waiter {
    struct board *sh;
    rlock_mutex *m;
    int slot, name;
    double until;
    int failed;
};

static void *waiter_main(void *p)
{
    struct waiter *w = p;
    struct board *sh = w->sh;

    while (bench_now() < w->until) {
        int64_t got, rel;
        if (rlock_mutex_lock(w->m) != RLOCK_OK) {
            w->failed = 1;
            return NULL;
        }
        got = (int64_t)(bench_now() * 1e9);
        rel = __atomic_load_n(&sh->release_ns[w->name], __ATOMIC_SEQ_CST);
        /* The first hold of a name measures nothing. */
        if (rel > 0 && sh->n[w->slot] < MAX_SAMPLES)
            sh->lat[w->slot][sh->n[w->slot]++] = (float)(got - rel) / 1e3f;
        __atomic_store_n(&sh->release_ns[w->name], (int64_t)(bench_now() * 1e9),
                         __ATOMIC_SEQ_CST);
        if (rlock_mutex_unlock(w->m) != RLOCK_OK) {
            w->failed = 1;
            return NULL;
        }
    }
    return NULL;
}

static int process_main(const char *url, struct board *sh, int proc,
                        double seconds)
{
    struct waiter ws[THREADS];
    pthread_t th[THREADS];
    rlock_client *c;
    int i, err, failed = 0;

    c = rlock_client_open(url, NULL, &err);
    if (!c)
        return 1;
    while (!__atomic_load_n(&sh->go, __ATOMIC_SEQ_CST))
        usleep(1000);
    for (i = 0; i < THREADS; i++) {
        char name[32];
        ws[i].sh = sh;
        ws[i].slot = proc * THREADS + i;
        ws[i].name = ws[i].slot % NAMES;
        snprintf(name, sizeof name, "bench:waiters:%d", ws[i].name);
        ws[i].m = rlock_mutex_new(c, name, NULL, &err);
        ws[i].until = bench_now() + seconds;
        ws[i].failed = !ws[i].m;
    }
    for (i = 0; i < THREADS; i++)
        pthread_create(&th[i], NULL, waiter_main, &ws[i]);
    for (i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        failed |= ws[i].failed;
        rlock_mutex_free(ws[i].m);
    }
    rlock_client_close(c);
    return failed;
}

static int count_pubsub(redisContext *raw)
{
    redisReply *r = redisCommand(raw, "CLIENT LIST TYPE pubsub");
    int n = 0;
    const char *p;

    if (r && r->type == REDIS_REPLY_STRING)
        for (p = r->str; (p = strstr(p, "id=")) != NULL; p += 3)
            n++;
    if (r)
        freeReplyObject(r);
    return n;
}

int scenario_waiters(bench *b)
{
    struct board *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE,
                            MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    redisContext *raw = floor_connect(b->url);
    pid_t pids[PROCS];
    double *all, t_mid, p50, p99;
    long n = 0;
    int i, j, failed = 0, pubsub = 0;

    if (sh == MAP_FAILED || !raw)
        return 1;
    memset(sh, 0, sizeof *sh);
    fflush(NULL);
    for (i = 0; i < PROCS; i++) {
        pids[i] = fork();
        if (pids[i] == 0)
            _exit(process_main(b->url, sh, i, b->seconds));
    }
    usleep(300 * 1000);
    __atomic_store_n(&sh->go, 1, __ATOMIC_SEQ_CST);
    /* Halfway through, every process waits: count their subscribers. */
    t_mid = bench_now() + b->seconds / 2;
    while (bench_now() < t_mid)
        usleep(10000);
    pubsub = count_pubsub(raw);
    for (i = 0; i < PROCS; i++) {
        int st;
        waitpid(pids[i], &st, 0);
        failed |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    }
    redisFree(raw);
    for (i = 0; i < PROCS * THREADS; i++)
        n += sh->n[i];
    all = malloc(sizeof *all * (size_t)(n ? n : 1));
    n = 0;
    for (i = 0; all && i < PROCS * THREADS; i++)
        for (j = 0; j < sh->n[i]; j++)
            all[n++] = sh->lat[i][j];
    if (failed || !all) {
        fprintf(stderr, "rlock-bench: waiters: a waiter failed\n");
        free(all);
        munmap(sh, sizeof *sh);
        return 1;
    }
    p50 = bench_quantile(all, (size_t)n, 0.5);
    p99 = bench_quantile(all, (size_t)n, 0.99); /* all is sorted now */
    fprintf(b->out,
            "waiters: %d processes x %d threads on %d names for %.1f s\n"
            "  %ld hand-overs  wake-up after release p50 %.0f us  p99 %.0f us"
            "  max %.0f us  subscriber connections %d (one per process)\n",
            PROCS, THREADS, NAMES, b->seconds, n, p50, p99,
            n ? all[n - 1] : 0.0, pubsub);
    report_open(b, "waiters");
    report_num(b, "processes", PROCS);
    report_num(b, "threads_per_process", THREADS);
    report_num(b, "names", NAMES);
    report_num(b, "hand_overs", (double)n);
    report_num(b, "wake_p50_us", p50);
    report_num(b, "wake_p99_us", p99);
    report_num(b, "wake_max_us", n ? all[n - 1] : 0.0);
    report_num(b, "subscriber_connections", pubsub);
    report_close(b);
    free(all);
    munmap(sh, sizeof *sh);
    return 0;
}
