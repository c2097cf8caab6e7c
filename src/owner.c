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

#include "internal.h"

static atomic_uint_fast64_t next_thread = 1;
static _Thread_local uint64_t tl_thread;

static atomic_uint fork_gen;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static pthread_rwlock_t fork_lock;

static void init_fork_lock(void)
{
    pthread_rwlockattr_t a;

    /* Writer preference: background threads come and go from the read
     * side all the time, and fork() must not wait behind them forever. */
    pthread_rwlockattr_init(&a);
    pthread_rwlockattr_setkind_np(&a,
                                  PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&fork_lock, &a);
    pthread_rwlockattr_destroy(&a);
}

static void before_fork(void)
{
    pthread_rwlock_wrlock(&fork_lock);
}

static void after_fork_parent(void)
{
    pthread_rwlock_unlock(&fork_lock);
}

static void after_fork_child(void)
{
    /* The child's only thread is not the one that took the lock (it has
     * another thread id), and no background thread exists: start afresh. */
    init_fork_lock();
    atomic_fetch_add(&fork_gen, 1);
}

static void install_atfork(void)
{
    init_fork_lock();
    pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

void rlock__busy_begin(void)
{
    pthread_once(&atfork_once, install_atfork);
    pthread_rwlock_rdlock(&fork_lock);
}

void rlock__busy_end(void)
{
    pthread_rwlock_unlock(&fork_lock);
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

size_t rlock__owner(const rlock_client *c, uint64_t thread,
                    char buf[RLOCK__OWNER_MAX])
{
    int n = snprintf(buf, RLOCK__OWNER_MAX, "%s:%llu", c->id,
                     (unsigned long long)thread);
    return (size_t)n;
}
