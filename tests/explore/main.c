/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * rlock-explore: runs seeded schedules of owners, faults and checks, and
 * reports what it ran and what it found (explore.h says how).
 *
 *   rlock-explore [--seconds S | --schedules N] [--seed S] [--replay FILE]
 *                 [--found FILE] [--slack-ms N] [--quiet]
 *
 * --seconds S    run schedules for S seconds (default 60); --schedules N:
 *                exactly N
 * --seed S       the first schedule's seed; the i-th is S + i (default: a
 *                seed from the clock, printed, so that a run can be made
 *                again)
 * --replay FILE  run the seeds listed in FILE (one per line, "SEED  # what
 *                it found"), each once, then the others if time is left
 * --found FILE   append each failing seed to FILE, with what it found
 * --slack-ms N   what a busy machine may add to a call's bound and to a
 *                notice's delay (default 1000)
 * --trace FILE   write the whole log of each failing schedule to FILE
 * --server-log FILE  write the server's MONITOR log of every run to FILE
 *                (a debugging aid: MONITOR costs the server)
 * --quiet        no line per schedule, only the failures and the summary
 *
 * Exit status: 0 if no schedule broke an invariant, 1 if one did, 2 for a
 * usage error.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../harness/proxy.h"
#include "../harness/server.h"
#include "explore.h"

/* ---- the log ------------------------------------------------------------ */

ex_log *ex_log_new(void)
{
    ex_log *l = mmap(NULL, sizeof *l, PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_ANONYMOUS, -1, 0);

    return l == MAP_FAILED ? NULL : l;
}

void ex_log_free(ex_log *l)
{
    if (l)
        munmap(l, sizeof *l);
}

void ex_log_reset(ex_log *l)
{
    int i;

    atomic_store(&l->n, 0);
    atomic_store(&l->stop, 0);
    for (i = 0; i < EX_WORKERS_MAX; i++) {
        atomic_store(&l->done[i], 0);
        l->pid[i] = 0;
    }
}

void ex_log_add(ex_log *l, const ex_event *e)
{
    long i = atomic_fetch_add(&l->n, 1);

    if (i < EX_EVENTS_MAX)
        l->ev[i] = *e;
}

/* ---- one schedule ------------------------------------------------------- */

static void sleep_ms(int64_t ms)
{
    struct timespec ts;

    ts.tv_sec = ms / 1000;
    ts.tv_nsec = (long)(ms % 1000) * 1000000L;
    nanosleep(&ts, NULL);
}

static int all_done(ex_log *l, int n)
{
    int i;

    for (i = 0; i < n; i++)
        if (!atomic_load(&l->done[i]))
            return 0;
    return 1;
}

/* Runs the schedule of seed; its verdict into *v. */
/* --server-log: where run_one writes the server's MONITOR log. */
static FILE *server_log;

static void run_one(uint64_t seed, ex_log *l, int64_t slack_ms, ex_verdict *v)
{
    ex_plan p;
    rt_server *s, *replica = NULL;
    rt_proxy *proxy;
    ex_run *run;
    int64_t lease, until;
    int w, stuck = 0;

    ex_plan_make(&p, seed);
    ex_log_reset(l);
    s = rt_server_start(NULL);
    if (p.replicas)
        replica = rt_replica_start(s, NULL, NULL);
    /* The workers are forked before any thread of this process runs (a
     * child of a threaded parent may inherit a lock held forever). */
    proxy = rt_proxy_new(rt_server_port(s));
    for (w = 0; w < p.workers; w++) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("rlock-explore: fork");
            exit(2);
        }
        if (pid == 0)
            ex_worker_main(&p, w, rt_proxy_url(proxy), l);
        l->pid[w] = pid;
    }
    rt_proxy_run(proxy);
    run = ex_run_start(&p, l, proxy, s, rt_server_url(s));
    if (server_log) {
        fprintf(server_log, "== seed %llu\n", (unsigned long long)seed);
        ex_run_server_log(run, server_log);
    }
    sleep_ms(p.run_ms);
    atomic_store(&l->stop, 1);
    ex_run_end_faults(run);
    /* Every owner ends its hold (its calls have bounds; a wait for ever is
     * cancelled); a worker still busy after 30 s is stuck. */
    until = ex_now_ns() + 30000 * 1000000LL;
    while (!all_done(l, p.workers) && ex_now_ns() < until) {
        for (w = 0; w < p.workers; w++)
            if (!atomic_load(&l->done[w]) &&
                waitpid(l->pid[w], NULL, WNOHANG) == l->pid[w]) {
                ex_event e;
                memset(&e, 0, sizeof e);
                e.kind = EV_DEATH;
                e.worker = w;
                e.a = 1;
                e.t0 = e.t1 = ex_now_ns();
                ex_log_add(l, &e);
                atomic_store(&l->done[w], 2); /* killed by a fault */
            }
        sleep_ms(20);
    }
    for (w = 0; w < p.workers; w++) {
        if (!atomic_load(&l->done[w])) {
            stuck++;
            kill(l->pid[w], SIGKILL);
        }
        if (atomic_load(&l->done[w]) != 2)
            waitpid(l->pid[w], NULL, 0);
    }
    /* The monitor watches on while a lock is held, for as long as the
     * checker lets a lock be held by nobody and a second more, so that a
     * lock left so at the end of the run shows; once every lock has been
     * seen free for a while, nothing more can. */
    lease = p.lease_ms ? p.lease_ms : p.watchdog_ms;
    until = ex_now_ns() + (lease + 2 * p.slow_ms + slack_ms + 1000) * 1000000LL;
    sleep_ms(100);
    while (ex_now_ns() < until &&
           ex_now_ns() - ex_run_held_at(run) < 300 * 1000000LL)
        sleep_ms(25);
    ex_run_stop(run);
    rt_proxy_stop(proxy);
    if (replica)
        rt_server_stop(replica);
    rt_server_stop(s);
    ex_check(&p, l, slack_ms, v);
    if (stuck) {
        if (!v->violations[I_BOUNDS]++)
            snprintf(v->first[I_BOUNDS], sizeof v->first[I_BOUNDS],
                     "%d worker(s) still in a call 30 s after the run", stuck);
    }
}

