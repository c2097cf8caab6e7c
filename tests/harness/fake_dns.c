/* SPDX-License-Identifier: BSD-3-Clause */
/* A DNS server for tests (fake_dns.h). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness/fake_dns.h"
#include "harness/test.h"

struct rt_dns {
    int fd;
    rt_dns_mode mode;
    int delay_ms;
    int stop, asked;
    pthread_t th;
    pthread_mutex_t mu;
    char addr[32];
};

/* The reply to the question q (n bytes), into out: its length, or 0 for
 * none. */
static size_t reply(const rt_dns *d, const unsigned char *q, size_t n,
                    unsigned char *out)
{
    size_t p = 12, qend;
    unsigned type;
    static const unsigned char a_rr[] = {0xc0, 0x0c, /* the question's name */
                                         0x00, 0x01, 0x00, 0x01, /* A, IN */
                                         0x00, 0x00, 0x00, 0x3c, /* TTL 60 */
                                         0x00, 0x04, 127,  0,    0, 1};

    if (n < 12 || n > 512)
        return 0;
    while (p < n && q[p] != 0)
        p += (size_t)q[p] + 1;
    if (p + 5 > n)
        return 0;
    type = (unsigned)q[p + 1] << 8 | q[p + 2];
    qend = p + 5;
    memcpy(out, q, qend);
    out[2] = 0x81;          /* a response, recursion desired */
    out[3] = 0x80;          /* recursion available, NOERROR */
    out[4] = 0, out[5] = 1; /* one question */
    out[6] = out[7] = 0;    /* answers */
    out[8] = out[9] = out[10] = out[11] = 0;
    if (d->mode == RT_DNS_GARBAGE) {
        /* The question, and one answer that is no record: its name and
         * type, then bytes where its TTL and length should be. */
        out[7] = 1;
        memcpy(out + qend, "\xc0\x0c\x00\x01\x00\x01\xff\xff", 8);
        return qend + 8;
    }
    if (d->mode == RT_DNS_NXDOMAIN) {
        out[3] = 0x83;
        return qend;
    }
    if (type == 1) {
        out[7] = 1;
        memcpy(out + qend, a_rr, sizeof a_rr);
        return qend + sizeof a_rr;
    }
    return qend;
}

static void *serve(void *arg)
{
    rt_dns *d = arg;

    for (;;) {
        struct pollfd p = {d->fd, POLLIN, 0};
        unsigned char q[600], out[700];
        struct sockaddr_storage from;
        socklen_t fl = sizeof from;
        ssize_t n;
        size_t len;
        int stop;

        pthread_mutex_lock(&d->mu);
        stop = d->stop;
        pthread_mutex_unlock(&d->mu);
        if (stop)
            return NULL;
        if (poll(&p, 1, 20) <= 0)
            continue;
        n = recvfrom(d->fd, q, sizeof q, 0, (struct sockaddr *)&from, &fl);
        if (n <= 0)
            continue;
        pthread_mutex_lock(&d->mu);
        d->asked++;
        pthread_mutex_unlock(&d->mu);
        if (d->mode == RT_DNS_SILENT)
            continue;
        if (d->delay_ms > 0)
            usleep((useconds_t)d->delay_ms * 1000);
        if ((len = reply(d, q, (size_t)n, out)) > 0)
            sendto(d->fd, out, len, 0, (struct sockaddr *)&from, fl);
    }
}

rt_dns *rt_dns_start(rt_dns_mode mode, int delay_ms)
{
    rt_dns *d = calloc(1, sizeof *d);
    struct sockaddr_in sa;
    socklen_t sl = sizeof sa;

    CHECK(d != NULL);
    d->mode = mode;
    d->delay_ms = delay_ms;
    pthread_mutex_init(&d->mu, NULL);
    d->fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    CHECK(d->fd >= 0);
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK(bind(d->fd, (struct sockaddr *)&sa, sizeof sa) == 0);
    CHECK(getsockname(d->fd, (struct sockaddr *)&sa, &sl) == 0);
    snprintf(d->addr, sizeof d->addr, "127.0.0.1:%d", ntohs(sa.sin_port));
    CHECK(pthread_create(&d->th, NULL, serve, d) == 0);
    return d;
}

const char *rt_dns_addr(const rt_dns *d)
{
    return d->addr;
}

int rt_dns_asked(rt_dns *d)
{
    int n;

    pthread_mutex_lock(&d->mu);
    n = d->asked;
    pthread_mutex_unlock(&d->mu);
    return n;
}

void rt_dns_stop(rt_dns *d)
{
    if (!d)
        return;
    pthread_mutex_lock(&d->mu);
    d->stop = 1;
    pthread_mutex_unlock(&d->mu);
    pthread_join(d->th, NULL);
    close(d->fd);
    pthread_mutex_destroy(&d->mu);
    free(d);
}
