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
#include <stddef.h>
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
    int idx[RENEW_BATCH]; /* the holds a script round is for */
    int unanswered;
    int64_t first_sent;
} outcome;

/* What the native round leaves to the script round. */
enum { CAS_SCRIPT, CAS_REFUSED, CAS_NO_REPLY };

static int by_group(const void *a, const void *b)
{
    const renewal *x = a, *y = b;

    if (x->script != y->script)
        return x->script < y->script ? -1 : 1;
    return x->group - y->group;
}

/*
 * The renewals that are due, as a call in steps (core/step.h) over the
 * batches: per batch, the native compare-and-set pipeline where the
 * layout has one, then the renewal script for the holds it left (and on
 * a cluster whose slot is moving, each hold alone), then what the
 * answers mean for the holds. Stepped with mu held; a driver releases mu
 * around each request (renew_due: the background thread; an event loop,
 * later, the same way).
 */
struct rlock__renew_op {
    rlock_client *c;
    renewal *rn; /* every hold due, grouped */
    int n;
    int64_t t_step; /* when the step that collected them began */
    int64_t bound;  /* the round trips' deadline (rlock__holds_end, a walk
                       of every hold, so computed once) */
    int off, len;   /* the batch rn[off..off+len) */
    int stage;
    int replicas, left, failed;
    int m, j; /* the script's holds: out->idx[0..m); the one alone */
    int64_t t_send;
    outcome *out;
    rlock__call call;
    rlock__slot s;
};
typedef rlock__renew_op renew_op;

enum { RN_BATCH, RN_CAS, RN_SCRIPT, RN_ONE, RN_APPLY, RN_DONE };

/* The batch as one pipeline of native compare-and-set renewals (the
 * layout's renew_cas), one round trip. */
static void cas_request(renew_op *o)
{
    const renewal *rn = o->rn + o->off;
    const rlock__layout *lay = rn[0].lay;
    int i;

    rlock__req_init(&o->s.req, lay->renew_cas);
    o->s.req.replicas = o->replicas;
    for (i = 0; i < o->len; i++)
        lay->renew_cas_add(&o->s.req, rn[i].key, rn[i].key_len, rn[i].owner,
                           rn[i].owner_len, rn[i].id, rn[i].count, rn[i].token,
                           rn[i].lease_ms);
}

/* Notes what a round's results say of the batch's requests: when they
 * left, and whether a node left one unanswered (a request that could not
 * be built was never sent). */
static void round_sent(renew_op *o)
{
    int k;

    if (o->s.rc != RLOCK_OK)
        return;
    if (!o->out->first_sent)
        o->out->first_sent = o->t_send;
    for (k = 0; k < o->s.res.n; k++)
        o->out->unanswered |= rlock__result_unknown(&o->s.res.r[k]);
}

/* The pipeline's answers. Holds renewed on a majority are settled in
 * out; the others (their value not the calm one the client knows:
 * waiters queued, or the hold gone) are left to the script (CAS_SCRIPT).
 * CAS_REFUSED: a server said it cannot renew so, and the script takes
 * every hold of the batch; CAS_NO_REPLY: no node answered (down, or
 * slower than the deadline, which the script round would then wait for
 * again): nothing more this time, the holds are retried soon. */
static int cas_read(renew_op *o)
{
    rlock_client *c = o->c;
    const rlock__results *res = &o->s.res;
    outcome *out = o->out;
    int i, k, refused = 0, answered = 0, ok[RLOCK__NODES_MAX] = {0};
    long long acks;

    if (o->s.rc != RLOCK_OK) {
        rlock__results_free(&o->s.res);
        rlock__req_free(&o->s.req);
        return CAS_SCRIPT; /* out of memory here: nothing the server did */
    }
    round_sent(o);
    for (k = 0; k < res->n; k++) {
        const rlock__result *r = &res->r[k];
        ok[k] = r->rc == RLOCK_OK &&
                rlock__parse_renew_cas(r->replies, r->nreplies,
                                       (size_t)o->len) == RLOCK_OK;
        answered += r->nreplies > 0;
        if (!ok[k] && r->nreplies > 0 &&
            rlock__cas_refused(r->replies, r->nreplies))
            refused = 1;
    }
    acks = res->n > 0 && ok[0] ? res->r[0].acks : 0;
    for (i = 0; !refused && i < o->len; i++) {
        int renewed = 0;
        for (k = 0; k < res->n; k++)
            renewed +=
                ok[k] && rlock__cas_renewed(res->r[k].replies, (size_t)i);
        if (renewed >= c->quorum) {
            out->state[i] = 1;
            out->sent_at[i] = o->t_send;
            out->acks[i] = acks;
        }
    }
    rlock__results_free(&o->s.res);
    rlock__req_free(&o->s.req);
    return refused ? CAS_REFUSED : answered ? CAS_SCRIPT : CAS_NO_REPLY;
}

