/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A DNS server for tests, on a free 127.0.0.1 UDP port, in the test
 * process (a thread): it answers every A question with 127.0.0.1 and
 * every other question with no record, or behaves as a broken or hostile
 * server does (silent, slow, a name that does not exist, a reply that is
 * not DNS). The library is pointed at it with rlock__resolve_test_servers
 * (net/resolve.h).
 */
#ifndef RLOCK_TEST_FAKE_DNS_H
#define RLOCK_TEST_FAKE_DNS_H

typedef enum rt_dns_mode {
    RT_DNS_ANSWER,   /* A: 127.0.0.1; other types: no record */
    RT_DNS_SILENT,   /* reads, never answers */
    RT_DNS_NXDOMAIN, /* "no such name" */
    RT_DNS_GARBAGE   /* the question, then an answer that is no record */
} rt_dns_mode;

typedef struct rt_dns rt_dns;

/* delay_ms: each answer waits that long first (one at a time). */
rt_dns *rt_dns_start(rt_dns_mode mode, int delay_ms);
/* "127.0.0.1:N", for rlock__resolve_test_servers. */
const char *rt_dns_addr(const rt_dns *d);
/* Questions read so far. */
int rt_dns_asked(rt_dns *d);
/* Stops the thread, closes the socket, frees. NULL is a no-op. */
void rt_dns_stop(rt_dns *d);

#endif
