/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Redlock: one lock over N independent Redis masters
 * (redlock://host1:port1,host2:port2,...[?drift=F&node_timeout_ms=N]).
 *
 * A hold exists when a majority (N/2 + 1) of the nodes took it within its
 * validity: the lease, less the time the requests took, less a drift
 * allowance (drift x lease + 2 ms) for clocks that run at different
 * rates. Requests go to every node at once, over one poll driven by the
 * caller's thread, and the caller waits for all of them or for the
 * per-node timeout, whichever comes first. No thread per node. A node
 * still owed an earlier reply (a paused server) counts as failed at once
 * rather than queueing more work behind it; only undos are queued there,
 * to reach it after what they undo.
 *
 * What the majority means for each operation (tokens chosen over the
 * nodes, release everywhere, renewal by majority) is the engine's, which
 * counts every backend's results against its quorum; this file only
 * reaches the nodes. Waiting is by retries (a release on one node says
 * nothing about the others) and re-entry is counted by the client: the
 * backend does not claim RLOCK__BK_ONE_COPY.
 *
 * Each server must count once. Two entries of the list that name it
 * under the same host text, or under addresses the resolver gives for
 * both, are refused at open before anything is connected. Aliases that
 * no address says (0.0.0.0, the IPv4 and the IPv6 loopback, two
 * interfaces, a NAT) are known by the server's run_id, asked with every
 * new connection's handshake (node.c, identify): an answer of a server
 * that answered for an earlier entry of the same request is not counted,
 * and at open the list is refused. A server restarted behind its address
 * has a new run_id and is simply that entry's server again.
 *
 * Every client of a lock must list the same nodes: majorities of two
 * lists of different lengths need not share a node. The owner id of every
 * hold says how many nodes its client lists (c->owner_tag, "#nodes=N"),
 * and an acquisition that finds a hold of another count on any node is
 * refused (native_acquire.lua, engine/acquire.c).
 */
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "backend/backend.h"
#include "net/resolve.h"
#include "util/clock.h"

typedef struct redlock {
    rlock__node_cfg cfg;
    rlock__node *nodes[RLOCK__NODES_MAX];
    int n;
    double drift;        /* a fraction of the lease */
    int node_timeout_ms; /* longest wait for one node's answer */
} redlock;

static redlock *of(const rlock_client *c)
{
    return c->bk;
}

/* Parameters: drift=F (0 <= F < 1), node_timeout_ms=N; plain decimals
 * only (no sign, exponent, hex or spaces). */
static int parse_params(const char *a, double *drift, int *node_timeout_ms,
                        rlock__call *call)
{
    char buf[300];

    while (*a) {
        const char *amp = strchr(a, '&');
        size_t alen = amp ? (size_t)(amp - a) : strlen(a);
        char *e;
        if (alen > 6 && strncmp(a, "drift=", 6) == 0) {
            snprintf(buf, sizeof buf, "%.*s", (int)(alen - 6), a + 6);
            *drift = strtod(buf, &e);
            if (e == buf || *e || strspn(buf, "0123456789.") != strlen(buf) ||
                !(*drift >= 0 && *drift < 1))
                return rlock__fail(call, RLOCK_EINVAL,
                                   "redlock URL: drift must be a number "
                                   "from 0 to below 1 (got \"%s\")",
                                   buf);
        } else if (alen > 16 && strncmp(a, "node_timeout_ms=", 16) == 0) {
            long v;
            snprintf(buf, sizeof buf, "%.*s", (int)(alen - 16), a + 16);
            v = strtol(buf, &e, 10);
            if (e == buf || *e || strspn(buf, "0123456789") != strlen(buf) ||
                v < 1 || v > 60000)
                return rlock__fail(call, RLOCK_EINVAL,
                                   "redlock URL: node_timeout_ms must be "
                                   "1 to 60000 (got \"%s\")",
                                   buf);
            *node_timeout_ms = (int)v;
        } else {
            /* The name only: its value may be a secret put in the wrong
             * place (password=...). */
            size_t klen = strcspn(a, "=&");
            if (klen > alen)
                klen = alen;
            return rlock__fail(call, RLOCK_EINVAL,
                               "redlock URL: unknown parameter \"%.*s\" "
                               "(drift, node_timeout_ms)",
                               (int)(klen < 40 ? klen : 40), a);
        }
        a += alen + (amp ? 1 : 0);
    }
    return RLOCK_OK;
}

/* The node list, before anything is made: 1 to RLOCK__NODES_MAX entries
 * of host[:port]. */
static int check_list(const char *p, const char *end, rlock__call *call)
{
    int n = 0;

    if (p == end)
        return rlock__fail(call, RLOCK_EINVAL,
                           "redlock URL: no nodes (redlock://host:port,...)");
    for (;;) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        size_t len = comma ? (size_t)(comma - p) : (size_t)(end - p);

        if (len == 0)
            return rlock__fail(call, RLOCK_EINVAL,
                               "redlock URL: empty node in the list");
        if (++n > RLOCK__NODES_MAX)
            return rlock__fail(call, RLOCK_EINVAL,
                               "redlock URL: at most %d nodes",
                               RLOCK__NODES_MAX);
        if (len > 200)
            return rlock__fail(call, RLOCK_EINVAL,
                               "redlock URL: node %d is too long", n);
        if (memchr(p, '/', len) || memchr(p, '@', len))
            return rlock__fail(call, RLOCK_EINVAL,
                               "redlock URL: node %d must be host:port "
                               "(credentials go in the client options)",
                               n);
        if (!comma)
            return RLOCK_OK;
        p = comma + 1;
    }
}

