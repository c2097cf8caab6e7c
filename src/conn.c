/*
 * Connections to Redis: opening them (timeouts, AUTH, SELECT), a small pool
 * shared by the client's threads, running commands and scripts, and turning
 * every hiredis failure and Redis error reply into an rlock code with its
 * detail.
 *
 * Why a pool: a client is shared by many threads, and one connection would
 * make each thread wait for every other thread's round trip. Connections
 * are opened lazily up to max_connections. A connection that failed is
 * closed, never reused, so "a dropped connection is re-established on the
 * next call" falls out of the pool: the next call opens a new one. An idle
 * connection the server closed (restart, CLIENT KILL, timeout) is noticed
 * before reuse without a round trip: on a healthy idle RESP2 connection the
 * socket never has anything to read.
 */
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

static _Thread_local int64_t tl_deadline_ns;
static _Thread_local int tl_reply_ms; /* the reply timeout in force */
static _Thread_local int tl_sent;     /* the last eval's request went out */

int rlock__outcome_unknown(int rc)
{
    return (rc == RLOCK_EIO || rc == RLOCK_ENOREPLY) && tl_sent;
}

void rlock__limit_round_trips(int64_t deadline_ns)
{
    tl_deadline_ns = deadline_ns;
}

int rlock__round_trip_ms(int timeout_ms)
{
    int64_t left;

    if (tl_deadline_ns == 0)
        return timeout_ms;
    left = (tl_deadline_ns - rlock__now_ns()) / RLOCK__NS_PER_MS;
    if (left < 1)
        left = 1;
    return left < timeout_ms ? (int)left : timeout_ms;
}

static struct timeval ms_to_tv(int ms)
{
    struct timeval tv;

    tv.tv_sec = ms / 1000;
    tv.tv_usec = (ms % 1000) * 1000;
    return tv;
}

int rlock__ctx_error(rlock_client *c, const redisContext *ctx,
                     const char *what)
{
    if (rlock__redis_timed_out(ctx))
        return rlock__fail(c, RLOCK_ENOREPLY,
                           "%s: no reply from %s within %d ms", what,
                           c->where,
                           tl_reply_ms ? tl_reply_ms
                                       : c->opts.command_timeout_ms);
    switch (ctx->err) {
    case REDIS_ERR_EOF:
        return rlock__fail(c, RLOCK_EIO, "%s: %s closed the connection", what,
                           c->where);
    case REDIS_ERR_PROTOCOL:
        return rlock__fail(c, RLOCK_EPROTO, "%s: protocol error from %s: %s",
                           what, c->where, ctx->errstr);
    case REDIS_ERR_OOM:
        return rlock__fail(c, RLOCK_ENOMEM, "%s: out of memory", what);
    default:
        return rlock__fail(c, RLOCK_EIO, "%s: I/O error with %s: %s", what,
                           c->where, ctx->errstr);
    }
}

static int starts_with(const char *s, size_t len, const char *prefix)
{
    size_t n = strlen(prefix);

    return len >= n && memcmp(s, prefix, n) == 0;
}

/* Error replies that say the deployment cannot serve locks now. */
static const struct {
    const char *prefix;
    int code;
    const char *meaning; /* follows the server's address */
} deployment_errors[] = {
    {"NOREPLICAS", RLOCK_EREPLICAS,
     "refused the write: too few replicas are connected "
     "(min-replicas-to-write)"},
    {"READONLY", RLOCK_EUNAVAILABLE, "is a read-only replica, not the master"},
    {"LOADING", RLOCK_EUNAVAILABLE, "is still loading its data"},
    {"MASTERDOWN", RLOCK_EUNAVAILABLE, "is a replica that lost its master"},
    {"CLUSTERDOWN", RLOCK_EUNAVAILABLE, "belongs to a cluster that is down"},
};

/* Whether the error's code (its first word) is word. */
static int first_word_is(const char *s, size_t len, const char *word)
{
    size_t n = strlen(word);

    return starts_with(s, len, word) && (len == n || s[n] == ' ');
}

