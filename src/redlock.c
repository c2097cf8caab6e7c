/*
 * Redlock: one lock over N independent Redis masters
 * (redlock://host1:port1,host2:port2,...[?drift=F&node_timeout_ms=N]).
 *
 * A hold exists when a majority (N/2 + 1) of the nodes took it within its
 * validity: the lease, less the time the requests took, less a drift
 * allowance (drift x lease + 2 ms) for clocks that run at different
 * rates. Requests go to every node at once: each node has a worker
 * thread and a client of its own (a single-instance rlock client, so
 * scripts, timeouts and error replies work as they do everywhere else),
 * and the caller waits for all of them, or for the per-node timeout,
 * whichever comes first. A node still busy with an earlier request (a
 * paused server) counts as failed at once rather than queueing more work
 * behind it.
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "reply.h"

/* One request for one node; owned by the caller and the worker together
 * (refs), so that a caller that stopped waiting leaves it to the worker. */
typedef struct job {
    struct job *next; /* in a node's "later" queue */
    int refs;
    int done;
    enum rlock__script s;
    int nkeys, nargs;
    char **strs; /* keys then args, copied */
    size_t *lens;
    int rc;
    redisReply *reply;
    char err[150];
} job;

struct rlock__node {
    rlock_client *parent;
    rlock_client *sub; /* a single-instance client for this node */
    char where[40];    /* host:port, for messages (may be cut short) */
    char url[220];     /* redis://host:port */
    pthread_t thread;
    int started;
    int stop;
    job *job; /* the request being run, or NULL */
    /* Undos that found the node busy: they run after the request in
     * progress, on the same connection if it survives, so that they come
     * after what they undo. */
    job *later, *later_tail;
    pthread_cond_t cv;
};

static void job_unref(job *j)
{
    int i;

    if (--j->refs > 0)
        return;
    for (i = 0; i < j->nkeys + j->nargs; i++)
        free(j->strs[i]);
    free(j->strs);
    free(j->lens);
    if (j->reply)
        freeReplyObject(j->reply);
    free(j);
}

static void *worker(void *arg)
{
    rlock__node *n = arg;
    rlock_client *c = n->parent;

    pthread_mutex_lock(&c->nodes_mu);
    for (;;) {
        job *j;
        redisReply *r = NULL;
        int rc;

        while (!n->stop && !n->job && !n->later)
            pthread_cond_wait(&n->cv, &c->nodes_mu);
        if (n->stop)
            break;
        if (!n->job) {
            n->job = n->later;
            n->later = n->later->next;
            if (!n->later)
                n->later_tail = NULL;
        }
        j = n->job;
        pthread_mutex_unlock(&c->nodes_mu);
        if (!n->sub) /* down when the client was opened: try now */
            n->sub = rlock_client_open(n->url, &c->node_opts, &rc);
        if (n->sub)
            rc = rlock__eval(n->sub, j->s, &r, j->nkeys, (const char **)j->strs,
                             j->lens, j->nargs,
                             (const char **)j->strs + j->nkeys,
                             j->lens + j->nkeys);
        pthread_mutex_lock(&c->nodes_mu);
        j->rc = rc;
        j->reply = r;
        if (rc != RLOCK_OK)
            snprintf(j->err, sizeof j->err, "%s", rlock_client_errmsg(n->sub));
        j->done = 1;
        n->job = NULL;
        job_unref(j);
        pthread_cond_broadcast(&c->nodes_cv);
    }
    pthread_mutex_unlock(&c->nodes_mu);
    return NULL;
}

/* Starts the workers that are not running (nodes_mu held). */
static int start_workers(rlock_client *c)
{
    int i;

    for (i = 0; i < c->nnodes; i++) {
        rlock__node *n = &c->nodes[i];
        if (n->started)
            continue;
        n->stop = 0;
        n->job = NULL;
        if (pthread_create(&n->thread, NULL, worker, n) != 0)
            return rlock__fail(c, RLOCK_ENOMEM,
                               "cannot start a thread for node %s", n->where);
        n->started = 1;
    }
    return RLOCK_OK;
}

