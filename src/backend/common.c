/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What every backend needs the same way: the nodes' settings, TLS, a
 * ping, one server's lease margin and failure.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "core/reply.h"
#include "net/tls.h"
#include "util/clock.h"

/* How often an exchange whose legs all wait for a pooled connection
 * (RLOCK__X_NOWAIT) looks again. */
#define POOL_RETRY_NS (2 * RLOCK__NS_PER_MS)

/* Where an rlock__bexec is. */
enum { BX_ROUTE, BX_PAUSE, BX_XCHG, BX_DONE };

void rlock__bexec_start(rlock__bexec *b, rlock_client *c, const rlock__req *req,
                        int flags, rlock__results *res, rlock__call *call)
{
    memset(&b->rt, 0, sizeof b->rt);
    b->c = c;
    b->req = req;
    b->flags = flags;
    b->res = res;
    b->call = call;
    b->stage = BX_ROUTE;
    b->x.served = NULL;
    b->x.served_arg = NULL;
}

void rlock__bexec_on_served(rlock__bexec *b, void (*fn)(void *arg), void *arg)
{
    b->x.served = fn;
    b->x.served_arg = arg;
}

int rlock__bexec_round(rlock__bexec *b, rlock__conn **conns, size_t *want,
                       int *n, int64_t *until_ns)
{
    rlock_client *c = b->c;

    for (;;) {
        switch (b->stage) {
        case BX_ROUTE:
        case BX_PAUSE:
            /* A pause the backend asked for (a cluster's TRYAGAIN) is a
             * round of its own: a timer, not a sleep. */
            if (b->stage == BX_ROUTE && b->rt.not_before > rlock__now_ns()) {
                b->stage = BX_PAUSE;
                *n = 0;
                *until_ns = b->rt.not_before;
                return 1;
            }
            if (c->backend->route(c, b->req, b->flags, &b->rt, b->res,
                                  b->call) != RLOCK_OK) {
                b->stage = BX_DONE;
                return 0;
            }
            b->rt.sent_ns = rlock__now_ns();
            b->rt.exchanges++;
            rlock__xchg_start(&b->x, b->rt.nodes, b->rt.n,
                              b->rt.req ? b->rt.req : b->req, b->rt.flags,
                              b->rt.deadline_ns, b->res);
            b->stage = BX_XCHG;
            break;
        case BX_XCHG:
            if (rlock__xchg_round(&b->x, conns, want, until_ns)) {
                *n = b->x.n;
                /* Every leg waits for a pooled connection: a short pause,
                 * then rlock__bexec_after tries again. */
                if (rlock__xchg_pooling(&b->x)) {
                    *n = 0;
                    *until_ns = rlock__earlier(*until_ns,
                                               rlock__now_ns() + POOL_RETRY_NS);
                }
                return 1;
            }
            if (c->backend->routed(c, b->req, &b->rt, b->res, b->call) ==
                RLOCK__ROUTE_DONE) {
                b->stage = BX_DONE;
                return 0;
            }
            b->stage = BX_ROUTE;
            break;
        default:
            return 0;
        }
    }
}

void rlock__bexec_after(rlock__bexec *b)
{
    if (b->stage == BX_XCHG)
        rlock__xchg_after(&b->x);
    else if (b->stage == BX_PAUSE)
        b->stage = BX_ROUTE;
}

int rlock__bexec_settled(const rlock__bexec *b, int i, size_t want)
{
    return b->stage != BX_XCHG || rlock__xchg_settled(&b->x, i, want);
}

void rlock__bexec_fail(rlock__bexec *b, int i, int code, const char *why)
{
    if (b->stage == BX_XCHG)
        rlock__xchg_fail(&b->x, i, code, why);
}

void rlock__bexec_unpool(rlock__bexec *b)
{
    if (b->stage == BX_XCHG)
        rlock__xchg_unpool(&b->x, RLOCK_ECANCELED, "the call was canceled");
}

