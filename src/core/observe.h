/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What a client tells the application about itself: its events, its log
 * lines and its counters (rlock_client_set_event_cb, _set_log_cb, _stats).
 *
 * Every module that sees something happen reports it here, whoever runs
 * it: the engine (acquisitions, releases, waits, undos), the background
 * (renewals, losses, undos sent later, the subscriber connection), the
 * backends (connections, failovers, redirections). Nothing here calls the
 * application's callbacks from the place that reports: a report goes to
 * the calling thread's outbox (a thread-local list), and is delivered
 * later, with no lock of the library held:
 *  - by the thread itself, at the end of the public call that caused it
 *    (rlock__obs_flush, called by rlock__api_done, and by a wait between
 *    its attempts);
 *  - or, for the background thread, which must never run the
 *    application's code (a callback that sleeps there would stall every
 *    renewal), handed to the client's queue (rlock__obs_handoff) and
 *    delivered in order by a notifier thread (bg/notify.c,
 *    rlock__obs_drain).
 * A report costs nothing while nobody listens: the places that report
 * look at `want` first, one relaxed load.
 *
 * The counters are always kept, with relaxed atomic additions.
 */
#ifndef RLOCK_CORE_OBSERVE_H
#define RLOCK_CORE_OBSERVE_H

#include <pthread.h>
#include <stdint.h>

#include <rlock/rlock.h>

/* The counters of rlock_stats that are plain counts. */
enum {
    RLOCK__ST_ACQUISITIONS,
    RLOCK__ST_REENTRIES,
    RLOCK__ST_CONTENDED,
    RLOCK__ST_RELEASES,
    RLOCK__ST_FAILURES,
    RLOCK__ST_WAIT_TIMEOUTS,
    RLOCK__ST_LOSSES,
    RLOCK__ST_RENEWALS,
    RLOCK__ST_RENEWAL_FAILURES,
    RLOCK__ST_EXTENSIONS,
    RLOCK__ST_UNDOS,
    RLOCK__ST_CONN_ERRORS,
    RLOCK__ST_RECONNECTS,
    RLOCK__ST_FAILOVERS,
    RLOCK__ST_REDIRECTS,
    RLOCK__ST_N
};

/* The highest RLOCK_EV_* this version makes. */
#define RLOCK__EV_MAX RLOCK_EV_REDIRECT
/* want's bit for log lines of level l (RLOCK_LOG_*). */
#define RLOCK__WANT_LOG(l) (1u << (16 + (l)))

typedef struct rlock__hist {
    uint64_t count, sum_us;
    uint64_t bucket[RLOCK_STATS_BUCKETS];
} rlock__hist;

struct rlock__note; /* one event or log line on its way (observe.c) */

typedef struct rlock__obs {
    /* Who listens: bit t for events of type t (an event callback, or a log
     * callback whose level takes them), RLOCK__WANT_LOG(l) for log lines
     * of level l. Written under mu, read with relaxed loads anywhere. */
    unsigned want;
    pthread_mutex_t mu; /* what follows, to the counters */
    pthread_cond_t cv;  /* a callback returned */
    void (*event_cb)(const rlock_event *ev, void *arg);
    void *event_arg;
    void (*log_cb)(int level, const char *msg, void *arg);
    void *log_arg;
    int log_min;
    int busy; /* callbacks under way */
    /* What the background reported, for a notifier to deliver. */
    struct rlock__note *head, *last;
    int posted;   /* a notifier was asked to deliver the queue */
    int draining; /* a notifier delivers it now */
    int closing;  /* the client closes: stop delivering */
    /* The client's reference and one per note not yet freed, wherever it
     * waits (another thread's outbox, inside that thread's delivery of
     * another client's callback, may outlive the client): the observer
     * is freed with the last (atomic). */
    int refs;
    /* Counters since open (relaxed atomics). */
    uint64_t n[RLOCK__ST_N];
    uint64_t fail_code[RLOCK_STATS_CODES];
    uint64_t lost_cause[4];
    rlock__hist wait, hold;
} rlock__obs;

/* A new observer (nobody listens, counters 0); NULL if out of memory. */
rlock__obs *rlock__obs_new(void);
/* The client lets it go: no callback is called any more, what is queued
 * is freed, and so is the observer once no note names it. */
