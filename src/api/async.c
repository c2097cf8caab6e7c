/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The event-loop API (rlock/async.h): a client whose calls and background
 * work are tasks of one rlock__loop (loop/loop.h), driven by the hooks of
 * the application's loop. The calls run the engine's ops (engine/ops.h),
 * the same the blocking API runs on its own thread; what is here is the
 * API's: checking arguments, one call per handle, the callbacks, and
 * when it is safe to run them.
 *
 * Callbacks never run inside the loop's passes: a call that ends is
 * queued, and the queue is delivered when the pass is over, just before
 * rlock_async_ready or rlock_async_timeout returns (depth counts those
 * entries on the stack). A callback may then free a handle or close the
 * client: what is still on the stack must not be freed under it, so a
 * handle freed, or the client closed, at depth > 0 is only marked, and
 * freed when the outermost entry returns.
 */
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <rlock/async.h>

#include "api/api.h"
#include "core/handles.h"
#include "engine/engine.h"
#include "engine/ops.h"
#include "loop/loop.h"
#include "util/clock.h"

enum { K_LOCK, K_UNLOCK, K_EXTEND, K_FENCE };

/* One call in flight, or ended and waiting for its callback. */
typedef struct acall {
    rlock__task t;
    rlock_async_mutex *am;
    int rc;
    char kind;
    char token_stage; /* a lock's second op: its token */
    char try_once;
    char canceled;
    char ended; /* on the queue of callbacks */
    uint64_t token, nonce;
    int64_t t0, hint_ms, lease_ms;
    rlock__call call;
    /* By kind: a lock's or a fence's callback, or an unlock's or an
     * extend's (a pending wait keeps one pointer, not two). */
    union {
        void (*lock)(rlock_async_mutex *m, int status, uint64_t token,
                     void *arg);
        void (*other)(rlock_async_mutex *m, int status, void *arg);
    } cb;
    void *arg;
    struct acall *next_ended;
    /* The op that runs now, in room of its own size (a waiter's is small:
     * 10,000 of them on one loop). */
    union {
        void *any;
        rlock__wait_op *wait;
        rlock__attempt_op *attempt;
        rlock__release_op *release;
        rlock__extend_op *extend;
        rlock__fence_op *fence;
    } op;
} acall;

/* Room for ac's next op, of size bytes (the one before goes): 0 when out
 * of memory. */
static int op_room(acall *ac, size_t size)
{
    free(ac->op.any);
    ac->op.any = malloc(size);
    return ac->op.any != NULL;
}

static void acall_free(acall *ac)
{
    rlock__call_end(&ac->call);
    free(ac->op.any);
    free(ac);
}

struct rlock_async_mutex {
    rlock_async *a;
    rlock_mutex *m;
    rlock_owner *o;
    rlock_async_mutex *prev, *next;
    acall *pending;
    int freed; /* freed by the application at depth > 0: gone later */
    int on_demand; /* RLOCK_ASYNC_TOKENS_ON_DEMAND: locks draw no token */
    void (*on_lost)(rlock_mutex *m, void *arg);
    void *on_lost_arg;
    char *errmsg; /* RLOCK__ERR_MAX bytes from the first error (NULL) */
};

struct rlock_async {
    rlock_client *c;
    rlock__loop *l;
    rlock_async_hooks hooks;
    pthread_t thread;
    int attached;
    int depth;
    int closing;
    rlock_async_mutex *mutexes;
    int nfreed; /* of them, freed by the application, gone at settle */
    acall *ended, **ended_tail;
    acall *delivering; /* the callbacks deliver() runs now */
    int64_t loop_due; /* the loop's timer (0: none) */
    int64_t told_due; /* what the application's timer was told (-1: none) */
};

/* ---- threads and entries ------------------------------------------------ */

static int on_thread(const rlock_async *a)
{
    return !a->attached || pthread_equal(pthread_self(), a->thread);
}

/* The detail of am's last failed call (out of memory: it stays). */
static void set_errmsg(rlock_async_mutex *am, const char *msg)
{
    if (am->errmsg || (am->errmsg = malloc(RLOCK__ERR_MAX)) != NULL)
        snprintf(am->errmsg, RLOCK__ERR_MAX, "%s", msg);
}

