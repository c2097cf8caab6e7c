/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What every operation of the engine shares: a call's deadline, nonces,
 * who counts re-entries, sending a request through the backend, recording
 * a hold Redis granted, handing an undo to the background, and how long
 * a hold lasts as counted.
 */
#include <stdlib.h>

#include "backend/backend.h"
#include "bg/bg.h"
#include "bg/notify.h"
#include "bg/events.h"
#include "core/handles.h"
#include "engine/engine.h"
#include "engine/hold_ops.h"
#include "engine/ops.h"
#include "layout/layout.h"
#include "util/clock.h"

void rlock__call_begin(rlock__call *call, const rlock_mutex *m)
{
    const rlock_client *c = m->c;
    int64_t ms = c->opts.command_timeout_ms;

    /* A write that waits for replicas may take sync_timeout_ms more. */
    if (m->replicas > 0)
        ms += c->opts.sync_timeout_ms;
    rlock__call_init(call, rlock__after_ms(ms));
}

uint64_t rlock__new_nonce(rlock_client *c)
{
    return __atomic_add_fetch(&c->next_nonce, 1, __ATOMIC_RELAXED);
}

int rlock__send(rlock__call *call, rlock_mutex *m, rlock__req *req, int flags,
                rlock__results *res)
{
    rlock_client *c = m->c;

    if (rlock__req_finish(req) != RLOCK_OK ||
        rlock__results_reserve(res, c->nnodes > 1 ? c->nnodes : 1) !=
            RLOCK_OK) {
        rlock__results_none(res);
        return rlock__fail(call, RLOCK_ENOMEM, "out of memory");
    }
    rlock__backend_exec(c, req, flags, res, call);
    return RLOCK_OK;
}

int rlock__hold_record(rlock__call *call, rlock_mutex *m, rlock__as owner,
                       uint64_t token, uint64_t nonce, int64_t count,
                       int64_t t0, int64_t granted_ms)
{
    rlock_client *c = m->c;
    rlock__hold *h = rlock__hold_find(&c->holds, m, owner.no);
    int rc = rlock__bg_ensure(c, call);
    int64_t counted;

    if (rc != RLOCK_OK)
        return rc;
    if (!h) {
        h = rlock__hold_new(&c->holds, m, owner);
        if (!h)
            return rlock__fail(call, RLOCK_ENOMEM, "out of memory");
        h->watchdog = m->opts.lease_ms == 0;
        h->unreturned = 1; /* until its check (rlock__keep_op) returns it */
        h->since = t0;
    }
    /* A re-entry answers the token Redis keeps, 0 if none was drawn; one
     * drawn since (it is kept in Redis too) stays. */
    if (token != 0 || h->nonce != nonce)
        h->token = token;
    h->nonce = nonce;
    h->count = count;
    h->lease_ms = m->lease_ms;
    h->cur_lease_ms = granted_ms;
    /* A re-entry's lease counts no longer than an unanswered request of
     * the hold may set (a new hold has none). */
    counted = rlock__hold_countable(h, granted_ms);
    if (counted < c->shortest_lease_ms)
        c->shortest_lease_ms = counted;
    h->lost = 0;
    h->valid_until = t0 + counted * RLOCK__NS_PER_MS -
                     c->backend->margin_ns(c, counted);
    h->renew_at = t0 + counted * RLOCK__NS_PER_MS / 3;
    rlock__bg_kick_before(c, h->renew_at);
    return RLOCK_OK;
}

rlock__hold *rlock__hold_quiet(rlock__call *call, rlock_mutex *m,
                              uint64_t owner, int *late)
{
    struct timespec ts = rlock__timespec(call->deadline_ns);
    rlock__hold *h;

    *late = 0;
    while ((h = rlock__hold_find(&m->c->holds, m, owner)) != NULL &&
           (h->renewing || h->extending)) {
        if (rlock__now_ns() >= call->deadline_ns) {
            *late = 1;
            return NULL;
        }
        pthread_cond_timedwait(&m->c->state_cv, &m->c->mu, &ts);
    }
    return h;
}

rlock__hold *rlock__hold_quiet_now(rlock__call *call, rlock_mutex *m,
                                   uint64_t owner, int *wait)
{
    rlock__hold *h = rlock__hold_find(&m->c->holds, m, owner);

    *wait = 0;
    if (h && (h->renewing || h->extending)) {
        *wait = rlock__now_ns() >= call->deadline_ns ? -1 : 1;
        return NULL;
    }
    return h;
}

