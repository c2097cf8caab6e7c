/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * rlock's event-loop API: the same locks as rlock.h, for a program whose
 * thread runs an event loop (libevent, libuv, libev, or a loop of its
 * own) and must never block.
 *
 * Model
 * -----
 * An rlock_async is a client (as rlock_client) driven by one event loop.
 * Nothing it does blocks the loop's thread, and it starts no thread of
 * its own: connections, requests, the watchdog's renewals, the pub/sub
 * subscriber that wakes waiters and the undos of abandoned attempts all
 * run from the loop's callbacks. It reaches the loop through two hooks
 * (rlock_async_hooks): the library says which descriptors to watch for
 * which events, and when its one timer is due; the loop reports readiness
 * (rlock_async_ready) and the timer's expiry (rlock_async_timeout). The
 * adapters (<rlock/adapters/libevent.h>, libuv.h, libev.h) fill the hooks
 * for their loop; any other loop fills them itself, as with curl's
 * multi_socket API.
 *
 * An rlock_async_mutex is a named lock reached through the client, as
 * rlock_mutex is, and it is also the owner of its holds: the handle, not
 * a thread, holds the lock, and a lock taken again through the same
 * handle while it holds it is a re-entry (counted; released when unlock
 * has been called as many times). Two handles of one name exclude each
 * other as two processes do.
 *
 * Calls
 * -----
 * rlock_async_lock, rlock_async_unlock and rlock_async_extend start a
 * call and return at once: 0 (RLOCK_OK) if it started, then its callback
 * runs exactly once, later, on the loop's thread, from inside
 * rlock_async_ready or rlock_async_timeout (never from inside the call
 * that started it); or a negative code if it did not start (bad
 * arguments, a call already pending on the handle, no loop attached),
 * and then the callback never runs. One call at a time per handle: a
 * second one while the first has not called back is RLOCK_EINVAL (it
 * changes nothing in Redis); many handles may each have one pending.
 * Every call ends by its deadline, as the blocking API's do (rlock.h,
 * "Deadlines"): a server that is silent, trickles, or answers too much
 * makes the call fail by then, never the loop wait.
 *
 * A callback may do anything with the library: start another call on its
 * handle or on another, free its handle (rlock_async_mutex_free), or close
 * the client (rlock_async_close). A callback whose call is ended by
 * rlock_async_cancel, rlock_async_mutex_free or rlock_async_close runs
 * inside that function, before it returns, with RLOCK_ECANCELED (or with
 * the call's own result if it had one already).
 *
 * The mutex options' on_lost works here too: it is called on the loop's
 * thread, from the same two functions, when a hold is found lost (its
 * lease ran out unrenewed, the key was deleted or taken), on time by the
 * holder's lease clock. A loop that was stalled past a lease (by the
 * application's own code) finds the hold lost when it turns again: it is
 * reported lost, never renewed late as if it had been held. Its first
 * argument is the handle's rlock_mutex: rlock_async_mutex_of gives the
 * rlock_async_mutex.
 *
 * Threads
 * -------
 * An rlock_async is used from one thread, its loop's: the one that called
 * rlock_async_attach. Any call on it, or on its mutexes, from another
 * thread returns RLOCK_EINVAL (or does nothing, for the functions that
 * return nothing) and changes nothing. rlock_async_open and
 * rlock_async_mutex_new may be called before the client is attached, from
 * any one thread.
 */
#ifndef RLOCK_ASYNC_H
#define RLOCK_ASYNC_H

#include <stdint.h>

#include <rlock/rlock.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rlock_async rlock_async;
typedef struct rlock_async_mutex rlock_async_mutex;

/* Events of a descriptor, in the hooks and in rlock_async_ready. */
#define RLOCK_ASYNC_READ 1
#define RLOCK_ASYNC_WRITE 2

/*
 * How the library reaches a loop.
 *
 * watch: watch fd for events (RLOCK_ASYNC_READ, RLOCK_ASYNC_WRITE or
 * both), instead of what was asked for it before; 0: stop watching it.
 * The library always says 0 for a descriptor before it closes it, so a
 * loop never watches a closed descriptor (epoll forgets one, libuv
 * forbids it) and a number that comes back for a new descriptor is new
 * to the loop. (The same holds where a descriptor's number is given to
 * another file: a connection to a host name watches its name lookup
 * first, and the socket takes the lookup's number once the name is
 * resolved; the library says 0 for the number before, and watches it
 * again after.) Readiness is level-triggered: the loop reports fd ready
 * (rlock_async_ready) on every turn while it is, as libevent, libuv,
 * libev and poll(2) do by default; a loop that reports an edge only
 * once must not be used. A descriptor may stay watched between calls (a
 * pooled connection waiting for its next request): the library unwatches
 * it when a readiness comes with nothing waiting on it.
 *
 * timer: call rlock_async_timeout once after_ms milliseconds have passed
 * (0: as soon as the loop can, on its next turn), instead of any time
 * asked for before; -1: no timer.
 *
 * cleanup (may be NULL): the client is closing and will call no hook
 * again (every descriptor and the timer were forgotten before): the
 * adapter may free what arg points to. It may be called from inside
 * rlock_async_ready or rlock_async_timeout (a callback closed the
 * client): an adapter whose own callback is on the stack must not free
 * what that callback still reads.
 *
 * No hook may call back into the library. arg is passed to each.
 */
typedef struct rlock_async_hooks {
    void (*watch)(void *arg, int fd, int events);
    void (*timer)(void *arg, int64_t after_ms);
    void (*cleanup)(void *arg);
    void *arg;
} rlock_async_hooks;

/*
 * An async client of the deployment at url (every URL form of
 * rlock_client_open: redis://, rediss:// and TLS options, unix://,
 * redis-sentinel://, redis-cluster://, a Redlock list) with opts (NULL:
 * defaults; the same options as rlock_client_open). Returns at once:
 * nothing is connected until the first call on the loop, so a wrong
 * address or password shows as the first call's error. (A Sentinel URL's
 * sentinels and a Cluster URL's slot map are asked for on the loop too,
 * by the first call, and so are host names: looked up with c-ares on
 * the loop, never with getaddrinfo(3), which would block it. A Redlock
 * list's entries are compared by their text and addresses here, and by
 * the servers' run_ids once connected.) NULL with *err (may be NULL) on
 * failure: RLOCK_EINVAL (malformed URL or option) or RLOCK_ENOMEM. Free it with
 * rlock_async_close.
 */
/* (One line from the name on: the tools that list the API read it so.) */
/* clang-format off */
RLOCK_API rlock_async *rlock_async_open(const char *url,
                                        const rlock_client_opts *opts,
                                        int *err);
/* clang-format on */

/*
 * Drives a by hooks (copied) from now on, on the calling thread, which
 * becomes a's thread. Tells the loop at once what to watch. RLOCK_OK;
 * RLOCK_EINVAL: a or hooks or one of its functions is NULL, or a is
 * attached already; RLOCK_ENOMEM. The adapters call it.
 */
RLOCK_API int rlock_async_attach(rlock_async *a,
                                 const rlock_async_hooks *hooks);

/* The loop found fd ready for events (RLOCK_ASYNC_READ,
 * RLOCK_ASYNC_WRITE, both; an error or hang-up counts as both). Runs
 * what was waiting for it, and the callbacks whose calls ended. */
RLOCK_API void rlock_async_ready(rlock_async *a, int fd, int events);

/* The timer asked for came. Runs what was due, and the callbacks whose
 * calls ended. */
RLOCK_API void rlock_async_timeout(rlock_async *a);

/*
 * Closes a: every pending call of its mutexes is called back with
 * RLOCK_ECANCELED, before this returns; holds are not released (their
 * keys expire when their leases end, as with rlock_client_close), and
 * nothing waits for the network. The loop is told to forget every
 * descriptor and the timer. Mutexes not freed yet are freed. May be
 * called from a callback (then a is freed once the callback returns).
 * NULL is a no-op.
 */
RLOCK_API void rlock_async_close(rlock_async *a);

/*
 * A handle on the lock called name, reached through a, with opts (NULL:
 * defaults; as rlock_mutex_new). The handle is the owner of its holds.
 * NULL with *err (may be NULL): RLOCK_EINVAL (NULL a or name, a name too
 * long, a bad option, the wrong thread), RLOCK_ENOMEM.
 */
RLOCK_API rlock_async_mutex *rlock_async_mutex_new(rlock_async *a,
                                                   const char *name,
                                                   const rlock_mutex_opts *opts,
                                                   int *err);

/*
 * Frees m: its pending call is called back first (RLOCK_ECANCELED), its
 * holds are forgotten without a release (their keys expire), and no
 * on_lost of it comes afterwards. May be called from any callback, its
 * own included. NULL is a no-op.
 */
RLOCK_API void rlock_async_mutex_free(rlock_async_mutex *m);

/*
 * Acquires m's lock. wait_ms 0 tries once (RLOCK_EBUSY if another owner
 * holds it); > 0 waits up to that long (RLOCK_ETIMEDOUT), < 0 waits with
 * no limit; waiting is FIFO where the layout queues, woken by pub/sub.
 * cb (not NULL) gets status RLOCK_OK and the hold's fencing token (0 for
 * a lean hold of a handle whose tokens come on demand:
 * rlock_async_mutex_tokens), or an error code and token 0: RLOCK_EBUSY,
 * RLOCK_ETIMEDOUT, RLOCK_ECANCELED, and the connection and server errors of
 * rlock_mutex_lock. Held, with the watchdog (lease_ms 0), the lock is renewed
 * on the loop until unlocked. Returns RLOCK_OK if the call started, else
 * RLOCK_EINVAL.
 */
RLOCK_API int rlock_async_lock(rlock_async_mutex *m, int64_t wait_ms,
                               void (*cb)(rlock_async_mutex *m, int status,
                                          uint64_t token, void *arg),
                               void *arg);

/*
 * Releases one level of m's hold. cb (not NULL) gets RLOCK_OK,
 * RLOCK_ENOTOWNER (m holds nothing), RLOCK_ELOST, or the errors of
 * rlock_mutex_unlock. Returns RLOCK_OK if the call started.
 */
RLOCK_API int rlock_async_unlock(rlock_async_mutex *m,
                                 void (*cb)(rlock_async_mutex *m, int status,
                                            void *arg),
                                 void *arg);

/*
 * Sets the lease of m's hold to lease_ms (1 to RLOCK_MS_MAX) from now,
 * as rlock_mutex_extend. cb (not NULL) gets its status. Returns RLOCK_OK
 * if the call started.
 */
RLOCK_API int rlock_async_extend(rlock_async_mutex *m, int64_t lease_ms,
                                 void (*cb)(rlock_async_mutex *m, int status,
                                            void *arg),
                                 void *arg);

/*
 * The fencing token of m's hold: drawn now if the hold has none yet (a
 * lock of a handle whose tokens come on demand, see
 * rlock_async_mutex_tokens), else the one the hold has, as
 * rlock_mutex_fence. cb (not NULL) gets RLOCK_OK and the token, or an
 * error and token 0: RLOCK_ENOTOWNER (m holds nothing), RLOCK_ELOST (the
 * hold is gone, or its lease ended before the token came), RLOCK_EREPLICAS,
 * RLOCK_ECANCELED, the connection and server errors. Once asked, m's later
 * acquisitions draw their token at once. It is a pending call of m like a
 * lock (one at a time; rlock_async_cancel ends it). Returns RLOCK_OK if
 * the call started, else RLOCK_EINVAL or RLOCK_ENOMEM.
 */
RLOCK_API int rlock_async_fence(rlock_async_mutex *m,
                                void (*cb)(rlock_async_mutex *m, int status,
                                           uint64_t token, void *arg),
                                void *arg);

/* rlock_async_mutex_tokens: when a lock's callback has its token. */
#define RLOCK_ASYNC_TOKENS_AT_ONCE 0
#define RLOCK_ASYNC_TOKENS_ON_DEMAND 1

/*
 * When m's acquisitions draw their fencing token.
 * RLOCK_ASYNC_TOKENS_AT_ONCE (a new handle's): every fresh acquisition
 * draws it, and the lock's callback gets it; Redis runs a script for each.
 * RLOCK_ASYNC_TOKENS_ON_DEMAND: as the blocking API does by default, an
 * acquisition while nobody contends the name (native layout, one copy:
 * not Redlock) is a bare SET NX PX and the callback gets token 0;
 * rlock_async_fence draws the token when the holder needs it, and from then on
 * m's acquisitions draw theirs at once again (call this again to go back). An
 * acquisition that waited in the queue, or of a layout that always draws, has
 * its token either way. Redis then spends on an uncontended lock and unlock
 * what the bare commands cost, about a third of the scripted form's
 * (docs/performance.md). Applies from m's next acquisition attempt (a
 * pending wait's next one included). RLOCK_OK, or RLOCK_EINVAL (NULL or
 * freed m, another thread, when not one of the two).
 */
RLOCK_API int rlock_async_mutex_tokens(rlock_async_mutex *m, int when);

/*
 * How long m's hold lasts as this client counts it, asking nothing of
 * Redis, as rlock_mutex_lease_left: RLOCK_OK with *left_ms > 0 while the
 * hold lasts; RLOCK_ELOST if it was lost or its counted lease has ended
 * (on_lost is called, on the loop); RLOCK_ENOTOWNER if m holds nothing;
 * RLOCK_EINVAL (NULL, a freed handle, another thread). *left_ms is 0 on
 * every error. A holder checks it before it acts on what the lock
 * guards, as after a stall of its loop. Returns at once.
 */
RLOCK_API int rlock_async_lease_left(rlock_async_mutex *m, int64_t *left_ms);

/*
 * Cancels m's pending call: its callback runs before this returns, with
 * RLOCK_ECANCELED, or with its result if it had one already (a lock that
 * was granted says RLOCK_OK: the hold is m's; its token is 0 if it was
 * still to be drawn). A wait leaves no trace: a
 * request whose answer never came is undone later, in order. RLOCK_OK,
 * or RLOCK_ENOTOWNER if nothing was pending (RLOCK_EINVAL: NULL, the
 * wrong thread).
 */
RLOCK_API int rlock_async_cancel(rlock_async_mutex *m);

/* The detail of m's last failure: a call it refused, or an error status
 * its callback was given; "" if none failed. m NULL: the calling thread's
 * last failure of a function of no mutex (rlock_async_open,
 * rlock_async_attach, rlock_async_mutex_new, a call on a NULL mutex or
 * from another thread). */
RLOCK_API const char *rlock_async_errmsg(rlock_async_mutex *m);

/* The rlock_async_mutex whose rlock_mutex on_lost was given; NULL if m
 * is not one. */
RLOCK_API rlock_async_mutex *rlock_async_mutex_of(rlock_mutex *m);

/* The client's counters (rlock_client_stats). */
RLOCK_API int rlock_async_stats(rlock_async *a, rlock_stats *st);

#ifdef __cplusplus
}
#endif

#endif
