/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The connection state machine (see conn.h): a non-blocking socket, a
 * transport (plain or TLS) over it, an output buffer of formatted
 * commands, hiredis's RESP reader with bounded reply-object functions, and
 * a queue of complete replies.
 *
 * Why the reader's object functions are wrapped rather than replaced:
 * hiredis keeps its default functions private, but a reader created with
 * redisReaderCreate points at them, so each wrapper checks its bound and
 * then calls the original. That works the same with hiredis 0.14 and 1.x,
 * and the replies stay ordinary redisReply objects for the rest of the
 * library. A wrapper that refuses returns NULL, which hiredis reports as
 * out of memory; the refusal's own text, kept in the connection, is what
 * the caller sees.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <rlock/rlock.h>

#include "net/resolve.h"
#include "net/transport.h"
#include "util/dec.h"

/* Bytes read from the socket at a time, and the most one rlock__conn_io
 * reads before giving the caller its turn (a flood of pub/sub messages
 * must not keep a loop inside one connection). */
#define READ_CHUNK 16384
#define READ_ROUNDS 64
/* What one reply object costs besides its payload, for the byte bound. */
#define OBJ_OVERHEAD 64

struct rlock__conn {
    int fd;
    /* Told before the descriptor closes (rlock__conn_on_close). */
    void (*on_close)(void *arg, rlock__conn *c);
    void *on_close_arg;
    /* Told before another file takes the descriptor's number (a name
     * resolved: the socket takes the lookup's place). */
    void (*on_renumber)(void *arg, rlock__conn *c);
    void *on_renumber_arg;
    /* The lookup of the host's name while it is under way (fd is its
     * descriptor), and what connecting after it needs. */
    rlock__resolve *resolving;
    int port, keepalive;
    char where[300];
    const rlock__transport *t;
    void *tdata;
    int connecting; /* the TCP or unix connect is still in progress */
    int handshaking;
    short t_wants; /* what the transport's last blocked call waits for */
    int push;
    redisReader *reader;
    redisReplyObjectFunctions fn;
    redisReplyObjectFunctions *orig;
    rlock__bounds b;
    /* The connection's own questions (a handshake's INFO and ROLE, a
     * sentinel's or a cluster's discovery) are bounded by the defaults
     * at least: the next roomy replies use wide, not b, so that a tight
     * bound set for the lock replies does not refuse them. */
    rlock__bounds wide;
    size_t roomy;
    int64_t obj_bytes; /* built so far for the reply being parsed */
    char refused[160]; /* why a wrapper refused an object, or "" */
    char *out;         /* formatted commands not yet written */
    size_t out_len, out_off, out_cap;
    /* Complete replies: ready[head .. head+nready), each with its place
     * in the order the replies were asked for (a reply that came unasked,
     * a pub/sub message, has UINT64_MAX). */
    struct ready_reply {
        redisReply *r;
        uint64_t at;
    } * ready;
    size_t head, nready, ready_cap;
    size_t expected; /* replies asked for, not complete yet */
    /* Replies asked for so far, and completed so far (their places run
     * from 0 in the order they were asked for). */
    uint64_t asked, completed;
    /* Of the replies to come, those to drop (given up): places
     * [from, to), ascending, apart, all at or after completed; discard
     * counts them. */
    struct drop_range {
        uint64_t from, to;
    } * drops;
    size_t ndrops, drops_cap;
    size_t discard;
    uint64_t out_total; /* bytes ever queued */
    uint64_t out_done;  /* bytes ever written */
    int sent;
    int fd_blocks;       /* O_NONBLOCK cleared for the blocking driver */
    int64_t rcvtimeo_ns; /* SO_RCVTIMEO as last set (0: never) */
    uint64_t peer;       /* rlock__conn_set_peer's, 0 until then */
    int64_t answered_ns; /* when the last reply asked for was complete */
    rlock__neterr err;
};

int64_t rlock__net_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void rlock__neterr_set(rlock__neterr *e, int code, const char *fmt, ...)
{
    va_list ap;

    e->code = code;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
}

void rlock__conn_fail(rlock__conn *c, int code, const char *fmt, ...)
{
    va_list ap;

    if (c->err.code != 0)
        return; /* the first cause is the one to report */
    c->err.code = code;
    va_start(ap, fmt);
    vsnprintf(c->err.msg, sizeof c->err.msg, fmt, ap);
    va_end(ap);
}

/* ---- bounded reply objects --------------------------------------------- */

static rlock__conn *task_conn(const redisReadTask *task)
{
    return task->privdata;
}

/* The bounds of the reply being parsed. */
static const rlock__bounds *lim(const rlock__conn *c)
{
    return c->roomy ? &c->wide : &c->b;
}

/* Charges size bytes to the reply being built; 0 if that is over the
 * bound (the refusal recorded). */
static int charge(rlock__conn *c, int64_t size)
{
    c->obj_bytes += size + OBJ_OVERHEAD;
    if (c->obj_bytes > lim(c)->reply_bytes) {
        snprintf(c->refused, sizeof c->refused,
                 "reply exceeds max_reply_bytes (%lld bytes)",
                 (long long)lim(c)->reply_bytes);
        return 0;
    }
    return 1;
}

static void *b_string(const redisReadTask *task, char *str, size_t len)
{
    rlock__conn *c = task_conn(task);

    if ((int64_t)len > lim(c)->bulk_bytes) {
        snprintf(c->refused, sizeof c->refused,
                 "string of %zu bytes exceeds max_bulk_bytes (%lld)", len,
                 (long long)lim(c)->bulk_bytes);
        return NULL;
    }
    if (!charge(c, (int64_t)len))
        return NULL;
    return c->orig->createString(task, str, len);
}

static int depth_of(const redisReadTask *task)
{
    int d = 0;

    for (task = task->parent; task; task = task->parent)
        d++;
    return d;
}

