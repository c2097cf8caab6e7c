/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Redlock: one lock over N independent Redis masters
 * (redlock://host1:port1,host2:port2,...[?drift=F&node_timeout_ms=N]).
 *
 * A hold exists when a majority (N/2 + 1) of the nodes took it within its
 * validity: the lease, less the time the requests took, less a drift
 * allowance (drift x lease + 2 ms) for clocks that run at different
 * rates. Requests go to every node at once, over one poll: each node is
 * a client of its own (a single-instance rlock client, so scripts,
 * credentials and error replies work as they do everywhere else) whose
 * connection is driven by the caller's thread together with the others,
 * and the caller waits for all of them, or for the per-node timeout,
 * whichever comes first. No thread per node. A node still busy with an
 * earlier request (a paused server) counts as failed at once rather than
 * queueing more work behind it.
 *
 * Fencing across nodes: the first round takes the lock on each node with
 * that node's own next token; the hold's token is the largest of the
 * majority's, and a second round writes it (as the lock's token and as a
 * floor for the node's counter) to every node that answered with less.
 * Any later acquisition draws its tokens from a majority too, which shares
 * a node with this one's majority, and that node's counter is already at
 * least this token: tokens increase across successful acquisitions as
 * long as the nodes keep their counters (see docs/deployments.md for what
 * a restart without persistence does). Once the counters agree the second
 * round is skipped.
 *
 * What is not done here: waiting uses jittered retries, not pub/sub (a
 * release on one node says nothing about the others), and re-entry is
 * counted by the client alone (the nodes see one hold).
 */
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <strings.h>
#include <sys/socket.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "reply.h"

struct rlock__node {
    rlock_client *parent;
    rlock_client *sub; /* a single-instance client for this node (NULL
                          while it could not be opened) */
    char where[40];    /* host:port, for messages (may be cut short) */
    char url[220];     /* redis://host:port */
    /* A connection whose replies are still owed: a request the caller
     * stopped waiting for (a paused or slow node). Undos for the node go
     * behind it, on the same connection, so that they reach the node after
     * what they undo; other requests fail at once rather than pile up. */
    rlock__conn *busy;
    int64_t busy_since;
};

/* How long a node's owed replies are waited for, in the background of
 * later requests, before its connection is given up. */
static int64_t busy_limit_ns(const rlock_client *c)
{
    int64_t ms = c->opts.command_timeout_ms;

    if (ms < 10 * (int64_t)c->node_timeout_ms)
        ms = 10 * (int64_t)c->node_timeout_ms;
    return ms * RLOCK__NS_PER_MS;
}

/* Collects what a busy node has answered since (nodes_mu held); frees
 * the connection for new requests once nothing is owed. */
static void settle_busy(rlock__node *n)
{
    rlock__conn *b = n->busy;

    if (!b)
        return;
    rlock__conn_io(b, 0);
    if (rlock__conn_error(b)->code != 0 ||
        rlock__now_ns() - n->busy_since > busy_limit_ns(n->parent)) {
        rlock__conn_put(n->sub, b, 1);
        n->busy = NULL;
    } else if (rlock__conn_pending(b) == 0) {
        rlock__conn_put(n->sub, b, 0);
        n->busy = NULL;
    }
}

/* One node's part of a request in flight. */
typedef struct leg {
    rlock__conn *conn;
    rlock__script_call call;
    int called;           /* call is built (to be freed) */
    int hs, first_script; /* handshake replies owed first (new conn) */
    int retried;          /* NOSCRIPT: sent again with the body */
} leg;

/* Node i's error: what its client recorded, naming the node. */
static void node_err(rlock_client *c, int i, rlock__node_result *r, int rc)
{
    r->rc = rc;
    snprintf(r->err, sizeof r->err, "%s: %s", c->nodes[i].where,
             rlock_client_errmsg(c->nodes[i].sub));
}

/* Starts node i's part: a connection from its pool (or a new one, its
 * handshake queued), the script queued behind. 0 if under way. */
static int leg_start(rlock_client *c, int i, enum rlock__script s, int nkeys,
                     const char **keys, const size_t *key_lens, int nargs,
                     const char **args, const size_t *arg_lens, leg *l,
                     rlock__node_result *res)
{
    rlock__node *n = &c->nodes[i];
    int got, rc;

    got = rlock__pool_try(n->sub, &l->conn);
    if (got < 0) {
        snprintf(res->err, sizeof res->err,
                 "%s: still busy with an earlier request", n->where);
        return -1;
    }
    if (got == 0) {
        rc = rlock__connect_start(n->sub, &l->conn, &l->hs, &l->first_script);
        if (rc != RLOCK_OK) {
            rlock__pool_giveback(n->sub);
            l->conn = NULL;
            node_err(c, i, res, rc);
            return -1;
        }
    }
    rc = rlock__script_argv(n->sub, s, nkeys, keys, key_lens, nargs, args,
                            arg_lens, &l->call);
    if (rc == RLOCK_OK) {
        l->called = 1;
        rc = rlock__conn_append(l->conn, l->call.argc, l->call.argv,
                                l->call.lens);
    }
    if (rc != RLOCK_OK) {
        rlock__conn_put(n->sub, l->conn, 1);
        l->conn = NULL;
        res->rc = rc;
        snprintf(res->err, sizeof res->err, "%s: out of memory", n->where);
        return -1;
    }
    res->sent = 1;
    return 0;
}

/* After a round: node i's outcome from its connection. Returns 1 if the
 * leg goes on (sent again after NOSCRIPT), else 0 (res filled). */
static int leg_settle(rlock_client *c, int i, enum rlock__script s, leg *l,
                      rlock__node_result *res, size_t *want)
{
    rlock__node *n = &c->nodes[i];
    rlock__conn *conn = l->conn;
    redisReply *r = NULL;
    int rc;

    if (rlock__conn_error(conn)->code != 0) {
        rlock__conn_put(n->sub, conn, 1);
        l->conn = NULL;
        node_err(c, i, res,
                 rlock__net_error(n->sub, rlock__conn_error(conn), "request"));
        return 0;
    }
    if (rlock__conn_ready(conn) < *want) {
        /* No answer in time: the node is failed for this request, and
         * the connection waits for what it owes (see settle_busy). */
        rlock__conn_discard(conn, rlock__conn_pending(conn));
        snprintf(res->err, sizeof res->err, "%s: no reply within %d ms",
                 n->where, c->node_timeout_ms);
        res->rc = RLOCK_ENOREPLY;
        l->conn = NULL;
        pthread_mutex_lock(&c->nodes_mu);
        if (n->busy) /* cannot happen: a busy node gets no request */
            rlock__conn_put(n->sub, n->busy, 1);
        n->busy = conn;
        n->busy_since = rlock__now_ns();
        pthread_mutex_unlock(&c->nodes_mu);
        return 0;
    }
    if (l->hs > 0) {
        rc = rlock__connect_finish(n->sub, conn, l->hs, l->first_script);
        l->hs = 0;
        if (rc != RLOCK_OK) {
            rlock__conn_put(n->sub, conn, 1);
            l->conn = NULL;
            node_err(c, i, res, rc);
            return 0;
        }
    }
    rlock__conn_take(conn, &r);
    if (rlock__is_noscript(r) && !l->retried) {
        /* The node lost its scripts (restart, SCRIPT FLUSH): the body
         * caches it again under the same digest. */
        freeReplyObject(r);
        l->retried = 1;
        rlock__script_call_body(&l->call, s);
        if (rlock__conn_append(conn, l->call.argc, l->call.argv,
                               l->call.lens) == RLOCK_OK) {
            *want = 1;
            return 1;
        }
        rlock__conn_put(n->sub, conn, 1);
        l->conn = NULL;
        res->rc = RLOCK_ENOMEM;
        snprintf(res->err, sizeof res->err, "%s: out of memory", n->where);
        return 0;
    }
    rlock__conn_put(n->sub, conn, 0);
    l->conn = NULL;
    if (r->type == REDIS_REPLY_ERROR) {
        node_err(c, i, res, rlock__reply_error(n->sub, r));
        freeReplyObject(r);
        return 0;
    }
    res->rc = RLOCK_OK;
    res->reply = r;
    return 0;
}

/*
 * One request to every node at once, over one poll: each node's
 * connection (taken from that node's pool, or opened without waiting,
 * its handshake in the same write) gets the script, and the caller waits
 * for every answer or for the per-node timeout, whichever comes first. A
 * node that lost its scripts is sent the body in a second round within
 * the same timeout.
 */
int rlock__rl_eval(rlock_client *c, enum rlock__script s, int nkeys,
                   const char **keys, const size_t *key_lens, int nargs,
                   const char **args, const size_t *arg_lens, const int *which,
                   rlock__node_result *res)
{
    leg legs[RLOCK__NODES_MAX];
    rlock__conn *conns[RLOCK__NODES_MAX];
    size_t want[RLOCK__NODES_MAX];
    int64_t deadline = rlock__deadline(c->node_timeout_ms);
    int i, answered = 0, again = 1;

    memset(legs, 0, sizeof legs);
    pthread_mutex_lock(&c->nodes_mu);
    for (i = 0; i < c->nnodes; i++) {
        rlock__node *n = &c->nodes[i];

        res[i].rc = RLOCK_ENOREPLY;
        res[i].reply = NULL;
        res[i].sent = 0;
        res[i].err[0] = '\0';
        if (which && !which[i]) {
            snprintf(res[i].err, sizeof res[i].err, "not asked");
            continue;
        }
        settle_busy(n);
        if (n->busy) {
            rlock__script_call call;
            if (s != RLOCK__S_CANCEL) {
                snprintf(res[i].err, sizeof res[i].err,
                         "%s: still busy with an earlier request", n->where);
                continue;
            }
            /* An undo for a busy node: queued behind what it undoes; the
             * caller does not wait for it. */
            if (rlock__script_argv(n->sub, s, nkeys, keys, key_lens, nargs,
                                   args, arg_lens, &call) == RLOCK_OK) {
                if (rlock__conn_append(n->busy, call.argc, call.argv,
                                       call.lens) == RLOCK_OK) {
                    rlock__conn_discard(n->busy, 1);
                    rlock__conn_io(n->busy, 0);
                    res[i].sent = 1;
                }
                rlock__script_call_free(&call);
            }
            snprintf(res[i].err, sizeof res[i].err,
                     "%s: queued behind an earlier request", n->where);
            continue;
        }
        leg_start(c, i, s, nkeys, keys, key_lens, nargs, args, arg_lens,
                  &legs[i], &res[i]);
    }
    pthread_mutex_unlock(&c->nodes_mu);

    for (i = 0; i < c->nnodes; i++)
        want[i] = legs[i].conn ? (size_t)legs[i].hs + 1 : 0;
    while (again) {
        again = 0;
        for (i = 0; i < c->nnodes; i++)
            conns[i] = legs[i].conn;
        rlock__net_run(conns, c->nnodes, want, deadline);
        for (i = 0; i < c->nnodes; i++)
            if (legs[i].conn &&
                leg_settle(c, i, s, &legs[i], &res[i], &want[i]))
                again = 1;
    }
    for (i = 0; i < c->nnodes; i++) {
        if (legs[i].called)
            rlock__script_call_free(&legs[i].call);
        if (res[i].rc == RLOCK_OK)
            answered++;
    }
    return answered;
}

const char *rlock__rl_node_name(const rlock_client *c, int i)
{
    return c->nodes[i].where;
}

rlock_client *rlock__rl_node_client(const rlock_client *c, int i)
{
    return c->nodes[i].sub;
}

void rlock__rl_results_free(rlock_client *c, rlock__node_result *res)
{
    int i;

    for (i = 0; i < c->nnodes; i++)
        if (res[i].reply) {
            freeReplyObject(res[i].reply);
            res[i].reply = NULL;
        }
}

int rlock__rl_quorum_error(rlock_client *c, const char *what, int ok,
                           const rlock__node_result *res, const int *counted)
{
    char msg[480];
    size_t len;
    int i;

    len = (size_t)snprintf(msg, sizeof msg,
                           "%s: %d of %d nodes (a majority is %d)", what, ok,
                           c->nnodes, c->quorum);
    for (i = 0; i < c->nnodes && len < sizeof msg; i++) {
        if (counted && counted[i])
            continue;
        if (res[i].rc != RLOCK_OK)
            len += (size_t)snprintf(msg + len, sizeof msg - len, "; %s",
                                    res[i].err);
    }
    return rlock__fail(c, RLOCK_EQUORUM, "%s", msg);
}

int64_t rlock__rl_drift_ns(const rlock_client *c, int64_t lease_ms)
{
    return (int64_t)((double)lease_ms * c->drift * 1e6) + 2 * RLOCK__NS_PER_MS;
}

/* ---- opening and closing ------------------------------------------------ */

static void init_nodes_sync(rlock_client *c)
{
    pthread_mutex_init(&c->nodes_mu, NULL);
}

/* The node list, before anything is opened: 1 to RLOCK__NODES_MAX
 * entries of host[:port] (each then parsed as redis://host:port). */
static int check_list(const char *p, const char *end)
{
    int n = 0;

    if (p == end)
        return rlock__fail(NULL, RLOCK_EINVAL,
                           "redlock URL: no nodes (redlock://host:port,...)");
    for (;;) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        size_t len = comma ? (size_t)(comma - p) : (size_t)(end - p);

        if (len == 0)
            return rlock__fail(NULL, RLOCK_EINVAL,
                               "redlock URL: empty node in the list");
        if (++n > RLOCK__NODES_MAX)
            return rlock__fail(NULL, RLOCK_EINVAL,
                               "redlock URL: at most %d nodes",
                               RLOCK__NODES_MAX);
        if (len > 200)
            return rlock__fail(NULL, RLOCK_EINVAL,
                               "redlock URL: node %d is too long", n);
        if (memchr(p, '/', len) || memchr(p, '@', len))
            return rlock__fail(NULL, RLOCK_EINVAL,
                               "redlock URL: node %d must be host:port "
                               "(credentials go in the client options)",
                               n);
        if (!comma)
            return RLOCK_OK;
        p = comma + 1;
    }
}

