/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * rlock: distributed locks for C programs, on Redis.
 *
 * This header is the reference documentation of the library. Every function
 * says what it does, who owns what, whether it may be called from several
 * threads at once, and which error codes it returns.
 *
 * Model
 * -----
 * An rlock_client is a handle on one Redis server (a URL). It is safe to
 * share between threads. An rlock_mutex is a named lock reached through a
 * client; the name is a byte string, the same name on every process and host
 * means the same lock.
 *
 * The owner of a hold is the pair (client handle, calling thread), or,
 * with the _as calls, (client handle, rlock_owner): an owner object that
 * any thread may act as (a task of a thread pool, a coroutine, an event
 * loop's callback), see "Owners" below. The same owner locking again
 * through the same client is a re-entry: it increments a hold count, and
 * the lock is released when unlock has been called as many times as lock.
 * Two threads of one process are two owners and exclude each other like
 * two processes do. A forked child is never the owner of its
 * parent's holds: on its first call a client inherited through fork()
 * takes a new identity and new connections, and forgets (without
 * releasing) the parent's holds. In the child, make that first call from
 * one thread before others use the client. fork() never waits on the
 * network: it takes each client's internal locks for as long as it
 * copies the process, and those are held only for work in memory, never
 * across a round trip, so fork() waits at most for other threads to
 * finish a few instructions, whatever Redis does (a renewal waiting for a
 * stalled server does not hold it up). The child gets every client as it
 * was at one moment; a request that was in flight is the parent's, and
 * its answer goes to the parent.
 *
 * Every hold has a lease: if the owner dies, Redis forgets the lock after at
 * most the lease and another owner can take it. With lease_ms = 0 the client
 * renews the lease in the background for as long as the lock is held (the
 * watchdog, see rlock_mutex_opts). Every fresh acquisition has a fencing
 * token, strictly greater than every earlier token of that name: pass it to
 * the resource you protect so it can reject writes from a holder whose lease
 * ran out while it was paused. An acquisition nobody contends draws its
 * token when the holder first asks for it (rlock_mutex_fence), so that
 * callers who never fence pay Redis no more than a bare SET NX PX; from
 * then on that mutex's acquisitions draw theirs at once.
 *
 * Errors
 * ------
 * Functions return RLOCK_OK (0) or a negative RLOCK_E* code. The numbers
 * never change once released. rlock_strerror() names a code, and
 * rlock_client_errmsg() gives the detail of the last error (for example the
 * text of a Redis error reply).
 *
 * Two kinds of time-out have two codes: RLOCK_ETIMEDOUT is a wait for the
 * lock that reached the caller's deadline (the lock is busy); RLOCK_ENOREPLY
 * is a Redis server that did not answer within the call's deadline
 * (stopped, overloaded, or a network that holds or trickles the packets).
 * A request that was sent but whose reply never came (RLOCK_ENOREPLY or
 * RLOCK_EIO) may have been carried out by Redis: the
 * library undoes an acquisition that may have happened, and a release or
 * extension may be called again.
 *
 * Deadlines
 * ---------
 * Every call has one absolute deadline on the monotonic clock, fixed when
 * it starts: command_timeout_ms later (plus sync_timeout_ms for a write
 * that waits for replicas). It covers everything the call does with Redis:
 * waiting for a free connection, connecting (TCP or unix, TLS, AUTH,
 * SELECT, loading the scripts; the connect part also within
 * connect_timeout_ms), sending, and every byte of every reply. A server
 * that stalls, trickles its reply a byte at a time, or never answers makes
 * the call return RLOCK_ENOREPLY at its deadline (plus scheduling delay),
 * never later. Waiting calls give each attempt such a deadline, and wait
 * between attempts only as long as the caller asked. Each function below
 * says how long it may take. Host names are looked up within the same
 * deadline (and the connect timeout): /etc/hosts, then the DNS servers of
 * /etc/resolv.conf, asked with c-ares; a server that does not answer
 * makes the call fail in time like a Redis that does not. (A library
 * built without c-ares, RLOCK_CARES=off, resolves names with
 * getaddrinfo(3), which no deadline can interrupt: give addresses then.)
 *
 * A hold is believed only as long as its lease lasts as this client
 * counts it: from the moment the last acquisition or renewal that Redis
 * confirmed was sent. When that lease ends without a confirmed renewal,
 * the hold is lost (on_lost is called, unlock and extend return
 * RLOCK_ELOST), whatever a late reply may say.
 *
 * Replies are bounded (rlock_client_opts.max_reply_bytes and the fields
 * that follow it): a server cannot make the client allocate more, and a
 * reply over a bound returns RLOCK_EPROTO naming the bound. Every socket
 * and pipe the library opens is close-on-exec, and no write raises
 * SIGPIPE.
 */
#ifndef RLOCK_RLOCK_H
#define RLOCK_RLOCK_H

#include <stddef.h>
#include <stdint.h>

#include <rlock/version.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(RLOCK_STATIC)
#define RLOCK_API
#elif defined(__GNUC__)
#define RLOCK_API __attribute__((visibility("default")))
#else
#define RLOCK_API
#endif

/* ------------------------------------------------------------------------ */
/* Error codes                                                              */
/* ------------------------------------------------------------------------ */

#define RLOCK_OK 0
#define RLOCK_EINVAL (-1)     /* bad argument (nothing was sent to Redis)
                                 or deployment (a Redlock node list: no
                                 lock is left taken) */
#define RLOCK_ENOMEM (-2)     /* out of memory */
#define RLOCK_ECONNECT (-3)   /* could not connect to Redis */
#define RLOCK_ETIMEDOUT (-4)  /* the lock was not obtained within the wait */
#define RLOCK_EBUSY (-5)      /* another owner holds the lock */
#define RLOCK_ENOTOWNER (-6)  /* the caller holds no such lock */
#define RLOCK_ELOST (-7)      /* the caller's hold expired or was taken */
#define RLOCK_EAUTH (-8)      /* Redis refused the credentials */
#define RLOCK_EREDIS (-9)     /* Redis answered with an error reply */
#define RLOCK_EPROTO (-10)    /* Redis answered something unexpected */
#define RLOCK_EIO (-11)       /* the connection to Redis was lost */
#define RLOCK_ECANCELED (-12) /* the wait was cancelled */
#define RLOCK_EREPLICAS (-13) /* too few replicas took the write in time */
#define RLOCK_EUNAVAILABLE (-14) /* Redis cannot serve locks now (replica,
                                    loading, master or cluster down, a
                                    cluster slot migrating past the
                                    call's deadline) */
#define RLOCK_EQUORUM (-15)   /* Redlock: no majority of the nodes answered */
#define RLOCK_ENOREPLY (-16)  /* Redis did not answer within the call's
                                 deadline (stalled, trickling, hung) */
#define RLOCK_EPERM (-17)     /* Redis refused the command to this user
                                 (ACL: NOPERM) */
#define RLOCK_ENOTLOCK (-18)  /* the key is not a lock of the mutex's
                                 layout (someone's data); left untouched */
#define RLOCK_ENOTIFY (-19)   /* the lock was released (or removed), but
                                 its waiters could not be notified (an ACL
                                 without PUBLISH): they take it when their
                                 own timers wake them; nothing is held */

/* Longest lock name in bytes. Names may hold any bytes, NUL included
 * (see rlock_mutex_new_len). */
#define RLOCK_NAME_MAX 1024

/* Pass as wait_ms to rlock_with to wait without a bound. */
#define RLOCK_WAIT_FOREVER (-1)

/* Largest lease or wait accepted, in milliseconds (about 292 years in
 * nanoseconds, which is what the library counts in internally). */
#define RLOCK_MS_MAX ((int64_t)9000000000000LL)

typedef struct rlock_client rlock_client;
typedef struct rlock_mutex rlock_mutex;
typedef struct rlock_owner rlock_owner;

/*
 * Returns a static, English description of an error code ("no error" for
 * RLOCK_OK, "unknown error code" for numbers rlock never returns). Never
 * NULL. Thread-safe.
 */
RLOCK_API const char *rlock_strerror(int err);

/* Returns the library's version string, for example "0.1.0"; compare with
 * RLOCK_VERSION_STRING to detect a header/library mismatch. Thread-safe. */
RLOCK_API const char *rlock_version(void);

/* ------------------------------------------------------------------------ */
/* Client                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct rlock_client_opts {
    /* Time allowed to establish a connection (TCP connect or unix socket),
     * including AUTH and SELECT. Default 2000 ms. Must be > 0. */
    int connect_timeout_ms;

    /* A call's deadline (see Deadlines above): it returns RLOCK_ENOREPLY
     * rather than hang past it, however the server answers. Default 2000 ms. Must be > 0. */
    int command_timeout_ms;

    /* Lease used when a mutex has lease_ms = 0: the lock is taken for this
     * long and renewed every third of it while held. Default 30000 ms.
     * Must be >= 30 (so that a third is at least 10 ms). */
    int64_t watchdog_lease_ms;

    /* How long a waiter keeps its place in a lock's queue without touching
     * it. A waiting thread refreshes its place after a quarter to a third of
     * this, at random (waiters that queued together refresh apart); a waiter
     * that died keeps the queue blocked for at most this long. Default
     * 5000 ms. Must be >= 30. */
    int64_t waiter_ttl_ms;

    /* 1 (default, or any non-zero value): waiters are woken by Redis
     * pub/sub messages. 0: waiters retry after a random delay between
     * backoff_min_ms and backoff_max_ms (for proxies without pub/sub). If
     * the subscriber connection fails, waiting falls back to the same
     * backoff until it is restored. */
    int use_pubsub;

    /* Bounds of the randomized retry delay. Defaults 5 and 100 ms. Need
     * 1 <= backoff_min_ms <= backoff_max_ms. */
    int backoff_min_ms;
    int backoff_max_ms;

    /* Most connections a client opens for commands to one server (threads
     * wait for a free one beyond that); a hard limit. They are opened as
     * threads need them (a thread takes an idle one before another is
     * opened), and those beyond one are closed again after 5 s unused.
     * The subscriber connection is extra. With Redlock, each node's (at
     * least 2), and a request waits for none: a node with none free
     * counts as failed for it. Default 64. Must be 1 to 1024. */
    int max_connections;

    /* Prefix of every key and channel rlock writes. Default "rlock". Copied.
     * 1 to 64 bytes, not NULL, and without '{' or '}' (they would move the
     * cluster hash tag). */
    const char *key_prefix;

    /* Credentials that override those in the URL (NULL: use the URL's),
     * each on its own: a password here with a user in the URL is that
     * user's password. Copied. A username without password is an error. An empty password
     * is sent as given (Redis then refuses it: RLOCK_EAUTH); an empty
     * password in a URL is a malformed URL (RLOCK_EINVAL). */
    const char *username;
    const char *password;

    /* Replica-synced holds (Redisson's WAIT after each write). > 0: after
     * every acquisition, grant, extension and renewal, Redis is asked to
     * WAIT until this many replicas have the write, for at most
     * sync_timeout_ms. An acquisition or extension that fewer replicas
     * acknowledged fails with RLOCK_EREPLICAS (an acquisition is released
     * again first); a renewal that fewer acknowledged does not count, so a
     * hold whose renewals never reach the replicas is reported lost at its
     * lease end. This narrows, but cannot close, the window in which a
     * failover to a replica loses a hold (docs/deployments.md). 0
     * (default): no WAIT. Must be 0 to 64. */
    int sync_replicas;

    /* Longest WAIT for sync_replicas, in ms. Default 1000. Must be > 0;
     * a reply may take up to command_timeout_ms + sync_timeout_ms. */
    int sync_timeout_ms;

    /* Bounds on every reply the client accepts (a hostile or broken server
     * cannot make the client allocate more). A reply that exceeds one
     * closes its connection and the call returns RLOCK_EPROTO naming the
     * bound. 0 means the default. max_reply_bytes: all bytes of one reply
     * (default 1 MiB, at least 1024); max_bulk_bytes: one string (default
     * 512 KiB); max_array_elements: one array (default 65536); max_depth:
     * nesting of arrays (default 4, at most 7). These bounds are for the
     * replies of calls (rlock_client_ping's INFO server, about 1 KiB, is
     * one); the library's own questions when it connects (INFO and ROLE
     * of a new connection, the sentinels' answers, CLUSTER SLOTS) are
     * bounded by the defaults, or by these where they are larger, so
     * that a tight bound does not stop the client from connecting. */
    int64_t max_reply_bytes;
    int64_t max_bulk_bytes;
    int64_t max_array_elements;
    int max_depth;

    /* TLS (also chosen by a rediss:// URL, or tls=1 in the query of the
     * other URL kinds). tls: 1 to use TLS on every connection (servers,
     * sentinels, cluster nodes, Redlock nodes). The server's certificate is
     * verified against the system's CAs, or tls_ca_file (PEM) if set, and
     * its host name against the URL's host (or tls_sni); tls_insecure = 1
     * skips both checks (tests only). tls_cert_file / tls_key_file (PEM): a
     * client certificate for mutual TLS. tls_sni: the name sent as SNI and
     * checked in the certificate (default: the host). Strings are copied;
     * NULL for none. URL query parameters tls=1, cacert=, cert=, key=,
     * sni= and insecure=1 set the same, in every URL kind (for
     * redis-sentinel://, redis-cluster:// and redlock:// they apply to
     * every connection); any of cacert=, cert=, key=, sni= and insecure=
     * in a URL turns TLS on. A URL can only add TLS, a CA, certificates or
     * a name, never take away what these options ask for: tls=0 with tls
     * set, insecure=1 with tls_ca_file set, or a cacert=, cert=, key= or
     * sni= other than the option's, is RLOCK_EINVAL (whoever can set a
     * program's RLOCK_URL could otherwise turn TLS off). TLS over a unix
     * socket verifies the name given by sni= or tls_sni; without one it
     * needs insecure=1 (RLOCK_EINVAL otherwise): there is no host name to
     * check, and a chain alone would pass any certificate its CAs ever
     * signed. */
    int tls;
    const char *tls_ca_file;
    const char *tls_cert_file;
    const char *tls_key_file;
    const char *tls_sni;
    int tls_insecure;
} rlock_client_opts;

/* Fills *o with the defaults above. Call it before setting fields, so that
 * fields added in later versions get their defaults too. o != NULL. */
RLOCK_API void rlock_client_opts_init(rlock_client_opts *o);

/*
 * Opens a client for the Redis at url and connects at once (so a wrong
 * address fails here, not at the first lock).
 *
 * url: "redis://[user[:password]@]host[:port][/db]" (port 6379 by default,
 * IPv6 hosts in brackets, user and password may be percent-encoded; the
 * database given once, by the path or db=),
 * "unix:///path/to/socket[?db=N]", or, for Redlock over independent
 * masters, "redlock://host:port,host:port,...[?drift=F&node_timeout_ms=N]"
 * (1 to 16 nodes, each server once; credentials from opts; drift 0 <= F <
 * 1, default 0.01; node_timeout_ms 1 to 60000, default 100; every client
 * of a lock must give the same list; docs/deployments.md), or,
 * behind Redis Sentinel, "redis-sentinel://host:port[,host:port...]/
 * master-name[?db=N]" (the master is asked of the sentinels and checked
 * with ROLE at each new connection, and asked again after a lost
 * connection, a READONLY reply or a request the master did not answer,
 * and before a request to a master the client has not heard from for
 * half of the sentinels' down-after-milliseconds, so that the first call
 * after a failover does not wait on a master that stalled; credentials,
 * for the master, from opts),
 * or a Redis Cluster, "redis-cluster://host:port[,host:port...]" (seed
 * nodes; each lock lives in the slot of its hash tag, on that slot's
 * master; MOVED, ASK and TRYAGAIN are followed: a slot migration is
 * waited out within each call's deadline, and one that outlasts it is
 * RLOCK_EUNAVAILABLE; docs/deployments.md).
 * opts may be NULL for the defaults; the client copies what it needs from
 * opts and url.
 *
 * A Redlock client opens a client per node and succeeds if a majority of
 * the nodes can be reached (RLOCK_EQUORUM otherwise); nodes that are down
 * are connected to again when needed. Its waits are retries after a
 * random delay (backoff_min_ms to backoff_max_ms), its re-entry is
 * counted by the client, and a call that cannot get a majority of the
 * nodes returns RLOCK_EQUORUM with each failed node's reason.
 * Each server must count once: entries with the same address are refused
 * before connecting, and every new connection asks the server's run_id
 * (INFO server) with its handshake, so that one server behind two entries
 * (0.0.0.0 and 127.0.0.1, the IPv4 and IPv6 loopback, a NAT) is refused
 * at open, and after it its second answer to a request is not counted
 * (that node fails, naming the other entry). A server whose INFO is
 * renamed away or denied is told apart by its address only. Every client
 * of a lock must list the same nodes: an acquisition that finds the lock
 * held, on any node, by a client that lists another number of nodes
 * returns RLOCK_EINVAL and gives back what it took.
 *
 * Returns the client, or NULL and stores the error in *err (err may be
 * NULL): RLOCK_EINVAL (malformed URL or option, or a Redlock list that
 * names one server twice), RLOCK_ENOMEM,
 * RLOCK_ECONNECT (refused, unreachable, or the TCP connection not made
 * within the connect timeout), RLOCK_EAUTH (credentials refused),
 * RLOCK_EREDIS (for example SELECT of a database that does not exist),
 * RLOCK_ENOREPLY (the server accepted the connection but did not answer
 * within the connect timeout), RLOCK_EIO, RLOCK_EUNAVAILABLE (no sentinel
 * knows the master, the server is not the master, or a cluster has no
 * slots), RLOCK_EQUORUM (fewer than a majority of Redlock nodes reached).
 * The detail is available from rlock_client_errmsg(NULL) on the same
 * thread. RLOCK_EPROTO: the server's reply broke the protocol or a reply
 * bound.
 *
 * Takes at most connect_timeout_ms (for Sentinel, that for each sentinel
 * asked, then for the master; for Redlock, node_timeout_ms for all nodes
 * at once), plus name resolution.
 *
 * Thread-safe. The caller owns the client and frees it with
 * rlock_client_close().
 */
RLOCK_API rlock_client *rlock_client_open(const char *url,
                                          const rlock_client_opts *opts,
                                          int *err);

/*
 * Closes the client: stops its background thread (no renewal happens after
 * this returns), closes its connections and frees it. Locks still held are
 * not released; their keys expire when their leases end. Undos of timed-out
 * attempts still queued are dropped (what they would remove expires with
 * its lease). Returns within about one command_timeout_ms even when a
 * server does not answer (the request the background thread has in
 * flight). Mutexes created on
 * this client must be freed before (rlock_mutex_free), and no other thread
 * may be using the client. NULL is a no-op. In a forked child it closes
 * the child's copy, as its first call or later: the parent's threads,
 * connections and holds are left alone; as the child's first call on the
 * client, the mutexes the child inherited need not be freed before (they
 * are then memory only, never to be used again).
 */
RLOCK_API void rlock_client_close(rlock_client *c);

/*
 * Returns the detail of the last error that a call on client c returned on
 * the calling thread (for example "WRONGTYPE Operation against a key..." or
 * "connection refused (127.0.0.1:6390)"), or "" if there was none. With
 * c = NULL: the detail of the last failed rlock_client_open() on this
 * thread, or of the last call on this thread that was given a NULL
 * handle. The string belongs to the library and stays valid until the
 * next rlock call on this thread. Thread-safe.
 */
RLOCK_API const char *rlock_client_errmsg(rlock_client *c);

/*
 * Makes every rlock_mutex_lock / rlock_mutex_timedlock currently waiting
 * on client c return RLOCK_ECANCELED (after leaving the lock's queue).
 * Calls that start later wait normally. For example a program's signal
 * handling thread calls it on SIGINT. Not async-signal-safe. NULL is a
 * no-op. Thread-safe.
 */
RLOCK_API void rlock_client_cancel_waits(rlock_client *c);

typedef struct rlock_server_info {
    char version[32]; /* the server's version, e.g. "7.0.15" (Valkey's own
                         valkey_version where it reports one) */
    int64_t rtt_us;   /* one PING round trip, in microseconds */
    char server[16];  /* what the server calls itself: "redis" or "valkey"
                         (INFO's server_name; "redis" if absent) */
} rlock_server_info;

/*
 * Sends PING and INFO server: fills *info with the server's version and
 * the round-trip time of the PING. Returns RLOCK_OK, RLOCK_EINVAL (NULL
 * argument), or a connection error as rlock_mutex_lock, within
 * command_timeout_ms of its start (Redlock: each node in turn, each
 * within node_timeout_ms). Thread-safe.
 */
RLOCK_API int rlock_client_ping(rlock_client *c, rlock_server_info *info);

/* ------------------------------------------------------------------------ */
/* Mutex                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct rlock_mutex_opts {
    /* Lease of each hold in ms. 0 (default): the client's watchdog_lease_ms,
     * renewed every third of it by the client's background thread while the
     * lock is held. > 0: a fixed lease, no watchdog; rlock_mutex_extend
     * extends it by hand. Must be 0 or in [1, RLOCK_MS_MAX]. */
    int64_t lease_ms;

    /* With the watchdog: renew at most this many times per hold, then let
     * the key expire (a holder stuck forever must not hold forever).
     * 0 (default): no cap. */
    uint32_t max_renewals;

    /* Called once when the client learns that a hold of this mutex is
     * gone before it was unlocked: the key was deleted or taken by another
     * owner, the renewal cap was reached, or the lease ended without a
     * successful renewal (Redis unreachable, Redis restarted, fixed lease
     * not extended). The next call on that hold returns RLOCK_ELOST
     * (unlock, extend, and a re-entering lock, which never takes a fresh
     * hold in its place); whatever happens to the hold, the callback still
     * comes.
     *
     * It runs on a thread of the client's own, never on the one that
     * renews leases and watches their ends: a callback may take its time,
     * block, and call any function of the library (lock, unlock, extend,
     * other mutexes), but not rlock_mutex_free of its own mutex or
     * rlock_client_close (both wait for callbacks under way). While one
     * callback runs, another hold's notice goes to another such thread
     * (started after about 10 ms; at most 32 per client), so callbacks of
     * one client may run at the same time, even for one mutex. Signals
     * are blocked on these threads. NULL: no callback. */
    void (*on_lost)(rlock_mutex *m, void *arg);
    void *on_lost_arg;

    /* Replicas each write of this mutex waits for (see the client's
     * sync_replicas). 0 (default): the client's setting; > 0: this many;
     * RLOCK_SYNC_OFF: none, whatever the client says. Must be
     * RLOCK_SYNC_OFF or 0 to 64. */
    int sync_replicas;

    /* How the lock is kept in Redis (docs/interop.md):
     * RLOCK_LAYOUT_NATIVE (default): rlock's own (docs/protocol.md): a
     *   queue, hand-over by notification, fencing tokens.
     * RLOCK_LAYOUT_TOKEN: the layout of redis-py's Lock, node-redlock,
     *   redsync and "SET key token NX PX" code, for sharing a lock with
     *   them: the key is the lock name itself (no key prefix), a string
     *   "<owner>:<token>" set with SET NX PX, released by compare-and-
     *   delete, extended by compare-and-pexpire. Those peers send no
     *   notifications, so waiting is by retries after a random delay
     *   (backoff_min_ms to backoff_max_ms) and there is no queue; re-entry
     *   is counted by the client; fencing tokens come from the counter
     *   "<name>:rlock-fence", which only rlock increments. Not with
     *   redlock://. On a cluster, give the name a hash tag ("{order}:1")
     *   so that the counter shares its slot.
     * RLOCK_LAYOUT_REDISSON: the layout of Redisson's RLock (Java), for
     *   sharing a lock with it: the key is the lock name itself, a hash
     *   whose one field "<client id as a UUID>:<thread>" holds the hold
     *   count (re-entry is counted there, as Redisson does); the final
     *   release deletes it and publishes "0" on
     *   "redisson_lock__channel:{<name>}", which wakes Redisson's waiters,
     *   and rlock's waiters are woken by the same message from either
     *   side (one waiter per client and message). Fencing tokens come from
     *   RFencedLock's counter "redisson_lock_token:{<name>}", shared with
     *   it; Redis keeps no token with the hold, so rlock_mutex_status
     *   reports token 0. No queue: waiters are not served in order. Not
     *   with redlock://. Names must be what the Java side's String
     *   encodes to (UTF-8) to name the same lock. */
    int layout;
} rlock_mutex_opts;