int rlock__reply_error(rlock_client *c, const redisReply *r)
{
    const char *s = r->str ? r->str : "";
    size_t len = r->str ? (size_t)r->len : 0;
    size_t i;

    /* States of the deployment, not mistakes of the request, known by
     * their code: say what they mean, keep Redis's words. */
    for (i = 0; i < sizeof deployment_errors / sizeof deployment_errors[0];
         i++)
        if (first_word_is(s, len, deployment_errors[i].prefix))
            return rlock__fail(c, deployment_errors[i].code, "%s %s: %.*s",
                               c->where, deployment_errors[i].meaning,
                               (int)len, s);
    /* An ACL that denies a command or key is not a credentials problem:
     * the user is known, it may not do this. */
    if (first_word_is(s, len, "NOPERM"))
        return rlock__fail(c, RLOCK_EPERM, "%s refused the command: %.*s",
                           c->where, (int)len, s);
    if (starts_with(s, len, "NOAUTH") || starts_with(s, len, "WRONGPASS") ||
        strstr(s, "invalid password") != NULL ||
        strstr(s, "invalid username-password") != NULL ||
        strstr(s, "without any password configured") != NULL)
        return rlock__fail(c, RLOCK_EAUTH, "%s refused: %.*s", c->where,
                           (int)len, s);
    return rlock__fail(c, RLOCK_EREDIS, "%.*s", (int)len, s);
}

int rlock__replicas_error(rlock_client *c, const char *what, long long acks,
                          int wanted, const char *what_done)
{
    if (acks < 0)
        return rlock__fail(c, RLOCK_EREPLICAS,
                           "%s: WAIT failed on %s; %s", what, c->where,
                           what_done);
    return rlock__fail(c, RLOCK_EREPLICAS,
                       "%s: %lld of %d replicas acknowledged within %d ms; %s",
                       what, acks, wanted, c->opts.sync_timeout_ms, what_done);
}

int rlock__sync_replicas(const rlock_mutex *m)
{
    if (m->opts.sync_replicas == RLOCK_SYNC_OFF)
        return 0;
    return m->opts.sync_replicas > 0 ? m->opts.sync_replicas
                                     : m->c->opts.sync_replicas;
}

/* Sends argv on ctx and reads the reply; error replies are returned as
 * replies. On failure the connection is unusable. */
static int roundtrip(rlock_client *c, redisContext *ctx, redisReply **out,
                     int argc, const char **argv, const size_t *lens,
                     const char *what)
{
    redisReply *r = redisCommandArgv(ctx, argc, argv, lens);

    if (!r)
        return rlock__ctx_error(c, ctx, what);
    *out = r;
    return RLOCK_OK;
}

/* roundtrip, with "WAIT replicas wait_ms" sent behind argv in the same
 * write; *acks gets WAIT's answer, or -1 if it answered an error. */
static int roundtrip_wait(rlock_client *c, redisContext *ctx,
                          redisReply **out, int argc, const char **argv,
                          const size_t *lens, const char *what, int replicas,
                          int wait_ms, long long *acks)
{
    char n[16], t[16];
    const char *wargv[3] = {"WAIT", n, t};
    void *r = NULL, *w = NULL;

    snprintf(n, sizeof n, "%d", replicas);
    snprintf(t, sizeof t, "%d", wait_ms);
    if (redisAppendCommandArgv(ctx, argc, argv, lens) != REDIS_OK ||
        redisAppendCommandArgv(ctx, 3, wargv, NULL) != REDIS_OK)
        return rlock__ctx_error(c, ctx, what);
    if (redisGetReply(ctx, &r) != REDIS_OK || !r)
        return rlock__ctx_error(c, ctx, what);
    if (redisGetReply(ctx, &w) != REDIS_OK || !w) {
        freeReplyObject(r);
        return rlock__ctx_error(c, ctx, what);
    }
    *acks = ((redisReply *)w)->type == REDIS_REPLY_INTEGER
                ? ((redisReply *)w)->integer
                : -1;
    freeReplyObject(w);
    *out = r;
    return RLOCK_OK;
}

/* An I/O failure while connecting is a failure to connect; keep its
 * detail. */
static int as_connect_error(rlock_client *c)
{
    char detail[512];

    snprintf(detail, sizeof detail, "%s", rlock_client_errmsg(c));
    return rlock__fail(c, RLOCK_ECONNECT, "%s", detail);
}

/* A connection lost while connecting is a failure to connect; a server
 * that accepted the connection but does not answer (stopped, overloaded)
 * is a timeout, as it is for any other command. */
static int handshake_error(rlock_client *c, int rc)
{
    if (rc == RLOCK_ENOREPLY)
        return rlock__fail(c, RLOCK_ENOREPLY,
                           "connecting to %s: no reply within %d ms",
                           c->where, c->opts.connect_timeout_ms);
    return rc == RLOCK_EIO ? as_connect_error(c) : rc;
}

/* Runs a handshake command; error replies become codes. */
static int handshake(rlock_client *c, redisContext *ctx, int argc,
                     const char **argv, const char *what)
{
    redisReply *r = NULL;
    int rc = roundtrip(c, ctx, &r, argc, argv, NULL, what);

    if (rc != RLOCK_OK)
        return handshake_error(c, rc);
    if (r->type == REDIS_REPLY_ERROR)
        rc = rlock__reply_error(c, r);
    freeReplyObject(r);
    return rc;
}

