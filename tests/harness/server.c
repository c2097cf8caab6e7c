/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Starting, stopping, pausing and restarting real redis-server processes.
 * See server.h for the guarantees.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test.h"

#define MAX_SERVERS 16

struct rt_server {
    pid_t pid;
    int port;
    char dir[64];
    char sock[96];
    char url[64];
    char unix_url[128];
    rt_server_opts opts;
    redisContext *ctx;
};

static rt_server *servers[MAX_SERVERS];
static pid_t owner_pid;

static void kill_all_fast(void)
{
    int i;

    for (i = 0; i < MAX_SERVERS; i++)
        if (servers[i] && servers[i]->pid > 0)
            kill(servers[i]->pid, SIGKILL);
}

static void on_fatal(int sig)
{
    /* Only async-signal-safe work here: kill, then die of the signal. */
    if (getpid() == owner_pid)
        kill_all_fast();
    signal(sig, SIG_DFL);
    raise(sig);
}

static void at_exit(void)
{
    int i;

    if (getpid() != owner_pid)
        return; /* a forked child of the test: the servers are not its own */
    for (i = 0; i < MAX_SERVERS; i++)
        if (servers[i])
            rt_server_stop(servers[i]);
}

static void install_cleanup(void)
{
    static int done;
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGABRT, SIGSEGV,
                               SIGBUS, SIGFPE, SIGQUIT};
    size_t i;

    if (done)
        return;
    done = 1;
    owner_pid = getpid();
    atexit(at_exit);
    for (i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        signal(sigs[i], on_fatal);
}

int rt_free_port(void)
{
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM, 0), port;

    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0)
        rt_fail(__FILE__, __LINE__, "cannot find a free port: %s",
                strerror(errno));
    port = ntohs(a.sin_port);
    close(fd);
    return port;
}