int rlock__bexec_abort(rlock__bexec *b)
{
    rlock__conn *conns[RLOCK__NODES_MAX];
    size_t want[RLOCK__NODES_MAX];
    int64_t until;
    int i, k, filled = 0;

    if (b->stage == BX_XCHG) {
        rlock__xchg_unpool(&b->x, RLOCK_ECANCELED, "the call was canceled");
        /* Every round the exchange would go on with fails at once: a leg
         * whose connection broke is over, so this ends within a round or
         * two (the cap is for safety). */
        for (k = 0; k < 16; k++) {
            if (!rlock__xchg_round(&b->x, conns, want, &until)) {
                filled = 1;
                break;
            }
            for (i = 0; i < b->x.n; i++)
                if (conns[i] && !rlock__xchg_settled(&b->x, i, want[i]))
                    rlock__xchg_fail(&b->x, i, RLOCK_ECANCELED,
                                     "the call was canceled");
            rlock__xchg_after(&b->x);
        }
    }
    /* A backend's own question (a sentinel's) was under way: the request
     * itself was never sent, whatever reached the sentinel, and whatever
     * its answer, it is not the request's. */
    if (filled && b->rt.req)
        for (i = 0; i < b->res->n; i++) {
            rlock__result *r = &b->res->r[i];
            if (r->rc == RLOCK_OK) {
                rlock__result_drop(r);
                r->rc = RLOCK_ECANCELED;
                rlock__err_set(&r->err, RLOCK_ECANCELED,
                               "the call was canceled");
            }
            r->sent = 0;
        }
    b->stage = BX_DONE;
    return filled;
}

void rlock__backend_exec(rlock_client *c, const rlock__req *req, int flags,
                         rlock__results *res, rlock__call *call)
{
    rlock__bexec b;
    rlock__conn *conns[RLOCK__NODES_MAX];
    size_t want[RLOCK__NODES_MAX];
    int64_t until;
    int n;

    rlock__bexec_start(&b, c, req, flags, res, call);
    while (rlock__bexec_round(&b, conns, want, &n, &until)) {
        if (n > 0) {
            rlock__net_run(conns, n, want, until);
        } else {
            struct timespec ts = rlock__timespec(until);
            while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) ==
                   EINTR)
                ;
        }
        rlock__bexec_after(&b);
    }
}

/* The room for slot's answers, now that its request goes out. */
static int slot_ready(rlock__slot *slot, rlock_client *c)
{
    if (rlock__req_finish(&slot->req) != RLOCK_OK ||
        rlock__results_reserve(&slot->res, c->nnodes > 1 ? c->nnodes : 1) !=
            RLOCK_OK) {
        rlock__results_none(&slot->res);
        slot->rc = rlock__fail(slot->call, RLOCK_ENOMEM, "out of memory");
        return 0;
    }
    return 1;
}

int rlock__slot_start(rlock__slot *slot, rlock_client *c, rlock__bexec *b)
{
    if (!slot_ready(slot, c))
        return 0;
    slot->rc = RLOCK_OK;
    /* A loop must not wait for a pooled connection in a condition
     * variable. */
    rlock__bexec_start(b, c, &slot->req, slot->flags | RLOCK__X_NOWAIT,
                       &slot->res, slot->call);
    return 1;
}

void rlock__slot_run(rlock__slot *slot, rlock_client *c)
{
    if (!slot_ready(slot, c))
        return;
    slot->rc = RLOCK_OK;
    rlock__backend_exec(c, &slot->req, slot->flags, &slot->res, slot->call);
}

int64_t rlock__ask_until(const rlock_client *c, int64_t until)
{
    int64_t one = rlock__now_ns() +
                  (int64_t)c->opts.connect_timeout_ms * RLOCK__NS_PER_MS;

    return until && until < one ? until : one;
}

int rlock__sub_connect(rlock_client *c, rlock__conn **out, rlock__call *call)
{
    int i, rc = RLOCK_OK;

    for (i = 0;; i++) {
        rlock__node *n = NULL;
        if ((rc = c->backend->sub_node(c, i, 0, &n, call)) != RLOCK_OK)
            break;
        if (!n) {
            if (i == 0)
                rc = rlock__fail(call, RLOCK_ECONNECT, "no server of %s",
                                 c->where);
            else
                rc = call->code ? call->code : RLOCK_ECONNECT;
            break;
        }
        rc = rlock__node_connect(
            n, rlock__call_until(call, c->opts.connect_timeout_ms), out, call);
        if (rc == RLOCK_OK)
            return RLOCK_OK;
    }
    if (c->backend->sub_failed)
        c->backend->sub_failed(c, rc);
    return rc;
}

