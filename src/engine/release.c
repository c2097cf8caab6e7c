/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Release and extend, for every layout and backend; the replica check of
 * a new hold; forgetting a hold without Redis.
 *
 * Both count the nodes' answers against the quorum as an acquisition
 * does: a release is done when a quorum no longer has the hold (released
 * or found gone), and a loss when more nodes than the quorum allows found
 * it gone; an extension holds when a quorum set the new lease within its
 * validity. Where the layout counts re-entries in Redis, each level is a
 * round trip with the count the owner holds (set, not subtracted, so a
 * retry after a lost reply never releases twice); where the client counts
 * them, only the last level reaches Redis.
 */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "bg/bg.h"
#include "bg/events.h"
#include "core/handles.h"
#include "engine/engine.h"
#include "engine/hold_ops.h"
#include "engine/ops.h"
#include "layout/layout.h"
#include "util/clock.h"

/* Who "this" is in messages. */
static const char *whose(rlock__as owner)
{
    return owner.obj ? "this owner" : "this thread";
}

/* Looks up owner's hold for unlock/extend. On RLOCK_OK what the layout
 * knows the hold by, its token and its count are in *id, *token (if not
 * NULL) and *count and mu is released. An extend (extending not NULL)
 * waits for a renewal or another extension in flight (RLOCK_OK with
 * *quiet set: the op steps again after it), and keeps renewals off the
 * hold until it is done (*extending: the hold's serial, for
 * rlock__hold_settled), so that the last lease Redis set is the one the
 * client records (rlock__hold_quiet). */
static int own_hold(rlock__call *call, rlock_mutex *m, rlock__as owner,
                    uint64_t *id, uint64_t *token, int64_t *count, int *unknown,
                    uint64_t *extending, int *quiet)
{
    rlock_client *c = m->c;
    rlock__hold *h;
    int wait = 0;

    pthread_mutex_lock(&c->mu);
    h = extending ? rlock__hold_quiet_now(call, m, owner.no, &wait)
                  : rlock__hold_find(&c->holds, m, owner.no);
    if (wait > 0) {
        /* Stepped again once the request in flight ended. */
        pthread_mutex_unlock(&c->mu);
        *quiet = 1;
        return RLOCK_OK;
    }
    if (wait < 0) {
        pthread_mutex_unlock(&c->mu);
        return rlock__fail(call, RLOCK_ENOREPLY,
                           "a renewal of the hold did not end within the "
                           "call's deadline");
    }
    if (!h) {
        pthread_mutex_unlock(&c->mu);
        return rlock__fail(call, RLOCK_ENOTOWNER,
                           "%s holds no lock of this name", whose(owner));
    }
    if (h->lost) {
        rlock__hold_remove(&c->holds, h);
        pthread_mutex_unlock(&c->mu);
        return rlock__fail(call, RLOCK_ELOST,
                           "the hold was lost before this call");
    }
    /* The lease as this client counts it (from the moment the last
     * acquisition or renewal that Redis confirmed was sent) is over: Redis
     * may have given the lock to someone else already, whatever a reply
     * still on its way would say. The background reports it too; this
     * call need not wait for that. */
    if (h->valid_until <= rlock__now_ns()) {
        /* on_lost, as the background would */
        rlock__bg_lose(c, h, RLOCK_LOST_EXPIRED,
                       "its lease as counted ended (found by a call of "
                       "its owner)");
        rlock__hold_remove(&c->holds, h);
        pthread_mutex_unlock(&c->mu);
        return rlock__fail(call, RLOCK_ELOST,
                           "the hold's lease ended before this call, with "
                           "no renewal confirmed in time");
    }
    *id = h->nonce;
    if (token)
        *token = h->token;
    *count = h->count;
    if (unknown)
        *unknown = h->release_unknown;
    if (extending) {
        h->extending = 1;
        *extending = h->serial;
    } else if (h->count == 1)
        h->releasing = 1;
    pthread_mutex_unlock(&c->mu);
    return RLOCK_OK;
}

