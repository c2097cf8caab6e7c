/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A worker process: one client, and owners on threads of their own (an
 * even owner is its thread, an odd one an rlock_owner the thread acts as)
 * that take, keep and give back holds of the plan's names through the
 * public API, as an application would, every choice drawn from the
 * owner's own generator. Every call goes to the log with its start, its
 * end and what it returned; so do on_lost callbacks. A holder asks how
 * much lease it has left before and while it works, as a careful
 * application does: those answers are the promises the checker holds the
 * library to.
 *
 * Each hold uses a mutex handle of its own, freed after it, so that an
 * on_lost callback names the hold it is about.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "explore.h"

typedef struct owner {
    const ex_plan *p;
    ex_log *l;
    rlock_client *c;
    int w, o;
    rlock_owner *obj; /* odd owners: an rlock_owner; even: the thread */
    ex_rng r;
    ex_rng r2; /* for choices added later, so that r draws as it did and a
                  kept seed's owners keep what they did */
    int hold;  /* the current hold's number */
} owner;

/* What an on_lost callback needs: whose hold it is, and how long to
 * stall (the plan makes some callbacks slow). */
typedef struct hold_ctx {
    owner *ow;
    int name, hold, stall_ms;
    atomic_int called;
} hold_ctx;

static void sleep_ms(int64_t ms)
{
    struct timespec ts;

    if (ms <= 0)
        return;
    ts.tv_sec = ms / 1000;
    ts.tv_nsec = (long)(ms % 1000) * 1000000L;
    nanosleep(&ts, NULL);
}

static void note(owner *ow, int kind, int name, int64_t t0, int64_t t1, int rc,
                 int level, int reentry, int64_t a, int64_t b, uint64_t token)
{
    ex_event e = {kind,    ow->w, ow->o, name, ow->hold, rc,   level,
                  reentry, t0,    t1,    a,    b,        token};

    ex_log_add(ow->l, &e);
}

static void on_lost(rlock_mutex *m, void *arg)
{
    hold_ctx *h = arg;
    ex_event e;

    (void)m;
    memset(&e, 0, sizeof e);
    e.kind = EV_LOST;
    e.worker = h->ow->w;
    e.owner = h->ow->o;
    e.name = h->name;
    e.hold = h->hold;
    e.t0 = ex_now_ns();
    atomic_store(&h->called, 1);
    sleep_ms(h->stall_ms);
    e.t1 = ex_now_ns();
    ex_log_add(h->ow->l, &e);
}

/* ---- the calls, as the owner ------------------------------------------- */

static int acquire(owner *ow, rlock_mutex *m, int how, int64_t wait_ms)
{
    switch (how) {
    case EX_LOCK:
        return ow->obj ? rlock_mutex_lock_as(m, ow->obj) : rlock_mutex_lock(m);
    case EX_TRY:
        return ow->obj ? rlock_mutex_trylock_as(m, ow->obj)
                       : rlock_mutex_trylock(m);
    default:
        return ow->obj ? rlock_mutex_timedlock_as(m, ow->obj, wait_ms)
                       : rlock_mutex_timedlock(m, wait_ms);
    }
}

static int unlock(owner *ow, rlock_mutex *m)
{
    return ow->obj ? rlock_mutex_unlock_as(m, ow->obj) : rlock_mutex_unlock(m);
}

static int extend(owner *ow, rlock_mutex *m, int64_t lease_ms)
{
    return ow->obj ? rlock_mutex_extend_as(m, ow->obj, lease_ms)
                   : rlock_mutex_extend(m, lease_ms);
}

static int fence(owner *ow, rlock_mutex *m, uint64_t *token)
{
    return ow->obj ? rlock_mutex_fence_as(m, ow->obj, token)
                   : rlock_mutex_fence(m, token);
}

/* Asks how much lease is left and writes the answer to the log: 1 while
 * held, 0 once the hold is lost (or gone). */
static int left(owner *ow, rlock_mutex *m, int name)
{
    int64_t ms = 0, t = ex_now_ns();
    int rc = ow->obj ? rlock_mutex_lease_left_as(m, ow->obj, &ms)
                     : rlock_mutex_lease_left(m, &ms);

    note(ow, EV_LEFT, name, t, ex_now_ns(), rc, 0, 0, ms, 0, 0);
    return rc == RLOCK_OK;
}

/* Waits, asking how much lease is left every 15 to 30 ms, until at most
 * last_ms is: a holder that extends only at the last moment. 1 then, 0
 * once the hold is lost (or gone). */