/* Parses "host:port,host:port,...[?drift=F&node_timeout_ms=N]" (after
 * "redlock://") into c; opens a client per node with opts. */
int rlock__rl_parse(rlock_client *c, const char *spec, const char **list_end)
{
    const char *q = strchr(spec, '?');
    char buf[300];

    c->drift = 0.01;
    c->node_timeout_ms = 100;
    if (q) {
        /* Parameters: drift=F (0 <= F < 1), node_timeout_ms=N; plain
         * decimals only (no sign, exponent, hex or spaces). */
        const char *a = q + 1;
        while (*a) {
            const char *amp = strchr(a, '&');
            size_t alen = amp ? (size_t)(amp - a) : strlen(a);
            char *e;
            if (alen > 6 && strncmp(a, "drift=", 6) == 0) {
                snprintf(buf, sizeof buf, "%.*s", (int)(alen - 6), a + 6);
                c->drift = strtod(buf, &e);
                if (e == buf || *e ||
                    strspn(buf, "0123456789.") != strlen(buf) ||
                    !(c->drift >= 0 && c->drift < 1))
                    return rlock__fail(NULL, RLOCK_EINVAL,
                                       "redlock URL: drift must be a number "
                                       "from 0 to below 1 (got \"%s\")",
                                       buf);
            } else if (alen > 16 && strncmp(a, "node_timeout_ms=", 16) == 0) {
                long v;
                snprintf(buf, sizeof buf, "%.*s", (int)(alen - 16), a + 16);
                v = strtol(buf, &e, 10);
                if (e == buf || *e ||
                    strspn(buf, "0123456789") != strlen(buf) || v < 1 ||
                    v > 60000)
                    return rlock__fail(NULL, RLOCK_EINVAL,
                                       "redlock URL: node_timeout_ms must be "
                                       "1 to 60000 (got \"%s\")",
                                       buf);
                c->node_timeout_ms = (int)v;
            } else {
                return rlock__fail(NULL, RLOCK_EINVAL,
                                   "redlock URL: unknown parameter \"%.*s\" "
                                   "(drift, node_timeout_ms)",
                                   (int)alen, a);
            }
            a += alen + (amp ? 1 : 0);
        }
    }
    *list_end = q ? q : spec + strlen(spec);
    return check_list(spec, *list_end);
}

