/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * An async worker process: the event-loop API (rlock/async.h) under the
 * same schedules and the same checker as the blocking workers. One loop
 * thread (poll(2) through the generic hooks) runs every owner of the
 * worker as a state machine: a hold is taken (try, timed or for ever),
 * worked on while the owner asks how much lease is left
 * (rlock_async_lease_left) every 15 to 30 ms, re-entered, let go a level
 * at a time, extended, and let go; each owner's handle is its owner, a
 * new one for each hold. Half of the handles draw tokens on demand
 * (rlock_async_mutex_tokens): their holds are taken lean, and most draw
 * their token with rlock_async_fence at once, some later in the body; a
 * few are switched to tokens at once while they hold.
 * Every call goes to the log with its start and the time its callback
 * came, as the blocking workers log theirs.
 *
 * A callback never blocks here: on_lost does not stall (a stalled loop is
 * the application's own doing, and would delay every call of the worker
 * past its bound; the async tests stall one on purpose).
 */
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <rlock/async.h>

#include "explore.h"

#define FDS_MAX 256
#define MS 1000000LL

/* Where an owner is. */
enum {
    A_IDLE,    /* until due: the next hold */
    A_LOCKING, /* its fresh acquisition is pending */
    A_BODY,    /* holding: the next step when due */
    A_WORK,    /* working until work_until, looking at the lease */
    A_CALL,    /* a call of the body is pending */
    A_RELEASE, /* letting every level go */
    A_LOSS,    /* waiting for on_lost (a loss seen as a state) */
};

typedef struct aowner {
    const ex_plan *p;
    ex_log *l;
    rlock_async *a;
    int w, o;
    ex_rng r;
    int hold; /* the current hold's number */
    int state;
    int64_t due;
    rlock_async_mutex *m;
    int name, how, level, lost, tries, steps, called;
    int64_t wait_ms, t0, work_until, loss_until, arg;
    int kind; /* of the call pending: EV_ACQ, EV_REL, EV_EXT, EV_TOKEN */
    int lean; /* the handle's tokens come on demand */
} aowner;

typedef struct aloop {
    struct pollfd fds[FDS_MAX];
    int n;
    int64_t timer; /* ex_now_ns, 0: none */
} aloop;

static void note(aowner *ow, int kind, int64_t t0, int64_t t1, int rc,
                 int level, int reentry, int64_t a, int64_t b, uint64_t token)
{
    ex_event e = {kind,    ow->w, ow->o, ow->name, ow->hold, rc,   level,
                  reentry, t0,    t1,    a,        b,        token};

    ex_log_add(ow->l, &e);
}

/* ---- the loop's hooks --------------------------------------------------- */

static void watch(void *arg, int fd, int events)
{
    aloop *p = arg;
    int i;

    for (i = 0; i < p->n && p->fds[i].fd != fd; i++)
        ;
    if (events == 0) {
        if (i < p->n)
            p->fds[i] = p->fds[--p->n];
        return;
    }
    if (i == p->n) {
        if (p->n == FDS_MAX)
            abort();
        p->n++;
    }
    p->fds[i].fd = fd;
    p->fds[i].events = (short)(((events & RLOCK_ASYNC_READ) ? POLLIN : 0) |
                               ((events & RLOCK_ASYNC_WRITE) ? POLLOUT : 0));
}

static void timer(void *arg, int64_t after_ms)
{
    aloop *p = arg;

    p->timer = after_ms < 0 ? 0 : ex_now_ns() + after_ms * MS;
}

/* ---- an owner ------------------------------------------------------------ */

static void step(aowner *ow);

/* Asks how much lease is left, to the log: 1 while held, 0 once lost. */
static int left(aowner *ow)
{
    int64_t ms = 0, t = ex_now_ns();
    int rc = rlock_async_lease_left(ow->m, &ms);

    note(ow, EV_LEFT, t, ex_now_ns(), rc, 0, 0, ms, 0, 0);
    return rc == RLOCK_OK;
}

static void on_lost(rlock_mutex *m, void *arg)
{
    aowner *ow = arg;
    int64_t t = ex_now_ns();

    (void)m;
    ow->called = 1;
    note(ow, EV_LOST, t, ex_now_ns(), 0, 0, 0, 0, 0, 0);
}

static void at(aowner *ow, int state, int64_t due)
{
    ow->state = state;
    ow->due = due;
}

