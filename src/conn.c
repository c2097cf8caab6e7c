/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Connections to Redis for the library: opening them (the transport, then
 * AUTH, SELECT and the scripts, all under one deadline), a small pool
 * shared by the client's threads, running commands and scripts, and turning
 * every failure and Redis error reply into an rlock code with its detail.
 * The connections themselves are src/net's state machines; this file is
 * where the client's settings and its thread's deadline meet them.
 *
 * Why a pool: a client is shared by many threads, and one connection would
 * make each thread wait for every other thread's round trip. Connections
 * are opened lazily up to max_connections. A connection that failed is
 * closed, never reused, so "a dropped connection is re-established on the
 * next call" falls out of the pool: the next call opens a new one. An idle
 * connection the server closed (restart, CLIENT KILL, timeout) is noticed
 * before reuse without a round trip: on a healthy idle RESP2 connection the
 * socket never has anything to read.
 *
 * Deadlines. Every call of the API has one absolute deadline on the
 * monotonic clock, fixed when it starts (rlock__call_begin): the command
 * timeout from then. Every exchange the call makes (waiting for a pooled
 * connection, connecting, AUTH, SELECT, the request, every byte of the
 * reply) ends by it; a waiting call starts a new deadline for each attempt.
 * The background thread has its own bound instead: the earliest lease end
 * of the client's holds (rlock__limit_round_trips), so that no server can
 * keep it from telling a holder that its lease ran out.
 */
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

static _Thread_local int64_t tl_bound_ns; /* background thread's bound */
static _Thread_local int64_t tl_call_ns;  /* the API call's deadline */
static _Thread_local int tl_sent;         /* the last eval's request left */

int rlock__outcome_unknown(int rc)
{
    return (rc == RLOCK_EIO || rc == RLOCK_ENOREPLY ||
            rc == RLOCK_EPROTO) &&
           tl_sent;
}

void rlock__limit_round_trips(int64_t deadline_ns)
{
    tl_bound_ns = deadline_ns;
    tl_call_ns = 0;
}

void rlock__call_begin(const rlock_client *c)
{
    tl_call_ns = rlock__now_ns() +
                 (int64_t)c->opts.command_timeout_ms * RLOCK__NS_PER_MS;
}

int64_t rlock__call_swap(int64_t deadline_ns)
{
    int64_t old = tl_call_ns;

    tl_call_ns = deadline_ns;
    return old;
}

int64_t rlock__deadline(int timeout_ms)
{
    int64_t d = rlock__now_ns() + (int64_t)timeout_ms * RLOCK__NS_PER_MS;

    if (tl_call_ns != 0 && tl_call_ns < d)
        d = tl_call_ns;
    if (tl_bound_ns != 0 && tl_bound_ns < d)
        d = tl_bound_ns;
    return d;
}

int rlock__round_trip_ms(int timeout_ms)
{
    int64_t left = (rlock__deadline(timeout_ms) - rlock__now_ns()) /
                   RLOCK__NS_PER_MS;

    return left < 1 ? 1 : (int)left;
}

int rlock__net_error(rlock_client *c, const rlock__neterr *e,
                     const char *what)
{
    switch (e->code) {
    case RLOCK_ENOREPLY:
        return rlock__fail(c, RLOCK_ENOREPLY,
                           "%s: no reply from %s within %d ms (%s)", what,
                           c->where, c->opts.command_timeout_ms, e->msg);
    case RLOCK_EPROTO:
        return rlock__fail(c, RLOCK_EPROTO, "%s: bad reply from %s: %s",
                           what, c->where, e->msg);
    case RLOCK_ENOMEM:
        return rlock__fail(c, RLOCK_ENOMEM, "%s: out of memory", what);
    case RLOCK_EIO:
        return rlock__fail(c, RLOCK_EIO, "%s: connection to %s lost: %s",
                           what, c->where, e->msg);
    default:
        return rlock__fail(c, e->code ? e->code : RLOCK_EIO, "%s: %s: %s",
                           what, c->where, e->msg);
    }
}

