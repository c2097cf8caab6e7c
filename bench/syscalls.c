/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Scenario "syscalls": system calls per uncontended acquire + release
 * pair, rlock's and the floor's, counted by strace(1) (no other way to
 * count them needs nothing mounted and no privilege). Each side runs in a
 * child of this program (--syscall-run, below) twice, with PAIRS pairs and
 * with none; the difference over PAIRS is what one pair costs, without
 * connecting, loading scripts and exiting. Needs strace on PATH; without
 * it the scenario says so and is skipped.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

/* What one child did, by kind of call. */
enum { K_POLL, K_SEND, K_RECV, K_FUTEX, K_OTHER, K_ALL, K_N };
static const char *const kind_names[K_N] = {"poll",  "send",  "recv",
                                            "futex", "other", "total"};

static int kind_of(const char *name)
{
    static const struct {
        const char *name;
        int kind;
    } known[] = {
        {"poll", K_POLL},     {"ppoll", K_POLL},      {"select", K_POLL},
        {"pselect6", K_POLL}, {"epoll_wait", K_POLL}, {"sendto", K_SEND},
        {"write", K_SEND},    {"writev", K_SEND},     {"sendmsg", K_SEND},
        {"recvfrom", K_RECV}, {"read", K_RECV},       {"readv", K_RECV},
        {"recvmsg", K_RECV},  {"futex", K_FUTEX},
    };
    size_t i;

    for (i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(known[i].name, name) == 0)
            return known[i].kind;
    return K_OTHER;
}

/* Reads strace -c's table into n[]; 0, or -1 if it has no total. */
static int read_table(const char *path, long long n[K_N])
{
    FILE *f = fopen(path, "r");
    char line[512];
    int total = 0;

    memset(n, 0, K_N * sizeof n[0]);
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f)) {
        char *tok[8], *save = NULL, *p;
        int k = 0;
        long long calls;

        for (p = strtok_r(line, " \t\n", &save); p && k < 8;
             p = strtok_r(NULL, " \t\n", &save))
            tok[k++] = p;
        /* % time, seconds, usecs/call, calls, [errors,] name */
        if (k < 5 || !(tok[3][0] >= '0' && tok[3][0] <= '9'))
            continue;
        calls = atoll(tok[3]);
        if (strcmp(tok[k - 1], "total") == 0) {
            n[K_ALL] = calls;
            total = 1;
        } else {
            n[kind_of(tok[k - 1])] += calls;
        }
    }
    fclose(f);
    return total ? 0 : -1;
}

/* Runs this program as a child under strace -f -c; its table in n[]. */
static int traced(const char *url, const char *side, int pairs,
                  long long n[K_N])
{
    char self[4096], count[16], out[] = "/tmp/rlock-bench-strace-XXXXXX";
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    int fd = mkstemp(out), status = 0, rc;
    pid_t pid;

    if (len <= 0 || fd < 0) {
        if (fd >= 0) {
            close(fd);
            unlink(out);
        }
        return -1;
    }
    close(fd);
    self[len] = '\0';
    snprintf(count, sizeof count, "%d", pairs);
    pid = fork();
    if (pid == 0) {
        /* LeakSanitizer refuses to run under ptrace, and fails the
         * child's exit: a sanitized build counts without it. */
        const char *asan = getenv("ASAN_OPTIONS");
        char opts[1024];
        snprintf(opts, sizeof opts, "%s%sdetect_leaks=0", asan ? asan : "",
                 asan && *asan ? ":" : "");
        setenv("ASAN_OPTIONS", opts, 1);
        execlp("strace", "strace", "-f", "-qq", "-c", "-o", out, self,
               "--redis", url, "--syscall-run", side, count, (char *)NULL);
        _exit(127);
    }
    while (pid > 0 && waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    rc = pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0
             ? read_table(out, n)
             : -1;
    unlink(out);
    return rc;
}

/* The child: a client (or the floor's connection), a few pairs to warm
 * it, then pairs pairs, then gone. */
int syscall_run(const char *url, const char *side, int pairs)
{
    int i, err, warm = 10;

    if (strcmp(side, "rlock") == 0) {
        rlock_client *c = rlock_client_open(url, NULL, &err);
        rlock_mutex *m =
            c ? rlock_mutex_new(c, "bench:syscalls", NULL, &err) : NULL;
        if (!m)
            return 69;
        for (i = 0; i < warm + pairs; i++)
            if (rlock_mutex_lock(m) != RLOCK_OK ||
                rlock_mutex_unlock(m) != RLOCK_OK)
                return 1;
        rlock_mutex_free(m);
        rlock_client_close(c);
        return 0;
    }
    if (strcmp(side, "floor") == 0) {
        redisContext *raw = floor_connect(url);
        if (!raw)
            return 69;
        for (i = 0; i < warm + pairs; i++)
            if (floor_pair(raw, "bench:syscalls-floor", "me") != 0)
                return 1;
        redisFree(raw);
        return 0;
    }
    return 64;
}

static int have_strace(void)
{
    const char *path = getenv("PATH");
    char buf[4096];

    while (path && *path) {
        size_t len = strcspn(path, ":");
        snprintf(buf, sizeof buf, "%.*s/strace", (int)len, path);
        if (access(buf, X_OK) == 0)
            return 1;
        path += len + (path[len] == ':');
    }
    return 0;
}

int scenario_syscalls(bench *b)
{
    static const char *const sides[2] = {"rlock", "floor"};
    int pairs = b->quick ? 100 : 2000, s, k;
    long long with[K_N], none[K_N];
    double per[2][K_N];

    fprintf(b->out,
            "\n== syscalls: system calls per uncontended pair "
            "(strace -f -c; %d pairs less none)\n",
            pairs);
    if (strncmp(b->url, "redis://", 8) != 0 &&
        strncmp(b->url, "unix://", 7) != 0) {
        fprintf(b->out, "   the floor is one server's: skipped\n");
        return 0;
    }
    if (!have_strace()) {
        fprintf(b->out, "   strace is not installed: skipped\n");
        return 0;
    }
    for (s = 0; s < 2; s++) {
        if (traced(b->url, sides[s], pairs, with) != 0 ||
            traced(b->url, sides[s], 0, none) != 0) {
            fprintf(stderr, "rlock-bench: syscalls: the %s run failed\n",
                    sides[s]);
            return 1;
        }
        for (k = 0; k < K_N; k++) {
            /* The run without pairs may make a few calls more (a thread
             * that happened to wait): noise, not a negative cost. */
            per[s][k] = (double)(with[k] - none[k]) / pairs;
            if (per[s][k] < 0)
                per[s][k] = 0;
        }
    }
    fprintf(b->out, "   %-6s", "");
    for (k = 0; k < K_N; k++)
        fprintf(b->out, " %8s", kind_names[k]);
    fprintf(b->out, "\n");
    for (s = 0; s < 2; s++) {
        fprintf(b->out, "   %-6s", sides[s]);
        for (k = 0; k < K_N; k++)
            fprintf(b->out, " %8.2f", per[s][k]);
        fprintf(b->out, "\n");
    }
    fprintf(b->out, "   rlock / floor: %.2f system calls a pair\n",
            per[1][K_ALL] > 0 ? per[0][K_ALL] / per[1][K_ALL] : 0.0);
    report_open(b, "syscalls");
    report_num(b, "pairs", pairs);
    for (s = 0; s < 2; s++)
        for (k = 0; k < K_N; k++) {
            char key[32];
            snprintf(key, sizeof key, "%s_%s_per_pair", sides[s],
                     kind_names[k]);
            report_num(b, key, per[s][k]);
        }
    report_close(b);
    return 0;
}
