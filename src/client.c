/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The client handle: options, opening (connect at once), closing, and what
 * happens to a client inherited through fork().
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

static atomic_uint_fast64_t next_serial = 1;

void rlock_client_opts_init(rlock_client_opts *o)
{
    memset(o, 0, sizeof *o);
    o->connect_timeout_ms = 2000;
    o->command_timeout_ms = 2000;
    o->watchdog_lease_ms = 30000;
    o->waiter_ttl_ms = 5000;
    o->use_pubsub = 1;
    o->backoff_min_ms = 5;
    o->backoff_max_ms = 100;
    o->max_connections = 4;
    o->key_prefix = "rlock";
    o->sync_timeout_ms = 1000;
}

static int check_opts(const rlock_client_opts *o)
{
    if (o->connect_timeout_ms <= 0)
        return rlock__fail(NULL, RLOCK_EINVAL, "connect_timeout_ms must be > 0");
    if (o->command_timeout_ms <= 0)
        return rlock__fail(NULL, RLOCK_EINVAL, "command_timeout_ms must be > 0");
    if (o->watchdog_lease_ms < 30 || o->watchdog_lease_ms > RLOCK_MS_MAX)
        return rlock__fail(NULL, RLOCK_EINVAL,
                           "watchdog_lease_ms must be in [30, RLOCK_MS_MAX]");
    if (o->waiter_ttl_ms < 30 || o->waiter_ttl_ms > RLOCK_MS_MAX)
        return rlock__fail(NULL, RLOCK_EINVAL,
                           "waiter_ttl_ms must be in [30, RLOCK_MS_MAX]");
    if (o->backoff_min_ms < 1 || o->backoff_max_ms < o->backoff_min_ms)
        return rlock__fail(NULL, RLOCK_EINVAL,
                           "need 1 <= backoff_min_ms <= backoff_max_ms");
    if (o->max_reply_bytes < 0 ||
        (o->max_reply_bytes > 0 && o->max_reply_bytes < 1024))
        return rlock__fail(NULL, RLOCK_EINVAL,
                           "max_reply_bytes must be 0 (default) or >= 1024");
    if (o->max_bulk_bytes < 0 || o->max_array_elements < 0)
        return rlock__fail(NULL, RLOCK_EINVAL,
                           "max_bulk_bytes and max_array_elements must be "
                           ">= 0 (0: default)");
    if (o->max_depth < 0 || o->max_depth > RLOCK__BOUND_DEPTH_MAX)
        return rlock__fail(NULL, RLOCK_EINVAL,
                           "max_depth must be 0 (default) to 7");
    if (o->max_connections < 1 || o->max_connections > 1024)
        return rlock__fail(NULL, RLOCK_EINVAL,
                           "max_connections must be in [1, 1024]");
    if (!o->key_prefix || !o->key_prefix[0] || strpbrk(o->key_prefix, "{}") ||
        strlen(o->key_prefix) > 64)
        return rlock__fail(NULL, RLOCK_EINVAL,
                           "key_prefix must be 1 to 64 bytes without '{' "
                           "or '}'");
    if (o->username && !o->password)
        return rlock__fail(NULL, RLOCK_EINVAL, "username given without password");
    if (o->sync_replicas < 0 || o->sync_replicas > RLOCK__SYNC_MAX)
        return rlock__fail(NULL, RLOCK_EINVAL,
                           "sync_replicas must be in [0, %d]", RLOCK__SYNC_MAX);
    if (o->sync_timeout_ms <= 0)
        return rlock__fail(NULL, RLOCK_EINVAL, "sync_timeout_ms must be > 0");
    return RLOCK_OK;
}

static void init_sync(rlock_client *c)
{
    pthread_condattr_t ca;

    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&c->pool_mu, NULL);
    pthread_cond_init(&c->pool_cv, &ca);
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->addr_mu, NULL);
    pthread_cond_init(&c->callback_cv, &ca);
    pthread_condattr_destroy(&ca);
}

static void free_client(rlock_client *c)
{
    rlock__rl_close(c);
    rlock__url_free(&c->url);
    free(c->prefix);
    free(c->username);
    if (c->password) {
        memset(c->password, 0, strlen(c->password));
        free(c->password);
    }
    free(c->idle);
    rlock__tls_ctx_free(c->tls);
    free(c->tls_sni);
    free((char *)c->opts.tls_ca_file);
    free((char *)c->opts.tls_cert_file);
    free((char *)c->opts.tls_key_file);
    pthread_mutex_destroy(&c->pool_mu);
    pthread_cond_destroy(&c->pool_cv);
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->addr_mu);
    pthread_cond_destroy(&c->callback_cv);
    rlock__sentinel_free(c);
    rlock__cluster_free(c);
    free(c);
}