/* A call refused: its detail goes to am (if any) and to the calling
 * thread's record for calls of no mutex (rlock_async_errmsg(NULL)). */
static int fail_call(rlock_async_mutex *am, int rc, const char *msg)
{
    rlock__call call = {0};

    rlock__call_init(&call, 0);
    if (am)
        set_errmsg(am, msg);
    return rlock__api_done(&call, NULL, NULL,
                           rlock__fail(&call, rc, "%s", msg));
}

/* Tells the application's timer what is due now: the loop's timer, or at
 * once while callbacks wait. */
static void tell_timer(rlock_async *a)
{
    int64_t due = a->ended ? rlock__now_ns() : a->loop_due;
    int64_t ms;

    if (!a->attached || a->closing)
        return;
    if (due == 0) {
        if (a->told_due != -1) {
            a->told_due = -1;
            a->hooks.timer(a->hooks.arg, -1);
        }
        return;
    }
    if (due == a->told_due)
        return;
    a->told_due = due;
    ms = (due - rlock__now_ns() + RLOCK__NS_PER_MS - 1) / RLOCK__NS_PER_MS;
    a->hooks.timer(a->hooks.arg, ms < 0 ? 0 : ms);
}

static void really_close(rlock_async *a);
static void really_free(rlock_async_mutex *am);
static void deliver(rlock_async *a);

static void enter(rlock_async *a)
{
    a->depth++;
}

/* The outermost entry returns: what was freed or closed meanwhile goes. */
static void settle(rlock_async *a)
{
    rlock_async_mutex *am, *next;

    if (a->closing) {
        really_close(a);
        return;
    }
    /* (Looked for only when there are some: a loop with 100,000 handles
     * settles after every callback.) */
    for (am = a->nfreed > 0 ? a->mutexes : NULL; am; am = next) {
        next = am->next;
        if (am->freed)
            really_free(am);
    }
    a->nfreed = 0;
    tell_timer(a);
}

/* The end of an entry: the callbacks of the calls that ended, then what
 * was freed meanwhile, once nothing of ours is on the stack. */
static void leave(rlock_async *a)
{
    if (a->depth == 1)
        deliver(a);
    if (--a->depth == 0)
        settle(a);
}

/* The end of an entry that runs no callback but those of the calls it
 * ends itself (cancel, free). */
static void leave_quiet(rlock_async *a)
{
    if (--a->depth == 0)
        settle(a);
}

/* ---- the loop's hooks --------------------------------------------------- */

static void loop_watch(void *arg, int fd, short events)
{
    rlock_async *a = arg;
    int ev = 0;

    if (events & POLLIN)
        ev |= RLOCK_ASYNC_READ;
    if (events & POLLOUT)
        ev |= RLOCK_ASYNC_WRITE;
    a->hooks.watch(a->hooks.arg, fd, ev);
}

static void loop_timer(void *arg, int64_t due_ns)
{
    rlock_async *a = arg;

    a->loop_due = due_ns;
    tell_timer(a);
}

/* ---- calls ending ------------------------------------------------------- */

static void end_call(acall *ac, int rc)
{
    rlock_async_mutex *am = ac->am;
    rlock_async *a = am->a;

    if (ac->canceled && rc != RLOCK_OK)
        rc = rlock__fail(&ac->call, RLOCK_ECANCELED, "the call was canceled");
    ac->rc = rc;
    if (rc != RLOCK_OK)
        set_errmsg(am, ac->call.msg && ac->call.msg[0] ? ac->call.msg
                                                       : rlock_strerror(rc));
    rlock__api_done(&ac->call, a->c, am->o, rc);
    ac->ended = 1;
    ac->next_ended = NULL;
    *a->ended_tail = ac;
    a->ended_tail = &ac->next_ended;
    tell_timer(a);
}

/* A call that took or extended a hold returns it as held only with lease
 * left (as the blocking API's held()): a loop that stalled past the lease
 * meanwhile gets RLOCK_ELOST, and the level it took is gone. */