int rlock__redlock_parse(const char *spec, double *drift, int *node_timeout_ms,
                         const char **list_end, rlock__err *e)
{
    const char *q = strchr(spec, '?');
    rlock__call call = {0};
    int rc = RLOCK_OK;

    rlock__call_init(&call, 0);
    *drift = 0.01;
    *node_timeout_ms = 100;
    *list_end = q ? q : spec + strlen(spec);
    if (q)
        rc = parse_params(q + 1, drift, node_timeout_ms, &call);
    if (rc == RLOCK_OK)
        rc = check_list(spec, *list_end, &call);
    if (rc != RLOCK_OK)
        rlock__call_get(&call, e);
    rlock__call_end(&call);
    return rc;
}

/* Whether a and b share an address. */
static int same_addr(const rlock__addrs *a, const rlock__addrs *b)
{
    int i, k;

    for (i = 0; i < a->n; i++)
        for (k = 0; k < b->n; k++) {
            const struct sockaddr_storage *x = &a->a[i], *y = &b->a[k];
            if (x->ss_family != y->ss_family)
                continue;
            if (x->ss_family == AF_INET &&
                ((const struct sockaddr_in *)x)->sin_addr.s_addr ==
                    ((const struct sockaddr_in *)y)->sin_addr.s_addr)
                return 1;
            if (x->ss_family == AF_INET6 &&
                memcmp(&((const struct sockaddr_in6 *)x)->sin6_addr,
                       &((const struct sockaddr_in6 *)y)->sin6_addr,
                       sizeof(struct in6_addr)) == 0)
                return 1;
        }
    return 0;
}

/*
 * The same server given twice would be two votes of one server, and a
 * majority of the list would not be a majority of servers. Two entries are
 * the same node if they name the same host and port, or if any address one
 * resolves to is an address of the other (a name and its address, two
 * names of one host). A name that does not resolve is compared by its text
 * only; connecting to it reports the rest. What addresses cannot show,
 * the servers' run_ids do, once connected. Names are looked up by
 * deadline_ns; an event loop's client (names_too 0) looks none up, since
 * its open must not wait: its addresses are compared, and its names by
 * their text, until the run_ids tell.
 */
static int refuse_duplicates(const rlock__url *u, int n, int names_too,
                             int64_t deadline_ns, rlock__call *call)
{
    rlock__addrs *ai;
    int i, k, rc = RLOCK_OK, *found;

    if (!(ai = calloc((size_t)n, sizeof *ai + sizeof *found)))
        return rlock__fail(call, RLOCK_ENOMEM, "out of memory");
    found = (int *)(void *)(ai + n);
    for (i = 0; i < n && rc == RLOCK_OK; i++) {
        rlock__neterr ne;
        int noname = 0;
        found[i] = names_too ? rlock__resolve_wait(u[i].host, deadline_ns,
                                                   &ai[i], &ne) == RLOCK_OK
                             : rlock__resolve_numeric(u[i].host, &ai[i],
                                                      &noname, &ne) == RLOCK_OK;
        for (k = 0; k < i && rc == RLOCK_OK; k++) {
            char a[300], b[300];
            if (!(u[k].port == u[i].port &&
                  (strcasecmp(u[k].host, u[i].host) == 0 ||
                   (found[k] && found[i] && same_addr(&ai[k], &ai[i])))))
                continue;
            rlock__url_describe(&u[k], a, sizeof a);
            rlock__url_describe(&u[i], b, sizeof b);
            rc = rlock__fail(call, RLOCK_EINVAL,
                             "redlock URL: nodes %d (%s) and %d (%s) are the "
                             "same server; each must count once toward the "
                             "majority",
                             k + 1, a, i + 1, b);
        }
    }
    free(ai);
    return rc;
}

