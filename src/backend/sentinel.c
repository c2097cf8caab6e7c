/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Redis Sentinel (redis-sentinel://host:port[,host:port...]/master-name
 * [?db=N]): the master is found by asking the sentinels, and found again
 * when it may have changed.
 *
 * Every new connection goes to the master as the sentinels last named it,
 * and is checked with ROLE in its handshake: a server that is no longer
 * the master (the sentinels have not noticed yet, or a stale sentinel
 * answered) is not used. The address is asked for again after a
 * connection was lost or refused, or after a reply said the server is a
 * replica (READONLY, MASTERDOWN): a failover closes the old master's
 * client connections (Sentinel kills them), so every client of a
 * failed-over master comes here. Holds then live on the new master: the
 * watchdog's next renewal finds each key there or not, and a hold whose
 * key did not reach the new master is reported lost (on_lost). Waiters
 * subscribe again on their new subscriber connection, as after any lost
 * connection.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "util/clock.h"

#define SENTINELS_MAX 16

typedef struct sentinel {
    rlock__url sentinels[SENTINELS_MAX];
    int nsentinels;
    char *master_name;
    rlock__node_cfg cfg;
    rlock__node *node;  /* the master, where the sentinels last said */
    pthread_mutex_t mu; /* guards stale and the node's moves */
    int stale;          /* ask the sentinels before the next request */
} sentinel;

static sentinel *of(const rlock_client *c)
{
    return c->bk;
}

int rlock__sentinel_parse(const char *spec, rlock__url *sentinels, int max,
                          int *n, char **master_name, int *db, rlock__err *e)
{
    const char *slash = strchr(spec, '/'), *q, *name, *name_end;

    *n = 0;
    *master_name = NULL;
    *db = 0;
    if (!slash || slash == spec)
        return rlock__err_set(e, RLOCK_EINVAL,
                              "sentinel URL: redis-sentinel://host:port,.../"
                              "master-name");
    name = slash + 1;
    q = strchr(name, '?');
    name_end = q ? q : name + strlen(name);
    if (name_end == name || memchr(name, '/', (size_t)(name_end - name)))
        return rlock__err_set(e, RLOCK_EINVAL,
                              "sentinel URL: missing master name after '/'");
    if (q) {
        char *end;
        long v;
        if (strncmp(q + 1, "db=", 3) != 0 || !q[4] || q[4] == '-' ||
            q[4] == '+')
            return rlock__err_set(e, RLOCK_EINVAL,
                                  "sentinel URL: the only parameter is db=N");
        v = strtol(q + 4, &end, 10);
        if (*end || v < 0 || v > 1000000)
            return rlock__err_set(e, RLOCK_EINVAL,
                                  "sentinel URL: db must be a number from 0");
        *db = (int)v;
    }
    *master_name = strndup(name, (size_t)(name_end - name));
    if (!*master_name)
        return rlock__err_set(e, RLOCK_ENOMEM, "out of memory");
    return rlock__url_list_parse(spec, slash, sentinels, max, n, "sentinel", e);
}

/* Asks the sentinels, in the order given, where the master is, and
 * points the node there. Each sentinel is given the connect timeout for
 * its exchange, within the call's deadline. */
