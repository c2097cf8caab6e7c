/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * rlock demo: N processes contend for one lock and prove it works.
 *
 * Each worker increments a counter kept in a file with a deliberately racy
 * read, sleep, write: without mutual exclusion increments get lost. Shared
 * memory records what the verdict checks: every acquisition, any overlap
 * of two holds, and that fencing tokens only grew. Without --redis the
 * demo runs its own redis-server on a unix socket in a temporary
 * directory, and removes both afterwards.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "private_server.h"

#define MAX_WORKERS 64
#define LOCK_NAME "demo"

struct board {
    atomic_int in_section; /* holders inside the critical section */
    atomic_int overlaps;
    atomic_int token_errors;
    atomic_int errors;
    atomic_int holder;     /* worker now holding, -1 none */
    atomic_long total;
    atomic_ullong last_token;
    atomic_long count[MAX_WORKERS];
    atomic_long longest_wait_us;
};

static int64_t now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static long read_counter(const char *path)
{
    FILE *f = fopen(path, "r");
    long v = 0;

    if (f) {
        if (fscanf(f, "%ld", &v) != 1)
            v = 0;
        fclose(f);
    }
    return v;
}

static void write_counter(const char *path, long v)
{
    FILE *f = fopen(path, "w");

    if (f) {
        fprintf(f, "%ld\n", v);
        fclose(f);
    }
}

static int worker(const char *url, struct board *b, int id, int64_t end_us,
                  const char *counter)
{
    int err;
    rlock_client *c = rlock_client_open(url, NULL, &err);
    rlock_mutex *m = c ? rlock_mutex_new(c, LOCK_NAME, NULL, &err) : NULL;

    if (!m) {
        char detail[2048]; /* Redis's text, escaped */
        fprintf(stderr, "rlock demo: worker %d: %s: %s\n", id,
                rlock_strerror(err),
                safe_text(rlock_client_errmsg(c), detail, sizeof detail));
        atomic_fetch_add(&b->errors, 1);
        return 1;
    }
    while (now_us() < end_us) {
        int64_t t0 = now_us(), waited;
        unsigned long long token, last;
        long v;

        if ((err = rlock_mutex_lock(m)) != RLOCK_OK) {
            fprintf(stderr, "rlock demo: worker %d: lock: %s\n", id,
                    rlock_strerror(err));
            atomic_fetch_add(&b->errors, 1);
            break;
        }
        waited = now_us() - t0;
        if (atomic_fetch_add(&b->in_section, 1) != 0)
            atomic_fetch_add(&b->overlaps, 1);
        atomic_store(&b->holder, id);
        token = rlock_mutex_token(m);
        last = atomic_exchange(&b->last_token, token);
        if (token <= last)
            atomic_fetch_add(&b->token_errors, 1);
        if (waited > atomic_load(&b->longest_wait_us))
            atomic_store(&b->longest_wait_us, waited);

        v = read_counter(counter); /* racy on purpose: */
        usleep(2000);              /* others would interleave here */
        write_counter(counter, v + 1);

        atomic_fetch_add(&b->count[id], 1);
        atomic_fetch_add(&b->total, 1);
        atomic_store(&b->holder, -1);
        atomic_fetch_sub(&b->in_section, 1);
        if ((err = rlock_mutex_unlock(m)) != RLOCK_OK) {
            fprintf(stderr, "rlock demo: worker %d: unlock: %s\n", id,
                    rlock_strerror(err));
            atomic_fetch_add(&b->errors, 1);
            break;
        }
    }
    rlock_mutex_free(m);
    rlock_client_close(c);
    return 0;
}

/* Stops the private server (if any) and removes the demo's files. */
static void cleanup_dir(pid_t server, const char *dir, const char *counter)
{
    private_server_stop(server, dir);
    unlink(counter);
    rmdir(dir);
}

/* One progress line: redrawn in place on a terminal, appended otherwise. */
static void show(struct board *b, int workers, double elapsed, int tty,
                 int final)
{
    int i, holder = atomic_load(&b->holder);
    char who[16] = "-";

    if (holder >= 0 && !final)
        snprintf(who, sizeof who, "w%d", holder);
    if (tty)
        printf("\r\033[K");
    if (final)
        printf("total   ");
    printf("%5.1fs  acquisitions %5ld  holder %-4s longest wait %6.1f ms  |",
           elapsed, atomic_load(&b->total), who,
           (double)atomic_load(&b->longest_wait_us) / 1000.0);
    for (i = 0; i < workers && i < 16; i++)
        printf(" w%d:%ld", i, atomic_load(&b->count[i]));
    if (workers > 16)
        printf(" ...");
    if (!tty || final)
        printf("\n");
    fflush(stdout);
}

