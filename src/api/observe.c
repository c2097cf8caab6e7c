/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The client's public functions for watching it: the event and log
 * callbacks, the counters, and the counters as Prometheus text.
 * core/observe.c keeps and delivers them; this file checks the arguments
 * and writes the text.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "api/api.h"
#include "core/observe.h"

/* The size of the first version's rlock_stats: no caller's struct is
 * smaller. When fields are added, this becomes offsetof(rlock_stats,
 * the first of them). */
#define STATS_FIRST_SIZE sizeof(rlock_stats)
/* A size no caller's rlock_stats will reach: larger is a size that was
 * never set. */
#define STATS_MAX_SIZE 65536

/* Starts a call on c that sends nothing: RLOCK_OK, or c is NULL
 * (recorded). */
static int enter(rlock__call *call, rlock_client *c)
{
    rlock__call_init(call, 0);
    if (!c)
        return rlock__api_done(
            call, NULL, NULL,
            rlock__fail(call, RLOCK_EINVAL, "client is NULL"));
    rlock__api_enter(c);
    return RLOCK_OK;
}

int rlock_client_set_event_cb(rlock_client *c,
                              void (*cb)(const rlock_event *ev, void *arg),
                              void *arg)
{
    rlock__call call = {0};
    int rc;

    if ((rc = enter(&call, c)) != RLOCK_OK)
        return rc;
    rlock__obs_set_event(c->obs, cb, arg);
    return rlock__api_done(&call, c, NULL, RLOCK_OK);
}

int rlock_client_set_log_cb(rlock_client *c, int min_level,
                            void (*cb)(int level, const char *msg, void *arg),
                            void *arg)
{
    rlock__call call = {0};
    int rc;

    if ((rc = enter(&call, c)) != RLOCK_OK)
        return rc;
    if (cb && (min_level < RLOCK_LOG_DEBUG || min_level > RLOCK_LOG_ERROR))
        return rlock__api_done(
            &call, c, NULL,
            rlock__fail(&call, RLOCK_EINVAL,
                        "min_level must be RLOCK_LOG_DEBUG (%d) to "
                        "RLOCK_LOG_ERROR (%d), got %d",
                        RLOCK_LOG_DEBUG, RLOCK_LOG_ERROR, min_level));
    rlock__obs_set_log(c->obs, min_level, cb, arg);
    return rlock__api_done(&call, c, NULL, RLOCK_OK);
}

/* The holds c has now. */
static int64_t holds_now(rlock_client *c)
{
    int64_t n;

    pthread_mutex_lock(&c->mu);
    n = (int64_t)c->holds.n;
    pthread_mutex_unlock(&c->mu);
    return n;
}

int rlock_client_stats(rlock_client *c, rlock_stats *st)
{
    rlock__call call = {0};
    size_t len;

    rlock__call_init(&call, 0);
    if (!c || !st)
        return rlock__api_done(
            &call, c, NULL,
            rlock__fail(&call, RLOCK_EINVAL,
                        "client and stats must not be NULL"));
    if (st->size < STATS_FIRST_SIZE || st->size > STATS_MAX_SIZE)
        return rlock__api_done(
            &call, c, NULL,
            rlock__fail(&call, RLOCK_EINVAL,
                        "stats->size must be set to sizeof(rlock_stats) "
                        "(RLOCK_STATS_INIT), got %zu",
                        st->size));
    rlock__api_enter(c);
    /* A caller's struct from a newer header: what this library does not
     * know is zeroed, and size says where its part ends. */
    len = st->size < sizeof *st ? st->size : sizeof *st;
    if (st->size > len)
        memset((char *)st + len, 0, st->size - len);
    rlock__obs_stats(c->obs, holds_now(c), st, len);
    st->size = len;
    return rlock__api_done(&call, c, NULL, RLOCK_OK);
}

/* ---- the Prometheus text ------------------------------------------------- */

/* Text written as snprintf does: into buf while there is room, the whole
 * length counted. */
typedef struct out {
    char *buf;
    size_t len;
    size_t used; /* the whole text so far */
} out;

