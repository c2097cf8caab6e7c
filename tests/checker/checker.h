/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The mutual-exclusion checker: the evidence that a lock holds.
 *
 * N worker processes each take the lock M times and, while holding it, do
 * a deliberately non-atomic read-modify-write of a counter kept by a
 * protected resource. The resource is the storage side of Kleppmann's
 * fencing argument: every read and write carries the hold's fencing token,
 * and the resource refuses a token lower than the highest it has seen.
 * Every hold is recorded (worker, token, monotonic start and end, what the
 * resource said, whether the library reported the hold lost), and every
 * operation the resource accepted or refused is logged in its order.
 *
 * After the run the history is checked:
 *   - the counter equals the number of accepted writes (no lost update);
 *   - no two holds overlap in time unless one of them was reported lost;
 *   - tokens strictly increase in the order the resource accepted them,
 *     and in the order the holds began;
 *   - no stale write was accepted (a write whose token is lower than one
 *     the resource had already seen);
 *   - every hold the resource refused was reported lost to its holder, and
 *     every loss report belongs to a hold, once.
 *
 * The resource lives in shared memory, guarded by a process-shared robust
 * mutex, so a worker killed in the middle leaves it usable. Faults are
 * injected by the caller while the workers run (the `during` callback):
 * stall a worker inside its hold and stop or kill it, stop or restart
 * Redis, cut connections.
 */
#ifndef RLOCK_TEST_CHECKER_H
#define RLOCK_TEST_CHECKER_H

#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include <rlock/rlock.h>

typedef struct rt_check rt_check;

typedef struct rt_check_opts {
    const char *url;      /* where the lock lives (any URL rlock takes) */
    const char *name;     /* lock name; default "checker" */
    int workers;          /* processes; default 4 */
    int iterations;       /* holds per worker; default 50 */
    int64_t hold_us;      /* time between read and write; default 200 */
    int64_t lease_ms;     /* mutex lease, 0 = watchdog (default) */
    int layout;           /* mutex layout, RLOCK_LAYOUT_NATIVE (default) */
    int64_t wait_ms;      /* per acquisition, -1 = forever (default) */
    int64_t deadline_ms;  /* whole run, then workers stop; default 60000 */
    rlock_client_opts client; /* default: rlock_client_opts_init's */
    int unsafe;           /* self-test: workers skip the lock */
    int no_fence;         /* self-test: the resource accepts old tokens */
    int reverse_tokens;   /* self-test: holds show their tokens reversed */
    /* Called in the parent while the workers run; the run ends once it
     * has returned and every worker is done. */
    void (*during)(rt_check *chk, void *arg);
    void *arg;
} rt_check_opts;

typedef struct rt_check_result {
    long holds;            /* acquisitions that returned RLOCK_OK */
    long clean;            /* held, written and unlocked with RLOCK_OK */
    long lost;             /* reported lost (on_lost or RLOCK_ELOST) */
    long killed;           /* open when its worker was killed */
    long failed_acquires;  /* lock calls that returned an error */
    long counter;          /* the resource's final value */
    long accepted_writes;
    long stale_rejected;   /* reads or writes refused for an old token */
    long lost_reports;     /* on_lost callbacks */
    /* Violations: all must be 0. */
    long counter_mismatch; /* |counter - accepted writes| */
    long overlaps;         /* pairs of unreported holds overlapping */
    long token_order;      /* tokens not increasing */
    long stale_accepted;   /* writes accepted with an old token */
    long unreported;       /* refused holds never reported lost */
    long stray_reports;    /* loss reports with no hold, or twice */
    long incomplete;       /* workers that did not finish their holds */
    int64_t longest_handover_ms; /* release/expiry to next hold, max */
} rt_check_result;

void rt_check_opts_init(rt_check_opts *o);

/* Runs the workers and checks the history. Returns 0 if no violation was
 * found, 1 otherwise; *res (may be NULL) gets the figures. */
int rt_check_run(const rt_check_opts *o, rt_check_result *res);

/* One line: "checker: ... -> OK" or "-> VIOLATION". */
void rt_check_print(FILE *f, const rt_check_result *r);

/* ---- for the `during` callback --------------------------------------- */

/* Asks worker w to stop inside its next hold, right after reading the
 * resource, and waits (at most timeout_ms) until it is there. Returns the
 * worker's pid, or -1 on timeout. The worker stays until rt_check_release. */
pid_t rt_check_stall(rt_check *chk, int w, int64_t timeout_ms);
void rt_check_release(rt_check *chk, int w);

/* Asks every worker but `except` to stall in its next hold, waits until
 * one of them is there (at most timeout_ms), withdraws the others' request
 * and returns the one that stalled, or -1. */
int rt_check_stall_next(rt_check *chk, int except, int64_t timeout_ms);

/* Token of the hold worker w is stalled in (0 if none). */
uint64_t rt_check_stalled_token(rt_check *chk, int w);

/* Whether the library has reported worker w's current hold lost. */
int rt_check_current_lost(rt_check *chk, int w);

/* Waits until worker w has no hold in progress; 0, or -1 on timeout. */
int rt_check_wait_idle(rt_check *chk, int w, int64_t timeout_ms);

/* Holds begun so far, by all workers. */
long rt_check_holds(rt_check *chk);

/* Waits until a hold begins whose token is greater than token, at most
 * timeout_ms; returns its start on the monotonic clock in ms, or -1. */
int64_t rt_check_wait_newer_hold(rt_check *chk, uint64_t token,
                                 int64_t timeout_ms);

/* Reads the resource's counter and highest token seen. */
void rt_check_resource(rt_check *chk, long *counter, uint64_t *max_token);

#endif