/* The hold was seen lost: on_lost is waited for (3 s at most). */
static void seen_lost(aowner *ow)
{
    ow->lost = 1;
    ow->loss_until = ex_now_ns() + 3000 * MS;
    at(ow, A_RELEASE, ex_now_ns());
}

static void fenced(rlock_async_mutex *m, int rc, uint64_t token, void *arg);

static void locked(rlock_async_mutex *m, int rc, uint64_t token, void *arg)
{
    aowner *ow = arg;
    int64_t t1 = ex_now_ns();

    (void)m;
    if (ow->state == A_LOCKING) {
        ow->level = rc == RLOCK_OK;
        note(ow, EV_ACQ, ow->t0, t1, rc, ow->level, 0, ow->how, ow->wait_ms,
             token);
        if (rc != RLOCK_OK) {
            at(ow, A_RELEASE, t1);
            return;
        }
        ow->steps = (int)ex_range(&ow->r, 1, 4);
        /* A lean hold draws its token now, from the callback, as a
         * holder that fences before it acts does. */
        if (token == 0 && ex_chance(&ow->r, 70)) {
            ow->t0 = t1;
            ow->kind = EV_TOKEN;
            at(ow, A_CALL, 0);
            if (rlock_async_fence(ow->m, fenced, ow) != RLOCK_OK)
                at(ow, A_RELEASE, t1);
            return;
        }
        if (!left(ow)) {
            seen_lost(ow);
            return;
        }
        at(ow, A_BODY, t1);
        return;
    }
    /* A re-entry. */
    if (rc == RLOCK_OK)
        ow->level++;
    else if (rc == RLOCK_ELOST)
        ow->level = 0;
    note(ow, EV_ACQ, ow->t0, t1, rc, ow->level, 1, ow->how, 0, 0);
    if (rc == RLOCK_OK && !left(ow)) {
        seen_lost(ow);
        return;
    }
    at(ow, A_BODY, t1);
}

/* A token drawn: the hold goes on unless that found it gone (lost: a
 * loss notice follows, and the level is let go as after any loss). */
static void fenced(rlock_async_mutex *m, int rc, uint64_t token, void *arg)
{
    aowner *ow = arg;
    int64_t t1 = ex_now_ns();

    (void)m;
    note(ow, EV_TOKEN, ow->t0, t1, rc, ow->level, 0, 0, 0, token);
    ow->kind = 0;
    if (rc == RLOCK_ELOST || !left(ow)) {
        seen_lost(ow);
        return;
    }
    at(ow, A_BODY, t1);
}

static void done(rlock_async_mutex *m, int rc, void *arg)
{
    aowner *ow = arg;
    int64_t t1 = ex_now_ns();

    (void)m;
    if (ow->state == A_RELEASE) {
        if (rc == RLOCK_OK || rc == RLOCK_ENOTIFY)
            ow->level--;
        else if (rc == RLOCK_ELOST || rc == RLOCK_ENOTOWNER)
            ow->level = 0;
        else
            ow->tries++;
        note(ow, EV_REL, ow->t0, t1, rc, ow->level, 0, 0, 0, 0);
        ow->kind = 0;
        ow->due = t1;
        return;
    }
    if (ow->kind == EV_REL) {
        if (rc == RLOCK_OK)
            ow->level--;
        else if (rc == RLOCK_ELOST)
            ow->level = 0;
        note(ow, EV_REL, ow->t0, t1, rc, ow->level, 0, 0, 0, 0);
    } else {
        if (rc == RLOCK_ELOST)
            ow->level = 0;
        note(ow, EV_EXT, ow->t0, t1, rc, ow->level, 0, ow->arg, 0, 0);
        if (ow->level > 0 && !left(ow)) {
            seen_lost(ow);
            return;
        }
    }
    at(ow, A_BODY, t1);
}

