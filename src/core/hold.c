/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The hold table. A client may hold a hundred thousand locks, so nothing
 * here walks the whole table for one hold: holds are found by (name,
 * owner) and by serial through two hash tables, and each mutex keeps its
 * own holds for rlock_mutex_free. The list is for the watchdog's walk.
 */
#include <stdlib.h>
#include <string.h>

#include "core/hold.h"
#include "core/handles.h"
#include "util/clock.h"

static size_t key_hash(const char *name, size_t len, uint64_t owner)
{
    uint64_t h = 1469598103934665603ULL ^ owner; /* FNV-1a */
    size_t i;

    for (i = 0; i < len; i++) {
        h ^= (unsigned char)name[i];
        h *= 1099511628211ULL;
    }
    return (size_t)(h ^ (h >> 29));
}

static size_t serial_hash(uint64_t serial)
{
    serial *= 0x9E3779B97F4A7C15ULL;
    return (size_t)(serial ^ (serial >> 31));
}

static size_t key_slot(const rlock__holds *t, const rlock_mutex *m,
                       uint64_t owner)
{
    return key_hash(m->name, m->name_len, owner) & (t->slots - 1);
}

rlock__hold *rlock__hold_find(rlock__holds *t, const rlock_mutex *m,
                              uint64_t owner)
{
    rlock__hold *h;

    if (t->slots == 0)
        return NULL;
    for (h = t->by_key[key_slot(t, m, owner)]; h; h = h->key_next)
        if (h->owner.no == owner && h->m->name_len == m->name_len &&
            h->m->layout == m->layout &&
            memcmp(h->m->name, m->name, m->name_len) == 0)
            return h;
    return NULL;
}

rlock__hold *rlock__hold_by_serial(rlock__holds *t, uint64_t serial)
{
    rlock__hold *h;

    if (t->slots == 0)
        return NULL;
    for (h = t->by_serial[serial_hash(serial) & (t->slots - 1)]; h;
         h = h->serial_next)
        if (h->serial == serial)
            return h;
    return NULL;
}

static void index_hold(rlock__holds *t, rlock__hold *h)
{
    size_t k = key_slot(t, h->m, h->owner.no);
    size_t s = serial_hash(h->serial) & (t->slots - 1);

    h->key_next = t->by_key[k];
    t->by_key[k] = h;
    h->serial_next = t->by_serial[s];
    t->by_serial[s] = h;
}

/* Doubles both tables (or makes the first ones) and indexes every hold
 * again. */
static int grow(rlock__holds *t)
{
    size_t n = t->slots ? t->slots * 2 : 64;
    rlock__hold **keys = calloc(n, sizeof *keys);
    rlock__hold **serials = calloc(n, sizeof *serials);
    rlock__hold *h;

    if (!keys || !serials) {
        free(keys);
        free(serials);
        return -1;
    }
    free(t->by_key);
    free(t->by_serial);
    t->by_key = keys;
    t->by_serial = serials;
    t->slots = n;
    for (h = t->list; h; h = h->next)
        index_hold(t, h);
    return 0;
}

rlock__hold *rlock__hold_new(rlock__holds *t, rlock_mutex *m, rlock__as owner)
{
    rlock__hold *h;

    if (t->n >= t->slots && grow(t) != 0)
        return NULL;
    h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    h->serial = ++t->next_serial;
    h->m = m;
    h->owner = owner;
    rlock__owner_ref(owner.obj);
    h->next = t->list;
    if (t->list)
        t->list->prev = h;
    t->list = h;
    h->m_next = m->holds;
    m->holds = h;
    index_hold(t, h);
    t->n++;
    return h;
}

static void free_hold(rlock__hold *h)
{
    rlock__owner_unref(h->owner.obj);
    free(h);
}

void rlock__hold_remove(rlock__holds *t, rlock__hold *h)
{
    rlock__hold **p;

    if (h->prev)
        h->prev->next = h->next;
    else
        t->list = h->next;
    if (h->next)
        h->next->prev = h->prev;
    /* The other chains are short: a mutex's holds are one per owner, and
     * the tables keep about one hold per slot. */
    for (p = &h->m->holds; *p != h; p = &(*p)->m_next)
        ;
    *p = h->m_next;
    for (p = &t->by_key[key_slot(t, h->m, h->owner.no)]; *p != h;
         p = &(*p)->key_next)
        ;
    *p = h->key_next;
    for (p = &t->by_serial[serial_hash(h->serial) & (t->slots - 1)]; *p != h;
         p = &(*p)->serial_next)
        ;
    *p = h->serial_next;
    t->n--;
    free_hold(h);
}

void rlock__hold_clear(rlock__holds *t, rlock_mutex *m)
{
    if (m) {
        while (m->holds)
            rlock__hold_remove(t, m->holds);
        return;
    }
    while (t->list) {
        rlock__hold *h = t->list;
        t->list = h->next;
        h->m->holds = NULL;
        free_hold(h);
    }
    free(t->by_key);
    free(t->by_serial);
    t->by_key = t->by_serial = NULL;
    t->slots = 0;
    t->n = 0;
}

int64_t rlock__hold_countable(const rlock__hold *h, int64_t lease_ms)
{
    return h->owed_ms > 0 && h->owed_ms < lease_ms ? h->owed_ms : lease_ms;
}

int64_t rlock__hold_renew_due(const rlock__hold *h, int64_t t)
{
    /* Two thirds of the renewal's lease before the end: the renewal then
     * leaves the end where it was, or later. */
    int64_t floor = h->valid_until - h->lease_ms * RLOCK__NS_PER_MS * 2 / 3;

    return t > floor ? t : floor;
}

void rlock__hold_owe(rlock__hold *h, int64_t lease_ms)
{
    h->owed_ms = rlock__hold_countable(h, lease_ms);
    if (lease_ms > h->owed_max_ms)
        h->owed_max_ms = lease_ms;
}

void rlock__hold_may_end(rlock__hold *h, int64_t end_ns, int64_t now_ns)
{
    if (end_ns < h->valid_until) {
        h->valid_until = end_ns;
        if (h->renew_at > now_ns)
            h->renew_at = now_ns;
    }
}

int64_t rlock__holds_end(const rlock__holds *t, int64_t shortest_ms)
{
    const rlock__hold *h;
    int64_t end = rlock__after_ms(shortest_ms);

    for (h = t->list; h; h = h->next)
        if (!h->lost && !h->releasing && h->valid_until < end)
            end = h->valid_until;
    return end;
}