static int resolve(rlock_client *c, rlock__call *call)
{
    sentinel *s = of(c);
    char errs[400] = "";
    size_t len = 0;
    int i, known = 0;

    for (i = 0; i < s->nsentinels; i++) {
        const rlock__url *u = &s->sentinels[i];
        const char *argv[3] = {"SENTINEL", "get-master-addr-by-name",
                               s->master_name};
        rlock__cmd cmd = {3, argv, NULL};
        redisReply *r = NULL;
        char where[300];
        rlock__call one;
        int rc;

        rlock__call_init(&one, call->deadline_ns);
        rlock__url_describe(u, where, sizeof where);
        rc = rlock__dial(&s->cfg, u->host, u->port, where, 1, &cmd, &r,
                         rlock__call_until(call, c->opts.connect_timeout_ms),
                         &one);
        if (rc == RLOCK_OK && r->type == REDIS_REPLY_ARRAY &&
            r->elements == 2 && r->element[0]->type == REDIS_REPLY_STRING &&
            r->element[1]->type == REDIS_REPLY_STRING &&
            r->element[0]->len < 256) {
            int port = atoi(r->element[1]->str);
            pthread_mutex_lock(&s->mu);
            rc = rlock__node_is(s->node, r->element[0]->str, port)
                     ? RLOCK_OK
                     : rlock__node_move(s->node, r->element[0]->str, port);
            s->stale = 0;
            pthread_mutex_unlock(&s->mu);
            freeReplyObject(r);
            if (rc != RLOCK_OK)
                return rlock__fail(call, rc, "out of memory");
            return RLOCK_OK;
        }
        if (rc == RLOCK_OK && r->type == REDIS_REPLY_NIL)
            known = 1;
        if (len < sizeof errs)
            len += (size_t)snprintf(
                errs + len, sizeof errs - len, "; %s: %s", where,
                rc != RLOCK_OK                 ? one.err.msg
                : r->type == REDIS_REPLY_NIL   ? "does not know this master"
                : r->type == REDIS_REPLY_ERROR ? r->str
                                               : "unexpected answer");
        if (r)
            freeReplyObject(r);
    }
    return rlock__fail(call, known ? RLOCK_EUNAVAILABLE : RLOCK_ECONNECT,
                       "no sentinel named the master '%s'%s", s->master_name,
                       errs);
}

/* After a request failed with rc: if the master may have changed, ask the
 * sentinels before the next one. */
static void suspect(rlock_client *c, int rc)
{
    sentinel *s = of(c);

    if (rc != RLOCK_EIO && rc != RLOCK_ENOREPLY && rc != RLOCK_ECONNECT &&
        rc != RLOCK_EUNAVAILABLE)
        return;
    pthread_mutex_lock(&s->mu);
    s->stale = 1;
    pthread_mutex_unlock(&s->mu);
    /* A replica's connections are of no use: do not hand them out. */
    if (rc == RLOCK_EUNAVAILABLE)
        rlock__node_drain(s->node);
}

static int fresh_address(rlock_client *c, rlock__call *call)
{
    sentinel *s = of(c);
    int stale;

    pthread_mutex_lock(&s->mu);
    stale = s->stale;
    pthread_mutex_unlock(&s->mu);
    return stale ? resolve(c, call) : RLOCK_OK;
}

/* A failure to reach the master before anything was sent: the sentinels
 * may know better now. */
static int unreached(const rlock__result *r)
{
    return !r->sent && (r->rc == RLOCK_ECONNECT || r->rc == RLOCK_ENOREPLY ||
                        r->rc == RLOCK_EIO || r->rc == RLOCK_EUNAVAILABLE);
}

static void exec_sentinel(rlock_client *c, const rlock__req *req, int flags,
                          rlock__results *res, rlock__call *call)
{
    int64_t ms = c->opts.command_timeout_ms;
    int attempt, rc;

    if (req->replicas > 0)
        ms += c->opts.sync_timeout_ms;
    /* Twice: once where the sentinels said last, once after asking them
     * again if the master could not be reached there. */
    for (attempt = 0; attempt < 2; attempt++) {
        if ((rc = fresh_address(c, call)) != RLOCK_OK) {
            rlock__results_init(res, 1);
            res->r[0].rc = rc;
            res->r[0].err = call->err;
            return;
        }
        rlock__nodes_exec(&of(c)->node, 1, req, flags,
                          rlock__call_until(call, (int)ms), res);
        if (res->r[0].rc == RLOCK_OK)
            return;
        suspect(c, res->r[0].rc);
        if (attempt == 1 || !unreached(&res->r[0]))
            return;
        rlock__results_free(res);
    }
}

