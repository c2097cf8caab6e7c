/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * fork(2) and the library's threads.
 *
 * A forked child inherits its parent's memory, owner ids included, but
 * only the thread that called fork(). Every client compares the process's
 * fork generation with its own at each call and, in a child, takes a new
 * identity (api/client.c). fork() itself waits until no background thread
 * of any client is in the middle of its work, so the child never inherits
 * a lock or a connection half-used.
 */
#ifndef RLOCK_CORE_FORK_H
#define RLOCK_CORE_FORK_H

/* Increases in every child created by fork(). */
unsigned rlock__fork_generation(void);

/* Background threads call these around their work (not around their
 * sleep in poll), so that fork() never catches them mid-work. */
void rlock__busy_begin(void);
void rlock__busy_end(void);

#endif