/* Whether port is free on the loopback now. */
static int port_free(int port)
{
    struct sockaddr_in a;
    int fd = socket(AF_INET, SOCK_STREAM, 0), ok;

    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((unsigned short)port);
    ok = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

/* A free port for a cluster node: its bus port (10,000 above) must be a
 * port too, and free. (The kernel hands out ports up to 60999, and close
 * to the last one: a node given 55536 or more exits at once, and so may
 * every retry.) */
static int free_cluster_port(void)
{
    int i, port = 0;

    for (i = 0; i < 200; i++) {
        port = rt_free_port();
        if (port + 10000 <= 65535 && port_free(port + 10000))
            return port;
        port = 20000 + (int)((unsigned)rand() % 20000);
        if (port_free(port) && port_free(port + 10000))
            return port;
    }
    return port;
}

/* Writes the Sentinel's configuration file (Sentinel rewrites it as it
 * learns) and returns its path. */
static const char *sentinel_conf(rt_server *s, char *path, size_t len)
{
    char name[128];
    FILE *f;

    snprintf(path, len, "%s/sentinel.conf", s->dir);
    snprintf(name, sizeof name, "%s", s->opts.sentinel_monitor);
    name[strcspn(name, " ")] = '\0';
    f = fopen(path, "w");
    if (!f)
        rt_fail(__FILE__, __LINE__, "%s: %s", path, strerror(errno));
    fprintf(f,
            "sentinel monitor %s\n"
            "sentinel down-after-milliseconds %s 1000\n"
            "sentinel failover-timeout %s 5000\n"
            "sentinel parallel-syncs %s 1\n",
            s->opts.sentinel_monitor, name, name, name);
    fclose(f);
    return path;
}

/* The server binary the tests run: $RLOCK_TEST_SERVER (valkey-server, or
 * a path to another build), redis-server by default. */
const char *rt_server_binary(void)
{
    const char *bin = getenv("RLOCK_TEST_SERVER");

    return bin && *bin ? bin : "redis-server";
}

const char *rt_valkey81_binary(void)
{
    const char *bin = getenv("RLOCK_TEST_VALKEY81");

    if (!bin || !*bin)
        rt_fail(__FILE__, __LINE__,
                "RLOCK_TEST_VALKEY81 is not set: build Valkey 8.1 with "
                "tools/valkey81.sh and set it to the valkey-server it "
                "prints (tools/test.sh does both)");
    return bin;
}

static const char *built_binary(const char *var, const char *what)
{
    const char *bin = getenv(var);

    if (!bin || !*bin)
        rt_fail(__FILE__, __LINE__,
                "%s is not set: build it with tools/newserver.sh %s and set "
                "it to the path it prints (tools/test.sh does both)",
                var, what);
    return bin;
}

const char *rt_newest_valkey_binary(void)
{
    return built_binary("RLOCK_TEST_VALKEY_NEWEST", "valkey");
}

const char *rt_newest_redis_binary(void)
{
    return built_binary("RLOCK_TEST_REDIS_NEWEST", "redis");
}

/* The binary s runs. */
static const char *binary_of(const rt_server *s)
{
    return s->opts.binary ? s->opts.binary : rt_server_binary();
}

static void spawn(rt_server *s)
{
    char port[16], logfile[128], conf[128];
    const char *argv[64];
    int argc = 0, i;
    pid_t pid;

    snprintf(port, sizeof port, "%d", s->port);
    snprintf(logfile, sizeof logfile, "%s/redis.log", s->dir);
    argv[argc++] = binary_of(s);
    if (s->opts.sentinel_monitor) {
        argv[argc++] = sentinel_conf(s, conf, sizeof conf);
        argv[argc++] = "--sentinel";
    }
    argv[argc++] = "--port";
    argv[argc++] = port;
    argv[argc++] = "--bind";
    argv[argc++] = "127.0.0.1";
    argv[argc++] = "--unixsocket";
    argv[argc++] = s->sock;
    argv[argc++] = "--unixsocketperm";
    argv[argc++] = "700";
    argv[argc++] = "--dir";
    argv[argc++] = s->dir;
    argv[argc++] = "--save";
    argv[argc++] = "";
    argv[argc++] = "--appendonly";
    argv[argc++] = "no";
    argv[argc++] = "--daemonize";
    argv[argc++] = "no";
    argv[argc++] = "--logfile";
    argv[argc++] = logfile;
    if (s->opts.password) {
        argv[argc++] = "--requirepass";
        argv[argc++] = s->opts.password;
    }
    if (s->opts.cluster_enabled) {
        argv[argc++] = "--cluster-enabled";
        argv[argc++] = "yes";
        argv[argc++] = "--cluster-config-file";
        argv[argc++] = "nodes.conf";
    }
    for (i = 0; i < 16 && s->opts.extra[i]; i++)
        argv[argc++] = s->opts.extra[i];
    argv[argc] = NULL;

    pid = fork();
    if (pid < 0)
        rt_fail(__FILE__, __LINE__, "fork: %s", strerror(errno));
    if (pid == 0) {
        int null = open("/dev/null", O_RDWR);
        /* Dies with the test process, however that ends. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != owner_pid)
            _exit(127);
        dup2(null, 0);
        dup2(null, 1);
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    s->pid = pid;
}

static int answers_ping(rt_server *s)
{
    struct timeval tv = {0, 200000};
    redisContext *ctx = redisConnectWithTimeout("127.0.0.1", s->port, tv);
    redisReply *r;
    int ok = 0;

    if (ctx && !ctx->err) {
        redisSetTimeout(ctx, tv);
        r = redisCommand(ctx, "PING");
        /* NOAUTH also proves the server is up. */
        ok = r && (r->type == REDIS_REPLY_STATUS ||
                   r->type == REDIS_REPLY_ERROR);
        if (r)
            freeReplyObject(r);
    }
    if (ctx)
        redisFree(ctx);
    return ok;
}

/* Waits until the server answers; 0 if it died or never did. */
static int wait_ready(rt_server *s)
{
    int64_t until = rt_now_ms() + 10000;
    int status;

    while (rt_now_ms() < until) {
        if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
            s->pid = 0;
            return 0;
        }
        if (answers_ping(s))
            return 1;
        rt_sleep_ms(10);
    }
    return 0;
}

rt_server *rt_server_start(const rt_server_opts *opts)
{
    rt_server *s = calloc(1, sizeof *s);
    int attempt, slot;

    install_cleanup();
    CHECK(s != NULL);
    for (slot = 0; slot < MAX_SERVERS && servers[slot]; slot++)
        ;
    CHECK(slot < MAX_SERVERS);
    if (opts)
        s->opts = *opts;
    strcpy(s->dir, "/tmp/rlock-test-XXXXXX");
    if (!mkdtemp(s->dir))
        rt_fail(__FILE__, __LINE__, "mkdtemp: %s", strerror(errno));
    snprintf(s->sock, sizeof s->sock, "%s/redis.sock", s->dir);
    snprintf(s->unix_url, sizeof s->unix_url, "unix://%s", s->sock);
    servers[slot] = s;
    /* The port is free when we look and may be taken before redis binds
     * it; try another one then. */
    for (attempt = 0; attempt < 5; attempt++) {
        s->port =
            s->opts.cluster_enabled ? free_cluster_port() : rt_free_port();
        snprintf(s->url, sizeof s->url, "redis://127.0.0.1:%d", s->port);
        spawn(s);
        if (wait_ready(s))
            return s;
        if (s->pid > 0) {
            kill(s->pid, SIGKILL);
            waitpid(s->pid, NULL, 0);
            s->pid = 0;
        }
    }
    rt_fail(__FILE__, __LINE__, "%s did not start (see %s/redis.log)",
            binary_of(s), s->dir);
}

