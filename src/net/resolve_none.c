/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Built without c-ares (resolve.h): no lookup can be made without
 * blocking, and the connection resolves names with getaddrinfo(3).
 */
#include "net/resolve.h"

int rlock__resolve_async(void)
{
    return 0;
}

int rlock__resolve_start(const char *host, rlock__resolve **out,
                         rlock__neterr *err)
{
    (void)host;
    (void)err;
    *out = NULL;
    return RLOCK__RESOLVE_BLOCKING;
}

int rlock__resolve_fd(const rlock__resolve *r)
{
    (void)r;
    return -1;
}

int rlock__resolve_step(rlock__resolve *r, rlock__addrs *out,
                        rlock__neterr *err)
{
    (void)r;
    (void)out;
    (void)err;
    return 0;
}

void rlock__resolve_free(rlock__resolve *r, int keep_fd)
{
    (void)r;
    (void)keep_fd;
}

void rlock__resolve_test_servers(const char *csv)
{
    (void)csv;
}
