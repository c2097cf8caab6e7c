/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Backends: how a deployment of Redis is reached. Each fills one table:
 *
 *   single.c    redis://, rediss://, unix://: one server
 *   sentinel.c  redis-sentinel://: the master the sentinels name
 *   cluster.c   redis-cluster://: the master of each lock's slot
 *   redlock.c   redlock://: a majority of independent masters
 *
 * The lock logic above (engine/, bg/) never asks which one it runs on: it
 * hands a request to rlock__backend_exec (which runs the backend's route
 * and routed steps around node exchanges) and counts the results against
 * the client's quorum (nnodes and quorum, set by open: 1 of 1 but for
 * Redlock). What
 * differs between deployments and matters to the lock logic is said by
 * the flags and by the few functions below; adding a backend means one
 * file that fills this table, and a line in registry.c.
 */
#ifndef RLOCK_BACKEND_BACKEND_H
#define RLOCK_BACKEND_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include <rlock/rlock.h>

#include "backend/node.h"
#include "core/call.h"
#include "core/handles.h"
#include "core/request.h"
#include "core/step.h"
#include "util/url.h"

/* Each lock lives on one server (not on a quorum of copies): its re-entry
 * count and its queue can be kept in Redis, its releases announced with
 * pub/sub, and any layout used. Without it (Redlock), re-entry is counted
 * by the client, waiting is by retries, and only layouts that can be
 * agreed over copies serve. */
#define RLOCK__BK_ONE_COPY 1u
/* Writes can wait for replicas (sync_replicas). */
#define RLOCK__BK_WAIT 2u
/* Keys live in groups that can move between servers (a cluster's slots,
 * see group below): while a group moves, a request naming several of its
 * keys may be refused until every key is on one side, and a request
 * naming one key is always served. */
#define RLOCK__BK_SLOTS 4u
/* The deployment replaces a master that fails (Sentinel): a request the
 * master did not answer, or a connection it dropped or refused, may be a
 * failover under way, after which the backend points the client at the
 * new master (c->moves). A wait then goes on, as a fresh wait there,
 * until its own bound, rather than end with the failure. */
#define RLOCK__BK_FAILOVER 8u

/*
 * A request on its way over the deployment: the exchange it needs next
 * (the nodes, the flags of rlock__nodes_exec, the deadline, and when it
 * may start), and what the backend keeps between exchanges (own: a
 * redirection count, a pause that grows). A backend routes a request in
 * steps, route then routed after each exchange, so that whoever drives
 * the exchanges (rlock__backend_exec blocking in poll, an event loop from
 * its callbacks) runs the same routing. A backend that must ask its
 * deployment where things are first names that question as an exchange
 * of its own (req set: Sentinel's SENTINEL get-master-addr-by-name, to
 * one sentinel after another; a cluster's CLUSTER SLOTS), so that a
 * loop waits for the answer as it waits for any other, never inside
 * route.
 */
typedef struct rlock__route {
    /* What this exchange carries: NULL for the request being routed;
     * else the backend's own question (it outlives the exchange), whose
     * answer routed reads, then clears from res. */
    const rlock__req *req;
    rlock__node *nodes[RLOCK__NODES_MAX];
    int n;
    int flags;
    int64_t deadline_ns;
    int64_t not_before; /* rlock__now_ns() time; 0: at once */
    int64_t sent_ns;    /* when the last exchange began (the driver's) */
    int exchanges;      /* exchanges run so far (the driver's) */
    union {
        int64_t align;
        unsigned char bytes[96];
    } own;
} rlock__route;

/* What routed says. */
#define RLOCK__ROUTE_DONE 0  /* res is the request's */
#define RLOCK__ROUTE_AGAIN 1 /* res was freed: rt names the next exchange */

