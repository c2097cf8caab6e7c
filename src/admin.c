/*
 * Operators' calls: a lock's state, an administrative release, a ping, and
 * cancelling waits. They are what rlock(1)'s status, unlock --force and
 * ping are built on, and need nothing the tool could not do through this
 * API.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static int64_t str_int(const redisReply *r)
{
    if (r->type == REDIS_REPLY_INTEGER)
        return r->integer;
    if (r->type == REDIS_REPLY_STRING)
        return strtoll(r->str, NULL, 10);
    return 0;
}

static void copy_holder(rlock_status *st, const redisReply *r)
{
    size_t n = 0;

    if (r->type == REDIS_REPLY_STRING) {
        n = (size_t)r->len < sizeof st->holder - 1 ? (size_t)r->len
                                                   : sizeof st->holder - 1;
        memcpy(st->holder, r->str, n);
    }
    st->holder[n] = '\0';
}

int rlock_mutex_status(rlock_mutex *m, rlock_status *st)
{
    redisReply *r = NULL;
    int rc;

    if (!m || !st)
        return rlock__fail(m ? m->c : NULL, RLOCK_EINVAL,
                           "mutex and status must not be NULL");
    rlock__client_after_fork_check(m->c);
    rc = rlock__eval(m->c, RLOCK__S_STATUS, &r, RLOCK__K_COUNT,
                     (const char **)m->keys, m->key_lens, 0, NULL, NULL);
    if (rc != RLOCK_OK)
        return rc;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 6) {
        freeReplyObject(r);
        return rlock__fail(m->c, RLOCK_EPROTO,
                           "unexpected reply to the status script");
    }
    memset(st, 0, sizeof *st);
    copy_holder(st, r->element[0]);
    st->held = st->holder[0] != '\0';
    st->count = st->held ? str_int(r->element[1]) : 0;
    st->token = st->held ? (uint64_t)str_int(r->element[2]) : 0;
    st->lease_ms = st->held ? str_int(r->element[3]) : -1;
    st->last_token = (uint64_t)str_int(r->element[4]);
    st->waiters = str_int(r->element[5]);
    freeReplyObject(r);
    return RLOCK_OK;
}

int rlock_mutex_force_unlock(rlock_mutex *m, rlock_status *removed)
{
    const char *args[1];
    size_t lens[1];
    redisReply *r = NULL;
    rlock_status dummy;
    int rc;

    if (!m)
        return rlock__fail(NULL, RLOCK_EINVAL, "mutex is NULL");
    rlock__client_after_fork_check(m->c);
    if (!removed)
        removed = &dummy;
    args[0] = m->channel;
    lens[0] = m->channel_len;
    rc = rlock__eval(m->c, RLOCK__S_FORCE, &r, RLOCK__K_COUNT,
                     (const char **)m->keys, m->key_lens, 1, args, lens);
    if (rc != RLOCK_OK)
        return rc;
    memset(removed, 0, sizeof *removed);
    removed->lease_ms = -1;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 3) {
        copy_holder(removed, r->element[0]);
        removed->held = 1;
        removed->count = str_int(r->element[1]);
        removed->token = (uint64_t)str_int(r->element[2]);
        removed->last_token = removed->token;
    } else if (r->type != REDIS_REPLY_NIL) {
        freeReplyObject(r);
        return rlock__fail(m->c, RLOCK_EPROTO,
                           "unexpected reply to the force script");
    }
    freeReplyObject(r);
    return RLOCK_OK;
}

int rlock_client_ping(rlock_client *c, rlock_server_info *info)
{
    const char *ping[1] = {"PING"}, *inf[2] = {"INFO", "server"};
    redisContext *ctx;
    redisReply *r = NULL;
    int64_t t0;
    int rc;

    if (!c || !info)
        return rlock__fail(c, RLOCK_EINVAL, "client and info must not be NULL");
    rlock__client_after_fork_check(c);
    memset(info, 0, sizeof *info);
    if ((rc = rlock__conn_get(c, &ctx)) != RLOCK_OK)
        return rc;
    t0 = rlock__now_ns();
    r = redisCommandArgv(ctx, 1, ping, NULL);
    info->rtt_us = (rlock__now_ns() - t0) / 1000;
    if (!r) {
        rc = rlock__ctx_error(c, ctx, "PING");
        rlock__conn_put(c, ctx, 1);
        return rc;
    }
    if (r->type == REDIS_REPLY_ERROR)
        rc = rlock__reply_error(c, r);
    freeReplyObject(r);
    if (rc == RLOCK_OK) {
        r = redisCommandArgv(ctx, 2, inf, NULL);
        if (!r) {
            rc = rlock__ctx_error(c, ctx, "INFO");
            rlock__conn_put(c, ctx, 1);
            return rc;
        }
        if (r->type == REDIS_REPLY_STRING) {
            const char *v = strstr(r->str, "redis_version:");
            if (v)
                sscanf(v + 14, "%31[^\r\n]", info->version);
        } else if (r->type == REDIS_REPLY_ERROR) {
            rc = rlock__reply_error(c, r);
        }
        freeReplyObject(r);
    }
    rlock__conn_put(c, ctx, 0);
    return rc;
}

void rlock_client_cancel_waits(rlock_client *c)
{
    rlock__waiter *w;

    if (!c)
        return;
    pthread_mutex_lock(&c->mu);
    c->cancel_gen++;
    for (w = c->waiters; w; w = w->next) {
        w->woken = 1;
        pthread_cond_signal(&w->cv);
    }
    pthread_mutex_unlock(&c->mu);
}
