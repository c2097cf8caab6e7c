/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Lease timers, run by the background work.
 *
 * Watchdog holds (lease_ms = 0) are renewed every third of their lease.
 * A hold handed over by a release may have been granted a shorter lease
 * than it asked for (no longer than its place in the queue had left); it
 * is topped up to its own lease at a third of the granted one, watchdog or
 * not, and that top-up does not count as a renewal.
 * All renewals that are due, or will be within half of that period, go
 * to Redis together, a thousand per script call: one round trip per tick
 * for every thousand locks the client holds. A renewal checks the owner
 * and what the layout knows the hold by (the acquisition's nonce, or the
 * token), so it can never revive a lock that was released or taken by
 * someone else. Over several nodes (Redlock) a hold is renewed when a
 * majority renewed it, and gone when a majority no longer has it.
 *
 * A hold whose lease end passes without a successful renewal (Redis
 * unreachable, the renewal cap reached, a fixed lease never extended) is
 * lost, and so is one that a renewal finds gone. A lost hold gets its
 * on_lost callback exactly once, on a notifier thread (notify.c), never
 * on the thread that renews, and its next call returns RLOCK_ELOST. The holds
 * of an owner the application freed are forgotten: no longer renewed, their
 * keys expire.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "bg/bg.h"
#include "bg/notify.h"
#include "bg/events.h"
#include "core/fork.h"
#include "core/reply.h"
#include "layout/layout.h"
#include "util/clock.h"

/* Most holds renewed by one script call. */
#define RENEW_BATCH 1000

typedef struct renewal {
    uint64_t serial;
    int64_t lease_ms;
    int replicas;                /* the mutex's sync_replicas */
    const rlock__layout *lay;
    const rlock__script *script; /* batches hold one script ... */
    int group;                   /* ... and one backend group */
    char *key;
    size_t key_len;
    char owner[RLOCK__OWNER_MAX];
    size_t owner_len;
    uint64_t id;    /* the hold's nonce */
    uint64_t token; /* the client's (0: not drawn) */
    int64_t count;  /* the count Redis keeps */
} renewal;

/* A third of the lease as the client counts it, or of the lease a
 * renewal sets if that is shorter (after an extension), so that renewing
 * early by half a period still leaves the lease end where it was. */
static int64_t period_ns(const rlock__hold *h)
{
    int64_t lease =
        h->cur_lease_ms < h->lease_ms ? h->cur_lease_ms : h->lease_ms;

    return rlock__hold_countable(h, lease) * RLOCK__NS_PER_MS / 3;
}

static int topping_up(const rlock__hold *h)
{
    return h->cur_lease_ms < h->lease_ms;
}

static int may_renew(const rlock__hold *h)
{
    if (h->lost || h->renewing || h->releasing || h->extending)
        return 0;
    return topping_up(h) ||
           (h->watchdog && (h->m->opts.max_renewals == 0 ||
                            h->renewals < h->m->opts.max_renewals));
}

/* Whether hold k of a batch of n was renewed over the nodes: 1 by a
 * majority, 0 gone on a majority, -1 not known (try again). */
static int tally(const rlock_client *c, const rlock__results *res,
                 const int *ok, size_t k)
{
    int i, renewed = 0, gone = 0;

    for (i = 0; i < res->n; i++)
        if (ok[i])
            *(rlock__renewed(res->r[i].reply, k) ? &renewed : &gone) += 1;
    return renewed >= c->quorum ? 1 : gone > c->nnodes - c->quorum ? 0 : -1;
}

/* After a server said it cannot renew with compare-and-set (it has no
 * SET IFEQ, or its ACL refuses it), the renewal script alone for this
 * long, then the native form is tried again: the server may have been
 * upgraded, or a failover may have put a newer one in its place. Other
 * errors (a slot moving, a server loading) send only that batch to the
 * script. */
#define CAS_PAUSE_NS (60 * 1000 * RLOCK__NS_PER_MS)