static int still_held(acall *ac, int rc)
{
    rlock_mutex *m = ac->am->m;
    rlock__call check = {0};
    int64_t left;

    if (rc != RLOCK_OK)
        return rc;
    rlock__call_init(&check, 0);
    if (rlock__lease_left(&check, m, ac->t.owner, &left) != RLOCK_ELOST) {
        rlock__call_end(&check);
        return RLOCK_OK;
    }
    rlock__forget(m, ac->t.owner);
    rlock__call_take(&ac->call, &check);
    return RLOCK_ELOST;
}

static void task_done(rlock__task *t);

/* A lock's end once its token stage is over (rc its code): a hold whose
 * token could not be had is given up, as rlock_with gives back a level it
 * cannot fence, so that a callback never says "failed" of a hold the
 * handle keeps: forgotten by the client (nobody renews it) and given back
 * to Redis in the background, so that the next waiter need not wait for
 * its lease to run out. (A re-entry reads its token from memory, unless
 * its hold was taken lean and the handle wants tokens at once now: then
 * the level it took is the one given up.) */
static void lock_ended(acall *ac, int rc, uint64_t token)
{
    if (rc != RLOCK_OK && rc != RLOCK_ELOST)
        rlock__give_up(ac->am->m, ac->t.owner);
    ac->token = rc == RLOCK_OK ? token : 0;
    end_call(ac, still_held(ac, rc));
}

/* The lock's token: from the hold, where the acquisition drew it (the
 * handle asks for tokens at once); else a request of its own, unless the
 * call is being canceled or the handle's tokens come on demand (then
 * token 0: the hold is still the handle's, as rlock_async_cancel says). */
static void token_stage(acall *ac)
{
    rlock_async *a = ac->am->a;
    rlock__slot *slot;

    ac->token_stage = 1;
    if (!op_room(ac, sizeof *ac->op.fence)) {
        lock_ended(ac, rlock__fail(&ac->call, RLOCK_ENOMEM, "out of memory"),
                   0);
        return;
    }
    rlock__fence_op_init(ac->op.fence, &ac->call, ac->am->m, ac->t.owner);
    ac->op.fence->peek = ac->am->on_demand;
    if (rlock__fence_step(ac->op.fence, &slot) == RLOCK__STEP_DONE) {
        lock_ended(ac, ac->op.fence->rc, ac->op.fence->token);
        return;
    }
    rlock__req_free(&slot->req);
    if (ac->canceled) {
        ac->token = 0;
        end_call(ac, still_held(ac, RLOCK_OK));
        return;
    }
    rlock__fence_op_init(ac->op.fence, &ac->call, ac->am->m, ac->t.owner);
    ac->t.step = (rlock__step_fn)rlock__fence_step;
    ac->t.op = ac->op.fence;
    ac->t.wait = NULL;
    rlock__loop_start(a->l, &ac->t);
}

static void task_done(rlock__task *t)
{
    acall *ac = t->arg;
    rlock_mutex *m = ac->am->m;
    int rc;

    switch (ac->kind) {
    case K_LOCK:
        if (ac->token_stage) {
            rlock__fence_op *f = ac->op.fence;
            /* Canceled while its token was being drawn (a lean hold, on a
             * handle that wants tokens at once now): granted all the
             * same, token 0, as rlock_async_cancel says; the hold stays
             * the handle's. */
            if (ac->canceled && f->rc != RLOCK_OK && f->rc != RLOCK_ELOST) {
                ac->token = 0;
                end_call(ac, still_held(ac, RLOCK_OK));
                return;
            }
            lock_ended(ac, f->rc, f->token);
            return;
        }
        if (ac->try_once) {
            rc = ac->op.attempt->rc;
            rlock__report_acquire(m, t->owner, rc, ac->t0, 1, 0, 0);
        } else {
            rc = ac->op.wait->rc;
            rlock__report_acquire(m, t->owner, rc, ac->t0,
                                  ac->op.wait->attempts, ac->op.wait->waited,
                                  rc == RLOCK_OK && ac->op.wait->granted);
        }
        if (rc == RLOCK_OK)
            token_stage(ac);
        else
            end_call(ac, rc);
        return;
    case K_UNLOCK:
        end_call(ac, ac->op.release->rc);
        return;
    case K_FENCE:
        ac->token = ac->op.fence->rc == RLOCK_OK ? ac->op.fence->token : 0;
        end_call(ac, ac->op.fence->rc);
        return;
    default:
        rc = ac->op.extend->rc;
        if (rc == RLOCK_OK)
            rlock__report_extend(m, t->owner, ac->lease_ms);
        end_call(ac, still_held(ac, rc));
        return;
    }
}

