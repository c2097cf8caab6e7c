/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The schedule explorer (rlock-explore): many owners in several processes
 * use locks through the public API only, through a proxy and next to a
 * server that a seeded schedule of faults disturbs, and a checker holds
 * the history of every run to the lock's promises (verdict.c).
 *
 *   main.c     options, the loop over schedules, the kept seeds, the report
 *   plan.c     a schedule from a seed: what the run uses, and its faults
 *   worker.c   a worker process: its owners' calls, written to the log
 *   async.c    the same through the event-loop API, on one loop thread
 *   inject.c   the parent's side: the proxy's policy, the faults, the
 *              monitor that reads each lock's state from the server
 *   verdict.c  the invariants, checked on the log after the run
 *
 * A seed fixes a schedule: every choice of the workers, the proxy and the
 * injector is drawn from generators seeded by it (and by which worker,
 * owner or connection draws), at times fixed relative to the run's start.
 * It does not fix how the kernel interleaves the threads: a failing seed
 * replays the same schedule, and the same failure is likely, not certain.
 */
#ifndef RLOCK_EXPLORE_H
#define RLOCK_EXPLORE_H

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include <rlock/rlock.h>

#define EX_WORKERS_MAX 6
#define EX_OWNERS_MAX 3 /* per worker */
#define EX_NAMES_MAX 3
#define EX_FAULTS_MAX 64
#define EX_EVENTS_MAX 400000

/* ---- the generator ------------------------------------------------------ */

typedef struct ex_rng {
    uint64_t s;
} ex_rng;

/* A generator for (seed, a, b): each worker, owner and connection draws
 * from its own, so that one's choices do not shift another's. */
void ex_rng_init(ex_rng *r, uint64_t seed, uint64_t a, uint64_t b);
uint64_t ex_next(ex_rng *r);
/* Uniform in [lo, hi]. */
int64_t ex_range(ex_rng *r, int64_t lo, int64_t hi);
/* 1 with probability pct %. */
int ex_chance(ex_rng *r, int pct);

/* ---- a schedule --------------------------------------------------------- */

enum ex_fault_kind {
    F_REGIME,       /* the proxy's delays change (a = regime) */
    F_STALL,        /* one direction of the proxy stalls (a = dirs) */
    F_CUT,          /* every proxied connection drops */
    F_PAUSE_SERVER, /* SIGSTOP the server, SIGCONT after len_ms */
    F_RESTART,      /* the server restarts, without persistence */
    F_KILL_PUBSUB,  /* CLIENT KILL TYPE pubsub */
    F_PAUSE_WORKER, /* SIGSTOP worker a, SIGCONT after len_ms */
    F_KILL_WORKER,  /* SIGKILL worker a */
    F_CLIENT_PAUSE, /* CLIENT PAUSE len_ms (writes stall at the server) */
    F_FORCE_UNLOCK, /* an operator's rlock_mutex_force_unlock of a held
                       lock, from name a on (b: the name taken, or -1) */
    F_KINDS
};

typedef struct ex_fault {
    int64_t at_ms; /* from the run's start */
    int kind;
    int64_t len_ms;
    int a;
} ex_fault;

/* The proxy's regimes: how long each chunk waits, per direction. */
enum ex_regime {
    R_CALM,    /* nothing added */
    R_JITTER,  /* 0 to 20 ms */
    R_SLOW,    /* 0 to slow_ms */
    R_SKEW,    /* odd connections slow_ms more than even ones: requests
                  of one client overtake each other across connections */
    R_REPLIES, /* replies alone are held up, 0 to slow_ms */
    R_LOSSY,   /* jitter, and one chunk in drop_in cuts its connection */
    R_REGIMES
};

typedef struct ex_plan {
    uint64_t seed;
    int layout;   /* RLOCK_LAYOUT_* */
    int replicas; /* a replica, and sync_replicas 1 */
    int workers;
    int owners; /* per worker */
    int names;
    int64_t lease_ms; /* fixed lease; 0: the watchdog's */
    int64_t watchdog_ms;
    int64_t extend_max_ms; /* the longest extension a worker asks */
    int command_timeout_ms;
    int sync_timeout_ms;
    int waiter_ttl_ms;
    int64_t run_ms;         /* the faults and the workers' new holds */
    int64_t slow_ms;        /* the proxy's slow regimes */
    int drop_in;            /* R_LOSSY */
    int callback_stall_pct; /* on_lost stalls 1 to 3 s this often */
    int async_worker;       /* that worker uses the event-loop API (-1:
                               none), the others the blocking one */
    int nfaults;
    ex_fault faults[EX_FAULTS_MAX];
} ex_plan;

