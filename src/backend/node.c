/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * One Redis server: the pool, the handshake, requests over one poll, and
 * error replies mapped to codes (node.h says what each promises).
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
 * Owing connections. When a request's reply does not come by its
 * deadline, the connection is not closed at once: it still owes the
 * replies, and the server may yet carry the request out (a paused server
 * does, when it resumes; a network that held it up delivers it). It is
 * kept and read whenever the node is used, and an undo for the node is
 * queued behind it, so that the server carries out the undo after what
 * it undoes: a fresh connection's undo could overtake it, and the late
 * request would then take a lock, or a place in its queue, that nobody
 * owns. Once every reply owed has come (those given up included), the
 * connection goes back to the pool. Past the owing limit it is closed,
 * unless an undo waits behind it: closing it then could let the server
 * run what it owed after an undo sent afresh, so it is kept until the
 * server has answered everything or the connection breaks.
 *
 * When the node moves (Sentinel named another master) or drains (the
 * server is a replica now), its owing connections are retired: they are
 * still read, and closed once answered, but no longer count against
 * max_connections, and undos are no longer queued behind them. A master
 * that stalled before a failover may never answer; its connections must
 * not keep the new master from being reached, and an undo of an attempt
 * made on the new master belongs there, not behind requests to a server
 * that is not the master any more. (The undos queued behind a retired
 * connection while it was current stay there, in order after what they
 * undo.)
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/node.h"
#include "core/reply.h"
#include "net/tls.h"
#include "util/clock.h"

/* How long a connection that owes replies is kept and read. */
#define OWING_MIN_MS 3000
/* A thread waiting for a free connection looks at the owing ones this
 * often: they are read only when somebody looks. */
#define POOL_LOOK_MS 20

/* Connections beyond the first that sat idle this long are closed: the
 * pool grows with the threads that use it at once (up to
 * max_connections) and shrinks again after a burst. */
#define POOL_IDLE_MS 5000

/* Most undos told apart on one owing connection; more are queued
 * again. */
#define OWING_TAGS 8

typedef struct owing {
    rlock__conn *conn;
    int64_t since;
    int undos;                 /* undos queued behind what it owes */
    uint64_t tags[OWING_TAGS]; /* theirs (rlock__req.tag), the last few */
    int retired; /* of an address the node left: not counted in nopen */
    int unchecked; /* a new one whose handshake's answers were never
                      read: closed, never pooled, once it has them */
} owing;

/* Most legs on one shared connection at once. */
#define SHARE_MAX 32
/* Busy shared connections after which a leg joins one rather than take
 * another: few connections, each carrying many requests, is what makes
 * Redis answer many in one system call (rlock-bench async's chains). */
#define SHARE_AFTER 2

/* A connection that legs of a loop's requests share (RLOCK__X_NOWAIT). */
typedef struct shared {
    rlock__conn *conn;
    unsigned gen; /* the node's when it was taken */
    int users;    /* legs on it now */
    int open;     /* its handshake was answered: other legs may join */
    int broken;   /* a leg saw it fail: nobody joins, it closes at the end */
    /* A leg gave its replies up: they are still to come, and an undo of
     * what it asked goes behind them (as behind an owing connection). */
    int gave_up;
    int told; /* its failure was told to the observers */
    int undos;
    uint64_t tags[OWING_TAGS];
} shared;

typedef struct idle_conn {
    rlock__conn *conn;
    int64_t since; /* back in the pool at */
} idle_conn;

struct rlock__node {
    const rlock__node_cfg *cfg;
    char *host; /* NULL with a unix socket */
    int port;
    char *path;
    char where[300];
    int named; /* where was given, not made from the address */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    idle_conn *idle; /* oldest first: taken from the end */
    int nidle;
    int nopen;    /* idle, lent out and owing (not retired) */
    /* Legs of drivers that must not block, waiting for a connection in
     * arrival order (RLOCK__X_NOWAIT). */
    struct rlock__xleg *pq_head, *pq_tail;
    owing *owing; /* room for twice max_connections: as many retired */
    int nowing;
    shared *shared; /* taken by loop's legs (room for max_connections) */
    int nshared;
    unsigned gen;  /* bumped when the node moves or drains: connections of
                      an older generation are closed when they come back */
    int loaded;    /* the scripts are known to be loaded (atomic) */
    int64_t heard; /* when a request last had all its replies (atomic) */
    int64_t failed_at; /* when a connection last failed (atomic): idle
                          ones that answered before are looked at before
                          reuse, however recently they answered */
    int broken;    /* a connection failed since the server last answered
                      (atomic): the next answer is a reconnection */
};

/* ---- the node itself ---------------------------------------------------- */

static void describe(rlock__node *n)
{
    if (n->named)
        return;
    if (n->path)
        snprintf(n->where, sizeof n->where, "unix:%s", n->path);
    else if (strchr(n->host, ':'))
        snprintf(n->where, sizeof n->where, "[%s]:%d", n->host, n->port);
    else
        snprintf(n->where, sizeof n->where, "%s:%d", n->host, n->port);
}

static void init_sync(rlock__node *n)
{
    pthread_mutex_init(&n->mu, NULL);
    rlock__cond_init(&n->cv);
}

int rlock__node_new(const rlock__node_cfg *cfg, const char *host, int port,
                    const char *path, const char *where, rlock__node **out)
{
    rlock__node *n = calloc(1, sizeof *n);
    int max = cfg->max_connections;

    if (!n)
        return RLOCK_ENOMEM;
    n->cfg = cfg;
    n->port = port;
    n->host = host ? strdup(host) : NULL;
    n->path = path ? strdup(path) : NULL;
    n->idle = calloc((size_t)max, sizeof *n->idle);
    n->owing = calloc(2 * (size_t)max, sizeof *n->owing);
    n->shared = calloc((size_t)max, sizeof *n->shared);
    if ((host && !n->host) || (path && !n->path) || !n->idle || !n->owing ||
        !n->shared) {
        free(n->host);
        free(n->path);
        free(n->idle);
        free(n->owing);
        free(n->shared);
        free(n);
        return RLOCK_ENOMEM;
    }
    if (where) {
        snprintf(n->where, sizeof n->where, "%s", where);
        n->named = 1;
    }
    describe(n);
    init_sync(n);
    *out = n;
    return RLOCK_OK;
}

static void close_all(rlock__node *n)
{
    int i;

    for (i = 0; i < n->nidle; i++)
        rlock__conn_close(n->idle[i].conn);
    for (i = 0; i < n->nowing; i++) {
        rlock__conn_close(n->owing[i].conn);
        n->nopen -= !n->owing[i].retired;
    }
    n->nopen -= n->nidle;
    n->nidle = 0;
    n->nowing = 0;
}

void rlock__node_free(rlock__node *n)
{
    if (!n)
        return;
    close_all(n);
    pthread_mutex_destroy(&n->mu);
    pthread_cond_destroy(&n->cv);
    free(n->idle);
    free(n->owing);
    free(n->shared);
    free(n->host);
    free(n->path);
    free(n);
}

void rlock__node_after_fork(rlock__node *n)
{
    int i;

    /* Only the forking thread exists in the child: the locks start
     * afresh, and the parent's sockets are closed here (closing a copy
     * leaves the parent's connection as it is; TLS sends nothing). */
    init_sync(n);
    close_all(n);
    n->nopen = 0;
    /* The parent's loop's requests are not the child's: their shared
     * connections go (the loop is not told), and so do its legs waiting
     * for a connection. */
    for (i = 0; i < n->nshared; i++) {
        rlock__conn_on_close(n->shared[i].conn, NULL, NULL);
        rlock__conn_close(n->shared[i].conn);
    }
    n->nshared = 0;
    n->pq_head = n->pq_tail = NULL;
}

void rlock__node_fork_hold(rlock__node *n, int take)
{
    if (take)
        pthread_mutex_lock(&n->mu);
    else
        pthread_mutex_unlock(&n->mu);
}

/* Drains n (mu held): see rlock__node_drain. */
static void drain_locked(rlock__node *n)
{
    int i;

    for (i = 0; i < n->nidle; i++)
        rlock__conn_close(n->idle[i].conn);
    n->nopen -= n->nidle;
    n->nidle = 0;
    for (i = 0; i < n->nowing; i++) {
        n->nopen -= !n->owing[i].retired;
        n->owing[i].retired = 1;
    }
    n->gen++;
    pthread_cond_broadcast(&n->cv);
}

void rlock__node_drain(rlock__node *n)
{
    pthread_mutex_lock(&n->mu);
    drain_locked(n);
    pthread_mutex_unlock(&n->mu);
}