static void *b_array(const redisReadTask *task, RLOCK__ARRAY_LEN_T elements)
{
    rlock__conn *c = task_conn(task);
    int64_t n = (int64_t)elements;

    if (n < 0 || n > lim(c)->array_elements) {
        snprintf(c->refused, sizeof c->refused,
                 "array of %lld elements exceeds max_array_elements (%lld)",
                 (long long)n, (long long)lim(c)->array_elements);
        return NULL;
    }
    if (depth_of(task) + 1 > lim(c)->depth) {
        snprintf(c->refused, sizeof c->refused,
                 "arrays nested deeper than max_depth (%d)", lim(c)->depth);
        return NULL;
    }
    if (!charge(c, n * (int64_t)sizeof(void *)))
        return NULL;
    return c->orig->createArray(task, elements);
}

static void *b_integer(const redisReadTask *task, long long v)
{
    rlock__conn *c = task_conn(task);

    if (!charge(c, 0))
        return NULL;
    return c->orig->createInteger(task, v);
}

static void *b_nil(const redisReadTask *task)
{
    rlock__conn *c = task_conn(task);

    if (!charge(c, 0))
        return NULL;
    return c->orig->createNil(task);
}

void rlock__bounds_widen(rlock__bounds *b)
{
    if (b->reply_bytes > 0 && b->reply_bytes < RLOCK__BOUND_REPLY_BYTES)
        b->reply_bytes = RLOCK__BOUND_REPLY_BYTES;
    if (b->bulk_bytes > 0 && b->bulk_bytes < RLOCK__BOUND_BULK_BYTES)
        b->bulk_bytes = RLOCK__BOUND_BULK_BYTES;
    if (b->array_elements > 0 &&
        b->array_elements < RLOCK__BOUND_ARRAY_ELEMENTS)
        b->array_elements = RLOCK__BOUND_ARRAY_ELEMENTS;
    if (b->depth > 0 && b->depth < RLOCK__BOUND_DEPTH)
        b->depth = RLOCK__BOUND_DEPTH;
}

void rlock__conn_widen(rlock__conn *c)
{
    c->roomy = c->expected;
}

static void fill_bounds(rlock__bounds *b, const rlock__bounds *in)
{
    *b = *in;
    if (b->reply_bytes <= 0)
        b->reply_bytes = RLOCK__BOUND_REPLY_BYTES;
    if (b->bulk_bytes <= 0)
        b->bulk_bytes = RLOCK__BOUND_BULK_BYTES;
    if (b->array_elements <= 0)
        b->array_elements = RLOCK__BOUND_ARRAY_ELEMENTS;
    if (b->depth <= 0)
        b->depth = RLOCK__BOUND_DEPTH;
    if (b->depth > RLOCK__BOUND_DEPTH_MAX)
        b->depth = RLOCK__BOUND_DEPTH_MAX;
}

static int reader_init(rlock__conn *c)
{
    c->reader = redisReaderCreate();
    if (!c->reader)
        return RLOCK_ENOMEM;
    c->orig = c->reader->fn;
    c->fn = *c->orig;
    c->fn.createString = b_string;
    c->fn.createArray = b_array;
    c->fn.createInteger = b_integer;
    c->fn.createNil = b_nil;
    c->reader->fn = &c->fn;
    c->reader->privdata = c;
    return RLOCK_OK;
}

/* ---- the plain transport ------------------------------------------------ */

static int plain_handshake(rlock__conn *c, rlock__neterr *err)
{
    (void)c;
    (void)err;
    return 0;
}

