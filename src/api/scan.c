/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Walking the keys of a client's servers (rlock_scan): SCAN on each
 * server the backend names, a step at a time, the servers taking turns,
 * each with a cursor of its own. For operators' tools that look for
 * locks (rlock list, rlock top): which keys are locks is theirs to say.
 *
 * A step sends one SCAN (with DBSIZE in the same write the first time a
 * server is asked) and moves the server's cursor only once the answer
 * is read whole, so a step that failed can be tried again from where it
 * was.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "backend/backend.h"
#include "util/clock.h"

/* The longest MATCH or TYPE taken (a pattern longer than any key name a
 * lock has would be a mistake, and it is sent with every step). */
#define ARG_MAX 4096
/* The largest COUNT taken: SCAN's answer must fit the reply bounds. */
#define COUNT_MAX 100000

typedef struct server {
    int id;            /* the backend's */
    char cursor[24];   /* SCAN's, in decimal; "0" to start */
    int started, done; /* asked once; walked to its end */
    long long dbsize;  /* its DBSIZE, -1 unknown */
} server;

struct rlock_scan {
    rlock_client *c;
    char *match, *type; /* NULL: none */
    int n;              /* servers */
    int turn;           /* the next step's server, if not done */
    int64_t steps, keys, commands, reached;
    server servers[RLOCK__SERVERS_MAX];
};

static int too_long(const char *s)
{
    return s && strlen(s) > ARG_MAX;
}

rlock_scan *rlock_scan_new(rlock_client *c, const char *match, const char *type,
                           int *err)
{
    int ids[RLOCK__SERVERS_MAX], sent = 0, n, i, dummy;
    rlock__call call = {0};
    rlock_scan *s;

    if (!err)
        err = &dummy;
    rlock__call_init(&call, 0);
    if (!c || too_long(match) || too_long(type) || (type && !*type)) {
        *err = rlock__api_done(
            &call, c, NULL,
            rlock__fail(&call, RLOCK_EINVAL,
                        !c ? "client is NULL"
                           : "match and type must be at most %d bytes, and "
                             "type not empty",
                        ARG_MAX));
        return NULL;
    }
    rlock__api_enter(c);
    rlock__call_init(&call, rlock__after_ms(c->opts.command_timeout_ms));
    s = calloc(1, sizeof *s);
    if (!s || (match && *match && !(s->match = strdup(match))) ||
        (type && !(s->type = strdup(type)))) {
        rlock_scan_free(s);
        *err = rlock__api_done(
            &call, c, NULL, rlock__fail(&call, RLOCK_ENOMEM, "out of memory"));
        return NULL;
    }
    n = c->backend->servers(c, ids, RLOCK__SERVERS_MAX, &sent, &call);
    s->commands = sent;
    if (n < 0) {
        rlock_scan_free(s);
        *err = rlock__api_done(&call, c, NULL, n);
        return NULL;
    }
    s->c = c;
    s->n = n;
    for (i = 0; i < n; i++) {
        s->servers[i].id = ids[i];
        strcpy(s->servers[i].cursor, "0");
        s->servers[i].dbsize = -1;
    }
    rlock__call_end(&call);
    *err = RLOCK_OK;
    return s;
}

/* The next server whose walk goes on, from s->turn; -1 if none. */
static int next_server(const rlock_scan *s)
{
    int k;

    for (k = 0; k < s->n; k++) {
        int i = (s->turn + k) % s->n;
        if (!s->servers[i].done)
            return i;
    }
    return -1;
}

/* SCAN's answer, [cursor, [key...]]: RLOCK_OK with the new cursor in
 * next, or RLOCK_EPROTO. */
static int read_answer(const redisReply *r, const char *where, char next[24],
                       rlock__call *call)
{
    const redisReply *cur, *keys;
    char *end;
    size_t i;

    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2)
        return rlock__fail(call, RLOCK_EPROTO,
                           "%s answered SCAN with no [cursor, keys] array",
                           where);
    cur = r->element[0];
    keys = r->element[1];
    if (cur->type != REDIS_REPLY_STRING || cur->len < 1 || cur->len > 20 ||
        keys->type != REDIS_REPLY_ARRAY)
        return rlock__fail(call, RLOCK_EPROTO,
                           "%s answered SCAN with a bad cursor or key list",
                           where);
    errno = 0;
    (void)strtoull(cur->str, &end, 10);
    if (errno || *end || cur->str[0] == '-' || cur->str[0] == '+')
        return rlock__fail(call, RLOCK_EPROTO,
                           "%s answered SCAN with a cursor that is no number",
                           where);
    for (i = 0; i < keys->elements; i++)
        if (keys->element[i]->type != REDIS_REPLY_STRING)
            return rlock__fail(call, RLOCK_EPROTO,
                               "%s answered SCAN with a key that is no string",
                               where);
    memcpy(next, cur->str, (size_t)cur->len + 1);
    return RLOCK_OK;
}

