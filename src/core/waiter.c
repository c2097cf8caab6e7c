/* SPDX-License-Identifier: BSD-3-Clause */
#include <time.h>
#include <unistd.h>

#include "core/waiter.h"
#include "util/clock.h"

void rlock__waiter_add(rlock__waiter **list, rlock__waiter *w)
{
    rlock__cond_init(&w->cv);
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