static ssize_t plain_read(rlock__conn *c, void *buf, size_t len,
                          rlock__neterr *err)
{
    ssize_t n;

    /* MSG_DONTWAIT: the descriptor may be in blocking mode (read_wait
     * below); the state machine's own reads never wait. */
    do
        n = recv(c->fd, buf, len, MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    if (n >= 0)
        return n;
    if (errno == EAGAIN || errno == EWOULDBLOCK)
        return RLOCK__IO_WANT_READ;
    rlock__neterr_set(err, RLOCK_EIO, "read: %s", strerror(errno));
    return RLOCK__IO_ERROR;
}

/*
 * Why a wait of its own: on the machines measured (docs/performance.md), a
 * thread asleep in recv(2) is woken by the reply sooner than one asleep in
 * poll(2), which then still has to call recv: 10-25 us per acquire and
 * release pair, most of the difference to a bare SET NX client. So the
 * blocking driver, waiting on one plain connection, sleeps in recv with
 * SO_RCVTIMEO. The kernel rounds a socket timeout up to its clock tick and
 * may wake a tick late (10 ms at HZ=100): the timeout is set WAIT_MARGIN
 * short of the deadline, and poll, which keeps to the millisecond, waits
 * out the rest. A timeout that is still short enough and not too short is
 * left as it is, so that calls with the same budget set it once.
 */
#define WAIT_MARGIN_NS INT64_C(20000000)
#define WAIT_SLACK_NS INT64_C(10000000)

static ssize_t plain_read_wait(rlock__conn *c, void *buf, size_t len,
                               int64_t deadline_ns, rlock__neterr *err)
{
    int64_t room = deadline_ns - rlock__net_now_ns() - WAIT_MARGIN_NS;
    ssize_t n;

    if (room <= WAIT_SLACK_NS)
        return RLOCK__IO_WANT_READ;
    if (c->rcvtimeo_ns == 0 || c->rcvtimeo_ns > room ||
        c->rcvtimeo_ns < room / 2) {
        int64_t t = room - WAIT_SLACK_NS;
        struct timeval tv;

        tv.tv_sec = (time_t)(t / 1000000000);
        tv.tv_usec = (suseconds_t)(t % 1000000000 / 1000);
        if (setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0)
            return RLOCK__IO_WANT_READ;
        c->rcvtimeo_ns = t;
    }
    if (!c->fd_blocks) {
        int fl = fcntl(c->fd, F_GETFL);

        if (fl < 0 || fcntl(c->fd, F_SETFL, fl & ~O_NONBLOCK) != 0)
            return RLOCK__IO_WANT_READ;
        c->fd_blocks = 1;
    }
    n = recv(c->fd, buf, len, 0);
    if (n >= 0)
        return n;
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
        return RLOCK__IO_WANT_READ;
    rlock__neterr_set(err, RLOCK_EIO, "read: %s", strerror(errno));
    return RLOCK__IO_ERROR;
}

static ssize_t plain_write(rlock__conn *c, const void *buf, size_t len,
                           rlock__neterr *err)
{
    ssize_t n;

    /* MSG_NOSIGNAL: a peer that closed must not raise SIGPIPE in a
     * program that did not ask for it. */
    do
        n = send(c->fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    if (n >= 0)
        return n;
    if (errno == EAGAIN || errno == EWOULDBLOCK)
        return RLOCK__IO_WANT_WRITE;
    rlock__neterr_set(err, RLOCK_EIO, "write: %s", strerror(errno));
    return RLOCK__IO_ERROR;
}

static int plain_buffered(const rlock__conn *c)
{
    (void)c;
    return 0;
}

static void plain_release(rlock__conn *c)
{
    (void)c;
}

const rlock__transport rlock__plain_transport = {
    "tcp",          plain_handshake, plain_read,     plain_write,
    plain_buffered, plain_release,   plain_read_wait};

int rlock__conn_sock(const rlock__conn *c)
{
    return c->fd;
}

void *rlock__conn_tdata(const rlock__conn *c)
{
    return c->tdata;
}

void rlock__conn_set_transport(rlock__conn *c, const rlock__transport *t,
                               void *tdata)
{
    c->t = t;
    c->tdata = tdata;
    c->handshaking = 1;
    c->t_wants = POLLOUT;
}

/* ---- opening ------------------------------------------------------------ */

static int ms_until(int64_t deadline_ns)
{
    int64_t left = deadline_ns - rlock__net_now_ns();

    if (left <= 0)
        return 0;
    /* Rounded up, so that a poll never ends just before the deadline. */
    left = (left + 999999) / 1000000;
    return left > 60000 ? 60000 : (int)left;
}

/* Waits until fd is writable (a connect finished) or the deadline. */
static int wait_connected(int fd, int64_t deadline_ns, rlock__neterr *err,
                          const char *where)
{
    for (;;) {
        struct pollfd p = {fd, POLLOUT, 0};
        int ms = ms_until(deadline_ns), soerr = 0, n;
        socklen_t sl = sizeof soerr;

        if (ms == 0) {
            rlock__neterr_set(err, RLOCK_ENOREPLY,
                              "connecting to %s: not connected "
                              "in time",
                              where);
            return err->code;
        }
        n = poll(&p, 1, ms);
        if (n < 0 && errno == EINTR)
            continue;
        if (n == 0)
            continue; /* the deadline check above ends it */
        if (n < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0)
            soerr = errno;
        if (soerr != 0) {
            rlock__neterr_set(err, RLOCK_ECONNECT, "connecting to %s: %s",
                              where, strerror(soerr));
            return err->code;
        }
        return RLOCK_OK;
    }
}

static int connect_unix(const char *path, int64_t deadline_ns, int *out,
                        int *in_progress, rlock__neterr *err)
{
    struct sockaddr_un sa;
    int fd;

    if (strlen(path) >= sizeof sa.sun_path) {
        rlock__neterr_set(err, RLOCK_ECONNECT, "socket path too long: %s",
                          path);
        return err->code;
    }
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, path, strlen(path));
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        rlock__neterr_set(err, RLOCK_ECONNECT, "socket: %s", strerror(errno));
        return err->code;
    }
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        if (errno != EINPROGRESS && errno != EAGAIN) {
            rlock__neterr_set(err, RLOCK_ECONNECT, "connecting to %s: %s", path,
                              strerror(errno));
            close(fd);
            return err->code;
        }
        if (in_progress) {
            *in_progress = 1;
        } else if (wait_connected(fd, deadline_ns, err, path) != RLOCK_OK) {
            close(fd);
            return err->code;
        }
    }
    *out = fd;
    return RLOCK_OK;
}

/* Connects a socket to the first of a's addresses that takes it (port
 * set here), waiting by deadline_ns unless in_progress is given: then the
 * first whose connect is under way is the one (the caller's loop sees it
 * through). */
static int connect_addrs(const rlock__addrs *a, int port, int keepalive,
                         const char *where, int64_t deadline_ns, int *out,
                         int *in_progress, rlock__neterr *err)
{
    int i, fd = -1, one = 1;

    rlock__neterr_set(err, RLOCK_ECONNECT, "connecting to %s: no address",
                      where);
    for (i = 0; i < a->n; i++) {
        struct sockaddr_storage sa = a->a[i];
        int family = sa.ss_family;
        if (family == AF_INET)
            ((struct sockaddr_in *)&sa)->sin_port = htons((uint16_t)port);
        else if (family == AF_INET6)
            ((struct sockaddr_in6 *)&sa)->sin6_port = htons((uint16_t)port);
        fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            rlock__neterr_set(err, RLOCK_ECONNECT, "socket: %s",
                              strerror(errno));
            continue;
        }
        if (connect(fd, (struct sockaddr *)&sa, a->len[i]) == 0)
            break;
        if (errno == EINPROGRESS && in_progress) {
            *in_progress = 1; /* the caller's loop sees it through */
            break;
        }
        if (errno == EINPROGRESS &&
            wait_connected(fd, deadline_ns, err, where) == RLOCK_OK)
            break;
        if (errno != EINPROGRESS)
            rlock__neterr_set(err, RLOCK_ECONNECT, "connecting to %s: %s",
                              where, strerror(errno));
        close(fd);
        fd = -1;
        if (err->code == RLOCK_ENOREPLY)
            break; /* the deadline is spent: no other address */
    }
    if (fd < 0)
        return err->code;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (keepalive)
        setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    *out = fd;
    return RLOCK_OK;
}

