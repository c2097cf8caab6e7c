/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A lookup with c-ares (resolve.h): one channel per lookup, so that
 * lookups share nothing and a connection's lookup ends with it. A new
 * connection to a name is rare (a pool's connection lives long), and a
 * channel costs a read of resolv.conf and hosts: dearer than a shared
 * one, but with nothing to lock and nothing to outlive its client.
 *
 * c-ares tells which of its sockets it waits on (the socket state
 * callback): each joins the lookup's epoll set, and its timeouts arm the
 * timerfd in the same set, so that the one descriptor the connection
 * shows is readable whenever c-ares has something to do. The sockets are
 * made here (ares_set_socket_functions): non-blocking and close-on-exec
 * from the start, and written with MSG_NOSIGNAL, never raising SIGPIPE.
 */
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include <ares.h>

#include <rlock/rlock.h>

#include "net/resolve.h"

/* A try's first wait for an answer, doubled for each round of the
 * servers (c-ares's own schedule), and the tries: 0.4, 0.8, 1.6, 3.2 s.
 * The call's deadline ends the lookup sooner if it comes first. */
#define TRY_MS 400
#define TRIES 4

struct rlock__resolve {
    ares_channel ch;
    int ep;  /* the epoll set: c-ares's sockets and tfd */
    int tfd; /* armed for c-ares's next timeout */
    int done, status;
    int sock_err; /* an epoll_ctl that failed (errno), or 0 */
    rlock__addrs addrs;
    char host[256];
};

static pthread_mutex_t test_mu = PTHREAD_MUTEX_INITIALIZER;
static char test_servers[256];

void rlock__resolve_test_servers(const char *csv)
{
    pthread_mutex_lock(&test_mu);
    snprintf(test_servers, sizeof test_servers, "%s", csv ? csv : "");
    pthread_mutex_unlock(&test_mu);
}

int rlock__resolve_async(void)
{
    return 1;
}

/* ---- c-ares's sockets, made here ---------------------------------------- */

static ares_socket_t a_socket(int family, int type, int proto, void *arg)
{
    (void)arg;
    return socket(family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, proto);
}

static int a_close(ares_socket_t s, void *arg)
{
    (void)arg;
    return close(s);
}

static int a_connect(ares_socket_t s, const struct sockaddr *sa,
                     ares_socklen_t len, void *arg)
{
    (void)arg;
    return connect(s, sa, len);
}

static ares_ssize_t a_recvfrom(ares_socket_t s, void *buf, size_t len,
                               int flags, struct sockaddr *from,
                               ares_socklen_t *fromlen, void *arg)
{
    (void)arg;
    return recvfrom(s, buf, len, flags, from, fromlen);
}

static ares_ssize_t a_sendv(ares_socket_t s, const struct iovec *v, int n,
                            void *arg)
{
    struct msghdr m;

    (void)arg;
    memset(&m, 0, sizeof m);
    m.msg_iov = (struct iovec *)(uintptr_t)v;
    m.msg_iovlen = (size_t)n;
    return sendmsg(s, &m, MSG_NOSIGNAL);
}

static const struct ares_socket_functions sock_fns = {
    a_socket, a_close, a_connect, a_recvfrom, a_sendv,
};

/* c-ares waits on s for reading and/or writing (neither: no longer; it
 * says so before it closes s). */
static void sock_state(void *arg, ares_socket_t s, int readable, int writable)
{
    rlock__resolve *r = arg;
    struct epoll_event ev;

    memset(&ev, 0, sizeof ev);
    ev.data.fd = s;
    ev.events = (readable ? EPOLLIN : 0) | (writable ? EPOLLOUT : 0);
    if (ev.events == 0) {
        epoll_ctl(r->ep, EPOLL_CTL_DEL, s, NULL);
        return;
    }
    if (epoll_ctl(r->ep, EPOLL_CTL_MOD, s, &ev) == 0)
        return;
    if (errno == ENOENT && epoll_ctl(r->ep, EPOLL_CTL_ADD, s, &ev) == 0)
        return;
    if (!r->sock_err)
        r->sock_err = errno;
}

/* ---- the lookup --------------------------------------------------------- */

static void got(void *arg, int status, int timeouts, struct ares_addrinfo *ai)
{
    rlock__resolve *r = arg;
    struct ares_addrinfo_node *n;

    (void)timeouts;
    r->done = 1;
    r->status = status;
    r->addrs.n = 0;
    for (n = ai ? ai->nodes : NULL; n; n = n->ai_next) {
        int k = r->addrs.n;
        if (k == RLOCK__RESOLVE_ADDRS)
            break;
        if ((n->ai_family != AF_INET && n->ai_family != AF_INET6) ||
            n->ai_addrlen > sizeof r->addrs.a[k])
            continue;
        memcpy(&r->addrs.a[k], n->ai_addr, n->ai_addrlen);
        r->addrs.len[k] = n->ai_addrlen;
        r->addrs.n++;
    }
    if (ai)
        ares_freeaddrinfo(ai);
}

/* The timerfd fires when c-ares's next timeout is due (disarmed when it
 * has none). */
static void arm(rlock__resolve *r)
{
    struct itimerspec it;
    struct timeval tv, *t;

    memset(&it, 0, sizeof it);
    t = ares_timeout(r->ch, NULL, &tv);
    if (t) {
        it.it_value.tv_sec = t->tv_sec;
        it.it_value.tv_nsec = (long)t->tv_usec * 1000;
        if (it.it_value.tv_sec == 0 && it.it_value.tv_nsec == 0)
            it.it_value.tv_nsec = 1; /* due now (0 would disarm) */
    }
    timerfd_settime(r->tfd, 0, &it, NULL);
}

static pthread_once_t lib_once = PTHREAD_ONCE_INIT;
static int lib_rc;

static void lib_init(void)
{
    lib_rc = ares_library_init(ARES_LIB_INIT_ALL);
}

int rlock__resolve_start(const char *host, rlock__resolve **out,
                         rlock__neterr *err)
{
    struct ares_options o;
    struct ares_addrinfo_hints hints;
    struct epoll_event ev;
    rlock__resolve *r;
    char servers[256];
    int rc, mask;

    if (strlen(host) > 253) { /* (DNS's longest name) */
        rlock__neterr_set(err, RLOCK_ECONNECT,
                          "cannot resolve %.64s...: name too long", host);
        return err->code;
    }
    pthread_once(&lib_once, lib_init);
    if (lib_rc != ARES_SUCCESS) {
        rlock__neterr_set(err, RLOCK_ECONNECT, "cannot resolve %s: c-ares: %s",
                          host, ares_strerror(lib_rc));
        return err->code;
    }
    if (!(r = calloc(1, sizeof *r))) {
        rlock__neterr_set(err, RLOCK_ENOMEM, "out of memory");
        return err->code;
    }
    snprintf(r->host, sizeof r->host, "%s", host);
    r->tfd = -1;
    r->ep = epoll_create1(EPOLL_CLOEXEC);
    if (r->ep >= 0)
        r->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    memset(&ev, 0, sizeof ev);
    ev.events = EPOLLIN;
    ev.data.fd = r->tfd;
    if (r->ep < 0 || r->tfd < 0 ||
        epoll_ctl(r->ep, EPOLL_CTL_ADD, r->tfd, &ev) != 0) {
        rlock__neterr_set(err, RLOCK_ECONNECT, "cannot resolve %s: %s", host,
                          strerror(errno));
        rlock__resolve_free(r, 0);
        return err->code;
    }
    pthread_mutex_lock(&test_mu);
    memcpy(servers, test_servers, sizeof servers);
    pthread_mutex_unlock(&test_mu);
    memset(&o, 0, sizeof o);
    o.sock_state_cb = sock_state;
    o.sock_state_cb_data = r;
    o.timeout = TRY_MS;
    o.tries = TRIES;
    o.lookups = servers[0] ? (char *)"b" : NULL;
    mask = ARES_OPT_SOCK_STATE_CB | ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES |
           (servers[0] ? ARES_OPT_LOOKUPS : 0);
    rc = ares_init_options(&r->ch, &o, mask);
    if (rc == ARES_SUCCESS && servers[0])
        rc = ares_set_servers_ports_csv(r->ch, servers);
    if (rc != ARES_SUCCESS) {
        rlock__neterr_set(
            err, rc == ARES_ENOMEM ? RLOCK_ENOMEM : RLOCK_ECONNECT,
            "cannot resolve %s: c-ares: %s", host, ares_strerror(rc));
        rlock__resolve_free(r, 0);
        return err->code;
    }
    ares_set_socket_functions(r->ch, &sock_fns, NULL);
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_protocol = IPPROTO_TCP;
    /* (Answered at once from /etc/hosts, as most test and many
     * deployment names are: then no round of the loop is spent.) */
    ares_getaddrinfo(r->ch, r->host, NULL, &hints, got, r);
    if (!r->done)
        arm(r);
    *out = r;
    return RLOCK_OK;
}

int rlock__resolve_fd(const rlock__resolve *r)
{
    return r->ep;
}

int rlock__resolve_step(rlock__resolve *r, rlock__addrs *out,
                        rlock__neterr *err)
{
    struct epoll_event evs[16];
    int i, n;

    if (!r->done) {
        n = epoll_wait(r->ep, evs, 16, 0);
        for (i = 0; i < n && !r->done; i++) {
            int fd = evs[i].data.fd;
            if (fd == r->tfd) {
                uint64_t ticks;
                while (read(r->tfd, &ticks, sizeof ticks) > 0)
                    ;
                continue;
            }
            ares_process_fd(r->ch,
                            (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP))
                                ? fd
                                : ARES_SOCKET_BAD,
                            (evs[i].events & EPOLLOUT) ? fd : ARES_SOCKET_BAD);
        }
        /* Timeouts due (retries, a server given up): c-ares looks at its
         * clock here. */
        if (!r->done)
            ares_process_fd(r->ch, ARES_SOCKET_BAD, ARES_SOCKET_BAD);
        if (!r->done && r->sock_err) {
            rlock__neterr_set(err, RLOCK_ECONNECT,
                              "cannot resolve %s: epoll: %s", r->host,
                              strerror(r->sock_err));
            return err->code;
        }
        if (!r->done) {
            arm(r);
            return 0;
        }
    }
    if (r->status != ARES_SUCCESS || r->addrs.n == 0) {
        rlock__neterr_set(err, RLOCK_ECONNECT, "cannot resolve %s: %s", r->host,
                          r->status != ARES_SUCCESS
                              ? ares_strerror(r->status)
                              : "no IPv4 or IPv6 address");
        return err->code;
    }
    *out = r->addrs;
    return 1;
}

void rlock__resolve_free(rlock__resolve *r, int keep_fd)
{
    if (!r)
        return;
    if (r->ch) {
        /* (A lookup still under way is called back with the channel's
         * end: nothing is kept of it.) */
        r->done = 1;
        ares_destroy(r->ch);
    }
    if (r->tfd >= 0)
        close(r->tfd);
    if (r->ep >= 0 && !keep_fd)
        close(r->ep);
    free(r);
}