void rlock__endpoint_of(const rlock_client *c, const char *host, int port,
                        const char *path, rlock__endpoint *ep)
{
    memset(ep, 0, sizeof *ep);
    ep->host = host;
    ep->port = port;
    ep->path = path;
    ep->tls = c->tls;
    ep->sni = c->tls_sni;
    ep->bounds.reply_bytes = c->opts.max_reply_bytes;
    ep->bounds.bulk_bytes = c->opts.max_bulk_bytes;
    ep->bounds.array_elements = c->opts.max_array_elements;
    ep->bounds.depth = c->opts.max_depth;
    ep->keepalive = path == NULL;
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

/* An exchange on ctx: ncmds commands in one write, every reply by
 * deadline_ns; error replies are replies. On failure the connection is
 * broken (the caller closes it) and the error is recorded. */
int rlock__exchange(rlock_client *c, rlock__conn *ctx, int ncmds,
                    const rlock__cmd *cmds, redisReply **replies,
                    int64_t deadline_ns, const char *what)
{
    rlock__neterr e;
    int sent = 0, rc;

    rc = rlock__conn_call(ctx, ncmds, cmds, replies, deadline_ns, &e, &sent);
    tl_sent = tl_sent || sent;
    if (rc != RLOCK_OK)
        return rlock__net_error(c, &e, what);
    return RLOCK_OK;
}

/* One command, by deadline_ns. */
int rlock__command(rlock_client *c, rlock__conn *ctx, redisReply **out,
                   int argc, const char **argv, const size_t *lens,
                   int64_t deadline_ns, const char *what)
{
    rlock__cmd cmd = {argc, argv, lens};

    return rlock__exchange(c, ctx, 1, &cmd, out, deadline_ns, what);
}

/* A connection lost while connecting is a failure to connect; a server
 * that accepted the connection but does not answer (stopped, overloaded)
 * did not answer, as for any other command. */
static int handshake_error(rlock_client *c, int rc)
{
    char detail[512];

    if (rc == RLOCK_ENOREPLY)
        return rlock__fail(c, RLOCK_ENOREPLY,
                           "connecting to %s: no reply within %d ms",
                           c->where, c->opts.connect_timeout_ms);
    if (rc != RLOCK_EIO)
        return rc;
    snprintf(detail, sizeof detail, "%s", rlock_client_errmsg(c));
    return rlock__fail(c, RLOCK_ECONNECT, "%s", detail);
}

/*
 * What a new connection must be told before it serves locks, queued on it
 * in one write: AUTH, SELECT, and the scripts if the client does not know
 * their digests yet. Returns how many replies they will have (their
 * first_script-th on are SCRIPT LOADs), or an error.
 */
static int handshake_queue(rlock_client *c, rlock__conn *ctx,
                           int *first_script)
{
    const char *auth[3] = {"AUTH", c->username ? c->username : c->password,
                           c->password};
    const char *sel[2] = {"SELECT", NULL};
    char db[16];
    int n = 0, i, rc = RLOCK_OK;

    if (c->password)
        rc = rlock__conn_append(ctx, c->username ? 3 : 2, auth, NULL), n++;
    if (rc == RLOCK_OK && c->url.db != 0) {
        snprintf(db, sizeof db, "%d", c->url.db);
        sel[1] = db;
        rc = rlock__conn_append(ctx, 2, sel, NULL);
        n++;
    }
    *first_script = n;
    if (c->sha[0][0] == '\0')
        for (i = 0; rc == RLOCK_OK && i < RLOCK__S_COUNT; i++) {
            const char *load[3] = {"SCRIPT", "LOAD", rlock__script(i)->body};
            rc = rlock__conn_append(ctx, 3, load, NULL);
            n++;
        }
    if (rc != RLOCK_OK)
        return rlock__net_error(c, rlock__conn_error(ctx), "connecting");
    return n;
}

/* Checks the n handshake replies, taken from ctx in order. */
static int handshake_check(rlock_client *c, rlock__conn *ctx, int n,
                           int first_script)
{
    int i, rc = RLOCK_OK;

    for (i = 0; i < n; i++) {
        redisReply *r = NULL;
        if (!rlock__conn_take(ctx, &r))
            return rlock__fail(c, RLOCK_EPROTO, "connecting: a reply is "
                                                "missing");
        if (rc != RLOCK_OK) {
            freeReplyObject(r);
            continue;
        }
        if (r->type == REDIS_REPLY_ERROR) {
            rc = rlock__reply_error(c, r);
            if (i < first_script && rc == RLOCK_EREDIS)
                rc = rlock__fail(c, RLOCK_EREDIS, "%s: %s",
                                 i == 0 && c->password ? "AUTH" : "SELECT",
                                 r->str);
        } else if (i >= first_script) {
            if (r->type != REDIS_REPLY_STRING || r->len != 40) {
                rc = rlock__fail(c, RLOCK_EPROTO,
                                 "SCRIPT LOAD answered something other "
                                 "than a digest");
            } else {
                memcpy(c->sha[i - first_script], r->str, 40);
                c->sha[i - first_script][40] = '\0';
            }
        }
        freeReplyObject(r);
    }
    return rc;
}

static int handshake(rlock_client *c, rlock__conn *ctx, int64_t deadline_ns)
{
    int first_script, n = handshake_queue(c, ctx, &first_script), rc;
    size_t want;

    if (n <= 0)
        return n;
    want = (size_t)n;
    rc = rlock__net_run(&ctx, 1, &want, deadline_ns);
    if (rc == RLOCK_ENOREPLY)
        rlock__conn_fail(ctx, RLOCK_ENOREPLY, "no complete reply in time");
    if (rlock__conn_error(ctx)->code != 0)
        return handshake_error(
            c, rlock__net_error(c, rlock__conn_error(ctx), "connecting"));
    return handshake_check(c, ctx, n, first_script);
}

int rlock__connect_start(rlock_client *c, rlock__conn **out, int *hs,
                         int *first_script)
{
    rlock__endpoint ep;
    rlock__neterr e;
    int rc;

    rlock__endpoint_of(c, c->url.host, c->url.port, c->url.path, &ep);
    rc = rlock__conn_start(&ep, out, &e);
    if (rc != RLOCK_OK)
        return rlock__fail(c, rc, "cannot connect to %s: %s", c->where,
                           e.msg);
    *hs = handshake_queue(c, *out, first_script);
    if (*hs < 0) {
        rlock__conn_close(*out);
        return *hs;
    }
    return RLOCK_OK;
}

int rlock__connect_finish(rlock_client *c, rlock__conn *ctx, int hs,
                          int first_script)
{
    return handshake_check(c, ctx, hs, first_script);
}

int rlock__pool_try(rlock_client *c, rlock__conn **out)
{
    int got = -1;

    *out = NULL;
    pthread_mutex_lock(&c->pool_mu);
    while (c->nidle > 0) {
        rlock__conn *ctx = c->idle[--c->nidle];
        if (rlock__conn_idle_ok(ctx)) {
            *out = ctx;
            got = 1;
            break;
        }
        rlock__conn_close(ctx);
        c->nopen--;
    }
    if (got < 0 && c->nopen < c->opts.max_connections) {
        c->nopen++;
        got = 0;
    }
    pthread_mutex_unlock(&c->pool_mu);
    return got;
}

void rlock__pool_giveback(rlock_client *c)
{
    pthread_mutex_lock(&c->pool_mu);
    c->nopen--;
    pthread_cond_signal(&c->pool_cv);
    pthread_mutex_unlock(&c->pool_mu);
}

int rlock__connect(rlock_client *c, rlock__conn **out)
{
    if (c->nsentinels)
        return rlock__sentinel_connect(c, out);
    if (c->cluster)
        return rlock__cluster_connect(c, out);
    return rlock__connect_to(c, c->url.host, c->url.port, c->url.path, out);
}

int rlock__open_conn(rlock_client *c, const char *host, int port,
                     const char *path, int64_t deadline_ns,
                     rlock__conn **out)
{
    rlock__endpoint ep;
    rlock__neterr e;
    int rc;

    rlock__endpoint_of(c, host, port, path, &ep);
    rc = rlock__conn_open(&ep, deadline_ns, out, &e);
    if (rc == RLOCK_ENOREPLY)
        return rlock__fail(c, rc, "connecting to %s: %s", c->where, e.msg);
    if (rc != RLOCK_OK) {
        if (path || (host && c->url.host && strcmp(host, c->url.host) == 0 &&
                     port == c->url.port))
            return rlock__fail(c, rc, "cannot connect to %s: %s", c->where,
                               e.msg);
        return rlock__fail(c, rc, "cannot connect to %s (%s:%d): %s",
                           c->where, host, port, e.msg);
    }
    return RLOCK_OK;
}

int rlock__connect_to(rlock_client *c, const char *host, int port,
                      const char *path, rlock__conn **out)
{
    int64_t deadline = rlock__deadline(c->opts.connect_timeout_ms);
    rlock__conn *ctx;
    int rc;

    rc = rlock__open_conn(c, host, port, path, deadline, &ctx);
    if (rc != RLOCK_OK)
        return rc;
    if ((rc = handshake(c, ctx, deadline)) != RLOCK_OK) {
        rlock__conn_close(ctx);
        return rc;
    }
    *out = ctx;
    return RLOCK_OK;
}

int rlock__conn_get(rlock_client *c, rlock__conn **out)
{
    int64_t deadline = rlock__deadline(c->opts.command_timeout_ms);
    struct timespec until;
    int rc;

    /* A Redlock client talks to its nodes only through redlock.c; a
     * request meant for one server must not reach it. */
    if (c->nnodes)
        return rlock__fail(c, RLOCK_EINVAL,
                           "this operation is not available on a redlock:// "
                           "client");

    until.tv_sec = (time_t)(deadline / 1000000000);
    until.tv_nsec = (long)(deadline % 1000000000);
    pthread_mutex_lock(&c->pool_mu);
    for (;;) {
        while (c->nidle > 0) {
            rlock__conn *ctx = c->idle[--c->nidle];
            if (rlock__conn_idle_ok(ctx)) {
                pthread_mutex_unlock(&c->pool_mu);
                *out = ctx;
                return RLOCK_OK;
            }
            rlock__conn_close(ctx);
            c->nopen--;
        }
        if (c->nopen < c->opts.max_connections) {
            rlock__conn *ctx = NULL;
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
                               "no free connection to %s in time (all %d "
                               "busy)",
                               c->where, c->opts.max_connections);
        }
    }
}