static int dup_opt(const char *in, char **out)
{
    *out = NULL;
    if (in && !(*out = strdup(in)))
        return rlock__fail(NULL, RLOCK_ENOMEM, "out of memory");
    return RLOCK_OK;
}

/*
 * TLS: the client keeps its own copies of the file names (the nodes of a
 * Redlock or Cluster client are opened with them later) and builds one
 * context that every connection of this client uses.
 */
static int init_tls(rlock_client *c, const rlock_client_opts *opts)
{
    rlock__tls_opts to;
    rlock__neterr e;
    char *ca, *cert, *key;
    int rc;

    c->opts.tls_ca_file = c->opts.tls_cert_file = c->opts.tls_key_file =
        c->opts.tls_sni = NULL;
    if ((rc = dup_opt(opts->tls_ca_file, &ca)) != RLOCK_OK)
        return rc;
    c->opts.tls_ca_file = ca;
    if ((rc = dup_opt(opts->tls_cert_file, &cert)) != RLOCK_OK)
        return rc;
    c->opts.tls_cert_file = cert;
    if ((rc = dup_opt(opts->tls_key_file, &key)) != RLOCK_OK)
        return rc;
    c->opts.tls_key_file = key;
    if ((rc = dup_opt(opts->tls_sni, &c->tls_sni)) != RLOCK_OK)
        return rc;
    c->opts.tls_sni = c->tls_sni;
    if (!opts->tls)
        return RLOCK_OK;
    to.ca_file = ca;
    to.cert_file = cert;
    to.key_file = key;
    to.insecure = opts->tls_insecure;
    if (rlock__tls_ctx_new(&to, &c->tls, &e) != RLOCK_OK)
        return rlock__fail(NULL, e.code, "%s", e.msg);
    return RLOCK_OK;
}

/* Fills the parts of c every client has (options, identity, locks). */
static int init_common(rlock_client *c, const rlock_client_opts *opts)
{
    int tls_rc;

    init_sync(c);
    c->serial = atomic_fetch_add(&next_serial, 1);
    c->opts = *opts;
    /* A hand-over's lease can be as short as what is left of the
     * waiter's place, at least about two thirds of waiter_ttl_ms. */
    c->shortest_lease_ms = opts->waiter_ttl_ms / 2 < opts->watchdog_lease_ms
                               ? opts->waiter_ttl_ms / 2
                               : opts->watchdog_lease_ms;
    c->prefix = strdup(opts->key_prefix);
    c->opts.key_prefix = NULL;
    c->opts.username = NULL;
    c->opts.password = NULL;
    c->bg_pipe[0] = c->bg_pipe[1] = -1;
    tls_rc = init_tls(c, opts);
    if (tls_rc != RLOCK_OK)
        return tls_rc;
    c->fork_gen = rlock__fork_generation();
    if (!c->prefix)
        return rlock__fail(NULL, RLOCK_ENOMEM, "out of memory");
    if (rlock__new_id(c->id) != 0)
        return rlock__fail(NULL, RLOCK_ENOMEM,
                           "no randomness from getrandom(2)");
    rlock__new_who(c->who);
    return RLOCK_OK;
}

/* redlock://: a client over several masters, each reached through a
 * client of its own (redlock.c); this one holds the locks. Waiting is by
 * retries: nothing to subscribe to. */
static rlock_client *open_redlock(rlock_client *c, const char *spec,
                                  const rlock_client_opts *opts, int *err)
{
    int rc = init_common(c, opts);

    c->opts.use_pubsub = 0;
    /* Redlock's nodes are masters without replicas: nothing to WAIT for. */
    if (rc == RLOCK_OK && opts->sync_replicas)
        rc = rlock__fail(NULL, RLOCK_EINVAL,
                         "sync_replicas does not apply to redlock:// (the "
                         "nodes are independent masters)");
    /* Kept for the nodes' clients, opened now or later. */
    c->username = opts->username ? strdup(opts->username) : NULL;
    c->password = opts->password ? strdup(opts->password) : NULL;
    if (rc == RLOCK_OK && ((opts->username && !c->username) ||
                           (opts->password && !c->password)))
        rc = rlock__fail(NULL, RLOCK_ENOMEM, "out of memory");
    if (rc == RLOCK_OK)
        rc = rlock__rl_open(c, spec, opts);
    if (rc != RLOCK_OK) {
        char detail[512];
        snprintf(detail, sizeof detail, "%s", rlock_client_errmsg(NULL));
        free_client(c);
        rlock__fail(NULL, rc, "%s", detail);
        *err = rc;
        return NULL;
    }
    *err = RLOCK_OK;
    return c;
}

/* redis-cluster://: the slot map and a client per master (cluster.c);
 * this one holds the locks and the subscriber connection. */
