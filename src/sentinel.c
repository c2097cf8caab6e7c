/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Redis Sentinel (redis-sentinel://host:port[,host:port...]/master-name
 * [?db=N]): the master is found by asking the sentinels, and found again
 * when it may have changed.
 *
 * Every new connection goes to the master as the sentinels last named it,
 * and is checked with ROLE: a server that is no longer the master (the
 * sentinels have not noticed yet, or a stale sentinel answered) is not
 * used. The address is asked for again after a connection was lost or
 * refused, or after a reply said the server is a replica (READONLY,
 * MASTERDOWN): a failover closes the old master's client connections
 * (Sentinel kills them), so every client of a failed-over master comes
 * here. Holds then live on the new master: the watchdog's next renewal
 * finds each key there or not, and a hold whose key did not reach the new
 * master is reported lost (on_lost). Waiters subscribe again on their new
 * subscriber connection, as after any lost connection.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Parses "host:port,...,host:port/master-name[?db=N]" (what follows
 * redis-sentinel://) into c; nothing is contacted. */
int rlock__sentinel_parse(rlock_client *c, const char *spec)
{
    const char *slash = strchr(spec, '/'), *q, *name, *name_end;
    int rc;

    if (!slash || slash == spec)
        return rlock__fail(NULL, RLOCK_EINVAL,
                           "sentinel URL: redis-sentinel://host:port,.../"
                           "master-name");
    name = slash + 1;
    q = strchr(name, '?');
    name_end = q ? q : name + strlen(name);
    if (name_end == name || memchr(name, '/', (size_t)(name_end - name)))
        return rlock__fail(NULL, RLOCK_EINVAL,
                           "sentinel URL: missing master name after '/'");
    if (q) {
        char *e;
        long db;
        if (strncmp(q + 1, "db=", 3) != 0 || !q[4] || q[4] == '-' ||
            q[4] == '+')
            return rlock__fail(NULL, RLOCK_EINVAL,
                               "sentinel URL: the only parameter is db=N");
        db = strtol(q + 4, &e, 10);
        if (*e || db < 0 || db > 1000000)
            return rlock__fail(NULL, RLOCK_EINVAL,
                               "sentinel URL: db must be a number from 0");
        c->url.db = (int)db;
    }
    c->master_name = strndup(name, (size_t)(name_end - name));
    c->sentinels = calloc(RLOCK__SENTINELS_MAX, sizeof *c->sentinels);
    if (!c->master_name || !c->sentinels)
        return rlock__fail(NULL, RLOCK_ENOMEM, "out of memory");
    rc = rlock__url_list_parse(spec, slash, c->sentinels, RLOCK__SENTINELS_MAX,
                               &c->nsentinels, "sentinel");
    if (rc != RLOCK_OK)
        return rc;
    c->addr_stale = 1;
    snprintf(c->where, sizeof c->where, "master '%.*s' (via sentinels)",
             (int)(name_end - name) < 200 ? (int)(name_end - name) : 200, name);
    return RLOCK_OK;
}

/* Asks the sentinels, in the order given, where the master is. Each is
 * given the connect timeout for the whole exchange, within the call's
 * deadline. */
static int resolve(rlock_client *c)
{
    char errs[400] = "";
    size_t len = 0;
    int i, known = 0;

    for (i = 0; i < c->nsentinels; i++) {
        const rlock__url *s = &c->sentinels[i];
        const char *argv[3] = {"SENTINEL", "get-master-addr-by-name",
                               c->master_name};
        int64_t deadline = rlock__deadline(c->opts.connect_timeout_ms);
        rlock__conn *ctx = NULL;
        redisReply *r = NULL;
        int rc;

        rc = rlock__open_conn(c, s->host, s->port, NULL, deadline, &ctx);
        if (rc == RLOCK_OK)
            rc = rlock__command(c, ctx, &r, 3, argv, NULL, deadline,
                                "SENTINEL get-master-addr-by-name");
        if (rc == RLOCK_OK && r->type == REDIS_REPLY_ARRAY &&
            r->elements == 2 && r->element[0]->type == REDIS_REPLY_STRING &&
            r->element[1]->type == REDIS_REPLY_STRING &&
            r->element[0]->len < (int)sizeof c->master_host) {
            pthread_mutex_lock(&c->addr_mu);
            memcpy(c->master_host, r->element[0]->str,
                   (size_t)r->element[0]->len + 1);
            c->master_port = atoi(r->element[1]->str);
            c->addr_stale = 0;
            pthread_mutex_unlock(&c->addr_mu);
            freeReplyObject(r);
            rlock__conn_close(ctx);
            return RLOCK_OK;
        }
        if (rc == RLOCK_OK && r->type == REDIS_REPLY_NIL)
            known = 1;
        if (len < sizeof errs)
            len += (size_t)snprintf(
                errs + len, sizeof errs - len, "; %s:%d: %s", s->host, s->port,
                rc != RLOCK_OK                 ? rlock_client_errmsg(c)
                : r->type == REDIS_REPLY_NIL   ? "does not know this master"
                : r->type == REDIS_REPLY_ERROR ? r->str
                                               : "unexpected answer");
        if (r)
            freeReplyObject(r);
        rlock__conn_close(ctx);
    }
    return rlock__fail(c, known ? RLOCK_EUNAVAILABLE : RLOCK_ECONNECT,
                       "no sentinel named the master '%s'%s", c->master_name,
                       errs);
}

/* ROLE on a new connection: only the master will do. */
static int check_role(rlock_client *c, rlock__conn *ctx, const char *host,
                      int port)
{
    const char *argv[1] = {"ROLE"};
    redisReply *r = NULL;
    int rc;

    rc = rlock__command(c, ctx, &r, 1, argv, NULL,
                        rlock__deadline(c->opts.command_timeout_ms), "ROLE");
    if (rc != RLOCK_OK)
        return rc;
    if (r->type == REDIS_REPLY_ERROR)
        rc = rlock__reply_error(c, r);
    else if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
             r->element[0]->type != REDIS_REPLY_STRING)
        rc = rlock__fail(c, RLOCK_EPROTO, "unexpected answer to ROLE");
    else if (strcmp(r->element[0]->str, "master") != 0)
        rc = rlock__fail(c, RLOCK_EUNAVAILABLE,
                         "%s:%d, named by the sentinels, is a %s, not the "
                         "master of '%s' (a failover under way?)",
                         host, port, r->element[0]->str, c->master_name);
    freeReplyObject(r);
    return rc;
}

