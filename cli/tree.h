/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The keeper of COMMAND's process tree (rlock run).
 *
 * flock(1)'s lock lasts as long as any process that holds its descriptor,
 * children included; rlock run gives the same promise with a lease. The
 * keeper is a small single-threaded process forked by rlock run before it
 * starts any thread. It is the parent of COMMAND and a child subreaper, so
 * every descendant of COMMAND, double-forked daemons included, stays in its
 * tree; COMMAND runs in a process group of its own. rlock run (which holds
 * the lock) tells the keeper what to do over a pipe; the keeper reports
 * COMMAND's status and, last, that no process of the tree is left: only
 * then is the lock released.
 *
 *     rlock run  (holder thread, renewal thread)   subreaper
 *       `- keeper (own process group)              subreaper
 *            `- COMMAND (own process group, parent-death signal SIGKILL)
 *                 `- its children, grandchildren, orphans ...
 *
 * rlock run tells the keeper where the lease ends, at the start and after
 * every renewal, and the keeper holds the tree to it on its own clock,
 * whatever state rlock run is in (stopped by a debugger, a frozen cgroup
 * or job control, hung, or unable to renew): SIGTERM a grace before the
 * end (a third of the lease at most), SIGKILL just before it. A fixed
 * lease ends so too, however the command takes SIGTERM.
 *
 * If rlock run dies (even by SIGKILL) the keeper reads end-of-file on the
 * pipe and stops the tree: SIGTERM, then SIGKILL after a grace that ends
 * well before the lease could (a third of it at most, and never past what
 * is left of a fixed lease). The keeper is in a process group of its own
 * so that it outlives a signal to rlock run's group (a job-control kill,
 * timeout -s KILL): killed with rlock run, it could stop nothing, and
 * COMMAND's children, which no parent-death signal reaches, would outlive
 * the lease. If the keeper dies, COMMAND gets SIGKILL from the kernel and
 * the rest of the tree falls to rlock run, which stops it before releasing.
 */
#ifndef RLOCK_CLI_TREE_H
#define RLOCK_CLI_TREE_H

#include <signal.h>
#include <stdint.h>
#include <sys/types.h>

struct tree {
    pid_t keeper;    /* 0 once reaped */
    int ctl;         /* rlock run -> keeper; -1 once closed */
    int rep;         /* keeper -> rlock run */
    pid_t command;   /* COMMAND's pid and process group, once reported */
    int tty;         /* the terminal handed to COMMAND's group, or -1 */
    pid_t tty_pgrp;  /* its foreground group before */
};

/* What the keeper needs to start COMMAND, fixed before it is forked. */
struct tree_spec {
    char **argv;                 /* COMMAND */
    char **env;                  /* its environment, RLOCK_TOKEN excluded */
    const sigset_t *mask;        /* the signal mask to give COMMAND */
    const int *sigs;             /* signals whose dispositions to restore */
    const struct sigaction *disp;
    int nsigs;
};

/* Forks the keeper; called while the process has one thread, with every
 * signal it handles blocked. 0, or -1 with errno. */
int tree_fork(struct tree *t, const struct tree_spec *spec);

/* The clock of the keeper's deadlines (CLOCK_MONOTONIC, in ms), shared by
 * both processes. */
int64_t tree_clock_ms(void);

/* Starts COMMAND with RLOCK_TOKEN=token; if rlock run dies, the keeper
 * sends SIGTERM and SIGKILL after orphan_grace_ms, or at orphan_until
 * (tree_clock_ms) if that comes first; orphan_until < 0: no such bound. */
int tree_start(struct tree *t, uint64_t token, int64_t orphan_grace_ms,
               int64_t orphan_until);

/* Sends sig to every process of the tree. */
int tree_signal(struct tree *t, int sig);

/* The lease ends at end (tree_clock_ms): the keeper sends SIGTERM to the
 * tree the orphan grace before, and SIGKILL just before, unless a later
 * end comes first. */
int tree_lease(struct tree *t, int64_t end);

/* Sends sig (and SIGCONT) to every process of the tree, then SIGKILL
 * after grace_ms to whatever is left. */
int tree_stop(struct tree *t, int sig, int64_t grace_ms);

/* A report from the keeper, read from t->rep when it is readable. */
enum { TREE_NONE, TREE_STARTED, TREE_EXEC_FAILED, TREE_COMMAND_ENDED,
       TREE_EMPTY, TREE_GONE, TREE_COMMAND_STOPPED, TREE_LEASE_ENDING };
/* Reads one report: TREE_STARTED (t->command set), TREE_EXEC_FAILED
 * (*status: the exit code, 126 or 127), TREE_COMMAND_ENDED (*status as
 * from waitpid), TREE_COMMAND_STOPPED (job control stopped COMMAND:
 * *status is the signal), TREE_LEASE_ENDING (nothing renewed the lease
 * in time: the keeper stops the tree), TREE_EMPTY (no process of the tree left; the
 * keeper has exited), or TREE_GONE (the keeper died without saying so). */
int tree_read(struct tree *t, int *status);

/* When the keeper is gone without a report (TREE_GONE): stops whatever is
 * left of the tree (it now belongs to this process, a subreaper) with
 * SIGKILL and waits until no child is left. */
void tree_reap_orphans(struct tree *t);

/* Closes the pipe (a keeper that started nothing exits) and reaps the
 * keeper; gives the terminal back if it was handed over. */
void tree_close(struct tree *t);

/* The sign every descendant process of root gets: sig. Returns how many
 * were found (root excluded). */
int tree_kill_descendants(pid_t root, int sig);

#endif