/* rlock_mutex_opts.sync_replicas: no WAIT for this mutex. */
#define RLOCK_SYNC_OFF (-1)

/* rlock_mutex_opts.layout. */
#define RLOCK_LAYOUT_NATIVE 0
#define RLOCK_LAYOUT_TOKEN 1
#define RLOCK_LAYOUT_REDISSON 2

/* Fills *o with the defaults above. o != NULL. */
RLOCK_API void rlock_mutex_opts_init(rlock_mutex_opts *o);

/*
 * Creates a handle on the lock called name (a NUL-terminated string of 1 to
 * RLOCK_NAME_MAX bytes) reached through client c. Nothing is sent to Redis.
 * opts may be NULL for the defaults; it is copied.
 *
 * Returns the mutex, or NULL with *err (err may be NULL) set to
 * RLOCK_EINVAL (NULL client or name, empty or too long name, bad option) or
 * RLOCK_ENOMEM. The caller owns the mutex and frees it with
 * rlock_mutex_free() before closing the client.
 *
 * A mutex may be used by several threads at once: each thread is its own
 * owner. Thread-safe.
 */
RLOCK_API rlock_mutex *rlock_mutex_new(rlock_client *c, const char *name,
                                       const rlock_mutex_opts *opts,
                                       int *err);

