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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "bg/bg.h"
#include "bg/events.h"
#include "core/handles.h"
#include "engine/engine.h"
#include "engine/hold_ops.h"
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
 * waits for a renewal or another extension in flight, and keeps renewals
 * off the hold until it is done (*extending: the hold's serial, for
 * rlock__hold_settled), so that the last lease Redis set is the one the
 * client records (rlock__hold_quiet). */
static int own_hold(rlock__call *call, rlock_mutex *m, rlock__as owner,
                    uint64_t *id, uint64_t *token, int64_t *count,
                    int *unknown, uint64_t *extending)
{
    rlock_client *c = m->c;
    rlock__hold *h;
    int late = 0;

    pthread_mutex_lock(&c->mu);
    h = extending ? rlock__hold_quiet(call, m, owner.no, &late)
                  : rlock__hold_find(&c->holds, m, owner.no);
    if (late) {
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

int rlock__release(rlock__call *call, rlock_mutex *m, rlock__as owner)
{
    rlock_client *c = m->c;
    char who[RLOCK__OWNER_MAX];
    rlock__results res;
    rlock__req req;
    rlock__hold *h;
    uint64_t id = 0, token = 0;
    int64_t count = 0, remaining = 0;
    int released = 0, gone = 0, unsure = 0, i, rc, unknown = 0, fast;
    const rlock__script *cad;
    char unnotified[200] = "";

    if ((rc = own_hold(call, m, owner, &id, &token, &count, &unknown, NULL)) !=
        RLOCK_OK)
        return rc;
    if (count > 1 && m->counts_here) {
        pthread_mutex_lock(&c->mu);
        if ((h = rlock__hold_find(&c->holds, m, owner.no)) != NULL) {
            h->count--;
            rlock__report_release(m, h, h->count);
        }
        pthread_mutex_unlock(&c->mu);
        return RLOCK_OK;
    }
    /* The last level of a calm name goes in the fast form: a server's own
     * compare-and-delete where it has one, else the fast script. If
     * waiters may be queued behind it, that did nothing, and the full
     * form, which hands the lock over, follows in the same call. */
    fast = count == 1 && (m->layout->flags & RLOCK__LAY_FAST) &&
           (c->backend->flags & RLOCK__BK_ONE_COPY) &&
           __atomic_load_n(&m->calm, __ATOMIC_RELAXED);
    cad = fast ? cad_form(c, m->layout) : NULL;
    for (;;) {
        int again = 0, refused = 0;
        size_t len = m->layout->owner(c, owner.no, id, who);

        if (cad)
            m->layout->release_cad_add(cad, m, who, len, id, token, &req);
        else
            m->layout->release(m, who, len, id, count, fast, &req);
        rc = rlock__send(call, m, &req, 0, &res);
        for (i = 0; rc == RLOCK_OK && i < res.n; i++) {
            rlock__result *r = &res.r[i];
            rlock__released out;
            if (r->rc != RLOCK_OK) {
                unsure += rlock__result_unknown(r);
                continue;
            }
            if (cad) {
                int d = rlock__parse_cad(r->nreplies == 1 ? r->replies[0]
                                                          : NULL);
                if (d == RLOCK__CAD_DELETED) {
                    released++;
                    remaining = 0;
                } else {
                    /* Not that value (or gone), another error: the full
                     * form decides; or not a command this server has. */
                    *(d == RLOCK__CAD_REFUSED ? &refused : &again) += 1;
                }
                continue;
            }
            if (m->layout->decode_release(r->reply, &out) != RLOCK_OK ||
                (out.remaining == RLOCK__RELEASE_AGAIN && !fast)) {
                r->rc = rlock__err_set(&r->err, RLOCK_EPROTO,
                                       "unexpected reply to the %s script",
                                       req.script->name);
                unsure++;
                continue;
            }
            if (out.remaining == RLOCK__RELEASE_AGAIN) {
                again++;
                continue;
            }
            if (out.remaining < 0) {
                gone++;
                continue;
            }
            released++;
            remaining = out.remaining;
            if (out.unnotified[0] && !unnotified[0])
                snprintf(unnotified, sizeof unnotified, "%s", out.unnotified);
        }
        if (rc != RLOCK_OK || (!again && !refused))
            break;
        rlock__results_free(&res);
        rlock__req_free(&req);
        if (refused) {
            /* The next command this server may know, or the fast script. */
            cad = cad_refused(c, m->layout, cad);
            continue;
        }
        __atomic_store_n(&m->calm, 0, __ATOMIC_RELAXED);
        fast = 0;
        cad = NULL;
    }
    if (rc == RLOCK_OK && gone > c->nnodes - c->quorum) {
        /* Redis no longer has this hold. If an earlier try of this last
         * level may have gone through, it is that try that released it. */
        char where[64];
        if (!(unknown && count == 1))
            rc = rlock__fail(call, RLOCK_ELOST,
                             "the hold had expired or was taken by another "
                             "owner%s; nothing was released",
                             rlock__on_nodes(c, gone, where, sizeof where));
        remaining = 0;
    } else if (rc == RLOCK_OK && released + gone < c->quorum) {
        rc = c->backend->failure(c, "release", released, &res, NULL, call);
    }

    pthread_mutex_lock(&c->mu);
    h = rlock__hold_find(&c->holds, m, owner.no);
    if (rc != RLOCK_OK && rc != RLOCK_ELOST) {
        if (h) {
            h->releasing = 0;
            /* Redis may have released it: calling again is safe (counts
             * are set, not subtracted), and if the hold is gone then, it
             * is this call that released it. */
            if (unsure && count == 1)
                h->release_unknown = 1;
        }
    } else if (rc == RLOCK_ELOST || remaining == 0) {
        if (h && rc == RLOCK_ELOST)
            rlock__hold_lost(c, h, RLOCK_LOST_GONE,
                             "its release found it gone in Redis");
        else if (h)
            rlock__report_release(m, h, 0);
        if (h)
            rlock__hold_remove(&c->holds, h);
    } else if (h) {
        h->count = remaining;
        h->releasing = 0;
        rlock__report_release(m, h, remaining);
    }
    pthread_mutex_unlock(&c->mu);
    if (rc == RLOCK_OK && remaining == 0 && unnotified[0])
        rc = rlock__fail(call, RLOCK_ENOTIFY,
                         "released; its waiters were not notified and "
                         "wake by their own timers: %s",
                         unnotified);
    rlock__results_free(&res);
    rlock__req_free(&req);
    return rc;
}

/* Sets owner's lease of m to lease_ms from now; with m's replicas, WAITs
 * for them in the same round trip, and too few acknowledgements make it
 * RLOCK_EREPLICAS (what_done says what became of the hold) with the lease
 * end as we count it left where it was. */
static int extend_hold(rlock__call *call, rlock_mutex *m, rlock__as owner,
                       int64_t lease_ms, const char *what,
                       const char *what_done)
{
    rlock_client *c = m->c;
    char who[RLOCK__OWNER_MAX];
    rlock__results res;
    rlock__req req;
    rlock__hold *h;
    uint64_t id = 0, token = 0;
    int64_t count, t0, margin, valid_until, counted = lease_ms;
    uint64_t serial = 0;
    int extended = 0, gone = 0, unanswered = 0, give_back = 0, i, rc;
    long long acks = 0;

    if ((rc = own_hold(call, m, owner, &id, &token, &count, NULL, &serial)) !=
        RLOCK_OK)
        return rc;
    m->layout->extend(m, who, m->layout->owner(c, owner.no, id, who), id, token,
                      lease_ms, &req);
    req.replicas = m->replicas;
    margin = c->backend->margin_ns(c, lease_ms);
    t0 = rlock__now_ns();
    valid_until = t0 + lease_ms * RLOCK__NS_PER_MS - margin;
    rc = rlock__send(call, m, &req, 0, &res);
    for (i = 0; rc == RLOCK_OK && i < res.n; i++) {
        int ok;
        if (res.r[i].rc != RLOCK_OK) {
            unanswered |= rlock__result_unknown(&res.r[i]);
            continue;
        }
        if (rlock__parse_extend(res.r[i].reply, &ok) != RLOCK_OK) {
            res.r[i].rc = rlock__err_set(&res.r[i].err, RLOCK_EPROTO,
                                         "unexpected reply to the %s script",
                                         req.script->name);
            continue;
        }
        *(ok ? &extended : &gone) += 1;
        if (i == 0)
            acks = res.r[i].acks;
    }
    if (rc == RLOCK_OK && extended < c->quorum && gone <= c->nnodes - c->quorum)
        rc = c->backend->failure(c, what, extended, &res, NULL, call);
    /* Extended on the master, but a failover now could undo it. */
    if (rc == RLOCK_OK && extended >= c->quorum && acks < m->replicas) {
        if (acks < 0)
            rc = rlock__fail(call, RLOCK_EREPLICAS, "%s: WAIT failed on %s; %s",
                             what, c->where, what_done);
        else
            rc = rlock__fail(call, RLOCK_EREPLICAS,
                             "%s: %lld of %d replicas acknowledged within "
                             "%d ms; %s",
                             what, acks, m->replicas, c->opts.sync_timeout_ms,
                             what_done);
    }

    pthread_mutex_lock(&c->mu);
    h = rlock__hold_by_serial(&c->holds, serial);
    rlock__hold_settled(c, serial);
    if (h && rc == RLOCK_OK && extended >= c->quorum) {
        /* Counted no longer than an unanswered request may set. */
        counted = rlock__hold_countable(h, lease_ms);
        valid_until = t0 + counted * RLOCK__NS_PER_MS -
                      c->backend->margin_ns(c, counted);
    }
    if (h && unanswered)
        rlock__hold_owe(h, lease_ms);
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
        h->cur_lease_ms = lease_ms;
        if (counted < c->shortest_lease_ms)
            c->shortest_lease_ms = counted;
        if (!h->watchdog)
            h->lease_ms = lease_ms; /* the caller's latest wish */
        if (h->watchdog)
            h->renew_at =
                rlock__hold_renew_due(h, t0 + counted * RLOCK__NS_PER_MS / 3);
        rlock__bg_kick(c);
    }
    pthread_mutex_unlock(&c->mu);
    rlock__results_free(&res);
    rlock__req_free(&req);
    if (give_back) {
        /* Within what is left of this call; else in the background, behind
         * the request on a connection that still owes its answer. */
        rlock__call undo;
        rlock__call_init(&undo, call->deadline_ns);
        rlock__undo(&undo, m, owner, id, 1);
    }
    return rc;
}

int rlock__extend(rlock__call *call, rlock_mutex *m, rlock__as owner,
                  int64_t lease_ms)
{
    int rc = extend_hold(call, m, owner, lease_ms, "extend",
                         "the lease end this client counts with is "
                         "unchanged");

    if (rc == RLOCK_OK)
        rlock__report_extend(m, owner, lease_ms);
    return rc;
}

int rlock__reenter_counted(rlock__call *call, rlock_mutex *m, rlock__as owner)
{
    rlock_client *c = m->c;
    rlock__hold *h;
    int rc;

    /* The client counts the levels and Redis sees one hold: the lease is
     * set again to the mutex's, as a re-entry Redis counts sets it. */
    rc = extend_hold(call, m, owner, m->lease_ms, "re-entry",
                     "the hold is kept, not re-entered");
    if (rc != RLOCK_OK)
        return rc;
    pthread_mutex_lock(&c->mu);
    if ((h = rlock__hold_find(&c->holds, m, owner.no)) != NULL)
        h->count++;
    pthread_mutex_unlock(&c->mu);
    return RLOCK_OK;
}

/* Forgets owner's hold of m taken by nonce, if it is still the one in the
 * table, and gives it back to Redis within the call's deadline (else in
 * the background). */
static void give_back_new(rlock__call *call, rlock_mutex *m, rlock__as owner,
                          uint64_t nonce)
{
    rlock_client *c = m->c;
    rlock__hold *h;
    rlock__call undo;

    pthread_mutex_lock(&c->mu);
    h = rlock__hold_find(&c->holds, m, owner.no);
    if (h && h->nonce == nonce)
        rlock__hold_remove(&c->holds, h);
    pthread_mutex_unlock(&c->mu);
    rlock__call_init(&undo, call->deadline_ns);
    rlock__undo(&undo, m, owner, nonce, 1);
}

int rlock__keep_new_hold(rlock__call *call, rlock_mutex *m, rlock__as owner)
{
    rlock_client *c = m->c;
    rlock__hold *h;
    uint64_t nonce;
    int64_t left;
    int rc, renew;
    rlock__err why;

    pthread_mutex_lock(&c->mu);
    h = rlock__hold_find(&c->holds, m, owner.no);
    if (!h) {
        pthread_mutex_unlock(&c->mu);
        return rlock__fail(call, RLOCK_EBUSY,
                           "the lock was taken, then forgotten before the "
                           "call could return it");
    }
    nonce = h->nonce;
    left = h->valid_until - rlock__now_ns();
    if (h->lost || left <= 0) {
        /* Never returned as held, so never reported: given back. */
        pthread_mutex_unlock(&c->mu);
        give_back_new(call, m, owner, nonce);
        return rlock__fail(call, RLOCK_EBUSY,
                           "the lock was taken, but its lease as this "
                           "client counts it ended before the call could "
                           "return it; it was given back");
    }
    /* With the mutex's replicas: a write of our own (the lease set again)
     * behind which WAIT counts; replication keeps order, so a replica
     * that has it has the acquisition or grant too, whichever connection
     * wrote that. Without, a hold with less than a third of the lease
     * Redis set left (a grant found late, a round trip nearly as long as
     * the lease: past the point where the watchdog would renew it) is
     * renewed before it is returned: a call returns a hold with lease
     * left, never one about to end. */
    renew =
        m->replicas > 0 ||
        left < rlock__hold_countable(h, h->cur_lease_ms) * RLOCK__NS_PER_MS / 3;
    if (!renew)
        h->unreturned = 0; /* the caller's from now on */
    pthread_mutex_unlock(&c->mu);
    if (!renew)
        return RLOCK_OK;
    rc = extend_hold(call, m, owner, m->lease_ms, "acquire",
                     "the lock was released again");
    if (rc == RLOCK_OK) {
        /* Renewed; still held as the call returns. */
        pthread_mutex_lock(&c->mu);
        h = rlock__hold_find(&c->holds, m, owner.no);
        if (h && h->nonce == nonce && !h->lost &&
            h->valid_until > rlock__now_ns()) {
            h->unreturned = 0;
            pthread_mutex_unlock(&c->mu);
            return RLOCK_OK;
        }
        pthread_mutex_unlock(&c->mu);
        rc = RLOCK_ELOST;
    }
    why = call->err;
    if (rc == RLOCK_ELOST) {
        /* Gone, or lost while renewed (given back by extend_hold). */
        give_back_new(call, m, owner, nonce);
        return rlock__fail(call, RLOCK_EBUSY,
                           "the lock was taken, but lost before the call "
                           "could return it (%s)",
                           why.msg);
    }
    /* Not safely held: given back (to the next waiter, if any). The
     * call's detail stays the one that says why. */
    give_back_new(call, m, owner, nonce);
    call->err = why;
    return rc;
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
