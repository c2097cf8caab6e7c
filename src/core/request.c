/* SPDX-License-Identifier: BSD-3-Clause */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rlock/rlock.h>

#include "core/request.h"
#include "util/dec.h"

void rlock__req_init(rlock__req *r, const rlock__script *s)
{
    r->script = s;
    r->replicas = 0;
    r->nkeys = 0;
    r->failed = 0;
    r->tag = 0;
    r->argv = r->small_argv;
    r->lens = r->small_lens;
    r->cap = RLOCK__REQ_SMALL;
    r->chunks = NULL;
    r->small_used = 0;
    if (s->command) {
        r->argv[0] = s->command;
        r->lens[0] = strlen(s->command);
        r->argc = r->head = 1;
        return;
    }
    r->argv[0] = "EVALSHA";
    r->lens[0] = 7;
    r->argv[1] = s->sha;
    r->lens[1] = 40;
    r->argv[2] = r->nk;
    r->argc = r->head = 3;
}

int rlock__req_is_script(const rlock__req *r)
{
    return r->script->command == NULL;
}

const char *rlock__req_first_key(const rlock__req *r, size_t *len)
{
    if (r->nkeys == 0)
        return NULL;
    *len = r->lens[r->head];
    return r->argv[r->head];
}

void rlock__req_free(rlock__req *r)
{
    while (r->chunks) {
        rlock__chunk *k = r->chunks;
        r->chunks = k->next;
        free(k);
    }
    if (r->argv != r->small_argv) {
        free(r->argv);
        free(r->lens);
    }
    r->argv = r->small_argv;
    r->lens = r->small_lens;
}

static int room(rlock__req *r)
{
    const char **argv;
    size_t *lens;
    int cap;

    if (r->failed)
        return 0;
    if (r->argc < r->cap)
        return 1;
    cap = r->cap * 2;
    argv = malloc(sizeof *argv * (size_t)cap);
    lens = malloc(sizeof *lens * (size_t)cap);
    if (!argv || !lens) {
        free(argv);
        free(lens);
        r->failed = 1;
        return 0;
    }
    memcpy(argv, r->argv, sizeof *argv * (size_t)r->argc);
    memcpy(lens, r->lens, sizeof *lens * (size_t)r->argc);
    if (r->argv != r->small_argv) {
        free(r->argv);
        free(r->lens);
    }
    r->argv = argv;
    r->lens = lens;
    r->cap = cap;
    return 1;
}

void rlock__req_key(rlock__req *r, const char *p, size_t len)
{
    /* Keys come before arguments: a key after an argument would be sent
     * as one. */
    if (r->argc != r->head + r->nkeys)
        r->failed = 1;
    if (!room(r))
        return;
    r->argv[r->argc] = p;
    r->lens[r->argc++] = len;
    r->nkeys++;
}

void rlock__req_arg(rlock__req *r, const char *p, size_t len)
{
    if (!room(r))
        return;
    r->argv[r->argc] = p;
    r->lens[r->argc++] = len;
}

void rlock__req_args(rlock__req *r, const char *s)
{
    rlock__req_arg(r, s, strlen(s));
}

/* len bytes of the request's own storage. */
static char *store(rlock__req *r, size_t len)
{
    rlock__chunk *k;

    if (r->small_used + len <= sizeof r->small_buf) {
        char *p = r->small_buf + r->small_used;
        r->small_used += len;
        return p;
    }
    k = r->chunks;
    if (!k || k->cap - k->used < len) {
        size_t cap = len > 4096 ? len : 4096;
        k = malloc(sizeof *k + cap);
        if (!k) {
            r->failed = 1;
            return NULL;
        }
        k->cap = cap;
        k->used = 0;
        k->next = r->chunks;
        r->chunks = k;
    }
    k->used += len;
    return k->data + k->used - len;
}

void rlock__req_argcopy(rlock__req *r, const char *s, size_t len)
{
    char *p = store(r, len);

    if (p) {
        memcpy(p, s, len);
        rlock__req_arg(r, p, len);
    }
}