int rlock__sentinel_connect(rlock_client *c, rlock__conn **out)
{
    int attempt, rc = RLOCK_OK;

    /* Twice: once where the sentinels said last, once after asking them
     * again if that failed. */
    for (attempt = 0; attempt < 2; attempt++) {
        char host[sizeof c->master_host];
        int port, stale;
        rlock__conn *ctx = NULL;

        pthread_mutex_lock(&c->addr_mu);
        stale = c->addr_stale;
        pthread_mutex_unlock(&c->addr_mu);
        if (stale && (rc = resolve(c)) != RLOCK_OK)
            return rc;
        pthread_mutex_lock(&c->addr_mu);
        memcpy(host, c->master_host, sizeof host);
        port = c->master_port;
        pthread_mutex_unlock(&c->addr_mu);
        rc = rlock__connect_to(c, host, port, NULL, &ctx);
        if (rc == RLOCK_OK) {
            rc = check_role(c, ctx, host, port);
            if (rc == RLOCK_OK) {
                *out = ctx;
                return RLOCK_OK;
            }
            rlock__conn_close(ctx);
        }
        if (rc != RLOCK_ECONNECT && rc != RLOCK_ENOREPLY && rc != RLOCK_EIO &&
            rc != RLOCK_EUNAVAILABLE)
            return rc;
        rlock__sentinel_suspect(c, RLOCK_EUNAVAILABLE);
    }
    return rc;
}

void rlock__sentinel_suspect(rlock_client *c, int rc)
{
    if (rc != RLOCK_EIO && rc != RLOCK_ENOREPLY && rc != RLOCK_ECONNECT &&
        rc != RLOCK_EUNAVAILABLE)
        return;
    pthread_mutex_lock(&c->addr_mu);
    c->addr_stale = 1;
    pthread_mutex_unlock(&c->addr_mu);
    /* A replica's connections are of no use: do not hand them out. */
    if (rc == RLOCK_EUNAVAILABLE)
        rlock__pool_drain(c);
}

void rlock__sentinel_free(rlock_client *c)
{
    int i;

    for (i = 0; i < c->nsentinels; i++)
        rlock__url_free(&c->sentinels[i]);
    free(c->sentinels);
    free(c->master_name);
    c->sentinels = NULL;
    c->master_name = NULL;
}