/* How a batch's holds fared: state 1 renewed (by a majority), 0 gone,
 * -1 not known (yet); when and how, for those renewed. unanswered: some
 * node never answered a request for the hold, which may still run
 * (rlock__hold_owe). first_sent: when the batch's first request left (0:
 * none did). */
typedef struct outcome {
    int state[RENEW_BATCH];
    int64_t sent_at[RENEW_BATCH];
    long long acks[RENEW_BATCH];
    int unanswered;
    int64_t first_sent;
} outcome;

/* Notes what a round's results say of the batch's requests: when they
 * left, and whether a node left one unanswered. */
static void round_sent(outcome *out, const rlock__results *res,
                       int64_t t_send)
{
    int k;

    if (!out->first_sent)
        out->first_sent = t_send;
    for (k = 0; k < res->n; k++)
        out->unanswered |= rlock__result_unknown(&res->r[k]);
}

/* What the native round leaves to the script round. */
enum { CAS_SCRIPT, CAS_REFUSED, CAS_NO_REPLY };

/* The batch as one pipeline of native compare-and-set renewals (the
 * layout's renew_cas), one round trip. Holds renewed on a majority are
 * settled in out; the others (their value not the calm one the client
 * knows: waiters queued, or the hold gone) are left to the script
 * (CAS_SCRIPT). CAS_REFUSED: a server said it cannot renew so, and the
 * script takes every hold of the batch; CAS_NO_REPLY: no node answered
 * (down, or slower than the deadline, which the script round would then
 * wait for again): nothing more this time, the holds are retried soon. */
static int renew_cas(rlock_client *c, const renewal *rn, int n, int replicas,
                     rlock__call *call, outcome *out)
{
    const rlock__layout *lay = rn[0].lay;
    rlock__results res;
    rlock__req req;
    int i, k, refused = 0, answered = 0, ok[RLOCK__NODES_MAX] = {0};
    int64_t t_send;
    long long acks;

    rlock__req_init(&req, lay->renew_cas);
    req.replicas = replicas;
    for (i = 0; i < n; i++)
        lay->renew_cas_add(&req, rn[i].key, rn[i].key_len, rn[i].owner,
                           rn[i].owner_len, rn[i].id, rn[i].count, rn[i].token,
                           rn[i].lease_ms);
    t_send = rlock__now_ns();
    if (rlock__req_finish(&req) != RLOCK_OK) {
        rlock__req_free(&req);
        return CAS_SCRIPT; /* out of memory here: nothing the server did */
    }
    rlock__backend_exec(c, &req, RLOCK__X_BRIEF, &res, call);
    round_sent(out, &res, t_send);
    for (k = 0; k < res.n; k++) {
        const rlock__result *r = &res.r[k];
        ok[k] = r->rc == RLOCK_OK &&
                rlock__parse_renew_cas(r->replies, r->nreplies, (size_t)n) ==
                    RLOCK_OK;
        answered += r->nreplies > 0;
        if (!ok[k] && r->nreplies > 0 &&
            rlock__cas_refused(r->replies, r->nreplies))
            refused = 1;
    }
    acks = res.n > 0 && ok[0] ? res.r[0].acks : 0;
    for (i = 0; !refused && i < n; i++) {
        int renewed = 0;
        for (k = 0; k < res.n; k++)
            renewed += ok[k] && rlock__cas_renewed(res.r[k].replies, (size_t)i);
        if (renewed >= c->quorum) {
            out->state[i] = 1;
            out->sent_at[i] = t_send;
            out->acks[i] = acks;
        }
    }
    rlock__results_free(&res);
    rlock__req_free(&req);
    return refused ? CAS_REFUSED : answered ? CAS_SCRIPT : CAS_NO_REPLY;
}

/* One renewal script for the holds idx[0..m) of the batch. 1 if the
 * deployment answered that it cannot serve them now (RLOCK_EUNAVAILABLE),
 * else 0. */
