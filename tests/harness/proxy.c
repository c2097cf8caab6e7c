/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The delaying TCP proxy (see proxy.h).
 *
 * Every accepted connection is paired with a connection to the upstream
 * port. Each direction of a pair is a flow: the chunks read from one socket
 * wait in a queue, each with the time it may leave, and are written to the
 * other socket in order. A flow whose source reached end of file passes the
 * end on (shutdown SHUT_WR) once its queue is empty. A socket that fails
 * ends both flows: what it sent still goes on, what waits for it is
 * dropped. A pair is closed when both flows have ended.
 *
 * The thread owns the sockets and queues. The settings and counters that
 * other threads touch are guarded by the proxy's mutex, and every setting
 * is read when it is used (a chunk's delay when the chunk is read, a stall
 * when a chunk is about to be written), so a change made before a byte is
 * read always applies to it. Changes wake the thread through a pipe.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "proxy.h"
#include "test.h"

#define CHUNK_MAX 16384
/* A flow stops reading its source while this much waits in its queue. */
#define FLOW_LIMIT (1024 * 1024)
/* The longest poll, so that the loop never depends on one wake-up. */
#define POLL_MAX_MS 1000

enum { TO_SERVER, TO_CLIENT }; /* flow index; bit (1 << index) in dirs */

typedef struct chunk {
    struct chunk *next;
    int64_t due_ms; /* rt_now_ms() time at which it may be written */
    size_t len, off;
    char data[];
} chunk;

/* Bytes from fd[i] on their way to fd[1 - i], for flow i. */
typedef struct flow {
    chunk *head, *tail;
    size_t queued;
    int eof;  /* the source will send nothing more */
    int shut; /* the end was passed on to the destination */
} flow;

typedef struct conn {
    struct conn *next;
    int fd[2]; /* [TO_SERVER] the client's socket, [TO_CLIENT] Redis's */
    flow flow[2];
    int dead;
    long no; /* accept order */
    int cut; /* the policy dropped it: reset, not closed */
} conn;

struct rt_proxy {
    int upstream_port;
    int port;
    char url[64];
    int listen_fd;
    int wake[2];
    pthread_t thread;
    conn *conns; /* the thread's own */

    pthread_mutex_t mu; /* guards the fields below */
    int64_t delay_ms[2];
    int64_t trickle_ms[2]; /* > 0: one byte at a time, this far apart */
    int stalled;           /* RT_PROXY_TO_* bits */
    int stop;
    int running; /* the thread was started */
    rt_proxy_policy policy;
    void *policy_arg;
    int cut_all; /* drop every pair at the next round */
    long accepted;
    size_t pending[2];
};

static void wake(rt_proxy *p)
{
    char b = 1;

    (void)!write(p->wake[1], &b, 1); /* full pipe: a wake-up is due anyway */
}

static void set_socket_options(int fd)
{
    int one = 1;

    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    /* Forward each chunk as it is released: Nagle's algorithm would add a
     * delay of its own. */
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* Opens the upstream half of a new pair; -1 if Redis cannot be reached,
 * and the client then sees its connection closed. The connect is to
 * loopback: it is refused or done at once, even with Redis stopped. */
static int connect_upstream(const rt_proxy *p)
{
    struct sockaddr_in a;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd < 0)
        return -1;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)p->upstream_port);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    set_socket_options(fd);
    return fd;
}