static void putf(out *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void putf(out *o, const char *fmt, ...)
{
    char small[512];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof small) {
        /* Longer than any line this writes but a label's: each byte of
         * what fits. */
        va_start(ap, fmt);
        if (o->used < o->len)
            vsnprintf(o->buf + o->used, o->len - o->used, fmt, ap);
        va_end(ap);
    } else if (o->used < o->len) {
        size_t room = o->len - o->used - 1;
        size_t k = (size_t)n < room ? (size_t)n : room;
        memcpy(o->buf + o->used, small, k);
        o->buf[o->used + k] = '\0';
    }
    o->used += (size_t)n;
}

/* A label value as the exposition format escapes it: backslash, double
 * quote and line feed; into esc (at least 2 * strlen(v) + 1 bytes). */
static void label_escape(const char *v, char *esc)
{
    for (; *v; v++) {
        if (*v == '\\' || *v == '"') {
            *esc++ = '\\';
            *esc++ = *v;
        } else if (*v == '\n') {
            *esc++ = '\\';
            *esc++ = 'n';
        } else {
            *esc++ = *v;
        }
    }
    *esc = '\0';
}

static void family(out *o, const char *name, const char *type, const char *help)
{
    putf(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One sample: name{labels[,extra]} value. */
static void sample(out *o, const char *name, const char *labels,
                   const char *extra, uint64_t v)
{
    putf(o, "%s{%s%s%s} %llu\n", name, labels, extra ? "," : "",
         extra ? extra : "", (unsigned long long)v);
}

static void counter(out *o, const char *name, const char *help,
                    const char *labels, uint64_t v)
{
    family(o, name, "counter", help);
    sample(o, name, labels, NULL, v);
}

/* A histogram of seconds from one of microseconds. Its count is the sum
 * of its buckets (read one at a time, while they may grow), so that the
 * +Inf bucket and _count agree, as the format requires. */
static void histogram(out *o, const char *name, const char *help,
                      const char *labels, const rlock_histogram *h)
{
    uint64_t cum = 0;
    int i;

    family(o, name, "histogram", help);
    for (i = 0; i < RLOCK_STATS_BUCKETS; i++) {
        cum += h->bucket[i];
        if (i < RLOCK_STATS_BUCKETS - 1)
            putf(o, "%s_bucket{%s,le=\"%g\"} %llu\n", name, labels,
                 (double)rlock__obs_bounds_us[i] / 1e6,
                 (unsigned long long)cum);
        else
            putf(o, "%s_bucket{%s,le=\"+Inf\"} %llu\n", name, labels,
                 (unsigned long long)cum);
    }
    putf(o, "%s_sum{%s} %.6f\n", name, labels, (double)h->sum_us / 1e6);
    putf(o, "%s_count{%s} %llu\n", name, labels, (unsigned long long)cum);
}

/* The codes an acquisition may fail with, as labels. */
static const struct {
    int code;
    const char *name;
} codes[] = {
    {RLOCK_EINVAL, "EINVAL"},
    {RLOCK_ENOMEM, "ENOMEM"},
    {RLOCK_ECONNECT, "ECONNECT"},
    {RLOCK_ETIMEDOUT, "ETIMEDOUT"},
    {RLOCK_EBUSY, "EBUSY"},
    {RLOCK_ELOST, "ELOST"},
    {RLOCK_EAUTH, "EAUTH"},
    {RLOCK_EREDIS, "EREDIS"},
    {RLOCK_EPROTO, "EPROTO"},
    {RLOCK_EIO, "EIO"},
    {RLOCK_ECANCELED, "ECANCELED"},
    {RLOCK_EREPLICAS, "EREPLICAS"},
    {RLOCK_EUNAVAILABLE, "EUNAVAILABLE"},
    {RLOCK_EQUORUM, "EQUORUM"},
    {RLOCK_ENOREPLY, "ENOREPLY"},
    {RLOCK_EPERM, "EPERM"},
    {RLOCK_ENOTLOCK, "ENOTLOCK"},
};

static void metrics(out *o, const rlock_client *c, const rlock_stats *st)
{
    static const char *const causes[4] = {NULL, "expired", "gone", "capped"};
    char server[2 * sizeof c->where + 1], prefix[2 * 64 + 1];
    char labels[sizeof server + sizeof prefix + 32], extra[64];
    size_t i;

    label_escape(c->where, server);
    label_escape(c->prefix, prefix);
    snprintf(labels, sizeof labels, "server=\"%s\",prefix=\"%s\"", server,
             prefix);
    counter(o, "rlock_acquisitions_total",
            "Locks acquired (fresh holds, not re-entries) since the client "
            "was opened.",
            labels, st->acquisitions);
    counter(o, "rlock_reentries_total", "Re-entries of a hold already had.",
            labels, st->reentries);
    counter(o, "rlock_contended_acquisitions_total",
            "Acquisitions that found the lock busy and waited.", labels,
            st->contended);
    counter(o, "rlock_releases_total", "Holds released to the end.", labels,
            st->releases);
    family(o, "rlock_acquire_failures_total", "counter",
           "Acquisition calls that failed, by error code (EBUSY and "
           "ETIMEDOUT: the lock was busy).");
    for (i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        snprintf(extra, sizeof extra, "code=\"%s\"", codes[i].name);
        sample(o, "rlock_acquire_failures_total", labels, extra,
               st->failures_by_code[-codes[i].code]);
    }
    counter(o, "rlock_wait_timeouts_total",
            "Waits that ended without the lock.", labels, st->wait_timeouts);
    family(o, "rlock_losses_total", "counter",
           "Holds lost before their release, by cause.");
    for (i = 1; i < 4; i++) {
        snprintf(extra, sizeof extra, "cause=\"%s\"", causes[i]);
        sample(o, "rlock_losses_total", labels, extra, st->losses_by_cause[i]);
    }
    counter(o, "rlock_renewals_total", "Leases renewed by the watchdog.",
            labels, st->renewals);
    counter(o, "rlock_renewal_failures_total",
            "Renewals that got no answer in time.", labels,
            st->renewal_failures);
    counter(o, "rlock_extensions_total", "Leases extended by the program.",
            labels, st->extensions);
    counter(o, "rlock_undos_total",
            "Undos sent: what an attempt may have taken, or a place in a "
            "queue, given back.",
            labels, st->undos);
    counter(o, "rlock_connection_errors_total",
            "Connections that failed or did not answer in time.", labels,
            st->conn_errors);
    counter(o, "rlock_reconnects_total",
            "Connections made again after a failure.", labels, st->reconnects);
    counter(o, "rlock_failovers_total", "Masters Sentinel named anew.", labels,
            st->failovers);
    counter(o, "rlock_redirects_total", "Cluster redirections followed.",
            labels, st->redirects);
    family(o, "rlock_holds", "gauge", "Holds the client has now.");
    putf(o, "rlock_holds{%s} %lld\n", labels, (long long)st->held);
    histogram(o, "rlock_wait_seconds",
              "Time from an acquisition call's start to the lock held.", labels,
              &st->wait);
    histogram(o, "rlock_hold_seconds",
              "Time a hold lasted, at its last release.", labels, &st->hold);
}

long rlock_client_metrics_text(rlock_client *c, char *buf, size_t len)
{
    rlock_stats st = RLOCK_STATS_INIT;
    rlock__call call = {0};
    out o;

    rlock__call_init(&call, 0);
    if (!c || (!buf && len > 0))
        return rlock__api_done(
            &call, c, NULL,
            rlock__fail(&call, RLOCK_EINVAL,
                        c ? "buf is NULL with len > 0" : "client is NULL"));
    rlock__api_enter(c);
    rlock__obs_stats(c->obs, holds_now(c), &st, sizeof st);
    o.buf = buf;
    o.len = len;
    o.used = 0;
    metrics(&o, c, &st);
    rlock__api_done(&call, c, NULL, RLOCK_OK);
    return (long)o.used;
}