static void start_hold(aowner *ow)
{
    const ex_plan *p = ow->p;
    int64_t lease = p->lease_ms ? p->lease_ms : p->watchdog_ms;
    rlock_mutex_opts mo;
    char key[32];
    int pick, err;

    ow->hold++;
    ow->name = (int)ex_range(&ow->r, 0, p->names - 1);
    pick = (int)ex_range(&ow->r, 0, 99);
    ow->how = pick < 30 ? EX_LOCK : pick < 55 ? EX_TRY : EX_TIMED;
    ow->wait_ms = ow->how == EX_TIMED ? ex_range(&ow->r, 1, lease * 3) : 0;
    ow->level = ow->lost = ow->tries = ow->called = 0;
    ow->kind = 0;
    rlock_mutex_opts_init(&mo);
    mo.lease_ms = p->lease_ms;
    mo.layout = p->layout;
    mo.on_lost = on_lost;
    mo.on_lost_arg = ow;
    snprintf(key, sizeof key, "ex%d", ow->name);
    if (!(ow->m = rlock_async_mutex_new(ow->a, key, &mo, &err))) {
        at(ow, A_IDLE, ex_now_ns() + 30 * MS);
        return;
    }
    ow->lean = ex_chance(&ow->r, 50);
    if (ow->lean)
        rlock_async_mutex_tokens(ow->m, RLOCK_ASYNC_TOKENS_ON_DEMAND);
    ow->t0 = ex_now_ns();
    at(ow, A_LOCKING, 0);
    if (rlock_async_lock(ow->m,
                         ow->how == EX_LOCK  ? -1
                         : ow->how == EX_TRY ? 0
                                             : ow->wait_ms,
                         locked, ow) != RLOCK_OK) {
        rlock_async_mutex_free(ow->m);
        ow->m = NULL;
        at(ow, A_IDLE, ex_now_ns() + 30 * MS);
    }
}

/* One step of the body: work, re-enter, let an inner level go, extend. */
static void body(aowner *ow)
{
    const ex_plan *p = ow->p;
    int64_t lease = p->lease_ms ? p->lease_ms : p->watchdog_ms;
    int pick, rc = RLOCK_OK;

    if (ow->steps-- <= 0 || ow->level <= 0 || atomic_load(&ow->l->stop)) {
        at(ow, A_RELEASE, ex_now_ns());
        return;
    }
    pick = (int)ex_range(&ow->r, 0, 99);
    /* Now and then a lean handle comes to want tokens at once, holding:
     * a re-entry of its lean hold then draws the token after it. */
    if (ow->lean && pick >= 95) {
        ow->lean = 0;
        rlock_async_mutex_tokens(ow->m, RLOCK_ASYNC_TOKENS_AT_ONCE);
    }
    if (pick < 45) {
        int64_t ms = ex_chance(&ow->r, 80)
                         ? ex_range(&ow->r, 0, lease / 4)
                         : ex_range(&ow->r, lease / 2, lease * 3 / 2);
        ow->work_until = ex_now_ns() + ms * MS;
        at(ow, A_WORK, ex_now_ns());
        return;
    }
    ow->t0 = ex_now_ns();
    at(ow, A_CALL, 0);
    if (pick < 60) {
        ow->kind = EV_ACQ;
        ow->how = ex_chance(&ow->r, 50) ? EX_LOCK : EX_TRY;
        /* (A re-entry of the handle's own hold: answered from memory or
         * by one extension.) */
        rc = rlock_async_lock(ow->m, ow->how == EX_LOCK ? -1 : 0, locked, ow);
    } else if (pick < 70 && ow->level > 1) {
        ow->kind = EV_REL;
        rc = rlock_async_unlock(ow->m, done, ow);
    } else if (pick < 78 && ow->lean) {
        ow->kind = EV_TOKEN;
        rc = rlock_async_fence(ow->m, fenced, ow);
    } else {
        ow->kind = EV_EXT;
        ow->arg = ex_range(&ow->r, lease / 4, p->extend_max_ms);
        rc = rlock_async_extend(ow->m, ow->arg, done, ow);
    }
    if (rc != RLOCK_OK)
        at(ow, A_RELEASE, ex_now_ns());
}

static void release(aowner *ow)
{
    if (ow->level > 0 && ow->tries < 3) {
        ow->t0 = ex_now_ns();
        if (ow->level == 1)
            note(ow, EV_LETGO, ow->t0, ow->t0, 0, ow->level, 0, 0, 0, 0);
        ow->due = 0;
        if (rlock_async_unlock(ow->m, done, ow) != RLOCK_OK)
            ow->tries = 3;
        return;
    }
    if (ow->lost && !ow->called && ex_now_ns() < ow->loss_until) {
        at(ow, A_LOSS, ex_now_ns() + 10 * MS);
        return;
    }
    if (ow->m)
        rlock_async_mutex_free(ow->m);
    ow->m = NULL;
    at(ow, A_IDLE, ex_now_ns() + ex_range(&ow->r, 0, 30) * MS);
}