/* As rlock_mutex_new, for a name of name_len bytes that may contain any
 * byte, NUL included. */
RLOCK_API rlock_mutex *rlock_mutex_new_len(rlock_client *c, const char *name,
                                           size_t name_len,
                                           const rlock_mutex_opts *opts,
                                           int *err);

/*
 * Frees the mutex. Holds still open through it stop being renewed at once
 * and are forgotten locally (not released: their keys expire at the end of
 * the lease). No thread may be inside a call on m. NULL is a no-op.
 */
RLOCK_API void rlock_mutex_free(rlock_mutex *m);

/* Returns the mutex's client (NULL for m = NULL). Thread-safe. */
RLOCK_API rlock_client *rlock_mutex_client(rlock_mutex *m);

/*
 * Acquires the lock for the calling thread, waiting as long as it takes. A
 * thread that already holds it re-enters (hold count + 1, and the lease
 * set again to the mutex's: one round trip, whether Redis or the client
 * counts the levels). A re-entry of a hold that was lost, or whose lease
 * as this client counts it has ended, returns RLOCK_ELOST and takes
 * nothing: the loss is reported and the hold forgotten (on_lost comes as
 * well), and the next call takes a fresh hold.
 * An acquisition whose reply arrives after its lease has ended (counted
 * from before the request left) is not a hold: it is undone and the call
 * keeps waiting, so while every round trip takes longer than the lease,
 * rlock_mutex_lock does not return; use rlock_mutex_timedlock to bound it.
 * A hold is returned only with lease left: one handed over so late that
 * less than a third of its lease is left is renewed first (a round trip),
 * and one whose lease ran out before it could be returned is given back
 * (and the wait goes on).
 * A connection that drops under an attempt while waiting is replaced and
 * the wait goes on; the call returns RLOCK_EIO only if that happens twice
 * in a row.
 * Behind Sentinel a wait outlives a failover: an attempt or keep-alive
 * that the master does not answer, a connection it drops or refuses, or a
 * server that is a replica now makes the client ask the sentinels again,
 * and the wait goes on against the master they name (a fresh wait there:
 * queued anew, subscribed again), after a pause that grows while the
 * failures last. Nothing but the lock (or rlock_client_cancel_waits) ends
 * rlock_mutex_lock then: while the deployment stays down it keeps waiting.
 *
 * Returns RLOCK_OK, or RLOCK_ELOST (a re-entry of a lost hold, above),
 * RLOCK_EINVAL (m NULL; Redlock: the lock is held for a client whose node
 * list is of another length, and what the attempt took was given back),
 * RLOCK_EQUORUM (Redlock: no majority of the nodes' servers answered),
 * RLOCK_ENOMEM, RLOCK_ECONNECT,
 * RLOCK_EAUTH, RLOCK_EIO, RLOCK_ENOREPLY (Redis did not answer within the
 * command timeout; each attempt has a deadline of its own, see Deadlines
 * above), RLOCK_EREDIS (for example a key of another type
 * under the lock's name; nothing is changed), RLOCK_EPROTO,
 * RLOCK_EUNAVAILABLE (the server is a replica, is loading its data, its
 * master or cluster is down, or the lock's cluster slot is migrating and
 * did not finish within the attempt's deadline; the message says which),
 * RLOCK_EREPLICAS (sync_replicas: too few replicas acknowledged the
 * acquisition, which was released again; or the server refused writes for
 * want of replicas).
 * Thread-safe.
 */
