/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A private redis-server for a tool run (the demo, rlock-bench): on a unix
 * socket in a directory of the caller's, without persistence, and never
 * outliving the caller (PR_SET_PDEATHSIG).
 */
#ifndef RLOCK_CLI_PRIVATE_SERVER_H
#define RLOCK_CLI_PRIVATE_SERVER_H

#include <signal.h>
#include <stddef.h>
#include <sys/types.h>

/*
 * Starts redis-server on DIR/redis.sock, logging to DIR/redis.log, with the
 * signal mask *mask (NULL: the caller's), and waits at most 10 s until it
 * accepts rlock clients. Writes the server's URL to url. Returns the
 * server's pid, or -1 after a message on stderr that names the log.
 */
pid_t private_server_start(const char *dir, const sigset_t *mask, char *url,
                           size_t url_len);

/* Stops the server (pid -1: none was started) and removes the files it
 * made in DIR; DIR itself is the caller's. */
void private_server_stop(pid_t pid, const char *dir);

#endif
