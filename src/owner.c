/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Owner identity.
 *
 * An owner is (client, thread). The client part is 128 bits from the OS
 * random source, so another process cannot guess it and release our lock;
 * the thread part is a small number handed out once per thread. A forked
 * child inherits its parent's memory, ids included, so fork() bumps a
 * generation counter that every client checks and, in the child, replaces
 * its id (client.c).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>

#include "internal.h"

static atomic_uint_fast64_t next_thread = 1;
static _Thread_local uint64_t tl_thread;

static atomic_uint fork_gen;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

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

uint64_t rlock__thread_number(void)
{
    if (tl_thread == 0)
        tl_thread = atomic_fetch_add(&next_thread, 1);
    return tl_thread;
}

int rlock__new_id(char out[RLOCK__ID_LEN + 1])
{
    static const char hex[] = "0123456789abcdef";
    unsigned char raw[RLOCK__ID_LEN / 2];
    size_t i;

    if (rlock__random_bytes(raw, sizeof raw) != 0)
        return -1;
    for (i = 0; i < sizeof raw; i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 15];
    }
    out[RLOCK__ID_LEN] = '\0';
    return 0;
}

/*
 * The identity an operator needs to find a holder: its host and process.
 * It travels inside the owner string (after the random id, before the
 * thread), so it is kept with every hold at no cost: no extra field, no
 * extra command. Nothing compares it apart from the whole owner string,
 * and the wake-up channel is named by the random id alone (scripts.c).
 */
void rlock__new_who(char out[RLOCK__WHO_MAX])
{
    char host[256] = "";
    size_t i;

    if (gethostname(host, sizeof host - 1) != 0 || !host[0])
        snprintf(host, sizeof host, "unknown");
    host[RLOCK__HOST_MAX] = '\0';
    for (i = 0; host[i]; i++) {
        char ch = host[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
              (ch >= '0' && ch <= '9') || ch == '.' || ch == '-' || ch == '_'))
            host[i] = '_';
    }
    snprintf(out, RLOCK__WHO_MAX, "@%.48s/%ld", host, (long)getpid());
}

size_t rlock__owner(const rlock_client *c, uint64_t thread,
                    char buf[RLOCK__OWNER_MAX])
{
    int n = snprintf(buf, RLOCK__OWNER_MAX, "%s%s:%llu", c->id, c->who,
                     (unsigned long long)thread);
    return (size_t)n;
}

size_t rlock__owner_of(const rlock_mutex *m, uint64_t thread,
                       char buf[RLOCK__OWNER_MAX])
{
    const char *id = m->c->id;
    int n;

    if (m->opts.layout != RLOCK_LAYOUT_REDISSON)
        return rlock__owner(m->c, thread, buf);
    /* Redisson's field is "<UUID of the client>:<Java thread id>"; the
     * client's 128 random bits, grouped as a UUID, keep every property of
     * the id (unguessable, unique per client and per fork). */
    n = snprintf(buf, RLOCK__OWNER_MAX, "%.8s-%.4s-%.4s-%.4s-%.12s:%llu", id,
                 id + 8, id + 12, id + 16, id + 20, (unsigned long long)thread);
    return (size_t)n;
}