/* After a server said it knows none of the layout's compare-and-delete
 * commands, the release scripts alone for this long; then they are tried
 * again (an upgrade, a failover to a newer server). */
#define CAD_PAUSE_NS (60 * 1000 * RLOCK__NS_PER_MS)

/* The compare-and-delete command to try first for a calm last level, or
 * NULL (the layout has none, or the servers knew none lately). */
static const rlock__script *cad_form(rlock_client *c, const rlock__layout *lay)
{
    int64_t paused;

    if (!lay->release_cad)
        return NULL;
    /* The clock is read only while a pause was ever set. */
    paused = __atomic_load_n(&c->cad_paused_until, __ATOMIC_RELAXED);
    if (paused && rlock__now_ns() < paused)
        return NULL;
    return lay->release_cad[__atomic_load_n(&c->cad_form, __ATOMIC_RELAXED)];
}

/* A server refused form f: the next form (returned), or, after the last,
 * none for CAD_PAUSE_NS (NULL: the release script follows). */
static const rlock__script *cad_refused(rlock_client *c,
                                        const rlock__layout *lay,
                                        const rlock__script *f)
{
    int i = 0;

    while (lay->release_cad[i] && lay->release_cad[i] != f)
        i++;
    if (lay->release_cad[i] && lay->release_cad[i + 1]) {
        __atomic_store_n(&c->cad_form, i + 1, __ATOMIC_RELAXED);
        return lay->release_cad[i + 1];
    }
    __atomic_store_n(&c->cad_form, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&c->cad_paused_until, rlock__now_ns() + CAD_PAUSE_NS,
                     __ATOMIC_RELAXED);
    return NULL;
}

void rlock__release_op_init(rlock__release_op *r, rlock__call *call,
                            rlock_mutex *m, rlock__as owner)
{
    /* All but the request's slot, which the step fills: a release is
     * made often. */
    memset(r, 0, offsetof(rlock__release_op, s));
    r->call = call;
    r->m = m;
    r->owner = owner;
}

/* Where a release is. */
enum { REL_BEGIN, REL_SEND, REL_SENT };

/* Reads one round's answers; 1: another form follows (cad or fast said
 * "again", or a server did not know the command). */
static int release_count(rlock__release_op *r)
{
    rlock_mutex *m = r->m;
    rlock__results *res = &r->s.res;
    int i;

    r->again = r->refused = 0;
    for (i = 0; r->rc == RLOCK_OK && i < res->n; i++) {
        rlock__result *x = &res->r[i];
        rlock__released out;
        if (x->rc != RLOCK_OK) {
            r->unsure += rlock__result_unknown(x);
            continue;
        }
        if (r->cad) {
            int d = rlock__parse_cad(x->nreplies == 1 ? x->replies[0] : NULL);
            if (d == RLOCK__CAD_DELETED) {
                r->released++;
                r->remaining = 0;
            } else {
                /* Not that value (or gone), another error: the full form
                 * decides; or not a command this server has. */
                *(d == RLOCK__CAD_REFUSED ? &r->refused : &r->again) += 1;
            }
            continue;
        }
        if (m->layout->decode_release(x->reply, &out) != RLOCK_OK ||
            (out.remaining == RLOCK__RELEASE_AGAIN && !r->fast)) {
            x->rc = rlock__err_set(&x->err, RLOCK_EPROTO,
                                   "unexpected reply to the %s script",
                                   r->s.req.script->name);
            r->unsure++;
            continue;
        }
        if (out.remaining == RLOCK__RELEASE_AGAIN) {
            r->again++;
            continue;
        }
        if (out.remaining < 0) {
            r->gone++;
            continue;
        }
        r->released++;
        r->remaining = out.remaining;
        if (out.unnotified[0] && !r->unnotified[0])
            snprintf(r->unnotified, sizeof r->unnotified, "%s", out.unnotified);
    }
    return r->rc == RLOCK_OK && (r->again || r->refused);
}

