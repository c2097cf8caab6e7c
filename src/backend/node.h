/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * One Redis server, as every backend reaches it: its address, a pool of
 * connections, what a new connection is told first (AUTH, SELECT, for
 * Sentinel's masters a ROLE check, for Redlock's nodes INFO server),
 * script requests with EVALSHA (the body once after NOSCRIPT) and an
 * optional WAIT in the same write, and every failure or error reply
 * turned into an RLOCK_E* code with its detail, naming the server.
 *
 * Requests to several nodes go out together and are driven over one
 * poll by the calling thread (rlock__nodes_exec): Redlock asks all of its
 * masters at once, a single server is the case of one node.
 *
 * A node whose reply did not come in time keeps that connection as owing
 * (it is still read, in the background of later requests, for a while),
 * and an undo request for the node is queued behind it: the server then
 * sees the undo after what it undoes, whatever its pauses, instead of
 * before it on a fresh connection.
 */
#ifndef RLOCK_BACKEND_NODE_H
#define RLOCK_BACKEND_NODE_H

#include <stdint.h>

#include <rlock/rlock.h>

#include "core/call.h"
#include "core/observe.h"
#include "core/request.h"
#include "net/conn.h"

/* What every node of a client shares. Strings are borrowed from the
 * client, which outlives its nodes. */
typedef struct rlock__node_cfg {
    const char *username;             /* NULL: AUTH with the password alone */
    const char *password;             /* NULL: no AUTH */
    int db;                           /* SELECT unless 0 */
    const struct rlock__tls_ctx *tls; /* NULL: plain text */
    const char *sni;
    rlock__bounds bounds;
    int connect_timeout_ms; /* a new connection's connect and handshake */
    int request_timeout_ms; /* a request's reply */
    int sync_timeout_ms;    /* longest WAIT */
    int max_connections;
    int wait_for_connection; /* all busy: wait until the deadline (1), or
                                fail at once (0, Redlock) */
    /* > 0: while this many connections owe replies that their requests
     * gave up on (a stalled server), no new one is opened: a request
     * that finds none idle fails at once rather than piling more work
     * on a server that does not answer (Redlock: 2). 0: no such rule. A
     * shared connection counts once a leg on it gave up, and then one
     * whose handshake is unanswered too (owing_now). */
    int most_owing;
    int require_master;      /* ROLE on every new connection must say
                                master (Sentinel) */
    /* INFO server on every new connection, with the rest of what it is
     * told first: the server's run_id says which server it reached
     * whatever the address (0.0.0.0, the IPv6 loopback, a second
     * interface, a NAT), and no two answers of one server count in one
     * request over several nodes (Redlock). */
    int identify;
    /* Loaded with SCRIPT LOAD by the node's first connection, and again
     * after a NOSCRIPT. */
    const rlock__script *const *scripts;
    int nscripts;
    /* Told of connections that fail, and of a server that answers again
     * after one did (core/observe.h); NULL: nobody. */
    struct rlock__obs *obs;
} rlock__node_cfg;

typedef struct rlock__node rlock__node;

/* A node at host:port (path NULL) or the unix socket path; nothing is
 * opened. where names it in messages (copied; NULL: "host:port"). */
int rlock__node_new(const rlock__node_cfg *cfg, const char *host, int port,
                    const char *path, const char *where, rlock__node **out);
/* Closes every connection and frees the node. NULL is a no-op. */
void rlock__node_free(rlock__node *n);
/* In a forked child: forget the parent's connections (not closed in a
 * way the parent would notice) and start afresh. */
void rlock__node_after_fork(rlock__node *n);
/* Around fork(): take 1 takes the lock of the node's pool (held only for
 * work in memory, never across a round trip), take 0 gives it back. */
void rlock__node_fork_hold(rlock__node *n, int take);
/* Closes the idle connections and retires the owing ones (a master that
 * is one no more). */
void rlock__node_drain(rlock__node *n);
/* Points the node at another address; its idle connections go. A node
 * that moves should have been given a name (where) that stays true:
 * messages read it without a lock. */
int rlock__node_move(rlock__node *n, const char *host, int port);
/* "host:port", or what the node was named. */
const char *rlock__node_where(const rlock__node *n);
/* Whether n is at host:port. */
int rlock__node_is(const rlock__node *n, const char *host, int port);
/* When the server last answered everything a request of the node asked
 * (rlock__now_ns; 0: never). */
int64_t rlock__node_heard(const rlock__node *n);

/* Flags of rlock__nodes_exec. */
#define RLOCK__X_ASKING 1 /* ASKING first (a cluster slot in migration) */
#define RLOCK__X_BEHIND                                                        \
    2 /* an undo: on a node with owing connections, it                         \
         is queued behind them, not waited for */
