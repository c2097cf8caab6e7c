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

struct rlock__loop {
    rlock_client *c;
    rlock__loop_hooks hooks;
    rlock__task *tasks;
    int ntasks;
    int ring[2];  /* a sleeping waiter's wake-up */
    watched *set; /* what the loop watches now */
    int nset, capset;
    watched *want; /* what it should (a pass's scratch) */
    int capwant;
    int64_t timer_due; /* the timer asked for (0: none) */
    rlock__loop_bg bg;
};

/* bg.c, for loop.c. */
/* Makes l the driver of its client's background work. */
int rlock__loop_bg_attach(rlock__loop *l);
/* Leaves the background work to nobody: its tasks are canceled, the
 * subscriber connection closed (unwatched first). */
void rlock__loop_bg_detach(rlock__loop *l);
/* At the start of a pass: the subscriber's connection while it is made,
 * and the background step if it is due. */
void rlock__loop_bg_pass(rlock__loop *l);
/* At the end of a pass: the notices that wait, delivered. */
void rlock__loop_bg_deliver(rlock__loop *l);
/* Readiness of a descriptor of the background's: 1 if fd was one. */
int rlock__loop_bg_ready(rlock__loop *l, int fd, short revents);
/* What the background watches (up to two descriptors into fds, events),
 * and lowers *due to its next time. Returns how many. */
int rlock__loop_bg_watch(rlock__loop *l, watched *fds, int64_t *due);

/* loop.c, for bg.c. */
/* fd is no longer watched (it is about to be closed). */
void rlock__loop_unwatch(rlock__loop *l, int fd);

#endif
