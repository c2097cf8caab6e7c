/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What the engine's calls tell the client's observers (core/observe.h):
 * each acquisition, release and extension counted and, while someone
 * listens, reported with the hold's figures, looked up in the hold table
 * under the client's mu.
 */
#include <string.h>

#include "bg/events.h"
#include "core/handles.h"
#include "engine/engine.h"
#include "util/clock.h"

void rlock__report_acquire(rlock_mutex *m, rlock__as owner, int rc, int64_t t0,
                           int attempts, int waited, int handed)
{
    rlock_client *c = m->c;
    rlock__obs *o = c->obs;
    int64_t wait_us = (rlock__now_ns() - t0) / 1000;
    rlock__hold *h;
    rlock_event ev;

    memset(&ev, 0, sizeof ev);
    ev.wait_us = wait_us;
    ev.attempts = attempts;
    if (rc != RLOCK_OK) {
        rlock__obs_failed(o, rc);
        if (rc != RLOCK_ETIMEDOUT)
            return;
        rlock__obs_count(o, RLOCK__ST_WAIT_TIMEOUTS);
        if (!rlock__obs_on(o, RLOCK_EV_WAIT_TIMEOUT))
            return;
        ev.type = RLOCK_EV_WAIT_TIMEOUT;
        rlock__event_lock(m, owner.no, 0, &ev);
        return;
    }
    pthread_mutex_lock(&c->mu);
    h = rlock__hold_find(&c->holds, m, owner.no);
    ev.count = h ? h->count : 1;
    if (ev.count > 1) {
        rlock__obs_count(o, RLOCK__ST_REENTRIES);
        ev.flags |= RLOCK_EVF_REENTRY;
    } else {
        rlock__obs_count(o, RLOCK__ST_ACQUISITIONS);
        if (waited)
            rlock__obs_count(o, RLOCK__ST_CONTENDED);
        rlock__obs_time(&o->wait, wait_us);
    }
    if (h && rlock__obs_on(o, RLOCK_EV_ACQUIRED)) {
        ev.type = RLOCK_EV_ACQUIRED;
        ev.flags |= handed ? RLOCK_EVF_HANDED_OVER : 0;
        ev.token = h->token;
        ev.lease_ms = h->cur_lease_ms;
        rlock__event_hold(h, &ev);
    }
    pthread_mutex_unlock(&c->mu);
}

void rlock__report_release(rlock_mutex *m, const rlock__hold *h,
                           int64_t remaining)
{
    rlock__obs *o = m->c->obs;
    int64_t held_us = (rlock__now_ns() - h->since) / 1000;
    rlock_event ev;

    if (remaining == 0) {
        rlock__obs_count(o, RLOCK__ST_RELEASES);
        rlock__obs_time(&o->hold, held_us);
    }
    if (!rlock__obs_on(o, RLOCK_EV_RELEASED))
        return;
    memset(&ev, 0, sizeof ev);
    ev.type = RLOCK_EV_RELEASED;
    ev.flags = remaining > 0 ? RLOCK_EVF_REENTRY : 0;
    ev.count = remaining;
    ev.hold_us = held_us;
    ev.token = h->token;
    rlock__event_hold(h, &ev);
}

void rlock__report_extend(rlock_mutex *m, rlock__as owner, int64_t lease_ms)
{
    rlock_client *c = m->c;
    rlock__hold *h;

    pthread_mutex_lock(&c->mu);
    if ((h = rlock__hold_find(&c->holds, m, owner.no)) != NULL)
        rlock__hold_leased(h, RLOCK_EV_EXTENDED, RLOCK__ST_EXTENSIONS,
                           lease_ms);
    pthread_mutex_unlock(&c->mu);
}
