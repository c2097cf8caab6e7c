/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * One acquire attempt, for every layout and backend.
 *
 * The request goes to every node the backend names (one, or Redlock's
 * masters), and the answers are counted against the client's quorum:
 *  - a hold exists when a quorum took it within its validity: the lease
 *    counted from before the request left, less the backend's margin
 *    (clock rates, Redlock's drift). Whatever Redis did, it did after that
 *    instant, so our idea of the lease end is never later than Redis's;
 *  - fencing across nodes: each node takes the lock with its own next
 *    token; the hold's token is the largest of the quorum's, and a second
 *    round writes it to every node that answered with less (the layout's
 *    retoken), so that any later acquisition, whose quorum shares a node
 *    with this one, draws a greater token. Once the counters agree the
 *    second round is skipped; with one node it never happens;
 *  - an attempt that did not end in a hold but may have taken one (a lost
 *    reply, a grant that came too late, a minority of nodes) is undone in
 *    the background, and its nonce is spent: should the caller try again,
 *    it does so under a new one, so that the undo, whenever it arrives,
 *    cannot touch what the new attempts take.
 * The hold table is updated only after Redis has answered, under the
 * client's mu, never across a round trip.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "bg/bg.h"
#include "core/handles.h"
#include "engine/engine.h"
#include "engine/hold_ops.h"
#include "engine/ops.h"
#include "layout/layout.h"
#include "util/clock.h"

typedef rlock__tally tally;

static void tally_answers(const rlock_mutex *m, const rlock__acq *q,
                          const char *script, rlock__results *res, tally *t)
{
    int i;

    memset(t, 0, sizeof *t);
    t->hint = -1;
    for (i = 0; i < res->n; i++) {
        rlock__result *r = &res->r[i];
        rlock__acquired a;

        if (r->rc != RLOCK_OK) {
            t->unknown += rlock__result_unknown(r);
            continue;
        }
        /* A fresh attempt cannot find a hold gone: that answer is for a
         * re-entry; only a fast form asks for the full one; only the lean
         * form (fast, drawing no token) takes a lock without a token in a
         * short answer. */
        if (m->layout->decode_acquire(r->reply, &a) != RLOCK_OK ||
            (a.status < 0 && q->mode != 'r') ||
            (a.status == RLOCK__ACQ_AGAIN && !q->fast) ||
            (a.plain && a.token == 0 && !(q->fast && !q->fenced))) {
            /* The script ran; what it did is not known. */
            r->rc = rlock__err_set(&r->err, RLOCK_EPROTO,
                                   "unexpected reply to the %s script", script);
            t->unknown++;
            continue;
        }
        if (a.status == RLOCK__ACQ_AGAIN) {
            t->again++;
        } else if (a.status > 0) {
            t->got[i] = 1;
            t->plain += a.plain;
            t->tok[i] = a.token;
            t->held++;
            t->count = a.count;
            if (a.token > t->token)
                t->token = a.token;
        } else if (a.status == 0) {
            t->busy++;
            if (a.hint_ms > t->hint)
                t->hint = a.hint_ms;
            if (a.list_nodes)
                t->other_list = a.list_nodes;
        } else {
            t->gone++;
        }
    }
}

/* A re-entry whose count Redis keeps (of the hold of that serial) did not
 * record a lease (mu not held): it may have set one, sent at t0, that
 * ends sooner than the one counted; and a node that never answered may
 * still run it later. t NULL: nothing was sent. */
static void reentry_done(rlock_mutex *m, uint64_t serial, const tally *t,
                         int64_t t0)
{
    rlock_client *c = m->c;
    rlock__hold *h;
    int64_t now = rlock__now_ns();

    pthread_mutex_lock(&c->mu);
    h = rlock__hold_by_serial(&c->holds, serial);
    if (h && t) {
        rlock__hold_may_end(h,
                            t0 + m->lease_ms * RLOCK__NS_PER_MS -
                                c->backend->margin_ns(c, m->lease_ms),
                            now);
        if (t->unknown)
            rlock__hold_owe(h, m->lease_ms);
        rlock__bg_kick(c);
    }
    rlock__hold_settled(c, serial);
    pthread_mutex_unlock(&c->mu);
}

/* Redlock's second round: the chosen token on the nodes that hold with
 * less. 1: its request is in slot s to send (retoken_read reads its
 * answers); 0: none is needed (or possible: then got[] is cleared). */
static int retoken(rlock_mutex *m, const char *owner, size_t owner_len,
                   uint64_t nonce, tally *t, rlock__slot *s)
{
    int i, any = 0;

    for (i = 0; i < RLOCK__NODES_MAX; i++)
        any |= t->got[i] && t->tok[i] < t->token;
    if (!any)
        return 0;
    if (!m->layout->retoken) {
        /* Tokens that cannot be agreed: no node's is the hold's. */
        memset(t->got, 0, sizeof t->got);
        t->held = 0;
        return 0;
    }
    m->layout->retoken(m, owner, owner_len, nonce, t->token, &s->req);
    return 1;
}

/* Clears got[i] where the second round did not confirm the token: the
 * node's answer was not 1, or it has none (the whole round failed before
 * it went out: out of memory). A node that holds with a smaller token and
 * was not raised to the hold's does not count towards it: a majority
 * whose counters never saw the token would let a later hold draw a
 * smaller one. */
static void retoken_read(tally *t, rlock__slot *s)
{
    int i;

    for (i = 0; i < RLOCK__NODES_MAX; i++) {
        const redisReply *r;
        if (!t->got[i] || t->tok[i] >= t->token)
            continue;
        r = s->rc == RLOCK_OK && i < s->res.n && s->res.r[i].rc == RLOCK_OK
                ? s->res.r[i].reply
                : NULL;
        if (!r || r->type != REDIS_REPLY_INTEGER || r->integer != 1) {
            t->got[i] = 0;
            t->held--;
        }
    }
    rlock__results_free(&s->res);
    rlock__req_free(&s->req);
}

/* The attempt did not end in a hold: why, as the caller's code. */
static int not_held(rlock__call *call, rlock_mutex *m, tally *t,
                    rlock__results *res, int64_t *hint_ms)
{
    rlock_client *c = m->c;

    char where[64];

    if (t->busy > c->nnodes - c->quorum) {
        if (hint_ms)
            *hint_ms = t->hint;
        return rlock__fail(
            call, RLOCK_EBUSY, "lock is held%s%s",
            m->layout->flags & RLOCK__LAY_QUEUE ? " or queued for" : "",
            rlock__on_nodes(c, t->busy, where, sizeof where));
    }
    return c->backend->failure(c, "acquire", t->held, res, t->got, call);
}

/*
 * A re-entry on a hold that is lost, or whose lease as this client counts
 * it has ended (the background may not have looked yet), is not a
 * re-entry and never a fresh hold: the owner is told RLOCK_ELOST, which
 * reports the loss and forgets the hold (its on_lost notice, queued when
 * it was marked lost, is delivered whatever happens to the hold). mu
 * held. RLOCK_OK: h is held.
 */
static int lost_reentry(rlock__call *call, rlock_client *c, rlock__hold *h)
{
    if (!h->lost && h->valid_until > rlock__now_ns())
        return RLOCK_OK;
    rlock__bg_lose(c, h, RLOCK_LOST_EXPIRED,
                   "its lease as counted ended (found by a re-entry)");
    rlock__hold_remove(&c->holds, h);
    return rlock__fail(call, RLOCK_ELOST,
                       "this owner's hold of the lock was lost before this "
                       "re-entry (it is forgotten; the lock was not taken)");
}

void rlock__attempt_op_init(rlock__attempt_op *o, rlock__call *call,
                            rlock_mutex *m, rlock__as owner, char mode,
                            uint64_t *nonce_io, int64_t *hint_ms)
{
    o->call = call;
    o->m = m;
    o->owner = owner;
    o->mode = mode;
    o->nonce_io = nonce_io;
    o->hint_ms = hint_ms;
    o->stage = 0;
    o->rc = RLOCK_OK;
    o->serial = 0;
}

/* Where an attempt is. */
enum {
    ATT_BEGIN,
    ATT_REENTER, /* a re-entry the client counts: an extension */
    ATT_SEND,    /* the acquisition's request (again: the full form) */
    ATT_SENT,
    ATT_RETOKEN, /* Redlock's second round sent */
    ATT_KEEP,    /* the new hold's check (rlock__keep_op) */
    ATT_UNDO     /* what the attempt may have taken, given back */
};

/* attempt_begin's "go on to the next stage at once". */
#define GO_ON (-1)

/* The first step: the hold table says what kind of attempt this is. */
static int attempt_begin(rlock__attempt_op *o)
{
    rlock_mutex *m = o->m;
    rlock_client *c = m->c;
    const rlock__layout *lay = m->layout;
    rlock__call *call = o->call;
    rlock__hold *h;
    int wait = 0;

    memset(&o->a, 0, sizeof o->a);
    pthread_mutex_lock(&c->mu);
    /* A re-entry whose count Redis keeps sets the lease: one such request
     * of a hold at a time (rlock__hold_quiet). */
    h = m->counts_here ? rlock__hold_find(&c->holds, m, o->owner.no)
                       : rlock__hold_quiet_now(call, m, o->owner.no, &wait);
    if (wait > 0) {
        pthread_mutex_unlock(&c->mu);
        return RLOCK__STEP_QUIET;
    }
    if (wait < 0) {
        pthread_mutex_unlock(&c->mu);
        o->rc = rlock__fail(call, RLOCK_ENOREPLY,
                            "re-entry: a renewal of the hold did not end "
                            "within the call's deadline");
        return RLOCK__STEP_DONE;
    }
    if (h && (o->rc = lost_reentry(call, c, h)) != RLOCK_OK) {
        pthread_mutex_unlock(&c->mu);
        return RLOCK__STEP_DONE;
    }
    if (h && m->counts_here) {
        /* Re-entry is counted here, Redis seeing one hold; like every
         * re-entry it renews the lease (the header's promise), as an
         * extension to the mutex's lease. */
        pthread_mutex_unlock(&c->mu);
        rlock__reenter_op_init(&o->in.extend, call, m, o->owner);
        o->stage = ATT_REENTER;
        return GO_ON;
    }
    if (h) {
        o->mode = 'r';
        o->a.count = h->count;
        o->a.token = h->token;
        o->a.id = h->nonce;
        h->extending = 1;
        o->serial = h->serial;
    }
    pthread_mutex_unlock(&c->mu);
    /* Without a queue a wait is a plain attempt; over copies there is
     * none either (nothing would hand the lock over on all nodes). */
    if (o->mode == 'w' && (!(lay->flags & RLOCK__LAY_QUEUE) ||
                           !(c->backend->flags & RLOCK__BK_ONE_COPY)))
        o->mode = 't';
    o->fresh = o->mode != 'r';
    o->a.owner = o->who;
    o->a.owner_len =
        lay->owner(c, o->owner.no, o->fresh ? *o->nonce_io : o->a.id, o->who);
    o->a.lease_ms = m->lease_ms;
    o->a.mode = o->mode;
    o->a.nonce = *o->nonce_io;
    o->a.waiter_ttl_ms = c->opts.waiter_ttl_ms;
    o->a.who = c->who + 1; /* "host/pid" */
    /* The fast form while the name is calm: one server, a fresh attempt.
     * If it cannot decide (the lock busy, waiters, a counter to seed), it
     * did nothing and the full form follows in the same call. Its lean
     * variant draws no token: taken for a mutex whose callers have never
     * asked for one (rlock__token draws it if they do). */
    o->a.fast = o->fresh && (lay->flags & RLOCK__LAY_FAST) &&
                (c->backend->flags & RLOCK__BK_ONE_COPY) &&
                __atomic_load_n(&m->calm, __ATOMIC_RELAXED);
    o->a.fenced = !lay->fence || __atomic_load_n(&m->fenced, __ATOMIC_RELAXED);
    o->stage = ATT_SEND;
    return GO_ON;
}

/* A re-entry on one server (the counts are Redis's) was answered. It
 * needs no undo: counts are set, not added, so the owner's next request
 * makes Redis agree with it again; but a hold told lost meanwhile that
 * Redis has just renewed is given back (1). */
static int reentry_read(rlock__attempt_op *o)
{
    rlock_mutex *m = o->m;
    rlock_client *c = m->c;
    rlock__call *call = o->call;
    tally *t = &o->t;
    rlock__results *res = &o->s.res;
    rlock__hold *h;
    int lost = 0;

    if (t->gone) {
        pthread_mutex_lock(&c->mu);
        if ((h = rlock__hold_by_serial(&c->holds, o->serial)) != NULL)
            rlock__hold_remove(&c->holds, h);
        rlock__hold_settled(c, o->serial);
        pthread_mutex_unlock(&c->mu);
        o->rc = rlock__fail(call, RLOCK_ELOST,
                            "re-entry found the hold gone (expired or "
                            "taken)");
    } else if (t->held &&
               rlock__now_ns() - o->t0 >= m->lease_ms * RLOCK__NS_PER_MS) {
        /* Too late to believe; the hold keeps the lease it had, or the one
         * this set, if that ends sooner. */
        if (o->hint_ms)
            *o->hint_ms = 0;
        o->rc = rlock__fail(call, RLOCK_EBUSY,
                            "reply arrived after the lease had ended");
        reentry_done(m, o->serial, t, o->t0);
    } else if (t->held && res->r[0].acks < m->replicas) {
        /* Done on the master, but a failover now could undo it: the lease
         * end as counted stays where it was (or sooner). */
        o->rc = rlock__fail(call, RLOCK_EREPLICAS,
                            "re-entry: %lld of %d replicas acknowledged "
                            "within %d ms; the hold is kept, not re-entered",
                            res->r[0].acks < 0 ? 0 : res->r[0].acks,
                            m->replicas, c->opts.sync_timeout_ms);
        reentry_done(m, o->serial, t, o->t0);
    } else if (t->held) {
        pthread_mutex_lock(&c->mu);
        h = rlock__hold_by_serial(&c->holds, o->serial);
        if (h && h->lost) {
            /* Told lost already (its lease, as counted, ran out while
             * this waited): it stays lost. */
            rlock__hold_remove(&c->holds, h);
            lost = 1;
        } else {
            o->rc = rlock__hold_record(call, m, o->owner, t->token, o->a.id,
                                       t->count, o->t0, m->lease_ms);
        }
        rlock__hold_settled(c, o->serial);
        pthread_mutex_unlock(&c->mu);
        if (lost) {
            /* Redis has just renewed what its owner gave up: give it
             * back, so that it does not stand in the way for a lease. */
            o->rc = rlock__fail(call, RLOCK_ELOST,
                                "the hold was reported lost before the "
                                "re-entry was confirmed");
        }
    } else {
        o->rc = not_held(call, m, t, res, o->hint_ms);
        reentry_done(m, o->serial, t, o->t0);
    }
    rlock__results_free(res);
    rlock__req_free(&o->s.req);
    return lost;
}

/* A fresh attempt's answers counted (and agreed on, over copies): a hold
 * recorded (1: its check follows), or why not, with what it may have
 * taken given back (2: an undo follows), or neither (0). */
static int attempt_decide(rlock__attempt_op *o)
{
    rlock_mutex *m = o->m;
    rlock_client *c = m->c;
    rlock__call *call = o->call;
    tally *t = &o->t;
    int64_t valid_until;
    int rc;

    valid_until = o->t0 + m->lease_ms * RLOCK__NS_PER_MS -
                  c->backend->margin_ns(c, m->lease_ms);
    if (t->other_list) {
        /* A node holds the lock for a client that lists another number
         * of nodes. Majorities of two such lists need not share a node,
         * so even a majority of ours proves nothing: what this attempt
         * took is given back. */
        rc = rlock__fail(call, RLOCK_EINVAL,
                         "the lock is held through a node list of %d nodes, "
                         "and this client's has %d: every client of a lock "
                         "must use the same node list",
                         t->other_list, c->nnodes);
    } else if (t->held >= c->quorum && rlock__now_ns() < valid_until) {
        pthread_mutex_lock(&c->mu);
        /* Where the client counts re-entries, Redis's count is not the
         * hold's. */
        rc = rlock__hold_record(call, m, o->owner, t->token, o->a.nonce,
                                m->counts_here ? 1 : t->count, o->t0,
                                m->lease_ms);
        pthread_mutex_unlock(&c->mu);
        if (rc == RLOCK_OK) {
            rlock__results_free(&o->s.res);
            rlock__req_free(&o->s.req);
            return 1;
        }
    } else if (t->held >= c->quorum) {
        /* The answer came after the lease would have ended (a pause, a
         * stalled network): the hold may already belong to someone else,
         * so it is not reported as ours. */
        if (o->hint_ms)
            *o->hint_ms = 0;
        rc = rlock__fail(call, RLOCK_EBUSY,
                         "reply arrived after the lease had ended (%" PRId64
                         " ms)",
                         (rlock__now_ns() - o->t0) / RLOCK__NS_PER_MS);
    } else {
        rc = not_held(call, m, t, &o->s.res, o->hint_ms);
    }
    o->rc = rc;
    rlock__results_free(&o->s.res);
    rlock__req_free(&o->s.req);
    /* Not a hold, but some node may hold it for us, or may have queued
     * us where the answer was lost: undo it, under this nonce. */
    if (t->held > 0 || t->unknown > 0) {
        rlock__undo_op_init(&o->in.undo, call->deadline_ns, m, o->owner,
                            *o->nonce_io);
        *o->nonce_io = rlock__new_nonce(c);
        return 2;
    }
    return 0;
}

int rlock__attempt_step(rlock__attempt_op *o, rlock__slot **slot)
{
    rlock_mutex *m = o->m;
    const rlock__layout *lay = m->layout;
    int r;

    switch (o->stage) {
    case ATT_BEGIN:
        if ((r = attempt_begin(o)) != GO_ON)
            return r;
        return rlock__attempt_step(o, slot);
    case ATT_REENTER:
        if ((r = rlock__extend_step(&o->in.extend, slot)) != RLOCK__STEP_DONE)
            return r;
        rlock__reenter_done(&o->in.extend);
        o->rc = o->in.extend.rc;
        return RLOCK__STEP_DONE;
    case ATT_SEND:
        lay->acquire(m, &o->a, &o->s.req);
        /* A re-entry sets the lease: with m's replicas, their WAIT goes
         * in the same round trip. */
        if (!o->fresh)
            o->s.req.replicas = m->replicas;
        o->s.flags = 0;
        o->s.call = o->call;
        o->t0 = rlock__now_ns();
        o->stage = ATT_SENT;
        *slot = &o->s;
        return RLOCK__STEP_SEND;
    case ATT_SENT:
        if ((o->rc = o->s.rc) != RLOCK_OK) {
            rlock__req_free(&o->s.req);
            if (!o->fresh)
                reentry_done(m, o->serial, NULL, 0);
            return RLOCK__STEP_DONE;
        }
        tally_answers(m, &o->a, o->s.req.script->name, &o->s.res, &o->t);
        if (o->a.fast && o->t.again) {
            __atomic_store_n(&m->calm, 0, __ATOMIC_RELAXED);
            rlock__results_free(&o->s.res);
            rlock__req_free(&o->s.req);
            o->a.fast = 0;
            o->stage = ATT_SEND;
            return rlock__attempt_step(o, slot);
        }
        /* The full form found the lock free with nobody queued: calm
         * again. */
        if (!o->a.fast && o->fresh && o->t.plain &&
            (lay->flags & RLOCK__LAY_FAST))
            __atomic_store_n(&m->calm, 1, __ATOMIC_RELAXED);
        if (!o->fresh) {
            if (!reentry_read(o))
                return RLOCK__STEP_DONE;
            rlock__undo_op_init(&o->in.undo, o->call->deadline_ns, m, o->owner,
                                o->a.id);
            o->stage = ATT_UNDO;
            return rlock__attempt_step(o, slot);
        }
        if (o->t.held >= m->c->quorum && !o->t.other_list &&
            retoken(m, o->who, o->a.owner_len, o->a.nonce, &o->t,
                    &o->in.again)) {
            o->in.again.flags = 0;
            o->in.again.call = o->call;
            o->stage = ATT_RETOKEN;
            *slot = &o->in.again;
            return RLOCK__STEP_SEND;
        }
        goto decide;
    case ATT_RETOKEN:
        retoken_read(&o->t, &o->in.again);
    decide:
        switch (attempt_decide(o)) {
        case 1:
            rlock__keep_op_init(&o->in.keep, o->call, m, o->owner);
            o->stage = ATT_KEEP;
            return rlock__attempt_step(o, slot);
        case 2:
            o->stage = ATT_UNDO;
            return rlock__attempt_step(o, slot);
        }
        return RLOCK__STEP_DONE;
    case ATT_KEEP:
        if ((r = rlock__keep_step(&o->in.keep, slot)) != RLOCK__STEP_DONE)
            return r;
        if ((o->rc = o->in.keep.rc) != RLOCK_OK) {
            /* Given back under this nonce: spent, so that a wait that
             * goes on (after a failover) cannot have the give-back remove
             * what its next attempts take. */
            if (o->hint_ms && o->rc == RLOCK_EBUSY)
                *o->hint_ms = 0;
            *o->nonce_io = rlock__new_nonce(m->c);
        }
        return RLOCK__STEP_DONE;
    case ATT_UNDO:
        return rlock__undo_step(&o->in.undo, slot);
    }
    return RLOCK__STEP_DONE;
}

int rlock__attempt(rlock__call *call, rlock_mutex *m, rlock__as owner,
                   char mode, uint64_t *nonce_io, int64_t *hint_ms)
{
    rlock__attempt_op o;

    rlock__attempt_op_init(&o, call, m, owner, mode, nonce_io, hint_ms);
    rlock__run(call, m, owner, (rlock__step_fn)rlock__attempt_step, &o);
    return o.rc;
}
