/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The floor: the least a Redis lock can cost, written with raw hiredis on
 * a connection of its own. Acquire is SET key token NX PX; release is a
 * compare-and-delete script (EVALSHA), so that only the owner deletes.
 * Whatever rlock does beyond these two round trips shows up as the ratio.
 */
#include <string.h>

#include "bench.h"

static const char release_lua[] =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
    "  return redis.call('DEL', KEYS[1])\n"
    "end\n"
    "return 0\n";

static char release_sha[41];

int floor_where(const char *url, char host[256], int *port, char path[256])
{
    *port = 6379;
    if (strncmp(url, "unix://", 7) == 0) {
        snprintf(path, 256, "%s", url + 7);
        path[strcspn(path, "?")] = '\0';
        return FLOOR_UNIX;
    }
    return sscanf(url, "redis://%255[^:/]:%d", host, port) >= 1 ? FLOOR_TCP : 0;
}

redisContext *floor_connect(const char *url)
{
    char host[256], path[256];
    int port;
    redisContext *ctx = NULL;
    redisReply *r;

    switch (floor_where(url, host, &port, path)) {
    case FLOOR_UNIX:
        ctx = redisConnectUnix(path);
        break;
    case FLOOR_TCP:
        ctx = redisConnect(host, port);
        break;
    }
    if (!ctx || ctx->err) {
        fprintf(stderr, "rlock-bench: floor: cannot connect to %s%s%s\n", url,
                ctx ? ": " : "", ctx ? ctx->errstr : "");
        if (ctx)
            redisFree(ctx);
        return NULL;
    }
    r = redisCommand(ctx, "SCRIPT LOAD %s", release_lua);
    if (!r || r->type != REDIS_REPLY_STRING || r->len != 40) {
        fprintf(stderr, "rlock-bench: floor: SCRIPT LOAD failed\n");
        if (r)
            freeReplyObject(r);
        redisFree(ctx);
        return NULL;
    }
    memcpy(release_sha, r->str, 40);
    freeReplyObject(r);
    return ctx;
}

int floor_pair(redisContext *ctx, const char *key, const char *token)
{
    redisReply *r = redisCommand(ctx, "SET %s %s NX PX 30000", key, token);
    int ok = r && r->type == REDIS_REPLY_STATUS;

    if (r)
        freeReplyObject(r);
    if (!ok)
        return -1;
    r = redisCommand(ctx, "EVALSHA %s 1 %s %s", release_sha, key, token);
    ok = r && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    if (r)
        freeReplyObject(r);
    return ok ? 0 : -1;
}

const char *floor_release_sha(void)
{
    return release_sha;
}
