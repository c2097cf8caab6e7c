/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A misbehaving Redis for tests: behaviour no real server produces
 * (replies trickled, stalled half-way, endless, huge, nested too deep, or
 * not RESP at all), in the test process itself.
 *
 * It listens on a free 127.0.0.1 port. Each connection's requests are read
 * with hiredis's reader (requests are RESP arrays too). Until the
 * misbehaviour starts it answers like a server that knows rlock: a SCRIPT
 * LOAD gets a 40-character digest, PING gets PONG, anything else +OK. The
 * misbehaviour starts at the first request (at_open = 1: the client's
 * handshake meets it) or at the first request that is not AUTH, SELECT,
 * SCRIPT or PING (at_open = 0: the client opens fine, its first real call
 * meets it), and then every request of that connection gets it.
 *
 * One thread runs the poll loop; an endless reply is capped (256 MiB a
 * connection) so that a broken client cannot take the machine down.
 */
#ifndef RLOCK_TEST_FAKE_SERVER_H
#define RLOCK_TEST_FAKE_SERVER_H

#include <stddef.h>

typedef enum rt_fake_mode {
    RT_FAKE_SILENT,      /* reads, never answers */
    RT_FAKE_TRICKLE,     /* a valid reply, one byte every 50 ms */
    RT_FAKE_STALL,       /* half a reply, then nothing */
    RT_FAKE_BULK,        /* "$999999999999", then bytes without end */
    RT_FAKE_ARRAY,       /* "*2147483647", then nothing */
    RT_FAKE_DEEP,        /* arrays nested nine deep */
    RT_FAKE_GARBAGE,     /* bytes that are not RESP */
    RT_FAKE_ZERO,        /* ":0" to every request: a fast form's "ask the
                            full form", and to the full form too */
    RT_FAKE_OK,          /* "+OK" to every request: the lean SET NX's "taken",
                            and to every script too, which never says it */
    RT_FAKE_EXTRA,       /* "+OK", then the start of a reply nobody asked for
                            ("-ERR stray", no line end: left in the client's
                            buffer), in one write, to every request */
    RT_FAKE_EXTRA_ARRAY, /* the same with "*2\r\n:1\r\n" (parsed into a
                            reply that is not complete) */
    RT_FAKE_CLOSE_SECOND /* "+OK" to the first request of a connection;
                            the second's "+OK" waits for a third request,
                            then goes with the connection's end, the third
                            unanswered (a server that answered one request
                            of a pipeline and went away) */
} rt_fake_mode;

typedef struct rt_fake rt_fake;

rt_fake *rt_fake_start(rt_fake_mode mode, int at_open);
const char *rt_fake_url(const rt_fake *f); /* redis://127.0.0.1:N */
/* Bytes sent so far, over every connection. */
size_t rt_fake_sent(rt_fake *f);
/* Connections accepted so far. */
size_t rt_fake_accepted(rt_fake *f);
/* Stops the thread, closes every socket, frees. NULL is a no-op. */
void rt_fake_stop(rt_fake *f);

#endif
