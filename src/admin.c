/* SPDX-License-Identifier: BSD-3-Clause */
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
#include "reply.h"

int rlock_mutex_status(rlock_mutex *m, rlock_status *st)
{
    redisReply *r = NULL;
    int rc;

    if (!m || !st)
        return rlock__fail(m ? m->c : NULL, RLOCK_EINVAL,
                           "mutex and status must not be NULL");
    rlock__client_after_fork_check(m->c);
    if (m->c->nnodes)
        return rlock__rl_status(m, st);
    if (m->opts.layout != RLOCK_LAYOUT_NATIVE)
        return rlock__lay_status(m, st);
    rc = rlock__eval(m->c, RLOCK__S_STATUS, &r, RLOCK__K_COUNT,
                     (const char **)m->keys, m->key_lens, 0, NULL, NULL);
    if (rc != RLOCK_OK)
        return rc;
    if ((rc = rlock__not_a_lock(m, r, NULL)) == RLOCK_OK)
        rc = rlock__parse_status(r, st) == RLOCK_OK ? RLOCK_OK : RLOCK_EPROTO;
    freeReplyObject(r);
    if (rc == RLOCK_ENOTLOCK)
        return rc;
    if (rc != RLOCK_OK)
        return rlock__fail(m->c, RLOCK_EPROTO,
                           "unexpected reply to the status script");
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
    if (m->c->nnodes)
        return rlock__rl_force(m, removed);
    if (m->opts.layout != RLOCK_LAYOUT_NATIVE)
        return rlock__lay_force(m, removed);
    args[0] = m->channel;
    lens[0] = m->channel_len;
    rc = rlock__eval(m->c, RLOCK__S_FORCE, &r, RLOCK__K_COUNT,
                     (const char **)m->keys, m->key_lens, 1, args, lens);
    if (rc != RLOCK_OK)
        return rc;
    if ((rc = rlock__not_a_lock(m, r, NULL)) == RLOCK_OK)
        rc = rlock__parse_force(r, removed);
    freeReplyObject(r);
    if (rc == RLOCK_ENOTLOCK)
        return rc;
    if (rc != RLOCK_OK)
        return rlock__fail(m->c, RLOCK_EPROTO,
                           "unexpected reply to the force script");
    return RLOCK_OK;
}

int rlock_client_ping(rlock_client *c, rlock_server_info *info)
{
    const char *ping[1] = {"PING"}, *inf[2] = {"INFO", "server"};
    rlock__conn *ctx;
    redisReply *r = NULL;
    int64_t t0, deadline;
    int rc;

    if (!c || !info)
        return rlock__fail(c, RLOCK_EINVAL, "client and info must not be NULL");
    rlock__client_after_fork_check(c);
    memset(info, 0, sizeof *info);
    if (c->nnodes)
        return rlock__rl_ping(c, info);
    if (c->cluster)
        return rlock__cluster_ping(c, info);
    if ((rc = rlock__conn_get(c, &ctx)) != RLOCK_OK)
        return rc;
    deadline = rlock__deadline(c->opts.command_timeout_ms);
    t0 = rlock__now_ns();
    rc = rlock__command(c, ctx, &r, 1, ping, NULL, deadline, "PING");
    info->rtt_us = (rlock__now_ns() - t0) / 1000;
    if (rc != RLOCK_OK) {
        rlock__conn_put(c, ctx, 1);
        return rc;
    }
    if (r->type == REDIS_REPLY_ERROR)
        rc = rlock__reply_error(c, r);
    freeReplyObject(r);
    if (rc == RLOCK_OK) {
        rc = rlock__command(c, ctx, &r, 2, inf, NULL, deadline, "INFO");
        if (rc != RLOCK_OK) {
            rlock__conn_put(c, ctx, 1);
            return rc;
        }
        if (r->type == REDIS_REPLY_STRING) {
            /* Valkey reports its own version beside the Redis one it is
             * compatible with, and its name in server_name. */
            rlock__parse_info_field(r, "valkey_version", info->version,
                                    sizeof info->version);
            if (!info->version[0])
                rlock__parse_info_field(r, "redis_version", info->version,
                                        sizeof info->version);
            rlock__parse_info_field(r, "server_name", info->server,
                                    sizeof info->server);
            if (!info->server[0])
                snprintf(info->server, sizeof info->server, "redis");
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