RLOCK_API int rlock_mutex_lock(rlock_mutex *m);

/*
 * Acquires the lock if no other owner holds it or is queued for it, without
 * waiting. Returns RLOCK_OK or re-enters as rlock_mutex_lock; RLOCK_EBUSY if
 * another owner holds the lock or waits ahead of the caller, or if Redis
 * granted it but the reply arrived after the lease had ended (the grant is
 * undone; the message says so); other errors as rlock_mutex_lock.
 * Returns within command_timeout_ms (+ sync_timeout_ms with
 * sync_replicas) of its start. Thread-safe.
 */
RLOCK_API int rlock_mutex_trylock(rlock_mutex *m);

/*
 * As rlock_mutex_lock, but gives up after wait_ms milliseconds (measured on
 * the monotonic clock) and then returns RLOCK_ETIMEDOUT, leaving no trace
 * in the lock's queue. Behind Sentinel, failures a failover explains do
 * not end the wait before wait_ms (see rlock_mutex_lock); if its last
 * attempt failed so, the call returns that attempt's error at wait_ms.
 * wait_ms = 0 behaves as rlock_mutex_trylock except
 * that it returns RLOCK_ETIMEDOUT instead of RLOCK_EBUSY. wait_ms < 0 or
 * > RLOCK_MS_MAX: RLOCK_EINVAL. Returns within wait_ms plus one attempt's
 * deadline (command_timeout_ms, + sync_timeout_ms with sync_replicas),
 * whatever it has to undo on the way (leaving the queue, giving back a
 * hold the replicas did not confirm): what does not fit is done in the
 * background, behind the requests it undoes. Thread-safe.
 */
RLOCK_API int rlock_mutex_timedlock(rlock_mutex *m, int64_t wait_ms);

/*
 * Releases one level of the calling thread's hold; at zero the lock is free
 * and the first queued waiter is woken.
 *
 * Returns RLOCK_OK; RLOCK_ENOTOWNER if the calling thread holds no lock of
 * this name through this client (nothing is sent, the real owner's lock is
 * untouched); RLOCK_ELOST if the hold was lost (expired, deleted, taken by
 * another owner) — the local hold is forgotten and another owner's lock is
 * untouched; RLOCK_ENOTIFY if the lock was released (the hold is gone, do
 * not call again) but the waiter it was handed to, or the peers' waiters,
 * could not be notified (an ACL user without PUBLISH; the message gives
 * Redis's words): they take the lock when their own timers wake them (at
 * most the waiter's keep-alive, at most waiter_ttl_ms / 3, or their backoff);
 * RLOCK_EIO / RLOCK_ENOREPLY / RLOCK_EREDIS / RLOCK_EPROTO (the hold is
 * kept, call again). Returns within command_timeout_ms of its start;
 * RLOCK_ELOST without a round trip once the hold's lease, as this client
 * counts it, has ended. Thread-safe.
 */
RLOCK_API int rlock_mutex_unlock(rlock_mutex *m);