void rlock__hold_settled(rlock_client *c, uint64_t serial)
{
    rlock__hold *h = rlock__hold_by_serial(&c->holds, serial);

    if (h)
        h->extending = 0;
    /* Waiters also wait for a hold to go. */
    pthread_cond_broadcast(&c->state_cv);
}

void rlock__undo_op_init(rlock__undo_op *u, int64_t deadline_ns, rlock_mutex *m,
                         rlock__as owner, uint64_t nonce)
{
    u->m = m;
    u->owner = owner;
    u->nonce = nonce;
    u->stage = 0;
    rlock__call_init(&u->call, deadline_ns);
}

int rlock__undo_step(rlock__undo_op *u, rlock__slot **slot)
{
    rlock_mutex *m = u->m;
    int i, done, sent = 0;

    /* Now, by the call's deadline, so that the caller's next attempt does
     * not find its own stale hold and others are not held up; on a node
     * whose connections still owe the attempt's answer (a paused server)
     * it is queued behind them, not waited for. Where any node did not
     * confirm it, the background sends it again until one does. */
    if (u->stage == 0) {
        m->layout->cancel(m, u->who,
                          m->layout->owner(m->c, u->owner.no, u->nonce, u->who),
                          u->nonce, &u->s.req);
        u->s.req.tag = u->nonce;
        u->s.flags = RLOCK__X_BEHIND;
        u->s.call = &u->call;
        u->stage = 1;
        *slot = &u->s;
        return RLOCK__STEP_SEND;
    }
    done = u->s.rc == RLOCK_OK;
    for (i = 0; i < u->s.res.n; i++) {
        done = done && u->s.res.r[i].rc == RLOCK_OK;
        sent |= u->s.res.r[i].sent || u->s.res.r[i].rc == RLOCK_OK;
    }
    rlock__results_free(&u->s.res);
    rlock__req_free(&u->s.req);
    rlock__call_end(&u->call);
    if (sent)
        rlock__undo_sent(m, u->who, 0);
    if (!done)
        rlock__undo_later(m, u->owner.no, u->nonce, sent);
    return RLOCK__STEP_DONE;
}

void rlock__run_quiet(rlock__call *call, rlock_mutex *m, rlock__as owner)
{
    rlock_client *c = m->c;
    int late;

    pthread_mutex_lock(&c->mu);
    (void)rlock__hold_quiet(call, m, owner.no, &late);
    pthread_mutex_unlock(&c->mu);
}

void rlock__run(rlock__call *call, rlock_mutex *m, rlock__as owner,
                rlock__step_fn step, void *op)
{
    rlock__slot *s;

    for (;;) {
        switch (step(op, &s)) {
        case RLOCK__STEP_SEND:
            rlock__slot_run(s, m->c);
            break;
        case RLOCK__STEP_QUIET:
            /* The step looks again, and fails the call if it is late. */
            rlock__run_quiet(call, m, owner);
            break;
        default:
            /* Done. (No op this drives sleeps: a wait's driver is
             * rlock__acquire.) */
            return;
        }
    }
}

int rlock__lease_left(rlock__call *call, rlock_mutex *m, rlock__as owner,
                      int64_t *left_ms)
{
    rlock_client *c = m->c;
    rlock__hold *h;
    int64_t left;
    int rc = RLOCK_OK;

    *left_ms = 0;
    pthread_mutex_lock(&c->mu);
    h = rlock__hold_find(&c->holds, m, owner.no);
    left = h ? h->valid_until - rlock__now_ns() : 0;
    if (!h) {
        rc = rlock__fail(call, RLOCK_ENOTOWNER, "%s holds no lock of this name",
                         owner.obj ? "this owner" : "this thread");
    } else if (h->lost || left <= 0) {
        /* Reported here, and by the hold's next call; on_lost too, if
         * the background has not called it yet. */
        rlock__bg_lose(c, h, RLOCK_LOST_EXPIRED,
                       "its lease as counted ended (found by "
                       "rlock_mutex_lease_left)");
        rc = rlock__fail(call, RLOCK_ELOST,
                         "the hold was lost or its lease ended");
    } else {
        /* Rounded down: never a millisecond more than counted. */
        *left_ms = left / RLOCK__NS_PER_MS;
        if (*left_ms == 0)
            *left_ms = 1;
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}