/* A TCP connection's socket: at once for an address or a name found in
 * /etc/hosts; else with its lookup under way (*lookup, whose descriptor
 * *out is then: step() connects when it is done), or, built without a
 * resolver that does not block, after getaddrinfo(3). */
static int connect_tcp(const char *host, int port, int keepalive,
                       int64_t deadline_ns, int *out, int *in_progress,
                       rlock__resolve **lookup, rlock__neterr *err)
{
    char where[300];
    rlock__addrs a;
    int rc, noname = 0;

    snprintf(where, sizeof where, "%s:%d", host, port);
    rc = rlock__resolve_numeric(host, &a, &noname, err);
    if (rc != RLOCK_OK && noname) {
        rlock__resolve *r = NULL;
        rc = rlock__resolve_start(host, &r, err);
        if (rc == RLOCK__RESOLVE_BLOCKING) {
            rc = rlock__resolve_system(host, &a, err);
        } else if (rc == RLOCK_OK) {
            rc = rlock__resolve_step(r, &a, err);
            if (rc == 0) {
                *lookup = r;
                *out = rlock__resolve_fd(r);
                return RLOCK_OK;
            }
            rlock__resolve_free(r, 0);
            rc = rc == 1 ? RLOCK_OK : rc;
        }
    }
    if (rc != RLOCK_OK)
        return rc;
    return connect_addrs(&a, port, keepalive, where, deadline_ns, out,
                         in_progress, err);
}

/* Connects (waiting by deadline_ns unless in_progress is given, which
 * then says whether the connect is still under way) and builds the
 * connection around the socket. */
static int start(const rlock__endpoint *ep, int64_t deadline_ns,
                 rlock__conn **out, int *in_progress, rlock__neterr *err)
{
    rlock__conn *c;
    rlock__resolve *lookup = NULL;
    int fd = -1, rc;

    err->code = 0;
    err->msg[0] = '\0';
    if (ep->path)
        rc = connect_unix(ep->path, deadline_ns, &fd, in_progress, err);
    else
        rc = connect_tcp(ep->host, ep->port, ep->keepalive, deadline_ns, &fd,
                         in_progress, &lookup, err);
    if (rc != RLOCK_OK)
        return rc;
    c = calloc(1, sizeof *c);
    if (!c || reader_init(c) != RLOCK_OK) {
        free(c);
        rlock__resolve_free(lookup, 0);
        if (!lookup)
            close(fd);
        rlock__neterr_set(err, RLOCK_ENOMEM, "out of memory");
        return err->code;
    }
    c->fd = fd;
    c->t = &rlock__plain_transport;
    c->connecting = in_progress && *in_progress;
    c->resolving = lookup;
    if (lookup) {
        c->port = ep->port;
        c->keepalive = ep->keepalive;
        snprintf(c->where, sizeof c->where, "%s:%d", ep->host, ep->port);
    }
    fill_bounds(&c->b, &ep->bounds);
    c->wide = c->b;
    rlock__bounds_widen(&c->wide);
    if (ep->tls) {
        const char *name = ep->sni ? ep->sni : ep->host ? ep->host : "";

        rc = ep->attach ? ep->attach(c, ep->tls, name, err) : RLOCK_EINVAL;
        if (!ep->attach)
            rlock__neterr_set(err, rc,
                              "TLS asked for, but no TLS transport given");
        if (rc != RLOCK_OK) {
            rlock__conn_close(c);
            return rc;
        }
    }
    *out = c;
    return RLOCK_OK;
}

int rlock__conn_start(const rlock__endpoint *ep, rlock__conn **out,
                      rlock__neterr *err)
{
    int in_progress = 0;

    return start(ep, 0, out, &in_progress, err);
}

int rlock__conn_open(const rlock__endpoint *ep, int64_t deadline_ns,
                     rlock__conn **out, rlock__neterr *err)
{
    rlock__conn *c = NULL;
    size_t none = 0;
    int rc;

    if ((rc = start(ep, deadline_ns, &c, NULL, err)) != RLOCK_OK)
        return rc;
    if (rlock__conn_up(c)) {
        *out = c;
        return RLOCK_OK;
    }
    rc = rlock__net_run(&c, 1, &none, deadline_ns);
    if (rc == RLOCK_OK && c->err.code != 0) {
        *err = c->err;
        rc = err->code;
    } else if (rc == RLOCK_OK && !rlock__conn_up(c)) {
        rc = RLOCK_ENOREPLY;
    }
    if (rc == RLOCK_ENOREPLY && err->code != RLOCK_ENOREPLY)
        rlock__neterr_set(err, RLOCK_ENOREPLY, "%s",
                          c->resolving    ? "name not resolved in time"
                          : c->connecting ? "not connected in time"
                                          : "TLS handshake not done in time");
    if (rc != RLOCK_OK) {
        rlock__conn_close(c);
        return err->code;
    }
    *out = c;
    return RLOCK_OK;
}

void rlock__conn_close(rlock__conn *c)
{
    size_t i;

    if (!c)
        return;
    if (c->on_close)
        c->on_close(c->on_close_arg, c);
    c->t->release(c);
    /* (fd is the lookup's while it is under way: closed below.) */
    rlock__resolve_free(c->resolving, 1);
    if (c->fd >= 0)
        close(c->fd);
    for (i = 0; i < c->nready; i++)
        freeReplyObject(c->ready[c->head + i].r);
    free(c->ready);
    free(c->drops);
    free(c->out);
    if (c->reader)
        redisReaderFree(c->reader);
    free(c);
}

/* ---- the state machine -------------------------------------------------- */

int rlock__conn_fd(const rlock__conn *c)
{
    return c->fd;
}

void rlock__conn_set_push(rlock__conn *c, int on)
{
    c->push = on;
}

int rlock__conn_stage(const rlock__conn *c)
{
    return c->resolving     ? RLOCK__CONN_RESOLVING
           : c->connecting  ? RLOCK__CONN_CONNECTING
           : c->handshaking ? RLOCK__CONN_HANDSHAKING
                            : RLOCK__CONN_UP;
}

