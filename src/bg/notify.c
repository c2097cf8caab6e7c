/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Loss notices: the on_lost callbacks, delivered on threads of their own.
 *
 * A hold the client finds lost (its lease ran out unrenewed, a renewal or
 * a token's draw found it gone) is reported to its owner twice: the next
 * call on it returns RLOCK_ELOST, and the mutex's on_lost is called. The
 * callback is the application's code and may take as long as it likes, so
 * it never runs on the thread that renews leases and watches their ends:
 * a callback that slept there once stopped every other hold's renewal and
 * notice, and another client took a lock this one still believed it held.
 *
 * A notice is queued when the hold is marked lost (rlock__bg_lose) and
 * lives apart from the hold: whatever happens to the hold afterwards (a
 * call that reports ELOST and forgets it, an unlock, a re-lock) cannot
 * drop it. Notices are taken, oldest first, by notifier threads. One is
 * started with the first notice; when every notifier is busy in a callback
 * and a notice has waited NOTICE_SPAWN_MS, the background step starts
 * another (at most NOTIFIERS_MAX), so one callback that blocks holds up
 * no other hold's notice for longer than that. Callbacks of one client may
 * therefore run at the same time, on different threads. Notifiers live
 * until the client is closed.
 *
 * The same threads deliver the events and log lines the background thread
 * reports (core/observe.h), which must not run the application's code
 * either: a notice without a mutex asks a notifier to deliver what the
 * client queued, in order, one notifier at a time.
 */
#include <signal.h>
#include <stdlib.h>

#include "bg/bg.h"
#include "bg/events.h"
#include "core/observe.h"
#include "util/clock.h"

/* How long a notice may wait while every notifier is busy before another
 * notifier is started. */
#define NOTICE_SPAWN_MS 10
/* Most notifier threads of one client. */
#define NOTIFIERS_MAX 32

typedef struct rlock__notice {
    struct rlock__notice *next;
    rlock_mutex *m; /* NULL: deliver the client's queued events */
    int64_t posted; /* monotonic ns */
} rlock__notice;

struct rlock__notify {
    rlock__notice *head, **tail;
    pthread_cond_t cv; /* with c->mu: a notice arrived, or stop */
    pthread_t threads[NOTIFIERS_MAX];
    int n;     /* notifier threads started */
    int idle;  /* of them, waiting for a notice */
    int start; /* a thread started, not yet running (start-up handshake) */
    int stop;
};

static struct rlock__notify *state(rlock_client *c)
{
    struct rlock__notify *s = c->bg->notify;

    if (!s && (s = calloc(1, sizeof *s)) != NULL) {
        s->tail = &s->head;
        rlock__cond_init(&s->cv);
        c->bg->notify = s;
    }
    return s;
}

/* Queues a notice for m (NULL: the events) (mu held). */
static void post(rlock_client *c, rlock_mutex *m)
{
    struct rlock__notify *s;
    rlock__notice *n;

    /* Out of memory: the loss is still reported, by the next call on the
     * hold; only the callback is missed. */
    if (!(s = state(c)) || !(n = malloc(sizeof *n)))
        return;
    n->next = NULL;
    n->m = m;
    n->posted = rlock__now_ns();
    *s->tail = n;
    s->tail = &n->next;
    if (s->idle > 0)
        pthread_cond_signal(&s->cv);
    else
        rlock__bg_kick(c); /* the background step starts a notifier */
}

int rlock__bg_lose(rlock_client *c, rlock__hold *h, int cause, const char *how)
{
    if (h->lost)
        return 0;
    h->lost = 1;
    rlock__hold_lost(c, h, cause, how);
    /* A request of the hold that was never answered (a renewal, an
     * extension, a re-entry) may still run and set a lease nobody owns:
     * the hold is given back, behind it. */
    if (h->owed_max_ms > 0)
        rlock__undo_hold_later(c, h);
    /* A hold its call has not returned yet is never the owner's to be
     * told of: that call sees the loss and gives the hold back. */
    if (!h->m->opts.on_lost || h->unreturned)
        return 1;
    post(c, h->m);
    return 1;
}

void rlock__notify_events(rlock_client *c)
{
    if (rlock__obs_handoff(c->obs))
        post(c, NULL);
}

void rlock__notify_call(rlock_client *c, rlock_mutex *m)
{
    if (!m) {
        /* The events: in order, on this thread, until none is left. */
        pthread_mutex_unlock(&c->mu);
        rlock__obs_drain(c->obs);
        pthread_mutex_lock(&c->mu);
        return;
    }
    m->callbacks++; /* rlock_mutex_free waits for it */
    pthread_mutex_unlock(&c->mu);
    /* The callback is the application's code: it may fork, and the calls
     * it makes get the client's own timeouts. */
    m->opts.on_lost(m, m->opts.on_lost_arg);
    pthread_mutex_lock(&c->mu);
    m->callbacks--;
    pthread_cond_broadcast(&c->state_cv);
}

static void *notifier_main(void *arg)
{
    rlock_client *c = arg;
    struct rlock__notify *s = c->bg->notify;

    pthread_mutex_lock(&c->mu);
    s->start = 0;
    pthread_cond_broadcast(&c->state_cv);
    while (!s->stop) {
        rlock__notice *n = s->head;
        rlock_mutex *m;

        if (!n) {
            s->idle++;
            pthread_cond_wait(&s->cv, &c->mu);
            s->idle--;
            continue;
        }
        if (!(s->head = n->next))
            s->tail = &s->head;
        m = n->m;
        free(n);
        rlock__notify_call(c, m);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* Starts a notifier thread (mu held; released while it starts). */
static void spawn(rlock_client *c, struct rlock__notify *s)
{
    sigset_t all, old;

    /* Signals are the application's: the thread blocks them all. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    s->start = 1;
    if (pthread_create(&s->threads[s->n], NULL, notifier_main, c) == 0)
        s->n++;
    else
        s->start = 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    /* Until the thread runs (it needs mu to clear start): then it counts
     * itself idle or takes a notice before the background step looks at
     * the notifiers again. This does not keep fork() out: the wait
     * releases mu, so a child may be forked before the thread started;
     * it has no notifier either way, and its first call on the client
     * forgets the parent's (rlock__notify_after_fork). */
    while (s->start)
        pthread_cond_wait(&c->state_cv, &c->mu);
}

void rlock__notify_step(rlock_client *c, int64_t *next)
{
    struct rlock__notify *s = c->bg->notify;
    int64_t due;

    if (!s || !s->head || s->idle > 0 || s->stop)
        return;
    due = s->head->posted + NOTICE_SPAWN_MS * RLOCK__NS_PER_MS;
    if (s->n == 0 || (s->n < NOTIFIERS_MAX && rlock__now_ns() >= due)) {
        spawn(c, s);
        /* Another notice may wait behind the one this thread takes. */
        *next = rlock__earlier(*next, rlock__after_ms(NOTICE_SPAWN_MS));
    } else if (s->n < NOTIFIERS_MAX) {
        *next = rlock__earlier(*next, due);
    }
}

int rlock__notify_take(rlock_client *c, rlock_mutex **m)
{
    struct rlock__notify *s = c->bg->notify;
    rlock__notice *n;

    if (!s || !(n = s->head))
        return 0;
    if (!(s->head = n->next))
        s->tail = &s->head;
    *m = n->m;
    free(n);
    return 1;
}

int rlock__notify_waiting(const rlock_client *c)
{
    return c->bg->notify && c->bg->notify->head;
}

void rlock__notify_forget(rlock_client *c, const rlock_mutex *m)
{
    struct rlock__notify *s = c->bg->notify;
    rlock__notice **p;

    if (!s)
        return;
    for (p = &s->head; *p;) {
        rlock__notice *n = *p;
        if (n->m == m) {
            *p = n->next;
            free(n);
        } else {
            p = &n->next;
        }
    }
    s->tail = &s->head;
    while (*s->tail)
        s->tail = &(*s->tail)->next;
}

void rlock__notify_free(rlock_client *c)
{
    struct rlock__notify *s = c->bg ? c->bg->notify : NULL;
    int i;

    if (!s)
        return;
    pthread_mutex_lock(&c->mu);
    s->stop = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&c->mu);
    for (i = 0; i < s->n; i++)
        pthread_join(s->threads[i], NULL);
    while (s->head) {
        rlock__notice *n = s->head;
        s->head = n->next;
        free(n);
    }
    pthread_cond_destroy(&s->cv);
    free(s);
    c->bg->notify = NULL;
}

void rlock__notify_after_fork(rlock_client *c)
{
    struct rlock__notify *s = c->bg->notify;

    /* The parent's notifiers are not the child's, nor are its notices
     * (the child forgets the parent's holds). The memory is the child's
     * copy and is freed; the condition variable is not destroyed, as the
     * parent's threads may have been waiting on it. */
    if (!s)
        return;
    while (s->head) {
        rlock__notice *n = s->head;
        s->head = n->next;
        free(n);
    }
    free(s);
    c->bg->notify = NULL;
}