static int wait_for_last(owner *ow, rlock_mutex *m, int name, int64_t last_ms)
{
    while (!atomic_load(&ow->l->stop)) {
        int64_t ms = 0, t = ex_now_ns();
        int rc = ow->obj ? rlock_mutex_lease_left_as(m, ow->obj, &ms)
                         : rlock_mutex_lease_left(m, &ms);

        note(ow, EV_LEFT, name, t, ex_now_ns(), rc, 0, 0, ms, 0, 0);
        if (rc != RLOCK_OK)
            return 0;
        if (ms <= last_ms)
            break;
        sleep_ms(ms - last_ms < 15 ? ms - last_ms : ex_range(&ow->r2, 15, 30));
    }
    return 1;
}

/* ---- a hold ------------------------------------------------------------- */

/* The length of a lease as the plan has it. */
static int64_t lease_of(const ex_plan *p)
{
    return p->lease_ms ? p->lease_ms : p->watchdog_ms;
}

/* What a holder does while it holds m (level levels): works (asking how
 * much lease is left every 15 to 30 ms), re-enters, lets an inner level
 * go, extends, asks for its token. Returns the levels it still holds (0
 * once the hold is lost or gone). *lost: the loss was seen as a state (a
 * lease that ended), which on_lost must tell too. */
static int body(owner *ow, rlock_mutex *m, int name, int level, int *lost)
{
    const ex_plan *p = ow->p;
    int64_t lease = lease_of(p);
    int steps = (int)ex_range(&ow->r, 1, 4), s;

    for (s = 0; s < steps && level > 0 && !atomic_load(&ow->l->stop); s++) {
        int pick = (int)ex_range(&ow->r, 0, 99), rc;
        int64_t t0, t1;

        if (pick < 45) {
            /* Work: short mostly, sometimes longer than a fixed lease. */
            int64_t ms = ex_chance(&ow->r, 80)
                             ? ex_range(&ow->r, 0, lease / 4)
                             : ex_range(&ow->r, lease / 2, lease * 3 / 2);
            int64_t until = ex_now_ns() + ms * 1000000LL;
            while (ex_now_ns() < until) {
                if (!left(ow, m, name)) {
                    *lost = 1;
                    return level;
                }
                sleep_ms(ex_range(&ow->r, 15, 30));
            }
        } else if (pick < 60) {
            int how = ex_chance(&ow->r, 50) ? EX_LOCK : EX_TRY;
            t0 = ex_now_ns();
            rc = acquire(ow, m, how, 0);
            t1 = ex_now_ns();
            if (rc == RLOCK_OK)
                level++;
            else if (rc == RLOCK_ELOST)
                level = 0; /* reported and forgotten */
            note(ow, EV_ACQ, name, t0, t1, rc, level, 1, how, 0, 0);
            if (rc == RLOCK_OK && !left(ow, m, name)) {
                *lost = 1;
                return level;
            }
        } else if (pick < 70 && level > 1) {
            t0 = ex_now_ns();
            rc = unlock(ow, m);
            t1 = ex_now_ns();
            if (rc == RLOCK_OK)
                level--;
            else if (rc == RLOCK_ELOST)
                level = 0;
            note(ow, EV_REL, name, t0, t1, rc, level, 0, 0, 0, 0);
        } else if (pick < 85) {
            int64_t ms = ex_range(&ow->r, lease / 4, p->extend_max_ms);
            /* A fixed lease is sometimes extended at its last moment, and
             * then by much, as a holder that extends only when it must:
             * the answer may come after the lease as counted ended, and
             * what it set outlasts a lease by far (the watchdog's lease
             * never comes near its end). */
            if (p->lease_ms && ex_chance(&ow->r2, 35)) {
                if (!wait_for_last(ow, m, name, ex_range(&ow->r2, 10, 300))) {
                    *lost = 1;
                    return level;
                }
                ms = ex_range(&ow->r2, 2 * lease, 6 * lease);
            }
            t0 = ex_now_ns();
            rc = extend(ow, m, ms);
            t1 = ex_now_ns();
            if (rc == RLOCK_ELOST)
                level = 0;
            note(ow, EV_EXT, name, t0, t1, rc, level, 0, ms, 0, 0);
            if (level > 0 && !left(ow, m, name)) {
                *lost = 1;
                return level;
            }
        } else {
            uint64_t token = 0;
            t0 = ex_now_ns();
            rc = fence(ow, m, &token);
            t1 = ex_now_ns();
            if (rc == RLOCK_ELOST)
                *lost = 1; /* marked lost, not forgotten */
            note(ow, EV_TOKEN, name, t0, t1, rc, level, 0, 0, 0, token);
            if (rc == RLOCK_ELOST)
                return level;
        }
    }
    return level;
}