/* Opens a connection to every node at once, each with its handshake, by
 * the per-node timeout; *down counts the nodes that could not be reached.
 * An error other than "unreachable" is returned (recorded for NULL). */
static int connect_round(rlock_client *c, int *down, char *why, size_t wlen)
{
    rlock__conn *conns[RLOCK__NODES_MAX] = {0};
    size_t want[RLOCK__NODES_MAX] = {0};
    int hs[RLOCK__NODES_MAX], fs[RLOCK__NODES_MAX];
    int64_t deadline = rlock__now_ns() + c->node_timeout_ms * RLOCK__NS_PER_MS;
    int i, rc = RLOCK_OK;

    *down = 0;
    for (i = 0; i < c->nnodes; i++) {
        rlock_client *sub = c->nodes[i].sub;
        if (rlock__pool_try(sub, &conns[i]) != 0 ||
            rlock__connect_start(sub, &conns[i], &hs[i], &fs[i]) != RLOCK_OK) {
            if (!conns[i])
                rlock__pool_giveback(sub);
            else
                rlock__conn_put(sub, conns[i], 0);
            conns[i] = NULL;
            if (!*down)
                snprintf(why, wlen, "%s: %s", c->nodes[i].where,
                         rlock_client_errmsg(sub));
            (*down)++;
            continue;
        }
        want[i] = (size_t)hs[i];
    }
    rlock__net_run(conns, c->nnodes, want, deadline);
    for (i = 0; i < c->nnodes; i++) {
        rlock_client *sub = c->nodes[i].sub;
        int r;
        if (!conns[i])
            continue;
        if (rlock__conn_error(conns[i])->code != 0 ||
            rlock__conn_ready(conns[i]) < want[i]) {
            if (!*down)
                snprintf(why, wlen, "%s: %s", c->nodes[i].where,
                         rlock__conn_error(conns[i])->code
                             ? rlock__conn_error(conns[i])->msg
                             : "no answer in time");
            rlock__conn_put(sub, conns[i], 1);
            (*down)++;
            continue;
        }
        r = rlock__connect_finish(sub, conns[i], hs[i], fs[i]);
        rlock__conn_put(sub, conns[i], r != RLOCK_OK);
        if (r != RLOCK_OK && r != RLOCK_ECONNECT && r != RLOCK_ENOREPLY &&
            r != RLOCK_EIO && rc == RLOCK_OK) {
            char detail[400];
            snprintf(detail, sizeof detail, "%s", rlock_client_errmsg(sub));
            rc = rlock__fail(NULL, r, "redlock node %s: %s", c->nodes[i].where,
                             detail);
        } else if (r != RLOCK_OK) {
            if (!*down)
                snprintf(why, wlen, "%s: %s", c->nodes[i].where,
                         rlock_client_errmsg(sub));
            (*down)++;
        }
    }
    return rc;
}