int rlock__conn_up(const rlock__conn *c)
{
    return rlock__conn_stage(c) == RLOCK__CONN_UP;
}

const rlock__neterr *rlock__conn_error(const rlock__conn *c)
{
    return &c->err;
}

size_t rlock__conn_pending(const rlock__conn *c)
{
    return c->expected + c->nready - c->discard;
}

size_t rlock__conn_ready(const rlock__conn *c)
{
    return c->nready;
}

size_t rlock__conn_expected(const rlock__conn *c)
{
    return c->expected;
}

int rlock__conn_sent(const rlock__conn *c)
{
    return c->sent;
}

void rlock__conn_set_peer(rlock__conn *c, uint64_t peer)
{
    c->peer = peer;
}

uint64_t rlock__conn_peer(const rlock__conn *c)
{
    return c->peer;
}

short rlock__conn_events(const rlock__conn *c)
{
    short ev = 0;

    if (c->err.code != 0)
        return 0;
    if (c->resolving)
        return POLLIN;
    if (c->connecting)
        return POLLOUT;
    if (c->handshaking)
        return c->t_wants;
    if (c->out_off < c->out_len)
        ev |= POLLOUT;
    if (c->expected > 0 || c->push)
        ev |= POLLIN;
    /* A TLS read that needs the socket writable (or the reverse). */
    if (c->t_wants)
        ev |= c->t_wants;
    return ev;
}

/* "<mark><n>\r\n" at p; returns its end. */
static char *resp_head(char *p, char mark, size_t n)
{
    *p++ = mark;
    p += rlock__dec_u64(p, n);
    *p++ = '\r';
    *p++ = '\n';
    return p;
}

/* The RESP length of a head "<mark><n>\r\n". */
static size_t resp_head_len(size_t n)
{
    return 3 + rlock__dec_len(n);
}

/* Once everything queued is written, the buffer starts over; one that a
 * large batch grew goes at once (a connection keeps a few kilobytes at
 * most between requests, not the megabytes of 20,000 waiters' burst). */
static void out_drained(rlock__conn *c)
{
    if (c->out_off != c->out_len)
        return;
    c->out_off = c->out_len = 0;
    if (c->out_cap > 65536) {
        free(c->out);
        c->out = NULL;
        c->out_cap = 0;
    }
}

/*
 * The command as RESP (an array of bulk strings), written straight into
 * the output buffer, which is kept between commands: no allocation per
 * request once it is large enough, and no printf (hiredis's
 * redisFormatCommandArgv spent more client CPU on an acquisition than all
 * of rlock's own work).
 */
int rlock__conn_append(rlock__conn *c, int argc, const char **argv,
                       const size_t *lens)
{
    size_t len = resp_head_len((size_t)argc), need;
    char *p;
    int i;

    if (c->err.code != 0)
        return c->err.code;
    for (i = 0; i < argc; i++) {
        size_t n = lens ? lens[i] : strlen(argv[i]);
        len += resp_head_len(n) + n + 2;
    }
    out_drained(c);
    need = c->out_len + len;
    if (need > c->out_cap) {
        size_t cap = c->out_cap ? c->out_cap : 256;
        char *grown;
        while (cap < need)
            cap *= 2;
        grown = realloc(c->out, cap);
        if (!grown) {
            rlock__conn_fail(c, RLOCK_ENOMEM, "out of memory");
            return RLOCK_ENOMEM;
        }
        c->out = grown;
        c->out_cap = cap;
    }
    p = resp_head(c->out + c->out_len, '*', (size_t)argc);
    for (i = 0; i < argc; i++) {
        size_t n = lens ? lens[i] : strlen(argv[i]);
        p = resp_head(p, '$', n);
        memcpy(p, argv[i], n);
        p += n;
        *p++ = '\r';
        *p++ = '\n';
    }
    c->out_len += len;
    c->out_total += len;
    if (c->expected == 0 && c->nready == 0)
        c->sent = 0;
    c->expected++;
    c->asked++;
    return RLOCK_OK;
}

/* The array p of *cap elements of size bytes with twice the room (4 at
 * first), *cap updated; NULL (p as it was) when out of memory. */
static void *grow(void *p, size_t *cap, size_t size)
{
    size_t more = *cap ? *cap * 2 : 4;
    void *g = realloc(p, more * size);

    if (g)
        *cap = more;
    return g;
}

static int push_ready(rlock__conn *c, redisReply *r, uint64_t at)
{
    if (c->head > 0 && c->head + c->nready == c->ready_cap) {
        memmove(c->ready, c->ready + c->head, c->nready * sizeof *c->ready);
        c->head = 0;
    }
    if (c->head + c->nready == c->ready_cap) {
        struct ready_reply *g = grow(c->ready, &c->ready_cap, sizeof *g);
        if (!g)
            return RLOCK_ENOMEM;
        c->ready = g;
    }
    c->ready[c->head + c->nready].r = r;
    c->ready[c->head + c->nready++].at = at;
    return RLOCK_OK;
}

/* Whether the reply at place at, just completed, was given up: then it
 * is dropped from the ranges (which start at or after it). */
static int dropped(rlock__conn *c, uint64_t at)
{
    struct drop_range *d = c->drops;

    if (c->ndrops == 0 || d->from != at)
        return 0;
    if (++d->from == d->to)
        memmove(d, d + 1, --c->ndrops * sizeof *d);
    c->discard--;
    return 1;
}

/* Adds places [from, to) of replies still to come to those given up:
 * only the ones not given up already are counted. RLOCK_OK, or
 * RLOCK_ENOMEM (the places before the one that found no room are given
 * up: the caller fails the connection). */