static void reap(rt_server *s, int sig)
{
    if (s->pid <= 0)
        return;
    kill(s->pid, SIGCONT);
    kill(s->pid, sig);
    if (sig == SIGTERM) {
        int64_t until = rt_now_ms() + 3000;
        while (rt_now_ms() < until) {
            if (waitpid(s->pid, NULL, WNOHANG) == s->pid) {
                s->pid = 0;
                return;
            }
            rt_sleep_ms(5);
        }
        kill(s->pid, SIGKILL);
    }
    waitpid(s->pid, NULL, 0);
    s->pid = 0;
}

void rt_server_stop(rt_server *s)
{
    char cmd[128];
    int i;

    if (!s)
        return;
    if (s->ctx) {
        redisFree(s->ctx);
        s->ctx = NULL;
    }
    reap(s, SIGTERM);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", s->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", s->dir);
    for (i = 0; i < MAX_SERVERS; i++)
        if (servers[i] == s)
            servers[i] = NULL;
    free(s);
}

void rt_server_pause(rt_server *s)
{
    CHECK(s->pid > 0);
    kill(s->pid, SIGSTOP);
}

void rt_server_resume(rt_server *s)
{
    CHECK(s->pid > 0);
    kill(s->pid, SIGCONT);
}

void rt_server_kill(rt_server *s)
{
    reap(s, SIGKILL);
    if (s->ctx) {
        redisFree(s->ctx);
        s->ctx = NULL;
    }
}

void rt_server_restart(rt_server *s)
{
    rt_server_kill(s);
    unlink(s->sock);
    spawn(s);
    if (!wait_ready(s))
        rt_fail(__FILE__, __LINE__, "redis-server did not restart on port %d",
                s->port);
}

int rt_server_port(const rt_server *s) { return s->port; }
const char *rt_server_url(const rt_server *s) { return s->url; }
const char *rt_server_unix_url(const rt_server *s) { return s->unix_url; }
const char *rt_server_socket(const rt_server *s) { return s->sock; }
const char *rt_server_dir(const rt_server *s) { return s->dir; }

redisContext *rt_server_ctx(rt_server *s)
{
    struct timeval tv = {5, 0};

    if (s->ctx && s->ctx->err) {
        redisFree(s->ctx);
        s->ctx = NULL;
    }
    if (!s->ctx) {
        s->ctx = redisConnectWithTimeout("127.0.0.1", s->port, tv);
        if (!s->ctx || s->ctx->err)
            rt_fail(__FILE__, __LINE__, "cannot connect to test server %d",
                    s->port);
        redisSetTimeout(s->ctx, tv);
        if (s->opts.password) {
            redisReply *r = redisCommand(s->ctx, "AUTH %s", s->opts.password);
            CHECK(r && r->type == REDIS_REPLY_STATUS);
            freeReplyObject(r);
        }
    }
    return s->ctx;
}

static redisReply *vcmd(rt_server *s, const char *fmt, va_list ap)
{
    va_list again;
    redisReply *r;

    va_copy(again, ap);
    r = redisvCommand(rt_server_ctx(s), fmt, ap);
    /* A server that closed the connection before reading the command (a
     * failover kills the clients of a demoted master) is asked again on
     * a new one. */
    if (!r && (s->ctx->err == REDIS_ERR_EOF || s->ctx->err == REDIS_ERR_IO))
        r = redisvCommand(rt_server_ctx(s), fmt, again);
    va_end(again);
    if (!r)
        rt_fail(__FILE__, __LINE__, "test command failed: %s",
                s->ctx->errstr);
    return r;
}

redisReply *rt_cmd(rt_server *s, const char *fmt, ...)
{
    va_list ap;
    redisReply *r;

    va_start(ap, fmt);
    r = vcmd(s, fmt, ap);
    va_end(ap);
    return r;
}

long long rt_cmd_int(rt_server *s, const char *fmt, ...)
{
    va_list ap;
    redisReply *r;
    long long v;

    va_start(ap, fmt);
    r = vcmd(s, fmt, ap);
    va_end(ap);
    if (r->type != REDIS_REPLY_INTEGER)
        rt_fail(__FILE__, __LINE__, "'%s' did not return an integer (%s)",
                fmt, r->type == REDIS_REPLY_ERROR ? r->str : "other type");
    v = r->integer;
    freeReplyObject(r);
    return v;
}