/* The release is over: the hold table as Redis has it now. */
static void release_end(rlock__release_op *r)
{
    rlock_mutex *m = r->m;
    rlock_client *c = m->c;
    rlock__call *call = r->call;
    rlock__hold *h;
    int rc = r->rc;

    if (rc == RLOCK_OK && r->gone > c->nnodes - c->quorum) {
        /* Redis no longer has this hold. If an earlier try of this last
         * level may have gone through, it is that try that released it. */
        char where[64];
        if (!(r->unknown && r->count == 1))
            rc = rlock__fail(call, RLOCK_ELOST,
                             "the hold had expired or was taken by another "
                             "owner%s; nothing was released",
                             rlock__on_nodes(c, r->gone, where, sizeof where));
        r->remaining = 0;
    } else if (rc == RLOCK_OK && r->released + r->gone < c->quorum) {
        rc = c->backend->failure(c, "release", r->released, &r->s.res, NULL,
                                 call);
    }

    pthread_mutex_lock(&c->mu);
    h = rlock__hold_find(&c->holds, m, r->owner.no);
    if (rc != RLOCK_OK && rc != RLOCK_ELOST) {
        if (h) {
            h->releasing = 0;
            /* Redis may have released it: calling again is safe (counts
             * are set, not subtracted), and if the hold is gone then, it
             * is this call that released it. */
            if (r->unsure && r->count == 1)
                h->release_unknown = 1;
        }
    } else if (rc == RLOCK_ELOST || r->remaining == 0) {
        if (h && rc == RLOCK_ELOST)
            rlock__hold_lost(c, h, RLOCK_LOST_GONE,
                             "its release found it gone in Redis");
        else if (h)
            rlock__report_release(m, h, 0);
        if (h)
            rlock__hold_remove(&c->holds, h);
    } else if (h) {
        h->count = r->remaining;
        h->releasing = 0;
        rlock__report_release(m, h, r->remaining);
    }
    pthread_mutex_unlock(&c->mu);
    if (rc == RLOCK_OK && r->remaining == 0 && r->unnotified[0])
        rc = rlock__fail(call, RLOCK_ENOTIFY,
                         "released; its waiters were not notified and "
                         "wake by their own timers: %s",
                         r->unnotified);
    rlock__results_free(&r->s.res);
    rlock__req_free(&r->s.req);
    r->rc = rc;
}

int rlock__release_step(rlock__release_op *r, rlock__slot **slot)
{
    rlock_mutex *m = r->m;
    rlock_client *c = m->c;
    rlock__hold *h;
    int quiet = 0;
    size_t len;

    switch (r->stage) {
    case REL_BEGIN:
        r->rc = own_hold(r->call, m, r->owner, &r->id, &r->token, &r->count,
                         &r->unknown, NULL, &quiet);
        if (r->rc != RLOCK_OK)
            return RLOCK__STEP_DONE;
        if (r->count > 1 && m->counts_here) {
            pthread_mutex_lock(&c->mu);
            if ((h = rlock__hold_find(&c->holds, m, r->owner.no)) != NULL) {
                h->count--;
                rlock__report_release(m, h, h->count);
            }
            pthread_mutex_unlock(&c->mu);
            return RLOCK__STEP_DONE;
        }
        /* The last level of a calm name goes in the fast form: a server's
         * own compare-and-delete where it has one, else the fast script.
         * If waiters may be queued behind it, that did nothing, and the
         * full form, which hands the lock over, follows in the same
         * call. */
        r->fast = r->count == 1 && (m->layout->flags & RLOCK__LAY_FAST) &&
                  (c->backend->flags & RLOCK__BK_ONE_COPY) &&
                  __atomic_load_n(&m->calm, __ATOMIC_RELAXED);
        r->cad = r->fast ? cad_form(c, m->layout) : NULL;
        /* fall through */
    case REL_SEND:
        len = m->layout->owner(c, r->owner.no, r->id, r->who);
        if (r->cad)
            m->layout->release_cad_add(r->cad, m, r->who, len, r->id, r->token,
                                       &r->s.req);
        else
            m->layout->release(m, r->who, len, r->id, r->count, r->fast,
                               &r->s.req);
        r->s.flags = 0;
        r->s.call = r->call;
        r->stage = REL_SENT;
        *slot = &r->s;
        return RLOCK__STEP_SEND;
    case REL_SENT:
        r->rc = r->s.rc;
        if (release_count(r)) {
            rlock__results_free(&r->s.res);
            rlock__req_free(&r->s.req);
            if (r->refused) {
                /* The next command this server may know, or the fast
                 * script. */
                r->cad = cad_refused(c, m->layout, r->cad);
            } else {
                __atomic_store_n(&m->calm, 0, __ATOMIC_RELAXED);
                r->fast = 0;
                r->cad = NULL;
            }
            r->stage = REL_SEND;
            return rlock__release_step(r, slot);
        }
        release_end(r);
        return RLOCK__STEP_DONE;
    }
    return RLOCK__STEP_DONE;
}