int rlock__scripts_load(rlock_client *c, redisContext *ctx)
{
    int i, rc = RLOCK_OK;

    for (i = 0; i < RLOCK__S_COUNT; i++) {
        const char *argv[3] = {"SCRIPT", "LOAD", rlock__script(i)->body};
        if (redisAppendCommandArgv(ctx, 3, argv, NULL) != REDIS_OK)
            return rlock__ctx_error(c, ctx, "loading scripts");
    }
    for (i = 0; i < RLOCK__S_COUNT; i++) {
        redisReply *r = NULL;
        if (redisGetReply(ctx, (void **)&r) != REDIS_OK || !r)
            return rlock__ctx_error(c, ctx, "loading scripts");
        if (r->type == REDIS_REPLY_ERROR) {
            if (rc == RLOCK_OK)
                rc = rlock__reply_error(c, r);
        } else if (r->type != REDIS_REPLY_STRING || r->len != 40) {
            if (rc == RLOCK_OK)
                rc = rlock__fail(c, RLOCK_EPROTO,
                                 "SCRIPT LOAD answered something other "
                                 "than a digest");
        } else {
            memcpy(c->sha[i], r->str, 40);
            c->sha[i][40] = '\0';
        }
        freeReplyObject(r);
    }
    return rc;
}

/* Sets ctx's timeout to what is left of the connect timeout (which covers
 * the whole handshake), within the thread's bound. */
static void handshake_timeout(rlock_client *c, redisContext *ctx,
                              int64_t until_ns)
{
    int64_t left = (until_ns - rlock__now_ns()) / RLOCK__NS_PER_MS;
    int ms = rlock__round_trip_ms(c->opts.connect_timeout_ms);

    if (left < 1)
        left = 1;
    if (left < ms)
        ms = (int)left;
    tl_reply_ms = ms;
    redisSetTimeout(ctx, ms_to_tv(ms));
}

int rlock__connect(rlock_client *c, redisContext **out)
{
    if (c->nsentinels)
        return rlock__sentinel_connect(c, out);
    if (c->cluster)
        return rlock__cluster_connect(c, out);
    return rlock__connect_to(c, c->url.host, c->url.port, c->url.path, out);
}

int rlock__connect_to(rlock_client *c, const char *host, int port,
                      const char *path, redisContext **out)
{
    int64_t until_ns = rlock__now_ns() + (int64_t)c->opts.connect_timeout_ms *
                                             RLOCK__NS_PER_MS;
    struct timeval ct =
        ms_to_tv(rlock__round_trip_ms(c->opts.connect_timeout_ms));
    redisContext *ctx;
    char db[16];
    int rc;

    if (path)
        ctx = redisConnectUnixWithTimeout(path, ct);
    else
        ctx = redisConnectWithTimeout(host, port, ct);
    if (!ctx)
        return rlock__fail(c, RLOCK_ENOMEM, "out of memory");
    if (ctx->err) {
        if (path)
            rc = rlock__fail(c, RLOCK_ECONNECT, "cannot connect to %s: %s",
                             c->where, ctx->errstr);
        else
            rc = rlock__fail(c, RLOCK_ECONNECT,
                             "cannot connect to %s (%s:%d): %s", c->where,
                             host, port, ctx->errstr);
        redisFree(ctx);
        return rc;
    }
    /* The handshake is part of connecting: a server that accepts the TCP
     * connection but never answers (stopped, overloaded) fails here within
     * the connect timeout. */
    if (!path)
        redisEnableKeepAlive(ctx);
    rc = RLOCK_OK;
    if (c->password) {
        const char *argv[3] = {"AUTH", c->username ? c->username : c->password,
                               c->password};
        handshake_timeout(c, ctx, until_ns);
        rc = handshake(c, ctx, c->username ? 3 : 2, argv, "AUTH");
    }
    if (rc == RLOCK_OK && c->url.db != 0) {
        const char *argv[2] = {"SELECT", db};
        snprintf(db, sizeof db, "%d", c->url.db);
        handshake_timeout(c, ctx, until_ns);
        rc = handshake(c, ctx, 2, argv, "SELECT");
    }
    if (rc == RLOCK_OK && c->sha[0][0] == '\0') {
        handshake_timeout(c, ctx, until_ns);
        rc = rlock__scripts_load(c, ctx);
        rc = handshake_error(c, rc);
    }
    if (rc != RLOCK_OK) {
        redisFree(ctx);
        return rc;
    }
    redisSetTimeout(ctx, ms_to_tv(c->opts.command_timeout_ms));
    *out = ctx;
    return RLOCK_OK;
}