static int renew_round(rlock_client *c, const renewal *rn, const int *idx,
                       int m, int replicas, rlock__call *call, outcome *out)
{
    rlock__results res;
    rlock__req req;
    int i, j, unavailable, ok[RLOCK__NODES_MAX] = {0};
    int64_t t_send;
    long long acks;

    rlock__req_init(&req, rn[idx[0]].script);
    req.replicas = replicas;
    for (j = 0; j < m; j++)
        rlock__req_key(&req, rn[idx[j]].key, rn[idx[j]].key_len);
    for (j = 0; j < m; j++) {
        const renewal *r = &rn[idx[j]];
        rlock__req_arg(&req, r->owner, r->owner_len);
        rlock__req_argu(&req, r->id);
        rlock__req_argu(&req, r->token);
        rlock__req_argi(&req, r->lease_ms);
    }
    t_send = rlock__now_ns();
    if (rlock__req_finish(&req) == RLOCK_OK) {
        rlock__backend_exec(c, &req, RLOCK__X_BRIEF, &res, call);
        round_sent(out, &res, t_send);
    } else {
        rlock__results_init(&res, 0);
    }
    for (i = 0; i < res.n; i++)
        ok[i] = res.r[i].rc == RLOCK_OK &&
                rlock__parse_renew(res.r[i].reply, (size_t)m) == RLOCK_OK;
    /* WAIT goes with the one-server backends: the first node's. */
    acks = res.n > 0 && ok[0] ? res.r[0].acks : 0;
    for (j = 0; j < m; j++) {
        out->state[idx[j]] = res.n > 0 ? tally(c, &res, ok, (size_t)j) : -1;
        out->sent_at[idx[j]] = t_send;
        out->acks[idx[j]] = acks;
    }
    unavailable = res.n > 0 && res.r[0].rc == RLOCK_EUNAVAILABLE;
    rlock__results_free(&res);
    rlock__req_free(&req);
    return unavailable;
}

/* The renewal script for the holds of the batch not settled yet. Where
 * the holds of a batch share a slot that can migrate (RLOCK__BK_SLOTS), a
 * script naming several of their keys is refused while the keys are split
 * between the two nodes (TRYAGAIN, which the background does not wait
 * for), and would be until the migration moved them all, however long the
 * leases; a script naming one key is always served (on the importing node
 * after ASK): each hold is then renewed alone. */
static void renew_script(rlock_client *c, const renewal *rn, int n,
                         int replicas, rlock__call *call, outcome *out)
{
    int i, j, m = 0, idx[RENEW_BATCH];

    for (i = 0; i < n; i++)
        if (out->state[i] < 0)
            idx[m++] = i;
    if (m == 0)
        return;
    if (renew_round(c, rn, idx, m, replicas, call, out) && m > 1 &&
        (c->backend->flags & RLOCK__BK_SLOTS))
        for (j = 0; j < m; j++)
            renew_round(c, rn, idx + j, 1, replicas, call, out);
}

/* Sends one batch; mu is released meanwhile. t_step: when the step that
 * collected it began; bound: the round trip's deadline (rlock__holds_end,
 * a walk of every hold, so computed once per step). Where the layout has
 * a native compare-and-set renewal and the servers took it last time,
 * that goes first, and the script follows for the holds it left. */