int rlock__routed_once(rlock_client *c, const rlock__req *req, rlock__route *rt,
                       rlock__results *res, rlock__call *call)
{
    (void)c;
    (void)req;
    (void)rt;
    (void)res;
    (void)call;
    return RLOCK__ROUTE_DONE;
}

int rlock__node_connect_now(rlock__node *n, int64_t deadline_ns,
                            rlock__call *call, int *sent)
{
    rlock__results res;
    int rc;

    if (rlock__nodes_connect(&n, 1, deadline_ns, &res) != RLOCK_OK)
        return rlock__fail(call, RLOCK_ENOMEM, "out of memory");
    rc = res.r[0].rc;
    if (sent)
        *sent = res.r[0].sent;
    if (rc != RLOCK_OK)
        rlock__fail(call, rc, "%s", res.r[0].err.msg);
    rlock__results_free(&res);
    return rc;
}

void rlock__node_cfg_of(const rlock_client *c, rlock__node_cfg *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->username = c->username;
    cfg->password = c->password;
    cfg->tls = c->tls;
    cfg->sni = c->tls_sni;
    cfg->bounds.reply_bytes = c->opts.max_reply_bytes;
    cfg->bounds.bulk_bytes = c->opts.max_bulk_bytes;
    cfg->bounds.array_elements = c->opts.max_array_elements;
    cfg->bounds.depth = c->opts.max_depth;
    cfg->connect_timeout_ms = c->opts.connect_timeout_ms;
    cfg->request_timeout_ms = c->opts.command_timeout_ms;
    cfg->sync_timeout_ms = c->opts.sync_timeout_ms;
    cfg->max_connections = c->opts.max_connections;
    cfg->wait_for_connection = 1;
    cfg->scripts = c->scripts;
    cfg->nscripts = c->nscripts;
    cfg->obs = c->obs;
}

static int dup_opt(const char *in, char **out, rlock__call *call)
{
    *out = NULL;
    if (in && !(*out = strdup(in)))
        return rlock__fail(call, RLOCK_ENOMEM, "out of memory");
    return RLOCK_OK;
}

/*
 * The client keeps its own copies of the file names (the nodes of a
 * Redlock or Cluster client are opened with them later) and builds one
 * context that every connection of this client uses.
 */
int rlock__client_tls(rlock_client *c, const rlock_client_opts *opts,
                      rlock__call *call)
{
    rlock__tls_opts to;
    rlock__neterr e;
    char *ca, *cert, *key;
    int rc;

    if ((rc = dup_opt(opts->tls_ca_file, &ca, call)) != RLOCK_OK)
        return rc;
    c->opts.tls_ca_file = ca;
    if ((rc = dup_opt(opts->tls_cert_file, &cert, call)) != RLOCK_OK)
        return rc;
    c->opts.tls_cert_file = cert;
    if ((rc = dup_opt(opts->tls_key_file, &key, call)) != RLOCK_OK)
        return rc;
    c->opts.tls_key_file = key;
    if ((rc = dup_opt(opts->tls_sni, &c->tls_sni, call)) != RLOCK_OK)
        return rc;
    c->opts.tls_sni = c->tls_sni;
    c->opts.tls = opts->tls;
    c->opts.tls_insecure = opts->tls_insecure;
    if (!opts->tls)
        return RLOCK_OK;
    to.ca_file = ca;
    to.cert_file = cert;
    to.key_file = key;
    to.insecure = opts->tls_insecure;
    if (rlock__tls_ctx_new(&to, &c->tls, &e) != RLOCK_OK)
        return rlock__fail(call, e.code, "%s", e.msg);
    return RLOCK_OK;
}

/* A URL's string over the option's: an option set stays (the URL may
 * say the same again). 0, or -1 when they differ. */
static int add_str(const char *url_value, const char **opt)
{
    if (!url_value)
        return 0;
    if (*opt && strcmp(*opt, url_value) != 0)
        return -1;
    *opt = url_value;
    return 0;
}