int rlock__release(rlock__call *call, rlock_mutex *m, rlock__as owner)
{
    rlock__release_op r;

    rlock__release_op_init(&r, call, m, owner);
    rlock__run(call, m, owner, (rlock__step_fn)rlock__release_step, &r);
    return r.rc;
}

void rlock__extend_op_init(rlock__extend_op *e, rlock__call *call,
                           rlock_mutex *m, rlock__as owner, int64_t lease_ms,
                           const char *what, const char *what_done)
{
    e->call = call;
    e->m = m;
    e->owner = owner;
    e->lease_ms = lease_ms;
    e->what = what;
    e->what_done = what_done;
    e->stage = 0;
    e->rc = RLOCK_OK;
    e->serial = 0;
}

/* Where an extension is. */
enum { EXT_BEGIN, EXT_SENT, EXT_UNDO };

/* The extension's answers: the hold table as Redis has it now. 1: what
 * Redis set is nobody's and must be given back. */
static int extend_end(rlock__extend_op *e)
{
    rlock_mutex *m = e->m;
    rlock_client *c = m->c;
    rlock__call *call = e->call;
    rlock__results *res = &e->s.res;
    rlock__hold *h;
    int64_t counted = e->lease_ms, valid_until = e->valid_until;
    int extended = 0, gone = 0, unanswered = 0, give_back = 0, i;
    int rc = e->s.rc;
    long long acks = 0;

    for (i = 0; rc == RLOCK_OK && i < res->n; i++) {
        int ok;
        if (res->r[i].rc != RLOCK_OK) {
            unanswered |= rlock__result_unknown(&res->r[i]);
            continue;
        }
        if (rlock__parse_extend(res->r[i].reply, &ok) != RLOCK_OK) {
            res->r[i].rc = rlock__err_set(&res->r[i].err, RLOCK_EPROTO,
                                          "unexpected reply to the %s script",
                                          e->s.req.script->name);
            continue;
        }
        *(ok ? &extended : &gone) += 1;
        if (i == 0)
            acks = res->r[i].acks;
    }
    if (rc == RLOCK_OK && extended < c->quorum && gone <= c->nnodes - c->quorum)
        rc = c->backend->failure(c, e->what, extended, res, NULL, call);
    /* Extended on the master, but a failover now could undo it. */
    if (rc == RLOCK_OK && extended >= c->quorum && acks < m->replicas) {
        if (acks < 0)
            rc = rlock__fail(call, RLOCK_EREPLICAS, "%s: WAIT failed on %s; %s",
                             e->what, c->where, e->what_done);
        else
            rc = rlock__fail(call, RLOCK_EREPLICAS,
                             "%s: %lld of %d replicas acknowledged within "
                             "%d ms; %s",
                             e->what, acks, m->replicas,
                             c->opts.sync_timeout_ms, e->what_done);
    }

    pthread_mutex_lock(&c->mu);
    h = rlock__hold_by_serial(&c->holds, e->serial);
    rlock__hold_settled(c, e->serial);
    if (h && rc == RLOCK_OK && extended >= c->quorum) {
        /* Counted no longer than an unanswered request may set. */
        counted = rlock__hold_countable(h, e->lease_ms);
        valid_until = e->t0 + counted * RLOCK__NS_PER_MS -
                      c->backend->margin_ns(c, counted);
    }
    if (h && unanswered)
        rlock__hold_owe(h, e->lease_ms);
    if (rc != RLOCK_OK) {
        /* The lease may or may not have been changed: believe whichever
         * ends first. A hold reported lost while this waited is nobody's
         * now, whatever this set or may still set: it is given back. */
        if (h) {
            rlock__hold_may_end(h, valid_until, rlock__now_ns());
            rlock__bg_kick(c);
            give_back = h->lost && (unanswered || extended > 0);
        }
    } else if (extended < c->quorum) {
        if (h) {
            rlock__hold_lost(c, h, RLOCK_LOST_GONE,
                             "an extension found it gone in Redis");
            rlock__hold_remove(&c->holds, h);
        }
        /* Some nodes may have extended it, or may yet: theirs goes too. */
        give_back = extended > 0 || unanswered;
        rc = rlock__fail(call, RLOCK_ELOST,
                         "the hold had expired or was taken by another "
                         "owner; nothing was extended");
    } else if (h && (h->lost || rlock__now_ns() >= valid_until)) {
        /* Told lost already (the old lease ran out while this call waited
         * for its reply), or confirmed only after the new lease, as we
         * count it, ended: it stays lost. Redis has just set a lease for
         * it that nobody owns: given back, or it would stand in the way
         * for the whole of that lease. */
        rc = rlock__fail(call, RLOCK_ELOST,
                         h->lost ? "the hold was reported lost before the "
                                   "extension was confirmed"
                                 : "the extension was confirmed only after "
                                   "its lease had ended");
        rlock__bg_lose(c, h, RLOCK_LOST_EXPIRED,
                       "an extension was confirmed only after its lease "
                       "had ended");
        rlock__hold_remove(&c->holds, h);
        give_back = 1;
    } else if (h) {
        h->valid_until = valid_until;
        h->cur_lease_ms = e->lease_ms;
        if (counted < c->shortest_lease_ms)
            c->shortest_lease_ms = counted;
        if (!h->watchdog)
            h->lease_ms = e->lease_ms; /* the caller's latest wish */
        if (h->watchdog)
            h->renew_at = rlock__hold_renew_due(
                h, e->t0 + counted * RLOCK__NS_PER_MS / 3);
        rlock__bg_kick(c);
    }
    pthread_mutex_unlock(&c->mu);
    rlock__results_free(res);
    rlock__req_free(&e->s.req);
    e->rc = rc;
    return give_back;
}