static rlock_client *open_cluster(rlock_client *c, const char *spec,
                                  const rlock_client_opts *opts, int *err)
{
    int rc = init_common(c, opts);

    c->username = opts->username ? strdup(opts->username) : NULL;
    c->password = opts->password ? strdup(opts->password) : NULL;
    c->idle = calloc((size_t)opts->max_connections, sizeof *c->idle);
    if (rc == RLOCK_OK && (!c->idle || (opts->username && !c->username) ||
                           (opts->password && !c->password)))
        rc = rlock__fail(NULL, RLOCK_ENOMEM, "out of memory");
    if (rc == RLOCK_OK && opts->sync_replicas)
        rc = rlock__fail(NULL, RLOCK_EINVAL,
                         "sync_replicas is not supported with "
                         "redis-cluster:// yet");
    if (rc == RLOCK_OK)
        rc = rlock__cluster_parse(c, spec);
    if (rc == RLOCK_OK)
        rc = rlock__cluster_open(c, opts);
    if (rc != RLOCK_OK) {
        char detail[512];
        snprintf(detail, sizeof detail, "%s",
                 rlock_client_errmsg(c)[0] ? rlock_client_errmsg(c)
                                           : rlock_client_errmsg(NULL));
        free_client(c);
        rlock__fail(NULL, rc, "%s", detail);
        *err = rc;
        return NULL;
    }
    *err = RLOCK_OK;
    return c;
}

/* rlock_client_open; connect = 0 leaves the first connection to the
 * first request (Redlock's nodes, which are connected to all at once). */
static rlock_client *open_client(const char *url,
                                 const rlock_client_opts *opts, int *err,
                                 int connect);

rlock_client *rlock_client_open(const char *url, const rlock_client_opts *opts,
                                int *err)
{
    return open_client(url, opts, err, 1);
}

rlock_client *rlock__client_open_lazy(const char *url,
                                      const rlock_client_opts *opts, int *err)
{
    return open_client(url, opts, err, 0);
}

/* The part of opening a single-server or Sentinel client that follows
 * its URL: credentials, the pool, and (if connect) the first connection;
 * rc is what setting up the client so far gave (it is freed if not OK). */
static rlock_client *finish_open(rlock_client *c,
                                 const rlock_client_opts *opts, int *err,
                                 int connect, int rc)
{
    rlock__conn *ctx = NULL;
    int64_t saved;

    /* Each of the options' credentials overrides the URL's: a password
     * in the options with a user in the URL is that user's. */
    c->username = opts->username ? strdup(opts->username)
                                 : (c->url.user ? strdup(c->url.user) : NULL);
    c->password = opts->password ? strdup(opts->password)
                                 : (c->url.password ? strdup(c->url.password)
                                                    : NULL);
    c->idle = calloc((size_t)opts->max_connections, sizeof *c->idle);
    if (!c->nsentinels)
        rlock__url_describe(&c->url, c->where, sizeof c->where);
    if (rc == RLOCK_OK &&
        (!c->idle || (opts->password && !c->password) ||
         (c->url.password && !c->password) ||
         ((opts->username || c->url.user) && !c->username)))
        rc = rlock__fail(NULL, RLOCK_ENOMEM, "out of memory");
    if (rc != RLOCK_OK) {
        free_client(c);
        *err = rc;
        return NULL;
    }
    if (!connect) {
        *err = RLOCK_OK;
        return c;
    }
    /* Connect now, so a wrong URL or password fails here. The first
     * connection also loads the scripts, all by the connect timeout. */
    saved = rlock__call_swap(0);
    c->nopen = 1;
    rc = rlock__connect(c, &ctx);
    rlock__call_swap(saved);
    if (rc != RLOCK_OK) {
        /* The detail was recorded for c; repeat it where the caller can
         * read it (rlock_client_errmsg(NULL)). */
        char detail[512];
        snprintf(detail, sizeof detail, "%s", rlock_client_errmsg(c));
        rlock__fail(NULL, rc, "%s", detail);
        free_client(c);
        *err = rc;
        return NULL;
    }
    rlock__conn_put(c, ctx, 0);
    *err = RLOCK_OK;
    return c;
}

/* What a URL says of TLS overrides the options. */
static void url_tls(const rlock__url *u, rlock_client_opts *eff)
{
    if (u->tls >= 0)
        eff->tls = u->tls;
    if (u->tls_insecure >= 0)
        eff->tls_insecure = u->tls_insecure;
    if (u->tls_ca)
        eff->tls_ca_file = u->tls_ca;
    if (u->tls_cert)
        eff->tls_cert_file = u->tls_cert;
    if (u->tls_key)
        eff->tls_key_file = u->tls_key;
    if (u->tls_sni)
        eff->tls_sni = u->tls_sni;
}

/* redis-sentinel://, redis-cluster:// and redlock://: the TLS parameters
 * of the query apply to every connection (sentinels and masters, every
 * cluster node, every Redlock node); the rest is the backend's. */