void ex_plan_make(ex_plan *p, uint64_t seed);
/* One line saying what the plan uses, into buf. */
void ex_plan_describe(const ex_plan *p, char *buf, size_t len);

/* ---- the log ------------------------------------------------------------ */

enum ex_kind {
    EV_ACQ,    /* a: how (EX_LOCK...), b: wait_ms; rc; level after */
    EV_REL,    /* unlock; level after */
    EV_EXT,    /* extend; a: lease_ms */
    EV_LEFT,   /* lease_left; a: left_ms */
    EV_TOKEN,  /* fence; token */
    EV_LOST,   /* on_lost ran from t0 to t1 */
    EV_FAULT,  /* the injector: a: kind, b: target; t0 to t1 */
    EV_STATUS, /* the monitor: a: held, b: holder pid; token: lease_ms */
    EV_DEATH,  /* worker ended (a: killed) */
    EV_LETGO,  /* a call that may give the hold back begins (t0 = t1 = its
                  start; level: the levels held as it begins): logged before
                  the call, so that a worker killed in it leaves a trace */
    EV_KINDS
};

/* How an acquisition was made. */
enum ex_how { EX_LOCK, EX_TRY, EX_TIMED, EX_WITH, EX_HOWS };

typedef struct ex_event {
    int32_t kind, worker, owner, name;
    int32_t hold; /* the owner's hold number, from 1 */
    int32_t rc;
    int32_t level; /* levels the owner holds after the call */
    int32_t reentry;
    int64_t t0, t1; /* CLOCK_MONOTONIC ns */
    int64_t a, b;
    uint64_t token;
} ex_event;

typedef struct ex_log {
    atomic_long n;
    atomic_int stop; /* the workers take no new hold */
    atomic_int done[EX_WORKERS_MAX];
    pid_t pid[EX_WORKERS_MAX];
    ex_event ev[EX_EVENTS_MAX];
} ex_log;

/* A log in memory the workers share (MAP_SHARED), or NULL. */
ex_log *ex_log_new(void);
void ex_log_free(ex_log *l);
void ex_log_reset(ex_log *l);
/* Appends e (times as given); drops it if the log is full. */
void ex_log_add(ex_log *l, const ex_event *e);
int64_t ex_now_ns(void);

/* ---- the run ------------------------------------------------------------ */

/* A worker process's body: its owners' holds on url until the log says
 * stop; exits. */
void ex_worker_main(const ex_plan *p, int w, const char *url, ex_log *l);
/* The client options of the plan's workers. */
void ex_client_opts(const ex_plan *p, rlock_client_opts *co);
/* The same with the event-loop API, on one loop (async.c). */
void ex_async_worker_main(const ex_plan *p, int w, const char *url, ex_log *l);

typedef struct ex_run ex_run; /* inject.c */

/* Starts the parent's side of a run: the proxy's policy, the injector
 * and the monitor (threads), after the workers were forked. */
ex_run *ex_run_start(const ex_plan *p, ex_log *l, void *proxy, void *server,
                     const char *direct_url);
/* Writes the server's MONITOR log of the run to out (a debugging aid;
 * the times are the monotonic clock's, in ms from the run's start). */
void ex_run_server_log(ex_run *r, FILE *out);
/* Ends the faults: no new one, and every one under way undone (the server
 * and the workers resumed, the proxy calm). */
void ex_run_end_faults(ex_run *r);
/* When the monitor last saw a lock held (ex_now_ns), or 0. */
int64_t ex_run_held_at(ex_run *r);
/* Stops the monitor and frees the run (after ex_run_end_faults). */
void ex_run_stop(ex_run *r);

/* ---- the verdict -------------------------------------------------------- */

enum ex_invariant {
    I_EXCLUSION, /* no two owners believe they hold one lock at one instant */
    I_NOTICE,    /* every loss is told to its owner, on time */
    I_NOBODY,    /* no lock is held by nobody past one lease */
    I_TOKENS,    /* fencing tokens never go backwards */
    I_BOUNDS,    /* every call ends within its bound */
    I_RETURNED,  /* a hold is returned with its lease */
    I_SPURIOUS,  /* a wait fails only when something failed */
    I_COUNT
};

typedef struct ex_verdict {
    long violations[I_COUNT];
    long holds, lost, calls, faults;
    long async_holds;         /* of holds, the async worker's */
    char first[I_COUNT][512]; /* the first violation of each, in words */
} ex_verdict;

extern const char *const ex_invariant_names[I_COUNT];

/* Checks the log of a run of p. slack_ms: what a busy machine may add to a
 * call's bound and to a notice's delay. */
void ex_check(const ex_plan *p, const ex_log *l, int64_t slack_ms,
              ex_verdict *v);

#endif