/* One renewal script for the holds idx[0..m) of the batch. */
static void script_request(renew_op *o, const int *idx, int m)
{
    const renewal *rn = o->rn + o->off;
    int j;

    rlock__req_init(&o->s.req, rn[idx[0]].script);
    o->s.req.replicas = o->replicas;
    for (j = 0; j < m; j++)
        rlock__req_key(&o->s.req, rn[idx[j]].key, rn[idx[j]].key_len);
    for (j = 0; j < m; j++) {
        const renewal *r = &rn[idx[j]];
        rlock__req_arg(&o->s.req, r->owner, r->owner_len);
        rlock__req_argu(&o->s.req, r->id);
        rlock__req_argu(&o->s.req, r->token);
        rlock__req_argi(&o->s.req, r->lease_ms);
    }
}

/* The script's answers for the holds idx[0..m): 1 if the deployment
 * answered that it cannot serve them now (RLOCK_EUNAVAILABLE). */
static int script_read(renew_op *o, const int *idx, int m)
{
    rlock_client *c = o->c;
    const rlock__results *res = &o->s.res;
    outcome *out = o->out;
    int i, j, unavailable, ok[RLOCK__NODES_MAX] = {0};
    long long acks;

    round_sent(o);
    for (i = 0; i < res->n; i++)
        ok[i] = res->r[i].rc == RLOCK_OK &&
                rlock__parse_renew(res->r[i].reply, (size_t)m) == RLOCK_OK;
    /* WAIT goes with the one-server backends: the first node's. */
    acks = res->n > 0 && ok[0] ? res->r[0].acks : 0;
    for (j = 0; j < m; j++) {
        out->state[idx[j]] = res->n > 0 ? tally(c, res, ok, (size_t)j) : -1;
        out->sent_at[idx[j]] = o->t_send;
        out->acks[idx[j]] = acks;
    }
    unavailable = res->n > 0 && res->r[0].rc == RLOCK_EUNAVAILABLE;
    rlock__results_free(&o->s.res);
    rlock__req_free(&o->s.req);
    return unavailable;
}

/* What the batch's answers mean for its holds (mu held). */
static void batch_apply(renew_op *o)
{
    rlock_client *c = o->c;
    const renewal *rn = o->rn + o->off;
    outcome *out = o->out;
    int i;

    if (o->left == CAS_REFUSED)
        c->cas_paused_until = rlock__now_ns() + CAS_PAUSE_NS;
    for (i = 0; i < o->len; i++) {
        rlock__hold *h = rlock__hold_by_serial(&c->holds, rn[i].serial);
        int renewed = out->state[i];
        int64_t lease = rn[i].lease_ms;
        if (!h)
            continue; /* unlocked or freed meanwhile */
        h->renewing = 0;
        if (renewed < 0 || (renewed && out->acks[i] < rn[i].replicas)) {
            o->failed++;
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
                h, o->t_step + counted * RLOCK__NS_PER_MS / 3);
            rlock__hold_leased(h, RLOCK_EV_RENEWED, RLOCK__ST_RENEWALS, lease);
        } else if (!h->releasing) {
            rlock__bg_lose(c, h, RLOCK_LOST_GONE,
                           "a renewal found it gone in Redis");
        }
        if (out->unanswered)
            rlock__hold_owe(h, lease);
    }
    if (o->failed)
        rlock__obs_log(c->obs, RLOCK_LOG_WARN,
                       "renewal of %d hold%s got no confirmed answer; tried "
                       "again until the lease ends: %s",
                       o->failed, o->failed == 1 ? "" : "s",
                       o->call.msg && o->call.msg[0]
                           ? o->call.msg
                           : "too few replicas acknowledged it");
    pthread_cond_broadcast(&c->state_cv); /* extends wait for this */
}