/* One node's addresses, resolved once for the duplicate check. */
typedef struct node_addrs {
    rlock__url u;
    struct addrinfo *ai; /* NULL if the name did not resolve */
} node_addrs;

static int same_addr(const struct addrinfo *a, const struct addrinfo *b)
{
    for (; a; a = a->ai_next) {
        const struct addrinfo *p;
        for (p = b; p; p = p->ai_next) {
            if (a->ai_family != p->ai_family)
                continue;
            if (a->ai_family == AF_INET) {
                const struct sockaddr_in *x = (const void *)a->ai_addr,
                                         *y = (const void *)p->ai_addr;
                if (x->sin_port == y->sin_port &&
                    x->sin_addr.s_addr == y->sin_addr.s_addr)
                    return 1;
            } else if (a->ai_family == AF_INET6) {
                const struct sockaddr_in6 *x = (const void *)a->ai_addr,
                                          *y = (const void *)p->ai_addr;
                if (x->sin6_port == y->sin6_port &&
                    memcmp(&x->sin6_addr, &y->sin6_addr, sizeof x->sin6_addr) ==
                        0)
                    return 1;
            }
        }
    }
    return 0;
}

/*
 * The same server given twice would be two votes of one server, and a
 * majority of the list would not be a majority of servers. Two entries are
 * the same node if they name the same host and port, or if any address one
 * resolves to is an address of the other (a name and its address, two
 * names of one host). A name that does not resolve is compared by its text
 * only; connecting to it reports the rest.
 */
