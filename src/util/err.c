/* SPDX-License-Identifier: BSD-3-Clause */
#include <stdarg.h>
#include <stdio.h>

#include "util/err.h"

int rlock__err_set(rlock__err *e, int code, const char *fmt, ...)
{
    va_list ap;

    e->code = code;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return code;
}

void rlock__err_clear(rlock__err *e)
{
    e->code = RLOCK_OK;
    e->msg[0] = '\0';
}
