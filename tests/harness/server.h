/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Real redis-server processes for tests.
 *
 * Each server runs from the system's redis-server binary on a free loopback
 * port and a unix socket, in a fresh temporary directory, without
 * persistence. Servers are always stopped: at exit, on fatal signals, and -
 * should the test process be killed outright - by the kernel, because each
 * server is started with PR_SET_PDEATHSIG.
 */
#ifndef RLOCK_TEST_SERVER_H
#define RLOCK_TEST_SERVER_H

#include <stdint.h>
#include <sys/types.h>

#include <hiredis/hiredis.h>

typedef struct rt_server rt_server;

typedef struct rt_server_opts {
    const char *password;   /* requirepass, or NULL */
    int cluster_enabled;    /* start as a (slot-less) cluster node */
    const char *extra[16];  /* more "--name value" arguments, NULL-ended */
    /* A Sentinel instead of a server, monitoring "<name> <host> <port>
     * <quorum>" (down after 1 s, failover timeout 5 s). */
    const char *sentinel_monitor;
    /* The server binary (NULL: rt_server_binary()). */
    const char *binary;
} rt_server_opts;

/* Starts a server and waits until it answers PING; fails the test if it
 * cannot. opts may be NULL. */
rt_server *rt_server_start(const rt_server_opts *opts);
/* Stops it (SIGKILL if SIGTERM is not enough) and removes its files. */
void rt_server_stop(rt_server *s);

void rt_server_pause(rt_server *s);   /* SIGSTOP */
void rt_server_resume(rt_server *s);  /* SIGCONT */
void rt_server_kill(rt_server *s);    /* SIGKILL, reaped; files kept */
/* Starts it again on the same port and directory (after kill, or running:
 * it is killed first). Data is gone: there is no persistence. */
void rt_server_restart(rt_server *s);

/* A loopback TCP port that was free a moment ago. */
int rt_free_port(void);
int rt_server_port(const rt_server *s);
const char *rt_server_url(const rt_server *s);      /* redis://127.0.0.1:N */
const char *rt_server_unix_url(const rt_server *s); /* unix:///.../sock */
const char *rt_server_socket(const rt_server *s);
const char *rt_server_dir(const rt_server *s);

/* A raw hiredis connection for checking what is in Redis (authenticated
 * if the server has a password). Cached; reconnects after restart. */
redisContext *rt_server_ctx(rt_server *s);
/* Runs a command on rt_server_ctx(s); fails the test on I/O error. The
 * caller frees the reply. */
/* The server binary the tests start: $RLOCK_TEST_SERVER, or
 * "redis-server". */
const char *rt_server_binary(void);
/* A Valkey 8.1 server binary, for what only it has (SET IFEQ):
 * $RLOCK_TEST_VALKEY81, which tools/test.sh sets after building it with
 * tools/valkey81.sh; fails the test if it is not set. */
const char *rt_valkey81_binary(void);
/* The newest Valkey and Redis Debian has (sid's, experimental's), for
 * what only they have (DELIFEQ, DELEX): $RLOCK_TEST_VALKEY_NEWEST and
 * $RLOCK_TEST_REDIS_NEWEST, which tools/test.sh sets after building them
 * with tools/newserver.sh; fail the test if not set. */
const char *rt_newest_valkey_binary(void);
const char *rt_newest_redis_binary(void);

redisReply *rt_cmd(rt_server *s, const char *fmt, ...);
/* Integer reply of a command, failing the test on any other reply. */
long long rt_cmd_int(rt_server *s, const char *fmt, ...);
/* rlock's own layout keeps a lock as the string "<owner> <nonce> <count>
 * <w> <token>", followed by " <end_ms>" while w is 1, under "{rlock:NAME}"
 * (docs/protocol.md); token 0 until it is drawn. One field of the lock
 * called name, into buf (len bytes): "" if there is no lock. */
enum { RT_OWNER, RT_NONCE, RT_COUNT, RT_WAITERS, RT_TOKEN, RT_END };
const char *rt_lock_field(rt_server *s, const char *name, int field,
                          char *buf, size_t len);
/* The count field as a number (0 if there is no lock). */
long long rt_lock_count(rt_server *s, const char *name);
/* The counter of name's fencing tokens (0 if none). */
uint64_t rt_fence_counter(rt_server *s, const char *name);

/* Reads one INFO field as a number (e.g. "total_commands_processed"). */
long long rt_info_field(rt_server *s, const char *section, const char *field);

/* Whether INFO section of s contains text (e.g. "master_link_status:up"). */
int rt_info_says(rt_server *s, const char *section, const char *text);
/* Starts a replica of master (with one more "--name value" pair of
 * arguments if name is not NULL), running the master's server binary, and
 * waits until it is in sync. */
rt_server *rt_replica_start(rt_server *master, const char *name,
                            const char *value);

/* Whether CLUSTER INFO of s says cluster_state:ok. */
int rt_cluster_ok(rt_server *s);

/* Calls of one command since the last CONFIG RESETSTAT (0 if none). */
long long rt_cmdstat_calls(rt_server *s, const char *cmd);

/* Commands run since the last CONFIG RESETSTAT, other than the harness's
 * own INFO, CONFIG RESETSTAT and PING. */
long long rt_commands_from_clients(rt_server *s);

#endif