int rlock__node_move(rlock__node *n, const char *host, int port)
{
    char *h = strdup(host);

    if (!h)
        return RLOCK_ENOMEM;
    /* The drain and the new address under one hold of mu. A connection is
     * made to the address read with the generation it is taken in
     * (leg_conn): were mu released in between, a thread waiting for a
     * connection, woken by the drain, would take the slot the retired
     * ones freed, in the new generation, and connect to the old address.
     * To a master that stalled, such a connection owes its answers for
     * ever, and with an undo queued behind it is never closed; being of
     * the current generation, no later move retires it, and it holds one
     * of max_connections for good (with max_connections = 1, every
     * request of the client fails from then on). */
    pthread_mutex_lock(&n->mu);
    drain_locked(n);
    free(n->host);
    n->host = h;
    n->port = port;
    describe(n);
    pthread_mutex_unlock(&n->mu);
    return RLOCK_OK;
}

const char *rlock__node_where(const rlock__node *n)
{
    return n->where;
}

int rlock__node_is(const rlock__node *n, const char *host, int port)
{
    return n->host && n->port == port && strcmp(n->host, host) == 0;
}

int64_t rlock__node_heard(const rlock__node *n)
{
    return __atomic_load_n(&n->heard, __ATOMIC_RELAXED);
}

static void heard_now(rlock__node *n)
{
    __atomic_store_n(&n->heard, rlock__now_ns(), __ATOMIC_RELAXED);
}

/* ---- error replies ------------------------------------------------------ */

static int starts_with(const char *s, size_t len, const char *prefix)
{
    size_t n = strlen(prefix);

    return len >= n && memcmp(s, prefix, n) == 0;
}