/* Out of memory for a batch's outcome: its holds are tried again soon,
 * as after a failed round trip (mu held). */
static void batch_later(renew_op *o)
{
    rlock_client *c = o->c;
    int i;

    for (i = 0; i < o->len; i++) {
        rlock__hold *h =
            rlock__hold_by_serial(&c->holds, o->rn[o->off + i].serial);
        if (h) {
            h->renewing = 0;
            h->renew_at = rlock__now_ns() + 10 * RLOCK__NS_PER_MS;
        }
    }
    pthread_cond_broadcast(&c->state_cv);
}

/* The next batch begins (mu held): 0 when there is none. */
static int batch_begin(renew_op *o)
{
    renewal *rn;
    int i;

    o->off += o->len;
    if (o->off >= o->n)
        return 0;
    rn = o->rn + o->off;
    o->len = 1;
    while (o->off + o->len < o->n && o->len < RENEW_BATCH &&
           by_group(&rn[o->len], &rn[0]) == 0)
        o->len++;
    if (!o->out) {
        batch_later(o);
        return batch_begin(o);
    }
    o->replicas = 0;
    o->failed = 0;
    o->left = CAS_SCRIPT;
    /* One WAIT covers the batch: the most any of its holds asks for. */
    for (i = 0; i < o->len; i++) {
        if (rn[i].replicas > o->replicas)
            o->replicas = rn[i].replicas;
        o->out->state[i] = -1;
    }
    o->out->unanswered = 0;
    o->out->first_sent = 0;
    rlock__call_end(&o->call); /* the batch before's detail, if any */
    rlock__call_init(&o->call, o->bound);
    return 1;
}

/* The script round for the holds of the batch not settled yet: 0 when
 * there are none. */
static int script_begin(renew_op *o)
{
    int i;

    o->m = 0;
    for (i = 0; i < o->len; i++)
        if (o->out->state[i] < 0)
            o->out->idx[o->m++] = i;
    if (o->m == 0)
        return 0;
    script_request(o, o->out->idx, o->m);
    return 1;
}

/* Asks for slot s, its request built. */
static int send_slot(renew_op *o, int stage, rlock__slot **slot)
{
    o->s.flags = RLOCK__X_BRIEF;
    o->s.call = &o->call;
    o->t_send = rlock__now_ns();
    o->stage = stage;
    *slot = &o->s;
    return RLOCK__STEP_SEND;
}

static int renew_step(renew_op *o, rlock__slot **slot)
{
    rlock_client *c = o->c;

    for (;;) {
        switch (o->stage) {
        case RN_BATCH:
            if (!batch_begin(o)) {
                o->stage = RN_DONE;
                return RLOCK__STEP_DONE;
            }
            if (o->rn[o->off].lay->renew_cas &&
                rlock__now_ns() >= c->cas_paused_until) {
                cas_request(o);
                return send_slot(o, RN_CAS, slot);
            }
            if (script_begin(o))
                return send_slot(o, RN_SCRIPT, slot);
            o->stage = RN_APPLY;
            break;
        case RN_CAS:
            o->left = cas_read(o);
            if (o->left != CAS_NO_REPLY && script_begin(o))
                return send_slot(o, RN_SCRIPT, slot);
            o->stage = RN_APPLY;
            break;
        case RN_SCRIPT:
            /* Where the holds of a batch share a slot that can migrate
             * (RLOCK__BK_SLOTS), a script naming several of their keys is
             * refused while the keys are split between the two nodes
             * (TRYAGAIN, which the background does not wait for), and
             * would be until the migration moved them all, however long
             * the leases; a script naming one key is always served (on
             * the importing node after ASK): each hold is then renewed
             * alone. */
            if (script_read(o, o->out->idx, o->m) && o->m > 1 &&
                (c->backend->flags & RLOCK__BK_SLOTS)) {
                o->j = 0;
                script_request(o, o->out->idx, 1);
                return send_slot(o, RN_ONE, slot);
            }
            o->stage = RN_APPLY;
            break;
        case RN_ONE:
            script_read(o, o->out->idx + o->j, 1);
            if (++o->j < o->m) {
                script_request(o, o->out->idx + o->j, 1);
                return send_slot(o, RN_ONE, slot);
            }
            o->stage = RN_APPLY;
            break;
        case RN_APPLY:
            batch_apply(o);
            o->stage = RN_BATCH;
            break;
        default:
            return RLOCK__STEP_DONE;
        }
    }
}