static rlock_client *open_nodes(rlock_client *c, const char *url,
                                const rlock_client_opts *opts, int *err,
                                int connect)
{
    rlock_client_opts eff = *opts;
    rlock__url tls;
    char *rest;
    int rc = rlock__url_split_tls(url, &tls, &rest);

    if (rc != RLOCK_OK) {
        free(c);
        *err = rc;
        return NULL;
    }
    url_tls(&tls, &eff);
    if (strncmp(rest, "redlock://", 10) == 0) {
        c = open_redlock(c, rest + 10, &eff, err);
    } else if (strncmp(rest, "redis-cluster://", 16) == 0) {
        c = open_cluster(c, rest + 16, &eff, err);
    } else {
        /* Found through the sentinels at each connect (sentinel.c). */
        rc = init_common(c, &eff);
        if (rc == RLOCK_OK)
            rc = rlock__sentinel_parse(c, rest + 17);
        if (rc != RLOCK_OK) {
            free_client(c);
            *err = rc;
            c = NULL;
        } else {
            c = finish_open(c, opts, err, connect, RLOCK_OK);
        }
    }
    free(rest);
    rlock__url_free(&tls);
    return c;
}

static rlock_client *open_client(const char *url,
                                 const rlock_client_opts *opts, int *err,
                                 int connect)
{
    rlock_client_opts defaults;
    rlock_client *c;
    int rc, dummy;

    if (!err)
        err = &dummy;
    if (!opts) {
        rlock_client_opts_init(&defaults);
        opts = &defaults;
    }
    if ((rc = check_opts(opts)) != RLOCK_OK) {
        *err = rc;
        return NULL;
    }
    c = calloc(1, sizeof *c);
    if (!c) {
        *err = rlock__fail(NULL, RLOCK_ENOMEM, "out of memory");
        return NULL;
    }
    if (url && (strncmp(url, "redlock://", 10) == 0 ||
                strncmp(url, "redis-cluster://", 16) == 0 ||
                strncmp(url, "redis-sentinel://", 17) == 0))
        return open_nodes(c, url, opts, err, connect);
    if ((rc = rlock__url_parse(url, &c->url)) != RLOCK_OK) {
        free(c);
        *err = rc;
        return NULL;
    } else {
        rlock_client_opts eff = *opts;
        url_tls(&c->url, &eff);
        rc = init_common(c, &eff);
    }
    return finish_open(c, opts, err, connect, rc);
}

void rlock_client_close(rlock_client *c)
{

    if (!c)
        return;
    rlock__bg_stop(c);
    rlock__pool_drain(c);
    rlock__hold_clear(c, NULL);
    while (c->subs) {
        rlock__sub *s = c->subs;
        c->subs = s->next;
        free(s->channel);
        free(s);
    }
    free_client(c);
}

/*
 * In a forked child the client's memory is a copy of the parent's: the
 * same owner id (the child would re-enter the parent's locks), sockets
 * shared with the parent (replies would go to either process), and a
 * background thread that does not exist. The child gets a new identity,
 * forgets the parent's holds without touching them, and opens its own
 * connections. Only the thread that called fork() exists in the child, so
 * the client's locks are re-created rather than trusted.
 */
void rlock__client_after_fork_check(rlock_client *c)
{
    unsigned gen = rlock__fork_generation();
    int i;

    /* Every API call comes through here first: its deadline starts now. */
    rlock__call_begin(c);

    if (c->fork_gen == gen)
        return;
    c->fork_gen = gen;
    init_sync(c);
    for (i = 0; i < c->nidle; i++)
        rlock__conn_close(c->idle[i]);
    c->nidle = 0;
    c->nopen = 0;
    rlock__hold_clear(c, NULL); /* the parent's; the mutexes stay */
    if (c->nnodes)
        rlock__rl_after_fork(c);
    if (c->cluster)
        rlock__cluster_after_fork(c);
    c->waiters = NULL;
    c->in_callback = NULL;
    c->bg_running = 0;
    c->bg_stop = 0;
    c->sub_up = 0;
    if (c->bg_pipe[0] >= 0) {
        close(c->bg_pipe[0]);
        close(c->bg_pipe[1]);
        c->bg_pipe[0] = c->bg_pipe[1] = -1;
    }
    /* Subscriptions name the parent's client id; mutexes notice by their
     * fork generation and subscribe again. */
    while (c->subs) {
        rlock__sub *s = c->subs;
        c->subs = s->next;
        free(s->channel);
        free(s);
    }
    c->sub_ctx = NULL; /* the parent's socket: not closed, not ours */
    c->cleanups = NULL;
    if (rlock__new_id(c->id) != 0)
        c->id[0] = 'x'; /* never the parent's id, even without randomness */
    rlock__new_who(c->who);
}
