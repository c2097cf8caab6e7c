/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * fork(2) and the library's threads.
 *
 * A forked child inherits its parent's memory, owner ids included, but
 * only the thread that called fork(). Every client compares the process's
 * fork generation with its own at each call and, in a child, takes a new
 * identity (api/client.c).
 *
 * So that the child finds every client's state whole (no list half
 * linked, no pool half updated by a thread that does not exist in the
 * child), fork() holds the locks that guard it while it copies the
 * process: each client registers a guard, whose hold function takes its
 * locks before fork() and gives them back after it, in the parent and in
 * the child. Those locks are only ever held for work in memory, never
 * across a round trip to Redis (a request in flight holds none of them),
 * so fork() never waits on the network: at most for another thread to
 * finish a few instructions under a lock.
 */
#ifndef RLOCK_CORE_FORK_H
#define RLOCK_CORE_FORK_H

/* Increases in every child created by fork(). */
unsigned rlock__fork_generation(void);

/* What fork() holds for one object: hold(arg, 1) takes its locks (in the
 * order its other code nests them), hold(arg, 0) gives them back. Both run
 * inside pthread_atfork(3) handlers: they take and release mutexes and do
 * nothing else. */
typedef struct rlock__fork_guard {
    void (*hold)(void *arg, int take);
    void *arg;
    struct rlock__fork_guard *prev, *next; /* fork.c's list */
} rlock__fork_guard;

/* From now on fork() holds g's locks (g lives until removed). */
void rlock__fork_guard_add(rlock__fork_guard *g);
/* No longer; waits for a fork() under way. */
void rlock__fork_guard_remove(rlock__fork_guard *g);

#endif