/* Writes the log of seed's run to path, oldest first, times in ms from
 * its first event. */
static void trace(const char *path, uint64_t seed, const ex_log *l)
{
    static const char *const kinds[] = {"acq",   "rel",     "ext",   "left",
                                        "token", "on_lost", "fault", "status",
                                        "death", "letgo"};
    static const char *const hows[] = {"lock", "try", "timed", "with"};
    long n = atomic_load(&l->n), i, k;
    ex_event *ev;
    FILE *f;

    if (n > EX_EVENTS_MAX)
        n = EX_EVENTS_MAX;
    if (!(ev = malloc(sizeof *ev * (size_t)(n ? n : 1))))
        return;
    memcpy(ev, l->ev, sizeof *ev * (size_t)n);
    /* Insertion by start time (the log is nearly in order). */
    for (i = 1; i < n; i++) {
        ex_event e = ev[i];
        for (k = i; k > 0 && ev[k - 1].t0 > e.t0; k--)
            ev[k] = ev[k - 1];
        ev[k] = e;
    }
    if (!(f = fopen(path, "a"))) {
        free(ev);
        return;
    }
    fprintf(f, "== seed %llu\n", (unsigned long long)seed);
    for (i = 0; i < n; i++) {
        const ex_event *e = &ev[i];
        fprintf(f,
                "%9.3f %9.3f %-7s w%d o%d h%d n%d rc %d lvl %d%s a %lld b %lld "
                "tok %llu",
                (double)(e->t0 - ev[0].t0) / 1e6,
                (double)(e->t1 - ev[0].t0) / 1e6,
                e->kind < EV_KINDS ? kinds[e->kind] : "?", e->worker, e->owner,
                e->hold, e->name, e->rc, e->level, e->reentry ? " re" : "",
                (long long)e->a, (long long)e->b, (unsigned long long)e->token);
        if (e->kind == EV_ACQ && e->a >= 0 && e->a < EX_HOWS)
            fprintf(f, " (%s)", hows[e->a]);
        fputc('\n', f);
    }
    fclose(f);
    free(ev);
}

/* ---- the loop ----------------------------------------------------------- */

static int read_seeds(const char *path, uint64_t **out)
{
    FILE *f = fopen(path, "r");
    char line[512];
    int n = 0, cap = 0;

    *out = NULL;
    if (!f) {
        fprintf(stderr, "rlock-explore: %s: %s\n", path, strerror(errno));
        return -1;
    }
    while (fgets(line, sizeof line, f)) {
        char *end;
        unsigned long long s;
        char *p = line;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == '#' || *p == '\n' || !*p)
            continue;
        errno = 0;
        s = strtoull(p, &end, 10);
        if (errno || end == p)
            continue;
        if (n == cap) {
            uint64_t *bigger;
            cap = cap ? cap * 2 : 16;
            if (!(bigger = realloc(*out, sizeof **out * (size_t)cap)))
                break;
            *out = bigger;
        }
        (*out)[n++] = s;
    }
    fclose(f);
    return n;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: rlock-explore [--seconds S | --schedules N] [--seed S] "
            "[--replay FILE] [--found FILE] [--trace FILE] [--slack-ms N] "
            "[--quiet]\n");
}

