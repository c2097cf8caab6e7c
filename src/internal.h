/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Private declarations shared by the library's source files. Nothing here
 * is part of the API; names start with rlock__.
 *
 * Who owns what:
 *  - rlock_client owns its connection pool, its hold table, its waiter list,
 *    its subscription table and its background thread.
 *  - rlock_mutex owns the names of its keys; holds point back at the mutex
 *    that took them and are dropped when it is freed.
 * Locking: client->mu guards holds, waiters, subscriptions and background
 * state; client->pool_mu guards the idle connections. Never hold mu while
 * talking to Redis.
 */
#ifndef RLOCK_INTERNAL_H
#define RLOCK_INTERNAL_H

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>

#include <rlock/rlock.h>

#include "compat/hiredis_compat.h"
#include "net/conn.h"
#include "net/tls.h"

/* ---- errors (error.c) --------------------------------------------------- */

/* Records the detail of an error for rlock_client_errmsg(c) on this thread
 * (c may be NULL: errors of rlock_client_open) and returns code. */
int rlock__fail(const rlock_client *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- time and randomness (clock.c) ------------------------------------- */

#define RLOCK__NS_PER_MS INT64_C(1000000)

int64_t rlock__now_ns(void); /* CLOCK_MONOTONIC */

/*
 * How much sooner than Redis a holder of one server gives up a lease of
 * lease_ms: 1 % for clocks that run at slightly different rates, plus
 * 2 ms (a tenth of a lease shorter than 20 ms) for the scheduling between
 * the lease's end and the moment the holder is told. The lease is counted
 * from before the request left, so the time it took to reach Redis is
 * on the safe side already. (Redlock has its own drift allowance.)
 */
static inline int64_t rlock__margin_ns(int64_t lease_ms)
{
    int64_t fixed_ms = lease_ms / 10 < 2 ? lease_ms / 10 : 2;

    return lease_ms * (RLOCK__NS_PER_MS / 100) + fixed_ms * RLOCK__NS_PER_MS;
}
/* Uniform random integer in [lo, hi]; not for secrets. Thread-safe. */
int64_t rlock__jitter(int64_t lo, int64_t hi);
/* Fills buf with len bytes from the OS random source; 0 or -1. */
int rlock__random_bytes(void *buf, size_t len);

/* ---- URLs (url.c) ------------------------------------------------------ */

typedef struct rlock__url {
    char *host; /* NULL for unix sockets */
    int port;
    char *path; /* unix socket path, or NULL */
    char *user; /* NULL if none */
    char *password;
    int db;
    /* TLS from the URL (rediss://, or the query): -1 where it says
     * nothing; the strings NULL where not given. */
    int tls;
    int tls_insecure;
    char *tls_ca, *tls_cert, *tls_key, *tls_sni;
} rlock__url;

/* Parses url into *u (strings malloc'ed). RLOCK_OK or RLOCK_EINVAL /
 * RLOCK_ENOMEM with the detail recorded for client NULL. */
int rlock__url_parse(const char *url, rlock__url *u);
void rlock__url_free(rlock__url *u);
/* Parses a query ("k=v&k=v", without the '?') into u: db, tls, cacert,
 * cert, key, sni, insecure. Errors recorded for client NULL. */
int rlock__url_query(const char *q, rlock__url *u);
/* Takes the TLS parameters (tls, insecure, cacert, cert, key, sni) out of
 * url's query into *tls (tls and tls_insecure -1 where not given) and
 * sets *rest (malloc'ed) to url without them, other parameters kept in
 * order. Errors recorded for client NULL; then nothing is left to free. */
int rlock__url_split_tls(const char *url, rlock__url *tls, char **rest);
/* Parses "host:port,host:port,..." in [p, end) into out[0..max), *n of
 * them; what names the URL kind in messages ("cluster"). Errors recorded
 * for client NULL; entries parsed so far are in out[0..*n). */
int rlock__url_list_parse(const char *p, const char *end, rlock__url *out,
                          int max, int *n, const char *what);
/* Writes "host:port" or the socket path into buf (never the password). */
void rlock__url_describe(const rlock__url *u, char *buf, size_t len);

/* ---- owner identity (owner.c) ------------------------------------------ */

/* 128 random bits as 32 hex digits, plus NUL. */
#define RLOCK__ID_LEN 32
/* The same bits as a UUID (8-4-4-4-12 hex digits), as Redisson names its
 * clients. */
#define RLOCK__UUID_LEN 36
/* The holder's identity for operators: "@<host>/<pid>", the host name cut
 * to RLOCK__HOST_MAX bytes of [A-Za-z0-9._-] (others become '_'). */
#define RLOCK__HOST_MAX 48
#define RLOCK__WHO_MAX (1 + RLOCK__HOST_MAX + 1 + 20 + 1)
/* Owner string: "<client id><who>:<thread number>"; in the Redisson layout
 * "<client id as a UUID>:<thread number>", the identity being kept in a
 * field of its own there. */
#define RLOCK__OWNER_MAX (RLOCK__UUID_LEN + RLOCK__WHO_MAX + 1 + 20 + 1)

int rlock__new_id(char out[RLOCK__ID_LEN + 1]);
/* Writes "@<host>/<pid>" of the calling process into out. */
void rlock__new_who(char out[RLOCK__WHO_MAX]);
/* A number for the calling thread, unique in the process, never 0. */
uint64_t rlock__thread_number(void);
/* Increases in every child created by fork(). */
unsigned rlock__fork_generation(void);
/* Background threads call these around their work (not around poll), so
 * that fork() never catches them mid-work. */
void rlock__busy_begin(void);
void rlock__busy_end(void);

/* ---- scripts (scripts.c) ----------------------------------------------- */

enum rlock__script {
    RLOCK__S_ACQUIRE,
    RLOCK__S_RELEASE,
    RLOCK__S_EXTEND,
    RLOCK__S_CANCEL,
    RLOCK__S_RENEW,
    RLOCK__S_FORCE,
    RLOCK__S_STATUS,
    RLOCK__S_RETOKEN,
    RLOCK__S_TK_ACQUIRE, /* the token layout (layout.c) */
    RLOCK__S_TK_RELEASE,
    RLOCK__S_TK_EXTEND,
    RLOCK__S_TK_RENEW,
    RLOCK__S_TK_CANCEL,
    RLOCK__S_TK_STATUS,
    RLOCK__S_TK_FORCE,
    RLOCK__S_RS_ACQUIRE, /* the Redisson layout (layout.c), in the order */
    RLOCK__S_RS_RELEASE, /* of the token layout's scripts */
    RLOCK__S_RS_EXTEND,
    RLOCK__S_RS_RENEW,
    RLOCK__S_RS_CANCEL,
    RLOCK__S_RS_STATUS,
    RLOCK__S_RS_FORCE,
    RLOCK__S_COUNT
};

typedef struct rlock__script_src {
    const char *name;
    const char *body;
} rlock__script_src;

const rlock__script_src *rlock__script(enum rlock__script s);

/* ---- connections (conn.c) ---------------------------------------------- */

/* Opens one connection with the client's URL, deadline and credentials. */
int rlock__connect(rlock_client *c, rlock__conn **out);
/* The same to host:port (or the unix socket path): the transport, then
 * AUTH, SELECT and the scripts, by the connect timeout (within the
 * thread's deadline). */
int rlock__connect_to(rlock_client *c, const char *host, int port,
                      const char *path, rlock__conn **out);
/* Only the transport (no AUTH, SELECT or scripts), by deadline_ns: for
 * sentinels and cluster seeds, which are told what they need by the
 * caller. Errors recorded. */
int rlock__open_conn(rlock_client *c, const char *host, int port,
                     const char *path, int64_t deadline_ns,
                     rlock__conn **out);
/* What an endpoint of this client looks like (TLS, bounds). */
void rlock__endpoint_of(const rlock_client *c, const char *host, int port,
                        const char *path, rlock__endpoint *ep);
/* Takes a connection from the pool (opening one if needed). */
int rlock__conn_get(rlock_client *c, rlock__conn **out);
/* Returns a connection; broken != 0 (or a connection that failed or still
 * expects replies) closes it instead. */
void rlock__conn_put(rlock_client *c, rlock__conn *ctx, int broken);
/* Closes every idle connection (fork, close). */
void rlock__pool_drain(rlock_client *c);
/* Without waiting: 1 and *out, an idle connection; 0, none idle but a
 * place to open one is reserved (open it with rlock__connect_start, or
 * give the place back with rlock__pool_giveback); -1, all are busy. */
int rlock__pool_try(rlock_client *c, rlock__conn **out);
void rlock__pool_giveback(rlock_client *c);
/* Starts a connection to the client's server (single-server clients)
 * without waiting, with its handshake queued: *hs replies to take first,
 * and check with rlock__connect_finish once they are ready. */
int rlock__connect_start(rlock_client *c, rlock__conn **out, int *hs,
                         int *first_script);
int rlock__connect_finish(rlock_client *c, rlock__conn *ctx, int hs,
                          int first_script);

/*
 * Deadlines (see conn.c). rlock__call_begin fixes the calling thread's
 * deadline for one API call (or one attempt of a waiting call): the
 * command timeout from now. rlock__limit_round_trips sets the background
 * thread's bound instead (0: none) and forgets any call deadline.
 * rlock__deadline(timeout_ms) is when an exchange that may take timeout_ms
 * must end: now + timeout_ms, or the thread's deadline or bound if sooner.
 */
void rlock__call_begin(const rlock_client *c);
/* Replaces the calling thread's call deadline (0: none) and returns the
 * one it had: rlock_client_open, which may run inside another call,
 * connects by the connect timeout alone. */
int64_t rlock__call_swap(int64_t deadline_ns);
void rlock__limit_round_trips(int64_t deadline_ns);
int64_t rlock__deadline(int timeout_ms);
/* What is left until rlock__deadline(timeout_ms), in ms (>= 1). */
int rlock__round_trip_ms(int timeout_ms);

/*
 * Whether a failed rlock__eval (rc) may have been carried out by Redis:
 * the request was sent and no reply came (connection lost, no reply by
 * the deadline, a reply too large to read). A failure before sending (no
 * free connection, a connect that did not finish) is not. About the
 * calling thread's last rlock__eval.
 */
int rlock__outcome_unknown(int rc);

/* Records a connection's failure (e) during what, naming the server. */
int rlock__net_error(rlock_client *c, const rlock__neterr *e,
                     const char *what);
/* ncmds commands in one write, every reply by deadline_ns (error replies
 * are replies): RLOCK_OK, or the failure recorded; the connection is then
 * broken. */
int rlock__exchange(rlock_client *c, rlock__conn *ctx, int ncmds,
                    const rlock__cmd *cmds, redisReply **replies,
                    int64_t deadline_ns, const char *what);
int rlock__command(rlock_client *c, rlock__conn *ctx, redisReply **out,
                   int argc, const char **argv, const size_t *lens,
                   int64_t deadline_ns, const char *what);

/* A script call's argv: EVALSHA digest nkeys keys... args... (EVAL body
 * while the digest is not known). */
#define RLOCK__SMALL_ARGV 16
typedef struct rlock__script_call {
    const char **argv;
    size_t *lens;
    int argc;
    char nk[16];
    const char *small_argv[RLOCK__SMALL_ARGV];
    size_t small_lens[RLOCK__SMALL_ARGV];
} rlock__script_call;

int rlock__script_argv(rlock_client *c, enum rlock__script s, int nkeys,
                       const char **keys, const size_t *key_lens, int nargs,
                       const char **args, const size_t *arg_lens,
                       rlock__script_call *call);
/* Turns call into EVAL with the script's body (after NOSCRIPT). */
void rlock__script_call_body(rlock__script_call *call, enum rlock__script s);
void rlock__script_call_free(rlock__script_call *call);
/* Whether r is Redis's NOSCRIPT error. */
int rlock__is_noscript(const redisReply *r);

/* Maps an error reply to a code and records the detail. */
int rlock__reply_error(rlock_client *c, const redisReply *r);

/*
 * Runs script s with EVALSHA, loading it again if Redis answers NOSCRIPT
 * (restart, SCRIPT FLUSH). keys and args hold nkeys and nargs strings with
 * their lengths.
 */
int rlock__eval(rlock_client *c, enum rlock__script s, redisReply **out,
                int nkeys, const char **keys, const size_t *key_lens,
                int nargs, const char **args, const size_t *arg_lens);

/* Most replicas sync_replicas may ask for. */
#define RLOCK__SYNC_MAX 64

/*
 * As rlock__eval, and then, if replicas > 0, WAIT replicas on the same
 * connection in the same round trip: *acks is set to the number of
 * replicas that acknowledged the script's writes within the client's
 * sync_timeout_ms (set to replicas when replicas is 0). A WAIT that fails
 * sets *acks to -1 (the script's reply stands).
 */
int rlock__eval_sync(rlock_client *c, enum rlock__script s, redisReply **out,
                     int nkeys, const char **keys, const size_t *key_lens,
                     int nargs, const char **args, const size_t *arg_lens,
                     int replicas, long long *acks);
/* The replicas m's writes wait for (0: none). */
int rlock__sync_replicas(const rlock_mutex *m);
/* Records RLOCK_EREPLICAS with what was acknowledged; what_done says what
 * happened to the write ("released again", "hold kept", ...). */
int rlock__replicas_error(rlock_client *c, const char *what, long long acks,
                          int wanted, const char *what_done);


/* ---- the lock's keys ---------------------------------------------------- */

enum rlock__key {
    RLOCK__K_LOCK,  /* hash: owner, count, token; expires with the lease */
    RLOCK__K_FENCE, /* counter of fencing tokens; never expires */
    RLOCK__K_QUEUE, /* list of waiting owners, in arrival order */
    RLOCK__K_QTTL,  /* zset: waiting owner -> deadline (server ms) */
    RLOCK__K_QINFO, /* hash: waiting owner -> "lease nonce" for its grant */
    RLOCK__K_COUNT
};

/* ---- holds (hold.c) ----------------------------------------------------- */

/*
 * What this client knows of one owner's hold: the thread that took it, the
 * token, the local mirror of the hold count, and the lease bookkeeping on
 * the monotonic clock. Lives in client->holds, guarded by client->mu.
 */
typedef struct rlock__hold {
    struct rlock__hold *next, *prev; /* the client's list of holds */
    struct rlock__hold *m_next;      /* the mutex's holds */
    struct rlock__hold *key_next;    /* hash chain by (name, thread) */
    struct rlock__hold *serial_next; /* hash chain by serial */
    uint64_t serial;       /* unique in the client, for in-flight renewals */
    rlock_mutex *m;
    uint64_t thread;
    uint64_t token;
    int64_t count;
    int64_t lease_ms;      /* the lease asked for */
    int64_t cur_lease_ms;  /* the lease Redis last set (a grant may be
                              shorter; the watchdog tops it up) */
    int watchdog;          /* renewed by the background thread */
    uint32_t renewals;     /* renewals done so far */
    int64_t valid_until;   /* monotonic ns: lease end as far as we know */
    int64_t renew_at;      /* monotonic ns: next renewal (watchdog) */
    int lost;              /* the hold is gone (unlock will say ELOST) */
    int notify;            /* on_lost is still to be called */
    int releasing;         /* an unlock that may end the hold is in flight */
    int release_unknown;   /* a final unlock's reply was lost: it may have
                              released the lock already */
    int extending;         /* rlock_mutex_extend is in flight */
    int renewing;          /* a renewal of this hold is in flight */
} rlock__hold;

/* The hold table (hold.c); mu held for all of it. */
/* Finds the calling thread's hold of the lock named like m. */
rlock__hold *rlock__hold_find(rlock_client *c, const rlock_mutex *m,
                              uint64_t thread);
rlock__hold *rlock__hold_by_serial(rlock_client *c, uint64_t serial);
/* Adds h (h->m, h->thread and h->serial set); RLOCK_ENOMEM if the table
 * could not grow (h is then not added). */
int rlock__hold_add(rlock_client *c, rlock__hold *h);
void rlock__hold_remove(rlock_client *c, rlock__hold *h);
/* Forgets every hold of m, or of the whole client (m NULL), and frees
 * the table (it grows again on the next add). */
void rlock__hold_clear(rlock_client *c, const rlock_mutex *m);

/* ---- waiting (wait.c, subscriber.c) ------------------------------------ */

/* A thread blocked in lock/timedlock, as the background thread sees it. */
typedef struct rlock__waiter {
    struct rlock__waiter *next;
    const rlock_mutex *m;
    char owner[RLOCK__OWNER_MAX];
    size_t owner_len;
    int woken; /* a wake message or reconnect arrived; guarded by mu */
    uint64_t nonce;        /* names this acquisition in Redis */
    int granted;           /* a grant for this nonce arrived: */
    uint64_t grant_token;  /*   its fencing token */
    int64_t grant_ms;      /*   and the lease Redis set */
    pthread_cond_t cv;
} rlock__waiter;

/* One channel the subscriber connection listens on. */
typedef struct rlock__sub {
    struct rlock__sub *next;
    char *channel;
    size_t channel_len;
    int users;     /* mutexes that want it */
    int state;     /* RLOCK__SUB_* */
} rlock__sub;

enum { RLOCK__SUB_WANTED, RLOCK__SUB_SENT, RLOCK__SUB_ACTIVE };

int rlock__wait_acquire(rlock_mutex *m, int64_t deadline_ns, int forever);

/* ---- background thread (background.c) ---------------------------------- */

/* Starts the background thread if it is not running (mu held). */
int rlock__bg_ensure(rlock_client *c);
/* Wakes the background thread so it looks at its work again (mu held). */
void rlock__bg_kick(rlock_client *c);
/* Wakes the background thread only if it would otherwise sleep past
 * due_ns (monotonic ns), the next time a new timer needs it. mu held:
 * an uncontended acquisition costs no wake-up. */
void rlock__bg_kick_before(rlock_client *c, int64_t due_ns);
/* Stops the thread and waits for it (mu not held). */
void rlock__bg_stop(rlock_client *c);

/* The background thread's steps (mu held; each may release it for a round
 * trip). They lower *next to the time they want to run again. */
void rlock__watchdog_step(rlock_client *c, int64_t *next);
/* Bounds the background thread's next round trips so that none outlasts
 * a lease of the client's: a hold whose lease runs out meanwhile is told
 * at once, not a command timeout later. mu held. */
void rlock__bound_background(rlock_client *c);
void rlock__sub_step(rlock_client *c, int64_t *next);
/* Serves the subscriber connection after poll reported revents on it
 * (mu not held): writes what is queued, reads what arrived. */
void rlock__sub_read(rlock_client *c, short revents);
/* The subscriber connection's descriptor and the events it waits for
 * (0: none, or no connection). Background thread only. */
short rlock__sub_events(rlock_client *c, int *fd);
void rlock__sub_shutdown(rlock_client *c);

/* Subscribes to m's channel (mu held); returns 1 if it is active. */
int rlock__sub_want(rlock_client *c, rlock_mutex *m);
void rlock__sub_release(rlock_client *c, rlock_mutex *m);
/* Redisson layout: wakes the longest-waiting thread of this client that
 * waits for m's lock and is not woken already (mu held). A waiter that
 * leaves without the lock calls it, so that a release message it may have
 * taken is not lost to the others. */
void rlock__wake_one(rlock_client *c, const rlock_mutex *m);

/* ---- Redlock over several masters (redlock.c, redlock_lock.c) ---------- */

#define RLOCK__NODES_MAX 16

typedef struct rlock__node rlock__node;

/* What one node answered to a parallel request. */
typedef struct rlock__node_result {
    int rc;            /* RLOCK_OK: reply holds the node's answer */
    redisReply *reply; /* owned by the caller (rlock__rl_results_free) */
    int sent;          /* the request was queued for the node */
    char err[200];     /* rc != RLOCK_OK: what happened, naming the node */
} rlock__node_result;

/* Reads the parameters of "host:port,...[?params]" (what follows
 * redlock://) into c and checks the node list; *list_end is where the list
 * ends. Nothing is opened. */
int rlock__rl_parse(rlock_client *c, const char *spec, const char **list_end);
/* Opens the nodes of "host:port,...[?params]" (what follows redlock://)
 * with opts; errors recorded for client NULL. */
int rlock__rl_open(rlock_client *c, const char *spec,
                   const rlock_client_opts *opts);
void rlock__rl_close(rlock_client *c);
void rlock__rl_after_fork(rlock_client *c);
/* Runs script s on every node (which: NULL, or 1 for the nodes to ask) at
 * once; waits for all or for the per-node timeout. res has one entry per
 * node. Returns how many nodes answered, -1 if the workers cannot run. */
int rlock__rl_eval(rlock_client *c, enum rlock__script s, int nkeys,
                   const char **keys, const size_t *key_lens, int nargs,
                   const char **args, const size_t *arg_lens,
                   const int *which, rlock__node_result *res);
void rlock__rl_results_free(rlock_client *c, rlock__node_result *res);
/* Records RLOCK_EQUORUM: ok of N nodes did what was asked; the failures'
 * details follow (nodes with counted[i] set are left out). */
int rlock__rl_quorum_error(rlock_client *c, const char *what, int ok,
                           const rlock__node_result *res, const int *counted);
const char *rlock__rl_node_name(const rlock_client *c, int i);
rlock_client *rlock__rl_node_client(const rlock_client *c, int i);
/* The watchdog's batch over the nodes: outcome[k] is 1 (renewed on a
 * majority), 0 (a majority no longer has hold k) or -1 (not known). */
int rlock__rl_renew(rlock_client *c, int n, const char **keys,
                    const size_t *key_lens, const char **args,
                    const size_t *arg_lens, int *outcome);
/* The drift allowance for a lease, in ns. */
int64_t rlock__rl_drift_ns(const rlock_client *c, int64_t lease_ms);

/* The lock operations over the nodes. */
int rlock__rl_acquire(rlock_mutex *m, int64_t *hint_ms);
int rlock__rl_release(rlock_mutex *m, uint64_t token);
/* Sets the lease on a majority: 1 if it was, 0 if a majority no longer
 * has the hold, or an error (RLOCK_EQUORUM). */
int rlock__rl_extend(rlock_mutex *m, uint64_t token, int64_t lease_ms);
int rlock__rl_status(rlock_mutex *m, rlock_status *st);
int rlock__rl_force(rlock_mutex *m, rlock_status *removed);
int rlock__rl_ping(rlock_client *c, rlock_server_info *info);
int rlock__rl_wait(rlock_mutex *m, int64_t deadline_ns, int forever);

/* ---- Redis Sentinel (sentinel.c) ---------------------------------------- */

#define RLOCK__SENTINELS_MAX 16

/* Parses "host:port,.../master-name[?db=N]" (what follows
 * redis-sentinel://) into c; errors recorded for client NULL. */
int rlock__sentinel_parse(rlock_client *c, const char *spec);
/* Connects to the master the sentinels name (asking them if needed) and
 * checks that it is the master. */
int rlock__sentinel_connect(rlock_client *c, rlock__conn **out);
/* After a call failed with rc: if the master may have changed, ask the
 * sentinels before the next connection. */
void rlock__sentinel_suspect(rlock_client *c, int rc);
void rlock__sentinel_free(rlock_client *c);

/* ---- Redis Cluster (cluster.c) ----------------------------------------- */

#define RLOCK__CNODES_MAX 64

typedef struct rlock__cnode rlock__cnode;

/* The cluster slot of a key (its hash tag's, if it has one). */
int rlock__key_slot(const char *key, size_t len);
/* Parses "host:port,..." (what follows redis-cluster://) into c. */
int rlock__cluster_parse(rlock_client *c, const char *spec);
/* Reads the slot map from the seeds; opts for the nodes' clients. */
int rlock__cluster_open(rlock_client *c, const rlock_client_opts *opts);
/* rlock__eval_sync on the master of the keys' slot, following MOVED, ASK
 * and TRYAGAIN. */
int rlock__cluster_eval(rlock_client *c, enum rlock__script s,
                        redisReply **out, int nkeys, const char **keys,
                        const size_t *key_lens, int nargs, const char **args,
                        const size_t *arg_lens, int replicas,
                        long long *acks);
int rlock__cluster_ping(rlock_client *c, rlock_server_info *info);
/* A connection to any node (the subscriber's). */
int rlock__cluster_connect(rlock_client *c, rlock__conn **out);
void rlock__cluster_free(rlock_client *c);
void rlock__cluster_after_fork(rlock_client *c);
/* rlock__eval_sync on this very server; asking: send ASKING first. */
int rlock__eval_ex(rlock_client *c, enum rlock__script s, redisReply **out,
                   int nkeys, const char **keys, const size_t *key_lens,
                   int nargs, const char **args, const size_t *arg_lens,
                   int replicas, long long *acks, int asking);

/* ---- the peers' layouts: token and Redisson (layout.c) ----------------- */

/* m's script for what the token layout's script tk does: tk itself, or
 * the Redisson layout's script of the same place. */
enum rlock__script rlock__lay_script(const rlock_mutex *m,
                                     enum rlock__script tk);
/* Acquires m for the calling thread once, without waiting. had_count > 0:
 * a Redisson-layout re-entry of the hold (had_count, had_token) the
 * thread has; the token layout's re-entries never come here. */
int rlock__lay_acquire(rlock_mutex *m, int64_t *hint_ms, int64_t had_count,
                       uint64_t had_token);
/* The token layout's release of a hold whose client-side count is 1. */
int rlock__tk_release(rlock_mutex *m, uint64_t thread, uint64_t token);
int rlock__lay_status(rlock_mutex *m, rlock_status *st);
int rlock__lay_force(rlock_mutex *m, rlock_status *removed);

/* ---- the handles -------------------------------------------------------- */

typedef struct rlock__cleanup rlock__cleanup; /* cleanup.c */

struct rlock_client {
    uint64_t serial; /* tags errmsg records; never reused */
    rlock__url url;
    char where[300]; /* url without password, for messages */
    rlock_client_opts opts;
    char *prefix;
    char *username;
    char *password;
    rlock__tls_ctx *tls; /* NULL: plain text */
    char *tls_sni;       /* name to send and verify instead of the host */

    char id[RLOCK__ID_LEN + 1];
    char who[RLOCK__WHO_MAX]; /* "@<host>/<pid>", renewed in a forked child */
    unsigned fork_gen;

    /* Script digests, filled by rlock__scripts_load. */
    char sha[RLOCK__S_COUNT][41];

    pthread_mutex_t pool_mu;
    pthread_cond_t pool_cv;
    rlock__conn **idle;
    int nidle;
    int nopen;

    pthread_mutex_t mu;
    rlock__hold *holds;
    rlock__hold **hold_keys;    /* hash of holds by (name, thread) */
    rlock__hold **hold_serials; /* hash of holds by serial */
    size_t hold_slots;          /* size of both, a power of two, or 0 */
    size_t nholds;
    rlock__waiter *waiters;
    rlock__sub *subs;

    /* Background thread: subscriber and lease timers. */
    int bg_running;
    int bg_started; /* the thread has begun running (handshake) */
    int bg_stop;
    pthread_t bg_thread;
    int64_t bg_sleep_until; /* its poll ends by then; 0: it is busy */
    int bg_pipe[2];
    int sub_up; /* the subscriber connection is established */
    rlock__conn *sub_ctx;    /* owned by the background thread */
    int64_t sub_retry_at;    /* monotonic ns: next reconnect attempt */
    uint64_t next_hold_serial;
    /* The mutex whose on_lost is running now; rlock_mutex_free waits for
     * it to return. */
    const rlock_mutex *in_callback;
    unsigned cancel_gen; /* bumped by rlock_client_cancel_waits */
    rlock__cleanup *cleanups; /* abandoned attempts still to undo */
    uint64_t next_attempt;    /* nonces of acquire requests (atomic) */
    /* The shortest lease this client has used or may be granted; bounds
     * the background thread's round trips (watchdog.c). Guarded by mu. */
    int64_t shortest_lease_ms;
    pthread_cond_t callback_cv;

    /* Redlock (redlock://): the nodes, each a client of its own; nnodes 0
     * for a single server. */
    int nnodes;
    int quorum;
    rlock__node *nodes;
    double drift;        /* drift allowance, a fraction of the lease */
    int node_timeout_ms; /* longest wait for one node's answer */
    rlock_client_opts node_opts; /* what each node's client is opened with */
    int nodes_ready;     /* nodes_mu exists */
    pthread_mutex_t nodes_mu; /* guards each node's busy connection */

    /* Sentinel (redis-sentinel://): the sentinels, the master's name, and
     * where they last said it is (addr_mu guards the address). */
    int nsentinels;
    rlock__url *sentinels;
    char *master_name;
    pthread_mutex_t addr_mu;
    int addr_stale; /* ask the sentinels before the next connection */
    char master_host[256];
    int master_port;

    /* Cluster (redis-cluster://): the seeds, the masters (each with a
     * client of its own) and the slot map (node index per slot, -1 if
     * unknown); addr_mu guards the table and the map. */
    int cluster;
    int nseeds;
    rlock__url *seeds;
    int ncnodes;
    rlock__cnode *cnodes;
    short *slot_map;
};

struct rlock_mutex {
    rlock_client *c;
    char *name;
    size_t name_len;
    char *keys[RLOCK__K_COUNT];
    size_t key_lens[RLOCK__K_COUNT];
    char *channel;
    size_t channel_len;
    rlock_mutex_opts opts;
    int subscribed; /* holds a reference on the channel's subscription */
    unsigned sub_gen; /* the client's fork generation when it subscribed */
    rlock__hold *holds; /* holds taken through this handle (mu held) */
};

/* rlock_client_open without connecting: a single-server client whose
 * first connection is opened by its first request. */
rlock_client *rlock__client_open_lazy(const char *url,
                                      const rlock_client_opts *opts,
                                      int *err);

/* Called at the start of every API call on c: handles a fork since the
 * last call (new identity, no inherited connections or holds). */
void rlock__client_after_fork_check(rlock_client *c);

/* "<client id>:<thread>" into buf; returns its length. */
size_t rlock__owner(const rlock_client *c, uint64_t thread,
                    char buf[RLOCK__OWNER_MAX]);
/* The owner as m's layout writes it: rlock__owner's, or in the Redisson
 * layout "<client id as a UUID>:<thread>", Redisson's own field shape. */
size_t rlock__owner_of(const rlock_mutex *m, uint64_t thread,
                       char buf[RLOCK__OWNER_MAX]);

/* The acquire script's arguments (see scripts.c), with their buffers. */
typedef struct rlock__acquire_argv {
    char owner[RLOCK__OWNER_MAX], lease[24], mode[2], ttl[24], nonce[24];
    char count[24], token[24];
    const char *args[8];
    size_t lens[8];
} rlock__acquire_argv;

/* Fills *a for the calling thread (thread) on m: mode 't', 'w' or 'r',
 * this acquisition's nonce, and for a re-entry the count and token held. */
void rlock__acquire_args(rlock_mutex *m, uint64_t thread, char mode,
                         uint64_t nonce, int64_t count, uint64_t token,
                         rlock__acquire_argv *a);
/* A new nonce for one acquisition (all attempts of a wait share it). */
uint64_t rlock__new_nonce(rlock_client *c);
/* Attempts the acquire script once. mode: 't' try, 'w' wait (queue); a
 * thread that holds the lock re-enters instead. On RLOCK_OK the hold is
 * recorded; RLOCK_EBUSY leaves *hint_ms set to how long the current
 * holder's lease lasts at most. If the attempt had to be undone, *nonce
 * is replaced by a fresh one for the attempts that follow. */
int rlock__try_acquire(rlock_mutex *m, char mode, uint64_t *nonce,
                       int64_t *hint_ms);
/* With sync_replicas: makes sure the calling thread's new hold of m
 * reached enough replicas, or releases it and returns RLOCK_EREPLICAS (or
 * the error that prevented knowing). RLOCK_OK at once without. */
int rlock__sync_new_hold(rlock_mutex *m);
/* Records (or updates) the calling thread's hold after Redis granted it:
 * lease counted from t0, Redis having set granted_ms of it so far (mu
 * held). */
int rlock__hold_record(rlock_mutex *m, uint64_t thread, uint64_t token,
                       int64_t count, int64_t t0, int64_t granted_ms);
/* ---- cleanup of abandoned attempts (cleanup.c) ------------------------- */

/* Runs the cancel script now: owner leaves the queue and, if attempt is
 * not "", gives up the hold that attempt may have taken. */
int rlock__cancel_now(rlock_client *c, char *const keys[RLOCK__K_COUNT],
                      const size_t key_lens[RLOCK__K_COUNT],
                      const char *channel, size_t channel_len,
                      const char *owner, const char *attempt);
/* Same for the calling thread on m (attempt 0: queue place only), sent
 * later by the background thread. */
void rlock__defer_cancel(rlock_mutex *m, uint64_t attempt);
/* Background thread: sends due cleanups (mu held, released meanwhile). */
void rlock__cleanup_step(rlock_client *c, int64_t *next);
void rlock__cleanup_discard(rlock_client *c);


/* The operators' scripts' refusal (error.c): if r is one, records
 * RLOCK_ENOTLOCK with what the key is (where, if not NULL, says on which
 * node, e.g. " on node h:p") and returns it; RLOCK_OK otherwise. */
int rlock__not_a_lock(rlock_mutex *m, const redisReply *r, const char *where);

#endif
