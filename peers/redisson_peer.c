/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The Redisson peer (redisson_peer.h): Redisson's RLock scripts, written
 * out again from their described semantics, and its waiting on the
 * lock's channel.
 */
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "redisson_peer.h"

static const char lock_lua[] =
    "local free = redis.call('EXISTS', KEYS[1]) == 0\n"
    "if free or redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1 then\n"
    "  local t = 0\n"
    "  if KEYS[2] then t = redis.call('INCR', KEYS[2]) end\n"
    "  redis.call('HINCRBY', KEYS[1], ARGV[2], 1)\n"
    "  redis.call('PEXPIRE', KEYS[1], ARGV[1])\n"
    "  return {1, t}\n"
    "end\n"
    "return {0, redis.call('PTTL', KEYS[1])}\n";

/* KEYS: lock, channel, latch. ARGV: message, lease, field, publish
 * command, latch lifetime. */
static const char unlock_lua[] =
    "local seen = redis.call('GET', KEYS[3])\n"
    "if seen then return tonumber(seen) end\n"
    "if redis.call('HEXISTS', KEYS[1], ARGV[3]) == 0 then return -2 end\n"
    "if redis.call('HINCRBY', KEYS[1], ARGV[3], -1) > 0 then\n"
    "  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
    "  redis.call('SET', KEYS[3], 0, 'PX', ARGV[5])\n"
    "  return 0\n"
    "end\n"
    "redis.call('DEL', KEYS[1])\n"
    "redis.call(ARGV[4], KEYS[2], ARGV[1])\n"
    "redis.call('SET', KEYS[3], 1, 'PX', ARGV[5])\n"
    "return 1\n";

static const char force_lua[] =
    "if redis.call('DEL', KEYS[1]) == 0 then return 0 end\n"
    "redis.call('PUBLISH', KEYS[2], ARGV[1])\n"
    "return 1\n";

void rp_name(char *buf, size_t len, const char *prefix, const char *name)
{
    if (strchr(name, '{'))
        snprintf(buf, len, "%s:%s", prefix, name);
    else
        snprintf(buf, len, "%s:{%s}", prefix, name);
}

/* EVAL script with nkeys keys among argv[0..argc); the reply, or NULL
 * after a message. */
static redisReply *eval(redisContext *x, const char *script, int nkeys,
                        const char **argv, int argc)
{
    const char *args[12];
    char n[8];
    redisReply *r;
    int i;

    snprintf(n, sizeof n, "%d", nkeys);
    args[0] = "EVAL";
    args[1] = script;
    args[2] = n;
    for (i = 0; i < argc; i++)
        args[3 + i] = argv[i];
    r = redisCommandArgv(x, 3 + argc, args, NULL);
    if (!r || r->type == REDIS_REPLY_ERROR) {
        fprintf(stderr, "redisson peer: %s\n", r ? r->str : x->errstr);
        if (r)
            freeReplyObject(r);
        return NULL;
    }
    return r;
}

int rp_try(redisContext *x, const char *name, const char *field,
           long long lease_ms, int fenced, long long *out)
{
    char tk[1200], lease[24];
    const char *argv[4];
    redisReply *r;
    int held;

    rp_name(tk, sizeof tk, "redisson_lock_token", name);
    snprintf(lease, sizeof lease, "%lld", lease_ms);
    argv[0] = name;
    argv[1] = fenced ? tk : lease;
    argv[2] = fenced ? lease : field;
    argv[3] = field;
    if (!(r = eval(x, lock_lua, fenced ? 2 : 1, argv, fenced ? 4 : 3)))
        return -1;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
        freeReplyObject(r);
        return -1;
    }
    held = r->element[0]->integer == 1;
    if (out)
        *out = r->element[1]->integer;
    freeReplyObject(r);
    return held;
}

int rp_unlock(redisContext *x, const char *name, const char *field,
              long long lease_ms)
{
    static unsigned request;
    char ch[1200], latch[1300], lease[24];
    const char *argv[8];
    redisReply *r;
    int rc;

    rp_name(ch, sizeof ch, "redisson_lock__channel", name);
    rp_name(latch, sizeof latch, "redisson_unlock_latch", name);
    snprintf(latch + strlen(latch), sizeof latch - strlen(latch), ":req-%u",
             __atomic_add_fetch(&request, 1, __ATOMIC_RELAXED));
    snprintf(lease, sizeof lease, "%lld", lease_ms);
    argv[0] = name;
    argv[1] = ch;
    argv[2] = latch;
    argv[3] = "0";
    argv[4] = lease;
    argv[5] = field;
    argv[6] = "PUBLISH";
    argv[7] = "10000";
    if (!(r = eval(x, unlock_lua, 3, argv, 8)))
        return -1;
    rc = r->type == REDIS_REPLY_INTEGER ? (int)r->integer : -1;
    freeReplyObject(r);
    /* As Redisson does once the unlock has answered. */
    if ((r = redisCommand(x, "DEL %s", latch)) != NULL)
        freeReplyObject(r);
    return rc;
}

int rp_force_unlock(redisContext *x, const char *name)
{
    char ch[1200];
    const char *argv[3] = {name, ch, "0"};
    redisReply *r;
    int rc;

    rp_name(ch, sizeof ch, "redisson_lock__channel", name);
    if (!(r = eval(x, force_lua, 2, argv, 3)))
        return -1;
    rc = r->type == REDIS_REPLY_INTEGER ? (int)r->integer : -1;
    freeReplyObject(r);
    return rc;
}

int rp_listen(redisContext *x, const char *name, int sharded)
{
    char ch[1200];
    redisReply *r;
    int ok;

    rp_name(ch, sizeof ch, "redisson_lock__channel", name);
    r = redisCommand(x, sharded ? "SSUBSCRIBE %s" : "SUBSCRIBE %s", ch);
    ok = r && r->type == REDIS_REPLY_ARRAY;
    if (r)
        freeReplyObject(r);
    return ok ? 0 : -1;
}

static long long now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int rp_message(redisContext *x, int timeout_ms, char *msg, size_t len)
{
    long long until = now_ms() + timeout_ms;

    for (;;) {
        redisReply *r = NULL;
        struct pollfd p = {x->fd, POLLIN, 0};
        long long left;

        if (redisReaderGetReply(x->reader, (void **)&r) != REDIS_OK)
            return -1;
        if (r) {
            int is_msg = r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
                         r->element[0]->type == REDIS_REPLY_STRING &&
                         r->element[2]->type == REDIS_REPLY_STRING &&
                         (strcmp(r->element[0]->str, "message") == 0 ||
                          strcmp(r->element[0]->str, "smessage") == 0);
            if (is_msg)
                snprintf(msg, len, "%s", r->element[2]->str);
            freeReplyObject(r);
            if (is_msg)
                return 1;
            continue;
        }
        left = until - now_ms();
        if (left <= 0)
            return 0;
        if (poll(&p, 1, (int)left) < 0)
            return -1;
        if ((p.revents & POLLIN) && redisBufferRead(x) != REDIS_OK)
            return -1;
    }
}