/* Whether the error's code (its first word) is word. */
static int first_word_is(const char *s, size_t len, const char *word)
{
    size_t n = strlen(word);

    return starts_with(s, len, word) && (len == n || s[n] == ' ');
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

int rlock__call_reply_error(rlock__call *call, const char *where,
                            const redisReply *r)
{
    rlock__err e;

    rlock__reply_error(where, r, &e);
    return rlock__call_set(call, &e);
}

int rlock__reply_error(const char *where, const redisReply *r, rlock__err *e)
{
    const char *s = r->str ? r->str : "";
    size_t len = r->str ? (size_t)r->len : 0;
    size_t i;

    /* States of the deployment, not mistakes of the request, known by
     * their code: say what they mean, keep Redis's words. */
    for (i = 0; i < sizeof deployment_errors / sizeof deployment_errors[0]; i++)
        if (first_word_is(s, len, deployment_errors[i].prefix))
            return rlock__err_set(e, deployment_errors[i].code, "%s %s: %.*s",
                                  where, deployment_errors[i].meaning, (int)len,
                                  s);
    /* An ACL that denies a command or key is not a credentials problem:
     * the user is known, it may not do this. */
    if (first_word_is(s, len, "NOPERM"))
        return rlock__err_set(e, RLOCK_EPERM, "%s refused the command: %.*s",
                              where, (int)len, s);
    if (starts_with(s, len, "NOAUTH") || starts_with(s, len, "WRONGPASS") ||
        strstr(s, "invalid password") != NULL ||
        strstr(s, "invalid username-password") != NULL ||
        strstr(s, "without any password configured") != NULL)
        return rlock__err_set(e, RLOCK_EAUTH, "%s refused: %.*s", where,
                              (int)len, s);
    return rlock__err_set(e, RLOCK_EREDIS, "%.*s", (int)len, s);
}

/* A connection's failure during what, naming the node. */
static int net_error(const rlock__node *n, const rlock__neterr *ne,
                     const char *what, int timeout_ms, rlock__err *e)
{
    switch (ne->code) {
    case RLOCK_ENOREPLY:
        return rlock__err_set(e, RLOCK_ENOREPLY,
                              "%s: no reply from %s within %d ms (%s)", what,
                              n->where, timeout_ms, ne->msg);
    case RLOCK_EPROTO:
        return rlock__err_set(e, RLOCK_EPROTO, "%s: bad reply from %s: %s",
                              what, n->where, ne->msg);
    case RLOCK_ENOMEM:
        return rlock__err_set(e, RLOCK_ENOMEM, "%s: out of memory", what);
    case RLOCK_EIO:
        return rlock__err_set(e, RLOCK_EIO, "%s: connection to %s lost: %s",
                              what, n->where, ne->msg);
    default:
        return rlock__err_set(e, ne->code ? ne->code : RLOCK_EIO, "%s: %s: %s",
                              what, n->where, ne->msg);
    }
}

/* ---- what the client's observers are told ------------------------------ */

/* A connection of n failed, or its server did not answer in time, with
 * code (a network failure, not an error reply): counted; reported if the
 * server answered since the last failure. */
static void conn_failed(rlock__node *n, int code, const char *msg)
{
    rlock__obs *o = n->cfg->obs;

    /* One connection found dead (a restart, a CLIENT KILL) says its
     * siblings may be too: none is reused unlooked any more. */
    __atomic_store_n(&n->failed_at, rlock__now_ns(), __ATOMIC_RELAXED);
    if (!o)
        return;
    if (__atomic_exchange_n(&n->broken, 1, __ATOMIC_RELAXED))
        rlock__obs_count(o, RLOCK__ST_CONN_ERRORS);
    else
        rlock__obs_node(o, RLOCK_EV_CONN_ERROR, code, n->where, msg);
}

/* n's server answered: after a failure, that is a reconnection. */
static void conn_ok(rlock__node *n)
{
    if (n->cfg->obs && __atomic_load_n(&n->broken, __ATOMIC_RELAXED) &&
        __atomic_exchange_n(&n->broken, 0, __ATOMIC_RELAXED))
        rlock__obs_node(n->cfg->obs, RLOCK_EV_RECONNECT, 0, n->where,
                        "the server answers again");
}

/* ---- the pool ----------------------------------------------------------- */

static int64_t owing_limit_ns(const rlock__node *n)
{
    int64_t ms = 10 * (int64_t)n->cfg->request_timeout_ms;

    return (ms < OWING_MIN_MS ? OWING_MIN_MS : ms) * RLOCK__NS_PER_MS;
}

static void pq_serve(rlock__node *n);

static void give_back(rlock__node *n, rlock__conn *c, int broken)
{
    if (broken || rlock__conn_error(c)->code != 0 ||
        rlock__conn_pending(c) > 0) {
        rlock__conn_close(c);
        n->nopen--;
    } else {
        n->idle[n->nidle].conn = c;
        n->idle[n->nidle++].since = rlock__now_ns();
    }
    pthread_cond_signal(&n->cv);
    /* A loop's leg that waits gets it now, and its driver is told. */
    pq_serve(n);
}

/* Reads what the owing connections have received; those that got all
 * they owed serve again, those that failed or owed too long are closed
 * (mu held). */
static void settle_owing(rlock__node *n)
{
    int64_t now = rlock__now_ns();
    int i = 0;

    while (i < n->nowing) {
        rlock__conn *c = n->owing[i].conn;
        int done;

        rlock__conn_io(c, 0);
        done = rlock__conn_error(c)->code != 0 ||
               rlock__conn_expected(c) == 0 ||
               (n->owing[i].undos == 0 &&
                now - n->owing[i].since > owing_limit_ns(n));
        if (!done) {
            i++;
            continue;
        }
        if (n->owing[i].retired) {
            rlock__conn_close(c); /* of an address the node left */
            n->owing[i] = n->owing[--n->nowing];
            continue;
        }
        {
            /* (One past its limit with replies still to come goes.) */
            int unfit = n->owing[i].unchecked || rlock__conn_expected(c) > 0 ||
                        rlock__conn_pending(c) > 0;
            n->owing[i] = n->owing[--n->nowing];
            give_back(n, c, unfit);
        }
    }
}

/* Closes the connections, but the most recently used, that sat idle
 * longer than POOL_IDLE_MS (mu held: rare, once in a connection's life;
 * a close sends nothing but TLS's close_notify). */
static void shrink(rlock__node *n)
{
    int64_t old = rlock__now_ns() - (int64_t)POOL_IDLE_MS * RLOCK__NS_PER_MS;
    int k = 0;

    while (k < n->nidle - 1 && n->idle[k].since < old)
        rlock__conn_close(n->idle[k++].conn);
    if (k == 0)
        return;
    memmove(n->idle, n->idle + k, (size_t)(n->nidle - k) * sizeof *n->idle);
    n->nidle -= k;
    n->nopen -= k;
}

/* The connections that owe replies given up on, of the node's present
 * address (mu held): those kept owing, and shared ones on which a leg
 * gave up while others still ride them (they are kept owing only when
 * their last leg leaves, up to a request's time later). Once there is
 * one, a shared connection whose handshake is still unanswered counts
 * too: the server is likely stalled, and a loop's next requests, a few
 * milliseconds apart, would each open another before the first of them
 * gave up (async_redlock_piles_no_connections_on_a_stopped_node). */
static int owing_now(const rlock__node *n)
{
    int i, k = 0, unanswered = 0;

    for (i = 0; i < n->nowing; i++)
        k += !n->owing[i].retired;
    for (i = 0; i < n->nshared; i++) {
        const shared *e = &n->shared[i];
        if (e->broken || e->gen != n->gen)
            continue;
        if (e->gave_up)
            k++;
        else if (!e->open)
            unanswered++;
    }
    return k > 0 ? k + unanswered : 0;
}

/* Whether another connection may be opened (mu held): the pool has room,
 * and the server is not stalled (most_owing). */
static int room(const rlock__node *n)
{
    if (n->nopen >= n->cfg->max_connections)
        return 0;
    return n->cfg->most_owing <= 0 || owing_now(n) < n->cfg->most_owing;
}

/* A connection for a request: 1 and *out, an idle one (not yet looked
 * at: see leg_conn); 0, none idle but room to open one (counted already);
 * -1, all are in use (mu held). */
static int pool_take(rlock__node *n, rlock__conn **out)
{
    settle_owing(n);
    shrink(n);
    if (n->nidle > 0) {
        *out = n->idle[--n->nidle].conn;
        return 1;
    }
    if (room(n)) {
        n->nopen++;
        return 0;
    }
    return -1;
}

/* The queue of legs waiting for a connection without blocking
 * (RLOCK__X_NOWAIT): each leg of a loop's request asks again in its own
 * rounds, and a connection that came back (or room to open one) goes to
 * the leg that has waited longest, not to whichever asks first: a task
 * that sends request after request must not keep a connection from the
 * others for ever (mu held for all of these). */
static void pq_serve(rlock__node *n)
{
    rlock__xleg *l;

    while ((l = n->pq_head) != NULL) {
        if (n->nidle > 0) {
            l->handed = n->idle[--n->nidle].conn;
            l->handed_gen = n->gen;
        } else if (room(n)) {
            l->room = 1;
            n->nopen++;
        } else {
            return;
        }
        if (!(n->pq_head = l->pq_next))
            n->pq_tail = NULL;
        l->pq_next = NULL;
        l->queued = 0;
        if (l->served)
            l->served(l->served_arg);
    }
}

/* l waits no more: out of the queue, and what it was served goes back. */
static void pq_leave(rlock__node *n, rlock__xleg *l)
{
    rlock__xleg **p;

    if (l->queued) {
        for (p = &n->pq_head; *p && *p != l; p = &(*p)->pq_next)
            ;
        if (*p)
            *p = l->pq_next;
        n->pq_tail = NULL;
        for (p = &n->pq_head; *p; p = &(*p)->pq_next)
            n->pq_tail = *p;
        l->queued = 0;
        l->pq_next = NULL;
    }
    if (l->handed) {
        /* (One of an address the node left is closed, not pooled.) */
        give_back(n, l->handed, l->handed_gen != n->gen);
        l->handed = NULL;
    }
    if (l->room) {
        l->room = 0;
        n->nopen--;
    }
    l->pooled = 0;
    pq_serve(n);
}

/* As pool_take, for leg l of a driver that must not block: 1 (an idle
 * connection) or 0 (room to open one) when it is l's turn, 2 when l
 * joined a shared connection (l->conn) instead, else -1 and l waits in
 * the queue. */
static int share_join(rlock__node *n, rlock__xleg *l);

static int pool_take_queued(rlock__node *n, rlock__xleg *l, rlock__conn **out)
{
    int got;

    /* A node that does not wait for a connection (Redlock's: a busy node
     * fails the request at once) queues nobody. */
    if (!l->pooled && n->nshared >= SHARE_AFTER && share_join(n, l))
        return 2;
    if (!n->cfg->wait_for_connection) {
        if ((got = pool_take(n, out)) < 0 && share_join(n, l))
            return 2;
        return got;
    }
    if (!l->pooled) {
        if (!n->pq_head && (got = pool_take(n, out)) >= 0)
            return got;
        if (share_join(n, l))
            return 2;
        l->pooled = l->queued = 1;
        l->pq_next = NULL;
        if (n->pq_tail)
            n->pq_tail->pq_next = l;
        else
            n->pq_head = l;
        n->pq_tail = l;
    }
    settle_owing(n);
    pq_serve(n);
    if (l->handed && l->handed_gen != n->gen) {
        /* The node moved since: a connection to where it was goes, and
         * its room is l's. */
        rlock__conn_close(l->handed);
        l->handed = NULL;
        l->room = 1;
    }
    if (l->handed) {
        *out = l->handed;
        l->handed = NULL;
        l->pooled = 0;
        return 1;
    }
    if (l->room) {
        l->room = 0;
        l->pooled = 0;
        return 0;
    }
    if (share_join(n, l)) {
        pq_leave(n, l);
        return 2;
    }
    return -1;
}

/* As pool_take, waiting for a connection to come back by deadline_ns if
 * all are in use and the node waits (mu held). */
static int pool_wait(rlock__node *n, rlock__conn **out, int64_t deadline_ns)
{
    for (;;) {
        int got = pool_take(n, out);
        int64_t until;
        struct timespec ts;

        if (got >= 0 || !n->cfg->wait_for_connection)
            return got;
        if (rlock__now_ns() >= deadline_ns)
            return -1;
        until = rlock__earlier(rlock__after_ms(POOL_LOOK_MS), deadline_ns);
        ts = rlock__timespec(until);
        pthread_cond_timedwait(&n->cv, &n->mu, &ts);
    }
}

/* Keeps c, taken in generation gen, as owing (mu held). A connection of
 * an earlier generation is retired at once. With no room left (more
 * retired connections than max_connections), the oldest retired one is
 * closed: what was queued on it was written in order already, only its
 * answers are not read. */
static owing *owe(rlock__node *n, rlock__conn *c, unsigned gen)
{
    int i, oldest = -1;
    owing *o;

    if (n->nowing == 2 * n->cfg->max_connections) {
        for (i = 0; i < n->nowing; i++)
            if (n->owing[i].retired &&
                (oldest < 0 || n->owing[i].since < n->owing[oldest].since))
                oldest = i;
        rlock__conn_close(n->owing[oldest].conn);
        n->owing[oldest] = n->owing[--n->nowing];
    }
    rlock__conn_discard(c, rlock__conn_pending(c));
    o = &n->owing[n->nowing++];
    memset(o, 0, sizeof *o);
    o->conn = c;
    o->since = rlock__now_ns();
    o->retired = gen != n->gen;
    if (o->retired) {
        n->nopen--;
        pthread_cond_signal(&n->cv);
    }
    return o;
}

/*
 * Shared connections. An event loop's requests (RLOCK__X_NOWAIT) share
 * the node's connections: once SHARE_AFTER of them carry the loop's
 * requests, or when none is idle and there is no room to open one, a leg
 * joins the busy connection with the fewest legs (fewer than SHARE_MAX)
 * instead, and its commands go out behind theirs. Redis then reads and answers
 * many requests in one system call each way, as it does for an async client's
 * one connection; with a connection for each request in flight it made a read
 * and a write for every one, and that, not the client, bounded a loop's
 * throughput.
 *
 * Each leg marks where its commands begin (rlock__conn_mark): it takes
 * its replies only when they are next in line, counts as sent only what
 * of its own went out, and a leg that gives up (its deadline, a cancel)
 * gives up its own replies where they stand, so that the legs around it
 * are served as if it had never asked. Its request may still run: its
 * bytes are in the line (or went), so it counts as sent, and an undo of
 * it goes behind it on that connection (queue_behind), never ahead of it
 * on another. The last leg to leave gives the connection back; one that
 * still owes replies given up is kept as owing; one that broke closes.
 *
 * Only connections that answered their handshake are joined, and only
 * healthy ones of the node's present address; one that broke takes no
 * one and tells its failure once. A request with WAIT neither joins nor
 * is joined: the server holds its connection until the replicas answer. All of
 * it runs under mu; a shared connection is driven by its loop's thread alone.
 */
static shared *share_find(rlock__node *n, const rlock__conn *c)
{
    int i;

    for (i = 0; i < n->nshared; i++)
        if (n->shared[i].conn == c)
            return &n->shared[i];
    return NULL;
}

/* l, which took c (in generation gen), shares it from now on; open: its
 * handshake is done (mu held). */
static void share_add(rlock__node *n, rlock__xleg *l, int open)
{
    shared *e;

    if (l->alone || n->nshared >= n->cfg->max_connections)
        return; /* (the latter cannot be: every shared one is counted in
                   nopen) */
    e = &n->shared[n->nshared++];
    memset(e, 0, sizeof *e);
    e->conn = l->conn;
    e->gen = l->gen;
    e->users = 1;
    e->open = open;
    l->shared = 1;
}

/* l joins the busy connection with the fewest legs, if one may be
 * joined: 1 and l->conn (mu held). */
static int share_join(rlock__node *n, rlock__xleg *l)
{
    shared *best = NULL;
    int i;

    if (l->alone)
        return 0;
    for (i = 0; i < n->nshared; i++) {
        shared *e = &n->shared[i];
        if (!e->open || e->broken || e->gave_up || e->gen != n->gen ||
            e->users >= SHARE_MAX || rlock__conn_error(e->conn)->code != 0 ||
            !rlock__conn_up(e->conn))
            continue;
        if (!best || e->users < best->users)
            best = e;
    }
    if (!best)
        return 0;
    best->users++;
    l->conn = best->conn;
    l->gen = best->gen;
    l->shared = 1;
    l->fresh = 0;
    l->hs = 0;
    return 1;
}

/* l leaves its shared connection (mu held); broken: l found it unusable.
 * The last leg gives it back, or keeps it owing what was given up. */
static void share_leave(rlock__node *n, rlock__xleg *l, int broken)
{
    shared *e = share_find(n, l->conn);
    shared gone;
    owing *o;

    l->conn = NULL;
    l->shared = 0;
    if (!e)
        return; /* (cannot be) */
    e->broken |= broken;
    if (--e->users > 0)
        return;
    gone = *e;
    *e = n->shared[--n->nshared];
    if (!gone.broken && rlock__conn_error(gone.conn)->code == 0 &&
        rlock__conn_expected(gone.conn) > 0) {
        o = owe(n, gone.conn, gone.gen);
        o->undos = gone.undos;
        o->unchecked = !gone.open;
        memcpy(o->tags, gone.tags, sizeof o->tags);
        return;
    }
    give_back(n, gone.conn, gone.broken || gone.gen != n->gen);
}

/* ---- new connections ---------------------------------------------------- */

static void endpoint(const rlock__node *n, const char *host, int port,
                     const char *path, rlock__endpoint *ep)
{
    memset(ep, 0, sizeof *ep);
    ep->host = host;
    ep->port = port;
    ep->path = path;
    ep->tls = n->cfg->tls;
    ep->attach = rlock__tls_attach;
    ep->sni = n->cfg->sni;
    ep->bounds = n->cfg->bounds;
    ep->keepalive = path == NULL;
}

/* What a new connection is told first, queued on it: AUTH, SELECT, ROLE
 * and INFO as the node needs them, and the scripts while the node may
 * lack them (its first connection, and after a NOSCRIPT), so that a
 * request is never refused for want of its script: a request whose reply
 * is lost is then one the server carried out or will carry out, as the
 * lock logic assumes, not one refused with NOSCRIPT. Returns how many
 * replies they will have, or an error. */
static int handshake_queue(rlock__node *n, rlock__conn *c, rlock__err *e)
{
    const rlock__node_cfg *cfg = n->cfg;
    const char *auth[3] = {
        "AUTH", cfg->username ? cfg->username : cfg->password, cfg->password};
    const char *sel[2] = {"SELECT", NULL};
    const char *role[1] = {"ROLE"};
    const char *info[2] = {"INFO", "server"};
    char db[16];
    int k = 0, i, rc = RLOCK_OK;

    if (cfg->password) {
        rc = rlock__conn_append(c, cfg->username ? 3 : 2, auth, NULL);
        k++;
    }
    if (rc == RLOCK_OK && cfg->db != 0) {
        snprintf(db, sizeof db, "%d", cfg->db);
        sel[1] = db;
        rc = rlock__conn_append(c, 2, sel, NULL);
        k++;
    }
    if (rc == RLOCK_OK && cfg->require_master) {
        rc = rlock__conn_append(c, 1, role, NULL);
        k++;
    }
    if (rc == RLOCK_OK && cfg->identify) {
        rc = rlock__conn_append(c, 2, info, NULL);
        k++;
    }
    if (!__atomic_load_n(&n->loaded, __ATOMIC_RELAXED))
        for (i = 0; rc == RLOCK_OK && i < cfg->nscripts; i++) {
            const char *load[3] = {"SCRIPT", "LOAD", cfg->scripts[i]->body};
            size_t lens[3] = {6, 4, cfg->scripts[i]->len};
            rc = rlock__conn_append(c, 3, load, lens);
            k++;
        }
    if (rc != RLOCK_OK)
        return net_error(n, rlock__conn_error(c), "connecting",
                         cfg->connect_timeout_ms, e);
    /* INFO server's text (over 1 KiB) is not refused by a bound as tight
     * as max_reply_bytes may be set. */
    rlock__conn_widen(c);
    return k;
}

/* Checks the k handshake replies, taken from c in order. */
static int handshake_check(rlock__node *n, rlock__conn *c, int k, rlock__err *e)
{
    const rlock__node_cfg *cfg = n->cfg;
    int auth = cfg->password != NULL, sel = cfg->db != 0;
    int role = cfg->require_master, info = cfg->identify;
    int fixed = auth + sel + role + info;
    int i, rc = RLOCK_OK;

    for (i = 0; i < k; i++) {
        redisReply *r = NULL;
        int is_auth = auth && i == 0, is_sel = sel && i == auth;

        if (!rlock__conn_take(c, &r))
            return rlock__err_set(e, RLOCK_EPROTO,
                                  "connecting: a reply is missing");
        if (info && i == auth + sel + role) {
            /* INFO: which server this is. One renamed away or denied by
             * an ACL leaves it unknown (0), and then only the addresses
             * tell the nodes apart (redlock.c), as before. */
            if (rc == RLOCK_OK)
                rlock__conn_set_peer(c, rlock__parse_run_id(r));
        } else if (rc == RLOCK_OK && r->type == REDIS_REPLY_ERROR) {
            rc = rlock__reply_error(n->where, r, e);
            if ((is_auth || is_sel) && rc == RLOCK_EREDIS)
                rc = rlock__err_set(e, RLOCK_EREDIS, "%s: %s",
                                    is_auth ? "AUTH" : "SELECT", r->str);
        } else if (rc == RLOCK_OK && i >= fixed) {
            /* SCRIPT LOAD: a digest. (Requests name the one the script
             * was embedded with; a server that computes another answers
             * them NOSCRIPT, and the body is sent instead.) */
            if (r->type != REDIS_REPLY_STRING || r->len != 40)
                rc = rlock__err_set(e, RLOCK_EPROTO,
                                    "SCRIPT LOAD on %s answered something "
                                    "other than a digest",
                                    n->where);
        } else if (rc == RLOCK_OK && role && i == auth + sel) {
            /* ROLE: only the master will do. */
            if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
                r->element[0]->type != REDIS_REPLY_STRING)
                rc = rlock__err_set(e, RLOCK_EPROTO,
                                    "unexpected answer to ROLE from %s",
                                    n->where);
            else if (strcmp(r->element[0]->str, "master") != 0)
                rc = rlock__err_set(e, RLOCK_EUNAVAILABLE,
                                    "%s is a %s, not the master (a failover "
                                    "under way?)",
                                    n->where, r->element[0]->str);
        }
        freeReplyObject(r);
    }
    if (rc == RLOCK_OK && k > fixed)
        __atomic_store_n(&n->loaded, 1, __ATOMIC_RELAXED);
    return rc;
}