typedef struct rlock__backend {
    const char *name;   /* for messages */
    const char *scheme; /* the URL prefix it serves; NULL: the default */
    unsigned flags;     /* RLOCK__BK_* */

    /* Opens the deployment at url for c, whose common parts (options,
     * identity) are set: c->bk, c->nnodes, c->quorum, c->where, the
     * credentials and TLS. connect: reach the servers now, as
     * rlock_client_open promises (a majority for Redlock). Errors in
     * call; whatever was set up is undone by close. */
    int (*open)(rlock_client *c, const char *url, const rlock_client_opts *opts,
                rlock__call *call);
    /* Frees what open set up (also after a failed open). */
    void (*close)(rlock_client *c);
    /* In a forked child: nothing of the parent's connections is used. */
    void (*after_fork)(rlock_client *c);
    /* Around fork() (core/fork.h): take 1 takes every lock that guards
     * the backend's state, in the order its code nests them, so that the
     * child copies it whole; take 0 gives them back. None of them is held
     * across a round trip. */
    void (*fork_hold)(rlock_client *c, int take);

    /* Routes req to the node(s) its keys live on (rlock__backend_exec
     * runs the steps): route names the next exchange in rt (the first
     * when rt->exchanges is 0) and returns RLOCK_OK, or fills res with
     * the failure and returns its code; after each exchange, routed reads
     * res and says RLOCK__ROUTE_DONE (res has c->nnodes results, the
     * request's) or RLOCK__ROUTE_AGAIN (a redirection: res freed; route
     * names the next exchange once rt->not_before has come). flags:
     * RLOCK__X_BEHIND for undos, RLOCK__X_BRIEF for the background's
     * requests (a cluster slot in migration is not waited for). Every
     * reply by the call's deadline (and the backend's own timeout per
     * node). */
    int (*route)(rlock_client *c, const rlock__req *req, int flags,
                 rlock__route *rt, rlock__results *res, rlock__call *call);
    int (*routed)(rlock_client *c, const rlock__req *req, rlock__route *rt,
                  rlock__results *res, rlock__call *call);
    /* Which keys may go in one request together: keys of one group (a
     * cluster slot; 0 everywhere else). */
    int (*group)(const rlock_client *c, const char *key, size_t len);
    /* PING and INFO server. */
    int (*ping)(rlock_client *c, rlock_server_info *info, rlock__call *call);
    /* The node the subscriber's connection goes to, try i (0, 1, ...):
     * RLOCK_OK with *out, or with *out NULL when no node is left to try
     * after i-1; or the failure in call. The subscriber connects to it
     * (rlock__sub_connect, or in steps on a loop). quick: the caller must
     * not wait (a loop): the node is where the deployment was last found,
     * nobody is asked (the calls' routing asks Sentinel's sentinels in
     * steps, and the subscriber follows a move). NULL: no pub/sub. */
    int (*sub_node)(rlock_client *c, int i, int quick, struct rlock__node **out,
                    rlock__call *call);
    /* The subscriber could not connect, for rc (NULL: nothing to do; a
     * Sentinel asks the sentinels again). */
    void (*sub_failed)(rlock_client *c, int rc);
    /* How much sooner than Redis a holder gives up a lease of lease_ms
     * (clock rates, the time to tell the holder; Redlock's drift). */
    int64_t (*margin_ns)(const rlock_client *c, int64_t lease_ms);
    /* Where node i is, in a message that must tell the nodes apart
     * (" on node host:port"); "" where there is one. */
    const char *(*node_label)(const rlock_client *c, int i, char *buf,
                              size_t len);
    /* The error of a request that fewer than the quorum of nodes did:
     * ok nodes did it; res has every node's result (nodes with skip[i]
     * set did their part and are not named). */
    int (*failure)(rlock_client *c, const char *what, int ok,
                   const rlock__results *res, const int *skip,
                   rlock__call *call);

    /* The servers that keep the keys, for a walk over them (rlock_scan):
     * the ids server_commands knows them by (stable while the client
     * lives) in ids[0..max), as the deployment is now (a cluster reads
     * its slot map again). Returns how many, or a negative code with the
     * failure in call; *sent gets the commands it sent. */
    int (*servers)(rlock_client *c, int *ids, int max, int *sent,
                   rlock__call *call);
    /* ncmds commands that name no key, on server id, every reply by the
     * call's deadline and the backend's timeout for one server: RLOCK_OK
     * with replies[0..ncmds) (error replies among them), or the failure
     * in call. *where gets the server's name for messages (the node's
     * own string: it outlives the call). */
    int (*server_commands)(rlock_client *c, int id, int ncmds,
                           const rlock__cmd *cmds, redisReply **replies,
                           const char **where, rlock__call *call);
} rlock__backend;

