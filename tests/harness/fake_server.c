/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The misbehaving Redis (see fake_server.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "fake_server.h"
#include "test.h"

#define CONNS_MAX 16
#define OUT_MAX 65536
#define STREAM_CAP ((size_t)256 << 20)
#define TRICKLE_MS 50

typedef struct fconn {
    int fd;
    redisReader *reader;
    int started;       /* the misbehaviour has begun */
    int oks;           /* RT_FAKE_CLOSE_SECOND: requests read */
    char out[OUT_MAX]; /* what is owed, written as fast as it goes */
    size_t out_len, out_off;
    int trickle; /* out goes one byte per TRICKLE_MS */
    int64_t due_ms;
    size_t streamed; /* RT_FAKE_BULK: bytes of the endless string */
} fconn;

struct rt_fake {
    rt_fake_mode mode;
    int at_open;
    int listen_fd;
    int wake[2];
    char url[64];
    pthread_t thread;
    fconn conns[CONNS_MAX];
    pthread_mutex_t mu; /* guards sent and accepted */
    size_t sent, accepted;
};

static void queue(fconn *c, const char *s, size_t len)
{
    if (c->out_off == c->out_len)
        c->out_off = c->out_len = 0;
    if (c->out_len + len > sizeof c->out)
        len = sizeof c->out - c->out_len;
    memcpy(c->out + c->out_len, s, len);
    c->out_len += len;
}

static int is_handshake(const redisReply *r)
{
    const char *cmd;

    if (r->type != REDIS_REPLY_ARRAY || r->elements == 0 ||
        r->element[0]->type != REDIS_REPLY_STRING)
        return 0;
    cmd = r->element[0]->str;
    return strcasecmp(cmd, "AUTH") == 0 || strcasecmp(cmd, "SELECT") == 0 ||
           strcasecmp(cmd, "SCRIPT") == 0 || strcasecmp(cmd, "PING") == 0;
}

static void answer_healthy(fconn *c, const redisReply *r)
{
    const char *cmd = r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
                              r->element[0]->type == REDIS_REPLY_STRING
                          ? r->element[0]->str
                          : "";

    if (strcasecmp(cmd, "SCRIPT") == 0)
        queue(c, "$40\r\n0123456789abcdef0123456789abcdef01234567\r\n", 47);
    else if (strcasecmp(cmd, "PING") == 0)
        queue(c, "+PONG\r\n", 7);
    else
        queue(c, "+OK\r\n", 5);
}

/* The first misbehaving request of a connection starts its misbehaviour;
 * later ones add to it where that makes sense. */
static void misbehave(rt_fake *f, fconn *c)
{
    int first = !c->started;

    c->started = 1;
    switch (f->mode) {
    case RT_FAKE_SILENT:
        break;
    case RT_FAKE_TRICKLE:
        c->trickle = 1;
        queue(c, "$40\r\n0123456789abcdef0123456789abcdef01234567\r\n", 47);
        break;
    case RT_FAKE_STALL:
        if (first)
            queue(c, "$40\r\n0123456789", 15);
        break;
    case RT_FAKE_BULK:
        if (first)
            queue(c, "$999999999999\r\n", 15);
        break;
    case RT_FAKE_ARRAY:
        if (first)
            queue(c, "*2147483647\r\n:1\r\n", 17);
        break;
    case RT_FAKE_DEEP:
        if (first)
            queue(
                c,
                "*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n",
                40);
        break;
    case RT_FAKE_GARBAGE:
        if (first)
            queue(c, "hello, I am not Redis\r\n", 23);
        break;
    case RT_FAKE_ZERO:
        queue(c, ":0\r\n", 4);
        break;
    case RT_FAKE_OK:
        queue(c, "+OK\r\n", 5);
        break;
    case RT_FAKE_EXTRA:
        queue(c, "+OK\r\n-ERR stray", 15);
        break;
    case RT_FAKE_EXTRA_ARRAY:
        queue(c, "+OK\r\n*2\r\n:1\r\n", 13);
        break;
    case RT_FAKE_CLOSE_SECOND:
        /* The first answered; the second when the third has come. */
        if (++c->oks == 1 || c->oks == 3)
            queue(c, "+OK\r\n", 5);
        break;
    }
}

static void conn_close(fconn *c)
{
    if (c->fd < 0)
        return;
    close(c->fd);
    redisReaderFree(c->reader);
    memset(c, 0, sizeof *c);
    c->fd = -1;
}

static void count(rt_fake *f, ssize_t n)
{
    pthread_mutex_lock(&f->mu);
    f->sent += (size_t)n;
    pthread_mutex_unlock(&f->mu);
}

static int conn_read(rt_fake *f, fconn *c)
{
    char buf[16384];
    ssize_t n = recv(c->fd, buf, sizeof buf, 0);
    void *req;

    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
        return -1;
    if (n < 0)
        return 0;
    if (redisReaderFeed(c->reader, buf, (size_t)n) != REDIS_OK)
        return -1;
    while (redisReaderGetReply(c->reader, &req) == REDIS_OK && req) {
        redisReply *r = req;
        if (c->started || f->at_open || !is_handshake(r))
            misbehave(f, c);
        else
            answer_healthy(c, r);
        freeReplyObject(r);
    }
    if (f->mode == RT_FAKE_CLOSE_SECOND && c->oks >= 3) {
        /* Its answer and the end in one go (small: it fits the socket). */
        ssize_t k = send(c->fd, c->out + c->out_off, c->out_len - c->out_off,
                         MSG_NOSIGNAL);
        if (k > 0)
            count(f, k);
        return -1;
    }
    return 0;
}

static int conn_write(rt_fake *f, fconn *c)
{
    static const char junk[65536] = {'x'};
    ssize_t n;

    if (c->out_off < c->out_len) {
        size_t len = c->out_len - c->out_off;
        if (c->trickle) {
            if (rt_now_ms() < c->due_ms)
                return 0;
            len = 1;
            c->due_ms = rt_now_ms() + TRICKLE_MS;
        }
        n = send(c->fd, c->out + c->out_off, len, MSG_NOSIGNAL);
        if (n < 0)
            return errno == EAGAIN || errno == EINTR ? 0 : -1;
        c->out_off += (size_t)n;
        count(f, n);
        return 0;
    }
    if (f->mode == RT_FAKE_BULK && c->started && c->streamed < STREAM_CAP) {
        n = send(c->fd, junk, sizeof junk, MSG_NOSIGNAL);
        if (n < 0)
            return errno == EAGAIN || errno == EINTR ? 0 : -1;
        c->streamed += (size_t)n;
        count(f, n);
    }
    return 0;
}

static int wants_write(const rt_fake *f, const fconn *c)
{
    return c->out_off < c->out_len ||
           (f->mode == RT_FAKE_BULK && c->started && c->streamed < STREAM_CAP);
}

static void *fake_main(void *arg)
{
    rt_fake *f = arg;

    for (;;) {
        struct pollfd pf[CONNS_MAX + 2];
        int map[CONNS_MAX + 2];
        int n = 2, i;

        pf[0].fd = f->wake[0];
        pf[0].events = POLLIN;
        pf[1].fd = f->listen_fd;
        pf[1].events = POLLIN;
        for (i = 0; i < CONNS_MAX; i++) {
            fconn *c = &f->conns[i];
            if (c->fd < 0)
                continue;
            pf[n].fd = c->fd;
            pf[n].events = POLLIN;
            /* A trickle waits for its time, not for the socket. */
            if (wants_write(f, c) && !c->trickle)
                pf[n].events |= POLLOUT;
            map[n++] = i;
        }
        for (i = 0; i < n; i++)
            pf[i].revents = 0;
        poll(pf, (nfds_t)n, 10);
        if (pf[0].revents)
            break;
        if (pf[1].revents & POLLIN) {
            int fd =
                accept4(f->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd >= 0) {
                pthread_mutex_lock(&f->mu);
                f->accepted++;
                pthread_mutex_unlock(&f->mu);
            }
            for (i = 0; fd >= 0 && i < CONNS_MAX; i++)
                if (f->conns[i].fd < 0) {
                    f->conns[i].fd = fd;
                    f->conns[i].reader = redisReaderCreate();
                    fd = -1;
                }
            if (fd >= 0)
                close(fd);
        }
        for (i = 2; i < n; i++) {
            fconn *c = &f->conns[map[i]];
            if (c->fd < 0)
                continue;
            if ((pf[i].revents & (POLLIN | POLLHUP | POLLERR)) &&
                conn_read(f, c) != 0) {
                conn_close(c);
                continue;
            }
            if (wants_write(f, c) && conn_write(f, c) != 0)
                conn_close(c);
        }
    }
    return NULL;
}

rt_fake *rt_fake_start(rt_fake_mode mode, int at_open)
{
    rt_fake *f = calloc(1, sizeof *f);
    struct sockaddr_in sa;
    socklen_t sl = sizeof sa;
    int i;

    if (!f)
        rt_fail(__FILE__, __LINE__, "fake server: out of memory");
    f->mode = mode;
    f->at_open = at_open;
    for (i = 0; i < CONNS_MAX; i++)
        f->conns[i].fd = -1;
    pthread_mutex_init(&f->mu, NULL);
    f->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (f->listen_fd < 0 ||
        bind(f->listen_fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        listen(f->listen_fd, 16) != 0 ||
        getsockname(f->listen_fd, (struct sockaddr *)&sa, &sl) != 0 ||
        pipe2(f->wake, O_CLOEXEC) != 0)
        rt_fail(__FILE__, __LINE__, "fake server: %s", strerror(errno));
    snprintf(f->url, sizeof f->url, "redis://127.0.0.1:%d", ntohs(sa.sin_port));
    if (pthread_create(&f->thread, NULL, fake_main, f) != 0)
        rt_fail(__FILE__, __LINE__, "fake server: no thread");
    return f;
}

const char *rt_fake_url(const rt_fake *f)
{
    return f->url;
}

size_t rt_fake_sent(rt_fake *f)
{
    size_t n;

    pthread_mutex_lock(&f->mu);
    n = f->sent;
    pthread_mutex_unlock(&f->mu);
    return n;
}

size_t rt_fake_accepted(rt_fake *f)
{
    size_t n;

    pthread_mutex_lock(&f->mu);
    n = f->accepted;
    pthread_mutex_unlock(&f->mu);
    return n;
}

void rt_fake_stop(rt_fake *f)
{
    int i;

    if (!f)
        return;
    (void)!write(f->wake[1], "x", 1);
    pthread_join(f->thread, NULL);
    for (i = 0; i < CONNS_MAX; i++)
        conn_close(&f->conns[i]);
    close(f->listen_fd);
    close(f->wake[0]);
    close(f->wake[1]);
    pthread_mutex_destroy(&f->mu);
    free(f);
}
