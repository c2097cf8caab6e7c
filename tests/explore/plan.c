/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A schedule from a seed: what the run uses (layout, leases, timeouts,
 * how many workers and names) and when which fault comes. Everything is
 * drawn from generators seeded by the seed alone, so a seed always makes
 * the same plan.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "explore.h"

/* splitmix64: small, fast, and every seed gives a good stream. */
static uint64_t mix(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void ex_rng_init(ex_rng *r, uint64_t seed, uint64_t a, uint64_t b)
{
    r->s = mix(mix(mix(seed) ^ (a + 1)) ^ (b + 0x51ed));
}

uint64_t ex_next(ex_rng *r)
{
    r->s += 0x9e3779b97f4a7c15ULL;
    return mix(r->s);
}

int64_t ex_range(ex_rng *r, int64_t lo, int64_t hi)
{
    if (hi <= lo)
        return lo;
    return lo + (int64_t)(ex_next(r) % (uint64_t)(hi - lo + 1));
}

int ex_chance(ex_rng *r, int pct)
{
    return (int)(ex_next(r) % 100) < pct;
}

int64_t ex_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void add(ex_plan *p, int64_t at, int kind, int64_t len, int a)
{
    ex_fault *f;

    if (p->nfaults >= EX_FAULTS_MAX || at >= p->run_ms)
        return;
    f = &p->faults[p->nfaults++];
    f->at_ms = at;
    f->kind = kind;
    f->len_ms = len;
    f->a = a;
}

static int by_time(const void *x, const void *y)
{
    const ex_fault *a = x, *b = y;

    return a->at_ms < b->at_ms ? -1 : a->at_ms > b->at_ms;
}

void ex_plan_make(ex_plan *p, uint64_t seed)
{
    static const int timeouts[] = {300, 600, 1000};
    static const int64_t watchdogs[] = {600, 900, 1500};
    int64_t lease, t;
    ex_rng r;
    int i, n;

    memset(p, 0, sizeof *p);
    p->seed = seed;
    ex_rng_init(&r, seed, 0, 0);
    i = (int)ex_range(&r, 0, 9);
    p->layout = i < 6   ? RLOCK_LAYOUT_NATIVE
                : i < 8 ? RLOCK_LAYOUT_TOKEN
                        : RLOCK_LAYOUT_REDISSON;
    p->replicas = ex_chance(&r, 15);
    p->workers = (int)ex_range(&r, 3, 4);
    p->owners = 2;
    p->names = (int)ex_range(&r, 1, 2);
    p->watchdog_ms = watchdogs[ex_range(&r, 0, 2)];
    p->lease_ms = ex_chance(&r, 50) ? ex_range(&r, 4, 15) * 100 : 0;
    lease = p->lease_ms ? p->lease_ms : p->watchdog_ms;
    p->extend_max_ms = lease * (int64_t)ex_range(&r, 1, 6);
    p->command_timeout_ms = timeouts[ex_range(&r, 0, 2)];
    p->sync_timeout_ms = 300;
    p->waiter_ttl_ms = ex_chance(&r, 50) ? 1200 : 3000;
    p->run_ms = ex_range(&r, 30, 50) * 100;
    p->slow_ms = lease * ex_range(&r, 1, 4) / 4;
    if (p->slow_ms > 2000)
        p->slow_ms = 2000;
    p->drop_in = ex_chance(&r, 50) ? 20 : 60;
    p->callback_stall_pct = (int)ex_range(&r, 0, 2) * 30;

    /* The proxy changes regime every 0.3 to 0.9 s. */
    for (t = ex_range(&r, 0, 300); t < p->run_ms; t += ex_range(&r, 300, 900))
        add(p, t, F_REGIME, 0, (int)ex_range(&r, 0, R_REGIMES - 1));
    /* And the rest, a few of each at most. */
    n = (int)ex_range(&r, 0, 2);
    for (i = 0; i < n; i++)
        add(p, ex_range(&r, 0, p->run_ms), F_STALL, ex_range(&r, 100, 2000),
            (int)ex_range(&r, 1, 3));
    if (ex_chance(&r, 30))
        add(p, ex_range(&r, 0, p->run_ms), F_CUT, 0, 0);
    n = (int)ex_range(&r, 0, 2);
    for (i = 0; i < n; i++)
        add(p, ex_range(&r, 0, p->run_ms), F_PAUSE_SERVER,
            ex_range(&r, 100, 2000), 0);
    if (!p->replicas && ex_chance(&r, 8))
        add(p, ex_range(&r, 500, p->run_ms), F_RESTART, 0, 0);
    if (ex_chance(&r, 30))
        add(p, ex_range(&r, 0, p->run_ms), F_KILL_PUBSUB, 0, 0);
    if (ex_chance(&r, 30))
        add(p, ex_range(&r, 0, p->run_ms), F_PAUSE_WORKER,
            ex_range(&r, 200, 1500), (int)ex_range(&r, 0, p->workers - 1));
    if (ex_chance(&r, 12))
        add(p, ex_range(&r, 500, p->run_ms), F_KILL_WORKER, 0,
            (int)ex_range(&r, 0, p->workers - 1));
    if (ex_chance(&r, 20))
        add(p, ex_range(&r, 0, p->run_ms), F_CLIENT_PAUSE,
            ex_range(&r, 100, 1500), 0);
    /* Drawn last, so that what the draws above made of a seed stays. A
     * third owner per worker and a third name: more holds side by side in
     * one client. A lock taken from its holder by an operator: one hold of
     * a client lost while its others go on, whose notice (and a callback
     * that stalls on it) must hold up nothing of theirs. */
    if (ex_chance(&r, 40))
        p->owners = 3;
    if (p->names == 2 && ex_chance(&r, 40))
        p->names = 3;
    n = ex_chance(&r, 50) ? (int)ex_range(&r, 1, 3) : 0;
    for (i = 0; i < n; i++)
        add(p, ex_range(&r, 0, p->run_ms), F_FORCE_UNLOCK, 0,
            (int)ex_range(&r, 0, p->names - 1));
    qsort(p->faults, (size_t)p->nfaults, sizeof p->faults[0], by_time);
    /* From a generator of its own, so that every draw above stays what
     * it was for a kept seed: half the runs have one worker on the
     * event-loop API. */
    ex_rng_init(&r, seed, 7, 7);
    p->async_worker =
        ex_chance(&r, 50) ? (int)ex_range(&r, 0, p->workers - 1) : -1;
}

void ex_plan_describe(const ex_plan *p, char *buf, size_t len)
{
    static const char *const layouts[] = {"native", "token", "redisson"};

    snprintf(buf, len,
             "%s%s, %d workers x %d owners, %d name%s, %s %lld ms, "
             "timeout %d ms, proxy slow %lld ms, %d faults%s",
             layouts[p->layout], p->replicas ? " +replica" : "", p->workers,
             p->owners, p->names, p->names > 1 ? "s" : "",
             p->lease_ms ? "lease" : "watchdog",
             (long long)(p->lease_ms ? p->lease_ms : p->watchdog_ms),
             p->command_timeout_ms, (long long)p->slow_ms, p->nfaults,
             p->async_worker >= 0 ? ", an async worker" : "");
}
