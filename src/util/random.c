/* SPDX-License-Identifier: BSD-3-Clause */
#include <errno.h>
#include <sys/random.h>

#include "util/random.h"

int rlock__random_bytes(void *buf, size_t len)
{
    unsigned char *p = buf;

    while (len > 0) {
        ssize_t n = getrandom(p, len, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int rlock__random_id(char out[RLOCK__ID_LEN + 1])
{
    static const char hex[] = "0123456789abcdef";
    unsigned char raw[RLOCK__ID_LEN / 2];
    size_t i;

    if (rlock__random_bytes(raw, sizeof raw) != 0)
        return -1;
    for (i = 0; i < sizeof raw; i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 15];
    }
    out[RLOCK__ID_LEN] = '\0';
    return 0;
}