static int refuse_duplicates(rlock_client *c)
{
    node_addrs *na = calloc((size_t)c->nnodes, sizeof *na);
    int i, k, rc = RLOCK_OK;

    if (!na)
        return rlock__fail(NULL, RLOCK_ENOMEM, "out of memory");
    for (i = 0; i < c->nnodes && rc == RLOCK_OK; i++) {
        struct addrinfo hints;
        char port[12];
        if ((rc = rlock__url_parse(c->nodes[i].url, &na[i].u)) != RLOCK_OK)
            break;
        memset(&hints, 0, sizeof hints);
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        hints.ai_flags = AI_NUMERICSERV;
        snprintf(port, sizeof port, "%d", na[i].u.port);
        if (getaddrinfo(na[i].u.host, port, &hints, &na[i].ai) != 0)
            na[i].ai = NULL;
        for (k = 0; k < i && rc == RLOCK_OK; k++)
            if ((na[k].u.port == na[i].u.port &&
                 na[k].u.host && na[i].u.host &&
                 strcasecmp(na[k].u.host, na[i].u.host) == 0) ||
                (na[k].ai && na[i].ai && same_addr(na[k].ai, na[i].ai)))
                rc = rlock__fail(NULL, RLOCK_EINVAL,
                                 "redlock URL: nodes %d (%s) and %d (%s) are "
                                 "the same server; each must count once "
                                 "toward the majority",
                                 k + 1, c->nodes[k].where, i + 1,
                                 c->nodes[i].where);
    }
    for (i = 0; i < c->nnodes; i++) {
        if (na[i].ai)
            freeaddrinfo(na[i].ai);
        rlock__url_free(&na[i].u);
    }
    free(na);
    return rc;
}