/* Makes the nodes of "host:port,..." in [spec, end). */
static int make_nodes(redlock *r, const char *spec, const char *end,
                      int names_too, int64_t deadline_ns, rlock__call *call)
{
    rlock__url u[RLOCK__NODES_MAX];
    rlock__err e;
    const char *p;
    int n = 0, i, rc = RLOCK_OK;

    memset(u, 0, sizeof u);
    for (p = spec; p < end && rc == RLOCK_OK;) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        size_t len = comma ? (size_t)(comma - p) : (size_t)(end - p);
        char url[220], where[64];

        snprintf(url, sizeof url, "redis://%.*s", (int)len, p);
        snprintf(where, sizeof where, "%.*s", (int)len, p);
        if ((rc = rlock__url_parse(url, &u[n], &e)) != RLOCK_OK) {
            rlock__fail(call, rc, "redlock node %s: %.400s", where, e.msg);
            break;
        }
        if (rlock__node_new(&r->cfg, u[n].host, u[n].port, NULL, where,
                            &r->nodes[n]) != RLOCK_OK) {
            rc = rlock__fail(call, RLOCK_ENOMEM, "out of memory");
            n++;
            break;
        }
        n++;
        p += len + (comma ? 1 : 0);
        if (!comma)
            break;
    }
    r->n = n;
    if (rc == RLOCK_OK)
        rc = refuse_duplicates(u, n, names_too, deadline_ns, call);
    for (i = 0; i < n; i++)
        rlock__url_free(&u[i]);
    return rc;
}

