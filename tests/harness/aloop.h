/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A loop of the tests' own for the event-loop API (rlock/async.h), through
 * its generic hooks: poll(2) over the descriptors the library asks it to
 * watch, and the one timer it asks for. It checks the library's word: a
 * descriptor it is told to forget is still open, none it watches is
 * closed or comes to name another file, and the cleanup comes with
 * nothing left watched. It times its turns.
 *
 * And the mutex's behaviour over any deployment through that loop
 * (rt_async_deployment), which the Sentinel, Cluster, Redlock and TLS
 * tests run on theirs.
 */
#ifndef RLOCK_TEST_ALOOP_H
#define RLOCK_TEST_ALOOP_H

#include <poll.h>
#include <stdint.h>

#include <rlock/async.h>

#define RT_ALOOP_FDS 1024

typedef struct rt_aloop {
    struct pollfd fds[RT_ALOOP_FDS];
    /* The file each watched number named when it was first watched
     * (device, inode): a number whose file changed under a watch, with
     * no forget in between, is what an epoll-based loop cannot follow. */
    uint64_t file[RT_ALOOP_FDS][2];
    int n;
    int64_t due_ms; /* the timer's time, rt_now_ms (-1: none) */
    int64_t longest_ms;
    int turns, timers, cleanups;
    rlock_async *a; /* NULL once a callback closed it */
} rt_aloop;

/* The client a, attached to p on this thread. */
void rt_al_attach(rt_aloop *p, rlock_async *a);
/* The same, returning rlock_async_attach's code. */
int rt_al_try_attach(rt_aloop *p, rlock_async *a);
/* One turn: a poll of at most 50 ms (less if the timer is sooner), then
 * the readiness and the timer reported. */
void rt_al_turn(rt_aloop *p);
/* Turns p until *flag is set (or ms pass). */
void rt_al_until(rt_aloop *p, const int *flag, int64_t ms);
/* Turns p for ms. */
void rt_al_for(rt_aloop *p, int64_t ms);

/*
 * The mutex's behaviour on the deployment url names (opts may be NULL),
 * on one rt_aloop: a try, a wait behind it renewed past several leases, a
 * blocking client's trylock refused meanwhile, an extension, the wait's
 * hand-over on release (within wake_ms: 1 s where releases wake waiters,
 * more where they poll), fencing tokens that grow, on_lost when the lock
 * is gone from under the hold (take_away removes it: NULL to skip), and a
 * close that cancels a pending wait. what names the deployment in the
 * output.
 */
void rt_async_deployment(const char *what, const char *url,
                         const rlock_client_opts *opts, int64_t wake_ms,
                         void (*take_away)(const char *name, void *arg),
                         void *arg);

/* Locks m (wait_ms as rlock_async_lock's), or unlocks it, and turns p
 * until the callback, which must not run inside the call: its status. */
int rt_al_lock(rt_aloop *p, rlock_async_mutex *m, int64_t wait_ms);
int rt_al_unlock(rt_aloop *p, rlock_async_mutex *m);

/*
 * A loop never waits for a server the library asks where things are (a
 * sentinel, a cluster node asked for the slot map): url names one that
 * accepts and answers nothing first (at port silent), then servers that
 * answer. The client opens at once; its first lock of name, tried once,
 * asks the silent one for the connect timeout (connect_ms), then the
 * next, and succeeds with no turn of the loop taking long; the next
 * lock asks nobody. Returns the client, attached to p, with name locked
 * through *m.
 */
rlock_async *rt_async_past_a_silent_node(rt_aloop *p, const char *what,
                                         const char *url, const char *name,
                                         int64_t connect_ms,
                                         rlock_async_mutex **m);
/* And with no such server that answers (url): a lock of name, tried
 * once, ends on time (after the connect timeout, well before the command
 * timeout), no turn of the loop taking long. Returns its status, its
 * message into msg (len bytes); the client is closed. */
int rt_async_nobody_answers(rt_aloop *p, const char *what, const char *url,
                            const char *name, int64_t connect_ms, char *msg,
                            size_t len);

#endif