static int drop_add(rlock__conn *c, uint64_t from, uint64_t to)
{
    size_t i, k;

    while (from < to) {
        uint64_t end;

        /* From the first range each pass: a piece that joined two ranges
         * moved the one that held from's next place. (A handful.) */
        i = 0;
        while (i < c->ndrops && c->drops[i].to <= from)
            i++;
        if (i < c->ndrops && c->drops[i].from <= from) {
            from = c->drops[i].to; /* given up already */
            continue;
        }
        end = i < c->ndrops && c->drops[i].from < to ? c->drops[i].from : to;
        /* [from, end) is new: it joins a neighbour or goes in at i. */
        if (i > 0 && c->drops[i - 1].to == from) {
            c->drops[i - 1].to = end;
        } else if (i < c->ndrops && c->drops[i].from == end) {
            c->drops[i].from = from;
        } else {
            if (c->ndrops == c->drops_cap) {
                struct drop_range *g = grow(c->drops, &c->drops_cap, sizeof *g);
                if (!g)
                    return RLOCK_ENOMEM;
                c->drops = g;
            }
            memmove(c->drops + i + 1, c->drops + i,
                    (c->ndrops - i) * sizeof *c->drops);
            c->drops[i].from = from;
            c->drops[i].to = end;
            c->ndrops++;
        }
        c->discard += (size_t)(end - from);
        /* Two ranges that now touch become one. */
        for (k = i > 0 ? i - 1 : 0; k + 1 < c->ndrops; k++)
            if (c->drops[k].to == c->drops[k + 1].from) {
                c->drops[k].to = c->drops[k + 1].to;
                memmove(c->drops + k + 1, c->drops + k + 2,
                        (c->ndrops - k - 2) * sizeof *c->drops);
                c->ndrops--;
                break;
            }
        from = end;
    }
    return RLOCK_OK;
}

/* Takes every complete reply out of the reader; checks what is left. */
static int parse(rlock__conn *c)
{
    for (;;) {
        void *reply = NULL;
        size_t left;
        uint64_t at;

        if (redisReaderGetReply(c->reader, &reply) != REDIS_OK) {
            if (c->refused[0])
                rlock__conn_fail(c, RLOCK_EPROTO, "%s", c->refused);
            else if (c->reader->err == REDIS_ERR_OOM)
                rlock__conn_fail(c, RLOCK_ENOMEM, "out of memory");
            else
                rlock__conn_fail(c, RLOCK_EPROTO, "protocol error: %s",
                                 c->reader->errstr);
            return c->err.code;
        }
        if (!reply) {
            left = c->reader->len - c->reader->pos;
            if ((int64_t)left + c->obj_bytes > lim(c)->reply_bytes) {
                rlock__conn_fail(c, RLOCK_EPROTO,
                                 "reply exceeds max_reply_bytes (%lld bytes)",
                                 (long long)lim(c)->reply_bytes);
                return c->err.code;
            }
            return RLOCK_OK;
        }
        c->obj_bytes = 0;
        if (c->expected == 0 && !c->push) {
            freeReplyObject(reply);
            rlock__conn_fail(c, RLOCK_EPROTO,
                             "the server sent a reply nobody asked for");
            return c->err.code;
        }
        at = UINT64_MAX;
        if (c->expected > 0) {
            c->expected--;
            if (c->roomy > 0)
                c->roomy--;
            if (c->expected == 0)
                c->answered_ns = rlock__net_now_ns();
            at = c->completed++;
        }
        if (dropped(c, at)) {
            freeReplyObject(reply);
            continue;
        }
        if (push_ready(c, reply, at) != RLOCK_OK) {
            freeReplyObject(reply);
            rlock__conn_fail(c, RLOCK_ENOMEM, "out of memory");
            return c->err.code;
        }
    }
}

static short want_of(ssize_t n)
{
    return n == RLOCK__IO_WANT_READ ? POLLIN : POLLOUT;
}

/* What one read gave (n bytes in buf, or an RLOCK__IO_* value with e):
 * fed to the reader, complete replies taken out. 1 if reading on may give
 * more, 0 if not (nothing there, nothing more wanted, or broken). */
static int took(rlock__conn *c, ssize_t n, const char *buf,
                const rlock__neterr *e)
{
    if (n == RLOCK__IO_ERROR) {
        rlock__conn_fail(c, e->code, "%s", e->msg);
        return 0;
    }
    if (n == 0) {
        rlock__conn_fail(c, RLOCK_EIO, "the server closed the connection");
        return 0;
    }
    if (n < 0) {
        if (n == RLOCK__IO_WANT_WRITE)
            c->t_wants |= POLLOUT;
        return 0;
    }
    if (redisReaderFeed(c->reader, buf, (size_t)n) != REDIS_OK) {
        rlock__conn_fail(c, RLOCK_ENOMEM, "out of memory");
        return 0;
    }
    if (parse(c) != RLOCK_OK)
        return 0;
    return c->expected > 0 || c->push;
}

/* Advances c's lookup; once it is done, connects to what it found (the
 * connect under way: the next steps see it through), the socket taking
 * the lookup's descriptor's number, so that whoever watches the
 * connection by its number (an event loop's slots) finds the same one.
 * 1 if resolved, 0 if not yet or if that broke the connection. */
static int resolved(rlock__conn *c)
{
    rlock__addrs a;
    int rc, fd = -1, in_progress = 0;

    rc = rlock__resolve_step(c->resolving, &a, &c->err);
    if (rc == 0)
        return 0;
    if (rc == 1) {
        c->err.code = 0;
        rc = connect_addrs(&a, c->port, c->keepalive, c->where, 0, &fd,
                           &in_progress, &c->err);
    }
    if (rc < 0)
        return 0; /* broken: c->err says why */
    c->err.code = 0;
    c->err.msg[0] = '\0';
    /* The lookup's descriptor goes: a loop that watches the number stops
     * first (its registration is of the old file), as before a close. */
    if (c->on_renumber)
        c->on_renumber(c->on_renumber_arg, c);
    rlock__resolve_free(c->resolving, 1);
    c->resolving = NULL;
    if (dup3(fd, c->fd, O_CLOEXEC) < 0) {
        rlock__conn_fail(c, RLOCK_ECONNECT, "connecting to %s: dup3: %s",
                         c->where, strerror(errno));
        close(fd);
        return 0;
    }
    close(fd);
    c->connecting = in_progress;
    return 1;
}

