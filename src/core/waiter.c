/* SPDX-License-Identifier: BSD-3-Clause */
#include <time.h>
#include <unistd.h>

#include "core/waiter.h"

void rlock__waiter_add(rlock__waiter **list, rlock__waiter *w)
{
    pthread_condattr_t ca;

    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->cv, &ca);
    pthread_condattr_destroy(&ca);
    w->ring_fd = -1;
    w->next = *list;
    *list = w;
}

void rlock__waiter_remove(rlock__waiter **list, rlock__waiter *w)
{
    rlock__waiter **p;

    for (p = list; *p; p = &(*p)->next) {
        if (*p == w) {
            *p = w->next;
            break;
        }
    }
    pthread_cond_destroy(&w->cv);
}

void rlock__waiter_wake(rlock__waiter *w)
{
    w->woken = 1;
    if (w->ring_fd >= 0) {
        ssize_t n = write(w->ring_fd, "", 1);
        (void)n; /* a full pipe is a ring already */
    }
    pthread_cond_signal(&w->cv);
}
