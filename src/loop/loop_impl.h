/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The loop's driver inside: what loop.c (tasks, the watch set, the
 * timer) and bg.c (the client's background work on the loop) share.
 */
#ifndef RLOCK_LOOP_LOOP_IMPL_H
#define RLOCK_LOOP_LOOP_IMPL_H

#include <stdint.h>

#include "bg/bg.h"
#include "loop/loop.h"

/* What a task waits for. */
enum {
    T_STEP,  /* nothing: it is stepped now */
    T_ROUND, /* a round of its request's connections, by until */
    T_PAUSE, /* a pause of the backend's, until until */
    T_SLEEP, /* a wait's wake-up, or until */
    T_QUIET  /* the hold's renewal in flight to end: looked at again */
};

/* How often a quiet wait looks again (the renewal it waits for is a task
 * of the same loop, which tells the wait nothing when it ends). */
#define QUIET_LOOK_NS (1 * RLOCK__NS_PER_MS)

typedef struct watched {
    int fd;
    short events;
} watched;

/* The client's background work on the loop (bg.c). */
typedef struct rlock__loop_bg {
    int64_t at; /* its step is due then (0: not before something asks) */
    /* The watchdog's renewals in flight, as a task. */
    rlock__task renew_task;
    rlock__renew_op *renew;
    /* The undos in flight, as a task. */
    rlock__task clean_task;
    rlock__cleanup_op clean;
    int cleaning;
    int64_t clean_next;
    /* The subscriber's connection while it is made (sub_connecting). */
    rlock__conn *sconn;
    struct rlock__node *snode;
    size_t swant;
    int stry;
    int64_t suntil;
    rlock__call scall;
    int delivering; /* on_lost callbacks run now (not nested) */
} rlock__loop_bg;

/* What loop.c asks of the work beside the tasks (bg.c fills it): a table,
 * so that loop.c knows nothing of it. */
typedef struct rlock__loop_side {
    /* At the start of a pass. */
    void (*pass)(rlock__loop *l);
    /* Readiness of a descriptor of its own: 1 if fd was one. */
    int (*ready)(rlock__loop *l, int fd, short revents);
    /* What it watches (at most two, into fds) and its next time (lowers
     * *due); how many. */
    int (*watch)(rlock__loop *l, struct watched *fds, int64_t *due);
    /* At the end of a pass, outside it: what is owed to the application. */
    void (*deliver)(rlock__loop *l);
} rlock__loop_side;

struct rlock__loop {
    rlock_client *c;
    const rlock__loop_side *side;
    rlock__loop_hooks hooks;
    /* Tasks that wait for something (a round, a pause, a sleep, a
     * look) are in the heap by when they must be looked at (until);
     * the list has those the heap had no room for (out of memory), which
     * every pass looks at. A task being stepped is in neither. */
    rlock__task *tasks;
    int ntasks;
    int ring[2];  /* a sleeping waiter's wake-up */
    watched *set; /* what the loop watches now */
    int nset, capset;
    watched side_set[2]; /* what the side watched at the last look */
    int nside;
    int64_t timer_due; /* the timer asked for (0: none) */
    int forgotten;     /* rlock__loop_forget ran: the loop is told nothing */
    /* By a descriptor's number: the tasks whose rounds wait on it, in
     * the order they joined (what readiness is for, without a look at
     * every task; a shared connection carries several tasks' requests),
     * the events the loop watches it for now, and the pooled connection
     * it is while watched (which tells the loop before it closes). A
     * watch changes when a task's round does, at the cost of that task's
     * connections alone; a connection's watch for replies outlives the
     * round, so that the next request on it changes nothing, until a
     * readiness comes with no round on it or the connection closes. */
    struct rlock__fdslot {
        struct rlock__fdlink *head, *tail;
        rlock__conn *conn;
        short now;
        int nudged; /* in nudge */
        int flush;  /* in flushq */
    } * fds;
    int capfd;
    /* Descriptors whose tasks are to be looked at in this pass: a reply
     * came, or a task before theirs on the connection took or gave up
     * its replies, so theirs may be next in line now. */
    int *nudge;
    int nnudge, capnudge;
    /* Descriptors whose connections have requests of this pass to write
     * at its end, in one write each. */
    int *flushq;
    int nflush, capflush;
    /* The heap of waiting tasks. A ring wakes some of the sleeping ones:
     * their waiters are on wring's list (the client's mu), which the next
     * pass takes (rung). */
    rlock__task **heap;
    int nheap, capheap;
    rlock__ring wring;
    rlock__task **woken; /* a pass's scratch */
    int capwoken;
    int rung;
    /* A listed task's round was failed out of memory (watch_task): the
     * next pass, at once, looks at it. */
    int relook;
    /* Passes made, tasks looked at in them, and woken sleepers taken from
     * the ring's list: what a callback costs (the tests hold it to the
     * tasks it concerns). */
    int64_t passes, looks, ring_looks;
    rlock__loop_bg bg;
};

/* loop.c, for bg.c, which makes a loop with its side (rlock__loop_new:
 * make, the side attached, begin) and frees it (rlock__loop_free: forget
 * the watched descriptors, the side detached, unmake). NULL: out of
 * memory. */
rlock__loop *rlock__loop_make(rlock_client *c, const rlock__loop_hooks *hooks,
                              const rlock__loop_side *side);
void rlock__loop_begin(rlock__loop *l);
void rlock__loop_forget(rlock__loop *l);
void rlock__loop_unmake(rlock__loop *l);
/* fd is no longer watched (it is about to be closed). */
void rlock__loop_unwatch(rlock__loop *l, int fd);
/* fd's number is about to name another file (a connection's name
 * resolved): no longer watched, the tasks that wait on it kept; watched
 * again by the next pass. */
void rlock__loop_renumber(rlock__loop *l, int fd);

#endif