/*
 * Sets the remaining lease of the calling thread's hold to lease_ms
 * milliseconds from now. Never recreates a lock that expired. If a request
 * about this hold was never answered before (an extension, a renewal or a
 * re-entry that returned RLOCK_ENOREPLY or RLOCK_EIO), it may still reach
 * Redis after this one and set its own lease: the lease this client then
 * counts is no longer than that one's. A watchdog hold (lease_ms = 0)
 * extended past its watchdog lease is renewed again only when what is left
 * is down to two thirds of that lease: renewals never end the hold sooner
 * than the extension did.
 *
 * Returns RLOCK_OK; RLOCK_EINVAL (lease_ms <= 0 or > RLOCK_MS_MAX);
 * RLOCK_ENOTOWNER (no hold by the calling thread); RLOCK_ELOST (the hold
 * expired or was taken; the local hold is forgotten); RLOCK_EIO,
 * RLOCK_ENOREPLY, RLOCK_EREDIS, RLOCK_EPROTO, RLOCK_EUNAVAILABLE;
 * RLOCK_EREPLICAS (sync_replicas: Redis extended the lease but too few
 * replicas acknowledged it; the hold is kept, but its lease end as this
 * client counts it is not moved). Returns within command_timeout_ms (+
 * sync_timeout_ms with sync_replicas) of its start; a hold reported lost
 * while the call waited for its reply stays lost (RLOCK_ELOST).
 * Thread-safe.
 */
RLOCK_API int rlock_mutex_extend(rlock_mutex *m, int64_t lease_ms);

/*
 * Sets *token to the fencing token of the calling thread's hold of m.
 * Tokens of one lock name increase strictly with every fresh acquisition
 * (re-entries keep the token): a holder's token is greater than that of
 * every hold of the name before it. The first token of a name is the
 * Redis server's clock in microseconds (about 1.8e15 in 2026), so tokens
 * keep growing even after a Redis restart that lost the counter, unless
 * the server's clock stepped back (see docs/protocol.md). They fit in 53
 * bits until about 2255, so they survive a trip through a double (JSON,
 * Lua).
 *
 * Most acquisitions draw their token as they take the lock, and then this
 * sends nothing. One that nobody contended, through a mutex handle whose
 * callers had not asked for a token before, draws none (Redis then does
 * no more work than for a bare SET NX PX): the first call for that hold
 * draws it, one round trip within command_timeout_ms (+ sync_timeout_ms
 * with sync_replicas), and only while the hold lasts; later calls send
 * nothing. From the first call on, m's acquisitions draw their token at
 * once.
 *
 * Returns RLOCK_OK; RLOCK_EINVAL (m or token NULL); RLOCK_ENOTOWNER (no
 * hold by the calling thread); RLOCK_ELOST (the hold's lease ended, or
 * Redis no longer has it: it is lost, on_lost is called and unlock will
 * say RLOCK_ELOST); RLOCK_EREPLICAS (sync_replicas: drawn, but too few
 * replicas acknowledged it; asking again waits for them again); RLOCK_EIO,
 * RLOCK_ENOREPLY, RLOCK_EREDIS, RLOCK_EPROTO, RLOCK_EUNAVAILABLE. *token
 * is 0 on every error. Thread-safe.
 */
RLOCK_API int rlock_mutex_fence(rlock_mutex *m, uint64_t *token);

/*
 * rlock_mutex_fence, returning the token itself: 0 on any error (the
 * calling thread's error detail, rlock_client_errmsg, says which). A
 * caller that must tell a lost hold from an unreachable server uses
 * rlock_mutex_fence. Thread-safe.
 */
RLOCK_API uint64_t rlock_mutex_token(rlock_mutex *m);

/*
 * How long the calling thread's hold of m lasts as this client counts it,
 * asking nothing of Redis: the lease from the moment the request that set
 * it last was sent (never later than Redis's own end), less the drift
 * margin. A holder that checks it before acting on what the lock guards
 * never acts on a hold whose lease it cannot vouch for.
 *
 * Returns RLOCK_OK with *left_ms > 0 while the hold lasts; RLOCK_ELOST if
 * it was lost or its counted lease has ended (the hold is not forgotten:
 * the next lock, unlock or extend on it reports the loss too, and on_lost
 * is called); RLOCK_ENOTOWNER if the calling thread holds no lock of this
 * name through this client; RLOCK_EINVAL (m or left_ms NULL). *left_ms is
 * 0 on every error. Never blocks on the network. Thread-safe.
 */
RLOCK_API int rlock_mutex_lease_left(rlock_mutex *m, int64_t *left_ms);

/*
 * Acquires m (waiting wait_ms, or forever with RLOCK_WAIT_FOREVER, or not
 * at all with 0), calls fn(arg, token) with the fencing token, and unlocks
 * on every path. The token is drawn with the acquisition (m's later
 * acquisitions draw theirs at once too, as after rlock_mutex_fence).
 * Returns fn's result, except: if the lock was not obtained, the acquire
 * error (RLOCK_ETIMEDOUT, ...) and fn is not called; if the hold has no
 * token and none could be drawn (rare: a hold taken back after a lost
 * reply), rlock_mutex_fence's error, the lock released, and fn is not
 * called; if the hold was lost while fn ran, RLOCK_ELOST after fn
 * returned, so the caller can roll back. fn should return values >= 0 so
 * they cannot be confused with these codes. Thread-safe.
 */
RLOCK_API int rlock_with(rlock_mutex *m, int64_t wait_ms,
                         int (*fn)(void *arg, uint64_t token), void *arg);

/* ------------------------------------------------------------------------ */
/* Owners                                                                   */
/* ------------------------------------------------------------------------ */

/*
 * An owner that is not a thread. The pthread-like calls above act as the
 * calling thread; each has an _as variant that acts as an rlock_owner
 * instead, which any thread may use: lock as an owner on one thread and
 * unlock as it on another, or hand a hold from task to task. Re-entry is
 * counted per owner, as for threads: an owner that holds a lock and locks
 * it again re-enters it, whichever thread makes the call, and the calling
 * thread's own holds are separate from the owner's. An owner may be used
 * with any number of clients and mutexes; calls as one owner on the same
 * mutex must not overlap (as a thread's cannot), calls on different
 * mutexes may, and so may rlock_mutex_lease_left_as with any call (a
 * thread that watches how long another task's hold lasts).
 *
 * Each owner keeps the detail of the last error of a call made as it
 * (rlock_owner_errmsg), beside the calling thread's record
 * (rlock_client_errmsg), so that one task's error is not overwritten by
 * another task's on the same thread.
 */

/*
 * Creates an owner. Returns it, or NULL with *err (err may be NULL) set to
 * RLOCK_ENOMEM. Nothing is sent to Redis. Thread-safe.
 */
RLOCK_API rlock_owner *rlock_owner_new(int *err);

/*
 * Frees the owner. Holds it still has are forgotten, not released, as
 * rlock_mutex_free forgets a mutex's holds: they are no longer renewed,
 * and their keys expire at the end of their lease. No call as the owner
 * may be running. NULL is a no-op.
 */
RLOCK_API void rlock_owner_free(rlock_owner *o);

/*
 * The detail of the last error that a call made as owner o returned
 * ("" if none, or for o = NULL): a copy for the calling thread, valid
 * until its next call of rlock_owner_errmsg on any owner. Calls as o on
 * other threads meanwhile (on other mutexes, or rlock_mutex_lease_left_as)
 * may have replaced the owner's text: read it right after the call that
 * failed. Thread-safe.
 */
RLOCK_API const char *rlock_owner_errmsg(rlock_owner *o);

/*
 * rlock_mutex_lock, _trylock, _timedlock, _unlock, _extend, _fence,
 * _token, _lease_left and rlock_with, acting as owner o instead of the
 * calling thread;
 * each returns what its pthread-like counterpart returns, RLOCK_EINVAL (0
 * for rlock_mutex_token_as) for a NULL m or o, and records its error
 * detail for o too. Thread-safe in the sense above.
 */
RLOCK_API int rlock_mutex_lock_as(rlock_mutex *m, rlock_owner *o);
RLOCK_API int rlock_mutex_trylock_as(rlock_mutex *m, rlock_owner *o);
RLOCK_API int rlock_mutex_timedlock_as(rlock_mutex *m, rlock_owner *o,
                                       int64_t wait_ms);
RLOCK_API int rlock_mutex_unlock_as(rlock_mutex *m, rlock_owner *o);
RLOCK_API int rlock_mutex_extend_as(rlock_mutex *m, rlock_owner *o,
                                    int64_t lease_ms);