int main(int argc, char **argv)
{
    int64_t seconds = 60, schedules = -1, slack_ms = 1000;
    uint64_t seed = 0, *replay = NULL;
    const char *replay_file = NULL, *found_file = NULL, *trace_file = NULL;
    int have_seed = 0, quiet = 0, nreplay = 0, i, failed = 0;
    long ran = 0, total[I_COUNT] = {0}, holds = 0, faults = 0, calls = 0;
    long async_holds = 0;
    int64_t t_end;
    ex_log *l;

    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--quiet")) {
            quiet = 1;
            continue;
        }
        if (!v) {
            usage();
            return 2;
        }
        i++;
        if (!strcmp(a, "--seconds"))
            seconds = strtoll(v, NULL, 10);
        else if (!strcmp(a, "--schedules"))
            schedules = strtoll(v, NULL, 10);
        else if (!strcmp(a, "--seed")) {
            seed = strtoull(v, NULL, 10);
            have_seed = 1;
        } else if (!strcmp(a, "--replay"))
            replay_file = v;
        else if (!strcmp(a, "--found"))
            found_file = v;
        else if (!strcmp(a, "--trace"))
            trace_file = v;
        else if (!strcmp(a, "--server-log")) {
            if (!(server_log = fopen(v, "w"))) {
                perror(v);
                return 2;
            }
        } else if (!strcmp(a, "--slack-ms"))
            slack_ms = strtoll(v, NULL, 10);
        else {
            usage();
            return 2;
        }
    }
    if (seconds <= 0 || slack_ms < 0) {
        usage();
        return 2;
    }
    if (replay_file && (nreplay = read_seeds(replay_file, &replay)) < 0)
        return 2;
    if (!have_seed) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        seed = (uint64_t)ts.tv_sec * 1000003u + (uint64_t)ts.tv_nsec / 1000;
    }
    if (!(l = ex_log_new())) {
        fprintf(stderr, "rlock-explore: cannot map the log\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    printf("rlock-explore: %s seeds from %llu%s, slack %lld ms\n",
           schedules >= 0 ? "fixed count of" : "random",
           (unsigned long long)seed, replay_file ? " after the kept ones" : "",
           (long long)slack_ms);
    fflush(stdout);
    t_end = ex_now_ns() + seconds * 1000000000LL;
    for (i = 0;; i++) {
        uint64_t s = i < nreplay ? replay[i] : seed + (uint64_t)(i - nreplay);
        ex_verdict v;
        ex_plan p;
        char what[256];
        long bad = 0;
        int k;

        if (schedules >= 0 ? ran >= schedules + nreplay
                           : (i >= nreplay && ex_now_ns() >= t_end))
            break;
        ex_plan_make(&p, s);
        ex_plan_describe(&p, what, sizeof what);
        run_one(s, l, slack_ms, &v);
        ran++;
        holds += v.holds;
        async_holds += v.async_holds;
        faults += v.faults;
        calls += v.calls;
        for (k = 0; k < I_COUNT; k++) {
            total[k] += v.violations[k];
            bad += v.violations[k];
        }
        if (!quiet || bad)
            printf("%s seed %llu: %s; %ld holds (%ld async), %ld calls, %ld "
                   "faults%s\n",
                   bad ? "FAIL" : "ok  ", (unsigned long long)s, what, v.holds,
                   v.async_holds, v.calls, v.faults, bad ? ":" : "");
        for (k = 0; k < I_COUNT; k++)
            if (v.violations[k])
                printf("    %s (%ld): %s\n", ex_invariant_names[k],
                       v.violations[k], v.first[k]);
        fflush(stdout);
        if (bad) {
            failed++;
            if (trace_file)
                trace(trace_file, s, l);
            if (found_file) {
                FILE *f = fopen(found_file, "a");
                if (f) {
                    for (k = 0; k < I_COUNT && !v.violations[k]; k++)
                        ;
                    fprintf(f, "%llu  # %s: %s\n", (unsigned long long)s,
                            ex_invariant_names[k], what);
                    fclose(f);
                }
            }
        }
    }
    printf("rlock-explore: %ld schedules (%d kept seeds), %ld holds (%ld by "
           "async workers), %ld calls, %ld faults; %d failed",
           ran, nreplay, holds, async_holds, calls, faults, failed);
    for (i = 0; i < I_COUNT; i++)
        if (total[i])
            printf("; %s %ld", ex_invariant_names[i], total[i]);
    printf("\n");
    free(replay);
    ex_log_free(l);
    return failed ? 1 : 0;
}