int rlock_scan_next(rlock_scan *s, int count,
                    void (*fn)(void *arg, const char *key, size_t len),
                    void *arg)
{
    const char *argv[8], *dbsize[1] = {"DBSIZE"}, *where = "";
    redisReply *replies[2] = {NULL, NULL}, *scan;
    rlock__cmd cmds[2];
    rlock__call call = {0};
    char count_s[16], next[24];
    int i, argc = 0, ncmds = 0, rc;
    size_t k;
    server *sv;

    rlock__call_init(&call, 0);
    if (!s || !fn || count < 1 || count > COUNT_MAX)
        return rlock__api_done(
            &call, s ? s->c : NULL, NULL,
            rlock__fail(&call, RLOCK_EINVAL,
                        "scan and fn must not be NULL, count 1 to %d",
                        COUNT_MAX));
    if ((i = next_server(s)) < 0)
        return 0;
    rlock__api_enter(s->c);
    rlock__call_init(&call, rlock__after_ms(s->c->opts.command_timeout_ms));
    sv = &s->servers[i];
    snprintf(count_s, sizeof count_s, "%d", count);
    argv[argc++] = "SCAN";
    argv[argc++] = sv->cursor;
    if (s->match) {
        argv[argc++] = "MATCH";
        argv[argc++] = s->match;
    }
    argv[argc++] = "COUNT";
    argv[argc++] = count_s;
    if (s->type) {
        argv[argc++] = "TYPE";
        argv[argc++] = s->type;
    }
    /* The key count once per server, in the same round trip. */
    if (!sv->started) {
        cmds[ncmds].argc = 1;
        cmds[ncmds].argv = dbsize;
        cmds[ncmds++].lens = NULL;
    }
    cmds[ncmds].argc = argc;
    cmds[ncmds].argv = argv;
    cmds[ncmds++].lens = NULL;
    rc = s->c->backend->server_commands(s->c, sv->id, ncmds, cmds, replies,
                                        &where, &call);
    s->commands += ncmds;
    if (rc != RLOCK_OK)
        return rlock__api_done(&call, s->c, NULL, rc);
    scan = replies[ncmds - 1];
    if (scan->type == REDIS_REPLY_ERROR)
        rc = rlock__call_reply_error(&call, where, scan);
    else
        rc = read_answer(scan, where, next, &call);
    if (rc == RLOCK_OK) {
        if (ncmds == 2) {
            /* A refused DBSIZE leaves the size unknown, nothing else. */
            sv->dbsize = replies[0]->type == REDIS_REPLY_INTEGER
                             ? replies[0]->integer
                             : -1;
            sv->started = 1;
            s->reached++;
        }
        for (k = 0; k < scan->element[1]->elements; k++) {
            const redisReply *key = scan->element[1]->element[k];
            fn(arg, key->str, (size_t)key->len);
        }
        s->keys += (int64_t)scan->element[1]->elements;
        s->steps++;
        memcpy(sv->cursor, next, sizeof next);
        sv->done = strcmp(next, "0") == 0;
        s->turn = (i + 1) % s->n;
    }
    for (k = 0; k < (size_t)ncmds; k++)
        freeReplyObject(replies[k]);
    if (rc != RLOCK_OK)
        return rlock__api_done(&call, s->c, NULL, rc);
    /* What the step caused (a connection made again) before it returns. */
    rlock__api_done(&call, s->c, NULL, RLOCK_OK);
    return next_server(s) >= 0;
}

int64_t rlock_scan_info(const rlock_scan *s, int what)
{
    int64_t sum = -1;
    int i;

    if (!s)
        return -1;
    switch (what) {
    case RLOCK_SCAN_SERVERS:
        return s->n;
    case RLOCK_SCAN_DONE:
        for (i = 0, sum = 0; i < s->n; i++)
            sum += s->servers[i].done;
        return sum;
    case RLOCK_SCAN_STEPS:
        return s->steps;
    case RLOCK_SCAN_KEYS:
        return s->keys;
    case RLOCK_SCAN_DBSIZE:
        for (i = 0; i < s->n; i++)
            if (s->servers[i].dbsize >= 0)
                sum = (sum < 0 ? 0 : sum) + s->servers[i].dbsize;
        return sum;
    case RLOCK_SCAN_REACHED:
        return s->reached;
    case RLOCK_SCAN_COMMANDS:
        return s->commands;
    default:
        return -1;
    }
}

void rlock_scan_free(rlock_scan *s)
{
    if (!s)
        return;
    free(s->match);
    free(s->type);
    free(s);
}