/* Most servers a walk covers (a cluster's masters, Redlock's nodes). */
#define RLOCK__SERVERS_MAX 64

/* The backend that serves url (by its scheme). */
const rlock__backend *rlock__backend_for(const char *url);

/* ---- what the backends share (common.c) -------------------------------- */

/* Runs req over c's deployment (route, an exchange, routed, a pause if
 * asked for, route again... until done), blocking: the exchanges in poll
 * on the calling thread, the pauses in clock_nanosleep. res gets
 * c->nnodes results, in the room reserved for them before
 * (rlock__results_reserve: answers take room only while a request is in
 * flight). It drives an rlock__bexec, below. */
void rlock__backend_exec(rlock_client *c, const rlock__req *req, int flags,
                         rlock__results *res, rlock__call *call);

/*
 * The same as an object that readiness and time advance, as rlock__xchg
 * is for one exchange: whoever owns the thread drives it. A round is
 * either an exchange's round (connections to drive, as rlock__xchg_round
 * names them) or a pause the backend asked for (no connection: nothing
 * to do until until_ns):
 *
 *     rlock__bexec b;
 *     rlock__bexec_start(&b, c, req, flags, &res, call);
 *     while (rlock__bexec_round(&b, conns, want, &n, &until_ns)) {
 *         ... drive conns[0..n) until each is settled or until_ns comes
 *         (n 0: a pause; a timer until_ns) ...
 *         rlock__bexec_after(&b);
 *     }
 *
 * When rlock__bexec_round returns 0, res and call are filled as
 * rlock__backend_exec fills them. req, res and call are borrowed until
 * then; res's room for c->nnodes results is reserved before
 * (rlock__results_reserve), as for rlock__backend_exec. What still blocks
 * inside a round: rlock__xchg_start's (node.h).
 */
typedef struct rlock__bexec {
    rlock_client *c;
    const rlock__req *req;
    int flags;
    int stage; /* common.c */
    rlock__results *res;
    rlock__call *call;
    rlock__route rt;
    rlock__xchg x;
} rlock__bexec;

void rlock__bexec_start(rlock__bexec *b, rlock_client *c, const rlock__req *req,
                        int flags, rlock__results *res, rlock__call *call);
/* The next round: 1 with conns[0..*n) and want[0..*n) (arrays of
 * RLOCK__NODES_MAX; NULL for a node that is done) by *until_ns, *n 0 for
 * a pause until *until_ns; or 0: done. */
int rlock__bexec_round(rlock__bexec *b, rlock__conn **conns, size_t *want,
                       int *n, int64_t *until_ns);
/* Whether conns[i] of the round has its want replies for b (or broke):
 * rlock__xchg_settled, for a connection that b may share with other
 * requests (RLOCK__X_NOWAIT). 1 in a pause. */
int rlock__bexec_settled(const rlock__bexec *b, int i, size_t want);
/* conns[i] of the round gives up on b's behalf (a cancel):
 * rlock__xchg_fail. */
void rlock__bexec_fail(rlock__bexec *b, int i, int code, const char *why);
/* The round was driven (or the pause is over). */
void rlock__bexec_after(rlock__bexec *b);
/* After rlock__bexec_start: fn(arg) is called when one of b's legs that
 * waits for a pooled connection is served (under the node's mutex, maybe
 * from within another request's round: it only notes that b's round
 * should end now). */
void rlock__bexec_on_served(rlock__bexec *b, void (*fn)(void *arg), void *arg);

/* Ends b at once, on a driver's cancel, after its round's connections
 * were failed (rlock__bexec_fail: closed, not pooled, or on a shared one
 * the replies given up; what they carried may still run, as a request
 * whose reply never came). Returns 1 if b->res holds
 * the results (every node's failure), 0 if it holds none yet (b paused
 * between exchanges): the caller fills it. */
int rlock__bexec_abort(rlock__bexec *b);
/* b's legs that wait for a pooled connection give up their place (the
 * call is being canceled). */
void rlock__bexec_unpool(rlock__bexec *b);

/* A call in steps (core/step.h) asked for slot's request. Blocking:
 * rlock__slot_run sends it over c's deployment and fills slot->rc and
 * slot->res. On a loop: rlock__slot_start finishes the request and
 * starts b (0 when it cannot be: out of memory, slot->rc and slot->res
 * say so, and the call is stepped again at once); once b's rounds are
 * over (rlock__bexec_round returned 0), slot->rc is RLOCK_OK and
 * slot->res the results. */
