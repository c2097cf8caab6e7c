/* A plain hiredis connection to the server a URL names, for benchmarks'
 * baselines and bookkeeping (tcp or unix socket). */
#ifndef RLOCK_BENCH_RAW_H
#define RLOCK_BENCH_RAW_H

#include <stdio.h>
#include <string.h>

#include <hiredis/hiredis.h>

static inline redisContext *raw_connect(const char *url)
{
    char host[256], path[256];
    int port = 6379;

    if (strncmp(url, "unix://", 7) == 0) {
        snprintf(path, sizeof path, "%s", url + 7);
        path[strcspn(path, "?")] = '\0';
        return redisConnectUnix(path);
    }
    if (sscanf(url, "redis://%255[^:/]:%d", host, &port) < 1)
        return NULL;
    return redisConnect(host, port);
}

#endif