int rlock__rl_open(rlock_client *c, const char *spec,
                   const rlock_client_opts *opts)
{
    const char *p, *end;
    rlock_client_opts o = *opts;
    char why[400] = "";
    int n = 0, down = 0, rc;

    if ((rc = rlock__rl_parse(c, spec, &end)) != RLOCK_OK)
        return rc;
    /* A renewal waits up to the node timeout; it must fit in a renewal
     * period with room to spare. */
    if ((int64_t)c->node_timeout_ms * 3 >= opts->watchdog_lease_ms / 3)
        return rlock__fail(NULL, RLOCK_EINVAL,
                           "redlock URL: node_timeout_ms (%d) must be below "
                           "a ninth of watchdog_lease_ms (%" PRId64 ")",
                           c->node_timeout_ms, opts->watchdog_lease_ms);
    c->nodes = calloc(RLOCK__NODES_MAX, sizeof *c->nodes);
    if (!c->nodes)
        return rlock__fail(NULL, RLOCK_ENOMEM, "out of memory");
    /* Each node is a single-server client of its own (its scripts, its
     * credentials, one connection), but none has a thread: every request
     * goes to all of them in one poll (rlock__rl_eval). A node that does
     * not answer within the per-node timeout is a failed node for that
     * request; its connection keeps waiting for what it owes while later
     * requests come, so that it survives a short pause, and undos queued
     * behind the request reach the node after it, in order. Connecting is
     * bounded by the per-node timeout too. */
    o.connect_timeout_ms = c->node_timeout_ms;
    o.use_pubsub = 0;
    o.max_connections = 1;
    o.sync_replicas = 0;
    c->node_opts = o;
    c->node_opts.key_prefix = c->prefix;
    c->node_opts.username = c->username;
    c->node_opts.password = c->password;
    /* The client's own copies: nodes are opened later too. */
    c->node_opts.tls_ca_file = c->opts.tls_ca_file;
    c->node_opts.tls_cert_file = c->opts.tls_cert_file;
    c->node_opts.tls_key_file = c->opts.tls_key_file;
    c->node_opts.tls_sni = c->opts.tls_sni;
    for (p = spec; p < end;) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        size_t len = comma ? (size_t)(comma - p) : (size_t)(end - p);
        rlock__node *node = &c->nodes[n];
        int err;

        snprintf(node->where, sizeof node->where, "%.*s", (int)len, p);
        snprintf(node->url, sizeof node->url, "redis://%.*s", (int)len, p);
        node->parent = c;
        c->nnodes = ++n; /* from here on it is closed with the client */
        node->sub = rlock__client_open_lazy(node->url, &c->node_opts, &err);
        if (!node->sub) {
            char detail[400];
            snprintf(detail, sizeof detail, "%s", rlock_client_errmsg(NULL));
            return rlock__fail(NULL, err, "redlock node %s: %s", node->where,
                               detail);
        }
        p += len + (comma ? 1 : 0);
        if (!comma)
            break;
    }
    if ((rc = refuse_duplicates(c)) != RLOCK_OK)
        return rc;
    init_nodes_sync(c);
    c->nodes_ready = 1;
    c->quorum = n / 2 + 1;
    /* Every node at once: a majority must answer now. A node that is down
     * may be up later (it is connected to again when a request comes); a
     * node that refuses us, or an address that is not one, is a mistake
     * to report now. */
    rc = connect_round(c, &down, why, sizeof why);
    if (rc != RLOCK_OK)
        return rc;
    /* The first unreachable node's cause is named: a certificate not
     * trusted, a refused connection, a timeout. */
    if (n - down < c->quorum)
        return rlock__fail(NULL, RLOCK_EQUORUM,
                           "redlock: only %d of %d nodes could be reached "
                           "(a majority is %d); %s",
                           n - down, n, c->quorum, why);
    snprintf(c->where, sizeof c->where, "redlock://%.*s",
             (int)(end - spec) < 280 ? (int)(end - spec) : 280, spec);
    return RLOCK_OK;
}

void rlock__rl_close(rlock_client *c)
{
    int i;

    if (!c->nodes)
        return;
    for (i = 0; i < c->nnodes; i++) {
        if (c->nodes[i].busy)
            rlock__conn_put(c->nodes[i].sub, c->nodes[i].busy, 1);
        rlock_client_close(c->nodes[i].sub);
    }
    if (c->nodes_ready)
        pthread_mutex_destroy(&c->nodes_mu);
    free(c->nodes);
    c->nodes = NULL;
}

void rlock__rl_after_fork(rlock_client *c)
{
    int i;

    /* Only the forking thread exists in the child; each node's client
     * starts afresh, and what the parent waited for is not the child's. */
    init_nodes_sync(c);
    for (i = 0; i < c->nnodes; i++) {
        if (c->nodes[i].busy) {
            rlock__conn_close(c->nodes[i].busy);
            c->nodes[i].busy = NULL;
        }
        if (c->nodes[i].sub)
            rlock__client_after_fork_check(c->nodes[i].sub);
    }
}