static int open_redlock(rlock_client *c, const char *url,
                        const rlock_client_opts *opts, rlock__call *call)
{
    rlock_client_opts eff = *opts;
    redlock *r = calloc(1, sizeof *r);
    rlock__results res;
    rlock__url tls;
    rlock__err err;
    const char *spec, *end = NULL;
    char *rest = NULL, why[400] = "";
    int rc, i, down = 0;

    if (!r)
        return rlock__fail(call, RLOCK_ENOMEM, "out of memory");
    c->bk = r;
    if ((rc = rlock__url_split_tls(url, &tls, &rest, &err)) != RLOCK_OK)
        return rlock__call_set(call, &err);
    rc = rlock__url_tls(&tls, &eff, call);
    if (rc == RLOCK_OK)
        rc = rlock__client_tls(c, &eff, call);
    rlock__url_free(&tls);
    spec = rest + strlen("redlock://");
    if (rc == RLOCK_OK &&
        (rc = rlock__redlock_parse(spec, &r->drift, &r->node_timeout_ms, &end,
                                   &err)) != RLOCK_OK)
        rlock__call_set(call, &err);
    if (rc == RLOCK_OK)
        snprintf(c->where, sizeof c->where, "redlock://%.*s",
                 (int)(end - spec) < 280 ? (int)(end - spec) : 280, spec);
    if (rc == RLOCK_OK && opts->sync_replicas)
        rc = rlock__fail(call, RLOCK_EINVAL,
                         "sync_replicas does not apply to redlock:// (the "
                         "nodes are independent masters)");
    /* A renewal waits up to the node timeout; it must fit in a renewal
     * period with room to spare. */
    if (rc == RLOCK_OK &&
        (int64_t)r->node_timeout_ms * 3 >= opts->watchdog_lease_ms / 3)
        rc = rlock__fail(call, RLOCK_EINVAL,
                         "redlock URL: node_timeout_ms (%d) must be below "
                         "a ninth of watchdog_lease_ms (%" PRId64 ")",
                         r->node_timeout_ms, opts->watchdog_lease_ms);
    if (rc == RLOCK_OK &&
        ((opts->username && !(c->username = strdup(opts->username))) ||
         (opts->password && !(c->password = strdup(opts->password)))))
        rc = rlock__fail(call, RLOCK_ENOMEM, "out of memory");
    if (rc != RLOCK_OK) {
        free(rest);
        return rc;
    }
    /* Each node answers within the per-node timeout, connecting included.
     * As many connections each as the client's other pools, and at least
     * two, so that the caller's request and the background's (a renewal,
     * an undo) never make each other fail, and the client's threads (or
     * a loop's burst of requests before its connections are up) each
     * have one. A node that has two connections owing replies to
     * requests that gave up on it (a paused server) is opened no other
     * until it answers: a request that finds none of its connections free
     * counts it as failed, at once, rather than piling more work on it (a
     * paused server runs it all when it wakes). Two, not one: a release
     * still reaches a node that one late request made suspect, and runs
     * there after that request. No request waits for another's
     * connection. */
    rlock__node_cfg_of(c, &r->cfg);
    r->cfg.connect_timeout_ms = r->node_timeout_ms;
    r->cfg.request_timeout_ms = r->node_timeout_ms;
    if (r->cfg.max_connections < 2)
        r->cfg.max_connections = 2;
    r->cfg.most_owing = 2;
    r->cfg.wait_for_connection = 0;
    r->cfg.identify = 1;
    rc = make_nodes(r, spec, end, !c->lazy,
                    rlock__call_until(call, opts->connect_timeout_ms), call);
    free(rest);
    if (rc != RLOCK_OK)
        return rc;
    c->nnodes = r->n;
    c->quorum = r->n / 2 + 1;
    snprintf(c->owner_tag, sizeof c->owner_tag, "#nodes=%d", r->n);
    /* Every node at once: a majority must answer now. A node that is down
     * may be up later (it is connected to again when a request comes); a
     * node that refuses us, an address that is not one, or one that
     * reaches the server of an earlier entry (RLOCK_EINVAL), is a mistake
     * to report now (but for an event loop's client: its first request
     * says). */
    if (c->lazy)
        return RLOCK_OK;
    if (rlock__nodes_connect(r->nodes, r->n,
                             rlock__after_ms(r->node_timeout_ms),
                             &res) != RLOCK_OK)
        return rlock__fail(call, RLOCK_ENOMEM, "out of memory");
    for (i = 0; i < r->n; i++) {
        int e = res.r[i].rc;
        if (e == RLOCK_OK)
            continue;
        if (e != RLOCK_ECONNECT && e != RLOCK_ENOREPLY && e != RLOCK_EIO) {
            rlock__fail(call, e, "redlock node %s: %.400s",
                        rlock__node_where(r->nodes[i]), res.r[i].err.msg);
            rlock__results_free(&res);
            return e;
        }
        /* The first unreachable node's cause is named: a certificate not
         * trusted, a refused connection, a timeout. */
        if (!down++)
            snprintf(why, sizeof why, "%s: %.300s",
                     rlock__node_where(r->nodes[i]), res.r[i].err.msg);
    }
    rlock__results_free(&res);
    if (r->n - down < c->quorum)
        return rlock__fail(call, RLOCK_EQUORUM,
                           "redlock: only %d of %d nodes could be reached "
                           "(a majority is %d); %s",
                           r->n - down, r->n, c->quorum, why);
    return RLOCK_OK;
}

static void close_redlock(rlock_client *c)
{
    redlock *r = of(c);
    int i;

    if (!r)
        return;
    for (i = 0; i < r->n; i++)
        rlock__node_free(r->nodes[i]);
    free(r);
    c->bk = NULL;
}

static void after_fork_redlock(rlock_client *c)
{
    redlock *r = of(c);
    int i;

    for (i = 0; i < r->n; i++)
        rlock__node_after_fork(r->nodes[i]);
}

static void fork_hold_redlock(rlock_client *c, int take)
{
    redlock *r = of(c);
    int i;

    for (i = 0; i < r->n; i++)
        rlock__node_fork_hold(r->nodes[i], take);
}

