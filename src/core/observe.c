/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Events, log lines and counters of a client (observe.h says who reports
 * and who delivers).
 *
 * Why an outbox per thread rather than a call to the callback where a
 * thing happens: where it happens the library usually holds the client's
 * lock (a loss is found under it) or is in the middle of a request, and a
 * callback that calls the library back would deadlock, or would hold up
 * every other thread of the client. The outbox is emptied where the
 * thread holds nothing: at the end of the public call, by the thread that
 * made it, so that the events of a call are delivered before it returns
 * and in the order they happened; or, for the background thread, by a
 * notifier thread.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/observe.h"
#include "util/clock.h"

struct rlock__note {
    struct rlock__note *next;
    rlock__obs *o;
    int level;      /* a log line of that level; 0: an event */
    rlock_event ev; /* its strings point into text */
    char text[];
};

/* The calling thread's outbox, and the delivery it is in, if any. */
static _Thread_local struct {
    struct rlock__note *head, *last;
    int delivering;    /* a callback runs, or the outbox is being emptied */
    rlock__obs *in_cb; /* the observer whose callback runs on the thread */
} tl;

const int64_t rlock__obs_bounds_us[RLOCK_STATS_BUCKETS - 1] =
    RLOCK_STATS_BOUNDS_US;

static const struct {
    const char *name;
    int level;
} types[RLOCK__EV_MAX + 1] = {
    [RLOCK_EV_ACQUIRED] = {"acquired", RLOCK_LOG_DEBUG},
    [RLOCK_EV_RELEASED] = {"released", RLOCK_LOG_DEBUG},
    [RLOCK_EV_RENEWED] = {"renewed", RLOCK_LOG_DEBUG},
    [RLOCK_EV_LOST] = {"lost", RLOCK_LOG_WARN},
    [RLOCK_EV_WAITING] = {"waiting", RLOCK_LOG_DEBUG},
    [RLOCK_EV_WAIT_TIMEOUT] = {"wait-timeout", RLOCK_LOG_DEBUG},
    [RLOCK_EV_EXTENDED] = {"extended", RLOCK_LOG_DEBUG},
    [RLOCK_EV_UNDO] = {"undo", RLOCK_LOG_INFO},
    [RLOCK_EV_CONN_ERROR] = {"connection-error", RLOCK_LOG_WARN},
    [RLOCK_EV_RECONNECT] = {"reconnect", RLOCK_LOG_INFO},
    [RLOCK_EV_FAILOVER] = {"failover", RLOCK_LOG_WARN},
    [RLOCK_EV_REDIRECT] = {"redirect", RLOCK_LOG_INFO},
};

int rlock__obs_level(int t)
{
    return t > 0 && t <= RLOCK__EV_MAX ? types[t].level : RLOCK_LOG_DEBUG;
}

const char *rlock__obs_type_name(int t)
{
    return t > 0 && t <= RLOCK__EV_MAX ? types[t].name : "event";
}

static void init_sync(rlock__obs *o)
{
    pthread_mutex_init(&o->mu, NULL);
    rlock__cond_init(&o->cv);
}

rlock__obs *rlock__obs_new(void)
{
    rlock__obs *o = calloc(1, sizeof *o);

    if (o) {
        init_sync(o);
        o->refs = 1;
    }
    return o;
}

