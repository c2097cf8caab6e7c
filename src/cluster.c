/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Redis Cluster (redis-cluster://host:port[,host:port...]): every key and
 * channel of one lock shares the hash tag {prefix:name}, so each lock lives
 * in one slot, on one master, and its scripts run there whole.
 *
 * The client keeps the slot map (CLUSTER SLOTS, asked of any node it
 * knows, the seeds last) and a client of its own per master, opened when
 * first needed. A request goes to the master of its slot; the cluster's
 * redirections are followed: MOVED (the slot has a new owner: the map is
 * corrected and read again), ASK (the slot is being migrated and the keys
 * are on the importing node: the request is sent there once, after
 * ASKING), TRYAGAIN (a multi-key request during a migration: tried again
 * shortly). Notifications need nothing special: a PUBLISH on any node
 * reaches the subscribers of every node, so the subscriber connection may
 * be to any of them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

#define SLOTS 16384

struct rlock__cnode {
    char host[64];
    int port;
    rlock_client *sub; /* opened on first use */
};

/* CRC16-CCITT (XMODEM), the key hash of Redis Cluster. */
static unsigned crc16(const char *buf, size_t len)
{
    unsigned crc = 0;
    size_t i;
    int b;

    for (i = 0; i < len; i++) {
        crc ^= (unsigned)(unsigned char)buf[i] << 8;
        for (b = 0; b < 8; b++)
            crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff
                               : (crc << 1) & 0xffff;
    }
    return crc;
}

int rlock__key_slot(const char *key, size_t len)
{
    const char *open = memchr(key, '{', len), *close;

    if (open) {
        size_t rest = len - (size_t)(open - key) - 1;
        close = memchr(open + 1, '}', rest);
        if (close && close > open + 1)
            return (int)(crc16(open + 1, (size_t)(close - open - 1)) % SLOTS);
    }
    return (int)(crc16(key, len) % SLOTS);
}

int rlock__cluster_parse(rlock_client *c, const char *spec)
{
    const char *p = spec, *end = spec + strlen(spec);
    int rc;

    if (p == end)
        return rlock__fail(NULL, RLOCK_EINVAL,
                           "cluster URL: redis-cluster://host:port,...");
    if (strpbrk(spec, "/?@"))
        return rlock__fail(NULL, RLOCK_EINVAL,
                           "cluster URL: only host:port,... (no database, "
                           "parameters or credentials; credentials go in "
                           "the client options)");
    c->seeds = calloc(RLOCK__SENTINELS_MAX, sizeof *c->seeds);
    c->cnodes = calloc(RLOCK__CNODES_MAX, sizeof *c->cnodes);
    c->slot_map = malloc(SLOTS * sizeof *c->slot_map);
    if (!c->seeds || !c->cnodes || !c->slot_map)
        return rlock__fail(NULL, RLOCK_ENOMEM, "out of memory");
    memset(c->slot_map, 0xff, SLOTS * sizeof *c->slot_map);
    rc = rlock__url_list_parse(p, end, c->seeds, RLOCK__SENTINELS_MAX,
                               &c->nseeds, "cluster");
    if (rc != RLOCK_OK)
        return rc;
    c->cluster = 1;
    snprintf(c->where, sizeof c->where, "cluster %.*s",
             (int)(end - spec) < 200 ? (int)(end - spec) : 200, spec);
    return RLOCK_OK;
}

/* Index of host:port in the node table, added if new; -1 if full. Called
 * with addr_mu held. */
static int node_index(rlock_client *c, const char *host, int port)
{
    int i;

    for (i = 0; i < c->ncnodes; i++)
        if (c->cnodes[i].port == port && strcmp(c->cnodes[i].host, host) == 0)
            return i;
    if (c->ncnodes == RLOCK__CNODES_MAX || strlen(host) >= 64)
        return -1;
    snprintf(c->cnodes[c->ncnodes].host, sizeof c->cnodes[0].host, "%s", host);
    c->cnodes[c->ncnodes].port = port;
    return c->ncnodes++;
}

/* Reads CLUSTER SLOTS from one node and fills the map; 0 or -1. */
static int read_slots(rlock_client *c, const char *host, int port)
{
    const char *auth[3] = {"AUTH", c->username ? c->username : c->password,
                           c->password};
    const char *slots[2] = {"CLUSTER", "SLOTS"};
    rlock__cmd cmds[2];
    redisReply *replies[2] = {0}, *r = NULL;
    int64_t deadline = rlock__deadline(c->opts.connect_timeout_ms);
    rlock__conn *ctx = NULL;
    size_t i;
    int ok = -1, n = 0;

    if (c->password) {
        cmds[n].argc = c->username ? 3 : 2;
        cmds[n].argv = auth;
        cmds[n++].lens = NULL;
    }
    cmds[n].argc = 2;
    cmds[n].argv = slots;
    cmds[n++].lens = NULL;
    if (rlock__open_conn(c, host, port, NULL, deadline, &ctx) == RLOCK_OK &&
        rlock__exchange(c, ctx, n, cmds, replies, deadline,
                        "CLUSTER SLOTS") == RLOCK_OK) {
        r = replies[n - 1];
        if (n == 2)
            freeReplyObject(replies[0]);
    }
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements > 0) {
        pthread_mutex_lock(&c->addr_mu);
        for (i = 0; i < r->elements; i++) {
            redisReply *e = r->element[i], *m;
            long long from, to, s;
            int idx;
            if (e->type != REDIS_REPLY_ARRAY || e->elements < 3)
                continue;
            m = e->element[2];
            if (e->element[0]->type != REDIS_REPLY_INTEGER ||
                e->element[1]->type != REDIS_REPLY_INTEGER ||
                m->type != REDIS_REPLY_ARRAY || m->elements < 2 ||
                m->element[0]->type != REDIS_REPLY_STRING ||
                m->element[1]->type != REDIS_REPLY_INTEGER)
                continue;
            from = e->element[0]->integer;
            to = e->element[1]->integer;
            /* A node that does not know its own address (one that never
             * met another) names it "" or "?": it is the one asked. */
            idx = node_index(c,
                             m->element[0]->str[0] &&
                                     strcmp(m->element[0]->str, "?") != 0
                                 ? m->element[0]->str
                                 : host,
                             (int)m->element[1]->integer);
            if (idx < 0 || from < 0 || to >= SLOTS)
                continue;
            for (s = from; s <= to; s++)
                c->slot_map[s] = (short)idx;
        }
        pthread_mutex_unlock(&c->addr_mu);
        ok = 0;
    }
    if (r)
        freeReplyObject(r);
    rlock__conn_close(ctx);
    return ok;
}

