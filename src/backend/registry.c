/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The backends, by the scheme of their URL. A new backend is one file
 * that fills an rlock__backend and one line here.
 */
#include <string.h>

#include "backend/backend.h"

static const rlock__backend *const backends[] = {
    &rlock__backend_redlock,
    &rlock__backend_sentinel,
    &rlock__backend_cluster,
};

const rlock__backend *rlock__backend_for(const char *url)
{
    size_t i;

    for (i = 0; url && i < sizeof backends / sizeof backends[0]; i++)
        if (strncmp(url, backends[i]->scheme, strlen(backends[i]->scheme)) == 0)
            return backends[i];
    /* redis://, rediss://, unix://, and the single server's parser names
     * anything else a malformed URL. */
    return &rlock__backend_single;
}