void rlock__slot_run(rlock__slot *slot, rlock_client *c);
int rlock__slot_start(rlock__slot *slot, rlock_client *c, rlock__bexec *b);
/* The subscriber's connection, blocking: to the backend's sub_node, the
 * next one after each that fails, each by the connect timeout. */
int rlock__sub_connect(rlock_client *c, rlock__conn **out, rlock__call *call);
/* When one server asked where things are (a sentinel, a cluster node
 * asked for the slot map) must have answered: the connect timeout from
 * now, within until (the asking's own end; 0: none). */
int64_t rlock__ask_until(const rlock_client *c, int64_t until);
/* routed of a deployment whose request is one exchange over every node
 * the backend lists. */
int rlock__routed_once(rlock_client *c, const rlock__req *req, rlock__route *rt,
                       rlock__results *res, rlock__call *call);

/* Opens a connection to n, with its handshake, by deadline_ns, into its
 * pool (a backend's open: a wrong URL or password fails there). RLOCK_OK,
 * or the error, its detail in call; *sent (if not NULL) says whether
 * anything reached the server. */
int rlock__node_connect_now(rlock__node *n, int64_t deadline_ns,
                            rlock__call *call, int *sent);

/* The connection settings of c's nodes, from c's options. */
void rlock__node_cfg_of(const rlock_client *c, rlock__node_cfg *cfg);
/* Sets c's TLS (a context every connection uses) from opts, which a URL
 * may have changed: copies of the file names, for nodes opened later. */
int rlock__client_tls(rlock_client *c, const rlock_client_opts *opts,
                      rlock__call *call);
/* What a URL says of TLS, added to the options: RLOCK_EINVAL when it
 * contradicts them (a URL can only add TLS, a CA, certificates or a
 * name). */
int rlock__url_tls(const rlock__url *u, rlock_client_opts *eff,
                   rlock__call *call);
/* PING and INFO server on node n. */
int rlock__node_ping(rlock__node *n, int timeout_ms, rlock_server_info *info,
                     rlock__call *call);
/* The margin of one server: 1 % of the lease for clocks that run at
 * slightly different rates, plus 2 ms (a tenth of a lease shorter than
 * 20 ms) for the scheduling between the lease's end and the moment the
 * holder is told. The lease is counted from before the request left, so
 * the time it took to reach Redis is on the safe side already. */
int64_t rlock__margin_one(const rlock_client *c, int64_t lease_ms);
/* The failure of a one-node request: that node's own error. */
int rlock__failure_one(rlock_client *c, const char *what, int ok,
                       const rlock__results *res, const int *skip,
                       rlock__call *call);
/* node_label of a deployment of one node: "". */
const char *rlock__label_none(const rlock_client *c, int i, char *buf,
                              size_t len);
/* " on k of n nodes" where a request goes to several, else "": for
 * messages that count the nodes. */
const char *rlock__on_nodes(const rlock_client *c, int k, char *buf,
                            size_t len);
/* servers of a deployment of one server: id 0. */
int rlock__servers_one(rlock_client *c, int *ids, int max, int *sent,
                       rlock__call *call);
/* group: everything together. */
int rlock__group_all(const rlock_client *c, const char *key, size_t len);

/* ---- the URLs of the deployments (pure; fuzz/fuzz_url.c) ---------------- */

/* What follows redis-sentinel://: "host:port,.../master-name[?db=N]". */
int rlock__sentinel_parse(const char *spec, rlock__url *sentinels, int max,
                          int *n, char **master_name, int *db, rlock__err *e);
/* What follows redlock://: "host:port,...[?drift=F&node_timeout_ms=N]";
 * *list_end is where the list ends. */
int rlock__redlock_parse(const char *spec, double *drift, int *node_timeout_ms,
                         const char **list_end, rlock__err *e);
/* The cluster slot of a key (its hash tag's, if it has one). */
int rlock__key_slot(const char *key, size_t len);

extern const rlock__backend rlock__backend_single;
extern const rlock__backend rlock__backend_sentinel;
extern const rlock__backend rlock__backend_cluster;
extern const rlock__backend rlock__backend_redlock;

#endif