void rlock__conn_put(rlock_client *c, rlock__conn *ctx, int broken)
{
    pthread_mutex_lock(&c->pool_mu);
    if (broken || rlock__conn_error(ctx)->code != 0 ||
        rlock__conn_pending(ctx) > 0) {
        rlock__conn_close(ctx);
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
        rlock__conn_close(c->idle[--c->nidle]);
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

int rlock__script_argv(rlock_client *c, enum rlock__script s, int nkeys,
                       const char **keys, const size_t *key_lens, int nargs,
                       const char **args, const size_t *arg_lens,
                       rlock__script_call *call)
{
    int argc = 3 + nkeys + nargs, i;

    call->argv = call->small_argv;
    call->lens = call->small_lens;
    if (argc > RLOCK__SMALL_ARGV) {
        call->argv = malloc(sizeof *call->argv * (size_t)argc);
        call->lens = malloc(sizeof *call->lens * (size_t)argc);
        if (!call->argv || !call->lens) {
            free(call->argv);
            free(call->lens);
            call->argv = NULL;
            call->lens = NULL;
            return rlock__fail(c, RLOCK_ENOMEM, "out of memory");
        }
    }
    call->argc = argc;
    snprintf(call->nk, sizeof call->nk, "%d", nkeys);
    call->argv[0] = "EVALSHA";
    call->argv[1] = c->sha[s];
    call->argv[2] = call->nk;
    for (i = 0; i < nkeys; i++) {
        call->argv[3 + i] = keys[i];
        call->lens[3 + i] = key_lens[i];
    }
    for (i = 0; i < nargs; i++) {
        call->argv[3 + nkeys + i] = args[i];
        call->lens[3 + nkeys + i] = arg_lens[i];
    }
    if (c->sha[s][0] == '\0')
        rlock__script_call_body(call, s);
    call->lens[0] = strlen(call->argv[0]);
    call->lens[1] = strlen(call->argv[1]);
    call->lens[2] = strlen(call->nk);
    return RLOCK_OK;
}

void rlock__script_call_body(rlock__script_call *call, enum rlock__script s)
{
    call->argv[0] = "EVAL";
    call->argv[1] = rlock__script(s)->body;
    call->lens[0] = 4;
    call->lens[1] = strlen(call->argv[1]);
}

void rlock__script_call_free(rlock__script_call *call)
{
    if (call->argv != call->small_argv) {
        free(call->argv);
        free(call->lens);
    }
}

int rlock__is_noscript(const redisReply *r)
{
    return r->type == REDIS_REPLY_ERROR && r->str &&
           strncmp(r->str, "NOSCRIPT", 8) == 0;
}

/* The script (behind ASKING, in front of WAIT, as asked) in one write. */
static int eval_once(rlock_client *c, rlock__conn *ctx,
                     rlock__script_call *call, int asking, int replicas,
                     int wait_ms, int64_t deadline, const char *what,
                     redisReply **out, long long *acks)
{
    const char *asking_argv[1] = {"ASKING"};
    const char *wait_argv[3] = {"WAIT", NULL, NULL};
    rlock__cmd cmds[3];
    redisReply *replies[3] = {0};
    char n[16], t[16];
    int ncmds = 0, i, rc, script_at;

    if (asking) {
        cmds[ncmds].argc = 1;
        cmds[ncmds].argv = asking_argv;
        cmds[ncmds++].lens = NULL;
    }
    script_at = ncmds;
    cmds[ncmds].argc = call->argc;
    cmds[ncmds].argv = call->argv;
    cmds[ncmds++].lens = call->lens;
    if (replicas > 0) {
        snprintf(n, sizeof n, "%d", replicas);
        snprintf(t, sizeof t, "%d", wait_ms);
        wait_argv[1] = n;
        wait_argv[2] = t;
        cmds[ncmds].argc = 3;
        cmds[ncmds].argv = wait_argv;
        cmds[ncmds++].lens = NULL;
    }
    rc = rlock__exchange(c, ctx, ncmds, cmds, replies, deadline, what);
    if (rc != RLOCK_OK)
        return rc;
    if (replicas > 0)
        *acks = replies[ncmds - 1]->type == REDIS_REPLY_INTEGER
                    ? replies[ncmds - 1]->integer
                    : -1;
    for (i = 0; i < ncmds; i++)
        if (i != script_at)
            freeReplyObject(replies[i]);
    *out = replies[script_at];
    return RLOCK_OK;
}

int rlock__eval_ex(rlock_client *c, enum rlock__script s, redisReply **out,
                   int nkeys, const char **keys, const size_t *key_lens,
                   int nargs, const char **args, const size_t *arg_lens,
                   int replicas, long long *acks, int asking)
{
    const rlock__script_src *src = rlock__script(s);
    rlock__script_call call;
    int rc, wait_ms = 0;
    int64_t deadline;
    rlock__conn *ctx;
    redisReply *r = NULL;

    rc = rlock__script_argv(c, s, nkeys, keys, key_lens, nargs, args,
                            arg_lens, &call);
    if (rc != RLOCK_OK)
        return rc;
    tl_sent = 0;
    if (acks)
        *acks = replicas;
    /* With a WAIT behind the script, its reply may come sync_timeout_ms
     * later; WAIT itself never waits past the exchange's deadline. */
    deadline = rlock__deadline(c->opts.command_timeout_ms);
    if (replicas > 0) {
        deadline += (int64_t)c->opts.sync_timeout_ms * RLOCK__NS_PER_MS;
        if (tl_bound_ns != 0 && tl_bound_ns < deadline)
            deadline = tl_bound_ns;
        wait_ms = (int)((deadline - rlock__now_ns()) / RLOCK__NS_PER_MS);
        if (wait_ms > c->opts.sync_timeout_ms)
            wait_ms = c->opts.sync_timeout_ms;
        if (wait_ms < 1)
            wait_ms = 1;
    }
    rc = rlock__conn_get(c, &ctx);
    if (rc == RLOCK_OK) {
        rc = eval_once(c, ctx, &call, asking, replicas, wait_ms, deadline,
                       src->name, &r, acks);
        /* The script cache is empty after a restart or SCRIPT FLUSH: send
         * the body once, which caches it again under the same digest. */
        if (rc == RLOCK_OK && rlock__is_noscript(r)) {
            freeReplyObject(r);
            r = NULL;
            rlock__script_call_body(&call, s);
            rc = eval_once(c, ctx, &call, asking, replicas, wait_ms, deadline,
                           src->name, &r, acks);
        }
        rlock__conn_put(c, ctx, rc != RLOCK_OK);
    }
    rlock__script_call_free(&call);
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
