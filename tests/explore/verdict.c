/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The invariants, held against the log of one run.
 *
 * A hold is what one owner took with one fresh acquisition, until it let
 * it go or was told it was lost. What the library promised about it is
 * read from its own answers: every rlock_mutex_lease_left that said
 * RLOCK_OK with L ms left, asked at t, promised the hold until t + L (the
 * library counts from before its request left, and Redis cannot let the
 * lock go before that). A holder's promises end early only when it starts
 * to let the hold go: where the call letting its last level go began, as
 * the worker wrote before making it (EV_LETGO), so that a worker killed
 * in that call, whose release reached Redis and let a waiter in but never
 * returned, is excused for that hold alone.
 *
 *  exclusion  the promises of two holds of one name never overlap. Only a
 *             restart of the server without persistence (its data lost),
 *             or an operator's force unlock of the name, excuses it. A
 *             paused holder excuses nothing here: a promise ends at its
 *             time whatever the holder does; acting on a promise after a
 *             pause is the holder's own hazard.
 *  notice     every loss is told to its owner: the library never forgets
 *             a hold its owner still has levels of without saying
 *             RLOCK_ELOST; a hold whose lease was seen ended gets its
 *             on_lost, within the slack of that moment; on_lost never
 *             comes for a hold that was let go in good order.
 *  nobody     the monitor never sees a lock held while no owner holds,
 *             takes or lets go of it, for longer than a lease (plus the
 *             time the run's faults kept the client from Redis, and the
 *             slack). A killed worker's holds are its lease's to end. A
 *             wait takes the lock only near its end (accounted()).
 *  tokens     of two holds of one name, the one whose acquisition began
 *             after the other's returned has the greater token.
 *  bounds     every call ends within the bound its header states, plus the
 *             slack (a worker the plan stopped is excused for that time).
 *  returned   a call that returned a hold returned it with lease: no
 *             on_lost before the call returned, no lease over at once (nor
 *             the hold found gone by the token drawn at once), unless an
 *             operator forced the name open meanwhile, and a re-entry set
 *             the lease again.
 *  spurious   a wait for ever (rlock_mutex_lock) fails only when a fault
 *             of the plan (not the proxy's jitter) was under way.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "explore.h"

const char *const ex_invariant_names[I_COUNT] = {
    "exclusion", "notice", "nobody", "tokens", "bounds", "returned", "spurious",
};

#define MS 1000000LL

typedef struct window {
    int64_t from, to;
} window;

typedef struct hold {
    int w, o, no, name;
    int fresh_ok; /* its fresh acquisition returned RLOCK_OK */
    int64_t acq_t0, acq_t1;
    int64_t rel_t0; /* it began to let go for good (0: never) */
    int64_t end_t1; /* the last call on it ended */
    uint64_t token;
    int level;
    int reported;       /* a call said RLOCK_ELOST */
    int64_t state_lost; /* lease_left said the lease ended (first) */
    int64_t lost_cb;    /* on_lost began (first), 0: never */
    int lost_cbs;
    int clean; /* let go with RLOCK_OK at the last level */
    int64_t clean_at;
    int forgotten;   /* RLOCK_ENOTOWNER with levels left, unreported */
    int64_t owed_ms; /* shortest lease of a failed extension */
    window *win;
    int nwin, capwin;
    int64_t *sets; /* starts of its calls that set the lease again */
    int nsets, capsets;
} hold;

typedef struct state {
    const ex_plan *p;
    int64_t slack;
    ex_event *ev;
    long n;
    hold *holds;
    int nholds, capholds;
    int *index[EX_WORKERS_MAX][EX_OWNERS_MAX]; /* hold no -> holds[] */
    int cap[EX_WORKERS_MAX][EX_OWNERS_MAX];
    int64_t killed_at[EX_WORKERS_MAX];
    ex_verdict *v;
} state;

static void violation(state *s, int inv, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#include <stdarg.h>

static void violation(state *s, int inv, const char *fmt, ...)
{
    va_list ap;

    if (s->v->violations[inv]++ == 0) {
        va_start(ap, fmt);
        vsnprintf(s->v->first[inv], sizeof s->v->first[inv], fmt, ap);
        va_end(ap);
    }
}

static int64_t lease_of(const ex_plan *p)
{
    return p->lease_ms ? p->lease_ms : p->watchdog_ms;
}

static int by_t0(const void *x, const void *y)
{
    const ex_event *a = x, *b = y;

    return a->t0 < b->t0 ? -1 : a->t0 > b->t0;
}

static hold *hold_of(state *s, const ex_event *e)
{
    int w = e->worker, o = e->owner, *ix;

    if (w < 0 || w >= EX_WORKERS_MAX || o < 0 || o >= EX_OWNERS_MAX ||
        e->hold <= 0)
        return NULL;
    if (e->hold >= s->cap[w][o]) {
        int cap = e->hold * 2 + 16, k;
        ix = realloc(s->index[w][o], sizeof *ix * (size_t)cap);
        if (!ix)
            return NULL;
        for (k = s->cap[w][o]; k < cap; k++)
            ix[k] = -1;
        s->index[w][o] = ix;
        s->cap[w][o] = cap;
    }
    ix = s->index[w][o];
    if (ix[e->hold] < 0) {
        hold *h;
        if (s->nholds == s->capholds) {
            hold *bigger;
            s->capholds = s->capholds ? s->capholds * 2 : 256;
            bigger = realloc(s->holds, sizeof *bigger * (size_t)s->capholds);
            if (!bigger)
                return NULL;
            s->holds = bigger;
        }
        h = &s->holds[s->nholds];
        memset(h, 0, sizeof *h);
        h->w = w;
        h->o = o;
        h->no = e->hold;
        h->name = e->name;
        ix[e->hold] = s->nholds++;
    }
    return &s->holds[ix[e->hold]];
}

/* The owner set the hold's lease again at t (an extension, a re-entry):
 * what was promised before ends there (it may have asked for less). */
static void add_set(hold *h, int64_t t)
{
    if (h->nsets == h->capsets) {
        int64_t *bigger;
        h->capsets = h->capsets ? h->capsets * 2 : 8;
        bigger = realloc(h->sets, sizeof *bigger * (size_t)h->capsets);
        if (!bigger)
            return;
        h->sets = bigger;
    }
    h->sets[h->nsets++] = t;
}

static void add_window(hold *h, int64_t from, int64_t to)
{
    if (h->nwin == h->capwin) {
        window *bigger;
        h->capwin = h->capwin ? h->capwin * 2 : 16;
        bigger = realloc(h->win, sizeof *bigger * (size_t)h->capwin);
        if (!bigger)
            return;
        h->win = bigger;
    }
    h->win[h->nwin].from = from;
    h->win[h->nwin].to = to;
    h->nwin++;
}

/* Whether a fault of kind (any, for kind < 0, but the proxy's calm and
 * jitter) was under way somewhere in [from, to]. */
static int fault_during(const state *s, int kind, int64_t from, int64_t to)
{
    long i;

    for (i = 0; i < s->n; i++) {
        const ex_event *e = &s->ev[i];
        int64_t end;
        if (e->kind != EV_FAULT)
            continue;
        if (kind >= 0 && e->a != kind)
            continue;
        if (kind < 0 && e->a == F_REGIME &&
            (e->b == R_CALM || e->b == R_JITTER))
            continue;
        end = e->t1;
        if (e->a == F_REGIME) {
            /* A regime lasts until the next one. */
            long k;
            end = INT64_MAX;
            for (k = i + 1; k < s->n; k++)
                if (s->ev[k].kind == EV_FAULT && s->ev[k].a == F_REGIME) {
                    end = s->ev[k].t0;
                    break;
                }
        }
        if (e->t0 <= to && end >= from)
            return 1;
    }
    return 0;
}

/* Whether the plan forced name's lock open during [from, to]. */
static int forced_during(const state *s, int name, int64_t from, int64_t to)
{
    long i;

    for (i = 0; i < s->n; i++) {
        const ex_event *e = &s->ev[i];
        if (e->kind == EV_FAULT && e->a == F_FORCE_UNLOCK && e->b == name &&
            e->t0 <= to && e->t1 >= from)
            return 1;
    }
    return 0;
}

/* Time in [from, to] during which the server or the path to it was
 * stopped by the plan (pauses, stalls), in ns. */
static int64_t stopped_during(const state *s, int64_t from, int64_t to)
{
    int64_t sum = 0;
    long i;

    for (i = 0; i < s->n; i++) {
        const ex_event *e = &s->ev[i];
        int64_t a, b;
        if (e->kind != EV_FAULT || (e->a != F_PAUSE_SERVER && e->a != F_STALL &&
                                    e->a != F_CLIENT_PAUSE))
            continue;
        a = e->t0 > from ? e->t0 : from;
        b = e->t1 < to ? e->t1 : to;
        if (b > a)
            sum += b - a;
    }
    return sum;
}

/* Whether worker w was stopped by the plan during [from, to]. */
static int paused_during(const state *s, int w, int64_t from, int64_t to)
{
    long i;

    for (i = 0; i < s->n; i++) {
        const ex_event *e = &s->ev[i];
        if (e->kind == EV_FAULT && e->a == F_PAUSE_WORKER && e->b == w &&
            e->t0 <= to && e->t1 >= from)
            return 1;
    }
    return 0;
}

/* ---- reading the log into holds ---------------------------------------- */

static void bound(state *s, const ex_event *e, int64_t ms, const char *what)
{
    int64_t took = e->t1 - e->t0;

    s->v->calls++;
    if (took <= (ms + s->slack) * MS ||
        paused_during(s, e->worker, e->t0, e->t1))
        return;
    violation(s, I_BOUNDS,
              "worker %d owner %d hold %d: %s took %lld ms, bound %lld ms "
              "(+%lld slack), returned %d",
              e->worker, e->owner, e->hold, what, (long long)(took / MS),
              (long long)ms, (long long)s->slack, e->rc);
}

static void read_call(state *s, const ex_event *e)
{
    const ex_plan *p = s->p;
    int64_t budget =
        p->command_timeout_ms + (p->replicas ? p->sync_timeout_ms : 0);
    hold *h = hold_of(s, e);

    if (!h)
        return;
    if (e->t1 > h->end_t1)
        h->end_t1 = e->t1;
    switch (e->kind) {
    case EV_ACQ:
        if (!e->reentry) {
            h->acq_t0 = e->t0;
            h->acq_t1 = e->t1;
            h->fresh_ok = e->rc == RLOCK_OK;
            h->level = h->fresh_ok;
            h->token = e->token;
            if (e->a == EX_TRY)
                bound(s, e, budget, "trylock");
            else if (e->a == EX_TIMED)
                bound(s, e, e->b + budget, "timedlock");
            else if (e->a == EX_WITH) /* and its token, if it had none */
                bound(s, e, e->b + 2 * budget, "rlock_with's lock");
            else
                s->v->calls++;
            if (e->a == EX_LOCK && e->rc != RLOCK_OK &&
                e->rc != RLOCK_ECANCELED &&
                !fault_during(s, -1, e->t1 - (budget + 1000 + s->slack) * MS,
                              e->t1))
                violation(s, I_SPURIOUS,
                          "worker %d owner %d: lock() returned %d (%s) at "
                          "+%lld ms with no fault under way",
                          e->worker, e->owner, e->rc, rlock_strerror(e->rc),
                          (long long)((e->t1 - s->ev[0].t0) / MS));
            if (h->fresh_ok)
                s->v->holds++;
            if (h->fresh_ok && e->worker == s->p->async_worker)
                s->v->async_holds++;
            break;
        }
        bound(s, e, budget, "re-entry");
        add_set(h, e->t0);
        if (e->rc == RLOCK_OK)
            h->level++;
        break;
    case EV_REL:
        if (e->a == EX_WITH) {
            /* rlock_with let go after fn returned. */
            if (!h->rel_t0)
                h->rel_t0 = e->t0;
            if (e->rc == RLOCK_OK) {
                h->clean = 1;
                h->clean_at = e->t1;
            }
            h->level = 0;
            break;
        }
        bound(s, e, budget, "unlock");
        if (h->level == 1 && !h->rel_t0)
            h->rel_t0 = e->t0; /* the last level: the promises end here */
        if (e->rc == RLOCK_OK || e->rc == RLOCK_ENOTIFY) {
            h->level--;
            if (h->level == 0) {
                h->clean = 1;
                h->clean_at = e->t1;
            }
        } else if (e->rc != RLOCK_ELOST && e->rc != RLOCK_ENOTOWNER &&
                   h->level == 1) {
            /* Unknown: it may have let go; asked again. */
        }
        break;
    case EV_EXT:
        bound(s, e, budget, "extend");
        add_set(h, e->t0);
        if (e->rc != RLOCK_OK && e->rc != RLOCK_ELOST &&
            (h->owed_ms == 0 || e->a < h->owed_ms))
            h->owed_ms = e->a;
        break;
    case EV_TOKEN:
        bound(s, e, budget, "fence");
        if (e->rc == RLOCK_OK && !h->token)
            h->token = e->token;
        break;
    case EV_LEFT:
        bound(s, e, 0, "lease_left");
        if (e->rc == RLOCK_OK)
            add_window(h, e->t0, e->t0 + e->a * MS);
        else if (e->rc == RLOCK_ELOST && !h->state_lost)
            h->state_lost = e->t1;
        break;
    case EV_LETGO:
        /* The call letting the last level go began; its end, if it came,
         * is an EV_REL of the same start. Only where an EV_REL would end
         * the promises too: at the last level as the checker counts it. */
        if (h->level == 1 && !h->rel_t0)
            h->rel_t0 = e->t0;
        return;
    case EV_LOST:
        if (!h->lost_cb)
            h->lost_cb = e->t0;
        h->lost_cbs++;
        return;
    default:
        return;
    }
    if (e->rc == RLOCK_ELOST)
        h->reported = 1;
    if (e->rc == RLOCK_ENOTOWNER && h->level > 0 && !h->reported &&
        !h->forgotten) {
        h->forgotten = 1;
        violation(s, I_NOTICE,
                  "worker %d owner %d hold %d: a call said RLOCK_ENOTOWNER "
                  "while the owner had %d level(s) and no loss had been "
                  "reported",
                  e->worker, e->owner, e->hold, h->level);
    }
    if (e->rc == RLOCK_ELOST || e->rc == RLOCK_ENOTOWNER)
        h->level = e->kind == EV_LEFT || e->kind == EV_TOKEN ? h->level : 0;
}

/* ---- the invariants ----------------------------------------------------- */

typedef struct span {
    int64_t from, to;
    int hold;
} span;

static int by_from(const void *x, const void *y)
{
    const span *a = x, *b = y;

    return a->from < b->from ? -1 : a->from > b->from;
}

static void check_exclusion(state *s)
{
    int name, i, k;

    for (name = 0; name < s->p->names; name++) {
        span *sp = NULL;
        int n = 0, cap = 0;
        for (i = 0; i < s->nholds; i++) {
            hold *h = &s->holds[i];
            if (h->name != name)
                continue;
            for (k = 0; k < h->nwin; k++) {
                int64_t to = h->win[k].to;
                int j;
                if (h->rel_t0 && to > h->rel_t0)
                    to = h->rel_t0;
                /* The owner set another lease since: a shorter one ends
                 * this promise there. */
                for (j = 0; j < h->nsets; j++)
                    if (h->sets[j] > h->win[k].from && h->sets[j] < to)
                        to = h->sets[j];
                if (to <= h->win[k].from)
                    continue;
                if (n == cap) {
                    span *bigger;
                    cap = cap ? cap * 2 : 64;
                    if (!(bigger = realloc(sp, sizeof *sp * (size_t)cap)))
                        break;
                    sp = bigger;
                }
                sp[n].from = h->win[k].from;
                sp[n].to = to;
                sp[n].hold = i;
                n++;
            }
        }
        qsort(sp, (size_t)n, sizeof *sp, by_from);
        /* Sweep: the span reaching furthest so far, against each next. */
        for (i = 0, k = -1; i < n; i++) {
            if (k >= 0 && sp[i].from < sp[k].to && sp[i].hold != sp[k].hold) {
                hold *a = &s->holds[sp[k].hold], *b = &s->holds[sp[i].hold];
                int64_t first = a->acq_t0 < b->acq_t0 ? a->acq_t0 : b->acq_t0;
                /* A restart in between lost what the older one held, or
                 * an operator took it. */
                if (!fault_during(s, F_RESTART, first, sp[i].from) &&
                    !forced_during(s, name, first, sp[i].from))
                    violation(s, I_EXCLUSION,
                              "name %d: worker %d owner %d hold %d was "
                              "promised the lock until +%lld ms, worker %d "
                              "owner %d hold %d from +%lld ms (tokens %llu, "
                              "%llu)",
                              name, a->w, a->o, a->no,
                              (long long)((sp[k].to - s->ev[0].t0) / MS), b->w,
                              b->o, b->no,
                              (long long)((sp[i].from - s->ev[0].t0) / MS),
                              (unsigned long long)a->token,
                              (unsigned long long)b->token);
            }
            if (k < 0 || sp[i].to > sp[k].to)
                k = i;
        }
        free(sp);
    }
}

static void check_notice(state *s)
{
    int i;

    for (i = 0; i < s->nholds; i++) {
        hold *h = &s->holds[i];
        int killed = s->killed_at[h->w] != 0;
        if (h->state_lost && h->lost_cbs == 0 && !killed)
            violation(s, I_NOTICE,
                      "worker %d owner %d hold %d: its lease was seen ended "
                      "at +%lld ms, and on_lost never came",
                      h->w, h->o, h->no,
                      (long long)((h->state_lost - s->ev[0].t0) / MS));
        if (h->state_lost && h->lost_cb &&
            h->lost_cb > h->state_lost + s->slack * MS &&
            !paused_during(s, h->w, h->state_lost, h->lost_cb))
            violation(s, I_NOTICE,
                      "worker %d owner %d hold %d: on_lost came %lld ms after "
                      "its lease was seen ended",
                      h->w, h->o, h->no,
                      (long long)((h->lost_cb - h->state_lost) / MS));
        if (h->lost_cbs > 1)
            violation(s, I_NOTICE,
                      "worker %d owner %d hold %d: on_lost %d times", h->w,
                      h->o, h->no, h->lost_cbs);
        if (h->lost_cb && h->clean && h->clean_at < h->lost_cb &&
            !h->state_lost && !h->reported)
            violation(s, I_NOTICE,
                      "worker %d owner %d hold %d: on_lost at +%lld ms for a "
                      "hold let go in good order at +%lld ms",
                      h->w, h->o, h->no,
                      (long long)((h->lost_cb - s->ev[0].t0) / MS),
                      (long long)((h->clean_at - s->ev[0].t0) / MS));
        if (h->fresh_ok) {
            if (h->lost_cb && h->lost_cb < h->acq_t1)
                violation(s, I_RETURNED,
                          "worker %d owner %d hold %d: on_lost began %lld us "
                          "before the acquisition returned the hold",
                          h->w, h->o, h->no,
                          (long long)((h->acq_t1 - h->lost_cb) / 1000));
        }
    }
}

/* The owner's first call after log event i (a call of its, or -1). */
static long next_call(const state *s, long i)
{
    const ex_event *e = &s->ev[i];
    long k;

    for (k = i + 1; k < s->n; k++)
        if (s->ev[k].worker == e->worker && s->ev[k].owner == e->owner &&
            s->ev[k].kind != EV_LOST && s->ev[k].kind != EV_STATUS &&
            s->ev[k].kind != EV_FAULT && s->ev[k].kind != EV_LETGO)
            return k;
    return -1;
}

/* The first lease_left of each hold after a call that returned it, from
 * the log order of that owner, or the fence between them (a hold taken
 * lean draws its token there, a round trip) if that said RLOCK_ELOST; the
 * answer within 1 ms of the return. What it ended is excused only if an
 * operator's forced release of the name (or a restart of the server, or
 * a stop of the worker) came between the start of the acquisition and
 * that answer: the library cannot know that Redis let a hold go after it
 * granted it until it asks again, and the fence asks. The excuse has a
 * blind spot: a waiter woken by a forced release (the forcer picks held
 * names, so a waiter is often woken so) has the force inside the window
 * too, and a woken waiter that returned a hold already gone would be
 * excused; the example tests of forced release and of late grants cover
 * that path (tests/test_admin.c, tests/test_interleavings.c). */
static void check_returned(state *s)
{
    const ex_plan *p = s->p;
    int64_t lease = lease_of(p);
    long i, k;

    for (i = 0; i < s->n; i++) {
        const ex_event *e = &s->ev[i], *next = NULL;
        hold *h;
        int64_t want, at;
        if (e->kind != EV_ACQ || e->rc != RLOCK_OK)
            continue;
        if ((k = next_call(s, i)) >= 0)
            next = &s->ev[k];
        if (next && next->kind == EV_TOKEN && next->hold == e->hold &&
            next->rc != RLOCK_ELOST)
            next = (k = next_call(s, k)) >= 0 ? &s->ev[k] : NULL;
        if (!next || next->hold != e->hold)
            continue;
        if (next->kind == EV_TOKEN && next->rc == RLOCK_ELOST)
            at = next->t1; /* what Redis said, when it said it */
        else if (next->kind == EV_LEFT)
            at = next->t0;
        else
            continue;
        if (at - e->t1 > 1 * MS)
            continue;
        if (!(h = hold_of(s, e)) ||
            fault_during(s, F_RESTART, e->t0, next->t1) ||
            forced_during(s, e->name, e->t0, next->t1) ||
            paused_during(s, e->worker, e->t0, next->t1))
            continue;
        if (next->rc == RLOCK_ELOST) {
            violation(s, I_RETURNED,
                      "worker %d owner %d hold %d: %s returned RLOCK_OK, and "
                      "%lld us later %s",
                      e->worker, e->owner, e->hold,
                      e->reentry ? "a re-entry" : "an acquisition",
                      (long long)((at - e->t1) / 1000),
                      next->kind == EV_LEFT
                          ? "the lease was over"
                          : "drawing its token found it lost");
            continue;
        }
        if (!e->reentry || next->rc != RLOCK_OK)
            continue;
        /* A re-entry sets the lease again, counted from before its request
         * left; no longer than an extension of the hold that failed. */
        want = h->owed_ms && h->owed_ms < lease ? h->owed_ms : lease;
        want -= (next->t0 - e->t0) / MS + want / 100 + 2 + 20;
        if (next->a < want)
            violation(s, I_RETURNED,
                      "worker %d owner %d hold %d: a re-entry returned with "
                      "%lld ms of lease left, not the lease set again (%lld "
                      "ms at least)",
                      e->worker, e->owner, e->hold, (long long)next->a,
                      (long long)want);
    }
}

static void check_tokens(state *s)
{
    int i, k;

    for (i = 0; i < s->nholds; i++) {
        hold *a = &s->holds[i];
        if (!a->fresh_ok || !a->token)
            continue;
        for (k = 0; k < s->nholds; k++) {
            hold *b = &s->holds[k];
            if (k == i || !b->fresh_ok || !b->token || b->name != a->name)
                continue;
            if (a->acq_t1 < b->acq_t0 && a->token >= b->token)
                violation(s, I_TOKENS,
                          "name %d: worker %d owner %d hold %d got token %llu; "
                          "worker %d owner %d hold %d, acquired after it, "
                          "%llu",
                          a->name, a->w, a->o, a->no,
                          (unsigned long long)a->token, b->w, b->o, b->no,
                          (unsigned long long)b->token);
        }
    }
}

/* Whether some owner holds name at t, or is taking or letting it go, as
 * far as the log says; or the lock is a killed worker's. */
static int accounted(state *s, int name, int64_t t, int64_t holder_pid,
                     const ex_log *l)
{
    /* An acquisition takes the lock at its last attempt, or by a hand-over
     * that it claims within the grant's lease: it accounts for a held lock
     * only that long before it returned, not for the whole of its wait (a
     * lock that nobody owns stands in the way of its waiters, and waiting
     * is all they do about it). */
    int64_t taking = (lease_of(s->p) + s->p->command_timeout_ms +
                      (s->p->replicas ? s->p->sync_timeout_ms : 0)) *
                     MS;
    int i, w;

    for (w = 0; w < s->p->workers; w++)
        if (s->killed_at[w] && s->killed_at[w] <= t)
            if (holder_pid == 0 || holder_pid == l->pid[w])
                return 1;
    for (i = 0; i < s->nholds; i++) {
        hold *h = &s->holds[i];
        int64_t end, from;
        if (h->name != name || !h->acq_t0)
            continue;
        from = h->acq_t1 - taking > h->acq_t0 ? h->acq_t1 - taking : h->acq_t0;
        if (from > t)
            continue;
        /* From then to the last call on it; one that is still open at the
         * end of the log holds it to the end. */
        end = h->end_t1 > h->acq_t1 ? h->end_t1 : h->acq_t1;
        if (h->fresh_ok && !h->clean && !h->reported && h->level > 0)
            end = INT64_MAX;
        if (t <= end)
            return 1;
    }
    return 0;
}

static void check_nobody(state *s, const ex_log *l)
{
    const ex_plan *p = s->p;
    int name;
    long i;

    for (name = 0; name < p->names; name++) {
        int64_t from = 0, last = 0;
        for (i = 0; i <= s->n; i++) {
            const ex_event *e = i < s->n ? &s->ev[i] : NULL;
            int nobody;
            if (e &&
                (e->kind != EV_STATUS || e->name != name || e->rc != RLOCK_OK))
                continue;
            nobody = e && e->a && !accounted(s, name, e->t0, e->b, l);
            if (nobody) {
                if (!from)
                    from = e->t0;
                last = e->t1;
                continue;
            }
            if (from) {
                int64_t allowed =
                    (lease_of(p) + 2 * p->slow_ms + s->slack) * MS +
                    stopped_during(s, from, last);
                if (last - from > allowed)
                    violation(s, I_NOBODY,
                              "name %d: held by nobody from +%lld ms for "
                              "%lld ms (allowed %lld ms)",
                              name, (long long)((from - s->ev[0].t0) / MS),
                              (long long)((last - from) / MS),
                              (long long)(allowed / MS));
            }
            from = 0;
        }
    }
}

void ex_check(const ex_plan *p, const ex_log *l, int64_t slack_ms,
              ex_verdict *v)
{
    state s;
    long i, n = atomic_load(&l->n);
    int w, o;

    memset(v, 0, sizeof *v);
    memset(&s, 0, sizeof s);
    if (n > EX_EVENTS_MAX)
        n = EX_EVENTS_MAX;
    s.p = p;
    s.slack = slack_ms;
    s.v = v;
    s.n = n;
    s.ev = malloc(sizeof *s.ev * (size_t)(n ? n : 1));
    if (!s.ev)
        return;
    memcpy(s.ev, l->ev, sizeof *s.ev * (size_t)n);
    qsort(s.ev, (size_t)n, sizeof *s.ev, by_t0);
    for (i = 0; i < n; i++) {
        const ex_event *e = &s.ev[i];
        if (e->kind == EV_FAULT) {
            v->faults++;
            if (e->a == F_KILL_WORKER && e->b >= 0 && e->b < EX_WORKERS_MAX)
                s.killed_at[e->b] = e->t0;
        }
    }
    for (i = 0; i < n; i++)
        if (s.ev[i].worker >= 0 && s.ev[i].kind != EV_DEATH)
            read_call(&s, &s.ev[i]);
    for (i = 0; i < s.nholds; i++)
        v->lost += s.holds[i].reported || s.holds[i].state_lost;
    if (n > 0) {
        check_exclusion(&s);
        check_notice(&s);
        check_returned(&s);
        check_tokens(&s);
        check_nobody(&s, l);
    }
    for (i = 0; i < s.nholds; i++) {
        free(s.holds[i].win);
        free(s.holds[i].sets);
    }
    free(s.holds);
    for (w = 0; w < EX_WORKERS_MAX; w++)
        for (o = 0; o < EX_OWNERS_MAX; o++)
            free(s.index[w][o]);
    free(s.ev);
}