static int route_redlock(rlock_client *c, const rlock__req *req, int flags,
                         rlock__route *rt, rlock__results *res,
                         rlock__call *call)
{
    redlock *r = of(c);
    int i;

    (void)req;
    (void)res;
    for (i = 0; i < r->n; i++)
        rt->nodes[i] = r->nodes[i];
    rt->n = r->n;
    rt->flags = flags;
    rt->deadline_ns = rlock__call_until(call, r->node_timeout_ms);
    return RLOCK_OK;
}

static int ping_redlock(rlock_client *c, rlock_server_info *info,
                        rlock__call *call)
{
    redlock *r = of(c);
    int i, answered = 0;
    char errs[400] = "";
    size_t len = 0;

    /* One node after the other: an operator's call, each bounded by the
     * per-node timeout. The version is the first node's; the round trip
     * the slowest answer's. */
    memset(info, 0, sizeof *info);
    for (i = 0; i < r->n; i++) {
        rlock_server_info one;
        rlock__call nc = {0};
        rlock__call_init(&nc, 0);
        if (rlock__node_ping(r->nodes[i], r->node_timeout_ms, &one, &nc) ==
            RLOCK_OK) {
            if (!answered) {
                memcpy(info->version, one.version, sizeof info->version);
                memcpy(info->server, one.server, sizeof info->server);
            }
            if (one.rtt_us > info->rtt_us)
                info->rtt_us = one.rtt_us;
            answered++;
        } else if (len < sizeof errs) {
            len += (size_t)snprintf(errs + len, sizeof errs - len, "; %s: %s",
                                    rlock__node_where(r->nodes[i]),
                                    rlock__call_msg(&nc));
        }
        rlock__call_end(&nc);
    }
    if (answered < c->quorum)
        return rlock__fail(call, RLOCK_EQUORUM,
                           "ping: %d of %d nodes (a majority is %d)%s",
                           answered, r->n, c->quorum, errs);
    return RLOCK_OK;
}

static int64_t margin_redlock(const rlock_client *c, int64_t lease_ms)
{
    return (int64_t)((double)lease_ms * of(c)->drift * 1e6) +
           2 * RLOCK__NS_PER_MS;
}

static const char *label_redlock(const rlock_client *c, int i, char *buf,
                                 size_t len)
{
    snprintf(buf, len, " on node %s", rlock__node_where(of(c)->nodes[i]));
    return buf;
}

static int failure_redlock(rlock_client *c, const char *what, int ok,
                           const rlock__results *res, const int *skip,
                           rlock__call *call)
{
    char msg[RLOCK__ERR_MAX];
    size_t len;
    int i;

    /* A node that reached another entry's server (node.c) is one that
     * failed: its reason names both entries. */
    len = (size_t)snprintf(msg, sizeof msg,
                           "%s: %d of %d nodes (a majority is %d)", what, ok,
                           c->nnodes, c->quorum);
    for (i = 0; i < res->n && len < sizeof msg; i++) {
        if ((skip && skip[i]) || res->r[i].rc == RLOCK_OK)
            continue;
        len += (size_t)snprintf(msg + len, sizeof msg - len, "; %s: %s",
                                rlock__node_where(of(c)->nodes[i]),
                                res->r[i].err.msg);
    }
    return rlock__fail(call, RLOCK_EQUORUM, "%s", msg);
}

/* Every node: each keeps its own copies. */
static int servers_redlock(rlock_client *c, int *ids, int max, int *sent,
                           rlock__call *call)
{
    int i, n = of(c)->n < max ? of(c)->n : max;

    (void)call;
    *sent = 0;
    for (i = 0; i < n; i++)
        ids[i] = i;
    return n;
}

static int server_commands_redlock(rlock_client *c, int id, int ncmds,
                                   const rlock__cmd *cmds, redisReply **replies,
                                   const char **where, rlock__call *call)
{
    redlock *r = of(c);

    *where = rlock__node_where(r->nodes[id]);
    return rlock__node_commands(r->nodes[id], ncmds, cmds, replies,
                                rlock__call_until(call, r->node_timeout_ms),
                                call);
}

const rlock__backend rlock__backend_redlock = {
    "Redlock",
    "redlock://",
    0,
    open_redlock,
    close_redlock,
    after_fork_redlock,
    fork_hold_redlock,
    route_redlock,
    rlock__routed_once,
    rlock__group_all,
    ping_redlock,
    NULL,
    NULL,
    margin_redlock,
    label_redlock,
    failure_redlock,
    servers_redlock,
    server_commands_redlock,
};
