/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Error codes and their detail messages.
 *
 * Codes are static strings (rlock_strerror). The detail of the last error
 * is kept per thread, tagged with the client it happened on, so that
 * rlock_client_errmsg(c) never shows one client's error as another's and
 * needs no lock: the SQLite errcode/errmsg split, made thread-local because
 * a client is shared between threads.
 */
#include <stdio.h>
#include <string.h>

#include "internal.h"
#include "reply.h"

typedef struct {
    uint64_t client; /* serial of the client, 0 for rlock_client_open */
    char msg[512];
} rlock__errbuf;

static _Thread_local rlock__errbuf tl_err;

const char *rlock_strerror(int err)
{
    switch (err) {
    case RLOCK_OK: return "no error";
    case RLOCK_EINVAL: return "invalid argument";
    case RLOCK_ENOMEM: return "out of memory";
    case RLOCK_ECONNECT: return "cannot connect to Redis";
    case RLOCK_ETIMEDOUT: return "lock not obtained within the wait";
    case RLOCK_EBUSY: return "lock is held by another owner";
    case RLOCK_ENOTOWNER: return "lock is not held by the caller";
    case RLOCK_ELOST: return "lock was lost (expired or taken)";
    case RLOCK_EAUTH: return "Redis authentication failed";
    case RLOCK_EREDIS: return "Redis returned an error";
    case RLOCK_EPROTO: return "unexpected reply from Redis";
    case RLOCK_EIO: return "connection to Redis lost";
    case RLOCK_ECANCELED: return "wait cancelled";
    case RLOCK_EREPLICAS: return "too few replicas acknowledged the write";
    case RLOCK_EUNAVAILABLE: return "Redis cannot serve locks now";
    case RLOCK_EQUORUM: return "no majority of the Redlock nodes";
    case RLOCK_ENOREPLY: return "Redis did not answer in time";
    case RLOCK_EPERM: return "Redis refused the command to this user";
    case RLOCK_ENOTLOCK: return "the key is not a lock of this layout";
    default: return "unknown error code";
    }
}

const char *rlock_version(void)
{
    return RLOCK_VERSION_STRING;
}

int rlock__fail(const rlock_client *c, int code, const char *fmt, ...)
{
    va_list ap;

    tl_err.client = c ? c->serial : 0;
    va_start(ap, fmt);
    vsnprintf(tl_err.msg, sizeof tl_err.msg, fmt, ap);
    va_end(ap);
    return code;
}

const char *rlock_client_errmsg(rlock_client *c)
{
    uint64_t serial = c ? c->serial : 0;

    return tl_err.client == serial ? tl_err.msg : "";
}

/* The operators' scripts' refusal (internal.h). Here, beside the other
 * error recording, so that the admin calls, the layouts and Redlock all
 * reach it downwards. */
static const char *layout_name(const rlock_mutex *m)
{
    switch (m->opts.layout) {
    case RLOCK_LAYOUT_TOKEN: return "token";
    case RLOCK_LAYOUT_REDISSON: return "Redisson";
    default: return "native";
    }
}

int rlock__not_a_lock(rlock_mutex *m, const redisReply *r, const char *where)
{
    char why[128];

    if (!rlock__parse_refusal(r, why, sizeof why))
        return RLOCK_OK;
    /* The name is the caller's own bytes; printed as given, up to a NUL
     * (rlock(1) escapes what it prints). */
    return rlock__fail(m->c, RLOCK_ENOTLOCK,
                       "'%.*s' is not a lock of the %s layout%s: %s; left "
                       "untouched",
                       (int)m->name_len, m->name, layout_name(m),
                       where ? where : "", why);
}