RLOCK_API int rlock_mutex_fence_as(rlock_mutex *m, rlock_owner *o,
                                   uint64_t *token);
RLOCK_API uint64_t rlock_mutex_token_as(rlock_mutex *m, rlock_owner *o);
RLOCK_API int rlock_mutex_lease_left_as(rlock_mutex *m, rlock_owner *o,
                                        int64_t *left_ms);
RLOCK_API int rlock_with_as(rlock_mutex *m, rlock_owner *o, int64_t wait_ms,
                            int (*fn)(void *arg, uint64_t token), void *arg);

/* ------------------------------------------------------------------------ */
/* Administration                                                           */
/* ------------------------------------------------------------------------ */

typedef struct rlock_status {
    int held;              /* 1 if some owner holds the lock */
    char holder[160];      /* its owner id ("<client id>@<host>/<pid>:
                              <thread>"), or a peer's value or field
                              (layouts), cut to 159 bytes; or "" */
    int64_t count;         /* its hold count (0 if free) */
    int64_t lease_ms;      /* remaining lease in ms (-1 if free, and for a
                              held key with no expiry: the token layout's
                              redis-py Lock without a timeout, or data
                              that is no lock) */
    uint64_t token;        /* fencing token of the current hold (0 if free,
                              or if the hold has not drawn one yet) */
    uint64_t last_token;   /* last token ever handed out for this name */
    int64_t waiters;       /* owners queued for the lock, alive */
    char holder_host[64];  /* host name of the holder's process as it named
                              itself (cut to 48 bytes of [A-Za-z0-9._-],
                              others shown as '_'), or "" if not known (a
                              peer's hold) */
    int64_t holder_pid;    /* its process id, or 0 if not known */
} rlock_status;

/*
 * Operators' calls act only on keys shaped like a lock of the mutex's
 * layout; anything else is someone's data, refused with RLOCK_ENOTLOCK
 * (the message says what the key is) and left untouched:
 *  - native: the lock key a hash of rlock's fields with the owner among
 *    them and an expiry; the counter a string, the queue keys a list, a
 *    sorted set and a hash (each may be absent);
 *  - token: a string of 8 to 256 bytes of printable ASCII without spaces
 *    (every peer's token, and rlock's values). An empty string, a value
 *    starting with a NUL byte, text with spaces, a short number are
 *    refused. Status shows a key with no expiry (lease_ms -1: redis-py's
 *    Lock without a timeout sets none, but so may an application's own
 *    string); the forced release refuses it unless told
 *    (RLOCK_FORCE_NO_EXPIRY);
 *  - Redisson: a hash with an expiry whose one field "<id>:<thread>"
 *    holds a count >= 1 (beside rlock's "rlock-holder" field).
 * A free lock (no key) is not refused.
 *
 * Every hold rlock takes names its process: the owner id carries the host
 * name and pid ("<random id>@<host>/<pid>:<thread>"; in the Redisson
 * layout a field "rlock-holder" = "<host>/<pid>" beside Redisson's own),
 * which peers ignore; holder_host and holder_pid report them.
 */

/*
 * Reads the lock's state in one atomic step, without changing anything.
 * Returns RLOCK_OK, RLOCK_EINVAL (NULL argument), RLOCK_ENOTLOCK (the key
 * is not a lock, above), RLOCK_EREDIS, or a connection error, within
 * command_timeout_ms of its start. Redlock: RLOCK_ENOTLOCK if any node
 * refused. Thread-safe.
 */
RLOCK_API int rlock_mutex_status(rlock_mutex *m, rlock_status *st);

/*
 * Administrative release: removes the lock whoever holds it (its holder's
 * next unlock or renewal reports RLOCK_ELOST) and hands it to the first
 * queued waiter. If removed is not NULL it receives what was removed
 * (removed->held = 0 if the lock was free). Returns RLOCK_OK, RLOCK_EINVAL,
 * RLOCK_ENOTLOCK (the key is not a lock: nothing was removed),
 * RLOCK_ENOTIFY (removed, but the waiters could not be told, as for
 * rlock_mutex_unlock; *removed is filled), RLOCK_EREDIS
 * or a connection error, within command_timeout_ms of its start. Redlock:
 * each node checks its own keys; RLOCK_ENOTLOCK if any node refused (the
 * nodes that held a lock had it removed). Thread-safe.
 */
RLOCK_API int rlock_mutex_force_unlock(rlock_mutex *m, rlock_status *removed);

/* rlock_mutex_force_unlock_ex's flags. */
/* The token layout: remove a key that has no expiry too. Every lock of
 * that layout has one, but for redis-py's Lock made without a timeout;
 * without this flag such a key is refused (RLOCK_ENOTLOCK: "the key has no
 * expiry"), as it may be an application's own string under the name. */
#define RLOCK_FORCE_NO_EXPIRY 1u

/*
 * rlock_mutex_force_unlock with flags (0, or RLOCK_FORCE_NO_EXPIRY).
 * Other flags: RLOCK_EINVAL, nothing sent. Thread-safe.
 */
RLOCK_API int rlock_mutex_force_unlock_ex(rlock_mutex *m, unsigned flags,
                                          rlock_status *removed);

/* ------------------------------------------------------------------------ */
/* Observing a client: events, a log, counters and metrics                  */
/* ------------------------------------------------------------------------ */

/*
 * What a client does can be watched from inside the program in three ways:
 * a callback for each event (a lock acquired, released, renewed or lost, a
 * wait, a connection lost and made again...), a callback for the log lines
 * the library would otherwise keep as error detail, and counters and
 * histograms since the client was opened, also as Prometheus text for the
 * program's own metrics endpoint (the library opens no port).
 *
 * Delivery of events and log lines. A callback is never called with a lock
 * of the library held, so it may call any function of the library (but
 * rlock_client_close of its own client, and rlock_mutex_free of a mutex a
 * call under way uses); and never on the thread that renews leases and
 * watches their ends, so a callback that takes its time stalls no renewal:
 *  - what a call of the application causes (an acquisition, a release, a
 *    wait that timed out, an undo it sent, a connection it found broken)
 *    is delivered on the thread that made the call, before the call
 *    returns (a wait delivers what happened so far between its attempts);
 *  - what the client's background work finds (renewals, losses, undos it
 *    sends later, the subscriber connection) is queued and delivered on a
 *    thread of the client's own, one such event at a time, in order (the
 *    threads that call on_lost: see rlock_mutex_opts). Signals are blocked
 *    there.
 * So events of one client may reach the callback from two threads at once,
 * and the two streams are not ordered with each other: each event carries
 * its time on the monotonic clock. Events and log lines caused while a
 * callback runs on a thread (by the library calls it makes) are delivered
 * on that thread after it returns, never inside it.
 *
 * Cost: while no callback is set, a call pays one relaxed atomic load for
 * each place that could make an event. The counters are always kept:
 * relaxed atomic additions, a few for each acquisition and release
 * (docs/performance.md has the figures).
 */

/*
 * rlock_event.type: what happened. The numbers never change; a later
 * version may add types, which a callback should ignore.
 *   ACQUIRED      a call took the lock, or re-entered it
 *   RELEASED      one level of a hold was released
 *   RENEWED       the watchdog renewed a hold's lease
 *   LOST          a hold is gone before it was released
 *   WAITING       a waiting call found the lock busy, and waits (once a
 *                 call)
 *   WAIT_TIMEOUT  a wait ended without the lock (RLOCK_ETIMEDOUT)
 *   EXTENDED      rlock_mutex_extend set a new lease
 *   UNDO          an undo was sent: what an attempt may have taken, or a
 *                 waiter's place, given back
 *   CONN_ERROR    a connection to a server failed, or its server did not
 *                 answer in time (the first failure since the server last
 *                 answered; the counters count every one)
 *   RECONNECT     a server that had failed answers again
 *   FAILOVER      Sentinel named another master
 *   REDIRECT      a cluster redirected a request (MOVED, ASK)
 */
