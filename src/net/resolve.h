/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Host names to addresses without blocking: one lookup as an object that
 * readiness and time advance, as a connection is (conn.h), so that a new
 * connection to a name is resolved inside its call's deadline and, on an
 * event loop, without stalling the loop.
 *
 * The lookup is c-ares's (resolve_ares.c: /etc/hosts, then the servers
 * of /etc/resolv.conf). It may use several sockets and needs a timer for
 * its retries, while whoever drives a connection watches one descriptor:
 * so a lookup shows one, an epoll instance that holds c-ares's sockets
 * and a timerfd armed for c-ares's next timeout, and is readable whenever
 * any of them needs attention. Every descriptor it opens is close-on-exec.
 *
 * Built without c-ares (resolve_none.c), rlock__resolve_start answers
 * RLOCK__RESOLVE_BLOCKING and the connection falls back on getaddrinfo(3),
 * which no deadline can interrupt.
 */
#ifndef RLOCK_NET_RESOLVE_H
#define RLOCK_NET_RESOLVE_H

#include <sys/socket.h>

#include "net/conn.h"

/* The most addresses one lookup keeps (a hostile server cannot make the
 * client try more). */
#define RLOCK__RESOLVE_ADDRS 8

typedef struct rlock__addrs {
    int n;
    struct sockaddr_storage a[RLOCK__RESOLVE_ADDRS];
    socklen_t len[RLOCK__RESOLVE_ADDRS];
} rlock__addrs;

typedef struct rlock__resolve rlock__resolve;

/* What rlock__resolve_start answers besides RLOCK_OK and an error: no
 * resolver without blocking is built in. */
#define RLOCK__RESOLVE_BLOCKING 1

/* host read as an address, without a lookup (resolve.c): RLOCK_OK with
 * the addresses in *a (port 0), or RLOCK_ECONNECT, *noname set if host
 * is no address (a name, to look up). */
int rlock__resolve_numeric(const char *host, rlock__addrs *a, int *noname,
                           rlock__neterr *err);
/* host looked up by getaddrinfo(3), which blocks for as long as the
 * system's resolver takes (the build without c-ares). */
int rlock__resolve_system(const char *host, rlock__addrs *a,
                          rlock__neterr *err);
/* host's addresses, waiting for them by deadline_ns (in poll(2), for
 * callers that may block but not past their time: with c-ares; without
 * it, getaddrinfo(3)). RLOCK_OK, or RLOCK_ECONNECT, RLOCK_ENOREPLY (no
 * answer in time), RLOCK_ENOMEM, with the text in *err. */
int rlock__resolve_wait(const char *host, int64_t deadline_ns, rlock__addrs *a,
                        rlock__neterr *err);

/* Whether lookups can be made without blocking (built with c-ares). */
int rlock__resolve_async(void);

/*
 * Starts looking host up, for TCP. RLOCK_OK and *out, already done or
 * under way (rlock__resolve_step says which); RLOCK__RESOLVE_BLOCKING;
 * or an error with its text in *err (RLOCK_ENOMEM, RLOCK_ECONNECT when
 * the resolver cannot start, naming why). host is copied.
 */
int rlock__resolve_start(const char *host, rlock__resolve **out,
                         rlock__neterr *err);

/* The descriptor to watch for POLLIN while the lookup is under way. */
int rlock__resolve_fd(const rlock__resolve *r);

/*
 * Advances the lookup (whatever is ready; 0 if nothing is, as after a
 * spurious readiness). 0: still under way; 1: done, the addresses in
 * *out (port 0: the caller sets it); or an error with its text in *err:
 * RLOCK_ECONNECT (no such name, no answer, a server's failure: the
 * message names the host and the cause).
 */
int rlock__resolve_step(rlock__resolve *r, rlock__addrs *out,
                        rlock__neterr *err);

/* Ends the lookup and frees it. keep_fd: its descriptor is not closed
 * (the caller puts another file in its place with dup3). NULL is a
 * no-op. */
void rlock__resolve_free(rlock__resolve *r, int keep_fd);

/* For tests: the servers ("ip:port,...", c-ares's CSV form) every later
 * lookup asks instead of resolv.conf's, and only them (/etc/hosts is
 * not read); NULL: the system's again. */
void rlock__resolve_test_servers(const char *csv);

#endif