static void accept_all(rt_proxy *p)
{
    for (;;) {
        int cfd =
            accept4(p->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        int sfd;
        conn *c;

        if (cfd < 0)
            return; /* EAGAIN, or a connection that died before accept */
        long no;

        pthread_mutex_lock(&p->mu);
        no = p->accepted++;
        pthread_mutex_unlock(&p->mu);
        sfd = connect_upstream(p);
        c = calloc(1, sizeof *c);
        if (sfd < 0 || !c) {
            if (sfd >= 0)
                close(sfd);
            free(c);
            close(cfd);
            continue;
        }
        c->no = no;
        set_socket_options(cfd);
        c->fd[TO_SERVER] = cfd;
        c->fd[TO_CLIENT] = sfd;
        c->next = p->conns;
        p->conns = c;
    }
}

/* Drops flow i's queue (its destination is gone); mu not held. */
static void flow_drop(rt_proxy *p, flow *f, int i)
{
    chunk *k;

    pthread_mutex_lock(&p->mu);
    p->pending[i] -= f->queued;
    pthread_mutex_unlock(&p->mu);
    while ((k = f->head) != NULL) {
        f->head = k->next;
        free(k);
    }
    f->tail = NULL;
    f->queued = 0;
}

/* Socket fd[i] failed (reset, or written to after its peer closed). What
 * it sent already still goes on; what waits for it is dropped, and the
 * other side is read no more: the pair ends once flow i has drained. */
static void side_failed(rt_proxy *p, conn *c, int i)
{
    c->flow[i].eof = 1;
    flow_drop(p, &c->flow[1 - i], 1 - i);
    c->flow[1 - i].eof = 1;
    c->flow[1 - i].shut = 1;
}

/* Reads one chunk from flow i's source. Returns 0, or -1 if the source
 * failed. */
static int read_flow(rt_proxy *p, conn *c, int i)
{
    char buf[CHUNK_MAX];
    flow *f = &c->flow[i];
    ssize_t n = recv(c->fd[i], buf, sizeof buf, 0);
    chunk *k;

    if (n == 0) {
        f->eof = 1;
        return 0;
    }
    if (n < 0)
        return errno == EAGAIN || errno == EINTR ? 0 : -1;
    k = malloc(sizeof *k + (size_t)n);
    if (!k)
        rt_fail(__FILE__, __LINE__, "proxy: out of memory");
    memcpy(k->data, buf, (size_t)n);
    k->next = NULL;
    k->len = (size_t)n;
    k->off = 0;
    pthread_mutex_lock(&p->mu);
    k->due_ms = rt_now_ms() + p->delay_ms[i];
    if (p->policy) {
        int64_t extra =
            p->policy(p->policy_arg, c->no,
                      i == TO_SERVER ? RT_PROXY_TO_SERVER : RT_PROXY_TO_CLIENT,
                      (size_t)n);
        if (extra == RT_PROXY_CUT) {
            pthread_mutex_unlock(&p->mu);
            free(k);
            c->cut = 1;
            return -1;
        }
        k->due_ms += extra > 0 ? extra : 0;
    }
    /* TCP keeps order: never due before the chunk ahead of it. */
    if (f->tail && k->due_ms < f->tail->due_ms)
        k->due_ms = f->tail->due_ms;
    p->pending[i] += (size_t)n;
    pthread_mutex_unlock(&p->mu);
    if (f->tail)
        f->tail->next = k;
    else
        f->head = k;
    f->tail = k;
    f->queued += (size_t)n;
    return 0;
}

/* Writes what flow i may send now. Returns 0, or -1 if its destination
 * failed. */
static int write_flow(rt_proxy *p, conn *c, int i)
{
    flow *f = &c->flow[i];

    while (f->head) {
        chunk *k = f->head;
        ssize_t n;
        int stalled, err;
        int64_t trickle;

        /* Counted out under the lock with the send, so that whoever sees
         * the bytes arrive sees them counted out too. */
        pthread_mutex_lock(&p->mu);
        stalled = p->stalled & (1 << i);
        if (stalled || k->due_ms > rt_now_ms()) {
            pthread_mutex_unlock(&p->mu);
            return 0;
        }
        trickle = p->trickle_ms[i];
        n = send(c->fd[1 - i], k->data + k->off,
                 trickle > 0 ? 1 : k->len - k->off, MSG_NOSIGNAL);
        err = errno;
        if (n > 0)
            p->pending[i] -= (size_t)n;
        pthread_mutex_unlock(&p->mu);
        if (n < 0)
            return err == EAGAIN || err == EINTR ? 0 : -1;
        k->off += (size_t)n;
        f->queued -= (size_t)n;
        if (k->off < k->len && trickle > 0) {
            /* The next byte of this chunk, and every later chunk, waits. */
            k->due_ms = rt_now_ms() + trickle;
            return 0;
        }
        if (k->off < k->len)
            return 0; /* the socket is full: wait for POLLOUT */
        f->head = k->next;
        if (!f->head)
            f->tail = NULL;
        free(k);
    }
    return 0;
}

/* One poll result for a pair: reads, writes, passes ends on. Returns 1
 * when both flows have ended and the pair can be closed. */
static int conn_step(rt_proxy *p, conn *c, const struct pollfd pf[2])
{
    int i;

    for (i = 0; i < 2; i++) {
        if (pf[i].revents & (POLLERR | POLLNVAL))
            side_failed(p, c, i);
        else if ((pf[i].revents & (POLLIN | POLLHUP)) && !c->flow[i].eof &&
                 read_flow(p, c, i) != 0)
            side_failed(p, c, i);
        if (c->cut)
            return 1; /* dropped by the policy: reset both sides */
    }
    for (i = 0; i < 2; i++) {
        flow *f = &c->flow[i];
        if (!f->shut && write_flow(p, c, i) != 0)
            side_failed(p, c, 1 - i);
        if (f->eof && !f->head && !f->shut) {
            shutdown(c->fd[1 - i], SHUT_WR);
            f->shut = 1;
        }
    }
    return c->flow[0].shut && c->flow[1].shut;
}

static void conn_free(rt_proxy *p, conn *c)
{
    int i;

    for (i = 0; i < 2; i++) {
        flow_drop(p, &c->flow[i], i);
        if (c->cut) {
            /* A reset, as a failed network's: nothing more goes out. */
            struct linger l = {1, 0};
            setsockopt(c->fd[i], SOL_SOCKET, SO_LINGER, &l, sizeof l);
        }
        close(c->fd[i]);
    }
    free(c);
}

/* The events pair c waits for, and the lowering of *timeout_ms to the time
 * its next held chunk is due. */
static void conn_events(const conn *c, int stalled, int64_t now,
                        struct pollfd pf[2], int64_t *timeout_ms)
{
    int i;

    for (i = 0; i < 2; i++) {
        pf[i].fd = c->fd[i];
        pf[i].events = 0;
        pf[i].revents = 0;
    }
    for (i = 0; i < 2; i++) {
        const flow *f = &c->flow[i];
        if (!f->eof && f->queued < FLOW_LIMIT)
            pf[i].events |= POLLIN;
        if (!f->head || (stalled & (1 << i)))
            continue;
        if (f->head->due_ms <= now)
            pf[1 - i].events |= POLLOUT;
        else if (f->head->due_ms - now < *timeout_ms)
            *timeout_ms = f->head->due_ms - now;
    }
    /* poll reports a hang-up even when no event is asked for: a socket
     * with nothing to do is left out, or the loop would spin. */
    for (i = 0; i < 2; i++)
        if (!pf[i].events)
            pf[i].fd = -1;
}

static void *proxy_main(void *arg)
{
    rt_proxy *p = arg;
    struct pollfd *fds = NULL;
    size_t cap = 0;

    for (;;) {
        int64_t now = rt_now_ms(), timeout_ms = POLL_MAX_MS;
        size_t n = 2, k;
        int stalled, stop;
        conn *c, **pc;

        pthread_mutex_lock(&p->mu);
        stalled = p->stalled;
        stop = p->stop;
        if (p->cut_all) {
            for (c = p->conns; c; c = c->next)
                c->cut = 1;
            p->cut_all = 0;
        }
        pthread_mutex_unlock(&p->mu);
        if (stop)
            break;
        for (c = p->conns; c; c = c->next)
            n += 2;
        if (n > cap) {
            struct pollfd *bigger = realloc(fds, n * sizeof *fds);
            if (!bigger)
                rt_fail(__FILE__, __LINE__, "proxy: out of memory");
            fds = bigger;
            cap = n;
        }
        fds[0] = (struct pollfd){.fd = p->wake[0], .events = POLLIN};
        fds[1] = (struct pollfd){.fd = p->listen_fd, .events = POLLIN};
        for (c = p->conns, k = 2; c; c = c->next, k += 2)
            conn_events(c, stalled, now, &fds[k], &timeout_ms);

        if (poll(fds, (nfds_t)n, (int)timeout_ms) < 0 && errno != EINTR)
            rt_fail(__FILE__, __LINE__, "proxy: poll: %s", strerror(errno));

        if (fds[0].revents & POLLIN) {
            char buf[64];
            while (read(p->wake[0], buf, sizeof buf) > 0)
                ;
        }
        /* The pairs in the order their descriptors were polled; pairs
         * accepted below are polled from the next round on. */
        for (c = p->conns, k = 2; c; c = c->next, k += 2)
            c->dead = c->cut || conn_step(p, c, &fds[k]);
        for (pc = &p->conns; (c = *pc) != NULL;) {
            if (c->dead) {
                *pc = c->next;
                conn_free(p, c);
            } else {
                pc = &c->next;
            }
        }
        if (fds[1].revents & POLLIN)
            accept_all(p);
    }
    free(fds);
    return NULL;
}

rt_proxy *rt_proxy_new(int upstream_port)
{
    rt_proxy *p = calloc(1, sizeof *p);
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    int one = 1;

    if (!p)
        rt_fail(__FILE__, __LINE__, "proxy: out of memory");
    p->upstream_port = upstream_port;
    pthread_mutex_init(&p->mu, NULL);
    if (pipe2(p->wake, O_NONBLOCK | O_CLOEXEC) != 0)
        rt_fail(__FILE__, __LINE__, "proxy: pipe: %s", strerror(errno));
    p->listen_fd =
        socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (p->listen_fd < 0 ||
        setsockopt(p->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) !=
            0 ||
        bind(p->listen_fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        listen(p->listen_fd, 64) != 0 ||
        getsockname(p->listen_fd, (struct sockaddr *)&a, &len) != 0)
        rt_fail(__FILE__, __LINE__, "proxy: cannot listen: %s",
                strerror(errno));
    p->port = ntohs(a.sin_port);
    snprintf(p->url, sizeof p->url, "redis://127.0.0.1:%d", p->port);
    return p;
}

void rt_proxy_run(rt_proxy *p)
{
    if (pthread_create(&p->thread, NULL, proxy_main, p) != 0)
        rt_fail(__FILE__, __LINE__, "proxy: pthread_create failed");
    p->running = 1;
}

rt_proxy *rt_proxy_start(int upstream_port)
{
    rt_proxy *p = rt_proxy_new(upstream_port);

    rt_proxy_run(p);
    return p;
}

void rt_proxy_stop(rt_proxy *p)
{
    conn *c;

    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_mutex_unlock(&p->mu);
    wake(p);
    if (p->running)
        pthread_join(p->thread, NULL);
    while ((c = p->conns) != NULL) {
        p->conns = c->next;
        conn_free(p, c);
    }
    close(p->listen_fd);
    close(p->wake[0]);
    close(p->wake[1]);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

int rt_proxy_port(const rt_proxy *p)
{
    return p->port;
}

const char *rt_proxy_url(const rt_proxy *p)
{
    return p->url;
}

void rt_proxy_set_delay(rt_proxy *p, int64_t to_server_ms, int64_t to_client_ms)
{
    if (to_server_ms < 0 || to_client_ms < 0)
        rt_fail(__FILE__, __LINE__, "proxy: negative delay");
    pthread_mutex_lock(&p->mu);
    p->delay_ms[TO_SERVER] = to_server_ms;
    p->delay_ms[TO_CLIENT] = to_client_ms;
    pthread_mutex_unlock(&p->mu);
    wake(p);
}

void rt_proxy_trickle(rt_proxy *p, int64_t to_server_ms, int64_t to_client_ms)
{
    pthread_mutex_lock(&p->mu);
    p->trickle_ms[TO_SERVER] = to_server_ms;
    p->trickle_ms[TO_CLIENT] = to_client_ms;
    pthread_mutex_unlock(&p->mu);
    wake(p);
}

void rt_proxy_blackhole(rt_proxy *p, int dirs)
{
    pthread_mutex_lock(&p->mu);
    p->stalled = dirs & (RT_PROXY_TO_SERVER | RT_PROXY_TO_CLIENT);
    pthread_mutex_unlock(&p->mu);
    wake(p);
}

long rt_proxy_accepted(rt_proxy *p)
{
    long n;

    pthread_mutex_lock(&p->mu);
    n = p->accepted;
    pthread_mutex_unlock(&p->mu);
    return n;
}

size_t rt_proxy_pending(rt_proxy *p, int dirs)
{
    size_t n = 0;

    pthread_mutex_lock(&p->mu);
    if (dirs & RT_PROXY_TO_SERVER)
        n += p->pending[TO_SERVER];
    if (dirs & RT_PROXY_TO_CLIENT)
        n += p->pending[TO_CLIENT];
    pthread_mutex_unlock(&p->mu);
    return n;
}

void rt_proxy_set_policy(rt_proxy *p, rt_proxy_policy fn, void *arg)
{
    pthread_mutex_lock(&p->mu);
    p->policy = fn;
    p->policy_arg = arg;
    pthread_mutex_unlock(&p->mu);
    wake(p);
}

void rt_proxy_cut_all(rt_proxy *p)
{
    pthread_mutex_lock(&p->mu);
    p->cut_all = 1;
    pthread_mutex_unlock(&p->mu);
    wake(p);
}