/* What a new connection that did not get far enough in time was doing. */
static const char *stalled_at(const rlock__conn *c)
{
    switch (rlock__conn_stage(c)) {
    case RLOCK__CONN_RESOLVING:
        return "name not resolved (no answer from the DNS servers)";
    case RLOCK__CONN_CONNECTING:
        return "not connected";
    case RLOCK__CONN_HANDSHAKING:
        return "TLS handshake not done (does the server speak TLS?)";
    default:
        return "no reply";
    }
}

/* ---- requests over one poll --------------------------------------------- */

/* One node's part of a request (node.h). */
typedef rlock__xleg leg;

/* Takes a connection for the leg (mu not held). RLOCK_OK, or the result
 * filled and an error. */
/* A connection for the leg: RLOCK_OK; an error in res; or, with nowait,
 * LEG_POOLED: all the node's connections are busy, the leg waits for one
 * (l->pooled). */
#define LEG_POOLED 1
static int leg_conn(leg *l, int64_t deadline_ns, rlock__result *res, int nowait)
{
    rlock__node *n = l->node;
    char host[256];
    rlock__endpoint ep;
    rlock__neterr ne;
    int got, rc;

    pthread_mutex_lock(&n->mu);
    for (;;) {
        got = nowait ? pool_take_queued(n, l, &l->conn)
                     : pool_wait(n, &l->conn, deadline_ns);
        if (got == 2) {
            pthread_mutex_unlock(&n->mu); /* joined a shared one */
            return RLOCK_OK;
        }
        l->gen = n->gen;
        if (got <= 0)
            break;
        /* An idle connection is looked at (a poll) outside mu: threads
         * of one client share the pool, and a system call inside the
         * lock made them queue behind each other on every request. */
        pthread_mutex_unlock(&n->mu);
        if (rlock__conn_idle_ok(
                l->conn, __atomic_load_n(&n->failed_at, __ATOMIC_RELAXED))) {
            rlock__conn_mark(l->conn, &l->at);
            if (nowait) {
                pthread_mutex_lock(&n->mu);
                share_add(n, l, 1);
                pthread_mutex_unlock(&n->mu);
            }
            return RLOCK_OK;
        }
        conn_failed(n, RLOCK_EIO,
                    "an idle connection was closed by the server or the "
                    "network");
        rlock__conn_close(l->conn);
        l->conn = NULL;
        pthread_mutex_lock(&n->mu);
        n->nopen--;
    }
    if (got < 0 && nowait && n->cfg->wait_for_connection) {
        if (rlock__now_ns() < deadline_ns) {
            pthread_mutex_unlock(&n->mu);
            return LEG_POOLED;
        }
        pq_leave(n, l); /* its time is up */
    }
    if (got < 0 && !n->cfg->wait_for_connection) {
        int owe_n = owing_now(n), open_n = n->nopen;
        pthread_mutex_unlock(&n->mu);
        return rlock__err_set(&res->err, res->rc = RLOCK_ENOREPLY,
                              "%s is not asked: none of its %d connections "
                              "is free (%d owe replies to earlier requests "
                              "that gave up on it)",
                              n->where, open_n, owe_n);
    }
    if (got < 0) {
        pthread_mutex_unlock(&n->mu);
        return rlock__err_set(&res->err, res->rc = RLOCK_ENOREPLY,
                              "no reply from %s within %d ms: all %d of its "
                              "connections still wait for earlier replies",
                              n->where, n->cfg->request_timeout_ms,
                              n->cfg->max_connections);
    }
    /* The address is copied under mu: a Sentinel node may move. */
    snprintf(host, sizeof host, "%s", n->host ? n->host : "");
    endpoint(n, n->host ? host : NULL, n->port, n->path, &ep);
    pthread_mutex_unlock(&n->mu);
    rc = rlock__conn_start(&ep, &l->conn, &ne);
    if (rc == RLOCK_OK) {
        l->fresh = 1;
        rlock__conn_mark(l->conn, &l->at); /* its replies begin with the
                                              handshake's */
        l->hs = handshake_queue(n, l->conn, &res->err);
        if (l->hs >= 0 && nowait) {
            pthread_mutex_lock(&n->mu);
            share_add(n, l, 0); /* joined once it answered */
            pthread_mutex_unlock(&n->mu);
        }
        if (l->hs >= 0)
            return RLOCK_OK;
        rc = l->hs;
        rlock__conn_close(l->conn);
    } else {
        rlock__err_set(&res->err, rc, "cannot connect to %s: %s", n->where,
                       ne.msg);
    }
    conn_failed(n, rc, res->err.msg);
    l->conn = NULL;
    pthread_mutex_lock(&n->mu);
    n->nopen--;
    pthread_cond_signal(&n->cv);
    pthread_mutex_unlock(&n->mu);
    return res->rc = rc;
}