/* Runs the callback of ac, which has ended (off the queue already). */
static void call_back(acall *ac)
{
    rlock_async_mutex *am = ac->am;

    am->pending = NULL;
    if (ac->kind == K_LOCK || ac->kind == K_FENCE)
        ac->cb.lock(am, ac->rc, ac->rc == RLOCK_OK ? ac->token : 0, ac->arg);
    else
        ac->cb.other(am, ac->rc, ac->arg);
    acall_free(ac);
}

/* The callbacks of the calls that ended so far: those that end while
 * they run (a callback that starts a call which fails at once, again and
 * again) wait for the next turn, so that the loop gets its thread back. */
static void deliver(rlock_async *a)
{
    acall *ac;

    a->delivering = a->ended;
    a->ended = NULL;
    a->ended_tail = &a->ended;
    while ((ac = a->delivering) != NULL) {
        a->delivering = ac->next_ended;
        call_back(ac);
    }
}

/* Takes ac off whichever queue of callbacks holds it. */
static void unqueue(rlock_async *a, acall *ac)
{
    acall **p;

    for (p = &a->delivering; *p; p = &(*p)->next_ended)
        if (*p == ac) {
            *p = ac->next_ended;
            return;
        }
    for (p = &a->ended; *p; p = &(*p)->next_ended)
        if (*p == ac) {
            *p = ac->next_ended;
            break;
        }
    a->ended_tail = &a->ended;
    while (*a->ended_tail)
        a->ended_tail = &(*a->ended_tail)->next_ended;
}

/* Ends am's pending call now, its callback run before this returns. */
static int cancel(rlock_async_mutex *am)
{
    rlock_async *a = am->a;
    acall *ac = am->pending;

    if (!ac)
        return RLOCK_ENOTOWNER;
    if (!ac->ended) {
        ac->canceled = 1;
        /* Its done (task_done) runs inside, and queues it. */
        rlock__loop_cancel(a->l, &ac->t);
    }
    unqueue(a, ac);
    call_back(ac);
    return RLOCK_OK;
}

/* ---- the client --------------------------------------------------------- */

rlock_async *rlock_async_open(const char *url, const rlock_client_opts *opts,
                              int *err)
{
    rlock_async *a;
    int dummy;

    if (!err)
        err = &dummy;
    if (!(a = calloc(1, sizeof *a))) {
        *err = fail_call(NULL, RLOCK_ENOMEM, "out of memory");
        return NULL;
    }
    if (!(a->c = rlock__client_open(url, opts, 1, err))) {
        free(a);
        return NULL;
    }
    a->ended_tail = &a->ended;
    a->told_due = -1;
    *err = RLOCK_OK;
    return a;
}

int rlock_async_attach(rlock_async *a, const rlock_async_hooks *hooks)
{
    rlock__loop_hooks lh;
    int rc;

    if (!a || !hooks || !hooks->watch || !hooks->timer)
        return fail_call(NULL, RLOCK_EINVAL,
                         "the client, the hooks and both their functions "
                         "must not be NULL");
    if (a->attached || a->closing)
        return fail_call(NULL, RLOCK_EINVAL, "the client is attached already");
    a->hooks = *hooks;
    lh.watch = loop_watch;
    lh.timer = loop_timer;
    lh.arg = a;
    a->thread = pthread_self();
    a->attached = 1;
    if (!(a->l = rlock__loop_new(a->c, &lh, &rc))) {
        a->attached = 0;
        return fail_call(NULL, rc, "cannot drive the client on this loop");
    }
    return RLOCK_OK;
}

void rlock_async_ready(rlock_async *a, int fd, int events)
{
    short revents = 0;

    if (!a || !a->attached || !on_thread(a) || a->closing)
        return;
    if (events & RLOCK_ASYNC_READ)
        revents |= POLLIN;
    if (events & RLOCK_ASYNC_WRITE)
        revents |= POLLOUT;
    enter(a);
    rlock__loop_ready(a->l, fd, revents);
    leave(a);
}