int rlock__rl_eval(rlock_client *c, enum rlock__script s, int nkeys,
                   const char **keys, const size_t *key_lens, int nargs,
                   const char **args, const size_t *arg_lens, const int *which,
                   rlock__node_result *res)
{
    job *jobs[RLOCK__NODES_MAX] = {0};
    struct timespec ts;
    int64_t until;
    int i, k, answered = 0;

    pthread_mutex_lock(&c->nodes_mu);
    if (start_workers(c) != RLOCK_OK) {
        pthread_mutex_unlock(&c->nodes_mu);
        return -1;
    }
    for (i = 0; i < c->nnodes; i++) {
        rlock__node *n = &c->nodes[i];
        job *j;

        res[i].rc = RLOCK_ENOREPLY;
        res[i].reply = NULL;
        res[i].sent = 0;
        if (which && !which[i]) {
            snprintf(res[i].err, sizeof res[i].err, "not asked");
            continue;
        }
        if (n->job && s != RLOCK__S_CANCEL) {
            snprintf(res[i].err, sizeof res[i].err,
                     "%s: still busy with an earlier request", n->where);
            continue;
        }
        j = calloc(1, sizeof *j);
        if (j) {
            j->refs = 1;
            j->nkeys = nkeys;
            j->nargs = nargs;
            j->strs = calloc((size_t)(nkeys + nargs), sizeof *j->strs);
            j->lens = calloc((size_t)(nkeys + nargs), sizeof *j->lens);
        }
        for (k = 0; j && j->strs && j->lens && k < nkeys + nargs; k++) {
            const char *src = k < nkeys ? keys[k] : args[k - nkeys];
            size_t len = k < nkeys ? key_lens[k] : arg_lens[k - nkeys];
            j->strs[k] = malloc(len + 1);
            if (!j->strs[k])
                break;
            memcpy(j->strs[k], src, len);
            j->strs[k][len] = '\0';
            j->lens[k] = len;
        }
        if (!j || !j->strs || !j->lens || k < nkeys + nargs) {
            if (j && j->strs)
                job_unref(j);
            else if (j) {
                free(j->lens);
                free(j);
            }
            res[i].rc = RLOCK_ENOMEM;
            snprintf(res[i].err, sizeof res[i].err, "out of memory");
            continue;
        }
        j->s = s;
        res[i].sent = 1;
        if (n->job) {
            /* An undo for a busy node: queued behind what it undoes; the
             * caller does not wait for it. */
            if (n->later_tail)
                n->later_tail->next = j;
            else
                n->later = j;
            n->later_tail = j;
            snprintf(res[i].err, sizeof res[i].err,
                     "%s: queued behind an earlier request", n->where);
            pthread_cond_signal(&n->cv);
            continue;
        }
        j->refs = 2;
        n->job = j;
        jobs[i] = j;
        pthread_cond_signal(&n->cv);
    }
    until = rlock__now_ns() + c->node_timeout_ms * RLOCK__NS_PER_MS;
    ts.tv_sec = (time_t)(until / 1000000000);
    ts.tv_nsec = (long)(until % 1000000000);
    for (;;) {
        int pending = 0;
        for (i = 0; i < c->nnodes; i++)
            if (jobs[i] && !jobs[i]->done)
                pending = 1;
        if (!pending || rlock__now_ns() >= until)
            break;
        pthread_cond_timedwait(&c->nodes_cv, &c->nodes_mu, &ts);
    }
    for (i = 0; i < c->nnodes; i++) {
        job *j = jobs[i];
        if (!j)
            continue;
        if (j->done) {
            res[i].rc = j->rc;
            res[i].reply = j->reply;
            j->reply = NULL;
            if (j->rc == RLOCK_OK)
                answered++;
            else
                snprintf(res[i].err, sizeof res[i].err, "%s: %s",
                         c->nodes[i].where, j->err);
        } else {
            snprintf(res[i].err, sizeof res[i].err, "%s: no reply within %d ms",
                     c->nodes[i].where, c->node_timeout_ms);
        }
        job_unref(j);
    }
    pthread_mutex_unlock(&c->nodes_mu);
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
    pthread_condattr_t ca;

    pthread_mutex_init(&c->nodes_mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->nodes_cv, &ca);
    pthread_condattr_destroy(&ca);
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

int rlock__rl_open(rlock_client *c, const char *spec,
                   const rlock_client_opts *opts)
{
    const char *p, *end;
    rlock_client_opts o = *opts;
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
    /* Each node is a client of its own. A node that does not answer
     * within the per-node timeout is a failed node for that request, but
     * its worker goes on waiting, with the client's own timeouts: the
     * connection then survives a short pause, and undos queued behind the
     * request reach the node after it, in order. Connecting is bounded
     * by the per-node timeout: a node that cannot be reached now is
     * opened again when a request comes for it. */
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
        pthread_cond_init(&node->cv, NULL);
        node->parent = c;
        c->nnodes = ++n; /* from here on it is closed with the client */
        node->sub = rlock_client_open(node->url, &c->node_opts, &err);
        if (!node->sub) {
            /* A node that is down now may be up later: its worker opens
             * it then. A node that refuses us, or an address that is not
             * one, is a mistake to report now. */
            if (err != RLOCK_ECONNECT && err != RLOCK_ENOREPLY &&
                err != RLOCK_EIO) {
                char detail[400];
                snprintf(detail, sizeof detail, "%s",
                         rlock_client_errmsg(NULL));
                return rlock__fail(NULL, err, "redlock node %s: %s",
                                   node->where, detail);
            }
            down++;
        }
        p += len + (comma ? 1 : 0);
        if (!comma)
            break;
    }
    if (n - down < n / 2 + 1)
        return rlock__fail(NULL, RLOCK_EQUORUM,
                           "redlock: only %d of %d nodes could be reached "
                           "(a majority is %d)",
                           n - down, n, n / 2 + 1);
    c->quorum = n / 2 + 1;
    init_nodes_sync(c);
    c->nodes_ready = 1;
    snprintf(c->where, sizeof c->where, "redlock://%.*s",
             (int)(end - spec) < 280 ? (int)(end - spec) : 280, spec);
    pthread_mutex_lock(&c->nodes_mu);
    rc = start_workers(c);
    pthread_mutex_unlock(&c->nodes_mu);
    return rc;
}