/* A pipeline's commands, one after the other. */
static int queue_pipeline(rlock__conn *c, const rlock__req *req)
{
    int each = req->script->each, k, rc = RLOCK_OK;

    for (k = 0; rc == RLOCK_OK && k < req->argc; k += each)
        rc = rlock__conn_append(c, each, req->argv + k, req->lens + k);
    return rc;
}

/* Queues the request (behind ASKING, in front of WAIT) on the leg; body:
 * as EVAL with the script's body (after NOSCRIPT). The connection formats
 * the command at once, so the argv copy lives only for the call. */
static int leg_queue(leg *l, const rlock__req *req, int asking, int body,
                     rlock__result *res)
{
    const char *asking_argv[1] = {"ASKING"};
    const char *wait_argv[3] = {"WAIT", NULL, NULL};
    const char *small_argv[RLOCK__REQ_SMALL], **argv = req->argv;
    size_t small_lens[RLOCK__REQ_SMALL], *lens = req->lens;
    char nrep[16], wms[16];
    int rc = RLOCK_OK;

    if (body) {
        int big = req->argc > RLOCK__REQ_SMALL;
        argv = big ? malloc(sizeof *argv * (size_t)req->argc) : small_argv;
        lens = big ? malloc(sizeof *lens * (size_t)req->argc) : small_lens;
        if (!argv || !lens) {
            if (big) {
                free(argv);
                free(lens);
            }
            return rlock__err_set(&res->err, res->rc = RLOCK_ENOMEM,
                                  "request to %s: out of memory",
                                  l->node->where);
        }
        memcpy(argv, req->argv, sizeof *argv * (size_t)req->argc);
        memcpy(lens, req->lens, sizeof *lens * (size_t)req->argc);
        argv[0] = "EVAL";
        lens[0] = 4;
        argv[1] = req->script->body;
        lens[1] = req->script->len;
    }
    l->asking = asking;
    l->waiting = req->replicas > 0;
    l->multi = rlock__req_commands(req);
    if (!l->fresh)
        rlock__conn_mark(l->conn, &l->at); /* (a new one's: before its
                                               handshake) */
    if (asking)
        rc = rlock__conn_append(l->conn, 1, asking_argv, NULL);
    /* (ASKING holds for the next command only. A pipeline goes behind it
     * only when it is one command long: the cluster backend follows the
     * redirection of a request's one answer, and a longer pipeline's
     * answers are its commands'.) */
    if (rc == RLOCK_OK && l->multi > 0)
        rc = queue_pipeline(l->conn, req);
    else if (rc == RLOCK_OK)
        rc = rlock__conn_append(l->conn, req->argc, argv, lens);
    if (rc == RLOCK_OK && l->waiting) {
        snprintf(nrep, sizeof nrep, "%d", req->replicas);
        snprintf(wms, sizeof wms, "%d", l->node->cfg->sync_timeout_ms);
        wait_argv[1] = nrep;
        wait_argv[2] = wms;
        rc = rlock__conn_append(l->conn, 3, wait_argv, NULL);
    }
    if (argv != req->argv && argv != small_argv) {
        free(argv);
        free(lens);
    }
    if (rc != RLOCK_OK)
        return rlock__err_set(&res->err, res->rc = rc,
                              "request to %s: out of memory", l->node->where);
    l->want = (size_t)(l->hs + asking + l->waiting) +
              (l->multi > 0 ? (size_t)l->multi : 1);
    return RLOCK_OK;
}

/* Gives the leg's connection back (mu taken here). */
static void leg_done(leg *l, int broken)
{
    rlock__node *n = l->node;

    pthread_mutex_lock(&n->mu);
    if (l->shared)
        share_leave(n, l, broken);
    else
        give_back(n, l->conn, broken || l->gen != n->gen);
    pthread_mutex_unlock(&n->mu);
    l->conn = NULL;
}

/* l could not queue its request (out of memory): on a shared connection
 * the line may hold part of it, so the connection fails for every leg on
 * it (each sees the failure, the last closes it); one of its own just
 * closes. */
static void leg_break(leg *l)
{
    if (l->shared)
        rlock__conn_fail(l->conn, RLOCK_ENOMEM, "out of memory");
    leg_done(l, 1);
}

/* Whether l's connection is shared with other legs now (mu taken). */
static int shared_with_others(leg *l)
{
    shared *e;
    int others;

    if (!l->shared)
        return 0;
    pthread_mutex_lock(&l->node->mu);
    e = share_find(l->node, l->conn);
    others = e && e->users > 1;
    pthread_mutex_unlock(&l->node->mu);
    return others;
}

/* Whether another leg told the observers of its shared connection's
 * failure already; from now on it has (mu taken). */
static int shared_told(leg *l)
{
    shared *e;
    int told;

    if (!l->shared)
        return 0;
    pthread_mutex_lock(&l->node->mu);
    e = share_find(l->node, l->conn);
    told = e && e->told;
    if (e)
        e->told = 1;
    pthread_mutex_unlock(&l->node->mu);
    return told;
}

/* l's new connection answered its handshake: other legs may join it
 * (mu taken). */
static void share_open(leg *l)
{
    shared *e;

    if (!l->shared)
        return;
    pthread_mutex_lock(&l->node->mu);
    if ((e = share_find(l->node, l->conn)) != NULL)
        e->open = 1;
    pthread_mutex_unlock(&l->node->mu);
}

/* l gives its replies up where they stand and leaves its shared
 * connection to the others, which go on: what it queued is in the line
 * (or went), so its request counts as sent, and an undo of it goes
 * behind it there (mu taken). */
static void leg_give_up(leg *l, rlock__result *res)
{
    rlock__node *n = l->node;
    shared *e;

    res->sent = 1;
    pthread_mutex_lock(&n->mu);
    rlock__conn_drop(l->conn, &l->at, l->want);
    if ((e = share_find(n, l->conn)) != NULL)
        e->gave_up = 1;
    share_leave(n, l, 0);
    pthread_mutex_unlock(&n->mu);
}

/* A leg whose replies did not all come in time: the node failed this
 * request, and its connection owes them (mu taken here). */
static void leg_owes(leg *l, int budget_ms, rlock__result *res)
{
    rlock__node *n = l->node;
    int ms = budget_ms;

    res->sent = res->sent || rlock__conn_sent_from(l->conn, &l->at);
    if (l->fresh && (!rlock__conn_up(l->conn) ||
                     rlock__conn_ready(l->conn) < (size_t)l->hs))
        rlock__err_set(
            &res->err, res->rc = RLOCK_ENOREPLY,
            "connecting to %s: %s within %d ms", n->where, stalled_at(l->conn),
            ms < n->cfg->connect_timeout_ms ? ms : n->cfg->connect_timeout_ms);
    else
        rlock__err_set(&res->err, res->rc = RLOCK_ENOREPLY,
                       "%s: no reply from %s within %d ms",
                       l->retried ? "script" : "request", n->where, ms);
    /* (A shared connection's silence is told once, by its last leg.) */
    if (!shared_with_others(l))
        conn_failed(n, RLOCK_ENOREPLY, res->err.msg);
    /* On a shared connection: its replies given up, and the connection
     * kept owing by its last leg, whatever of this leg's went out: what
     * other legs gave up, and undos behind them, may be on it. */
    if (l->shared) {
        leg_give_up(l, res);
        return;
    }
    /* Nothing written, nothing owed: the connection just goes. */
    if (!rlock__conn_sent_from(l->conn, &l->at)) {
        leg_done(l, 1);
        return;
    }
    pthread_mutex_lock(&n->mu);
    owe(n, l->conn, l->gen)->unchecked = l->fresh;
    pthread_mutex_unlock(&n->mu);
    l->conn = NULL;
}