/* The owner's next move, its time come (due set, not 0). */
static void step(aowner *ow)
{
    switch (ow->state) {
    case A_IDLE:
        if (!atomic_load(&ow->l->stop))
            start_hold(ow);
        else
            ow->due = 0;
        break;
    case A_BODY:
        body(ow);
        break;
    case A_WORK:
        if (!left(ow)) {
            seen_lost(ow);
        } else if (ex_now_ns() >= ow->work_until) {
            at(ow, A_BODY, ex_now_ns());
        } else {
            ow->due = ex_now_ns() + ex_range(&ow->r, 15, 30) * MS;
        }
        break;
    case A_RELEASE:
    case A_LOSS:
        if (ow->state == A_LOSS)
            ow->state = A_RELEASE;
        release(ow);
        break;
    default:
        break;
    }
}

/* ---- the worker ---------------------------------------------------------- */

void ex_async_worker_main(const ex_plan *p, int w, const char *url, ex_log *l)
{
    rlock_client_opts co;
    rlock_async_hooks h;
    rlock_async *a;
    aowner ow[EX_OWNERS_MAX];
    aloop lp;
    int i, err;

    ex_client_opts(p, &co);
    /* One or two connections for all of the worker's owners, its
     * renewals and its undos: their requests share them, pipelined, and
     * the faults give requests up in the middle of a line. */
    co.max_connections = 1 + (int)(p->seed % 2);
    memset(&lp, 0, sizeof lp);
    memset(&h, 0, sizeof h);
    h.watch = watch;
    h.timer = timer;
    h.arg = &lp;
    if (!(a = rlock_async_open(url, &co, &err)) ||
        rlock_async_attach(a, &h) != RLOCK_OK) {
        atomic_store(&l->done[w], 1);
        _exit(0);
    }
    for (i = 0; i < p->owners; i++) {
        memset(&ow[i], 0, sizeof ow[i]);
        ow[i].p = p;
        ow[i].l = l;
        ow[i].a = a;
        ow[i].w = w;
        ow[i].o = i;
        ex_rng_init(&ow[i].r, p->seed, 300 + (uint64_t)w, (uint64_t)i);
        ow[i].state = A_IDLE;
        ow[i].due = ex_now_ns();
    }
    for (;;) {
        int64_t now = ex_now_ns(), next = now + 20 * MS;
        int busy = 0, ms;
        struct pollfd fds[FDS_MAX];
        int n = lp.n;

        /* At the end, waits in progress are cancelled, and the owners
         * let their holds go. */
        if (atomic_load(&l->stop))
            for (i = 0; i < p->owners; i++)
                if (ow[i].state == A_LOCKING && ow[i].how != EX_TRY)
                    rlock_async_cancel(ow[i].m);
        for (i = 0; i < p->owners; i++) {
            if (ow[i].state != A_IDLE || ow[i].due != 0)
                busy = 1;
            if (ow[i].due && ow[i].due < next)
                next = ow[i].due;
        }
        if (!busy)
            break;
        if (lp.timer && lp.timer < next)
            next = lp.timer;
        ms = next > now ? (int)((next - now + MS - 1) / MS) : 0;
        memcpy(fds, lp.fds, sizeof *fds * (size_t)n);
        for (i = 0; i < n; i++)
            fds[i].revents = 0;
        if (poll(fds, (nfds_t)n, ms) < 0)
            continue;
        for (i = 0; i < n; i++) {
            int ev = 0;
            if (fds[i].revents & (POLLIN | POLLERR | POLLHUP))
                ev |= RLOCK_ASYNC_READ;
            if (fds[i].revents & (POLLOUT | POLLERR | POLLHUP))
                ev |= RLOCK_ASYNC_WRITE;
            if (ev)
                rlock_async_ready(a, fds[i].fd, ev);
        }
        if (lp.timer && ex_now_ns() >= lp.timer) {
            lp.timer = 0;
            rlock_async_timeout(a);
        }
        for (i = 0; i < p->owners; i++)
            if (ow[i].due && ex_now_ns() >= ow[i].due)
                step(&ow[i]);
    }
    rlock_async_close(a);
    atomic_store(&l->done[w], 1);
    _exit(0);
}
