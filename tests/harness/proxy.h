/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A delaying TCP proxy for tests, in the test process itself.
 *
 * The proxy listens on a free 127.0.0.1 port and forwards every connection
 * it accepts to 127.0.0.1:upstream_port, byte for byte: it knows nothing of
 * Redis's protocol. Bytes can be held back in each direction for a fixed
 * time (a slow network) or indefinitely (a stalled one), so that requests
 * reach Redis, and replies reach the client, later than a lease. One thread
 * per proxy runs the poll loop; it sleeps in poll(2) until a socket is ready
 * or the next held chunk is due, and buffers at most a bounded number of
 * bytes per direction of each connection.
 *
 * The functions may be called from any thread.
 */
#ifndef RLOCK_TEST_PROXY_H
#define RLOCK_TEST_PROXY_H

#include <stddef.h>
#include <stdint.h>

typedef struct rt_proxy rt_proxy;

/* Directions, for rt_proxy_blackhole. */
#define RT_PROXY_TO_SERVER 1
#define RT_PROXY_TO_CLIENT 2

/* Starts a proxy in front of 127.0.0.1:upstream_port; fails the test if it
 * cannot. No delay at first. */
rt_proxy *rt_proxy_start(int upstream_port);
/* The same in two steps: listening (connections wait in the backlog), then
 * forwarding on the proxy's thread. For tests that fork worker processes:
 * forking while the proxy's thread runs can leave a child stuck on a lock
 * the thread held (AddressSanitizer's allocator's, for one). */
rt_proxy *rt_proxy_new(int upstream_port);
void rt_proxy_run(rt_proxy *p);
/* Closes the listener and every connection (bytes still held are dropped),
 * joins the thread and frees the proxy. NULL is a no-op. */
void rt_proxy_stop(rt_proxy *p);

int rt_proxy_port(const rt_proxy *p);
const char *rt_proxy_url(const rt_proxy *p); /* redis://127.0.0.1:N */

/* Each chunk read from now on is forwarded no earlier than its read time
 * plus the delay of its direction. Chunks already read keep the time they
 * were given; the order of bytes is always kept, so a chunk never overtakes
 * one read before it. Delays are >= 0. */
void rt_proxy_set_delay(rt_proxy *p, int64_t to_server_ms,
                        int64_t to_client_ms);

/* Stalls the directions in dirs (RT_PROXY_TO_SERVER | RT_PROXY_TO_CLIENT):
 * bytes are still read but nothing is forwarded that way until a later
 * call leaves that direction out (rt_proxy_blackhole(p, 0) lifts every
 * stall); then what was held goes on as soon as its delay allows. */
void rt_proxy_blackhole(rt_proxy *p, int dirs);
/* Trickles each direction (0: off): bytes pass one at a time, each
 * to_*_ms after the one before (a path that keeps a connection alive
 * while delivering almost nothing). Requests pass at once with
 * rt_proxy_trickle(p, 0, 400). */
void rt_proxy_trickle(rt_proxy *p, int64_t to_server_ms, int64_t to_client_ms);

/*
 * A policy asked about each chunk as it is read: the extra time (ms, >= 0)
 * it waits before it may be forwarded, on top of its direction's delay,
 * or RT_PROXY_CUT to drop the connection at once (both sockets are reset;
 * what either side had sent and was not yet forwarded is lost, as in a
 * network that failed). conn_no numbers the pairs in the order they were
 * accepted, from 0; dir is RT_PROXY_TO_SERVER or RT_PROXY_TO_CLIENT. A
 * chunk never overtakes one of its own flow read before it, whatever its
 * delay (TCP keeps order); chunks of different connections may. Called on
 * the proxy's thread. fn NULL: no policy.
 */
#define RT_PROXY_CUT (-1)
typedef int64_t (*rt_proxy_policy)(void *arg, long conn_no, int dir,
                                   size_t len);
void rt_proxy_set_policy(rt_proxy *p, rt_proxy_policy fn, void *arg);
/* Drops every connection at once, as RT_PROXY_CUT does one. */
void rt_proxy_cut_all(rt_proxy *p);

/* Connections accepted since the start. */
long rt_proxy_accepted(rt_proxy *p);
/* Bytes read and not yet forwarded, in the directions in dirs. */
size_t rt_proxy_pending(rt_proxy *p, int dirs);

#endif
