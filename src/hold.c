/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The hold table: what a client knows about the locks its owners hold.
 *
 * Redis is the authority on who holds a lock; this table is the client's
 * bookkeeping of its own holds: the token to show on release, a mirror of
 * the hold count, and when the lease ends on the monotonic clock. The
 * watchdog walks it to renew leases and to notice holds that ran out.
 *
 * A client may hold a hundred thousand locks, so nothing here walks the
 * whole table for one hold: holds are found by (name, thread) and by
 * serial through two hash tables, and each mutex keeps its own holds for
 * rlock_mutex_free. The list in c->holds is for the watchdog's walk.
 * Everything runs with c->mu held.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static size_t key_hash(const char *name, size_t len, uint64_t thread)
{
    uint64_t h = 1469598103934665603ULL ^ thread; /* FNV-1a */
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

static size_t key_slot(const rlock_client *c, const rlock_mutex *m,
                       uint64_t thread)
{
    return key_hash(m->name, m->name_len, thread) & (c->hold_slots - 1);
}

rlock__hold *rlock__hold_find(rlock_client *c, const rlock_mutex *m,
                              uint64_t thread)
{
    rlock__hold *h;

    if (c->hold_slots == 0)
        return NULL;
    for (h = c->hold_keys[key_slot(c, m, thread)]; h; h = h->key_next)
        if (h->thread == thread && h->m->name_len == m->name_len &&
            h->m->opts.layout == m->opts.layout &&
            memcmp(h->m->name, m->name, m->name_len) == 0)
            return h;
    return NULL;
}

rlock__hold *rlock__hold_by_serial(rlock_client *c, uint64_t serial)
{
    rlock__hold *h;

    if (c->hold_slots == 0)
        return NULL;
    for (h = c->hold_serials[serial_hash(serial) & (c->hold_slots - 1)]; h;
         h = h->serial_next)
        if (h->serial == serial)
            return h;
    return NULL;
}

static void index_hold(rlock_client *c, rlock__hold *h)
{
    size_t k = key_slot(c, h->m, h->thread);
    size_t s = serial_hash(h->serial) & (c->hold_slots - 1);

    h->key_next = c->hold_keys[k];
    c->hold_keys[k] = h;
    h->serial_next = c->hold_serials[s];
    c->hold_serials[s] = h;
}

/* Doubles both tables (or makes the first ones) and indexes every hold
 * again. */
static int grow(rlock_client *c)
{
    size_t n = c->hold_slots ? c->hold_slots * 2 : 64;
    rlock__hold **keys = calloc(n, sizeof *keys);
    rlock__hold **serials = calloc(n, sizeof *serials);
    rlock__hold *h;

    if (!keys || !serials) {
        free(keys);
        free(serials);
        return RLOCK_ENOMEM;
    }
    free(c->hold_keys);
    free(c->hold_serials);
    c->hold_keys = keys;
    c->hold_serials = serials;
    c->hold_slots = n;
    for (h = c->holds; h; h = h->next)
        index_hold(c, h);
    return RLOCK_OK;
}

int rlock__hold_add(rlock_client *c, rlock__hold *h)
{
    if (c->nholds >= c->hold_slots && grow(c) != RLOCK_OK)
        return RLOCK_ENOMEM;
    h->prev = NULL;
    h->next = c->holds;
    if (c->holds)
        c->holds->prev = h;
    c->holds = h;
    h->m_next = h->m->holds;
    h->m->holds = h;
    index_hold(c, h);
    c->nholds++;
    return RLOCK_OK;
}

void rlock__hold_remove(rlock_client *c, rlock__hold *h)
{
    rlock__hold **p;

    if (h->prev)
        h->prev->next = h->next;
    else
        c->holds = h->next;
    if (h->next)
        h->next->prev = h->prev;
    /* The other chains are short: a mutex's holds are one per thread, and
     * the tables keep about one hold per slot. */
    for (p = &h->m->holds; *p != h; p = &(*p)->m_next)
        ;
    *p = h->m_next;
    for (p = &c->hold_keys[key_slot(c, h->m, h->thread)]; *p != h;
         p = &(*p)->key_next)
        ;
    *p = h->key_next;
    for (p = &c->hold_serials[serial_hash(h->serial) & (c->hold_slots - 1)];
         *p != h; p = &(*p)->serial_next)
        ;
    *p = h->serial_next;
    c->nholds--;
    free(h);
}

void rlock__hold_clear(rlock_client *c, const rlock_mutex *m)
{
    if (m) {
        while (m->holds)
            rlock__hold_remove(c, m->holds);
        return;
    }
    while (c->holds) {
        rlock__hold *h = c->holds;
        c->holds = h->next;
        h->m->holds = NULL;
        free(h);
    }
    free(c->hold_keys);
    free(c->hold_serials);
    c->hold_keys = c->hold_serials = NULL;
    c->hold_slots = 0;
    c->nholds = 0;
}
