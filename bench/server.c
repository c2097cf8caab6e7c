/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What the server says about itself: fields of INFO, the number of calls
 * of a command, and the time Redis spent running commands. These let a scenario
 * report Redis's side of a cost, which the client's clock cannot separate
 * from the network and the scheduler.
 */
#include <stdlib.h>
#include <string.h>

#include "bench.h"

long long server_info_field(redisContext *raw, const char *section,
                            const char *field)
{
    redisReply *r = redisCommand(raw, "INFO %s", section);
    long long v = -1;
    const char *p;
    char key[80];

    snprintf(key, sizeof key, "\n%s:", field);
    if (r && r->type == REDIS_REPLY_STRING && (p = strstr(r->str, key)))
        v = atoll(p + strlen(key));
    if (r)
        freeReplyObject(r);
    return v;
}

long long server_calls(redisContext *raw, const char *cmd)
{
    redisReply *r = redisCommand(raw, "INFO commandstats");
    const char *p;
    char key[64];
    long long v = 0;

    snprintf(key, sizeof key, "cmdstat_%s:calls=", cmd);
    if (r && r->type == REDIS_REPLY_STRING && (p = strstr(r->str, key)))
        v = atoll(p + strlen(key));
    if (r)
        freeReplyObject(r);
    return v;
}

/* A number after "\nfield:" in an INFO reply, or -1 if absent. */
static double info_double(const char *text, const char *field)
{
    char key[80];
    const char *p;

    snprintf(key, sizeof key, "\n%s:", field);
    p = strstr(text, key);
    return p ? atof(p + strlen(key)) : -1;
}

long long server_cpu_usec(redisContext *raw)
{
    redisReply *r = redisCommand(raw, "INFO cpu");
    double user = -1, sys = -1;

    if (r && r->type == REDIS_REPLY_STRING) {
        /* The main thread's: Redis's I/O threads and background saves are
         * not in it (Redis 6.2 and later; the process's before). */
        user = info_double(r->str, "used_cpu_user_main_thread");
        sys = info_double(r->str, "used_cpu_sys_main_thread");
        if (user < 0 || sys < 0) {
            user = info_double(r->str, "used_cpu_user");
            sys = info_double(r->str, "used_cpu_sys");
        }
    }
    if (r)
        freeReplyObject(r);
    return user < 0 || sys < 0 ? -1 : (long long)((user + sys) * 1e6 + 0.5);
}

/* usec= of one command's line of INFO commandstats text (0 if absent). */
static long long cmd_usec(const char *text, const char *cmd)
{
    char key[64];
    const char *p, *u, *eol;

    snprintf(key, sizeof key, "\ncmdstat_%s:", cmd);
    if (!(p = strstr(text, key)))
        return 0;
    u = strstr(p, ",usec=");
    eol = strchr(p + 1, '\n');
    return u && (!eol || u < eol) ? atoll(u + 6) : 0;
}

int server_request_usec(redisContext *raw, long long *usec)
{
    static const char *const names[] = {
        "eval",     "evalsha", "eval_ro", "evalsha_ro", "fcall",
        "fcall_ro", "set",     "delex",   "delifeq"};
    redisReply *r = redisCommand(raw, "INFO commandstats");
    size_t i;

    *usec = 0;
    if (!r || r->type != REDIS_REPLY_STRING) {
        if (r)
            freeReplyObject(r);
        return -1;
    }
    for (i = 0; i < sizeof names / sizeof names[0]; i++)
        *usec += cmd_usec(r->str, names[i]);
    freeReplyObject(r);
    return 0;
}