/*
 * Sets owner's lease of m to lease_ms from now; with m's replicas, WAITs
 * for them in the same round trip, and too few acknowledgements make it
 * RLOCK_EREPLICAS (what_done says what became of the hold) with the lease
 * end as we count it left where it was.
 */
int rlock__extend_step(rlock__extend_op *e, rlock__slot **slot)
{
    rlock_mutex *m = e->m;
    rlock_client *c = m->c;
    uint64_t token = 0;
    int64_t count;
    int quiet = 0;

    switch (e->stage) {
    case EXT_BEGIN:
        e->rc = own_hold(e->call, m, e->owner, &e->id, &token, &count, NULL,
                         &e->serial, &quiet);
        if (e->rc != RLOCK_OK)
            return RLOCK__STEP_DONE;
        if (quiet)
            return RLOCK__STEP_QUIET;
        m->layout->extend(m, e->who,
                          m->layout->owner(c, e->owner.no, e->id, e->who),
                          e->id, token, e->lease_ms, &e->s.req);
        e->s.req.replicas = m->replicas;
        e->s.flags = 0;
        e->s.call = e->call;
        e->t0 = rlock__now_ns();
        e->valid_until = e->t0 + e->lease_ms * RLOCK__NS_PER_MS -
                         c->backend->margin_ns(c, e->lease_ms);
        e->stage = EXT_SENT;
        *slot = &e->s;
        return RLOCK__STEP_SEND;
    case EXT_SENT:
        if (!extend_end(e))
            return RLOCK__STEP_DONE;
        /* Within what is left of this call; else in the background,
         * behind the request on a connection that still owes its
         * answer. */
        rlock__undo_op_init(&e->undo, e->call->deadline_ns, m, e->owner, e->id);
        e->stage = EXT_UNDO;
        /* fall through */
    case EXT_UNDO:
        return rlock__undo_step(&e->undo, slot);
    }
    return RLOCK__STEP_DONE;
}

