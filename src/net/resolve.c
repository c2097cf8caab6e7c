/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The lookups every build has (resolve.h): an address read as one (no
 * lookup), getaddrinfo(3) for a build without c-ares, and a lookup waited
 * for by a deadline, for the callers that may block (a blocking client's
 * open) but not past their time.
 */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>

#include <rlock/rlock.h>

#include "net/resolve.h"

static int gai(const char *host, int numeric, rlock__addrs *a, int *noname,
               rlock__neterr *err)
{
    struct addrinfo hints, *res = NULL, *ai;
    int rc;

    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = numeric ? AI_NUMERICHOST : AI_ADDRCONFIG;
    rc = getaddrinfo(host, NULL, &hints, &res);
    if (noname)
        *noname = rc == EAI_NONAME;
    if (rc != 0) {
        rlock__neterr_set(err, RLOCK_ECONNECT, "cannot resolve %s: %s", host,
                          gai_strerror(rc));
        return err->code;
    }
    a->n = 0;
    for (ai = res; ai && a->n < RLOCK__RESOLVE_ADDRS; ai = ai->ai_next) {
        if (ai->ai_addrlen > sizeof a->a[0])
            continue;
        memcpy(&a->a[a->n], ai->ai_addr, ai->ai_addrlen);
        a->len[a->n++] = ai->ai_addrlen;
    }
    freeaddrinfo(res);
    return RLOCK_OK;
}

int rlock__resolve_numeric(const char *host, rlock__addrs *a, int *noname,
                           rlock__neterr *err)
{
    return gai(host, 1, a, noname, err);
}

int rlock__resolve_system(const char *host, rlock__addrs *a, rlock__neterr *err)
{
    return gai(host, 0, a, NULL, err);
}

int rlock__resolve_wait(const char *host, int64_t deadline_ns, rlock__addrs *a,
                        rlock__neterr *err)
{
    rlock__resolve *r = NULL;
    int rc, noname = 0;

    if ((rc = rlock__resolve_numeric(host, a, &noname, err)) == RLOCK_OK ||
        !noname)
        return rc;
    rc = rlock__resolve_start(host, &r, err);
    if (rc == RLOCK__RESOLVE_BLOCKING)
        return rlock__resolve_system(host, a, err);
    while (rc == RLOCK_OK) {
        struct pollfd p = {rlock__resolve_fd(r), POLLIN, 0};
        int64_t left = deadline_ns - rlock__net_now_ns();
        if ((rc = rlock__resolve_step(r, a, err)) != 0)
            break;
        if (left <= 0) {
            rlock__neterr_set(err, RLOCK_ENOREPLY,
                              "cannot resolve %s: no answer in time", host);
            rc = err->code;
            break;
        }
        if (poll(&p, 1, (int)((left + 999999) / 1000000)) < 0 &&
            errno != EINTR) {
            rlock__neterr_set(err, RLOCK_EIO, "poll: %s", strerror(errno));
            rc = err->code;
        }
    }
    rlock__resolve_free(r, 0);
    return rc == 1 ? RLOCK_OK : rc;
}