/* Writes to the log, before the call, that a call letting the last level
 * of the hold go begins at t0: if the worker is killed in it, the release
 * may still reach Redis and a waiter take the lock, and the checker must
 * know that the holder had begun to let go (a call is logged only once it
 * returns). */
static void note_letgo(owner *ow, int name, int64_t t0, int level)
{
    if (level == 1)
        note(ow, EV_LETGO, name, t0, t0, 0, level, 0, 0, 0, 0);
}

/* Lets every level go; a level that got no answer is asked again, twice
 * at most (then the mutex's free forgets the hold). */
static void release_all(owner *ow, rlock_mutex *m, int name, int level)
{
    int tries = 0;

    while (level > 0 && tries < 3) {
        int64_t t0 = ex_now_ns(), t1;
        int rc;
        note_letgo(ow, name, t0, level);
        rc = unlock(ow, m);
        t1 = ex_now_ns();
        if (rc == RLOCK_OK || rc == RLOCK_ENOTIFY)
            level--;
        else if (rc == RLOCK_ELOST || rc == RLOCK_ENOTOWNER)
            level = 0;
        else
            tries++;
        note(ow, EV_REL, name, t0, t1, rc, level, 0, 0, 0, 0);
    }
}

typedef struct with_arg {
    owner *ow;
    rlock_mutex *m;
    int name, lost;
    int64_t t0, wait_ms;
    int64_t t_fn_end;
} with_arg;

static int with_fn(void *arg, uint64_t token)
{
    with_arg *wa = arg;
    int64_t t = ex_now_ns();
    int level;

    note(wa->ow, EV_ACQ, wa->name, wa->t0, t, RLOCK_OK, 1, 0, EX_WITH,
         wa->wait_ms, token);
    level = left(wa->ow, wa->m, wa->name) ? 1 : 0;
    if (level == 0)
        wa->lost = 1;
    else
        level = body(wa->ow, wa->m, wa->name, 1, &wa->lost);
    /* Inner levels go back here; rlock_with lets the last one go. */
    while (level > 1) {
        int64_t t0 = ex_now_ns();
        int rc = unlock(wa->ow, wa->m);
        level = rc == RLOCK_OK ? level - 1 : rc == RLOCK_ELOST ? 0 : level - 1;
        note(wa->ow, EV_REL, wa->name, t0, ex_now_ns(), rc, level, 0, 0, 0, 0);
    }
    wa->t_fn_end = ex_now_ns();
    /* rlock_with lets the last level go once this returns. */
    note_letgo(wa->ow, wa->name, wa->t_fn_end, level);
    return 0;
}

