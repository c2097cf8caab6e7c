/* SPDX-License-Identifier: BSD-3-Clause */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/waiter.h"
#include "util/clock.h"

/* FNV-1a: owner strings differ in their last bytes (the nonce). */
size_t rlock__owner_hash(const char *p, size_t len)
{
    uint64_t h = 1469598103934665603ULL;
    size_t i;

    for (i = 0; i < len; i++) {
        h ^= (unsigned char)p[i];
        h *= 1099511628211ULL;
    }
    return (size_t)(h ^ (h >> 32));
}

static void bucket_add(rlock__waiter **buckets, size_t n, rlock__waiter *w)
{
    rlock__waiter **b = &buckets[w->hash & (n - 1)];

    w->hprev = NULL;
    w->hnext = *b;
    if (*b)
        (*b)->hprev = w;
    *b = w;
}

/* Room for the index when it is full (two waiters a bucket): twice as
 * many buckets, every waiter of the list moved. 1 if so; 0 if it was not
 * full, or out of memory (it stays as it is, its chains longer). */
static int grow(rlock__waiters *ws)
{
    size_t n = ws->nbuckets ? ws->nbuckets * 2 : 64;
    rlock__waiter **b, *w;

    if (ws->buckets && ws->count <= ws->nbuckets * 2)
        return 0;
    if (!(b = calloc(n, sizeof *b)))
        return 0;
    for (w = ws->list; w; w = w->next)
        bucket_add(b, n, w);
    free(ws->buckets);
    ws->buckets = b;
    ws->nbuckets = n;
    return 1;
}

void rlock__waiter_add(rlock__waiters *ws, rlock__waiter *w)
{
    w->cv = NULL;
    w->ring_fd = -1;
    w->ring = NULL;
    w->listed = 0;
    w->gen = ws->gen;
    w->prev = NULL;
    w->next = ws->list;
    if (ws->list)
        ws->list->prev = w;
    ws->list = w;
    ws->count++;
    /* Grown, the index has w with the rest of the list. */
    if (!grow(ws) && ws->buckets)
        bucket_add(ws->buckets, ws->nbuckets, w);
}

void rlock__waiter_remove(rlock__waiters *ws, rlock__waiter *w)
{
    /* Forgotten with the rest (a forked child's first call, while this
     * wait went on): its links are the parent's. */
    if (w->gen != ws->gen)
        return;
    if (w->prev)
        w->prev->next = w->next;
    else
        ws->list = w->next;
    if (w->next)
        w->next->prev = w->prev;
    if (ws->buckets) {
        if (w->hprev)
            w->hprev->hnext = w->hnext;
        else
            ws->buckets[w->hash & (ws->nbuckets - 1)] = w->hnext;
        if (w->hnext)
            w->hnext->hprev = w->hprev;
    }
    w->next = w->prev = w->hnext = w->hprev = NULL;
    ws->count--;
}

rlock__waiter *rlock__waiter_first(const rlock__waiters *ws, const char *owner,
                                   size_t len, int *by_list)
{
    *by_list = ws->buckets == NULL;
    if (*by_list)
        return ws->list;
    return ws->buckets[rlock__owner_hash(owner, len) & (ws->nbuckets - 1)];
}

void rlock__waiters_forget(rlock__waiters *ws)
{
    ws->gen++;
    ws->list = NULL;
    ws->count = 0;
    if (ws->buckets)
        memset(ws->buckets, 0, ws->nbuckets * sizeof *ws->buckets);
}

void rlock__waiters_free(rlock__waiters *ws)
{
    free(ws->buckets);
    memset(ws, 0, sizeof *ws);
}

void rlock__waiter_wake(rlock__waiter *w)
{
    w->woken = 1;
    if (w->ring && !w->listed) {
        ssize_t n;
        w->listed = 1;
        w->prev_woken = NULL;
        w->next_woken = w->ring->woken;
        if (w->next_woken)
            w->next_woken->prev_woken = w;
        w->ring->woken = w;
        n = write(w->ring->fd, "", 1);
        (void)n; /* a full pipe is a ring already */
    }
    if (w->ring_fd >= 0) {
        ssize_t n = write(w->ring_fd, "", 1);
        (void)n; /* a full pipe is a ring already */
    }
    if (w->cv)
        pthread_cond_signal(w->cv);
}

void rlock__waiter_unring(rlock__waiter *w)
{
    if (w->ring && w->listed) {
        if (w->prev_woken)
            w->prev_woken->next_woken = w->next_woken;
        else
            w->ring->woken = w->next_woken;
        if (w->next_woken)
            w->next_woken->prev_woken = w->prev_woken;
    }
    w->listed = 0;
    w->ring = NULL;
}
