/* SPDX-License-Identifier: BSD-3-Clause */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/call.h"
#include "util/clock.h"

void rlock__call_init(rlock__call *call, int64_t deadline_ns)
{
    call->deadline_ns = deadline_ns;
    call->code = RLOCK_OK;
    call->msg = NULL;
}

void rlock__call_end(rlock__call *call)
{
    free(call->msg);
    call->msg = NULL;
    call->code = RLOCK_OK;
}

char *rlock__call_buf(rlock__call *call)
{
    if (!call->msg && (call->msg = malloc(RLOCK__ERR_MAX)) != NULL)
        call->msg[0] = '\0';
    return call->msg;
}

int rlock__fail(rlock__call *call, int code, const char *fmt, ...)
{
    va_list ap;
    char *buf;

    call->code = code;
    if ((buf = rlock__call_buf(call)) != NULL) {
        va_start(ap, fmt);
        vsnprintf(buf, RLOCK__ERR_MAX, fmt, ap);
        va_end(ap);
    }
    return code;
}

void rlock__call_cut(rlock__call *call, size_t len)
{
    if (!call->msg)
        return;
    if (len == 0) {
        free(call->msg);
        call->msg = NULL;
    } else if (len < RLOCK__ERR_MAX) {
        call->msg[len] = '\0';
    }
}

const char *rlock__call_msg(const rlock__call *call)
{
    return call->msg ? call->msg : "";
}

int rlock__call_set(rlock__call *call, const rlock__err *e)
{
    if (e->msg[0] || call->msg)
        return rlock__fail(call, e->code, "%s", e->msg);
    call->code = e->code;
    return e->code;
}

void rlock__call_get(const rlock__call *call, rlock__err *e)
{
    e->code = call->code;
    snprintf(e->msg, sizeof e->msg, "%s", rlock__call_msg(call));
}

void rlock__call_take(rlock__call *call, rlock__call *from)
{
    if (call == from)
        return;
    free(call->msg);
    call->code = from->code;
    call->msg = from->msg;
    from->msg = NULL;
    from->code = RLOCK_OK;
}

int64_t rlock__call_until(const rlock__call *call, int timeout_ms)
{
    return rlock__earlier(rlock__after_ms(timeout_ms), call->deadline_ns);
}
