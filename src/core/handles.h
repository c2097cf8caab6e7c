/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The two handles of the API, as the library sees them.
 *
 * The client handle: settings, identity, and the state shared by every
 * thread that uses it. Each module that keeps state per client keeps it
 * behind a pointer of its own type (the backend's nodes, the background
 * work), so that this struct names who owns what without holding their
 * insides.
 *
 * Locking: mu guards the hold table, the waiters, the background state
 * and the fields marked "mu" below. Nobody holds mu while talking to
 * Redis, nor waits with it held but on a condition variable (which
 * releases it): fork() takes it (fork_guard), and must never wait on the
 * network. state_cv (with mu) is signalled when a renewal, an on_lost
 * callback or the background thread's start-up finishes, for the calls
 * that wait for one of those.
 */
#ifndef RLOCK_CORE_HANDLES_H
#define RLOCK_CORE_HANDLES_H

#include <pthread.h>
#include <stdint.h>

#include <rlock/rlock.h>

#include "core/fork.h"
#include "core/hold.h"
#include "core/owner.h"
#include "core/waiter.h"
#include "util/random.h"

struct rlock__backend; /* backend/backend.h */
struct rlock__script;  /* core/request.h */
struct rlock__bg;      /* bg/bg.h */
struct rlock__obs;     /* core/observe.h */
struct rlock__tls_ctx; /* net/tls.h */

struct rlock_client {
    uint64_t serial;        /* tags the thread's error records; unique */
    rlock_client_opts opts; /* copies; key_prefix and credentials NULL */
    char *prefix;
    char *username;
    char *password;
    struct rlock__tls_ctx *tls; /* NULL: plain text */
    char *tls_sni;
    char where[300]; /* the URL without password, for messages */
    /* Opened for an event loop (api/async.c): the backend's open does not
     * reach the servers (the first request connects, on the loop). */
    int lazy;

    char id[RLOCK__ID_LEN + 1]; /* random; new in a forked child */
    char who[RLOCK__WHO_MAX];   /* "@<host>/<pid>" */
    /* What rlock's own owner strings end with: "#nodes=N" where a lock is
     * held over copies on the N nodes of a list (Redlock), so that a
     * client of another list is seen (docs/protocol.md); "" elsewhere. */
    char owner_tag[RLOCK__TAG_MAX];
    unsigned fork_gen;
    /* fork() holds mu and the backend's locks (api/client.c); hold NULL
     * until the client is open. */
    rlock__fork_guard fork_guard;

    /* Every script a request may name, for the servers to load first. */
    const struct rlock__script *const *scripts;
    int nscripts;

    /* The deployment: how requests reach Redis (backend/). */
    const struct rlock__backend *backend;
    void *bk;   /* the backend's own state */
    int nnodes; /* nodes a request goes to, and how many must agree */
    int quorum;

    pthread_mutex_t mu;
    pthread_cond_t state_cv;
    rlock__holds holds;     /* mu */
    rlock__waiters waiters; /* mu */
    /* Waiters a message was compared with (mu): the tests' measure of
     * what a message costs. */
    uint64_t waiters_looked;
    unsigned cancel_gen;    /* mu; bumped by rlock_client_cancel_waits */
    /* The shortest lease this client has used or may grant; bounds the
     * background thread's round trips (mu). */
    int64_t shortest_lease_ms;
    /* Until then the watchdog renews with scripts only: a server could
     * not take the native compare-and-set renewal (mu). */
    int64_t cas_paused_until;
    /* The compare-and-delete release to try first (an index into the
     * layout's release_cad), and until when to send none: the server
     * knew none of them (atomic). */
    int cad_form;
    int64_t cad_paused_until;
    uint64_t next_nonce; /* acquisitions' nonces (atomic) */
    /* Goes up each time the backend points the client at another server
     * for the same locks (a Sentinel failover): the subscriber connection
     * made before is to a server that no longer publishes the releases,
     * and waits subscribe again (atomic). */
    unsigned moves;

    struct rlock__bg *bg; /* background work (bg/) */
    /* Events, log lines and counters for the application
     * (core/observe.h). */
    struct rlock__obs *obs;
};

/*
 * The mutex handle: one lock name reached through one client. Its layout
 * spells the names of the lock's keys and channel from the name when a
 * request is built (rlock__layout.key): a handle keeps none of them. The
 * holds taken through it point back at it and are forgotten when it is
 * freed.
 */
struct rlock__layout; /* layout/layout.h */

struct rlock_mutex {
    rlock_client *c;
    const struct rlock__layout *layout;
    /* NUL-ended (events hand it out as a string); in the same block as
     * the handle (api/mutex.c), or a copy of its own (bg/cleanup.c). */
    char *name;
    size_t name_len;
    rlock_mutex_opts opts;
    int64_t lease_ms; /* of each hold: opts.lease_ms or the watchdog's */
    int replicas;     /* WAIT for this many replicas after writes (0) */
    int subscribed;   /* holds a reference on its channel's subscription */
    unsigned sub_gen; /* the client's fork generation when it did */
    struct rlock__hold *holds; /* taken through this handle (mu held) */
    /* Nobody contended the name at the last look: acquisitions and last
     * releases go in the layout's fast form (RLOCK__LAY_FAST). A hint,
     * read and written with relaxed atomics: a wrong guess costs a round
     * trip or a little Redis time, never correctness. */
    int calm;
    /* Re-entry is counted by the client, Redis seeing one hold: the
     * layout does not count (RLOCK__LAY_COUNTS), or the backend keeps
     * copies (no RLOCK__BK_ONE_COPY). Set at creation. */
    int counts_here;
    /* A caller asked for a fencing token through this handle: its
     * acquisitions draw one at once (the fenced fast form) rather than
     * when asked (the lean form, and a round trip more). Set when asked
     * (cleared only by an async handle set to draw tokens on demand), read
     * with relaxed atomics: a hint too. */
    int fenced;
    /* on_lost callbacks of this mutex under way (mu): rlock_mutex_free
     * waits for them. */
    int callbacks;
    /* The rlock_async_mutex around it (api/async.c), or NULL. */
    void *outer;
};

#endif
