/* SPDX-License-Identifier: BSD-3-Clause */
#include <stdarg.h>
#include <stdio.h>

#include "core/call.h"
#include "util/clock.h"

void rlock__call_init(rlock__call *call, int64_t deadline_ns)
{
    call->deadline_ns = deadline_ns;
    rlock__err_clear(&call->err);
}

int rlock__fail(rlock__call *call, int code, const char *fmt, ...)
{
    va_list ap;

    call->err.code = code;
    va_start(ap, fmt);
    vsnprintf(call->err.msg, sizeof call->err.msg, fmt, ap);
    va_end(ap);
    return code;
}

int64_t rlock__call_until(const rlock__call *call, int timeout_ms)
{
    return rlock__earlier(rlock__after_ms(timeout_ms), call->deadline_ns);
}