void rlock_async_timeout(rlock_async *a)
{
    if (!a || !a->attached || !on_thread(a) || a->closing)
        return;
    enter(a);
    a->told_due = -1; /* it came */
    rlock__loop_timeout(a->l);
    leave(a);
}

static void really_free(rlock_async_mutex *am)
{
    rlock_async *a = am->a;

    if (am->prev)
        am->prev->next = am->next;
    else
        a->mutexes = am->next;
    if (am->next)
        am->next->prev = am->prev;
    rlock_mutex_free(am->m);
    rlock_owner_free(am->o);
    free(am->errmsg);
    free(am);
}

static void really_close(rlock_async *a)
{
    while (a->mutexes)
        really_free(a->mutexes);
    if (a->l) {
        rlock__loop_free(a->l);
        if (a->told_due != -1)
            a->hooks.timer(a->hooks.arg, -1);
        if (a->hooks.cleanup)
            a->hooks.cleanup(a->hooks.arg);
    }
    rlock_client_close(a->c);
    free(a);
}

void rlock_async_close(rlock_async *a)
{
    rlock_async_mutex *am;

    if (!a || !on_thread(a) || a->closing)
        return;
    a->closing = 1;
    /* Every pending call is called back now, those that ended and wait
     * for their callback included (cancel takes them off the queue); the
     * callbacks can start no other (closing). Freed once nothing of ours
     * is on the stack: now, or when the callback that closed returns. */
    enter(a);
    for (am = a->mutexes; am; am = am->next)
        if (am->pending)
            cancel(am);
    leave_quiet(a);
}

int rlock_async_stats(rlock_async *a, rlock_stats *st)
{
    if (!a || !on_thread(a))
        return fail_call(NULL, RLOCK_EINVAL,
                         a ? "called from a thread other than the loop's"
                           : "the client is NULL");
    return rlock_client_stats(a->c, st);
}

/* ---- mutexes ------------------------------------------------------------ */

/* on_lost of an async handle: the application's, with its arg. */
static void lost_trampoline(rlock_mutex *m, void *arg)
{
    rlock_async_mutex *am = arg;

    (void)m;
    if (!am->freed && !am->a->closing)
        am->on_lost(am->m, am->on_lost_arg);
}

rlock_async_mutex *rlock_async_mutex_new(rlock_async *a, const char *name,
                                         const rlock_mutex_opts *opts, int *err)
{
    rlock_mutex_opts mo;
    rlock_async_mutex *am;
    int dummy;

    if (!err)
        err = &dummy;
    if (!a || !on_thread(a) || a->closing) {
        *err = fail_call(NULL, RLOCK_EINVAL,
                         !a ? "the client is NULL"
                         : a->closing
                             ? "the client is closing"
                             : "called from a thread other than the loop's");
        return NULL;
    }
    if (opts)
        mo = *opts;
    else
        rlock_mutex_opts_init(&mo);
    if (!(am = calloc(1, sizeof *am)) || !(am->o = rlock_owner_new(err))) {
        free(am);
        *err = fail_call(NULL, RLOCK_ENOMEM, "out of memory");
        return NULL;
    }
    am->a = a;
    am->on_lost = mo.on_lost;
    am->on_lost_arg = mo.on_lost_arg;
    if (mo.on_lost) {
        mo.on_lost = lost_trampoline;
        mo.on_lost_arg = am;
    }
    if (!(am->m = rlock_mutex_new(a->c, name, &mo, err))) {
        rlock_owner_free(am->o);
        free(am);
        return NULL;
    }
    am->m->outer = am;
    /* Its locks draw their token at once: the callback is given it. */
    rlock__want_tokens(am->m);
    am->next = a->mutexes;
    if (a->mutexes)
        a->mutexes->prev = am;
    a->mutexes = am;
    *err = RLOCK_OK;
    return am;
}

void rlock_async_mutex_free(rlock_async_mutex *am)
{
    rlock_async *a;

    if (!am || am->freed)
        return;
    a = am->a;
    if (!on_thread(a))
        return;
    /* Marked first: the callback of the call it ends may not start
     * another on it; freed when nothing of ours is on the stack (now,
     * unless a callback or an entry of the loop's is). */
    am->freed = 1;
    a->nfreed++;
    enter(a);
    if (am->pending)
        cancel(am);
    leave_quiet(a);
}