/* Reads the slot map again: from a known master, else from a seed. */
static int refresh(rlock_client *c)
{
    char host[64], why[300] = "";
    int i, n, port;

    pthread_mutex_lock(&c->addr_mu);
    n = c->ncnodes;
    pthread_mutex_unlock(&c->addr_mu);
    for (i = 0; i < n; i++) {
        pthread_mutex_lock(&c->addr_mu);
        memcpy(host, c->cnodes[i].host, sizeof host);
        port = c->cnodes[i].port;
        pthread_mutex_unlock(&c->addr_mu);
        if (read_slots(c, host, port) == 0)
            return RLOCK_OK;
        snprintf(why, sizeof why, "%s", rlock_client_errmsg(c));
    }
    for (i = 0; i < c->nseeds; i++) {
        if (read_slots(c, c->seeds[i].host, c->seeds[i].port) == 0)
            return RLOCK_OK;
        snprintf(why, sizeof why, "%s", rlock_client_errmsg(c));
    }
    /* The last cause is kept: a certificate not trusted, a refused
     * password, a node that is not a cluster node. */
    return rlock__fail(c, RLOCK_ECONNECT,
                       "no node of %s answered CLUSTER SLOTS%s%s", c->where,
                       why[0] ? ": " : "", why);
}

/* The client of node i, opened if needed. */
static int node_client(rlock_client *c, int i, rlock_client **out)
{
    char url[96];
    rlock_client *sub;
    int err;

    pthread_mutex_lock(&c->addr_mu);
    sub = c->cnodes[i].sub;
    snprintf(url, sizeof url, "redis://%s:%d", c->cnodes[i].host,
             c->cnodes[i].port);
    pthread_mutex_unlock(&c->addr_mu);
    if (sub) {
        *out = sub;
        return RLOCK_OK;
    }
    sub = rlock_client_open(url, &c->node_opts, &err);
    if (!sub) {
        char detail[400];
        snprintf(detail, sizeof detail, "%s", rlock_client_errmsg(NULL));
        return rlock__fail(c, err, "%s", detail);
    }
    pthread_mutex_lock(&c->addr_mu);
    if (c->cnodes[i].sub) { /* another thread was quicker */
        pthread_mutex_unlock(&c->addr_mu);
        rlock_client_close(sub);
        pthread_mutex_lock(&c->addr_mu);
        sub = c->cnodes[i].sub;
    } else {
        c->cnodes[i].sub = sub;
    }
    pthread_mutex_unlock(&c->addr_mu);
    *out = sub;
    return RLOCK_OK;
}

