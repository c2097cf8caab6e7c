/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * fork() and the library's locks. The prepare handler takes guards_mu and
 * then every registered guard's locks, in the order the guards were added
 * (each client's own: the client's mu, then its backend's); the parent
 * and child handlers give them back. This is the pthread_atfork(3)
 * pattern POSIX describes: the child's only thread is the one that took
 * the locks, so it may release them. (A rwlock would not do: glibc
 * records a writer by thread id, which the child's thread does not share,
 * so the child cannot unlock it, and initialising a locked one again is
 * undefined; ThreadSanitizer reports it as still locked in the child.)
 *
 * Before, fork() waited until no background thread was at work, and a
 * background thread was at work for the whole of a round trip: with a
 * server that stalled, every fork() in the process waited up to the
 * command timeout for a renewal (1,986 ms measured), again at each retry.
 * The locks taken now are never held across a round trip, so fork() waits
 * only for work in memory; the request in flight is the parent's, and the
 * child, which forgets the parent's holds and opens its own connections,
 * never sees its answer.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "core/fork.h"

static atomic_uint fork_gen;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t guards_mu = PTHREAD_MUTEX_INITIALIZER;
static rlock__fork_guard *guards, *last; /* guarded by guards_mu */

static void before_fork(void)
{
    rlock__fork_guard *g;

    pthread_mutex_lock(&guards_mu);
    for (g = guards; g; g = g->next)
        g->hold(g->arg, 1);
    /* Everything stays locked until after_fork_parent / after_fork_child. */
}

static void give_back(void)
{
    rlock__fork_guard *g;

    for (g = last; g; g = g->prev)
        g->hold(g->arg, 0);
    pthread_mutex_unlock(&guards_mu);
}

static void after_fork_parent(void)
{
    give_back();
}

static void after_fork_child(void)
{
    /* Only the thread that called fork() exists here, and it holds every
     * lock it took: each client's state is as a moment when nobody was
     * changing it. The clients start afresh at their next call. */
    give_back();
    atomic_fetch_add(&fork_gen, 1);
}

static void install_atfork(void)
{
    pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

void rlock__fork_guard_add(rlock__fork_guard *g)
{
    pthread_once(&atfork_once, install_atfork);
    pthread_mutex_lock(&guards_mu);
    g->next = NULL;
    g->prev = last;
    if (last)
        last->next = g;
    else
        guards = g;
    last = g;
    pthread_mutex_unlock(&guards_mu);
}

void rlock__fork_guard_remove(rlock__fork_guard *g)
{
    pthread_mutex_lock(&guards_mu);
    if (g->prev)
        g->prev->next = g->next;
    else
        guards = g->next;
    if (g->next)
        g->next->prev = g->prev;
    else
        last = g->prev;
    g->prev = g->next = NULL;
    pthread_mutex_unlock(&guards_mu);
}

unsigned rlock__fork_generation(void)
{
    pthread_once(&atfork_once, install_atfork);
    return atomic_load(&fork_gen);
}