#define RLOCK_EV_ACQUIRED 1
#define RLOCK_EV_RELEASED 2
#define RLOCK_EV_RENEWED 3
#define RLOCK_EV_LOST 4
#define RLOCK_EV_WAITING 5
#define RLOCK_EV_WAIT_TIMEOUT 6
#define RLOCK_EV_EXTENDED 7
#define RLOCK_EV_UNDO 8
#define RLOCK_EV_CONN_ERROR 9
#define RLOCK_EV_RECONNECT 10
#define RLOCK_EV_FAILOVER 11
#define RLOCK_EV_REDIRECT 12

/*
 * rlock_event.cause of RLOCK_EV_LOST, and rlock_stats.losses_by_cause:
 *   EXPIRED  its lease ended with no renewal confirmed (Redis unreachable
 *            or slow, a fixed lease not extended, a process stopped)
 *   GONE     Redis no longer has it: deleted, taken by another owner, or
 *            a server restarted
 *   CAPPED   max_renewals was reached
 */
#define RLOCK_LOST_EXPIRED 1
#define RLOCK_LOST_GONE 2
#define RLOCK_LOST_CAPPED 3

/*
 * rlock_event.flags:
 *   REENTRY      ACQUIRED, RELEASED: an inner level of a hold
 *   HANDED_OVER  ACQUIRED: handed to this waiter by the releaser (woken by
 *                its message), not taken by an attempt
 *   LATER        UNDO: sent by the background, after the call that caused
 *                it returned
 */
#define RLOCK_EVF_REENTRY 1u
#define RLOCK_EVF_HANDED_OVER 2u
#define RLOCK_EVF_LATER 4u

/*
 * One event. The library owns it; the callback gets a const pointer that
 * is valid, with every string in it, only until it returns (copy what you
 * keep). Fields may be added at the end in later versions, never moved or
 * removed: size is the struct's size as the library that made the event
 * knows it, so a program built against a newer header reads a newer field
 * only if size > offsetof(rlock_event, field). Fields that do not apply
 * to an event's type are 0, NULL or "".
 */
typedef struct rlock_event {
    size_t size;      /* sizeof(rlock_event) as the library knows it */
    int type;         /* RLOCK_EV_* */
    int code;         /* the RLOCK_E* code of CONN_ERROR; 0 elsewhere */
    int cause;        /* LOST: RLOCK_LOST_*; 0 elsewhere */
    unsigned flags;   /* RLOCK_EVF_* */
    int64_t time_ns;  /* when, on the monotonic clock (CLOCK_MONOTONIC) */
    const char *name; /* the lock's name: name_len bytes, any bytes, with a
                         NUL after them; NULL for connection events */
    size_t name_len;
    int layout;         /* the mutex's RLOCK_LAYOUT_* */
    const char *owner;  /* the owner as the layout writes it in Redis
                           ("<client id>@<host>/<pid>:<owner number>" for
                           the native layout); "" for connection events */
    const char *node;   /* the server: "host:port", or the URL (without
                           password) where the deployment is one thing;
                           "" if none */
    const char *detail; /* a sentence: what failed (CONN_ERROR), where
                           the request was sent (REDIRECT), the new
                           master (FAILOVER), what a loss was found by
                           (LOST); "" if none */
    uint64_t token;     /* ACQUIRED: the hold's fencing token (0 if not
                           drawn yet, see rlock_mutex_fence) */
    int64_t count;      /* ACQUIRED, RELEASED: the hold's levels after it
                           (0: released to the end) */
    int64_t lease_ms;   /* ACQUIRED, RENEWED, EXTENDED: the lease Redis set */
    int64_t wait_us;    /* ACQUIRED, WAIT_TIMEOUT: from the call's start */
    int64_t hold_us;    /* RELEASED, LOST: since the hold was taken */
    int64_t attempts;   /* ACQUIRED, WAIT_TIMEOUT: requests the call sent
                           (1 for an uncontended acquisition) */
} rlock_event;

/*
 * Sets the client's event callback: cb(ev, arg) for each event (see above
 * for the threads it runs on); cb NULL removes it. Replaces the previous
 * callback; before returning, waits for calls of it under way on other
 * threads to return, so that arg may be freed once this returns. Called
 * from inside a callback (of any client) it does not wait: two callbacks
 * setting callbacks would otherwise wait for each other for ever, so
 * free the old arg only from outside every callback. Events of calls
 * under way when it is set may or may not reach it. Returns RLOCK_OK, or
 * RLOCK_EINVAL (c NULL). Nothing is sent to Redis. Thread-safe.
 */
RLOCK_API int rlock_client_set_event_cb(
    rlock_client *c, void (*cb)(const rlock_event *ev, void *arg), void *arg);

/*
 * Log levels, by severity:
 *   DEBUG  every event; a call refused because the lock was busy, a wait
 *          that timed out
 *   INFO   reconnections, redirections, undos
 *   WARN   losses, connection errors, failovers, renewals that got no
 *          answer; a call refused for a bad argument
 *   ERROR  a call that failed for the deployment's sake (unreachable, no
 *          reply, an error reply...)
 */
#define RLOCK_LOG_DEBUG 1
#define RLOCK_LOG_INFO 2
#define RLOCK_LOG_WARN 3
#define RLOCK_LOG_ERROR 4

/*
 * Sets the client's log callback: cb(level, msg, arg) for each message of
 * level >= min_level (one of RLOCK_LOG_*). msg is one line of text without
 * its line end (a lock's name in it with control bytes and bytes that are
 * not UTF-8 as \xNN), valid until cb returns. The messages: the detail of
 * every call that fails (what rlock_client_errmsg returns), the events
 * (see RLOCK_LOG_*), and what the background work finds that no call
 * returns (a renewal that failed, an undo that did not get through). cb
 * runs on the threads events run on (see above). cb NULL removes it
 * (min_level is then not looked at); a previous callback is waited for as
 * rlock_client_set_event_cb does. Returns RLOCK_OK, or RLOCK_EINVAL (c
 * NULL, or min_level not one of RLOCK_LOG_*, with cb set). Thread-safe.
 */
RLOCK_API int rlock_client_set_log_cb(rlock_client *c, int min_level,
                                      void (*cb)(int level, const char *msg,
                                                 void *arg),
                                      void *arg);

/* Histograms have RLOCK_STATS_BUCKETS buckets: bucket[i] counts the
 * observations v with bound[i - 1] < v <= bound[i] microseconds, the
 * bounds being RLOCK_STATS_BOUNDS_US (0.1 ms to 60 s), and the last bucket
 * those above 60 s. The bounds never change. */
#define RLOCK_STATS_BUCKETS 16
#define RLOCK_STATS_BOUNDS_US                                                  \
    {                                                                          \
        100, 1000, 5000, 10000, 25000, 50000, 100000, 250000, 500000, 1000000, \
            2500000, 5000000, 10000000, 30000000, 60000000                     \
    }

typedef struct rlock_histogram {
    uint64_t count;                       /* observations */
    uint64_t sum_us;                      /* their sum, in microseconds */
    uint64_t bucket[RLOCK_STATS_BUCKETS]; /* not cumulative, see above */
} rlock_histogram;

/* Size of rlock_stats.failures_by_code: indexed by -code (RLOCK_EBUSY's
 * count is failures_by_code[-RLOCK_EBUSY]). */
#define RLOCK_STATS_CODES 32

/*
 * A client's counters since it was opened (a forked child's client starts
 * again from 0). The caller allocates it and says how large it is:
 *
 *     rlock_stats st = RLOCK_STATS_INIT;   (or st.size = sizeof st)
 *     rlock_client_stats(c, &st);
 *
 * Later versions may add fields at the end (never elsewhere); the library
 * fills as much as both it and the caller know of, and sets size to that
 * (docs/releasing.md): a newer field is valid only if size >
 * offsetof(rlock_stats, field).
 */