/* After a round: a pipeline's replies, all there, into res (each error
 * reply is the answer of its command, not a failure of the request). */
static int leg_pipeline(leg *l, rlock__result *res)
{
    rlock__conn *c = l->conn;
    size_t k, n = (size_t)l->multi;
    redisReply *w = NULL;

    res->replies = malloc(sizeof *res->replies * n);
    for (k = 0; k < n; k++) {
        redisReply *r = NULL;
        rlock__conn_take_at(c, &l->at, &r);
        if (res->replies)
            res->replies[res->nreplies++] = r;
        else
            freeReplyObject(r);
    }
    if (l->waiting) {
        rlock__conn_take_at(c, &l->at, &w);
        res->acks = w->type == REDIS_REPLY_INTEGER ? w->integer : -1;
        freeReplyObject(w);
    }
    l->multi = 0;
    leg_done(l, rlock__conn_error(c)->code != 0);
    res->rc = res->replies ? RLOCK_OK
                           : rlock__err_set(&res->err, RLOCK_ENOMEM,
                                            "replies of %s: out of memory",
                                            l->node->where);
    return 0;
}

/* After a round: the leg's outcome from its connection. Returns 1 if the
 * leg goes on (sent again with the body after NOSCRIPT), else 0 (res
 * filled, the connection given back). */
static int leg_settle(leg *l, const rlock__req *req, int budget_ms,
                      rlock__result *res)
{
    rlock__node *n = l->node;
    rlock__conn *c = l->conn;
    redisReply *r = NULL;
    int rc;

    /* (On a shared connection a leg whose replies all came before it
     * broke has its answer: another leg's reply broke it.) */
    if (rlock__conn_error(c)->code != 0 &&
        !(l->shared && !l->fresh &&
          rlock__conn_complete_at(c, &l->at, l->want))) {
        res->sent = res->sent || rlock__conn_sent_from(c, &l->at);
        rc = net_error(n, rlock__conn_error(c),
                       l->fresh && l->hs > 0 && !res->sent ? "connecting"
                                                           : "request",
                       n->cfg->request_timeout_ms, &res->err);
        /* A connection lost while connecting is a failure to connect. */
        if (rc == RLOCK_EIO && l->fresh && !rlock__conn_up(c))
            rc = rlock__err_set(&res->err, RLOCK_ECONNECT,
                                "cannot connect to %s: %s", n->where,
                                rlock__conn_error(c)->msg);
        res->rc = rc;
        /* (Told once for a connection, by the first of its legs.) */
        if (!shared_told(l))
            conn_failed(n, rc, res->err.msg);
        leg_done(l, 1);
        return 0;
    }
    if (!rlock__conn_settled_at(c, &l->at, l->want)) {
        leg_owes(l, budget_ms, res);
        return 0;
    }
    res->sent = 1;
    heard_now(n);
    if (rlock__conn_error(c)->code != 0) {
        /* Its replies came, then another leg's broke the connection:
         * told once, by whichever leg sees it first. */
        rlock__err e;
        rc = net_error(n, rlock__conn_error(c), "request",
                       n->cfg->request_timeout_ms, &e);
        if (!shared_told(l))
            conn_failed(n, rc, e.msg);
    } else {
        conn_ok(n);
    }
    if (l->fresh) {
        rc = handshake_check(n, c, l->hs, &res->err);
        l->fresh = 0;
        l->hs = 0;
        if (rc != RLOCK_OK) {
            /* Refused before the request ran when AUTH was (every later
             * command is refused too) or ROLE named a replica (which
             * refuses writes); a refused SELECT leaves the request to
             * run in database 0, a strange answer to SCRIPT LOAD to run
             * as it is. */
            res->rc = rc;
            res->sent = rc == RLOCK_EAUTH || rc == RLOCK_EUNAVAILABLE
                            ? 0
                            : rlock__conn_sent_from(c, &l->at);
            leg_done(l, 1);
            return 0;
        }
        share_open(l);
    }
    l->peer = rlock__conn_peer(c);
    if (l->asking) {
        rlock__conn_take_at(c, &l->at, &r);
        freeReplyObject(r);
        r = NULL;
        l->asking = 0;
    }
    if (l->multi > 0)
        return leg_pipeline(l, res);
    rlock__conn_take_at(c, &l->at, &r);
    if (l->waiting) {
        redisReply *w = NULL;
        rlock__conn_take_at(c, &l->at, &w);
        res->acks = w->type == REDIS_REPLY_INTEGER ? w->integer : -1;
        freeReplyObject(w);
    }
    if (r->type == REDIS_REPLY_ERROR && !l->retried && r->str &&
        rlock__req_is_script(req) && strncmp(r->str, "NOSCRIPT", 8) == 0) {
        /* The server lost its scripts (restart, SCRIPT FLUSH), or never
         * had this one: the body caches it again under the same digest,
         * and the node's next new connection loads them all. */
        freeReplyObject(r);
        __atomic_store_n(&n->loaded, 0, __ATOMIC_RELAXED);
        l->retried = 1;
        if (rlock__conn_error(c)->code != 0) {
            /* (The connection broke after the answer: nothing ran.) */
            res->rc = net_error(n, rlock__conn_error(c), "request",
                                n->cfg->request_timeout_ms, &res->err);
            leg_done(l, 1);
            return 0;
        }
        if (leg_queue(l, req, l->ask_flag, 1, res) == RLOCK_OK)
            return 1;
        leg_break(l);
        return 0;
    }
    leg_done(l, rlock__conn_error(c)->code != 0);
    res->reply = r;
    if (r->type == REDIS_REPLY_ERROR) {
        res->rc = rlock__reply_error(n->where, r, &res->err);
        return 0;
    }
    res->rc = RLOCK_OK;
    return 0;
}

/* After a connecting round: the leg's handshake and PING answered, and
 * the connection joins the pool; or what went wrong. */
static void leg_connected(leg *l, rlock__result *res)
{
    rlock__node *n = l->node;
    rlock__conn *c = l->conn;
    redisReply *pong = NULL;

    if (rlock__conn_error(c)->code == 0 &&
        !rlock__conn_settled_at(c, &l->at, l->want))
        rlock__conn_fail(c, RLOCK_ENOREPLY, "no reply in time");
    if (rlock__conn_error(c)->code == RLOCK_ENOREPLY) {
        res->rc = rlock__err_set(&res->err, RLOCK_ENOREPLY,
                                 "connecting to %s: %s within %d ms", n->where,
                                 stalled_at(c), n->cfg->connect_timeout_ms);
        conn_failed(n, res->rc, res->err.msg);
    } else if (rlock__conn_error(c)->code != 0) {
        res->rc = net_error(n, rlock__conn_error(c), "connecting",
                            n->cfg->connect_timeout_ms, &res->err);
        if (res->rc == RLOCK_EIO)
            res->rc = rlock__err_set(&res->err, RLOCK_ECONNECT,
                                     "cannot connect to %s: %s", n->where,
                                     rlock__conn_error(c)->msg);
        conn_failed(n, res->rc, res->err.msg);
    } else if ((res->rc = handshake_check(n, c, l->hs, &res->err)) ==
               RLOCK_OK) {
        conn_ok(n);
        share_open(l);
        l->peer = rlock__conn_peer(c);
        heard_now(n);
        rlock__conn_take(c, &pong);
        if (pong->type == REDIS_REPLY_ERROR)
            res->rc = rlock__reply_error(n->where, pong, &res->err);
        freeReplyObject(pong);
    }
    leg_done(l, res->rc != RLOCK_OK);
}

/* Whether the undo tagged tag is among the undos tags[] (of which there
 * were undos). */
static int queued_on(const uint64_t *tags, int undos, uint64_t tag)
{
    int i, n = undos < OWING_TAGS ? undos : OWING_TAGS;

    for (i = 0; tag != 0 && i < n; i++)
        if (tags[i] == tag)
            return 1;
    return 0;
}

/* The undo goes behind the replies given up on shared connections (mu
 * held): it is written at once where the socket takes it, and read by
 * the loop that drives the connection; 1 if it is queued on one. */