static void one_hold(owner *ow)
{
    const ex_plan *p = ow->p;
    int64_t lease = lease_of(p), wait_ms = 0, t0, t1;
    int name = (int)ex_range(&ow->r, 0, p->names - 1);
    int pick = (int)ex_range(&ow->r, 0, 99), how, rc, err, level, lost = 0;
    rlock_mutex_opts mo;
    rlock_mutex *m;
    hold_ctx ctx;
    char key[32];
    uint64_t token = 0;

    ow->hold++;
    memset(&ctx, 0, sizeof ctx);
    ctx.ow = ow;
    ctx.name = name;
    ctx.hold = ow->hold;
    ctx.stall_ms = ex_chance(&ow->r, p->callback_stall_pct)
                       ? (int)ex_range(&ow->r, 1000, 3000)
                       : 0;
    rlock_mutex_opts_init(&mo);
    mo.lease_ms = p->lease_ms;
    mo.layout = p->layout;
    mo.on_lost = on_lost;
    mo.on_lost_arg = &ctx;
    snprintf(key, sizeof key, "ex%d", name);
    if (!(m = rlock_mutex_new(ow->c, key, &mo, &err)))
        return;
    how = pick < 25   ? EX_LOCK
          : pick < 45 ? EX_TRY
          : pick < 80 ? EX_TIMED
                      : EX_WITH;
    if (how == EX_TIMED || how == EX_WITH)
        wait_ms = ex_range(&ow->r, 0, lease * 3);
    if (how == EX_WITH) {
        with_arg wa;
        memset(&wa, 0, sizeof wa);
        wa.ow = ow;
        wa.m = m;
        wa.name = name;
        wa.wait_ms = wait_ms;
        wa.t0 = ex_now_ns();
        rc = ow->obj ? rlock_with_as(m, ow->obj, wait_ms, with_fn, &wa)
                     : rlock_with(m, wait_ms, with_fn, &wa);
        t1 = ex_now_ns();
        if (wa.t_fn_end)
            note(ow, EV_REL, name, wa.t_fn_end, t1, rc, 0, 0, EX_WITH, 0, 0);
        else
            note(ow, EV_ACQ, name, wa.t0, t1, rc, 0, 0, EX_WITH, wait_ms, 0);
        lost = wa.lost;
    } else {
        t0 = ex_now_ns();
        rc = acquire(ow, m, how, wait_ms);
        t1 = ex_now_ns();
        level = rc == RLOCK_OK ? 1 : 0;
        if (rc == RLOCK_OK && ex_chance(&ow->r, 70)) {
            /* Logged: a hold taken lean draws its token here, a round trip
             * that finds the hold gone if an operator forced it open after
             * the acquisition took it (the checker must see what told the
             * owner its hold was lost). */
            int64_t f0 = ex_now_ns();
            int frc = fence(ow, m, &token);
            note(ow, EV_TOKEN, name, f0, ex_now_ns(), frc, level, 0, 0, 0,
                 token);
        }
        note(ow, EV_ACQ, name, t0, t1, rc, level, 0, how, wait_ms, token);
        if (level > 0) {
            if (!left(ow, m, name))
                lost = 1;
            else
                level = body(ow, m, name, level, &lost);
            release_all(ow, m, name, level);
        }
    }
    /* A loss seen as a state is told by on_lost too: give it time to come
     * before the handle goes (freeing drops a notice not yet delivered). */
    if (lost) {
        int64_t until = ex_now_ns() + 3000 * 1000000LL;
        while (!atomic_load(&ctx.called) && ex_now_ns() < until)
            sleep_ms(10);
    }
    rlock_mutex_free(m);
}

static void *owner_main(void *arg)
{
    owner *ow = arg;

    while (!atomic_load(&ow->l->stop)) {
        one_hold(ow);
        sleep_ms(ex_range(&ow->r, 0, 30));
    }
    return NULL;
}

void ex_client_opts(const ex_plan *p, rlock_client_opts *co)
{
    rlock_client_opts_init(co);
    co->command_timeout_ms = p->command_timeout_ms;
    co->connect_timeout_ms = p->command_timeout_ms;
    co->watchdog_lease_ms = p->watchdog_ms;
    co->waiter_ttl_ms = p->waiter_ttl_ms;
    if (p->replicas) {
        co->sync_replicas = 1;
        co->sync_timeout_ms = p->sync_timeout_ms;
    }
}

void ex_worker_main(const ex_plan *p, int w, const char *url, ex_log *l)
{
    rlock_client_opts co;
    rlock_client *c = NULL;
    owner ow[EX_OWNERS_MAX];
    pthread_t th[EX_OWNERS_MAX];
    int i, err;

    if (w == p->async_worker)
        ex_async_worker_main(p, w, url, l); /* never returns */
    ex_client_opts(p, &co);
    /* The server may be paused or the proxy dropping connections. */
    while (!atomic_load(&l->stop) && !(c = rlock_client_open(url, &co, &err)))
        sleep_ms(50);
    if (!c) {
        atomic_store(&l->done[w], 1);
        _exit(0);
    }
    for (i = 0; i < p->owners; i++) {
        memset(&ow[i], 0, sizeof ow[i]);
        ow[i].p = p;
        ow[i].l = l;
        ow[i].c = c;
        ow[i].w = w;
        ow[i].o = i;
        ex_rng_init(&ow[i].r, p->seed, 100 + (uint64_t)w, (uint64_t)i);
        ex_rng_init(&ow[i].r2, p->seed, 200 + (uint64_t)w, (uint64_t)i);
        if (i % 2)
            ow[i].obj = rlock_owner_new(&err);
        pthread_create(&th[i], NULL, owner_main, &ow[i]);
    }
    /* At the end, waits in progress are cancelled until every owner is
     * done with its hold. */
    while (!atomic_load(&l->stop))
        sleep_ms(20);
    for (i = 0; i < p->owners; i++) {
        struct timespec ts;
        for (;;) {
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 50 * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            if (pthread_timedjoin_np(th[i], NULL, &ts) == 0)
                break;
            rlock_client_cancel_waits(c);
        }
        rlock_owner_free(ow[i].obj);
    }
    rlock_client_close(c);
    atomic_store(&l->done[w], 1);
    _exit(0);
}
