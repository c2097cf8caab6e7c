/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Waiters: owners blocked until a lock may be theirs, as the code that
 * delivers wake-ups (the subscriber, a cancel) sees them. Each client
 * keeps a list of its waiters under its mu.
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

typedef struct rlock__waiter {
    struct rlock__waiter *next; /* the client's list, newest first */
    const rlock_mutex *m;
    char owner[RLOCK__OWNER_MAX]; /* as the layout writes it */
    size_t owner_len;
    uint64_t nonce;       /* names this acquisition in Redis */
    int woken;            /* there is news: look again */
    int granted;          /* a grant for this nonce arrived: */
    uint64_t grant_token; /*   its fencing token */
    int64_t grant_ms;     /*   and the lease Redis set */
    pthread_cond_t cv;    /* the blocked thread sleeps on it, with mu */
    int ring_fd; /* >= 0 while its thread waits in poll instead (reading
                    the subscriber): a byte written there wakes it */
} rlock__waiter;

/* Sets up w (cv on CLOCK_MONOTONIC) and puts it at the head of *list. */
void rlock__waiter_add(rlock__waiter **list, rlock__waiter *w);
/* Takes w out of *list and destroys its cv. */
void rlock__waiter_remove(rlock__waiter **list, rlock__waiter *w);
/* Marks w woken and wakes its thread, on its cv or its ring. */
void rlock__waiter_wake(rlock__waiter *w);

#endif