int rlock__extend(rlock__call *call, rlock_mutex *m, rlock__as owner,
                  int64_t lease_ms)
{
    rlock__extend_op e;

    rlock__extend_op_init(&e, call, m, owner, lease_ms, "extend",
                          "the lease end this client counts with is "
                          "unchanged");
    rlock__run(call, m, owner, (rlock__step_fn)rlock__extend_step, &e);
    if (e.rc == RLOCK_OK)
        rlock__report_extend(m, owner, lease_ms);
    return e.rc;
}

void rlock__reenter_op_init(rlock__extend_op *e, rlock__call *call,
                            rlock_mutex *m, rlock__as owner)
{
    /* The client counts the levels and Redis sees one hold: the lease is
     * set again to the mutex's, as a re-entry Redis counts sets it. */
    rlock__extend_op_init(e, call, m, owner, m->lease_ms, "re-entry",
                          "the hold is kept, not re-entered");
}

void rlock__reenter_done(rlock__extend_op *e)
{
    rlock_client *c = e->m->c;
    rlock__hold *h;

    if (e->rc != RLOCK_OK)
        return;
    pthread_mutex_lock(&c->mu);
    if ((h = rlock__hold_find(&c->holds, e->m, e->owner.no)) != NULL)
        h->count++;
    pthread_mutex_unlock(&c->mu);
}

/* Forgets owner's hold of m taken by nonce, if it is still the one in the
 * table; u then gives it back to Redis within the call's deadline (else
 * in the background). */
static void give_back_new(rlock__call *call, rlock_mutex *m, rlock__as owner,
                          uint64_t nonce, rlock__undo_op *u)
{
    rlock_client *c = m->c;
    rlock__hold *h;

    pthread_mutex_lock(&c->mu);
    h = rlock__hold_find(&c->holds, m, owner.no);
    if (h && h->nonce == nonce)
        rlock__hold_remove(&c->holds, h);
    pthread_mutex_unlock(&c->mu);
    rlock__undo_op_init(u, call->deadline_ns, m, owner, nonce);
}

void rlock__keep_op_init(rlock__keep_op *k, rlock__call *call, rlock_mutex *m,
                         rlock__as owner)
{
    k->call = call;
    k->m = m;
    k->owner = owner;
    k->stage = 0;
    k->rc = RLOCK_OK;
}

/* Where a new hold's check is. */
enum { KEEP_BEGIN, KEEP_RENEW, KEEP_GIVE_BACK };