/* A healthy idle connection has nothing to read; EOF, a reset or stray
 * bytes all mean it must not be reused. */
static int idle_conn_ok(redisContext *ctx)
{
    struct pollfd p;

    if (ctx->err)
        return 0;
    p.fd = rlock__redis_fd(ctx);
    p.events = POLLIN;
    p.revents = 0;
    return poll(&p, 1, 0) == 0;
}

int rlock__conn_get(rlock_client *c, redisContext **out)
{
    struct timespec until;
    int rc, wait_ms = rlock__round_trip_ms(c->opts.command_timeout_ms);

    /* A Redlock client talks to its nodes only through redlock.c; a
     * request meant for one server must not reach it. */
    if (c->nnodes)
        return rlock__fail(c, RLOCK_EINVAL,
                           "this operation is not available on a redlock:// "
                           "client");

    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += wait_ms / 1000;
    until.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&c->pool_mu);
    for (;;) {
        while (c->nidle > 0) {
            redisContext *ctx = c->idle[--c->nidle];
            if (idle_conn_ok(ctx)) {
                pthread_mutex_unlock(&c->pool_mu);
                *out = ctx;
                return RLOCK_OK;
            }
            redisFree(ctx);
            c->nopen--;
        }
        if (c->nopen < c->opts.max_connections) {
            redisContext *ctx = NULL;
            c->nopen++;
            pthread_mutex_unlock(&c->pool_mu);
            rc = rlock__connect(c, &ctx);
            if (rc != RLOCK_OK) {
                pthread_mutex_lock(&c->pool_mu);
                c->nopen--;
                pthread_cond_signal(&c->pool_cv);
                pthread_mutex_unlock(&c->pool_mu);
                return rc;
            }
            *out = ctx;
            return RLOCK_OK;
        }
        if (pthread_cond_timedwait(&c->pool_cv, &c->pool_mu, &until) != 0 &&
            c->nidle == 0 && c->nopen >= c->opts.max_connections) {
            pthread_mutex_unlock(&c->pool_mu);
            return rlock__fail(c, RLOCK_ENOREPLY,
                               "no free connection to %s within %d ms",
                               c->where, c->opts.command_timeout_ms);
        }
    }
}

void rlock__conn_put(rlock_client *c, redisContext *ctx, int broken)
{
    pthread_mutex_lock(&c->pool_mu);
    if (broken || ctx->err) {
        redisFree(ctx);
        c->nopen--;
    } else {
        c->idle[c->nidle++] = ctx;
    }
    pthread_cond_signal(&c->pool_cv);
    pthread_mutex_unlock(&c->pool_mu);
}

void rlock__pool_drain(rlock_client *c)
{
    pthread_mutex_lock(&c->pool_mu);
    while (c->nidle > 0) {
        redisFree(c->idle[--c->nidle]);
        c->nopen--;
    }
    pthread_mutex_unlock(&c->pool_mu);
}

int rlock__eval(rlock_client *c, enum rlock__script s, redisReply **out,
                int nkeys, const char **keys, const size_t *key_lens,
                int nargs, const char **args, const size_t *arg_lens)
{
    return rlock__eval_sync(c, s, out, nkeys, keys, key_lens, nargs, args,
                            arg_lens, 0, NULL);
}

int rlock__eval_sync(rlock_client *c, enum rlock__script s, redisReply **out,
                     int nkeys, const char **keys, const size_t *key_lens,
                     int nargs, const char **args, const size_t *arg_lens,
                     int replicas, long long *acks)
{
    if (c->cluster)
        return rlock__cluster_eval(c, s, out, nkeys, keys, key_lens, nargs,
                                   args, arg_lens, replicas, acks);
    return rlock__eval_ex(c, s, out, nkeys, keys, key_lens, nargs, args,
                          arg_lens, replicas, acks, 0);
}

/* ASKING before a command for a slot being imported (Cluster's ASK). */
static int send_asking(rlock_client *c, redisContext *ctx, const char *what)
{
    redisReply *r = redisCommand(ctx, "ASKING");

    if (!r)
        return rlock__ctx_error(c, ctx, what);
    freeReplyObject(r);
    return RLOCK_OK;
}

