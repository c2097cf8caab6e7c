/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The byte stream under a connection: plain sockets (conn.c) or TLS
 * (tls.c), each filling one table, so that the connection's state machine
 * never asks which one it runs on (curl's vtls, SQLite's io_methods).
 * Private to src/net.
 */
#ifndef RLOCK_NET_TRANSPORT_H
#define RLOCK_NET_TRANSPORT_H

#include <stdint.h>
#include <sys/types.h>

#include "net/conn.h"

/* What a transport call may answer besides a byte count. */
#define RLOCK__IO_WANT_READ (-2)  /* retry once readable */
#define RLOCK__IO_WANT_WRITE (-3) /* retry once writable */
#define RLOCK__IO_ERROR (-1)      /* broken; err says why */

typedef struct rlock__transport {
    const char *name;
    /* Advances the transport's own handshake: 0 when done, or an
     * RLOCK__IO_* value. */
    int (*handshake)(rlock__conn *c, rlock__neterr *err);
    /* > 0 bytes, 0 end of stream, or an RLOCK__IO_* value. */
    ssize_t (*read)(rlock__conn *c, void *buf, size_t len, rlock__neterr *err);
    ssize_t (*write)(rlock__conn *c, const void *buf, size_t len,
                     rlock__neterr *err);
    /* Bytes the transport has already taken off the socket and not yet
     * handed out (TLS records): poll cannot see them. */
    int (*buffered)(const rlock__conn *c);
    /* Frees the transport's state (not the descriptor). */
    void (*release)(rlock__conn *c);
    /* Sleeps in the kernel until bytes arrive and reads them, for the
     * blocking driver's one-connection waits: > 0 bytes, 0 end of stream,
     * RLOCK__IO_ERROR, or RLOCK__IO_WANT_READ when it gave up without
     * bytes (the deadline too near to trust a socket timeout with, the
     * timeout came, a signal), for poll(2) to finish the wait. NULL where
     * the transport cannot (TLS: OpenSSL may need to write to read). */
    ssize_t (*read_wait)(rlock__conn *c, void *buf, size_t len,
                         int64_t deadline_ns, rlock__neterr *err);
} rlock__transport;

extern const rlock__transport rlock__plain_transport;

/* The parts of a connection its transport may use. */
int rlock__conn_sock(const rlock__conn *c);
void *rlock__conn_tdata(const rlock__conn *c);
void rlock__conn_set_transport(rlock__conn *c, const rlock__transport *t,
                               void *tdata);

#endif