/* (Of a backend's route, not of the nodes': a cluster slot in migration
 * that answers TRYAGAIN is not waited for; the background retries on its
 * own schedule.) */
#define RLOCK__X_BRIEF 4
/* A driver that must not block (an event loop's): a node whose
 * connections are all busy makes the leg wait for one in rounds of the
 * exchange (rlock__xchg_pooling) instead of in pthread_cond_timedwait.
 * Once two of the node's connections carry such legs, and before a leg
 * waits, it joins a busy connection that is healthy and carries fewer
 * than a few dozen other legs: the loop's requests share
 * the node's connections then, pipelined, as an async Redis client's
 * commands share its one connection (see "shared connections" in
 * node.c). */
#define RLOCK__X_NOWAIT 8

/*
 * Runs req on nodes[0..n) at once, every reply by deadline_ns (a new
 * connection's handshake also by the connect timeout): res gets n
 * results, res->r[i] for nodes[i]. An error reply is a failed result
 * whose reply is kept (a cluster redirection is read from it) and whose
 * rc is the code it means. With identify, an answer from a server that
 * answered for an earlier node of nodes already is RLOCK_EINVAL, naming
 * both: one server counts once. res's room is reserved here (free it
 * with rlock__results_free): RLOCK_OK, or RLOCK_ENOMEM with none.
 */
int rlock__nodes_exec(rlock__node **nodes, int n, const rlock__req *req,
                      int flags, int64_t deadline_ns, rlock__results *res);

/*
 * The same request as an object that readiness and time advance, so that
 * whoever owns the thread can drive it: rlock__nodes_exec drives one to
 * its end in poll(2) (and recv(2)); an event loop drives it from its own
 * callbacks. Nothing in an exchange blocks but rlock__xchg_start, which
 * may wait for a pooled connection while every one of a node's is busy
 * (wait_for_connection), for a node's mutex (held only for work in
 * memory), and, in a build without c-ares, for getaddrinfo(3) when a
 * new connection's host is a name that /etc/hosts does not answer (with
 * c-ares the name is looked up in the connection's first rounds,
 * net/resolve.h).
 *
 *     rlock__xchg x;
 *     rlock__xchg_start(&x, nodes, n, req, flags, deadline_ns, &res);
 *     while (rlock__xchg_round(&x, conns, want, &until_ns)) {
 *         ... drive conns[i] (rlock__conn_io on readiness) until each is
 *         rlock__conn_settled(conns[i], want[i]) or until_ns comes ...
 *         rlock__xchg_after(&x);
 *     }
 *
 * A round is one wait for replies: the handshakes of new connections (by
 * the connect timeout), the request's answers (by deadline_ns), the
 * request again with its script's body after a NOSCRIPT. When
 * rlock__xchg_round returns 0, res (its room for n results reserved
 * before, rlock__results_reserve) is filled as rlock__nodes_exec fills
 * it and every connection the exchange took is back with its node
 * (pooled, owing or closed). req and nodes are borrowed until then. The
 * struct is on the caller's stack or in its state; its fields are the
 * exchange's own.
 */
typedef struct rlock__xleg {
    struct rlock__node *node;
    rlock__conn *conn;
    int fresh; /* a new connection: hs handshake replies come first */
    int hs;
    int asking;    /* an ASKING reply comes before the script's */
    int waiting;   /* a WAIT reply comes after it */
    int retried;   /* sent again with the body after NOSCRIPT */
    int multi;     /* a pipeline of that many commands, as many replies */
    int ask_flag;  /* the request goes behind ASKING */
    unsigned gen;  /* the node's generation when the connection was taken */
    size_t want;   /* replies the round waits for */
    uint64_t peer; /* the server that answered (identify), 0: unknown */
    /* Waiting for one of the node's connections (X_NOWAIT), in the node's
     * queue (first come, first served): handed one, or room to open one,
     * when its turn came. */
    int pooled, queued, room;
    /* Called when the leg is served (mu of its node held: it may only
     * note that the leg's driver should ask again now). */
    void (*served)(void *arg);
    void *served_arg;
    rlock__conn *handed;
    unsigned handed_gen; /* the node's generation when it was handed */
    struct rlock__xleg *pq_next;
    /* Where the leg's commands begin on its connection (its first
     * reply's place and first byte's), and whether the connection is one
     * of the node's shared ones (RLOCK__X_NOWAIT): then other legs' may
     * come before and after the leg's own, and the leg takes, gives up or
     * counts as sent only what is its own. */
    rlock__conn_mark_t at;
    int shared;
    int alone; /* never shares (a request with WAIT: the server holds
                  the connection for it) */
} rlock__xleg;

