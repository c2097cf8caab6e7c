/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Waiters: owners blocked until a lock may be theirs, as the code that
 * delivers wake-ups (the subscriber, a cancel) sees them. Each client
 * keeps its waiters under its mu, listed and indexed by owner.
 *
 * A waiter is woken, never told what to do: the wait that owns it decides
 * what a wake-up means (try again, take a grant, give up). A grant is a
 * lock Redis handed to this waiter's acquisition (its nonce) with a token
 * and a lease; the wait takes it without another round trip.
 */
#ifndef RLOCK_CORE_WAITER_H
#define RLOCK_CORE_WAITER_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <rlock/rlock.h>

#include "core/owner.h"

/* Where a sleeping loop task's waiter is woken (loop/loop.c): a byte on
 * the loop's pipe, and the waiter on the ring's list of the woken, so
 * that the loop looks at those alone, not at every sleeper (under the
 * client's mu). */
typedef struct rlock__ring {
    int fd;                      /* the pipe's write end */
    struct rlock__waiter *woken; /* woken since the loop last took them */
} rlock__ring;

typedef struct rlock__waiter {
    struct rlock__waiter *next, *prev;   /* the client's list, newest first */
    struct rlock__waiter *hnext, *hprev; /* its bucket of the owner index */
    const rlock_mutex *m;
    /* The owner it waits as: the layout writes its string again when a
     * message names one (a string of 100-odd bytes is not kept by each
     * of 10,000 waiters), and hash is that string's rlock__owner_hash,
     * its bucket of the index. */
    uint64_t owner_no;
    size_t hash;
    uint64_t nonce;       /* names this acquisition in Redis */
    int woken;            /* there is news: look again */
    int granted;          /* a grant for this nonce arrived: */
    uint64_t grant_token; /*   its fencing token */
    int64_t grant_ms;     /*   and the lease Redis set */
    /* The blocked thread's, while it sleeps on it with mu (NULL
     * otherwise): a loop's waiters have none, and a cv is 48 bytes. */
    pthread_cond_t *cv;
    int ring_fd; /* >= 0 while its thread waits in poll instead (reading
                    the subscriber): a byte written there wakes it */
    int listed;  /* on its ring's list of the woken */
    /* A loop task's instead, while it sleeps (NULL otherwise): the wake
     * lists it there once (listed), for the loop to find with task. */
    rlock__ring *ring;
    struct rlock__waiter *next_woken, *prev_woken;
    void *task;
    /* The generation of the client's waiters it was added in: one that
     * rlock__waiters_forget dropped (a forked child's) is not unlinked. */
    unsigned gen;
} rlock__waiter;

/*
 * A client's waiters (under its mu): a list, and an index by owner string
 * (buckets of a hash, grown as waiters come), so that a message for one
 * owner finds its waiters without walking the others (10,000 on a loop).
 * Zeroed, it is empty.
 */
typedef struct rlock__waiters {
    rlock__waiter *list;
    rlock__waiter **buckets; /* NULL until the first waiter (or no memory:
                                then the list is walked) */
    size_t nbuckets, count;
    unsigned gen; /* bumped by rlock__waiters_forget */
} rlock__waiters;

/* The hash of an owner string that places its waiters in the index. */
size_t rlock__owner_hash(const char *owner, size_t len);

/* Sets up w (its m, owner_no, hash and nonce written) and adds it to ws. */
void rlock__waiter_add(rlock__waiters *ws, rlock__waiter *w);
/* Takes w out of ws (unless ws forgot it since). */
void rlock__waiter_remove(rlock__waiters *ws, rlock__waiter *w);
/* The first waiter that may be owner's (of len bytes): follow hnext and
 * compare each one's owner, as more owners share a bucket. (With no
 * index, out of memory, the list: follow next.) *by_list says which. */
rlock__waiter *rlock__waiter_first(const rlock__waiters *ws, const char *owner,
                                   size_t len, int *by_list);
/* Forgets every waiter (in a forked child: they are the parent's
 * threads'), keeping the index's room. */
void rlock__waiters_forget(rlock__waiters *ws);
/* Frees the index's room (ws empty). */
void rlock__waiters_free(rlock__waiters *ws);
/* Marks w woken and wakes its thread, on its cv or its ring. */
void rlock__waiter_wake(rlock__waiter *w);
/* Takes w off its ring's list of the woken, if it is on it, and off the
 * ring (its task no longer sleeps). */
void rlock__waiter_unring(rlock__waiter *w);

#endif
