/* SPDX-License-Identifier: BSD-3-Clause */
#include <string.h>

#include "bg/events.h"
#include "layout/layout.h"
#include "util/clock.h"

void rlock__event_owned(const rlock_mutex *m, const char *owner,
                        rlock_event *ev)
{
    ev->name = m->name;
    ev->name_len = m->name_len;
    ev->layout = m->opts.layout;
    ev->owner = owner;
    rlock__obs_event(m->c->obs, ev);
}

void rlock__event_lock(rlock_mutex *m, uint64_t no, uint64_t nonce,
                       rlock_event *ev)
{
    char owner[RLOCK__OWNER_MAX];

    m->layout->owner(m->c, no, nonce, owner);
    rlock__event_owned(m, owner, ev);
}

void rlock__undo_sent(const rlock_mutex *m, const char *owner, unsigned flags)
{
    rlock_event ev;

    rlock__obs_count(m->c->obs, RLOCK__ST_UNDOS);
    if (!rlock__obs_on(m->c->obs, RLOCK_EV_UNDO))
        return;
    memset(&ev, 0, sizeof ev);
    ev.type = RLOCK_EV_UNDO;
    ev.flags = flags;
    rlock__event_owned(m, owner, &ev);
}

void rlock__event_hold(const rlock__hold *h, rlock_event *ev)
{
    rlock__event_lock(h->m, h->owner.no, h->nonce, ev);
}

void rlock__hold_leased(const rlock__hold *h, int type, int counter,
                        int64_t lease_ms)
{
    rlock__obs *o = h->m->c->obs;
    rlock_event ev;

    rlock__obs_count(o, counter);
    if (!rlock__obs_on(o, type))
        return;
    memset(&ev, 0, sizeof ev);
    ev.type = type;
    ev.lease_ms = lease_ms;
    ev.count = h->count;
    ev.token = h->token;
    rlock__event_hold(h, &ev);
}

void rlock__hold_lost(rlock_client *c, const rlock__hold *h, int cause,
                      const char *how)
{
    rlock_event ev;

    /* A hold its call has not returned yet was never the owner's: that
     * call gives it back, and says so. */
    if (h->unreturned)
        return;
    rlock__obs_lost(c->obs, cause);
    if (!rlock__obs_on(c->obs, RLOCK_EV_LOST))
        return;
    memset(&ev, 0, sizeof ev);
    ev.type = RLOCK_EV_LOST;
    ev.cause = cause;
    ev.hold_us = (rlock__now_ns() - h->since) / 1000;
    ev.detail = how;
    rlock__event_hold(h, &ev);
}