int cmd_demo(struct cli *cli, int argc, char **argv)
{
    int workers = 4, i, tty = isatty(1), sfd, verdict_ok, interrupted = 0;
    int64_t ms = 5000, start, end;
    char dir[] = "/tmp/rlock-demo-XXXXXX", counter[128];
    char url[200];
    struct board *b;
    pid_t server = -1, pids[MAX_WORKERS];
    sigset_t sigs, old;
    long final_counter;

    for (i = 1; i < argc;) {
        const char *v;
        int r;
        if ((r = cli_opt(argc, argv, &i, "rlock demo", NULL, "--workers",
                         &v)) != 0) {
            long n;
            if (r < 0)
                return EXIT_USAGE;
            if (parse_number(v, 1, MAX_WORKERS, &n) != 0) {
                fprintf(stderr, "rlock demo: --workers takes 1 to %d\n",
                        MAX_WORKERS);
                return EXIT_USAGE;
            }
            workers = (int)n;
        } else if ((r = cli_opt(argc, argv, &i, "rlock demo", NULL,
                                "--seconds", &v)) != 0) {
            if (r < 0)
                return EXIT_USAGE;
            if (parse_duration(v, &ms) != 0 || ms <= 0 || ms > 3600 * 1000) {
                fprintf(stderr, "rlock demo: bad duration '%s' for "
                                "--seconds\n",
                        v);
                return EXIT_USAGE;
            }
        } else {
            fprintf(stderr, "usage: rlock demo [--workers N] [--seconds S]\n");
            return EXIT_USAGE;
        }
    }
    if (cli->url_given) {
        /* A URL that cannot work fails here, not once per worker. */
        int code;
        rlock_client *c = cli_open(cli, &code);
        if (!c)
            return code;
        rlock_client_close(c);
    }
    if (!mkdtemp(dir)) {
        fprintf(stderr, "rlock demo: mkdtemp: %s\n", strerror(errno));
        return EXIT_OSERR;
    }
    snprintf(counter, sizeof counter, "%s/counter", dir);
    write_counter(counter, 0);

    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGHUP);
    sigprocmask(SIG_BLOCK, &sigs, &old);
    sfd = signalfd(-1, &sigs, SFD_CLOEXEC);

    if (cli->url_given) {
        snprintf(url, sizeof url, "%s", cli->url);
        printf("rlock demo: %d workers for %.1f s on %s\n", workers,
               (double)ms / 1000, cli->url_shown);
    } else {
        server = private_server_start(dir, &old, url, sizeof url);
        if (server < 0) {
            cleanup_dir(-1, dir, counter);
            return EXIT_UNAVAILABLE;
        }
        printf("rlock demo: %d workers for %.1f s on a private redis-server "
               "(%s)\n",
               workers, (double)ms / 1000, url);
    }

    b = mmap(NULL, sizeof *b, PROT_READ | PROT_WRITE,
             MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (b == MAP_FAILED) {
        cleanup_dir(server, dir, counter);
        return EXIT_OSERR;
    }
    memset(b, 0, sizeof *b);
    atomic_store(&b->holder, -1);
    start = now_us();
    end = start + ms * 1000;
    fflush(stdout);
    for (i = 0; i < workers; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            sigprocmask(SIG_SETMASK, &old, NULL);
            _exit(worker(url, b, i, end, counter));
        }
    }

    for (;;) {
        struct pollfd p = {sfd, POLLIN, 0};
        int running = 0;
        for (i = 0; i < workers; i++)
            if (pids[i] > 0 && waitpid(pids[i], NULL, WNOHANG) == 0)
                running++;
            else
                pids[i] = -1;
        if (!running)
            break;
        if (poll(&p, 1, tty ? 200 : 1000) > 0) {
            struct signalfd_siginfo si;
            if (read(sfd, &si, sizeof si) == sizeof si) {
                interrupted = (int)si.ssi_signo;
                for (i = 0; i < workers; i++)
                    if (pids[i] > 0)
                        kill(pids[i], SIGTERM);
                for (i = 0; i < workers; i++)
                    if (pids[i] > 0)
                        waitpid(pids[i], NULL, 0);
                break;
            }
        }
        show(b, workers, (double)(now_us() - start) / 1e6, tty, 0);
    }
    show(b, workers, (double)(now_us() - start) / 1e6, tty, 1);
    final_counter = read_counter(counter);
    cleanup_dir(server, dir, counter); /* server is -1 with --redis */
    if (interrupted) {
        printf("rlock demo: interrupted by %s\n", strsignal(interrupted));
        return 128 + interrupted;
    }

    verdict_ok = final_counter == atomic_load(&b->total) &&
                 atomic_load(&b->overlaps) == 0 &&
                 atomic_load(&b->token_errors) == 0 &&
                 atomic_load(&b->errors) == 0 && atomic_load(&b->total) > 0;
    printf("counter %ld, acquisitions %ld: %s\n", final_counter,
           atomic_load(&b->total),
           final_counter == atomic_load(&b->total) ? "equal" : "DIFFERENT");
    printf("overlapping holds: %d\n", atomic_load(&b->overlaps));
    printf("fencing tokens: %s (last %llu)\n",
           atomic_load(&b->token_errors) ? "went BACKWARDS" : "strictly increasing",
           (unsigned long long)atomic_load(&b->last_token));
    if (atomic_load(&b->errors))
        printf("worker errors: %d\n", atomic_load(&b->errors));
    printf("verdict: %s\n", verdict_ok ? "PASS" : "FAIL");
    munmap(b, sizeof *b);
    return verdict_ok ? 0 : 1;
}