int rlock__cluster_open(rlock_client *c, const rlock_client_opts *opts)
{
    int rc;

    c->node_opts = *opts;
    c->node_opts.key_prefix = c->prefix;
    c->node_opts.username = c->username;
    c->node_opts.password = c->password;
    /* The client's own copies: nodes are opened later too. */
    c->node_opts.tls_ca_file = c->opts.tls_ca_file;
    c->node_opts.tls_cert_file = c->opts.tls_cert_file;
    c->node_opts.tls_key_file = c->opts.tls_key_file;
    c->node_opts.tls_sni = c->opts.tls_sni;
    /* The parent's subscriber is its own; the nodes' clients run only
     * commands. */
    c->node_opts.use_pubsub = 0;
    c->node_opts.sync_replicas = 0;
    rc = refresh(c);
    if (rc == RLOCK_OK && c->ncnodes == 0)
        rc = rlock__fail(c, RLOCK_EUNAVAILABLE,
                         "%s has no slots assigned (not a working cluster)",
                         c->where);
    return rc;
}

static int starts_with(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* "MOVED 3999 127.0.0.1:6381" or "ASK ...": the node named, or -1. */
static int redirect_target(rlock_client *c, const char *msg, int *slot)
{
    const char *sp = strchr(msg, ' '), *colon;
    char host[64];
    int idx;

    if (!sp)
        return -1;
    *slot = atoi(sp + 1);
    sp = strchr(sp + 1, ' ');
    colon = sp ? strrchr(sp, ':') : NULL;
    if (!colon || (size_t)(colon - sp - 1) >= sizeof host || *slot < 0 ||
        *slot >= SLOTS)
        return -1;
    memcpy(host, sp + 1, (size_t)(colon - sp - 1));
    host[colon - sp - 1] = '\0';
    pthread_mutex_lock(&c->addr_mu);
    idx = node_index(c, host, atoi(colon + 1));
    pthread_mutex_unlock(&c->addr_mu);
    return idx;
}

int rlock__cluster_eval(rlock_client *c, enum rlock__script s, redisReply **out,
                        int nkeys, const char **keys, const size_t *key_lens,
                        int nargs, const char **args, const size_t *arg_lens,
                        int replicas, long long *acks)
{
    int slot = nkeys > 0 ? rlock__key_slot(keys[0], key_lens[0]) : 0;
    int redirects = 0, asking = -1, rc = RLOCK_OK;
    int64_t pause_ms = 5,
            until = rlock__now_ns() +
                    (int64_t)c->opts.command_timeout_ms * RLOCK__NS_PER_MS;
    rlock_client *sub = NULL;

    while (redirects < 16) {
        const char *msg;
        int idx, ask_slot;

        if (asking >= 0) {
            idx = asking;
        } else {
            pthread_mutex_lock(&c->addr_mu);
            idx = c->slot_map[slot];
            pthread_mutex_unlock(&c->addr_mu);
            if (idx < 0) { /* not covered: the map may be old */
                if ((rc = refresh(c)) != RLOCK_OK)
                    return rc;
                pthread_mutex_lock(&c->addr_mu);
                idx = c->slot_map[slot];
                pthread_mutex_unlock(&c->addr_mu);
                if (idx < 0)
                    return rlock__fail(c, RLOCK_EUNAVAILABLE,
                                       "no master serves slot %d of %s", slot,
                                       c->where);
            }
        }
        if ((rc = node_client(c, idx, &sub)) != RLOCK_OK) {
            refresh(c); /* the node may be gone: next time, the new map */
            return rc;
        }
        rc = rlock__eval_ex(sub, s, out, nkeys, keys, key_lens, nargs, args,
                            arg_lens, replicas, acks, asking >= 0);
        asking = -1;
        if (rc == RLOCK_OK)
            return RLOCK_OK;
        msg = rlock_client_errmsg(sub);
        if (rc == RLOCK_EREDIS && starts_with(msg, "MOVED ")) {
            int target = redirect_target(c, msg, &ask_slot);
            if (target < 0)
                break;
            redirects++;
            pthread_mutex_lock(&c->addr_mu);
            c->slot_map[ask_slot] = (short)target;
            pthread_mutex_unlock(&c->addr_mu);
            refresh(c); /* other slots may have moved too */
            continue;
        }
        if (rc == RLOCK_EREDIS && starts_with(msg, "ASK ")) {
            asking = redirect_target(c, msg, &ask_slot);
            if (asking < 0)
                break;
            redirects++;
            continue;
        }
        /* A slot being migrated refuses requests whose keys are not all
         * on one side (rlock's scripts name keys that may not exist yet)
         * until the migration ends: try again, within the command
         * timeout. */
        if (rc == RLOCK_EREDIS && starts_with(msg, "TRYAGAIN")) {
            struct timespec ts;
            if (rlock__now_ns() + pause_ms * RLOCK__NS_PER_MS > until)
                return rlock__fail(c, RLOCK_EUNAVAILABLE,
                                   "slot %d of %s is being migrated and "
                                   "the migration did not end within %d ms "
                                   "(TRYAGAIN)",
                                   slot, c->where, c->opts.command_timeout_ms);
            ts.tv_sec = 0;
            ts.tv_nsec = (long)pause_ms * 1000000L;
            nanosleep(&ts, NULL);
            if (pause_ms < 100)
                pause_ms *= 2;
            continue;
        }
        break;
    }
    /* The node's detail, as this client's. */
    if (sub && rc != RLOCK_OK) {
        char detail[512];
        snprintf(detail, sizeof detail, "%s", rlock_client_errmsg(sub));
        return rlock__fail(c, rc, "%s", detail);
    }
    return rc;
}

int rlock__cluster_ping(rlock_client *c, rlock_server_info *info)
{
    rlock_client *sub;
    int rc;

    if ((rc = node_client(c, 0, &sub)) != RLOCK_OK)
        return rc;
    rc = rlock_client_ping(sub, info);
    if (rc != RLOCK_OK)
        return rlock__fail(c, rc, "%s", rlock_client_errmsg(sub));
    return RLOCK_OK;
}

int rlock__cluster_connect(rlock_client *c, rlock__conn **out)
{
    char host[64];
    int port, i, rc = RLOCK_ECONNECT;

    /* Any node will do: it is for the subscriber connection. */
    for (i = 0; i < c->ncnodes; i++) {
        pthread_mutex_lock(&c->addr_mu);
        memcpy(host, c->cnodes[i].host, sizeof host);
        port = c->cnodes[i].port;
        pthread_mutex_unlock(&c->addr_mu);
        rc = rlock__connect_to(c, host, port, NULL, out);
        if (rc == RLOCK_OK)
            return RLOCK_OK;
    }
    return rc;
}

void rlock__cluster_free(rlock_client *c)
{
    int i;

    for (i = 0; i < c->ncnodes; i++)
        rlock_client_close(c->cnodes[i].sub);
    for (i = 0; i < c->nseeds; i++)
        rlock__url_free(&c->seeds[i]);
    free(c->cnodes);
    free(c->seeds);
    free(c->slot_map);
    c->cnodes = NULL;
    c->seeds = NULL;
    c->slot_map = NULL;
}

void rlock__cluster_after_fork(rlock_client *c)
{
    int i;

    for (i = 0; i < c->ncnodes; i++)
        if (c->cnodes[i].sub)
            rlock__client_after_fork_check(c->cnodes[i].sub);
}