static void renew_batch(rlock_client *c, renewal *rn, int n, int64_t t_step,
                        int64_t bound)
{
    outcome *out = malloc(sizeof *out);
    rlock__call call;
    int i, replicas = 0, cas, left = CAS_SCRIPT, failed = 0;

    if (!out) {
        /* Out of memory: try again soon, as after a failed round trip. */
        for (i = 0; i < n; i++) {
            rlock__hold *h = rlock__hold_by_serial(&c->holds, rn[i].serial);
            if (h) {
                h->renewing = 0;
                h->renew_at = rlock__now_ns() + 10 * RLOCK__NS_PER_MS;
            }
        }
        pthread_cond_broadcast(&c->state_cv);
        return;
    }
    /* One WAIT covers the batch: the most any of its holds asks for. */
    for (i = 0; i < n; i++) {
        if (rn[i].replicas > replicas)
            replicas = rn[i].replicas;
        out->state[i] = -1;
    }
    out->unanswered = 0;
    out->first_sent = 0;
    cas = rn[0].lay->renew_cas && rlock__now_ns() >= c->cas_paused_until;
    rlock__call_init(&call, bound);
    pthread_mutex_unlock(&c->mu);

    if (cas)
        left = renew_cas(c, rn, n, replicas, &call, out);
    if (left != CAS_NO_REPLY)
        renew_script(c, rn, n, replicas, &call, out);
    pthread_mutex_lock(&c->mu);
    if (left == CAS_REFUSED)
        c->cas_paused_until = rlock__now_ns() + CAS_PAUSE_NS;

    for (i = 0; i < n; i++) {
        rlock__hold *h = rlock__hold_by_serial(&c->holds, rn[i].serial);
        int renewed = out->state[i];
        int64_t lease = rn[i].lease_ms;
        if (!h)
            continue; /* unlocked or freed meanwhile */
        h->renewing = 0;
        if (renewed < 0 || (renewed && out->acks[i] < rn[i].replicas)) {
            failed++;
            rlock__obs_count(c->obs, RLOCK__ST_RENEWAL_FAILURES);
            /* Failed, or (sync_replicas) renewed on the master only,
             * which a failover could undo, so it does not move the lease
             * end we count with; but it may have run, and set a lease
             * shorter than one an extension set: the end is the sooner
             * of the two. Try again soon; the lease end decides when to
             * give up. */
            int64_t retry = period_ns(h) / 10;
            if (out->first_sent)
                rlock__hold_may_end(h,
                                    out->first_sent +
                                        lease * RLOCK__NS_PER_MS -
                                        c->backend->margin_ns(c, lease),
                                    rlock__now_ns());
            if (retry < 10 * RLOCK__NS_PER_MS)
                retry = 10 * RLOCK__NS_PER_MS;
            h->renew_at = rlock__hold_renew_due(h, rlock__now_ns() + retry);
        } else if (renewed) {
            /* What this request set, not what the hold asks for now;
             * counted no longer than an unanswered request may set. */
            int64_t counted = rlock__hold_countable(h, lease);
            if (!topping_up(h))
                h->renewals++;
            h->cur_lease_ms = lease;
            h->valid_until = out->sent_at[i] +
                             counted * RLOCK__NS_PER_MS -
                             c->backend->margin_ns(c, counted);
            /* Every batch of a step is due again at the same moment, a
             * third of the lease after the step began (a little early
             * for the later batches), so that the holds renewed together
             * stay together and the next step again sends full batches. */
            h->renew_at = rlock__hold_renew_due(
                h, t_step + counted * RLOCK__NS_PER_MS / 3);
            rlock__hold_leased(h, RLOCK_EV_RENEWED, RLOCK__ST_RENEWALS, lease);
        } else if (!h->releasing) {
            rlock__bg_lose(c, h, RLOCK_LOST_GONE,
                           "a renewal found it gone in Redis");
        }
        if (out->unanswered)
            rlock__hold_owe(h, lease);
    }
    free(out);
    if (failed)
        rlock__obs_log(c->obs, RLOCK_LOG_WARN,
                       "renewal of %d hold%s got no confirmed answer; tried "
                       "again until the lease ends: %s",
                       failed, failed == 1 ? "" : "s",
                       call.err.msg[0] ? call.err.msg
                                       : "too few replicas acknowledged it");
    pthread_cond_broadcast(&c->state_cv); /* extends wait for this */
}

static int by_group(const void *a, const void *b)
{
    const renewal *x = a, *y = b;

    if (x->script != y->script)
        return x->script < y->script ? -1 : 1;
    return x->group - y->group;
}