static int queue_behind_shared(rlock__node *n, const rlock__req *req)
{
    int i, queued = 0;

    for (i = 0; i < n->nshared; i++) {
        shared *e = &n->shared[i];
        rlock__conn_mark_t m;
        if (!e->gave_up || e->broken || e->gen != n->gen ||
            rlock__conn_error(e->conn)->code != 0)
            continue;
        if (queued_on(e->tags, e->undos, req->tag)) {
            queued = 1;
            continue;
        }
        rlock__conn_mark(e->conn, &m);
        if (rlock__conn_append(e->conn, req->argc, req->argv, req->lens) ==
            RLOCK_OK) {
            rlock__conn_drop(e->conn, &m, 1);
            /* (Written only: what it reads is for the loop's tasks,
             * whose readiness would not come again.) */
            rlock__conn_flush(e->conn);
            e->tags[e->undos % OWING_TAGS] = req->tag;
            e->undos++;
            queued = 1;
        }
    }
    return queued;
}

/* An undo for a node whose connections owe replies goes behind each of
 * them (the one that carried what it undoes among them), once; the
 * caller does not wait for it. Sent again while they still owe, it is
 * not queued twice. 1 if it was (or is) queued so. Its answer is not
 * read: once the connection has all its answers, the undo has run, and
 * the next send goes on any connection to confirm it. */
static int queue_behind(rlock__node *n, const rlock__req *req,
                        rlock__result *res)
{
    int i, queued = 0;

    pthread_mutex_lock(&n->mu);
    settle_owing(n);
    for (i = 0; i < n->nowing; i++) {
        owing *o = &n->owing[i];
        if (o->retired)
            continue;
        if (queued_on(o->tags, o->undos, req->tag)) {
            queued = 1;
            continue;
        }
        if (rlock__conn_append(o->conn, req->argc, req->argv, req->lens) ==
            RLOCK_OK) {
            rlock__conn_discard(o->conn, 1);
            rlock__conn_io(o->conn, 0);
            o->tags[o->undos % OWING_TAGS] = req->tag;
            o->undos++;
            queued = 1;
        }
    }
    queued |= queue_behind_shared(n, req);
    pthread_mutex_unlock(&n->mu);
    if (queued) {
        res->sent = 1;
        rlock__err_set(&res->err, res->rc = RLOCK_ENOREPLY,
                       "%s: queued behind an earlier request", n->where);
    }
    return queued;
}

/*
 * One server behind two nodes of a request (an alias of a node's address,
 * or an address that came to reach another node's server) answers twice;
 * counted twice, a minority of servers could make a majority of nodes.
 * Each answer of a server after its first in nodes' order is turned into
 * a refusal naming both nodes. The request ran there twice, in either
 * order, and the answer kept says what the server holds after it: the
 * requests of a hold are the same on every node and mean the same when
 * they run twice (an acquisition claims what its nonce took, counts are
 * set, not added, a release that finds its hold gone already is counted
 * as a retried one is). Only answers are compared: a node that failed
 * counts for nothing already.
 */
static void refuse_twins(rlock__node **nodes, int n, const leg *legs,
                         rlock__results *res)
{
    int i, k;

    for (i = 1; i < n; i++) {
        rlock__result *r = &res->r[i];
        if (r->rc != RLOCK_OK || legs[i].peer == 0)
            continue;
        for (k = 0; k < i; k++)
            if (res->r[k].rc == RLOCK_OK && legs[k].peer == legs[i].peer)
                break;
        if (k == i)
            continue;
        rlock__result_drop(r);
        r->rc = rlock__err_set(&r->err, RLOCK_EINVAL,
                               "the same server as node %d, %s (the same "
                               "run_id): not counted, each server counts "
                               "once toward the majority",
                               k + 1, nodes[k]->where);
    }
}

/* After the connect timeout: a new connection not up with its handshake
 * answered fails with what it is short of. */
static void connect_timed_out(leg *l)
{
    if (!l->conn || !l->fresh || rlock__conn_error(l->conn)->code)
        return;
    if (!rlock__conn_up(l->conn) || rlock__conn_ready(l->conn) < (size_t)l->hs)
        rlock__conn_fail(l->conn, RLOCK_ENOREPLY,
                         "no reply within the connect timeout");
}

/* Drives one leg's connection: a new one's handshake by connect_by, then
 * its replies by deadline_ns (plain commands, outside an exchange). */
static void drive_one(leg *l, int64_t connect_by, int64_t deadline_ns)
{
    size_t want = l->hs > 0 ? (size_t)l->hs : l->want;

    if (l->fresh && connect_by < deadline_ns) {
        rlock__net_run(&l->conn, 1, &want, connect_by);
        connect_timed_out(l);
    }
    rlock__net_run(&l->conn, 1, &l->want, deadline_ns);
}

/* The stages of an exchange: what its next round is. */
enum {
    X_CONNECT, /* new connections' handshakes, by connect_by */
    X_REPLIES, /* every leg's replies, by the deadline */
    X_DONE
};

void rlock__xchg_start(rlock__xchg *x, rlock__node **nodes, int n,
                       const rlock__req *req, int flags, int64_t deadline_ns,
                       rlock__results *res)
{
    int64_t started = rlock__now_ns();
    int i, rc, any = 0, fresh = 0;

    x->nodes = nodes;
    x->n = n;
    x->req = req;
    x->flags = flags;
    x->deadline_ns = deadline_ns;
    x->res = res;
    rlock__results_init(res, n);
    n = x->n = res->n; /* the room the caller reserved (never fewer) */
    memset(x->legs, 0, sizeof x->legs[0] * (size_t)n);
    for (i = 0; i < n; i++) {
        leg *l = &x->legs[i];
        l->node = nodes[i];
        l->served = x->served;
        l->served_arg = x->served_arg;
        l->ask_flag = flags & RLOCK__X_ASKING;
        /* WAIT holds its connection on the server until the replicas
         * answer (up to sync_timeout_ms): no leg waits behind it, and it
         * waits behind none. */
        l->alone = req && req->replicas > 0;
        if (req && (flags & RLOCK__X_BEHIND) &&
            queue_behind(nodes[i], req, &res->r[i]))
            continue;
        if ((rc = leg_conn(l, deadline_ns, &res->r[i],
                           flags & RLOCK__X_NOWAIT)) == LEG_POOLED)
            any = 1; /* its request goes out when it has a connection */
        if (rc != RLOCK_OK)
            continue;
        if (!req) {
            /* Connecting at open: a PING after the handshake, so that a
             * server that refuses us (NOAUTH) or never answers fails
             * here. */
            static const char *ping[1] = {"PING"};
            if (rlock__conn_append(l->conn, 1, ping, NULL) != RLOCK_OK) {
                rlock__err_set(&res->r[i].err, res->r[i].rc = RLOCK_ENOMEM,
                               "out of memory");
                leg_break(l);
                continue;
            }
            l->want = (size_t)l->hs + 1;
        } else if (leg_queue(l, req, l->ask_flag, 0, &res->r[i]) != RLOCK_OK) {
            leg_break(l);
            continue;
        }
        any = 1;
        fresh |= l->fresh;
    }
    /* New connections connect (and answer their handshake) within the
     * connect timeout, counted from the start; a leg that did not is
     * failed with what it is short of. */
    x->connect_by = started;
    for (i = 0; i < n; i++)
        if (x->legs[i].conn && x->legs[i].fresh)
            x->connect_by =
                started +
                (int64_t)nodes[i]->cfg->connect_timeout_ms * RLOCK__NS_PER_MS;
    x->stage = !any                                   ? X_DONE
               : fresh && x->connect_by < deadline_ns ? X_CONNECT
                                                      : X_REPLIES;
}

int rlock__xchg_round(rlock__xchg *x, rlock__conn **conns, size_t *want,
                      int64_t *until_ns)
{
    int i;

    if (x->stage == X_DONE)
        return 0;
    for (i = 0; i < x->n; i++) {
        leg *l = &x->legs[i];
        conns[i] = l->conn;
        want[i] = l->conn ? l->want : 0;
        /* Connecting, a new connection waits for its handshake only; the
         * pooled ones of the other nodes for their whole answer. */
        if (x->stage == X_CONNECT && l->conn && l->fresh && l->hs > 0)
            want[i] = (size_t)l->hs;
    }
    *until_ns = x->stage == X_CONNECT ? x->connect_by : x->deadline_ns;
    return 1;
}

int rlock__xchg_settled(const rlock__xchg *x, int i, size_t want)
{
    const leg *l = &x->legs[i];

    return rlock__conn_settled_at(l->conn, &l->at, want);
}

void rlock__xchg_fail(rlock__xchg *x, int i, int code, const char *why)
{
    leg *l = &x->legs[i];
    rlock__result *r = &x->res->r[i];

    if (!l->conn)
        return;
    if (l->shared) {
        rlock__err_set(&r->err, r->rc = code, "%s", why);
        leg_give_up(l, r);
        return;
    }
    if (!l->fresh && rlock__conn_sent_from(l->conn, &l->at)) {
        /* What went out may still run: the connection is kept owing, so
         * that an undo goes behind it, not ahead of it on another. */
        rlock__err_set(&r->err, r->rc = code, "%s", why);
        r->sent = 1;
        pthread_mutex_lock(&l->node->mu);
        owe(l->node, l->conn, l->gen);
        pthread_mutex_unlock(&l->node->mu);
        l->conn = NULL;
        return;
    }
    rlock__conn_fail(l->conn, code, "%s", why);
}