/* Connects, shakes hands and writes what it can without waiting; reads
 * too if asked. */
static int step(rlock__conn *c, int read)
{
    rlock__neterr e = {0, ""};
    char buf[READ_CHUNK];
    int round;

    if (c->err.code != 0)
        return c->err.code;
    if (c->resolving && !resolved(c))
        return c->err.code;
    if (c->connecting) {
        struct pollfd p = {c->fd, POLLOUT, 0};
        int soerr = 0;
        socklen_t sl = sizeof soerr;

        if (poll(&p, 1, 0) <= 0)
            return RLOCK_OK; /* still under way */
        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0)
            soerr = errno;
        if (soerr != 0) {
            rlock__conn_fail(c, RLOCK_ECONNECT, "connect: %s", strerror(soerr));
            return c->err.code;
        }
        c->connecting = 0;
    }
    if (c->handshaking) {
        int h = c->t->handshake(c, &e);
        if (h == RLOCK__IO_ERROR) {
            rlock__conn_fail(c, e.code, "%s", e.msg);
            return c->err.code;
        }
        if (h != 0) {
            c->t_wants = want_of(h);
            return RLOCK_OK;
        }
        c->handshaking = 0;
        c->t_wants = 0;
    }
    c->t_wants = 0;
    while (c->out_off < c->out_len) {
        ssize_t n =
            c->t->write(c, c->out + c->out_off, c->out_len - c->out_off, &e);
        if (n == RLOCK__IO_ERROR) {
            rlock__conn_fail(c, e.code, "%s", e.msg);
            return c->err.code;
        }
        if (n < 0) {
            if (n == RLOCK__IO_WANT_READ)
                c->t_wants = POLLIN;
            break;
        }
        c->out_off += (size_t)n;
        c->out_done += (uint64_t)n;
        c->sent = 1;
    }
    out_drained(c);
    if (!read || (c->expected == 0 && !c->push)) {
        /* Nothing asked for: anything that arrives is an error, found by
         * rlock__conn_idle_ok or the next exchange. */
        return RLOCK_OK;
    }
    for (round = 0; round < READ_ROUNDS; round++) {
        ssize_t n = c->t->read(c, buf, sizeof buf, &e);
        if (!took(c, n, buf, &e))
            break;
    }
    return c->err.code;
}

int rlock__conn_io(rlock__conn *c, short revents)
{
    (void)revents; /* each step finds out for itself what it can do */
    return step(c, 1);
}

int rlock__conn_flush(rlock__conn *c)
{
    return step(c, 0);
}

void rlock__conn_on_close(rlock__conn *c, void (*fn)(void *arg, rlock__conn *c),
                          void *arg)
{
    c->on_close = fn;
    c->on_close_arg = arg;
}

void rlock__conn_on_renumber(rlock__conn *c,
                             void (*fn)(void *arg, rlock__conn *c), void *arg)
{
    c->on_renumber = fn;
    c->on_renumber_arg = arg;
}

/* The blocking driver's wait on one connection that has written all it
 * had and waits only for replies: sleeps in the transport's read_wait.
 * 1 if that read something (or broke the connection), 0 if it did not
 * wait or gave up early: then poll waits. */
static int wait_one(rlock__conn *c, int64_t deadline_ns)
{
    rlock__neterr e = {0, ""};
    char buf[READ_CHUNK];
    ssize_t n;

    if (!c->t->read_wait || c->t_wants || c->out_off < c->out_len ||
        c->connecting || c->handshaking || c->resolving)
        return 0;
    n = c->t->read_wait(c, buf, sizeof buf, deadline_ns, &e);
    if (n == RLOCK__IO_WANT_READ)
        return 0;
    took(c, n, buf, &e);
    return 1;
}

int rlock__conn_take(rlock__conn *c, redisReply **out)
{
    if (c->nready == 0)
        return 0;
    *out = c->ready[c->head++].r;
    if (--c->nready == 0)
        c->head = 0;
    return 1;
}

void rlock__conn_discard(rlock__conn *c, size_t n)
{
    uint64_t from = c->completed;
    size_t i;

    while (n > 0 && c->nready > 0) {
        redisReply *r = NULL;
        rlock__conn_take(c, &r);
        freeReplyObject(r);
        n--;
    }
    /* The n oldest of those still to come that are not given up yet. */
    while (n > 0 && from < c->asked) {
        uint64_t end = c->asked;
        for (i = 0; i < c->ndrops; i++) {
            if (c->drops[i].from <= from && from < c->drops[i].to)
                from = c->drops[i].to;
            else if (c->drops[i].from > from && c->drops[i].from < end)
                end = c->drops[i].from;
        }
        if (from >= end)
            continue; /* (moved past a range: look again) */
        if (end - from > n)
            end = from + n;
        if (drop_add(c, from, end) != RLOCK_OK) {
            rlock__conn_fail(c, RLOCK_ENOMEM, "out of memory");
            return;
        }
        n -= (size_t)(end - from);
        from = end;
    }
}

void rlock__conn_mark(const rlock__conn *c, rlock__conn_mark_t *m)
{
    m->reply = c->asked;
    m->byte = c->out_total;
}

int rlock__conn_sent_from(const rlock__conn *c, const rlock__conn_mark_t *m)
{
    return c->out_done > m->byte;
}

/* Where the first ready reply at or after m is (nready: none). */
static size_t ready_from(const rlock__conn *c, const rlock__conn_mark_t *m)
{
    size_t i;

    for (i = 0; i < c->nready && c->ready[c->head + i].at < m->reply; i++)
        ;
    return i;
}