static void renew_due(rlock_client *c)
{
    renewal *rn = NULL;
    rlock__hold *h;
    int n = 0, cap = 0, off, mixed = 0;
    int64_t bound;
    int64_t now = rlock__now_ns();

    /* One walk collects every hold that is due or will be within half a
     * period (renewing a little early costs nothing); they go out in
     * script calls of RENEW_BATCH, one after the other. */
    for (h = c->holds.list; h; h = h->next) {
        rlock_mutex *m = h->m;
        if (!may_renew(h) || h->renew_at > now + period_ns(h) / 2)
            continue;
        if (n == cap) {
            renewal *bigger;
            cap = cap ? cap * 2 : 16;
            bigger = realloc(rn, sizeof *rn * (size_t)cap);
            if (!bigger)
                break;
            rn = bigger;
        }
        /* Copy what the request needs: the mutex may be freed while mu is
         * released for the round trip. */
        rn[n].key = malloc(m->key_lens[0] ? m->key_lens[0] : 1);
        if (!rn[n].key)
            break;
        memcpy(rn[n].key, m->keys[0], m->key_lens[0]);
        rn[n].key_len = m->key_lens[0];
        rn[n].serial = h->serial;
        rn[n].lease_ms = h->lease_ms;
        rn[n].replicas = m->replicas;
        rn[n].lay = m->layout;
        rn[n].script = m->layout->renew;
        rn[n].group = c->backend->group(c, rn[n].key, rn[n].key_len);
        rn[n].owner_len =
            m->layout->owner(c, h->owner.no, h->nonce, rn[n].owner);
        rn[n].id = h->nonce;
        rn[n].token = h->token;
        /* The count Redis keeps: one where the client counts. */
        rn[n].count = m->counts_here ? 1 : h->count;
        h->renewing = 1;
        n++;
    }
    /* The bound computed before the first call stays right for the
     * others: a batch moves only its own holds' lease ends. On a cluster a
     * script's keys must share a slot: one batch per group. */
    for (off = 1; off < n; off++)
        mixed |= by_group(&rn[off], &rn[0]) != 0;
    if (mixed)
        qsort(rn, (size_t)n, sizeof *rn, by_group);
    bound = n > 0 ? rlock__holds_end(&c->holds, c->shortest_lease_ms) : 0;
    for (off = 0; off < n;) {
        int len = 1;
        while (off + len < n && len < RENEW_BATCH &&
               by_group(&rn[off + len], &rn[off]) == 0)
            len++;
        renew_batch(c, rn + off, len, now, bound);
        off += len;
    }
    while (n-- > 0)
        free(rn[n].key);
    free(rn);
}

/* Holds whose lease ended unrenewed are lost; holds of owners the
 * application freed are forgotten. */
static void sweep(rlock_client *c)
{
    rlock__hold *h, *next;
    int64_t now = rlock__now_ns();

    for (h = c->holds.list; h; h = next) {
        next = h->next;
        if (rlock__owner_gone(h->owner.obj) && !h->renewing && !h->releasing &&
            !h->extending) {
            rlock__hold_remove(&c->holds, h);
            continue;
        }
        if (!h->lost && !h->releasing && !h->renewing &&
            h->valid_until <= now) {
            int capped = h->watchdog && h->m->opts.max_renewals &&
                         h->renewals >= h->m->opts.max_renewals;
            rlock__bg_lose(c, h,
                           capped ? RLOCK_LOST_CAPPED : RLOCK_LOST_EXPIRED,
                           capped ? "its renewals reached max_renewals"
                                  : "its lease ended with no renewal "
                                    "confirmed");
        }
    }
}

void rlock__watchdog_step(rlock_client *c, int64_t *next)
{
    rlock__hold *h;

    /* Notices of the holds found lost, and the LOST events the sweep
     * reported, go to their notifiers before any round trip: a server
     * that stalls the renewals (up to a lease each) does not hold them
     * up. (The events first: rlock__notify_events queues the notice that
     * rlock__notify_step may start a notifier for.) */
    sweep(c);
    rlock__notify_events(c);
    rlock__notify_step(c, next);
    renew_due(c);
    sweep(c);
    rlock__notify_events(c);
    rlock__notify_step(c, next);
    for (h = c->holds.list; h; h = h->next) {
        if (h->lost || h->releasing)
            continue;
        *next = rlock__earlier(*next, h->valid_until);
        if (may_renew(h))
            *next = rlock__earlier(*next, h->renew_at);
    }
}
