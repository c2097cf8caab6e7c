/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * One connection to a Redis server, as a state machine driven by
 * readiness and time (the engine under the whole library).
 *
 * A connection's own steps never block. Whoever drives it asks which
 * events it waits for (rlock__conn_events), polls its descriptor however
 * it likes (rlock's own loop in rlock__net_run for the blocking API; a
 * caller's event loop later) and hands the readiness back
 * (rlock__conn_io). Only rlock__net_run, waiting for the replies of one
 * plain connection, sleeps in recv(2) itself (a socket timeout short of
 * the deadline, poll for the rest): it wakes sooner than poll does. Commands are
 * queued with rlock__conn_append; their replies come out, in order, from
 * rlock__conn_take. Nothing here knows about locks, clients or threads: it
 * depends only on hiredis's RESP reader (compat header), libc and, for
 * TLS, OpenSSL (tls.c), which fills the same transport table as plain
 * sockets do.
 *
 * What a hostile server or network cannot do to a connection:
 *  - make a call last past its deadline: rlock__net_run and
 *    rlock__conn_open take one absolute CLOCK_MONOTONIC deadline for the
 *    whole exchange (connect, TLS, AUTH, SELECT, writing, every byte of
 *    the replies), not a timeout that restarts with every byte;
 *  - make the client allocate without bound: every reply is checked
 *    against rlock__bounds while it is parsed (the reader's own buffer
 *    and the objects it builds), and a reply over a bound breaks the
 *    connection with RLOCK_EPROTO and a message naming the bound;
 *  - reach a child process: every descriptor is close-on-exec, and
 *    writes never raise SIGPIPE.
 * A connection that failed in any way is broken for good: its owner
 * closes it.
 */
#ifndef RLOCK_NET_CONN_H
#define RLOCK_NET_CONN_H

#include <poll.h>
#include <stddef.h>
#include <stdint.h>

#include "compat/hiredis_compat.h"

/* Bounds on one reply (0 in a field: the default). */
typedef struct rlock__bounds {
    int64_t reply_bytes;    /* all bytes of one reply, default 1 MiB */
    int64_t bulk_bytes;     /* one string, default 512 KiB */
    int64_t array_elements; /* one array, default 65536 */
    int depth;              /* nesting of arrays, default 4, at most 7 */
} rlock__bounds;

#define RLOCK__BOUND_REPLY_BYTES (INT64_C(1) << 20)
#define RLOCK__BOUND_BULK_BYTES (INT64_C(512) << 10)
#define RLOCK__BOUND_ARRAY_ELEMENTS INT64_C(65536)
#define RLOCK__BOUND_DEPTH 4
#define RLOCK__BOUND_DEPTH_MAX 7

/* Raises each bound of b that is tighter than the default to the default
 * (0, the default, stays): for replies to the library's own questions. */
void rlock__bounds_widen(rlock__bounds *b);

typedef struct rlock__tls_ctx rlock__tls_ctx; /* tls.c */

typedef struct rlock__conn rlock__conn;

/* The text of an error, with the code that goes with it. */
typedef struct rlock__neterr {
    int code; /* RLOCK_E* */
    char msg[256];
} rlock__neterr;

/* Sets *e to code and the formatted message (cut to fit). */
void rlock__neterr_set(rlock__neterr *e, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Where and how to connect. Strings are borrowed for the call only. */
typedef struct rlock__endpoint {
    const char *host; /* NULL with a unix socket path */
    int port;
    const char *path;
    const rlock__tls_ctx *tls; /* NULL: plain text */
    /* With tls: sets TLS up on the connected socket (rlock__tls_attach,
     * net/tls.h), so that the connection itself names no transport. */
    int (*attach)(rlock__conn *c, const rlock__tls_ctx *ctx,
                  const char *server_name, rlock__neterr *err);
    const char *sni; /* TLS: the name to send and verify (NULL: host) */
    rlock__bounds bounds;
    int keepalive; /* TCP keep-alive probes (TCP only) */
} rlock__endpoint;

/*
 * Opens a connection to ep and completes the transport's handshake (TCP
 * or unix connect, TLS with verification) by deadline_ns; what Redis
 * itself needs (AUTH, SELECT) is the caller's (a node's handshake).
 * Returns RLOCK_OK and *out, or
 * an error with its text in *err: RLOCK_ECONNECT (refused, unreachable,
 * TLS refused: the message names the certificate or host name problem),
 * RLOCK_ENOREPLY (not done by the deadline), RLOCK_EIO, RLOCK_ENOMEM.
 * Host names are looked up inside the deadline too (net/resolve.h, with
 * c-ares); built without it, with getaddrinfo(3), which the deadline
 * cannot interrupt. Numeric addresses are not looked up.
 */
int rlock__conn_open(const rlock__endpoint *ep, int64_t deadline_ns,
                     rlock__conn **out, rlock__neterr *err);

/*
 * As rlock__conn_open, without waiting: the connect (and the TLS handshake
 * after it) are under way when it returns, and commands may be queued at
 * once; they are written when the connection is up. Whoever drives the
 * connection sees it through (rlock__net_run, or its own loop). Failures
 * that show at once (refused, a malformed address) are returned here;
 * later ones break the connection (RLOCK_ECONNECT with the cause). A
 * host name that /etc/hosts does not answer is looked up first (stage
 * RLOCK__CONN_RESOLVING): the descriptor is then the lookup's, and the
 * socket takes its number when the lookup is done (after
 * rlock__conn_on_renumber's callback).
 */
int rlock__conn_start(const rlock__endpoint *ep, rlock__conn **out,
                      rlock__neterr *err);

/* Closes the socket and frees everything, replies not taken included.
 * NULL is a no-op. */
void rlock__conn_close(rlock__conn *c);

/* The descriptor to poll, and the events the connection waits for now
 * (POLLIN, POLLOUT, or both; 0 when it expects nothing). */
int rlock__conn_fd(const rlock__conn *c);
short rlock__conn_events(const rlock__conn *c);

/*
 * Queues one command (argc strings argv[i] of lens[i] bytes; lens may be
 * NULL for NUL-terminated strings), as RESP; its reply will come out of
 * rlock__conn_take after those of the commands queued before it. Nothing
 * is written until rlock__conn_io (or rlock__net_run) runs. RLOCK_OK,
 * RLOCK_ENOMEM, or the connection's error if it is broken.
 */
int rlock__conn_append(rlock__conn *c, int argc, const char **argv,
                       const size_t *lens);

/*
 * Advances the connection after poll reported revents on its descriptor
 * (0 is fine: it then tries what it can without waiting): writes what is
 * queued, reads what arrived and parses complete replies. RLOCK_OK, or an
 * error that broke the connection (then rlock__conn_error says which).
 */
int rlock__conn_io(rlock__conn *c, short revents);

/* As rlock__conn_io(c, 0), writing only: what is queued goes now if the
 * socket takes it, and no read is tried (a reply cannot have come yet:
 * the readiness of the descriptor says when it does). A loop that starts
 * a round then watches for replies alone, a system call and a turn less
 * than watching for writability first. */
int rlock__conn_flush(rlock__conn *c);

/* fn(arg, c) is called when c is closed, before its descriptor is (a loop
 * that still watches it forgets it first, whoever closes it); NULL: no
 * longer. */
void rlock__conn_on_close(rlock__conn *c, void (*fn)(void *arg, rlock__conn *c),
                          void *arg);

/* fn(arg, c) is called before another file takes the number of c's
 * descriptor (the socket, the lookup's place, once a name is resolved):
 * a loop that watches the number stops watching it first (its
 * registration is of the old file; epoll forgets it, libuv forbids a
 * close under a watch), and watches the same number again for what
 * rlock__conn_events says next. NULL: no longer. */
void rlock__conn_on_renumber(rlock__conn *c,
                             void (*fn)(void *arg, rlock__conn *c), void *arg);

/* Moves the oldest complete reply not taken into *out (the caller frees
 * it with freeReplyObject) and returns 1; 0 if none is ready. Replies
 * given up with rlock__conn_discard are dropped, never returned. */
int rlock__conn_take(rlock__conn *c, redisReply **out);

/* Replies expected and not yet taken or discarded, complete or not. */
size_t rlock__conn_pending(const rlock__conn *c);
/* Complete replies ready to take. */
size_t rlock__conn_ready(const rlock__conn *c);
/* Replies still to arrive, discarded ones included: 0 once the server
 * has answered everything written to it. */
size_t rlock__conn_expected(const rlock__conn *c);

/* Gives up the n oldest expected replies (a caller that stopped waiting):
 * they are read and dropped when they come, so that the connection can
 * serve the commands queued after them. */
void rlock__conn_discard(rlock__conn *c, size_t n);

/*
 * A connection that carries several requests at once (one of an event
 * loop's shared connections: each request's replies are its own, in the
 * order asked): the mark is where the next command queued begins, its
 * first reply's place among the replies asked for and its first byte's in
 * what is written. A request marked before it queued its commands then
 * knows whether any of them was written (sent_from: the server may have
 * acted on it), whether want of its own replies are complete
 * (complete_at, whatever the connection's state; settled_at: complete, or
 * the connection broken), takes them one by one in order (take_at: the
 * oldest ready one at or after the mark, whether or not an earlier
 * request took its own yet), and gives them up wherever they are in the
 * line (drop: freed if complete, else dropped when they come), so that
 * the requests around it are served as if it had never been sent.
 */
typedef struct rlock__conn_mark_t {
    uint64_t reply;
    uint64_t byte;
} rlock__conn_mark_t;
void rlock__conn_mark(const rlock__conn *c, rlock__conn_mark_t *m);
int rlock__conn_sent_from(const rlock__conn *c, const rlock__conn_mark_t *m);
int rlock__conn_complete_at(const rlock__conn *c, const rlock__conn_mark_t *m,
                            size_t want);
int rlock__conn_settled_at(const rlock__conn *c, const rlock__conn_mark_t *m,
                           size_t want);
int rlock__conn_take_at(rlock__conn *c, const rlock__conn_mark_t *m,
                        redisReply **out);
void rlock__conn_drop(rlock__conn *c, const rlock__conn_mark_t *m, size_t n);

/* Push mode, for a subscriber connection: replies may come that no
 * command asked for (pub/sub messages); each is kept for
 * rlock__conn_take. Without it, bytes that no command asked for break
 * the connection (a healthy RESP2 server sends none). */
void rlock__conn_set_push(rlock__conn *c, int on);

/* How far a connection got: RLOCK__CONN_RESOLVING (the host's name is
 * being looked up), RLOCK__CONN_CONNECTING (the TCP or unix connect is
 * under way), RLOCK__CONN_HANDSHAKING (the transport's own handshake,
 * TLS, is) or RLOCK__CONN_UP. */
enum {
    RLOCK__CONN_RESOLVING,
    RLOCK__CONN_CONNECTING,
    RLOCK__CONN_HANDSHAKING,
    RLOCK__CONN_UP
};
int rlock__conn_stage(const rlock__conn *c);
/* rlock__conn_stage(c) == RLOCK__CONN_UP. */
int rlock__conn_up(const rlock__conn *c);

/* The error that broke the connection (code 0 if it is healthy). */
const rlock__neterr *rlock__conn_error(const rlock__conn *c);

/* A connection that is idle (nothing expected) and still healthy: no EOF,
 * no stray bytes. Checks without waiting: with a poll, unless the
 * connection is in steady use (its last reply came less than
 * RLOCK__CONN_STEADY_NS ago, and after suspect_before, when a sibling
 * connection was last found dead), when only what is known without a
 * system call is looked at. */
int rlock__conn_idle_ok(rlock__conn *c, int64_t suspect_before);
#define RLOCK__CONN_STEADY_NS INT64_C(1000000)

/* Whether a driver waiting for want complete replies on c is done with
 * it: c is NULL or broken, or up with the replies ready. A connection
 * not settled waits for rlock__conn_events(c) on its descriptor; with
 * TLS, rlock__conn_buffered(c) says that bytes already read wait for
 * rlock__conn_io(c, 0) without the descriptor becoming readable. */
int rlock__conn_settled(const rlock__conn *c, size_t want);
int rlock__conn_buffered(const rlock__conn *c);

/* ---- the blocking driver ------------------------------------------------ */

/*
 * Drives conns[0..n) in one poll(2) until, for every i, conns[i] has
 * want[i] complete replies ready (or is broken, or is NULL), or until
 * deadline_ns. Returns RLOCK_OK if every connection got what was wanted
 * or broke (each one's state says which), RLOCK_ENOREPLY if the deadline
 * came first (connections still short of their replies are left as they
 * are: the caller discards or closes them), RLOCK_EINVAL for n > 64.
 */
int rlock__net_run(rlock__conn **conns, int n, const size_t *want,
                   int64_t deadline_ns);

/* One command of a pipeline (a backend's server_commands). */
typedef struct rlock__cmd {
    int argc;
    const char **argv;
    const size_t *lens; /* NULL: NUL-terminated */
} rlock__cmd;

/* Whether any byte of the commands queued since the last idle moment has
 * been written (the server may have acted on them). */
int rlock__conn_sent(const rlock__conn *c);

/* The replies to the requests queued so far (the connection's own
 * questions: a handshake's INFO and ROLE) are bounded by the defaults at
 * least, whatever tighter bounds the connection was opened with (those
 * are meant for the lock replies). */
void rlock__conn_widen(rlock__conn *c);

/* What the connection's owner learned of the server at the other end, as
 * a number of its choosing (0: nothing), kept for as long as the
 * connection lives; the connection itself never reads it. */
void rlock__conn_set_peer(rlock__conn *c, uint64_t peer);
uint64_t rlock__conn_peer(const rlock__conn *c);

/* Marks the connection broken with code and message (a caller that
 * gives up on it, for example at its deadline). */
void rlock__conn_fail(rlock__conn *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Monotonic clock in ns (the engine's one time source). */
int64_t rlock__net_now_ns(void);

#endif
