/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Waiting for a lock.
 *
 * A wait is an op (engine/ops.h, rlock__wait_op): a state machine whose
 * steps are attempts (each with a deadline of its own, each an op
 * itself), a wait for the subscription to be confirmed, sleeps until a
 * time or a wake-up, the check of a grant, leaving the queue. The
 * blocking API drives it on the calling thread (rlock__acquire), which
 * sleeps on its waiter's condition variable or reads the subscriber
 * itself between attempts; an event loop drives the same steps with a
 * timer and a wake-up callback instead.
 *
 * Where the layout keeps a queue (rlock's own), a waiter joins it with its
 * first attempt that finds the lock busy (arrival order is decided by
 * Redis, not by who retries fastest) and then sleeps until one of:
 *  - a grant naming this waiter and this wait's nonce arrived: the
 *    releasing script handed the lock to the first live waiter and told
 *    that waiter's client. The waiter then holds the lock without another
 *    round trip. Its lease is counted from before the first attempt of
 *    this acquisition (under its nonce), which was sent before the grant
 *    could happen, so the count is never later than Redis's. (Not from
 *    the last attempt that found the lock busy: a grant whose message was
 *    held up may have been made, and have ended, before that attempt ran,
 *    which then found another owner holding the lock. The explorer found
 *    two holders that way.) A grant found so late that
 *    less than a third of its lease is left is renewed before the call returns
 *    (rlock__keep_op), and one whose lease ran out is given back;
 *  - the current lease or the head waiter's place runs out (the hint the
 *    acquire script returned): a holder that crashed, or a message that
 *    was lost, never strands a waiter longer than that;
 *  - a third of waiter_ttl_ms passed: the waiter must refresh its place in
 *    the queue or it will be dropped as dead;
 *  - the wait's deadline.
 * Then it tries again; the acquire script re-checks everything, so a
 * spurious wake costs one round trip and is never wrong.
 *
 * Where the deployment replaces a master that fails (RLOCK__BK_FAILOVER:
 * Sentinel), an attempt that failed the way a failover does (no reply, a
 * connection lost or refused, a server that is a replica now) does not end
 * the wait: the backend asks the sentinels before the next attempt, and
 * the wait goes on, after a short pause that grows while the failures
 * last, against whichever master they name, until its own bound (none for
 * rlock_mutex_lock). Nothing of the failed attempt is carried over: one
 * that may have run was undone behind its request and its nonce spent
 * (rlock__attempt), so that a late run of it, or of its undo, can touch
 * nothing the later attempts take; and on a new master the wait is a
 * fresh one, queued there anew, that subscribes again (c->moves: an
 * attempt after which the client moved is not slept on until the
 * subscription on the new master is confirmed, or for more than a
 * backoff).
 *
 * A timed wait ends within its bound: every step it takes after the wait
 * began (an attempt, the renewal or replica check of a grant, leaving the
 * queue) ends by the wait's deadline plus one call's budget (the command
 * timeout, and the sync timeout with replicas); what leaving could not do
 * by then is done in the background, behind the requests it undoes.
 *
 * No missed wake-ups: the waiter is registered (and its "woken" flag
 * cleared) before each attempt, and the subscription to the lock's channel
 * is confirmed by Redis before the attempt whose failure the waiter sleeps
 * on. A release that happens after that attempt publishes a message that
 * reaches the subscriber, which sets the flag even if the waiter has not
 * started sleeping yet.
 *
 * A layout with a channel but no queue (Redisson's) waits the same way:
 * it joins nothing, is woken by the release message (from rlock or from
 * the peer) or by the end of the holder's lease, and tries again; whoever
 * comes first takes the lock, and a waiter that leaves without it hands a
 * wake-up on (the layout's pass_on). Without messages (the token layout,
 * Redlock, use_pubsub = 0, or while the subscriber connection is down)
 * the sleep is a random delay in [backoff_min_ms, backoff_max_ms], so
 * that many waiters do not retry in step.
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
#include "core/waiter.h"
#include "engine/engine.h"
#include "engine/hold_ops.h"
#include "engine/ops.h"
#include "layout/layout.h"
#include "util/clock.h"

typedef enum step {
    ATTEMPT,   /* send an attempt */
    SUBSCRIBE, /* wait (briefly) for the subscription to be confirmed */
    SLEEP,     /* until `until` or a wake-up */
    DONE       /* rc says how it ended */
} step;

typedef rlock__wait_op wait;

/*
 * Takes a grant that arrived for this wait (mu held). Returns 1 if the
 * owner now holds the lock. A grant whose lease would already have ended
 * by our count is not taken: the next attempt claims it afresh with a new
 * lease if it is still ours.
 */
static int accept_grant(wait *s)
{
    rlock__waiter *w = &s->w;

    if (!w->granted)
        return 0;
    w->granted = 0;
    if (rlock__now_ns() >= s->t_base + w->grant_ms * RLOCK__NS_PER_MS)
        return 0;
    return rlock__hold_record(s->call, s->m, s->owner, w->grant_token, w->nonce,
                              1, s->t_base, w->grant_ms) == RLOCK_OK;
}

/* What to do next, before an attempt (mu held). */
static step before_attempt(wait *s)
{
    rlock_client *c = s->m->c;
    int rc;

    if (accept_grant(s)) {
        s->granted = 1;
        s->rc = RLOCK_OK;
        return DONE;
    }
    if (c->cancel_gen != s->cancel_gen) {
        s->rc = rlock__fail(s->call, RLOCK_ECANCELED, "the wait was cancelled");
        return DONE;
    }
    s->w.woken = 0;
    s->subscribed = 0;
    s->moves = __atomic_load_n(&c->moves, __ATOMIC_ACQUIRE);
    /* The first attempt needs no subscription unless the mutex has one
     * already: an uncontended lock costs one round trip and no subscriber
     * connection. */
    if (!s->wakes || (!s->attempted && !s->m->subscribed))
        return ATTEMPT;
    if ((rc = rlock__sub_want(c, s->m, s->call)) < 0) {
        s->rc = rc;
        return DONE;
    }
    s->subscribed = rc;
    if (!s->subscribed && s->attempted && !s->awaited_sub) {
        /* First contention on this mutex: let Redis confirm the
         * subscription before the attempt we will sleep on. Not for long:
         * without pub/sub we back off instead. */
        s->awaited_sub = 1;
        s->until = rlock__after_ms(c->opts.backoff_max_ms);
        if (!s->forever && s->until > s->deadline)
            s->until = s->deadline;
        return SUBSCRIBE;
    }
    return ATTEMPT;
}

/* The acquisition was undone and its nonce spent (mu not held): a grant
 * under the old one is no longer ours to take, and the next attempts
 * (which refresh our place) carry the new one. */
static void nonce_spent(wait *s)
{
    rlock_client *c = s->m->c;

    pthread_mutex_lock(&c->mu);
    s->w.nonce = s->nonce;
    s->w.granted = 0;
    s->t_base = rlock__now_ns(); /* before the next attempt */
    pthread_mutex_unlock(&c->mu);
}

/* Whether rc ends a failed step of the wait as a failover would: the
 * master did not answer, dropped or refused the connection, or is a
 * replica now (or still loading), on a deployment that replaces it. */
static int failing_over(const wait *s, int rc)
{
    return (s->m->c->backend->flags & RLOCK__BK_FAILOVER) &&
           (rc == RLOCK_ENOREPLY || rc == RLOCK_EIO || rc == RLOCK_ECONNECT ||
            rc == RLOCK_EUNAVAILABLE);
}

/* After a step that failed as in a failover, with time left: a pause
 * (none after the first, which waited out a whole deadline or found a
 * connection gone; then the backoff, doubled at each failure in a row up
 * to the keep-alive), and another attempt. */
static step after_failover_step(wait *s)
{
    rlock_client *c = s->m->c;
    int64_t ms = 0, keepalive_ms = c->opts.waiter_ttl_ms / 3;

    if (s->fails++ > 0) {
        int shift = s->fails - 2 < 4 ? s->fails - 2 : 4;
        ms = rlock__jitter(c->opts.backoff_min_ms, c->opts.backoff_max_ms)
             << shift;
        if (ms > keepalive_ms)
            ms = keepalive_ms;
    }
    s->until = rlock__now_ns() + ms * RLOCK__NS_PER_MS;
    if (!s->forever && s->until > s->deadline)
        s->until = s->deadline;
    s->subscribed = 0;
    return SLEEP;
}

/* What to do after an attempt that answered rc (mu not held). */
static step after_attempt(wait *s, int rc, uint64_t old_nonce)
{
    rlock_client *c = s->m->c;
    /* A place is refreshed after a quarter to a third of its TTL, at
     * random: waiters that queued together (a burst, a loop's many at
     * once) refresh apart rather than together at every third for as long
     * as they wait, and a release among them does not queue behind a wave
     * of refreshes for the connections. */
    int64_t now, sleep_ms,
        keepalive_ms =
            rlock__jitter(c->opts.waiter_ttl_ms / 4, c->opts.waiter_ttl_ms / 3);

    s->attempted = 1;
    if (s->nonce != old_nonce)
        nonce_spent(s);
    /* A failover under way: the wait goes on while it has time (above). */
    if (rc != RLOCK_EBUSY && failing_over(s, rc) &&
        (s->forever || rlock__now_ns() < s->deadline))
        return after_failover_step(s);
    /* A connection that dropped under an attempt (the server closed it, a
     * proxy restarted) is replaced and the wait goes on, within the
     * deadline; the attempt itself is being undone. Twice in a row is a
     * server that is going away: tell the caller. A timeout is not
     * retried on a single server: the caller asked for a bound. */
    if (rc == RLOCK_EIO && ++s->drops < 2 &&
        (s->forever || rlock__now_ns() < s->deadline))
        return ATTEMPT;
    if (rc != RLOCK_EBUSY) {
        s->rc = rc;
        return DONE;
    }
    s->drops = 0;
    s->fails = 0;
    if (s->moves != __atomic_load_n(&c->moves, __ATOMIC_ACQUIRE)) {
        /* The client moved to another master (during this attempt or
         * just before it): the subscription looked at before it was on
         * the old one. Subscribe there, waiting for its confirmation once,
         * and try again before sleeping. */
        s->subscribed = 0;
        s->awaited_sub = 0;
    }
    now = rlock__now_ns();
    if (!s->forever && now >= s->deadline) {
        int took;
        pthread_mutex_lock(&c->mu);
        took = accept_grant(s);
        pthread_mutex_unlock(&c->mu);
        s->granted = took;
        s->gave_up = !took;
        s->rc = took ? RLOCK_OK : RLOCK_ETIMEDOUT;
        return DONE;
    }
    if (s->wakes && !s->subscribed && !s->awaited_sub)
        return ATTEMPT; /* subscribe now, then try again before sleeping */
    if (s->subscribed) {
        /* Sleep until told; wake on our own when the lease or the head's
         * place ends, or to refresh our place. */
        sleep_ms = s->hint_ms >= 0 ? s->hint_ms + 1 : keepalive_ms;
    } else {
        sleep_ms =
            rlock__jitter(c->opts.backoff_min_ms, c->opts.backoff_max_ms);
        if (s->hint_ms >= 0 && s->hint_ms + 1 < sleep_ms)
            sleep_ms = s->hint_ms + 1;
    }
    if (sleep_ms > keepalive_ms)
        sleep_ms = keepalive_ms;
    s->until = now + sleep_ms * RLOCK__NS_PER_MS;
    if (!s->forever && s->until > s->deadline)
        s->until = s->deadline;
    return SLEEP;
}

/* Sleeps until the waiter is woken or until (mu held); one that waits
 * for a message waits on the subscriber connection itself where it can,
 * so that the message wakes this thread directly. */
static void sleep_until(rlock_client *c, rlock__waiter *w, int64_t until,
                        int messages)
{
    struct timespec ts = rlock__timespec(until);
    pthread_cond_t cv;

    rlock__cond_init(&cv);
    w->cv = &cv;
    while (!w->woken && rlock__now_ns() < until)
        if (!messages || !rlock__sub_read(c, w, until))
            pthread_cond_timedwait(&cv, &c->mu, &ts);
    w->cv = NULL;
    pthread_cond_destroy(&cv);
}

/* A step's call: a deadline of its own, no later than the wait's
 * bound. */
static void step_call(wait *s, rlock__call *one)
{
    rlock__call_end(one); /* the step before's detail, if any */
    rlock__call_begin(one, s->m);
    if (s->bound && one->deadline_ns > s->bound)
        one->deadline_ns = s->bound;
}

/* The room for the steps' calls and ops, if the wait has none: 0 when
 * out of memory. */
static int sub_room(wait *s)
{
    if (!s->sub) {
        if (!(s->sub = malloc(sizeof *s->sub)))
            return 0;
        rlock__call_init(&s->sub->one, 0);
    }
    return 1;
}

/* The wait is awake (after its start or a sleep): the room for its
 * steps' calls and ops. 0 when out of memory: the wait ends so. */
static int awake(wait *s)
{
    if (!sub_room(s)) {
        s->rc = rlock__fail(s->call, RLOCK_ENOMEM, "out of memory");
        return 0;
    }
    return 1;
}

/* It sleeps, or is over: the room goes. */
static void asleep(wait *s)
{
    if (s->sub)
        rlock__call_end(&s->sub->one);
    free(s->sub);
    s->sub = NULL;
}

/* A grant was taken (recorded) and checked (rlock__keep_op's rc):
 * it is the caller's once it is known to have lease left, and with
 * replicas that they have it. A grant lost before that was given back:
 * the wait goes on under a new nonce while it has time (mu not held). */
static step grant_kept(wait *s, int rc)
{
    if (rc == RLOCK_OK) {
        s->rc = RLOCK_OK;
        return DONE;
    }
    rlock__call_take(s->call, &s->sub->one);
    s->granted = 0;
    if (rc != RLOCK_EBUSY && !failing_over(s, rc)) {
        s->rc = rc;
        return DONE;
    }
    /* Given back under the grant's nonce: spent. */
    s->nonce = rlock__new_nonce(s->m->c);
    nonce_spent(s);
    if (s->forever || rlock__now_ns() < s->deadline)
        return rc == RLOCK_EBUSY ? ATTEMPT : after_failover_step(s);
    if (rc != RLOCK_EBUSY) {
        s->rc = rc;
        return DONE;
    }
    s->gave_up = 1;
    s->rc = RLOCK_ETIMEDOUT;
    return DONE;
}

/* The wait is about to sleep for the first time: the lock is busy
 * (reported), and what the attempts so far caused is delivered, on this
 * thread, which holds no lock here (mu not held). */
static void before_sleep(wait *s, step next)
{
    rlock_client *c = s->m->c;

    if (next == SLEEP && !s->waited) {
        s->waited = 1;
        if (rlock__obs_on(c->obs, RLOCK_EV_WAITING)) {
            rlock_event ev;
            memset(&ev, 0, sizeof ev);
            ev.type = RLOCK_EV_WAITING;
            ev.attempts = s->attempts;
            rlock__event_lock(s->m, s->owner.no, s->nonce, &ev);
        }
    }
    rlock__obs_flush();
}

void rlock__wait_op_init(rlock__wait_op *s, rlock__call *call, rlock_mutex *m,
                         rlock__as owner, int64_t deadline_ns, int forever)
{
    rlock_client *c = m->c;
    const rlock__layout *lay = m->layout;
    int one_copy = (c->backend->flags & RLOCK__BK_ONE_COPY) != 0;

    memset(s, 0, sizeof *s);
    s->call = call;
    s->m = m;
    s->owner = owner;
    s->deadline = deadline_ns;
    s->forever = forever;
    s->wakes =
        lay->wakes && one_copy && c->backend->sub_node && c->opts.use_pubsub;
    s->queued = (lay->flags & RLOCK__LAY_QUEUE) && one_copy;
    s->nonce = rlock__new_nonce(c);
    s->t_base = rlock__now_ns();
    if (!forever) {
        /* Every step ends by the deadline plus one call's budget. */
        rlock__call budget = {0};
        rlock__call_begin(&budget, m);
        s->bound = deadline_ns + (budget.deadline_ns - rlock__now_ns());
    }
    s->hint_ms = -1;
    s->w.m = m;
    s->w.owner_no = owner.no;
    {
        char who[RLOCK__OWNER_MAX];
        size_t len = lay->owner(c, owner.no, s->nonce, who);
        s->w.hash = rlock__owner_hash(who, len);
    }
    s->w.nonce = s->nonce;
    pthread_mutex_lock(&c->mu);
    rlock__waiter_add(&c->waiters, &s->w);
    s->cancel_gen = c->cancel_gen;
    pthread_mutex_unlock(&c->mu);
}

/* Where a wait is: before an attempt (the grant, the cancel and the
 * subscription looked at), in one, asleep, checking a grant, leaving. */
enum {
    W_BEFORE,
    W_SUBSCRIBED, /* slept for the subscription's confirmation */
    W_ATTEMPT,
    W_ATTEMPTING,
    W_SLEPT,
    W_KEEPING,
    W_FINISH,
    W_LEAVING,
    W_DONE
};

/* The next stage after step next (mu not held); a sleep is asked for. */
static int go(wait *s, step next, rlock__slot **slot);

/* The wait is over (rc set): its waiter goes, and its place in the queue
 * if it gave up. */
static int finish(wait *s, rlock__slot **slot)
{
    rlock_mutex *m = s->m;
    rlock_client *c = m->c;

    pthread_mutex_lock(&c->mu);
    rlock__waiter_remove(&c->waiters, &s->w);
    /* Nothing to leave in Redis: a message this waiter may have taken
     * goes to another. */
    if (!s->queued && s->rc != RLOCK_OK && m->layout->pass_on)
        m->layout->pass_on(c, m);
    pthread_mutex_unlock(&c->mu);
    s->stage = W_DONE;
    if (s->rc == RLOCK_OK) {
        asleep(s);
        return RLOCK__STEP_DONE;
    }
    if (s->gave_up || s->rc == RLOCK_ECANCELED) {
        /* The detail of the timeout, not of the leaving. */
        s->rc = rlock__fail(s->call, s->rc,
                            s->gave_up ? "lock not obtained within the wait"
                                       : "the wait was cancelled");
        if (!s->queued) {
            asleep(s);
            return RLOCK__STEP_DONE;
        }
        /* Leaves the queue after giving up: no trace, and when the call
         * returns its place is gone. With the nonce: a grant that raced
         * with giving up is returned. The undo ends by the wait's bound;
         * what it could not do by then, the background sends later
         * (behind the attempts it undoes). */
        if (!sub_room(s)) {
            rlock__undo_later(m, s->owner.no, s->nonce, 0);
            return RLOCK__STEP_DONE;
        }
        step_call(s, &s->sub->one);
        if (rlock__now_ns() >= s->sub->one.deadline_ns) {
            asleep(s);
            rlock__undo_later(m, s->owner.no, s->nonce, 0);
            return RLOCK__STEP_DONE;
        }
        rlock__undo_op_init(&s->sub->in.undo, s->sub->one.deadline_ns, m,
                            s->owner, s->nonce);
        s->stage = W_LEAVING;
        return rlock__undo_step(&s->sub->in.undo, slot);
    }
    /* (An attempt whose reply never came queued its own undo, under a
     * nonce since replaced; a place taken by an earlier attempt goes.) */
    if (s->queued && s->rc != RLOCK_EINVAL && s->attempted)
        rlock__undo_later(m, s->owner.no, s->nonce, 0);
    asleep(s);
    return RLOCK__STEP_DONE;
}

static int go(wait *s, step next, rlock__slot **slot)
{
    switch (next) {
    case ATTEMPT:
        s->stage = W_BEFORE;
        break;
    case SLEEP:
        s->stage = W_SLEPT;
        s->messages = s->subscribed;
        asleep(s);
        return RLOCK__STEP_SLEEP;
    case SUBSCRIBE:
        s->stage = W_SUBSCRIBED;
        s->messages = 1;
        asleep(s);
        return RLOCK__STEP_SLEEP;
    case DONE:
        if (s->granted && s->stage != W_KEEPING) {
            step_call(s, &s->sub->one);
            rlock__keep_op_init(&s->sub->in.keep, &s->sub->one, s->m, s->owner);
            s->stage = W_KEEPING;
        } else {
            s->stage = W_FINISH;
        }
        break;
    }
    return rlock__wait_step(s, slot);
}

void rlock__wait_op_expire(rlock__wait_op *s)
{
    s->forever = 0;
    s->deadline = s->bound = s->until = 1;
    if (s->sub)
        s->sub->one.deadline_ns = 1;
}

int rlock__wait_step(rlock__wait_op *s, rlock__slot **slot)
{
    rlock_client *c = s->m->c;
    step next;
    int r;

    switch (s->stage) {
    case W_BEFORE:
        if (!awake(s))
            return finish(s, slot);
        pthread_mutex_lock(&c->mu);
        next = before_attempt(s);
        pthread_mutex_unlock(&c->mu);
        if (next == ATTEMPT) {
            s->stage = W_ATTEMPT;
            return rlock__wait_step(s, slot);
        }
        return go(s, next, slot);
    case W_SUBSCRIBED:
        if (!awake(s))
            return finish(s, slot);
        pthread_mutex_lock(&c->mu);
        s->subscribed = rlock__sub_want(c, s->m, s->call) > 0;
        s->w.woken = 0;
        pthread_mutex_unlock(&c->mu);
        /* The attempt that will be slept on. */
        /* fall through */
    case W_ATTEMPT:
        /* One attempt with a deadline of its own; its error detail
         * becomes the wait's. */
        step_call(s, &s->sub->one);
        s->hint_ms = -1;
        s->attempts++;
        s->old_nonce = s->nonce;
        rlock__attempt_op_init(&s->sub->in.attempt, &s->sub->one, s->m,
                               s->owner, 'w', &s->nonce, &s->hint_ms);
        s->stage = W_ATTEMPTING;
        /* fall through */
    case W_ATTEMPTING:
        if ((r = rlock__attempt_step(&s->sub->in.attempt, slot)) !=
            RLOCK__STEP_DONE)
            return r;
        /* A failure's detail is the wait's, should it end with it. A busy
         * lock's is not kept: the wait sleeps, or gives up with a detail
         * of its own (and 10,000 sleepers keep no "busy" each). */
        if ((r = s->sub->in.attempt.rc) != RLOCK_OK && r != RLOCK_EBUSY)
            rlock__call_take(s->call, &s->sub->one);
        next = after_attempt(s, r, s->old_nonce);
        before_sleep(s, next);
        return go(s, next, slot);
    case W_SLEPT:
        return go(s, ATTEMPT, slot);
    case W_KEEPING:
        if ((r = rlock__keep_step(&s->sub->in.keep, slot)) != RLOCK__STEP_DONE)
            return r;
        return go(s, grant_kept(s, s->sub->in.keep.rc), slot);
    case W_FINISH:
        return finish(s, slot);
    case W_LEAVING:
        if ((r = rlock__undo_step(&s->sub->in.undo, slot)) != RLOCK__STEP_DONE)
            return r;
        s->stage = W_DONE;
        asleep(s);
        return RLOCK__STEP_DONE;
    }
    asleep(s);
    return RLOCK__STEP_DONE;
}

int rlock__acquire(rlock__call *call, rlock_mutex *m, rlock__as owner,
                   int64_t deadline_ns, int forever)
{
    rlock_client *c = m->c;
    int64_t t0 = rlock__now_ns();
    rlock__wait_op s;
    rlock__slot *slot;

    rlock__wait_op_init(&s, call, m, owner, deadline_ns, forever);
    for (;;) {
        int what = rlock__wait_step(&s, &slot);
        if (what == RLOCK__STEP_DONE)
            break;
        if (what == RLOCK__STEP_SEND) {
            rlock__slot_run(slot, c);
        } else if (what == RLOCK__STEP_SLEEP) {
            pthread_mutex_lock(&c->mu);
            sleep_until(c, &s.w, s.until, s.messages);
            pthread_mutex_unlock(&c->mu);
        } else {
            rlock__run_quiet(&s.sub->one, m, owner);
        }
    }
    rlock__report_acquire(m, owner, s.rc, t0, s.attempts, s.waited,
                          s.rc == RLOCK_OK && s.granted);
    return s.rc;
}
