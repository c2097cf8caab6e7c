/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Error codes' names and the per-thread record of the last detail.
 */
#include <stdio.h>
#include <string.h>

#include <rlock/rlock.h>

#include "core/error.h"
#include "util/err.h"

static _Thread_local struct {
    uint64_t client; /* serial of the client, 0 for rlock_client_open */
    char msg[RLOCK__ERR_MAX];
} tl_err;

const char *rlock_strerror(int err)
{
    switch (err) {
    case RLOCK_OK:
        return "no error";
    case RLOCK_EINVAL:
        return "invalid argument";
    case RLOCK_ENOMEM:
        return "out of memory";
    case RLOCK_ECONNECT:
        return "cannot connect to Redis";
    case RLOCK_ETIMEDOUT:
        return "lock not obtained within the wait";
    case RLOCK_EBUSY:
        return "lock is held by another owner";
    case RLOCK_ENOTOWNER:
        return "lock is not held by the caller";
    case RLOCK_ELOST:
        return "lock was lost (expired or taken)";
    case RLOCK_EAUTH:
        return "Redis authentication failed";
    case RLOCK_EREDIS:
        return "Redis returned an error";
    case RLOCK_EPROTO:
        return "unexpected reply from Redis";
    case RLOCK_EIO:
        return "connection to Redis lost";
    case RLOCK_ECANCELED:
        return "wait cancelled";
    case RLOCK_EREPLICAS:
        return "too few replicas acknowledged the write";
    case RLOCK_EUNAVAILABLE:
        return "Redis cannot serve locks now";
    case RLOCK_EQUORUM:
        return "no majority of the Redlock nodes";
    case RLOCK_ENOREPLY:
        return "Redis did not answer in time";
    case RLOCK_EPERM:
        return "Redis refused the command to this user";
    case RLOCK_ENOTLOCK:
        return "the key is not a lock of this layout";
    case RLOCK_ENOTIFY:
        return "lock released, but its waiters could not be notified";
    default:
        return "unknown error code";
    }
}

const char *rlock_version(void)
{
    return RLOCK_VERSION_STRING;
}

void rlock__errmsg_set(uint64_t client_serial, const char *msg)
{
    tl_err.client = client_serial;
    snprintf(tl_err.msg, sizeof tl_err.msg, "%s", msg);
}

const char *rlock__errmsg_get(uint64_t client_serial)
{
    return tl_err.client == client_serial ? tl_err.msg : "";
}