static void unref(rlock__obs *o)
{
    if (__atomic_sub_fetch(&o->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    pthread_mutex_destroy(&o->mu);
    pthread_cond_destroy(&o->cv);
    free(o);
}

static struct rlock__note *new_note(rlock__obs *o, size_t extra)
{
    struct rlock__note *n = malloc(sizeof *n + extra);

    if (n) {
        n->o = o;
        __atomic_add_fetch(&o->refs, 1, __ATOMIC_RELAXED);
    }
    return n;
}

static void free_note(struct rlock__note *n)
{
    rlock__obs *o = n->o;

    free(n);
    unref(o);
}

static void free_queue(rlock__obs *o)
{
    while (o->head) {
        struct rlock__note *n = o->head;
        o->head = n->next;
        free_note(n);
    }
    o->last = NULL;
}

void rlock__obs_free(rlock__obs *o)
{
    if (!o)
        return;
    /* A note of this client may still wait in another thread's outbox
     * (reported while that thread delivered another client's callback):
     * it will find no callback, and free the observer if it is the
     * last. */
    pthread_mutex_lock(&o->mu);
    o->event_cb = NULL;
    o->log_cb = NULL;
    o->closing = 1;
    __atomic_store_n(&o->want, 0u, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&o->mu);
    free_queue(o);
    unref(o);
}

void rlock__obs_fork_hold(rlock__obs *o, int take)
{
    if (take)
        pthread_mutex_lock(&o->mu);
    else
        pthread_mutex_unlock(&o->mu);
}

void rlock__obs_after_fork(rlock__obs *o)
{
    /* The parent's threads may have been in a callback, or waited on cv
     * (a setter waiting for them): the child has only the forking
     * thread. mu was held by fork() and given back in the child (no other
     * thread had it then); cv is made anew, as it may still count the
     * parent's waiters. The queue is the parent's, whole (fork() held mu):
     * its notes name the parent's holds, and are dropped. */
    struct rlock__note *n;

    rlock__cond_init(&o->cv);
    free_queue(o);
    /* The notes in the parent's other threads' outboxes are not in the
     * child: the references are the client's and this thread's notes. */
    o->refs = 1;
    for (n = tl.head; n; n = n->next)
        o->refs += n->o == o;
    o->busy = o->posted = o->draining = o->closing = 0;
    memset(o->n, 0, sizeof o->n);
    memset(o->fail_code, 0, sizeof o->fail_code);
    memset(o->lost_cause, 0, sizeof o->lost_cause);
    memset(&o->wait, 0, sizeof o->wait);
    memset(&o->hold, 0, sizeof o->hold);
}

/* ---- reporting ----------------------------------------------------------- */

static void append(struct rlock__note *n)
{
    n->next = NULL;
    if (tl.last)
        tl.last->next = n;
    else
        tl.head = n;
    tl.last = n;
}

/* Copies s (len bytes, NUL added) to *at and moves it on. */
static const char *put(char **at, const char *s, size_t len)
{
    char *p = *at;

    if (len)
        memcpy(p, s, len);
    p[len] = '\0';
    *at = p + len + 1;
    return p;
}

void rlock__obs_event(rlock__obs *o, const rlock_event *ev)
{
    const char *owner = ev->owner ? ev->owner : "";
    const char *node = ev->node ? ev->node : "";
    const char *detail = ev->detail ? ev->detail : "";
    size_t lo = strlen(owner), ln = strlen(node), ld = strlen(detail);
    size_t lname = ev->name ? ev->name_len : 0;
    struct rlock__note *n = new_note(o, lname + 1 + lo + 1 + ln + 1 + ld + 1);
    char *at;

    if (!n)
        return; /* out of memory: the event is missed, nothing else */
    n->level = 0;
    n->ev = *ev;
    n->ev.size = sizeof n->ev;
    if (!n->ev.time_ns)
        n->ev.time_ns = rlock__now_ns();
    at = n->text;
    n->ev.name = ev->name ? put(&at, ev->name, lname) : NULL;
    n->ev.name_len = lname;
    n->ev.owner = put(&at, owner, lo);
    n->ev.node = put(&at, node, ln);
    n->ev.detail = put(&at, detail, ld);
    append(n);
}

void rlock__obs_log(rlock__obs *o, int level, const char *fmt, ...)
{
    struct rlock__note *n;
    va_list ap;
    int len;

    if (!rlock__obs_log_on(o, level))
        return;
    va_start(ap, fmt);
    len = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (len < 0 || !(n = new_note(o, (size_t)len + 1)))
        return;
    memset(&n->ev, 0, sizeof n->ev);
    n->level = level;
    va_start(ap, fmt);
    vsnprintf(n->text, (size_t)len + 1, fmt, ap);
    va_end(ap);
    append(n);
}

void rlock__obs_node(rlock__obs *o, int type, int code, const char *node,
                     const char *detail)
{
    static const int counter[RLOCK__EV_MAX + 1] = {
        [RLOCK_EV_CONN_ERROR] = RLOCK__ST_CONN_ERRORS,
        [RLOCK_EV_RECONNECT] = RLOCK__ST_RECONNECTS,
        [RLOCK_EV_FAILOVER] = RLOCK__ST_FAILOVERS,
        [RLOCK_EV_REDIRECT] = RLOCK__ST_REDIRECTS,
    };
    rlock_event ev;

    rlock__obs_count(o, counter[type]);
    if (!rlock__obs_on(o, type))
        return;
    memset(&ev, 0, sizeof ev);
    ev.type = type;
    ev.code = code;
    ev.node = node;
    ev.detail = detail;
    rlock__obs_event(o, &ev);
}

/* ---- delivery ------------------------------------------------------------ */

/* Text for a log line: control bytes, a backslash and bytes that are not
 * UTF-8 escaped (and a double quote, for a name between quotes), cut to
 * fit. */
static size_t escape(char *out, size_t len, const char *s, size_t n, int quoted)
{
    size_t i = 0, k = 0;

    while (i < n && k + 5 < len) {
        unsigned char b = (unsigned char)s[i];
        size_t seq = 0;

        if (b >= 0x20 && b < 0x7f && b != '\\' && (b != '"' || !quoted)) {
            out[k++] = (char)b;
            i++;
            continue;
        }
        if (b >= 0xc2 && b <= 0xf4) {
            /* A valid UTF-8 sequence stays as it is. */
            size_t want = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : 2, j;
            for (j = 1; j < want && i + j < n &&
                        ((unsigned char)s[i + j] & 0xc0) == 0x80;
                 j++)
                ;
            if (j == want && !(b == 0xe0 && (unsigned char)s[i + 1] < 0xa0) &&
                !(b == 0xed && (unsigned char)s[i + 1] > 0x9f) &&
                !(b == 0xf0 && (unsigned char)s[i + 1] < 0x90) &&
                !(b == 0xf4 && (unsigned char)s[i + 1] > 0x8f))
                seq = want;
        }
        if (seq && k + seq < len) {
            memcpy(out + k, s + i, seq);
            k += seq;
            i += seq;
        } else if (b == '\\' || b == '"') {
            out[k++] = '\\';
            out[k++] = (char)b;
            i++;
        } else {
            k += (size_t)snprintf(out + k, len - k, "\\x%02x", b);
            i++;
        }
    }
    if (i < n && k + 4 <= len)
        k += (size_t)snprintf(out + k, len - k, "...");
    out[k] = '\0';
    return k;
}

/* An event as one log line. */
static void event_line(const rlock_event *ev, char *buf, size_t len)
{
    size_t k = (size_t)snprintf(buf, len, "%s", rlock__obs_type_name(ev->type));

    if (ev->name && k + 3 < len) {
        k += (size_t)snprintf(buf + k, len - k, " \"");
        k += escape(buf + k, len - k - 1, ev->name, ev->name_len, 1);
        k += (size_t)snprintf(buf + k, len - k, "\"");
    }
#define FIELD(cond, ...)                                                       \
    if ((cond) && k < len)                                                     \
    k += (size_t)snprintf(buf + k, len - k, __VA_ARGS__)
    FIELD(ev->node && ev->node[0], " node=%s", ev->node);
    FIELD(ev->type == RLOCK_EV_ACQUIRED, " token=%llu count=%lld",
          (unsigned long long)ev->token, (long long)ev->count);
    FIELD(ev->type == RLOCK_EV_RELEASED, " count=%lld", (long long)ev->count);
    FIELD(ev->lease_ms, " lease_ms=%lld", (long long)ev->lease_ms);
    FIELD(ev->type == RLOCK_EV_ACQUIRED || ev->type == RLOCK_EV_WAIT_TIMEOUT,
          " wait_ms=%.3f attempts=%lld", (double)ev->wait_us / 1000.0,
          (long long)ev->attempts);
    FIELD(ev->hold_us, " hold_ms=%.3f", (double)ev->hold_us / 1000.0);
    FIELD(ev->flags & RLOCK_EVF_HANDED_OVER, " handed-over");
    FIELD(ev->cause == RLOCK_LOST_EXPIRED, " cause=expired");
    FIELD(ev->cause == RLOCK_LOST_GONE, " cause=gone");
    FIELD(ev->cause == RLOCK_LOST_CAPPED, " cause=capped");
    FIELD(ev->code, " code=%d (%s)", ev->code, rlock_strerror(ev->code));
    FIELD(ev->detail && ev->detail[0], ": %s", ev->detail);
#undef FIELD
}

/* Calls the callbacks for n, with nothing of the library locked. */
static void deliver(struct rlock__note *n)
{
    rlock__obs *o = n->o;
    void (*ecb)(const rlock_event *, void *);
    void (*lcb)(int, const char *, void *);
    void *earg, *larg;
    int level, lmin;
    rlock__obs *outer = tl.in_cb;

    pthread_mutex_lock(&o->mu);
    ecb = o->event_cb;
    earg = o->event_arg;
    lcb = o->log_cb;
    larg = o->log_arg;
    lmin = o->log_min;
    if (ecb || lcb)
        o->busy++;
    pthread_mutex_unlock(&o->mu);
    if (!ecb && !lcb)
        return;
    tl.in_cb = o;
    level = n->level ? n->level : rlock__obs_level(n->ev.type);
    if (!n->level && ecb)
        ecb(&n->ev, earg);
    if (lcb && level >= lmin) {
        char line[RLOCK_NAME_MAX * 2 + 1024];
        if (!n->level)
            event_line(&n->ev, line, sizeof line);
        else
            escape(line, sizeof line, n->text, strlen(n->text), 0);
        lcb(level, line, larg);
    }
    tl.in_cb = outer;
    pthread_mutex_lock(&o->mu);
    o->busy--;
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->mu);
}

/* Delivers and frees what the outbox holds, oldest first; what the
 * callbacks cause is appended and delivered in turn. */
static void empty_outbox(void)
{
    struct rlock__note *n;

    while ((n = tl.head) != NULL) {
        if (!(tl.head = n->next))
            tl.last = NULL;
        deliver(n);
        free_note(n);
    }
}

void rlock__obs_flush(void)
{
    if (!tl.head || tl.delivering)
        return;
    tl.delivering = 1;
    empty_outbox();
    tl.delivering = 0;
}

int rlock__obs_handoff(rlock__obs *o)
{
    int post = 0;

    if (!tl.head)
        return 0;
    pthread_mutex_lock(&o->mu);
    if (o->last)
        o->last->next = tl.head;
    else
        o->head = tl.head;
    o->last = tl.last;
    tl.head = tl.last = NULL;
    if (!o->posted && !o->draining && !o->closing)
        post = o->posted = 1;
    pthread_mutex_unlock(&o->mu);
    return post;
}

void rlock__obs_drain(rlock__obs *o)
{
    int was = tl.delivering;

    tl.delivering = 1;
    pthread_mutex_lock(&o->mu);
    o->posted = 0;
    o->draining = 1;
    while (o->head && !o->closing) {
        struct rlock__note *n = o->head;
        if (!(o->head = n->next))
            o->last = NULL;
        pthread_mutex_unlock(&o->mu);
        deliver(n);
        free_note(n);
        /* What the callback caused through the library, after it. */
        empty_outbox();
        pthread_mutex_lock(&o->mu);
    }
    o->draining = 0;
    pthread_mutex_unlock(&o->mu);
    tl.delivering = was;
}

void rlock__obs_drop(rlock__obs *o)
{
    struct rlock__note **p = &tl.head, *n;

    tl.last = NULL;
    while ((n = *p) != NULL) {
        if (n->o == o) {
            *p = n->next;
            free_note(n);
        } else {
            tl.last = n;
            p = &n->next;
        }
    }
}

void rlock__obs_close(rlock__obs *o)
{
    pthread_mutex_lock(&o->mu);
    o->closing = 1;
    pthread_mutex_unlock(&o->mu);
}

/* ---- setting the callbacks ----------------------------------------------- */

/* What the callbacks want, as o->want (mu held). */
static void update_want(rlock__obs *o)
{
    unsigned w = 0;
    int t, l;

    for (t = 1; t <= RLOCK__EV_MAX; t++)
        if (o->event_cb || (o->log_cb && types[t].level >= o->log_min))
            w |= 1u << t;
    for (l = RLOCK_LOG_DEBUG; l <= RLOCK_LOG_ERROR; l++)
        if (o->log_cb && l >= o->log_min)
            w |= RLOCK__WANT_LOG(l);
    __atomic_store_n(&o->want, w, __ATOMIC_RELAXED);
}

/* Waits until no callback of o runs on another thread (mu held). Not
 * from inside a callback, of any client: two callbacks that each set a
 * callback would wait for each other for ever (two threads in callbacks
 * of one client, or of two clients, each setting the other's). */
static void quiesce(rlock__obs *o)
{
    if (tl.in_cb)
        return;
    while (o->busy > 0)
        pthread_cond_wait(&o->cv, &o->mu);
}

void rlock__obs_set_event(rlock__obs *o,
                          void (*cb)(const rlock_event *ev, void *arg),
                          void *arg)
{
    pthread_mutex_lock(&o->mu);
    o->event_cb = cb;
    o->event_arg = cb ? arg : NULL;
    update_want(o);
    quiesce(o);
    pthread_mutex_unlock(&o->mu);
}

void rlock__obs_set_log(rlock__obs *o, int min_level,
                        void (*cb)(int level, const char *msg, void *arg),
                        void *arg)
{
    pthread_mutex_lock(&o->mu);
    o->log_cb = cb;
    o->log_arg = cb ? arg : NULL;
    o->log_min = cb ? min_level : 0;
    update_want(o);
    quiesce(o);
    pthread_mutex_unlock(&o->mu);
}

/* ---- counters ------------------------------------------------------------ */

void rlock__obs_time(rlock__hist *h, int64_t us)
{
    int i = 0;

    if (us < 0)
        us = 0;
    while (i < RLOCK_STATS_BUCKETS - 1 && us > rlock__obs_bounds_us[i])
        i++;
    __atomic_fetch_add(&h->bucket[i], 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&h->sum_us, (uint64_t)us, __ATOMIC_RELAXED);
    __atomic_fetch_add(&h->count, 1, __ATOMIC_RELAXED);
}

void rlock__obs_failed(rlock__obs *o, int code)
{
    rlock__obs_count(o, RLOCK__ST_FAILURES);
    if (code < 0 && -code < RLOCK_STATS_CODES)
        __atomic_fetch_add(&o->fail_code[-code], 1, __ATOMIC_RELAXED);
}

void rlock__obs_lost(rlock__obs *o, int cause)
{
    rlock__obs_count(o, RLOCK__ST_LOSSES);
    if (cause > 0 && cause < 4)
        __atomic_fetch_add(&o->lost_cause[cause], 1, __ATOMIC_RELAXED);
}

static uint64_t get(const uint64_t *p)
{
    return __atomic_load_n(p, __ATOMIC_RELAXED);
}

static void hist_copy(const rlock__hist *h, rlock_histogram *out)
{
    int i;

    /* The buckets first: a count read last is never short of them. */
    for (i = 0; i < RLOCK_STATS_BUCKETS; i++)
        out->bucket[i] = get(&h->bucket[i]);
    out->sum_us = get(&h->sum_us);
    out->count = get(&h->count);
}

void rlock__obs_stats(rlock__obs *o, int64_t held, rlock_stats *st, size_t len)
{
    rlock_stats s;
    int i;

    memset(&s, 0, sizeof s);
    s.acquisitions = get(&o->n[RLOCK__ST_ACQUISITIONS]);
    s.reentries = get(&o->n[RLOCK__ST_REENTRIES]);
    s.contended = get(&o->n[RLOCK__ST_CONTENDED]);
    s.releases = get(&o->n[RLOCK__ST_RELEASES]);
    s.failures = get(&o->n[RLOCK__ST_FAILURES]);
    for (i = 0; i < RLOCK_STATS_CODES; i++)
        s.failures_by_code[i] = get(&o->fail_code[i]);
    s.wait_timeouts = get(&o->n[RLOCK__ST_WAIT_TIMEOUTS]);
    s.losses = get(&o->n[RLOCK__ST_LOSSES]);
    for (i = 0; i < 4; i++)
        s.losses_by_cause[i] = get(&o->lost_cause[i]);
    s.renewals = get(&o->n[RLOCK__ST_RENEWALS]);
    s.renewal_failures = get(&o->n[RLOCK__ST_RENEWAL_FAILURES]);
    s.extensions = get(&o->n[RLOCK__ST_EXTENSIONS]);
    s.undos = get(&o->n[RLOCK__ST_UNDOS]);
    s.conn_errors = get(&o->n[RLOCK__ST_CONN_ERRORS]);
    s.reconnects = get(&o->n[RLOCK__ST_RECONNECTS]);
    s.failovers = get(&o->n[RLOCK__ST_FAILOVERS]);
    s.redirects = get(&o->n[RLOCK__ST_REDIRECTS]);
    s.held = held;
    hist_copy(&o->wait, &s.wait);
    hist_copy(&o->hold, &s.hold);
    /* (size is the caller's to set.) */
    s.size = st->size;
    memcpy(st, &s, len < sizeof s ? len : sizeof s);
}
