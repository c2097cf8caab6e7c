/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * fork() and the background threads. A background thread is busy while it
 * works, never while it sleeps in poll(2). fork() waits until no background
 * thread of any client is busy, and new work waits while a fork() does
 * (busy threads come and go all the time: fork() must not wait behind them
 * forever).
 *
 * This is the pthread_atfork(3) pattern POSIX describes: the prepare
 * handler takes fork_mu and keeps it across fork(), and the parent and
 * child handlers release it. A rwlock would not do: glibc records a
 * writer by thread id, which the child's thread does not share, so the
 * child cannot unlock it, and initialising a locked one again is undefined
 * (ThreadSanitizer reports it as still locked in the child).
 */
#include <pthread.h>
#include <stdatomic.h>

#include "core/fork.h"

static atomic_uint fork_gen;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t fork_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t fork_cv = PTHREAD_COND_INITIALIZER;
static int busy;    /* background threads at work; guarded by fork_mu */
static int forking; /* fork() calls waiting or under way; same */

static void before_fork(void)
{
    pthread_mutex_lock(&fork_mu);
    forking++;
    while (busy > 0)
        pthread_cond_wait(&fork_cv, &fork_mu);
    /* fork_mu stays locked until after_fork_parent / after_fork_child. */
}

static void after_fork_parent(void)
{
    forking--;
    pthread_cond_broadcast(&fork_cv);
    pthread_mutex_unlock(&fork_mu);
}

static void after_fork_child(void)
{
    /* Only the thread that called fork() exists here: no background thread
     * is busy or waiting. The condition variable may still count waiters
     * that were threads of the parent, so it starts afresh. */
    busy = 0;
    forking = 0;
    pthread_cond_init(&fork_cv, NULL);
    pthread_mutex_unlock(&fork_mu);
    atomic_fetch_add(&fork_gen, 1);
}

static void install_atfork(void)
{
    pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

void rlock__busy_begin(void)
{
    pthread_once(&atfork_once, install_atfork);
    pthread_mutex_lock(&fork_mu);
    while (forking > 0)
        pthread_cond_wait(&fork_cv, &fork_mu);
    busy++;
    pthread_mutex_unlock(&fork_mu);
}

void rlock__busy_end(void)
{
    pthread_mutex_lock(&fork_mu);
    if (--busy == 0 && forking > 0)
        pthread_cond_broadcast(&fork_cv);
    pthread_mutex_unlock(&fork_mu);
}

unsigned rlock__fork_generation(void)
{
    pthread_once(&atfork_once, install_atfork);
    return atomic_load(&fork_gen);
}