int rlock__keep_step(rlock__keep_op *k, rlock__slot **slot)
{
    rlock_mutex *m = k->m;
    rlock_client *c = m->c;
    rlock__call *call = k->call;
    rlock__hold *h;
    int64_t left;
    int renew, r;

    switch (k->stage) {
    case KEEP_BEGIN:
        pthread_mutex_lock(&c->mu);
        h = rlock__hold_find(&c->holds, m, k->owner.no);
        if (!h) {
            pthread_mutex_unlock(&c->mu);
            k->rc = rlock__fail(call, RLOCK_EBUSY,
                                "the lock was taken, then forgotten before "
                                "the call could return it");
            return RLOCK__STEP_DONE;
        }
        k->nonce = h->nonce;
        left = h->valid_until - rlock__now_ns();
        if (h->lost || left <= 0) {
            /* Never returned as held, so never reported: given back. */
            pthread_mutex_unlock(&c->mu);
            k->rc = rlock__fail(call, RLOCK_EBUSY,
                                "the lock was taken, but its lease as this "
                                "client counts it ended before the call "
                                "could return it; it was given back");
            give_back_new(call, m, k->owner, k->nonce, &k->in.undo);
            k->stage = KEEP_GIVE_BACK;
            return rlock__keep_step(k, slot);
        }
        /* With the mutex's replicas: a write of our own (the lease set
         * again) behind which WAIT counts; replication keeps order, so a
         * replica that has it has the acquisition or grant too, whichever
         * connection wrote that. Without, a hold with less than a third
         * of the lease Redis set left (a grant found late, a round trip
         * nearly as long as the lease: past the point where the watchdog
         * would renew it) is renewed before it is returned: a call
         * returns a hold with lease left, never one about to end. */
        renew = m->replicas > 0 ||
                left < rlock__hold_countable(h, h->cur_lease_ms) *
                           RLOCK__NS_PER_MS / 3;
        if (!renew)
            h->unreturned = 0; /* the caller's from now on */
        pthread_mutex_unlock(&c->mu);
        if (!renew)
            return RLOCK__STEP_DONE;
        rlock__extend_op_init(&k->in.extend, call, m, k->owner, m->lease_ms,
                              "acquire", "the lock was released again");
        k->stage = KEEP_RENEW;
        /* fall through */
    case KEEP_RENEW:
        if ((r = rlock__extend_step(&k->in.extend, slot)) != RLOCK__STEP_DONE)
            return r;
        k->rc = k->in.extend.rc;
        if (k->rc == RLOCK_OK) {
            /* Renewed; still held as the call returns. */
            pthread_mutex_lock(&c->mu);
            h = rlock__hold_find(&c->holds, m, k->owner.no);
            if (h && h->nonce == k->nonce && !h->lost &&
                h->valid_until > rlock__now_ns()) {
                h->unreturned = 0;
                pthread_mutex_unlock(&c->mu);
                return RLOCK__STEP_DONE;
            }
            pthread_mutex_unlock(&c->mu);
            k->rc = RLOCK_ELOST;
        }
        rlock__call_get(call, &k->why);
        if (k->rc == RLOCK_ELOST) {
            /* Gone, or lost while renewed (given back by the
             * extension). */
            k->rc = rlock__fail(call, RLOCK_EBUSY,
                                "the lock was taken, but lost before the "
                                "call could return it (%s)",
                                k->why.msg);
        }
        /* Not safely held: given back (to the next waiter, if any). The
         * call's detail stays the one that says why. */
        give_back_new(call, m, k->owner, k->nonce, &k->in.undo);
        k->stage = KEEP_GIVE_BACK;
        /* fall through */
    case KEEP_GIVE_BACK:
        return rlock__undo_step(&k->in.undo, slot);
    }
    return RLOCK__STEP_DONE;
}

void rlock__give_up(rlock_mutex *m, rlock__as owner)
{
    rlock_client *c = m->c;
    rlock__hold *h;

    pthread_mutex_lock(&c->mu);
    h = rlock__hold_find(&c->holds, m, owner.no);
    if (h && h->count > 1) {
        h->count--;
    } else if (h) {
        /* (Out of memory for the job too: its lease runs out.) */
        rlock__undo_hold_later(c, h);
        rlock__hold_remove(&c->holds, h);
    }
    pthread_mutex_unlock(&c->mu);
}

void rlock__forget(rlock_mutex *m, rlock__as owner)
{
    rlock_client *c = m->c;
    rlock__hold *h;

    pthread_mutex_lock(&c->mu);
    h = rlock__hold_find(&c->holds, m, owner.no);
    /* An inner level (a re-entry inside an outer hold) comes off the
     * client's count only: the outer hold is still wanted, and the
     * owner's next release sets Redis's count from the client's. */
    if (h && h->count > 1)
        h->count--;
    else if (h)
        rlock__hold_remove(&c->holds, h);
    pthread_mutex_unlock(&c->mu);
}