static int open_sentinel(rlock_client *c, const char *url,
                         const rlock_client_opts *opts, rlock__call *call)
{
    rlock_client_opts eff = *opts;
    rlock__results res;
    rlock__url tls;
    sentinel *s = calloc(1, sizeof *s);
    char *rest = NULL;
    const char *name;
    int rc;

    if (!s)
        return rlock__fail(call, RLOCK_ENOMEM, "out of memory");
    c->bk = s;
    pthread_mutex_init(&s->mu, NULL);
    s->stale = 1;
    /* The TLS parameters of the query apply to every connection
     * (sentinels and masters); the rest is the sentinel URL's. */
    if ((rc = rlock__url_split_tls(url, &tls, &rest, &call->err)) != RLOCK_OK)
        return rc;
    rc = rlock__url_tls(&tls, &eff, call);
    if (rc == RLOCK_OK)
        rc = rlock__client_tls(c, &eff, call);
    rlock__url_free(&tls);
    if (rc == RLOCK_OK)
        rc = rlock__sentinel_parse(rest + strlen("redis-sentinel://"),
                                   s->sentinels, SENTINELS_MAX, &s->nsentinels,
                                   &s->master_name, &s->cfg.db, &call->err);
    free(rest);
    if (rc != RLOCK_OK)
        return rc;
    if ((opts->username && !(c->username = strdup(opts->username))) ||
        (opts->password && !(c->password = strdup(opts->password))))
        return rlock__fail(call, RLOCK_ENOMEM, "out of memory");
    name = s->master_name;
    snprintf(c->where, sizeof c->where, "master '%.200s' (via sentinels)",
             name);
    {
        int db = s->cfg.db;
        rlock__node_cfg_of(c, &s->cfg);
        s->cfg.db = db;
    }
    s->cfg.require_master = 1;
    /* Where the master is comes from the sentinels (resolve); until then
     * the node has a name only. */
    if (rlock__node_new(&s->cfg, "0.0.0.0", 0, NULL, c->where, &s->node) !=
        RLOCK_OK)
        return rlock__fail(call, RLOCK_ENOMEM, "out of memory");
    c->nnodes = 1;
    c->quorum = 1;
    /* Find and reach the master now: a wrong URL fails here. Each
     * sentinel asked, then the master, within the connect timeout. */
    if ((rc = resolve(c, call)) != RLOCK_OK)
        return rc;
    rlock__nodes_connect(
        &s->node, 1, rlock__call_until(call, opts->connect_timeout_ms), &res);
    if (res.r[0].rc != RLOCK_OK && unreached(&res.r[0])) {
        /* The sentinels may not have noticed a failover yet: once more. */
        suspect(c, res.r[0].rc);
        if ((rc = resolve(c, call)) != RLOCK_OK)
            return rc;
        rlock__nodes_connect(&s->node, 1,
                             rlock__call_until(call, opts->connect_timeout_ms),
                             &res);
    }
    if (res.r[0].rc != RLOCK_OK)
        return rlock__fail(call, res.r[0].rc, "%s", res.r[0].err.msg);
    return RLOCK_OK;
}

static void close_sentinel(rlock_client *c)
{
    sentinel *s = of(c);
    int i;

    if (!s)
        return;
    rlock__node_free(s->node);
    for (i = 0; i < s->nsentinels; i++)
        rlock__url_free(&s->sentinels[i]);
    free(s->master_name);
    pthread_mutex_destroy(&s->mu);
    free(s);
    c->bk = NULL;
}

static void after_fork_sentinel(rlock_client *c)
{
    sentinel *s = of(c);

    pthread_mutex_init(&s->mu, NULL);
    rlock__node_after_fork(s->node);
}

static int ping_sentinel(rlock_client *c, rlock_server_info *info,
                         rlock__call *call)
{
    int rc = fresh_address(c, call);

    if (rc == RLOCK_OK)
        rc = rlock__node_ping(of(c)->node, c->opts.command_timeout_ms, info,
                              call);
    if (rc != RLOCK_OK)
        suspect(c, rc);
    return rc;
}

static int sub_connect_sentinel(rlock_client *c, rlock__conn **out,
                                rlock__call *call)
{
    int rc = fresh_address(c, call);

    if (rc == RLOCK_OK)
        rc = rlock__node_connect(
            of(c)->node, rlock__call_until(call, c->opts.connect_timeout_ms),
            out, call);
    if (rc != RLOCK_OK)
        suspect(c, rc);
    return rc;
}

const rlock__backend rlock__backend_sentinel = {
    "Sentinel",
    "redis-sentinel://",
    RLOCK__BK_ONE_COPY | RLOCK__BK_WAIT,
    open_sentinel,
    close_sentinel,
    after_fork_sentinel,
    exec_sentinel,
    rlock__group_all,
    ping_sentinel,
    sub_connect_sentinel,
    rlock__margin_one,
    rlock__label_none,
    rlock__failure_one,
};
