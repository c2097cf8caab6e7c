/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Scenario "redlock": uncontended acquire + release pairs over five
 * masters (redlock://) against the same pairs on one of them alone, in
 * alternating rounds. Reported: time per pair and its ratio (a wall-clock
 * figure, target 1.3 x on a machine with cores to spare, not a gate on
 * two), the client's CPU per pair (getrusage), and the requests (the
 * scripts, INFO commandstats) each master got per acquisition and per
 * release: one each means every master got one request, sent together,
 * so an uncontended acquisition is one parallel round (the time ratio
 * says they overlapped). The five servers are the bench's own, on loopback
 * TCP (redlock:// names host:port), started from redis-server on PATH.
 */
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

#define NODES 5
#define ROUNDS 6

/* A free loopback port, or 0. */
static int free_port(void)
{
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port = 0;

    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

/* redis-server on 127.0.0.1:port, no persistence, in dir; its pid, or
 * -1. Waits until it answers (10 s at most). */
static pid_t start_node(const char *dir, int port)
{
    char p[16];
    pid_t pid, parent = getpid();
    int i;

    snprintf(p, sizeof p, "%d", port);
    fflush(NULL);
    if ((pid = fork()) == 0) {
        int null = open("/dev/null", O_WRONLY);
        /* Never outlives the bench, however it ends (a signal included):
         * the kernel kills it when the bench goes, as the private
         * server's is (cli/private_server.c). */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127); /* the bench went before the line above */
        if (null >= 0) {
            dup2(null, 1);
            dup2(null, 2);
        }
        execlp("redis-server", "redis-server", "--port", p, "--bind",
               "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir,
               (char *)NULL);
        _exit(127);
    }
    for (i = 0; pid > 0 && i < 1000; i++) {
        redisContext *ctx = redisConnect("127.0.0.1", port);
        redisReply *r = ctx && !ctx->err ? redisCommand(ctx, "PING") : NULL;
        int up = r && r->type == REDIS_REPLY_STATUS;
        if (r)
            freeReplyObject(r);
        if (ctx)
            redisFree(ctx);
        if (up)
            return pid;
        if (waitpid(pid, NULL, WNOHANG) == pid)
            return -1;
        usleep(10000);
    }
    if (pid > 0)
        kill(pid, SIGKILL);
    return -1;
}

/* Scripts a server has been asked to run (INFO commandstats): the
 * requests rlock sends to a Redlock node; what a script runs inside is
 * not a request. */
static long long commands(redisContext *ctx)
{
    return server_calls(ctx, "evalsha") + server_calls(ctx, "eval");
}

struct side {
    rlock_client *c;
    rlock_mutex *m;
    double secs, cpu_us;
    long pairs;
};

static int pairs(struct side *s, int n)
{
    double t0 = bench_now(), c0 = bench_cpu_usec();
    int i;

    for (i = 0; i < n; i++)
        if (rlock_mutex_lock(s->m) != RLOCK_OK ||
            rlock_mutex_unlock(s->m) != RLOCK_OK)
            return -1;
    s->secs += bench_now() - t0;
    s->cpu_us += bench_cpu_usec() - c0;
    s->pairs += n;
    return 0;
}

int scenario_redlock(bench *b)
{
    char dir[] = "/tmp/rlock-bench-redlock-XXXXXX", url[512], one[64];
    pid_t pids[NODES];
    redisContext *ctx[NODES];
    struct side sides[2];
    long long before[NODES], after[NODES];
    int ports[NODES], i, k, err, rc = 1, n = b->quick ? 50 : 2000;
    size_t len;
    double per_node = 0;

    fprintf(b->out,
            "\nredlock: uncontended pairs over %d masters against one "
            "of them alone, %d alternating rounds of %d pairs\n",
            NODES, ROUNDS, n / ROUNDS);
    memset(sides, 0, sizeof sides);
    memset(ctx, 0, sizeof ctx);
    for (i = 0; i < NODES; i++)
        pids[i] = -1;
    if (!mkdtemp(dir)) {
        perror("rlock-bench: redlock: mkdtemp");
        return 1;
    }
    len = (size_t)snprintf(url, sizeof url, "redlock://");
    for (i = 0; i < NODES; i++) {
        ports[i] = free_port();
        if (!ports[i] || (pids[i] = start_node(dir, ports[i])) < 0) {
            fprintf(stderr, "rlock-bench: redlock: cannot start redis-server "
                            "(is it on PATH?)\n");
            goto out;
        }
        ctx[i] = redisConnect("127.0.0.1", ports[i]);
        len += (size_t)snprintf(url + len, sizeof url - len, "%s127.0.0.1:%d",
                                i ? "," : "", ports[i]);
    }
    snprintf(one, sizeof one, "redis://127.0.0.1:%d", ports[0]);
    sides[0].c = rlock_client_open(one, NULL, &err);
    sides[1].c = rlock_client_open(url, NULL, &err);
    for (k = 0; k < 2; k++) {
        if (!sides[k].c || !(sides[k].m = rlock_mutex_new(
                                 sides[k].c, "bench:redlock", NULL, &err))) {
            fprintf(stderr, "rlock-bench: redlock: %s\n", rlock_strerror(err));
            goto out;
        }
        if (pairs(&sides[k], 20) != 0) /* warm: connected, scripts loaded */
            goto failed;
        memset(&sides[k].secs, 0,
               sizeof sides[k] - offsetof(struct side, secs));
    }
    for (i = 0; i < ROUNDS; i++) {
        if (pairs(&sides[0], n / ROUNDS) != 0)
            goto failed;
        for (k = 0; k < NODES; k++)
            before[k] = commands(ctx[k]);
        if (pairs(&sides[1], n / ROUNDS) != 0)
            goto failed;
        for (k = 0; k < NODES; k++) {
            after[k] = commands(ctx[k]);
            per_node += (double)(after[k] - before[k]) / NODES;
        }
    }
    {
        double t1 = sides[0].secs / sides[0].pairs * 1e6;
        double t5 = sides[1].secs / sides[1].pairs * 1e6;
        double c1 = sides[0].cpu_us / sides[0].pairs;
        double c5 = sides[1].cpu_us / sides[1].pairs;
        double cmds = per_node / sides[1].pairs;
        fprintf(b->out,
                "  one master %.1f us/pair, %d masters %.1f us/pair: %.2f x "
                "(a wall-clock figure; target 1.3 on many cores)\n"
                "  client CPU per pair: one %.1f us, %d masters %.1f us "
                "(%.2f x)\n"
                "  requests each master got per pair: %.2f (1 to acquire, 1 "
                "to release: one parallel round each)\n",
                t1, NODES, t5, t5 / t1, c1, NODES, c5, c5 / c1, cmds);
        report_open(b, "redlock");
        report_num(b, "masters", NODES);
        report_num(b, "single_us_per_pair", t1);
        report_num(b, "redlock_us_per_pair", t5);
        report_num(b, "time_ratio", t5 / t1);
        report_num(b, "single_client_cpu_us_per_pair", c1);
        report_num(b, "redlock_client_cpu_us_per_pair", c5);
        report_num(b, "client_cpu_ratio", c5 / c1);
        report_num(b, "requests_per_master_per_pair", cmds);
        report_close(b);
    }
    rc = 0;
    goto out;
failed:
    fprintf(stderr, "rlock-bench: redlock: a lock or unlock failed: %s\n",
            rlock_client_errmsg(NULL));
out:
    for (k = 0; k < 2; k++) {
        if (sides[k].m)
            rlock_mutex_free(sides[k].m);
        if (sides[k].c)
            rlock_client_close(sides[k].c);
    }
    for (i = 0; i < NODES; i++) {
        if (ctx[i])
            redisFree(ctx[i]);
        if (pids[i] > 0) {
            kill(pids[i], SIGTERM);
            waitpid(pids[i], NULL, 0);
        }
    }
    rmdir(dir);
    return rc;
}