/* Collects every hold that is due or will be within half a period
 * (renewing a little early costs nothing) into o (mu held); they go out
 * in script calls of RENEW_BATCH, one after the other. */
static void renew_collect(rlock_client *c, renew_op *o)
{
    renewal *rn = NULL;
    rlock__hold *h;
    int n = 0, cap = 0, off, mixed = 0;
    int64_t now = rlock__now_ns();

    memset(o, 0, offsetof(renew_op, s));
    o->c = c;
    o->t_step = now;
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
        rn[n].key = rlock__lock_key_dup(m, 0, NULL, 0, &rn[n].key_len);
        if (!rn[n].key)
            break;
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
    o->rn = rn;
    o->n = n;
    o->bound = n > 0 ? rlock__holds_end(&c->holds, c->shortest_lease_ms) : 0;
    o->out = n > 0 ? malloc(sizeof *o->out) : NULL;
    o->stage = RN_BATCH;
}

static void renew_free(renew_op *o)
{
    while (o->n-- > 0)
        free(o->rn[o->n].key);
    free(o->rn);
    free(o->out);
    rlock__call_end(&o->call);
}

rlock__renew_op *rlock__renew_begin(rlock_client *c)
{
    renew_op *o = malloc(sizeof *o);

    if (!o)
        return NULL; /* out of memory: the next step tries again */
    rlock__call_init(&o->call, 0);
    renew_collect(c, o);
    if (o->n == 0) {
        renew_free(o);
        free(o);
        return NULL;
    }
    return o;
}

int rlock__renew_step(rlock__renew_op *o, rlock__slot **slot)
{
    return renew_step(o, slot);
}

void rlock__renew_end(rlock__renew_op *o)
{
    renew_free(o);
    free(o);
}

/* The renewals that are due, driven on this thread: mu is released
 * around each request. */
static void renew_due(rlock_client *c)
{
    renew_op *o = rlock__renew_begin(c);
    rlock__slot *slot;

    if (!o)
        return;
    while (renew_step(o, &slot) == RLOCK__STEP_SEND) {
        pthread_mutex_unlock(&c->mu);
        rlock__slot_run(slot, c);
        pthread_mutex_lock(&c->mu);
    }
    rlock__renew_end(o);
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

void rlock__watchdog_sweep(rlock_client *c, int64_t *next)
{
    /* (The events first: rlock__notify_events queues the notice that the
     * driver's notices hook may start a notifier for.) */
    sweep(c);
    rlock__notify_events(c);
    c->bg->driver->notices(c, next);
}

void rlock__watchdog_next(rlock_client *c, int64_t *next)
{
    rlock__hold *h;

    for (h = c->holds.list; h; h = h->next) {
        if (h->lost || h->releasing)
            continue;
        *next = rlock__earlier(*next, h->valid_until);
        if (may_renew(h))
            *next = rlock__earlier(*next, h->renew_at);
    }
}

void rlock__watchdog_step(rlock_client *c, int64_t *next)
{
    /* Notices of the holds found lost, and the LOST events the sweep
     * reported, go to their notifiers before any round trip: a server
     * that stalls the renewals (up to a lease each) does not hold them
     * up. */
    rlock__watchdog_sweep(c, next);
    renew_due(c);
    rlock__watchdog_sweep(c, next);
    rlock__watchdog_next(c, next);
}
