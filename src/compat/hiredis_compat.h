/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Every difference between hiredis 0.14 (Debian 12) and hiredis 1.x that
 * rlock cares about lives in this header, so the rest of the library is
 * written against one API.
 *
 * What rlock uses exists in both: redisConnectWithTimeout,
 * redisConnectUnixWithTimeout, redisSetTimeout, redisEnableKeepAlive,
 * redisCommandArgv, redisAppendCommandArgv, redisBufferRead,
 * redisBufferWrite, redisReaderGetReply, freeReplyObject, redisFree.
 * What differs:
 *  - 1.x reports a command timeout as REDIS_ERR_TIMEOUT (1.1+); 0.14 as
 *    REDIS_ERR_IO with errno EAGAIN.
 *  - 1.x has RESP3 reply types; rlock speaks RESP2, but a reply of an
 *    unexpected type must still be recognised as "not what we asked for",
 *    and text that 1.x may hand over as a verbatim string (INFO's answer,
 *    REDIS_REPLY_VERB: its str is the text, the "txt:" type apart) is
 *    read as the plain string it is in RESP2 (rlock__reply_is_text).
 *  - 1.x redisContext.fd is a redisFD (an int on Unix).
 */
#ifndef RLOCK_COMPAT_HIREDIS_COMPAT_H
#define RLOCK_COMPAT_HIREDIS_COMPAT_H

#include <string.h>

#include <hiredis/hiredis.h>

#if !defined(HIREDIS_MAJOR)
#error "hiredis.h did not define HIREDIS_MAJOR"
#endif

#define RLOCK__HIREDIS_1X (HIREDIS_MAJOR >= 1)

/* The type of createArray's element count in redisReplyObjectFunctions. */
#if RLOCK__HIREDIS_1X
#define RLOCK__ARRAY_LEN_T size_t
#else
#define RLOCK__ARRAY_LEN_T int
#endif

/* Whether r is text: a bulk string, or (hiredis 1.x) a verbatim string,
 * whose str and len are the text without its format prefix. 0.14 knows
 * no verbatim strings. */
static inline int rlock__reply_is_text(const redisReply *r)
{
#if defined(REDIS_REPLY_VERB)
    if (r->type == REDIS_REPLY_VERB)
        return 1;
#endif
    return r->type == REDIS_REPLY_STRING;
}

/* True if the context's last error was a read/write timeout. */
static inline int rlock__redis_timed_out(const redisContext *ctx)
{
#if defined(REDIS_ERR_TIMEOUT)
    if (ctx->err == REDIS_ERR_TIMEOUT)
        return 1;
#endif
    /* 0.14 formats errno into errstr at the time of the failure; errno
     * itself may have been overwritten since, so read the text. */
    return ctx->err == REDIS_ERR_IO &&
           (strstr(ctx->errstr, "temporarily unavailable") != NULL ||
            strstr(ctx->errstr, "timed out") != NULL);
}

/* The socket of a connected context, for poll(). */
static inline int rlock__redis_fd(const redisContext *ctx)
{
    return (int)ctx->fd;
}

#endif