int rlock__conn_complete_at(const rlock__conn *c, const rlock__conn_mark_t *m,
                            size_t want)
{
    size_t i;

    if (!c || want == 0)
        return 1;
    /* (Ready replies are in the order asked, each place once.) */
    i = ready_from(c, m);
    return c->nready - i >= want && c->ready[c->head + i].at == m->reply &&
           c->ready[c->head + i + want - 1].at == m->reply + want - 1;
}

int rlock__conn_settled_at(const rlock__conn *c, const rlock__conn_mark_t *m,
                           size_t want)
{
    return !c || c->err.code != 0 ||
           (!c->handshaking && !c->connecting && !c->resolving &&
            rlock__conn_complete_at(c, m, want));
}

int rlock__conn_take_at(rlock__conn *c, const rlock__conn_mark_t *m,
                        redisReply **out)
{
    size_t i = ready_from(c, m);

    if (i == c->nready)
        return 0;
    *out = c->ready[c->head + i].r;
    memmove(c->ready + c->head + i, c->ready + c->head + i + 1,
            (c->nready - i - 1) * sizeof *c->ready);
    if (--c->nready == 0)
        c->head = 0;
    return 1;
}

void rlock__conn_drop(rlock__conn *c, const rlock__conn_mark_t *m, size_t n)
{
    uint64_t from = m->reply, to = m->reply + n;
    size_t i, k = 0;

    /* Those complete already leave the ready ones (wherever they are: a
     * reply before them may not be taken yet). */
    for (i = 0; i < c->nready; i++) {
        struct ready_reply *r = &c->ready[c->head + i];
        if (r->at >= from && r->at < to)
            freeReplyObject(r->r);
        else
            c->ready[c->head + k++] = *r;
    }
    c->nready = k;
    if (k == 0)
        c->head = 0;
    if (from < c->completed)
        from = c->completed;
    if (from < to && drop_add(c, from, to) != RLOCK_OK)
        rlock__conn_fail(c, RLOCK_ENOMEM, "out of memory");
}

int rlock__conn_idle_ok(rlock__conn *c, int64_t suspect_before)
{
    struct pollfd p;

    if (c->err.code != 0 || c->expected > 0 || c->nready > 0 ||
        c->out_off < c->out_len || c->handshaking || c->connecting ||
        c->resolving || c->reader->pos < c->reader->len || c->obj_bytes > 0 ||
        c->t->buffered(c))
        return 0;
    /* In steady use (answered a moment ago), reused without the look:
     * a request is then two system calls, a write and a read. The look
     * never made reuse safe, only spared a call an error: the server may
     * close the connection between the look and the write just as well,
     * and a request written on a connection that then gives no reply is
     * one the server may have carried out, whichever way the connection
     * died (node.c treats it so). What the look spares is the error for a
     * connection that died while it sat idle: a server restarted, an idle
     * timeout, a CLIENT KILL. Those find connections idle for longer; and
     * once one connection of the server was found dead, the others that
     * answered before that are looked at too, so that a kill costs one
     * request an error, not one per pooled connection. */
    if (c->answered_ns > suspect_before &&
        rlock__net_now_ns() - c->answered_ns < RLOCK__CONN_STEADY_NS)
        return 1;
    p.fd = c->fd;
    p.events = POLLIN;
    p.revents = 0;
    /* A healthy idle RESP2 connection has nothing to read: EOF, a reset
     * or stray bytes all mean it must not be reused. (TLS may hold a
     * session ticket the server sent after the handshake; that too is
     * read as "something arrived", and the connection is replaced, which
     * costs a handshake but never a wrong reply.) */
    return poll(&p, 1, 0) == 0;
}

/* ---- the blocking driver ------------------------------------------------ */

#define RUN_MAX 64

int rlock__conn_settled(const rlock__conn *c, size_t want)
{
    return !c || c->err.code != 0 ||
           (!c->handshaking && !c->connecting && !c->resolving &&
            c->nready >= want);
}

int rlock__conn_buffered(const rlock__conn *c)
{
    return c->t->buffered(c);
}

int rlock__net_run(rlock__conn **conns, int n, const size_t *want,
                   int64_t deadline_ns)
{
    struct pollfd fds[RUN_MAX];
    int map[RUN_MAX];
    int i;

    if (n > RUN_MAX)
        return RLOCK_EINVAL;
    /* Write at once what can be written: most exchanges then need one
     * wait, for the reply (reading before it would only find nothing). */
    for (i = 0; i < n; i++)
        if (conns[i] && conns[i]->err.code == 0)
            step(conns[i], 0);
    for (;;) {
        int nfds = 0, ms, r, buffered = 0;

        for (i = 0; i < n; i++) {
            rlock__conn *c = conns[i];
            short ev;

            if (rlock__conn_settled(c, want[i]))
                continue;
            ev = rlock__conn_events(c);
            if (ev == 0) {
                /* Waiting for replies nobody asked for cannot end. */
                rlock__conn_fail(c, RLOCK_EINVAL,
                                 "waiting for a reply to no command");
                continue;
            }
            if ((ev & POLLIN) && c->t->buffered(c))
                buffered = 1;
            fds[nfds].fd = c->fd;
            fds[nfds].events = ev;
            fds[nfds].revents = 0;
            map[nfds++] = i;
        }
        if (nfds == 0)
            return RLOCK_OK;
        if (ms_until(deadline_ns) == 0)
            return RLOCK_ENOREPLY;
        if (nfds == 1 && !buffered && wait_one(conns[map[0]], deadline_ns))
            continue;
        /* Counted after wait_one, which may have slept most of it. */
        if ((ms = ms_until(deadline_ns)) == 0)
            return RLOCK_ENOREPLY;
        /* Data a TLS layer holds already is served without waiting. */
        r = poll(fds, (nfds_t)nfds, buffered ? 0 : ms);
        if (r < 0 && errno != EINTR)
            return RLOCK_EIO;
        for (i = 0; i < nfds; i++)
            if (fds[i].revents ||
                (buffered && conns[map[i]]->t->buffered(conns[map[i]])))
                rlock__conn_io(conns[map[i]], fds[i].revents);
    }
}