rlock_async_mutex *rlock_async_mutex_of(rlock_mutex *m)
{
    return m ? m->outer : NULL;
}

const char *rlock_async_errmsg(rlock_async_mutex *am)
{
    if (!am)
        return rlock_client_errmsg(NULL);
    return am->errmsg ? am->errmsg : "";
}

/* Checks a call's arguments and makes its struct. NULL with *rc. */
static acall *call_new(rlock_async_mutex *am, int have_cb, size_t op_size,
                       int *rc)
{
    rlock_async *a = am ? am->a : NULL;
    const char *why = NULL;
    acall *ac;

    if (!am)
        why = "the mutex is NULL";
    else if (!on_thread(a))
        why = "called from a thread other than the loop's";
    else if (am->freed || a->closing)
        why = "the mutex is freed, or its client closing";
    else if (!a->attached)
        why = "the client is attached to no loop (rlock_async_attach)";
    else if (!have_cb)
        why = "the callback is NULL";
    else if (am->pending)
        why = "a call of this mutex is pending: one at a time";
    if (why) {
        /* (The handle's own record only on its thread.) */
        *rc = fail_call(am && on_thread(a) ? am : NULL, RLOCK_EINVAL, why);
        return NULL;
    }
    if (!(ac = calloc(1, sizeof *ac)) || !op_room(ac, op_size)) {
        free(ac);
        *rc = fail_call(am, RLOCK_ENOMEM, "out of memory");
        return NULL;
    }
    ac->am = am;
    rlock__api_enter(a->c);
    rlock__call_begin(&ac->call, am->m);
    ac->t.m = am->m;
    ac->t.owner = rlock__as_owner(am->o);
    ac->t.call = &ac->call;
    ac->t.done = task_done;
    ac->t.arg = ac;
    ac->t0 = rlock__now_ns();
    *rc = RLOCK_OK;
    return ac;
}

/* Starts ac's task: its first step runs now, and may end it (its callback
 * still comes from the loop). */
static int call_start(acall *ac)
{
    rlock_async *a = ac->am->a;

    ac->am->pending = ac;
    enter(a);
    rlock__loop_start(a->l, &ac->t);
    /* (Not leave: no callback runs inside the call that started it.) */
    a->depth--;
    tell_timer(a);
    return RLOCK_OK;
}

int rlock_async_lock(rlock_async_mutex *am, int64_t wait_ms,
                     void (*cb)(rlock_async_mutex *m, int status,
                                uint64_t token, void *arg),
                     void *arg)
{
    acall *ac;
    int rc;

    if (!(ac = call_new(am, cb != NULL,
                        wait_ms == 0 ? sizeof *ac->op.attempt
                                     : sizeof *ac->op.wait,
                        &rc)))
        return rc;
    if (wait_ms > RLOCK_MS_MAX) {
        acall_free(ac);
        return fail_call(am, RLOCK_EINVAL, "wait_ms is too large");
    }
    ac->kind = K_LOCK;
    ac->cb.lock = cb;
    ac->arg = arg;
    if (wait_ms == 0) {
        ac->try_once = 1;
        ac->nonce = rlock__new_nonce(am->a->c);
        rlock__attempt_op_init(ac->op.attempt, &ac->call, am->m, ac->t.owner,
                               't', &ac->nonce, &ac->hint_ms);
        ac->t.step = (rlock__step_fn)rlock__attempt_step;
        ac->t.op = ac->op.attempt;
    } else {
        rlock__wait_op_init(ac->op.wait, &ac->call, am->m, ac->t.owner,
                            wait_ms < 0 ? 0 : rlock__after_ms(wait_ms),
                            wait_ms < 0);
        ac->t.step = (rlock__step_fn)rlock__wait_step;
        ac->t.op = ac->op.wait;
        ac->t.wait = ac->op.wait;
    }
    return call_start(ac);
}

int rlock_async_unlock(rlock_async_mutex *am,
                       void (*cb)(rlock_async_mutex *m, int status, void *arg),
                       void *arg)
{
    acall *ac;
    int rc;

    if (!(ac = call_new(am, cb != NULL, sizeof *ac->op.release, &rc)))
        return rc;
    ac->kind = K_UNLOCK;
    ac->cb.other = cb;
    ac->arg = arg;
    rlock__release_op_init(ac->op.release, &ac->call, am->m, ac->t.owner);
    ac->t.step = (rlock__step_fn)rlock__release_step;
    ac->t.op = ac->op.release;
    return call_start(ac);
}