void rlock__obs_free(rlock__obs *o);
/* In a forked child: no queue, no callback under way, counters from 0
 * (a new identity), the callbacks kept. */
void rlock__obs_after_fork(rlock__obs *o);
/* Around fork(): take 1 takes mu (after every other lock of the client:
 * nothing is taken while it is held), take 0 gives it back, in the
 * parent and in the child. */
void rlock__obs_fork_hold(rlock__obs *o, int take);

/* Whether events of type t are wanted, or log lines of level l. */
static inline int rlock__obs_on(const rlock__obs *o, int t)
{
    return (__atomic_load_n(&o->want, __ATOMIC_RELAXED) >> t) & 1u;
}
static inline int rlock__obs_log_on(const rlock__obs *o, int level)
{
    return (__atomic_load_n(&o->want, __ATOMIC_RELAXED) &
            RLOCK__WANT_LOG(level)) != 0;
}

/* Reports ev (its strings are copied; size and time_ns are filled here
 * if 0) and, if the log wants it, its line: into the calling thread's
 * outbox. Any thread, any lock held. */
void rlock__obs_event(rlock__obs *o, const rlock_event *ev);
/* Reports a log line of level (RLOCK_LOG_*), if the log wants it. */
void rlock__obs_log(rlock__obs *o, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A connection event (RLOCK_EV_CONN_ERROR, _RECONNECT, _FAILOVER,
 * _REDIRECT) about node, with the RLOCK_E* code (CONN_ERROR) and a
 * detail; counted too (each type has its counter). */
void rlock__obs_node(rlock__obs *o, int type, int code, const char *node,
                     const char *detail);

/* Delivers the calling thread's outbox: the application's callbacks are
 * called here. Only where the thread holds no lock of the library, in a
 * public call of the application (never on the background thread); a
 * no-op inside a callback (the outer delivery takes them after it). */
void rlock__obs_flush(void);
/* The background thread: its outbox goes to o's queue. 1 if a notifier
 * must be asked to deliver it (rlock__obs_drain), 0 if not. */
int rlock__obs_handoff(rlock__obs *o);
/* A notifier thread: delivers o's queue, in order, until it is empty or
 * the client closes. */
void rlock__obs_drain(rlock__obs *o);
/* Forgets what the calling thread's outbox holds for o (the client
 * closes, or its background thread ends). */
void rlock__obs_drop(rlock__obs *o);
/* Before the client's notifiers are stopped: the queue is no longer
 * delivered. */
void rlock__obs_close(rlock__obs *o);

/* Sets the callbacks (rlock_client_set_event_cb, _set_log_cb): waits for
 * the old one's calls under way on other threads. */
void rlock__obs_set_event(rlock__obs *o,
                          void (*cb)(const rlock_event *ev, void *arg),
                          void *arg);
void rlock__obs_set_log(rlock__obs *o, int min_level,
                        void (*cb)(int level, const char *msg, void *arg),
                        void *arg);

/* ---- counters ------------------------------------------------------------
 */

static inline void rlock__obs_count(rlock__obs *o, int counter)
{
    __atomic_fetch_add(&o->n[counter], 1, __ATOMIC_RELAXED);
}
/* One observation of us microseconds in h. */
void rlock__obs_time(rlock__hist *h, int64_t us);
/* An acquisition call that failed with code. */
void rlock__obs_failed(rlock__obs *o, int code);
/* A hold lost for cause (RLOCK_LOST_*). */
void rlock__obs_lost(rlock__obs *o, int cause);
/* The counters, and held (the holds the client has), into st, up to len
 * bytes of it (st->size is left as it is). */
void rlock__obs_stats(rlock__obs *o, int64_t held, rlock_stats *st, size_t len);
/* The upper bounds of the histograms' buckets, in microseconds (the last
 * is none). */
extern const int64_t rlock__obs_bounds_us[RLOCK_STATS_BUCKETS - 1];

/* The log level of events of type t, and the name of t ("acquired"). */
int rlock__obs_level(int t);
const char *rlock__obs_type_name(int t);

#endif