int rlock__xchg_pooling(const rlock__xchg *x)
{
    int i, pooled = 0;

    for (i = 0; i < x->n; i++) {
        if (x->legs[i].conn)
            return 0;
        pooled |= x->legs[i].pooled;
    }
    return pooled;
}

void rlock__xchg_unpool(rlock__xchg *x, int code, const char *why)
{
    int i;

    for (i = 0; i < x->n; i++)
        if (x->legs[i].pooled) {
            rlock__node *n = x->legs[i].node;
            pthread_mutex_lock(&n->mu);
            pq_leave(n, &x->legs[i]);
            pthread_mutex_unlock(&n->mu);
            rlock__err_set(&x->res->r[i].err, x->res->r[i].rc = code, "%s",
                           why);
        }
}

/* Legs that wait for a pooled connection try again: one that gets it
 * queues its request (a new connection's handshake first) for the next
 * round; past the deadline, it fails as a blocking wait would. 1 if a
 * leg still waits or has just queued. */
static int legs_pooled(rlock__xchg *x)
{
    int i, more = 0;

    for (i = 0; i < x->n; i++) {
        leg *l = &x->legs[i];
        rlock__result *r = &x->res->r[i];
        int rc;

        if (!l->pooled)
            continue;
        rc = leg_conn(l, x->deadline_ns, r, 1);
        if (rc == LEG_POOLED) {
            more = 1;
            continue;
        }
        if (rc != RLOCK_OK)
            continue;
        if (leg_queue(l, x->req, l->ask_flag, 0, r) != RLOCK_OK) {
            leg_break(l);
            continue;
        }
        more = 1;
    }
    return more;
}

void rlock__xchg_after(rlock__xchg *x)
{
    const rlock__req *req = x->req;
    int i, again = 0;

    /* (Only requests wait for pooled connections: connecting at open
     * opens new ones. A leg that gets one now is not read before the
     * next round: it is looked at after the others.) */
    if (x->stage == X_CONNECT) {
        for (i = 0; i < x->n; i++)
            connect_timed_out(&x->legs[i]);
        x->stage = X_REPLIES;
        if (req)
            legs_pooled(x);
        return;
    }
    for (i = 0; i < x->n; i++) {
        if (!x->legs[i].conn)
            continue;
        if (!req) {
            leg_connected(&x->legs[i], &x->res->r[i]);
            continue;
        }
        /* (A message names the timeout the server did not meet.) */
        if (leg_settle(&x->legs[i], req, x->nodes[i]->cfg->request_timeout_ms,
                       &x->res->r[i]))
            again = 1;
    }
    if (req && legs_pooled(x))
        again = 1;
    if (again)
        return; /* a leg sends its script's body, or has a connection at
                   last, or still waits for one: another round */
    x->stage = X_DONE;
    if (x->n > 1 && x->nodes[0]->cfg->identify)
        refuse_twins(x->nodes, x->n, x->legs, x->res);
}

/* The blocking driver of an exchange: each round in one poll (or recv)
 * by the calling thread. */
static void exec(rlock__node **nodes, int n, const rlock__req *req, int flags,
                 int64_t deadline_ns, rlock__results *res)
{
    rlock__xchg x;
    rlock__conn *conns[RLOCK__NODES_MAX];
    size_t want[RLOCK__NODES_MAX];
    int64_t until;

    rlock__xchg_start(&x, nodes, n, req, flags, deadline_ns, res);
    while (rlock__xchg_round(&x, conns, want, &until)) {
        rlock__net_run(conns, n, want, until);
        rlock__xchg_after(&x);
    }
}

int rlock__nodes_exec(rlock__node **nodes, int n, const rlock__req *req,
                      int flags, int64_t deadline_ns, rlock__results *res)
{
    if (rlock__results_reserve(res, n) != RLOCK_OK)
        return RLOCK_ENOMEM;
    exec(nodes, n, req, flags, deadline_ns, res);
    return RLOCK_OK;
}

int rlock__nodes_connect(rlock__node **nodes, int n, int64_t deadline_ns,
                         rlock__results *res)
{
    return rlock__nodes_exec(nodes, n, NULL, 0, deadline_ns, res);
}

/* ---- plain commands ----------------------------------------------------- */

int rlock__node_commands(rlock__node *n, int ncmds, const rlock__cmd *cmds,
                         redisReply **replies, int64_t deadline_ns,
                         rlock__call *call)
{
    rlock__result res;
    leg l;
    int i, rc = RLOCK_OK;

    memset(&l, 0, sizeof l);
    memset(&res, 0, sizeof res);
    l.node = n;
    if (leg_conn(&l, deadline_ns, &res, 0) != RLOCK_OK)
        return rlock__fail(call, res.rc, "%s", res.err.msg);
    for (i = 0; rc == RLOCK_OK && i < ncmds; i++)
        rc = rlock__conn_append(l.conn, cmds[i].argc, cmds[i].argv,
                                cmds[i].lens);
    if (rc != RLOCK_OK) {
        leg_done(&l, 1);
        return rlock__fail(call, rc, "out of memory");
    }
    l.want = (size_t)(l.hs + ncmds);
    drive_one(&l,
              rlock__now_ns() +
                  (int64_t)n->cfg->connect_timeout_ms * RLOCK__NS_PER_MS,
              deadline_ns);
    if (rlock__conn_error(l.conn)->code != 0) {
        net_error(n, rlock__conn_error(l.conn), cmds[0].argv[0],
                  n->cfg->request_timeout_ms, &res.err);
        leg_done(&l, 1);
        return rlock__call_set(call, &res.err);
    }
    if (rlock__conn_ready(l.conn) < l.want) {
        leg_owes(&l, n->cfg->request_timeout_ms, &res);
        return rlock__fail(call, RLOCK_ENOREPLY,
                           "%s: no reply from %s within %d ms", cmds[0].argv[0],
                           n->where, n->cfg->request_timeout_ms);
    }
    if (l.fresh && handshake_check(n, l.conn, l.hs, &res.err) != RLOCK_OK) {
        leg_done(&l, 1);
        return rlock__call_set(call, &res.err);
    }
    heard_now(n);
    for (i = 0; i < ncmds; i++)
        rlock__conn_take(l.conn, &replies[i]);
    leg_done(&l, 0);
    return RLOCK_OK;
}

int rlock__node_connect_begin(rlock__node *n, rlock__conn **out, size_t *want,
                              rlock__call *call)
{
    rlock__endpoint ep;
    rlock__neterr ne;
    rlock__conn *c;
    rlock__err e;
    char host[256];
    int hs, rc;

    /* The address is copied under mu (a Sentinel node may move); the
     * connection is started outside it: resolving a host name may take
     * long, and fork() takes mu. */
    pthread_mutex_lock(&n->mu);
    snprintf(host, sizeof host, "%s", n->host ? n->host : "");
    endpoint(n, n->host ? host : NULL, n->port, n->path, &ep);
    pthread_mutex_unlock(&n->mu);
    rc = rlock__conn_start(&ep, &c, &ne);
    if (rc != RLOCK_OK)
        return rlock__fail(call, rc, "cannot connect to %s: %s", n->where,
                           ne.msg);
    hs = handshake_queue(n, c, &e);
    if (hs < 0) {
        rlock__conn_close(c);
        return rlock__call_set(call, &e);
    }
    *want = (size_t)hs;
    *out = c;
    return RLOCK_OK;
}

int rlock__node_connect_end(rlock__node *n, rlock__conn *c, size_t want,
                            rlock__call *call)
{
    rlock__err e;

    if (rlock__conn_error(c)->code == 0 &&
        (!rlock__conn_up(c) || rlock__conn_ready(c) < want))
        rlock__conn_fail(c, RLOCK_ENOREPLY, "no reply in time");
    if (rlock__conn_error(c)->code != 0) {
        net_error(n, rlock__conn_error(c), "connecting",
                  n->cfg->connect_timeout_ms, &e);
        rlock__conn_close(c);
        return rlock__call_set(call, &e);
    }
    if (handshake_check(n, c, (int)want, &e) != RLOCK_OK) {
        rlock__conn_close(c);
        return rlock__call_set(call, &e);
    }
    if (want > 0)
        heard_now(n);
    return RLOCK_OK;
}

int rlock__node_connect(rlock__node *n, int64_t deadline_ns, rlock__conn **out,
                        rlock__call *call)
{
    rlock__conn *c;
    size_t want;
    int rc;

    if ((rc = rlock__node_connect_begin(n, &c, &want, call)) != RLOCK_OK)
        return rc;
    rlock__net_run(&c, 1, &want, deadline_ns);
    if ((rc = rlock__node_connect_end(n, c, want, call)) != RLOCK_OK)
        return rc;
    *out = c;
    return RLOCK_OK;
}