int rlock__eval_ex(rlock_client *c, enum rlock__script s, redisReply **out,
                   int nkeys, const char **keys, const size_t *key_lens,
                   int nargs, const char **args, const size_t *arg_lens,
                   int replicas, long long *acks, int asking)
{
    const rlock__script_src *src = rlock__script(s);
    const char *small_argv[16];
    size_t small_lens[16];
    const char **argv = small_argv;
    size_t *lens = small_lens;
    int argc = 3 + nkeys + nargs, i, rc, full_ms;
    char nk[16];
    redisContext *ctx;
    redisReply *r = NULL;

    if (argc > 16) {
        argv = malloc(sizeof *argv * (size_t)argc);
        lens = malloc(sizeof *lens * (size_t)argc);
        if (!argv || !lens) {
            free(argv);
            free(lens);
            return rlock__fail(c, RLOCK_ENOMEM, "out of memory");
        }
    }
    snprintf(nk, sizeof nk, "%d", nkeys);
    argv[0] = "EVALSHA";
    argv[1] = c->sha[s];
    argv[2] = nk;
    for (i = 0; i < nkeys; i++) {
        argv[3 + i] = keys[i];
        lens[3 + i] = key_lens[i];
    }
    for (i = 0; i < nargs; i++) {
        argv[3 + nkeys + i] = args[i];
        lens[3 + nkeys + i] = arg_lens[i];
    }
    if (c->sha[s][0] == '\0') {
        argv[0] = "EVAL";
        argv[1] = src->body;
    }
    lens[0] = strlen(argv[0]);
    lens[1] = strlen(argv[1]);
    lens[2] = strlen(nk);

    tl_sent = 0;
    tl_reply_ms = 0;
    if (acks)
        *acks = replicas;
    /* With a WAIT behind the script, its reply may come sync_timeout_ms
     * later; WAIT itself never waits past the round trip's bound. */
    full_ms = c->opts.command_timeout_ms +
              (replicas > 0 ? c->opts.sync_timeout_ms : 0);
    rc = rlock__conn_get(c, &ctx);
    if (rc == RLOCK_OK) {
        int reply_ms = rlock__round_trip_ms(full_ms);
        int wait_ms = reply_ms < c->opts.sync_timeout_ms
                          ? reply_ms
                          : c->opts.sync_timeout_ms;
        if (reply_ms != c->opts.command_timeout_ms)
            redisSetTimeout(ctx, ms_to_tv(reply_ms));
        tl_reply_ms = reply_ms;
        tl_sent = 1;
        rc = asking ? send_asking(c, ctx, src->name) : RLOCK_OK;
        if (rc == RLOCK_OK)
            rc = replicas > 0
                     ? roundtrip_wait(c, ctx, &r, argc, argv, lens, src->name,
                                      replicas, wait_ms, acks)
                     : roundtrip(c, ctx, &r, argc, argv, lens, src->name);
        /* The script cache is empty after a restart or SCRIPT FLUSH: send
         * the body once, which caches it again under the same digest. */
        if (rc == RLOCK_OK && r->type == REDIS_REPLY_ERROR && r->str &&
            strncmp(r->str, "NOSCRIPT", 8) == 0) {
            freeReplyObject(r);
            r = NULL;
            argv[0] = "EVAL";
            argv[1] = src->body;
            lens[0] = 4;
            lens[1] = strlen(src->body);
            /* What is left of the bound, not what was left before. */
            if (reply_ms != c->opts.command_timeout_ms) {
                reply_ms = rlock__round_trip_ms(full_ms);
                redisSetTimeout(ctx, ms_to_tv(reply_ms));
                tl_reply_ms = reply_ms;
                if (reply_ms < wait_ms)
                    wait_ms = reply_ms;
            }
            rc = asking ? send_asking(c, ctx, src->name) : RLOCK_OK;
            if (rc == RLOCK_OK)
                rc = replicas > 0
                         ? roundtrip_wait(c, ctx, &r, argc, argv, lens,
                                          src->name, replicas, wait_ms, acks)
                         : roundtrip(c, ctx, &r, argc, argv, lens, src->name);
        }
        if (reply_ms != c->opts.command_timeout_ms && rc == RLOCK_OK)
            redisSetTimeout(ctx, ms_to_tv(c->opts.command_timeout_ms));
        rlock__conn_put(c, ctx, rc != RLOCK_OK);
    }
    if (argv != small_argv) {
        free(argv);
        free(lens);
    }
    if (rc == RLOCK_OK && r->type == REDIS_REPLY_ERROR) {
        rc = rlock__reply_error(c, r);
        freeReplyObject(r);
    }
    if (rc != RLOCK_OK) {
        /* Behind Sentinel, a lost connection or a master that is one no
         * more means: ask the sentinels again before the next connect. */
        if (c->nsentinels)
            rlock__sentinel_suspect(c, rc);
        return rc;
    }
    *out = r;
    return RLOCK_OK;
}