typedef struct rlock__xchg {
    rlock__node **nodes;
    int n;
    const rlock__req *req; /* NULL: connecting (a PING after the handshake) */
    int flags;
    int stage;          /* what the next round is (node.c) */
    int64_t connect_by; /* new connections' handshakes by then */
    int64_t deadline_ns;
    rlock__results *res;
    /* The driver's, kept by rlock__xchg_start: told when a leg that
     * waits for a pooled connection (RLOCK__X_NOWAIT) is served, so that
     * it asks again at once rather than at its next look (NULL: none). */
    void (*served)(void *arg);
    void *served_arg;
    rlock__xleg legs[RLOCK__NODES_MAX];
} rlock__xchg;

/* Starts the exchange: takes a connection of each node (or a new one,
 * connecting) and queues the request on it; nothing is written yet, but
 * for an undo (RLOCK__X_BEHIND) queued behind a node's owing
 * connections, which is written there at once and not waited for. */
void rlock__xchg_start(rlock__xchg *x, rlock__node **nodes, int n,
                       const rlock__req *req, int flags, int64_t deadline_ns,
                       rlock__results *res);

/* The next round: conns[0..x->n) (NULL for a node that is done) and the
 * replies each must have, by until_ns; 1. Or 0: the exchange is over and
 * its results are in res. */
int rlock__xchg_round(rlock__xchg *x, rlock__conn **conns, size_t *want,
                      int64_t *until_ns);

/* Whether the round rlock__xchg_round gave has no connection at all, its
 * legs all waiting for a pooled one (RLOCK__X_NOWAIT): the driver waits a
 * little (a pause; connections come back as other requests end) and calls
 * rlock__xchg_after, which tries again. */
int rlock__xchg_pooling(const rlock__xchg *x);
/* The legs still waiting for a pooled connection fail (code, why): the
 * exchange is being given up. */
void rlock__xchg_unpool(rlock__xchg *x, int code, const char *why);

/* Whether leg i of the round has the want replies it waits for (or its
 * connection broke, or it has none): on a connection several legs share,
 * its own replies, next in line. A driver asks this, not
 * rlock__conn_settled, which counts whatever replies are ready. */
int rlock__xchg_settled(const rlock__xchg *x, int i, size_t want);

/* Leg i of the round gives up now (a canceled call): on a connection
 * that other legs share, its replies are given up where they stand and
 * the connection goes on serving the others (its result is code and why,
 * sent if any of its bytes went or may still go); on one of its own, the
 * connection is failed with code and why, and read as such by
 * rlock__xchg_after. */
void rlock__xchg_fail(rlock__xchg *x, int i, int code, const char *why);

/* The round was driven: every connection settled, or until_ns came.
 * Reads what the round brought. (A connection not settled that waits
 * for no event, rlock__conn_events 0, would wait for replies to nothing:
 * a driver should fail it, as rlock__net_run does, rather than wait for
 * until_ns.) */
void rlock__xchg_after(rlock__xchg *x);

/* Opens a connection to each of nodes[0..n) at once, with its handshake,
 * by deadline_ns, and leaves it in the node's pool (res and the code
 * returned as above). */
int rlock__nodes_connect(rlock__node **nodes, int n, int64_t deadline_ns,
                         rlock__results *res);

/* ncmds commands on a pooled connection of n, every reply by
 * deadline_ns. RLOCK_OK with replies[0..ncmds) (error replies are
 * replies), or the failure in call. */
int rlock__node_commands(rlock__node *n, int ncmds, const rlock__cmd *cmds,
                         redisReply **replies, int64_t deadline_ns,
                         rlock__call *call);

/* A connection of its own (not pooled) with its handshake done, by
 * deadline_ns: the subscriber's. */
int rlock__node_connect(rlock__node *n, int64_t deadline_ns, rlock__conn **out,
                        rlock__call *call);
/* The same in two halves, for a driver of its own: begin starts the
 * connection (nothing is waited for; a host name is still looked up) and
 * queues its handshake, whose *want replies the driver waits for (by the
 * connect timeout); end reads them: RLOCK_OK with c ready for use, or
 * the failure in call and c closed. */
int rlock__node_connect_begin(rlock__node *n, rlock__conn **out, size_t *want,
                              rlock__call *call);
int rlock__node_connect_end(rlock__node *n, rlock__conn *c, size_t want,
                            rlock__call *call);

/* Maps an error reply of the server named where to a code, recording the
 * detail in *e. */
int rlock__reply_error(const char *where, const redisReply *r, rlock__err *e);
/* The same, recorded in call. */
int rlock__call_reply_error(rlock__call *call, const char *where,
                            const redisReply *r);

#endif