void rlock__rl_close(rlock_client *c)
{
    int i;

    if (!c->nodes)
        return;
    if (c->nodes_ready) {
        pthread_mutex_lock(&c->nodes_mu);
        for (i = 0; i < c->nnodes; i++) {
            c->nodes[i].stop = 1;
            pthread_cond_signal(&c->nodes[i].cv);
        }
        pthread_mutex_unlock(&c->nodes_mu);
        for (i = 0; i < c->nnodes; i++)
            if (c->nodes[i].started)
                pthread_join(c->nodes[i].thread, NULL);
    }
    for (i = 0; i < c->nnodes; i++) {
        if (c->nodes[i].job) /* left by a worker that never finished */
            job_unref(c->nodes[i].job);
        while (c->nodes[i].later) {
            job *j = c->nodes[i].later;
            c->nodes[i].later = j->next;
            job_unref(j);
        }
        rlock_client_close(c->nodes[i].sub);
        pthread_cond_destroy(&c->nodes[i].cv);
    }
    if (c->nodes_ready) {
        pthread_mutex_destroy(&c->nodes_mu);
        pthread_cond_destroy(&c->nodes_cv);
    }
    free(c->nodes);
    c->nodes = NULL;
}

void rlock__rl_after_fork(rlock_client *c)
{
    int i;

    /* Only the forking thread exists in the child: the workers are gone
     * and will be started again; each node's client starts afresh. */
    init_nodes_sync(c);
    for (i = 0; i < c->nnodes; i++) {
        c->nodes[i].started = 0;
        c->nodes[i].job = NULL; /* the parent's (memory lost, not freed) */
        c->nodes[i].later = c->nodes[i].later_tail = NULL;
        pthread_cond_init(&c->nodes[i].cv, NULL);
        rlock__client_after_fork_check(c->nodes[i].sub);
    }
}