int rlock_async_extend(rlock_async_mutex *am, int64_t lease_ms,
                       void (*cb)(rlock_async_mutex *m, int status, void *arg),
                       void *arg)
{
    acall *ac;
    int rc;

    if (!(ac = call_new(am, cb != NULL, sizeof *ac->op.extend, &rc)))
        return rc;
    if (lease_ms <= 0 || lease_ms > RLOCK_MS_MAX) {
        acall_free(ac);
        return fail_call(am, RLOCK_EINVAL, "lease_ms must be 1 or more");
    }
    ac->kind = K_EXTEND;
    ac->cb.other = cb;
    ac->arg = arg;
    ac->lease_ms = lease_ms;
    rlock__extend_op_init(ac->op.extend, &ac->call, am->m, ac->t.owner,
                          lease_ms, "extend",
                          "the lease end this client counts with is "
                          "unchanged");
    ac->t.step = (rlock__step_fn)rlock__extend_step;
    ac->t.op = ac->op.extend;
    return call_start(ac);
}

int rlock_async_fence(rlock_async_mutex *am,
                      void (*cb)(rlock_async_mutex *m, int status,
                                 uint64_t token, void *arg),
                      void *arg)
{
    acall *ac;
    int rc;

    if (!(ac = call_new(am, cb != NULL, sizeof *ac->op.fence, &rc)))
        return rc;
    ac->kind = K_FENCE;
    ac->cb.lock = cb;
    ac->arg = arg;
    /* (A handle that asks wants tokens: the op marks its mutex.) */
    rlock__fence_op_init(ac->op.fence, &ac->call, am->m, ac->t.owner);
    ac->t.step = (rlock__step_fn)rlock__fence_step;
    ac->t.op = ac->op.fence;
    return call_start(ac);
}

int rlock_async_mutex_tokens(rlock_async_mutex *am, int when)
{
    if (!am || !on_thread(am->a) || am->freed ||
        (when != RLOCK_ASYNC_TOKENS_AT_ONCE &&
         when != RLOCK_ASYNC_TOKENS_ON_DEMAND))
        return fail_call(am && on_thread(am->a) && !am->freed ? am : NULL,
                         RLOCK_EINVAL,
                         "the mutex is NULL, freed or not the loop thread's, "
                         "or when is not RLOCK_ASYNC_TOKENS_AT_ONCE or "
                         "RLOCK_ASYNC_TOKENS_ON_DEMAND");
    am->on_demand = when == RLOCK_ASYNC_TOKENS_ON_DEMAND;
    if (am->on_demand)
        rlock__tokens_on_demand(am->m);
    else
        rlock__want_tokens(am->m);
    return RLOCK_OK;
}

int rlock_async_lease_left(rlock_async_mutex *am, int64_t *left_ms)
{
    int rc;

    if (left_ms)
        *left_ms = 0;
    if (!am || !left_ms || !on_thread(am->a) || am->freed)
        return fail_call(am && on_thread(am->a) ? am : NULL, RLOCK_EINVAL,
                         "the mutex or left_ms is NULL, or the mutex is "
                         "freed, or not the loop thread's");
    /* Memory only: the blocking API's own answer, as the handle's owner
     * (a loss it finds is queued for the loop's on_lost). */
    rc = rlock_mutex_lease_left_as(am->m, am->o, left_ms);
    if (rc != RLOCK_OK)
        set_errmsg(am, rlock_owner_errmsg(am->o));
    tell_timer(am->a);
    return rc;
}

int rlock_async_cancel(rlock_async_mutex *am)
{
    rlock_async *a;
    int rc;

    if (!am || !on_thread(am->a) || am->freed)
        return fail_call(NULL, RLOCK_EINVAL,
                         "the mutex is NULL, freed, or not the loop thread's");
    /* The callback may free am or close the client: nothing of either is
     * touched after it, and what it freed goes as this returns. */
    a = am->a;
    enter(a);
    rc = cancel(am);
    leave_quiet(a);
    return rc;
}
