/*
 * The hold table: what a client knows about the locks its owners hold.
 *
 * Redis is the authority on who holds a lock; this table is the client's
 * bookkeeping of its own holds: the token to show on release, a mirror of
 * the hold count, and when the lease ends on the monotonic clock. The
 * watchdog walks it to renew leases and to notice holds that ran out.
 * A linear list: a client holds few locks at a time, and a thousand is
 * still a short walk next to one round trip to Redis.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

rlock__hold *rlock__hold_find(rlock_client *c, const rlock_mutex *m,
                              uint64_t thread)
{
    rlock__hold *h;

    for (h = c->holds; h; h = h->next)
        if (h->thread == thread && h->m->name_len == m->name_len &&
            memcmp(h->m->name, m->name, m->name_len) == 0)
            return h;
    return NULL;
}

rlock__hold *rlock__hold_by_serial(rlock_client *c, uint64_t serial)
{
    rlock__hold *h;

    for (h = c->holds; h; h = h->next)
        if (h->serial == serial)
            return h;
    return NULL;
}

void rlock__hold_remove(rlock_client *c, rlock__hold *h)
{
    rlock__hold **p;

    for (p = &c->holds; *p; p = &(*p)->next) {
        if (*p == h) {
            *p = h->next;
            free(h);
            return;
        }
    }
}