typedef struct rlock_stats {
    size_t size; /* in: sizeof the caller's struct; out: bytes filled */
    uint64_t acquisitions; /* fresh holds taken: lock, trylock, timedlock,
                              rlock_with and their _as forms */
    uint64_t reentries;    /* re-entries of a hold the owner had */
    uint64_t contended;    /* acquisitions that found the lock busy first
                              and waited */
    uint64_t releases;     /* holds released to the end */
    uint64_t failures;     /* acquisition calls that returned an error */
    uint64_t failures_by_code[RLOCK_STATS_CODES]; /* of them, by code:
                              RLOCK_EBUSY and RLOCK_ETIMEDOUT are a busy
                              lock, the others a failure to reach it */
    uint64_t wait_timeouts;      /* waits that ended without the lock */
    uint64_t losses;             /* holds lost (RLOCK_EV_LOST) */
    uint64_t losses_by_cause[4]; /* indexed by RLOCK_LOST_* */
    uint64_t renewals;           /* leases renewed by the watchdog */
    uint64_t renewal_failures;   /* renewals that got no answer in time (a
                                    hold found gone is a loss instead) */
    uint64_t extensions;         /* rlock_mutex_extend calls that succeeded */
    uint64_t undos;              /* undos sent (each once, however often it
                                    had to be sent again) */
    uint64_t conn_errors;        /* connections that failed or did not answer */
    uint64_t reconnects;         /* connections made again after a failure */
    uint64_t failovers;          /* masters Sentinel named anew */
    uint64_t redirects;          /* cluster redirections followed */
    int64_t held;                /* holds the client has now */
    rlock_histogram wait;        /* each acquisition's wait (its call's time) */
    rlock_histogram hold;        /* each hold's time, at its last release */
} rlock_stats;

/* An initializer of an rlock_stats ready to be filled (C99, C++20;
 * elsewhere set size by hand). */
#define RLOCK_STATS_INIT                                                       \
    {                                                                          \
        .size = sizeof(rlock_stats)                                            \
    }

/*
 * Fills *st (see rlock_stats) with c's counters. They are read one at a
 * time, without stopping the client: taken while calls run, two counters
 * may be a few events apart. Returns RLOCK_OK, or RLOCK_EINVAL (c or st
 * NULL, or st->size smaller than the first version's struct or over
 * 65536, a size the caller did not set). Nothing is sent to Redis.
 * Thread-safe.
 */
RLOCK_API int rlock_client_stats(rlock_client *c, rlock_stats *st);

/*
 * Writes c's counters as Prometheus text (the exposition format 0.0.4:
 * HELP and TYPE lines, counters ending in _total, histograms of seconds
 * with _bucket{le="..."}, _sum and _count), each sample labelled with the
 * deployment (server="<URL without password>") and the key prefix
 * (prefix="..."), escaped as the format says. As snprintf: writes at most
 * len bytes into buf, the last a NUL (nothing with len 0; buf may then be
 * NULL), and returns the length of the whole text, without its NUL:
 * a return >= len means it was cut, and len = return + 1 is enough for a
 * second call (the counters may have grown meanwhile: allow some more).
 * Returns RLOCK_EINVAL (a negative number) if c is NULL, or buf NULL with
 * len > 0. Nothing is sent to Redis. Thread-safe.
 */
RLOCK_API long rlock_client_metrics_text(rlock_client *c, char *buf,
                                         size_t len);

/* ------------------------------------------------------------------------ */
/* Walking the keys                                                         */
/* ------------------------------------------------------------------------ */

/*
 * A walk over the keys of the servers that keep a client's locks, with
 * SCAN, a step at a time: what an operator's tool needs to find the locks
 * there are (rlock list, rlock top) without KEYS, which blocks a server
 * for as long as its key space takes, and without a connection of its
 * own (the walk uses the client's: its TLS, credentials and deployment).
 * Which keys are locks is the caller's to decide (docs/protocol.md and
 * docs/interop.md name every key of each layout); rlock_mutex_status then
 * reads each and refuses what is not a lock (RLOCK_ENOTLOCK).
 *
 * The servers walked are: the server of a redis://, rediss:// or unix://
 * URL; the master the sentinels name (Sentinel); every master that serves
 * slots as the slot map says when the walk starts (Cluster: the map is
 * read again then; replicas hold copies and are not walked); every node
 * (Redlock: each keeps its own copy of a lock, so a name comes from each
 * node that has it). The servers take turns, one step each.
 *
 * SCAN's promise holds on each server: a key that is there for the whole
 * walk comes at least once; a key may come more than once (the caller
 * drops repeats), and a key added or removed during the walk may come or
 * not. A failover or slot migration during the walk can make a server
 * miss keys, or a step fail; start a new walk to see the new deployment.
 */
typedef struct rlock_scan rlock_scan;

/*
 * Starts a walk over the keys of c's servers (above). Nothing is sent but
 * on a Cluster, where the slot map is read (CLUSTER SLOTS, one command).
 * match: SCAN's MATCH pattern, a glob as Redis reads it (*, ?, [...],
 * and a backslash that makes the next character plain), or NULL or "" for
 * every key.
 * type: SCAN's TYPE ("string", "hash", "list", "set", "zset", "stream"),
 * or NULL for keys of every type. Both are copied, each at most 4096
 * bytes.
 *
 * Returns the walk, or NULL with *err (err may be NULL) set to
 * RLOCK_EINVAL (c NULL, match or type too long, type empty),
 * RLOCK_ENOMEM, or, on a Cluster, a connection error (no node answered
 * CLUSTER SLOTS) within command_timeout_ms. The caller owns the walk and
 * frees it with rlock_scan_free before closing c. A walk is used by one
 * thread at a time; several walks of one client may run at once on
 * different threads. Thread-safe.
 */
RLOCK_API rlock_scan *rlock_scan_new(rlock_client *c, const char *match,
                                     const char *type, int *err);

/*
 * One step of walk s: one SCAN (cursor, MATCH, COUNT count, TYPE) on the
 * next server whose walk has not ended, and fn(arg, key, len) for every
 * key of its answer, in its order (key is len bytes, NUL-terminated, any
 * byte inside; valid only during the call of fn). The first step on a
 * server also asks DBSIZE, in the same round trip (rlock_scan_info's
 * RLOCK_SCAN_DBSIZE); a server that refuses DBSIZE is walked all the same.
 * COUNT is SCAN's: about count keys are looked at on the server, of which
 * the ones that match are answered, and more may come when the server
 * has them together (rlock's reply bounds apply: a reply over
 * rlock_client_opts.max_reply_bytes is RLOCK_EPROTO, and a smaller count
 * answers).
 *
 * Returns 1 if the walk goes on, 0 once every server was walked to its
 * end (then nothing is sent), or an error: RLOCK_EINVAL (s or fn NULL,
 * count < 1 or > 100000), RLOCK_EPERM (the server refuses SCAN to this
 * ACL user; the message names the server and gives Redis's words),
 * RLOCK_EREDIS (an error reply, such as a TYPE the server does not
 * know), RLOCK_EPROTO, RLOCK_ENOMEM, or a connection error as
 * rlock_mutex_lock's. A step that failed moved nothing: the next call
 * asks the same server from the same place again. Returns within
 * command_timeout_ms of its start (Redlock: node_timeout_ms).
 * Not thread-safe for one walk (see rlock_scan_new).
 */
RLOCK_API int rlock_scan_next(rlock_scan *s, int count,
                              void (*fn)(void *arg, const char *key,
                                         size_t len),
                              void *arg);

/* What rlock_scan_info reports of a walk: */
/* the servers the walk covers; */
#define RLOCK_SCAN_SERVERS 1
/* of them, those walked to their end; */
#define RLOCK_SCAN_DONE 2
/* SCANs answered so far; */
#define RLOCK_SCAN_STEPS 3
/* keys answered so far, repeats included; */
#define RLOCK_SCAN_KEYS 4
/* the keys on the servers, as each said (DBSIZE) when the walk first
 * reached it, summed over those that answered; -1 before any did; */
#define RLOCK_SCAN_DBSIZE 5
/* servers that answered a step so far; */
#define RLOCK_SCAN_REACHED 6
/* commands the walk sent: SCANs, DBSIZEs, and a Cluster's CLUSTER SLOTS
 * (the handshakes of new connections not counted). */
#define RLOCK_SCAN_COMMANDS 7

/*
 * A figure of walk s (RLOCK_SCAN_*, above), for a tool to say how far it
 * went and what it cost: -1 for s NULL or an unknown what. Sends nothing.
 * Not thread-safe for one walk.
 */
RLOCK_API int64_t rlock_scan_info(const rlock_scan *s, int what);

/* Frees walk s (the servers keep nothing of it). NULL is a no-op. */
RLOCK_API void rlock_scan_free(rlock_scan *s);

#ifdef __cplusplus
}
#endif

#endif