char *rlock__req_keyroom(rlock__req *r, size_t len)
{
    char *p = store(r, len);

    if (p)
        rlock__req_key(r, p, len);
    return p;
}

char *rlock__req_argroom(rlock__req *r, size_t len)
{
    char *p = store(r, len);

    if (p)
        rlock__req_arg(r, p, len);
    return p;
}

void rlock__req_argu(rlock__req *r, uint64_t v)
{
    char buf[RLOCK__DEC_MAX];

    rlock__req_argcopy(r, buf, rlock__dec_u64(buf, v));
}

void rlock__req_argi(rlock__req *r, int64_t v)
{
    char buf[RLOCK__DEC_MAX];

    rlock__req_argcopy(r, buf, rlock__dec_i64(buf, v));
}

void rlock__req_command(rlock__req *r, const char *key, size_t len)
{
    if (r->argc > r->head)
        rlock__req_args(r, r->script->command);
    if (r->nkeys == 0)
        rlock__req_key(r, key, len);
    else
        rlock__req_arg(r, key, len);
}

int rlock__req_commands(const rlock__req *r)
{
    return r->script->each > 0 ? r->argc / r->script->each : 0;
}

int rlock__req_finish(rlock__req *r)
{
    if (r->failed)
        return RLOCK_ENOMEM;
    if (r->script->each > 0 &&
        (r->argc < r->script->each || r->argc % r->script->each != 0))
        return RLOCK_EINVAL;
    if (rlock__req_is_script(r))
        r->lens[2] = rlock__dec_i64(r->nk, r->nkeys);
    return RLOCK_OK;
}

int rlock__results_reserve(rlock__results *res, int n)
{
    rlock__results_none(res);
    if (n <= 0)
        return RLOCK_OK;
    if (!(res->r = calloc((size_t)n, sizeof *res->r)))
        return RLOCK_ENOMEM;
    res->cap = n;
    return RLOCK_OK;
}

void rlock__results_none(rlock__results *res)
{
    res->n = 0;
    res->cap = 0;
    res->r = NULL;
}

void rlock__results_init(rlock__results *res, int n)
{
    int i;

    /* More answers than were reserved for: a route that grew after the
     * request was sent (never with today's backends). The room grows, or
     * the nodes past it are not asked. */
    if (n > res->cap) {
        rlock__result *r = realloc(res->r, (size_t)n * sizeof *r);
        if (r) {
            res->r = r;
            res->cap = n;
        } else {
            n = res->cap;
        }
    }
    res->n = n;
    for (i = 0; i < n; i++) {
        res->r[i].rc = RLOCK_ENOREPLY;
        res->r[i].reply = NULL;
        res->r[i].replies = NULL;
        res->r[i].nreplies = 0;
        res->r[i].sent = 0;
        res->r[i].acks = 0;
        rlock__err_clear(&res->r[i].err);
    }
}

void rlock__result_drop(rlock__result *r)
{
    if (r->reply) {
        freeReplyObject(r->reply);
        r->reply = NULL;
    }
    while (r->nreplies > 0)
        freeReplyObject(r->replies[--r->nreplies]);
    free(r->replies);
    r->replies = NULL;
}

void rlock__results_clear(rlock__results *res)
{
    int i;

    for (i = 0; i < res->n; i++)
        rlock__result_drop(&res->r[i]);
    res->n = 0;
}

void rlock__results_free(rlock__results *res)
{
    int i;

    for (i = 0; i < res->n; i++)
        rlock__result_drop(&res->r[i]);
    free(res->r);
    rlock__results_none(res);
}

int rlock__result_unknown(const rlock__result *r)
{
    return r->rc != RLOCK_OK && r->sent &&
           (r->rc == RLOCK_EIO || r->rc == RLOCK_ENOREPLY ||
            r->rc == RLOCK_EPROTO || r->rc == RLOCK_ECANCELED);
}