const char *rt_lock_field(rt_server *s, const char *name, int field,
                          char *buf, size_t len)
{
    redisReply *r = rt_cmd(s, "GET {rlock:%s}", name);
    const char *p = r->type == REDIS_REPLY_STRING ? r->str : "";
    size_t n;
    int i;

    for (i = 0; i < field && *p; i++) {
        p = strchr(p, ' ');
        p = p ? p + 1 : "";
    }
    n = strcspn(p, " ");
    if (n >= len)
        n = len - 1;
    memcpy(buf, p, n);
    buf[n] = '\0';
    freeReplyObject(r);
    return buf;
}

long long rt_lock_count(rt_server *s, const char *name)
{
    char buf[32];

    return strtoll(rt_lock_field(s, name, RT_COUNT, buf, sizeof buf), NULL,
                   10);
}

uint64_t rt_fence_counter(rt_server *s, const char *name)
{
    redisReply *r = rt_cmd(s, "GET {rlock:%s}:fence", name);
    uint64_t v = r->type == REDIS_REPLY_STRING ? strtoull(r->str, NULL, 10) : 0;

    freeReplyObject(r);
    return v;
}

long long rt_info_field(rt_server *s, const char *section, const char *field)
{
    redisReply *r = rt_cmd(s, "INFO %s", section);
    char key[128];
    const char *p;
    long long v = -1;

    snprintf(key, sizeof key, "\n%s:", field);
    CHECK(r->type == REDIS_REPLY_STRING);
    p = strstr(r->str, key);
    if (p)
        v = strtoll(p + strlen(key), NULL, 10);
    freeReplyObject(r);
    if (v < 0)
        rt_fail(__FILE__, __LINE__, "INFO %s has no field %s", section, field);
    return v;
}

long long rt_cmdstat_calls(rt_server *s, const char *cmd)
{
    redisReply *r = rt_cmd(s, "INFO commandstats");
    char key[64];
    const char *p;
    long long v = 0;

    snprintf(key, sizeof key, "cmdstat_%s:calls=", cmd);
    p = strstr(r->str, key);
    if (p)
        v = strtoll(p + strlen(key), NULL, 10);
    freeReplyObject(r);
    return v;
}

long long rt_commands_from_clients(rt_server *s)
{
    redisReply *r = rt_cmd(s, "INFO commandstats");
    const char *p = r->str;
    long long sum = 0;

    /* Lines look like "cmdstat_get:calls=3,usec=...". */
    while ((p = strstr(p, "cmdstat_")) != NULL) {
        const char *name = p + 8, *calls = strstr(p, ":calls=");
        if (!calls)
            break;
        if (strncmp(name, "info:", 5) != 0 &&
            strncmp(name, "config|resetstat:", 17) != 0 &&
            strncmp(name, "ping:", 5) != 0)
            sum += strtoll(calls + 7, NULL, 10);
        p = calls;
    }
    freeReplyObject(r);
    return sum;
}

int rt_info_says(rt_server *s, const char *section, const char *text)
{
    redisReply *x = rt_cmd(s, "INFO %s", section);
    int yes = x->type == REDIS_REPLY_STRING && strstr(x->str, text) != NULL;

    freeReplyObject(x);
    return yes;
}

rt_server *rt_replica_start(rt_server *master, const char *name,
                            const char *value)
{
    /* The server keeps pointers to its arguments (for restarts). */
    static char ofs[MAX_SERVERS][32];
    static int next;
    char *of = ofs[next++ % MAX_SERVERS];
    rt_server_opts o;
    rt_server *r;

    memset(&o, 0, sizeof o);
    o.binary = master->opts.binary; /* a replica runs its master's server */
    snprintf(of, sizeof ofs[0], "127.0.0.1 %d", rt_server_port(master));
    o.extra[0] = "--replicaof";
    o.extra[1] = of;
    o.extra[2] = name;
    o.extra[3] = value;
    r = rt_server_start(&o);
    RT_WAIT_UNTIL(rt_info_says(r, "replication", "master_link_status:up") &&
                      rt_info_says(master, "replication", "state=online"),
                  10000);
    return r;
}

int rt_cluster_ok(rt_server *s)
{
    redisReply *r = rt_cmd(s, "CLUSTER INFO");
    int ok = r->type == REDIS_REPLY_STRING &&
             strstr(r->str, "cluster_state:ok") != NULL;

    freeReplyObject(r);
    return ok;
}