int rlock__url_tls(const rlock__url *u, rlock_client_opts *eff,
                   rlock__call *call)
{
    /* A URL may add TLS, a CA, certificates, a name: never take away what
     * the program asked for. Whoever can set RLOCK_URL or REDIS_URL could
     * otherwise turn TLS off (tls=0) or trust a CA of their own. */
    if (u->tls == 0 && eff->tls)
        return rlock__fail(call, RLOCK_EINVAL,
                           "the URL's tls=0 contradicts the client's TLS "
                           "option: a URL can only add TLS");
    if (u->tls_insecure == 1 && eff->tls_ca_file)
        return rlock__fail(call, RLOCK_EINVAL,
                           "the URL's insecure=1 contradicts the client's CA "
                           "file: a URL cannot turn verification off");
    if (add_str(u->tls_ca, &eff->tls_ca_file) ||
        add_str(u->tls_cert, &eff->tls_cert_file) ||
        add_str(u->tls_key, &eff->tls_key_file) ||
        add_str(u->tls_sni, &eff->tls_sni))
        return rlock__fail(call, RLOCK_EINVAL,
                           "the URL's cacert=, cert=, key= or sni= "
                           "contradicts the client's option of the same "
                           "meaning");
    if (u->tls == 1)
        eff->tls = 1;
    if (u->tls_insecure == 1)
        eff->tls_insecure = 1;
    return RLOCK_OK;
}

int rlock__node_ping(rlock__node *n, int timeout_ms, rlock_server_info *info,
                     rlock__call *call)
{
    const char *ping[1] = {"PING"}, *inf[2] = {"INFO", "server"};
    rlock__cmd cmd = {1, ping, NULL};
    redisReply *r = NULL;
    int64_t t0 = rlock__now_ns(),
            deadline = rlock__call_until(call, timeout_ms);
    int rc;

    memset(info, 0, sizeof *info);
    rc = rlock__node_commands(n, 1, &cmd, &r, deadline, call);
    info->rtt_us = (rlock__now_ns() - t0) / 1000;
    if (rc != RLOCK_OK)
        return rc;
    if (r->type == REDIS_REPLY_ERROR)
        rc = rlock__call_reply_error(call, rlock__node_where(n), r);
    freeReplyObject(r);
    if (rc != RLOCK_OK)
        return rc;
    cmd.argc = 2;
    cmd.argv = inf;
    if ((rc = rlock__node_commands(n, 1, &cmd, &r, deadline, call)) != RLOCK_OK)
        return rc;
    if (r->type == REDIS_REPLY_STRING) {
        /* Valkey reports its own version beside the Redis one it is
         * compatible with, and its name in server_name. */
        rlock__parse_info_field(r, "valkey_version", info->version,
                                sizeof info->version);
        if (!info->version[0])
            rlock__parse_info_field(r, "redis_version", info->version,
                                    sizeof info->version);
        rlock__parse_info_field(r, "server_name", info->server,
                                sizeof info->server);
        if (!info->server[0])
            snprintf(info->server, sizeof info->server, "redis");
    } else if (r->type == REDIS_REPLY_ERROR) {
        rc = rlock__call_reply_error(call, rlock__node_where(n), r);
    }
    freeReplyObject(r);
    return rc;
}

int64_t rlock__margin_one(const rlock_client *c, int64_t lease_ms)
{
    int64_t fixed_ms = lease_ms / 10 < 2 ? lease_ms / 10 : 2;

    (void)c;
    return lease_ms * (RLOCK__NS_PER_MS / 100) + fixed_ms * RLOCK__NS_PER_MS;
}

int rlock__failure_one(rlock_client *c, const char *what, int ok,
                       const rlock__results *res, const int *skip,
                       rlock__call *call)
{
    (void)c;
    (void)what;
    (void)ok;
    (void)skip;
    return rlock__fail(call, res->r[0].rc, "%s", res->r[0].err.msg);
}

int rlock__servers_one(rlock_client *c, int *ids, int max, int *sent,
                       rlock__call *call)
{
    (void)c;
    (void)call;
    *sent = 0;
    if (max < 1)
        return 0;
    ids[0] = 0;
    return 1;
}

int rlock__group_all(const rlock_client *c, const char *key, size_t len)
{
    (void)c;
    (void)key;
    (void)len;
    return 0;
}

const char *rlock__label_none(const rlock_client *c, int i, char *buf,
                              size_t len)
{
    (void)c;
    (void)i;
    if (len > 0)
        buf[0] = '\0';
    return buf;
}

const char *rlock__on_nodes(const rlock_client *c, int k, char *buf, size_t len)
{
    if (c->nnodes == 1)
        snprintf(buf, len, "%s", "");
    else
        snprintf(buf, len, " on %d of %d nodes", k, c->nnodes);
    return buf;
}
