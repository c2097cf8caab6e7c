/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The peers' layouts: locks kept the way other libraries keep them, so
 * that rlock and those libraries exclude each other.
 *
 *  - The token layout (RLOCK_LAYOUT_TOKEN): one string key set with SET
 *    NX PX (redis-py's Lock, node-redlock, redsync, the usual PHP and Go
 *    snippets), released by compare-and-delete. Re-entry is counted by
 *    the client and waiting is by retries (mutex.c, wait.c): these peers
 *    publish nothing.
 *  - The Redisson layout (RLOCK_LAYOUT_REDISSON): Redisson's RLock, a hash
 *    with the owner's field holding the hold count, and a message on
 *    Redisson's channel at the final release. Re-entry is counted in the
 *    hash, where Redisson counts its own, and waiters are woken by the
 *    message, whichever side sends it (wait.c, subscriber.c).
 *
 * The scripts are in scripts.c, in the same order and with the same
 * arguments for both layouts, so that one piece of C drives either; what
 * differs from rlock's own layout is here: acquisition without a queue,
 * the undo of an attempt whose reply was lost, and the operators' status
 * and forced release.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "reply.h"

_Static_assert(RLOCK__S_RS_FORCE - RLOCK__S_RS_ACQUIRE ==
                   RLOCK__S_TK_FORCE - RLOCK__S_TK_ACQUIRE,
               "the two layouts' scripts are listed in the same order");

static int redisson(const rlock_mutex *m)
{
    return m->opts.layout == RLOCK_LAYOUT_REDISSON;
}

enum rlock__script rlock__lay_script(const rlock_mutex *m,
                                     enum rlock__script tk)
{
    return redisson(m) ? (enum rlock__script)(
                             tk + (RLOCK__S_RS_ACQUIRE - RLOCK__S_TK_ACQUIRE))
                       : tk;
}

static int eval(rlock_mutex *m, enum rlock__script tk, redisReply **r,
                int nkeys, int nargs, const char **args, const size_t *lens)
{
    return rlock__eval(m->c, rlock__lay_script(m, tk), r, nkeys,
                       (const char **)m->keys, m->key_lens, nargs, args, lens);
}

/* Gives back whatever hold this thread's owner has: the attempt whose
 * reply was lost or came too late took it. Best effort: if this fails
 * too, the key expires with its lease. */
static void undo(rlock_mutex *m, const char *owner, size_t owner_len)
{
    redisReply *r = NULL;
    const char *args[2] = {owner, m->channel};
    size_t lens[2] = {owner_len, m->channel_len};

    if (eval(m, RLOCK__S_TK_CANCEL, &r, 1, 2, args, lens) == RLOCK_OK)
        freeReplyObject(r);
}

int rlock__lay_acquire(rlock_mutex *m, int64_t *hint_ms, int64_t had_count,
                       uint64_t had_token)
{
    rlock_client *c = m->c;
    uint64_t thread = rlock__thread_number();
    int64_t lease =
        m->opts.lease_ms > 0 ? m->opts.lease_ms : c->opts.watchdog_lease_ms;
    char owner[RLOCK__OWNER_MAX], lease_s[24], count_s[24], token_s[24];
    const char *args[5] = {owner, lease_s, count_s, token_s, c->who + 1};
    size_t lens[5];
    redisReply *r = NULL;
    rlock__acquired a;
    rlock__hold *h;
    int64_t t0;
    int rc, fresh = had_count == 0;

    lens[0] = rlock__owner_of(m, thread, owner);
    lens[1] = (size_t)snprintf(lease_s, sizeof lease_s, "%" PRId64, lease);
    lens[2] = (size_t)snprintf(count_s, sizeof count_s, "%" PRId64, had_count);
    lens[3] = (size_t)snprintf(token_s, sizeof token_s, "%" PRIu64, had_token);
    lens[4] = strlen(args[4]); /* "host/pid" for the Redisson layout */
    /* The lease is counted from before the request left (see mutex.c). */
    t0 = rlock__now_ns();
    rc = eval(m, RLOCK__S_TK_ACQUIRE, &r, 2, 5, args, lens);
    if (rc != RLOCK_OK) {
        /* A lost reply may hide a success: undo it. A re-entry needs no
         * undo: its count is set, not added, so the owner's next request
         * makes Redis agree with the client again. */
        if (fresh && rlock__outcome_unknown(rc))
            undo(m, owner, lens[0]);
        return rc;
    }
    rc = rlock__parse_acquire(r, &a);
    freeReplyObject(r);
    if (rc != RLOCK_OK || (fresh && a.status < 0))
        return rlock__fail(c, RLOCK_EPROTO,
                           "unexpected reply to the %s acquire script",
                           redisson(m) ? "Redisson layout's" : "token");
    if (a.status < 0) {
        pthread_mutex_lock(&c->mu);
        if ((h = rlock__hold_find(c, m, thread)) != NULL)
            rlock__hold_remove(c, h);
        pthread_mutex_unlock(&c->mu);
        return rlock__fail(c, RLOCK_ELOST,
                           "re-entry found the hold gone (expired or taken)");
    }
    if (a.status == 0) {
        if (hint_ms)
            *hint_ms = a.hint_ms;
        return rlock__fail(c, RLOCK_EBUSY, "lock is held");
    }
    if (rlock__now_ns() - t0 >= lease * RLOCK__NS_PER_MS) {
        if (fresh)
            undo(m, owner, lens[0]);
        if (hint_ms)
            *hint_ms = 0;
        return rlock__fail(c, RLOCK_EBUSY,
                           "reply arrived after the lease had ended");
    }
    pthread_mutex_lock(&c->mu);
    rc = rlock__hold_record(m, thread, a.token, a.count, t0, lease);
    pthread_mutex_unlock(&c->mu);
    if (rc != RLOCK_OK) {
        if (fresh)
            undo(m, owner, lens[0]);
        return rc;
    }
    return fresh ? rlock__sync_new_hold(m) : RLOCK_OK;
}

int rlock__tk_release(rlock_mutex *m, uint64_t thread, uint64_t token)
{
    rlock_client *c = m->c;
    char owner[RLOCK__OWNER_MAX], token_s[24];
    const char *args[2] = {owner, token_s};
    size_t lens[2];
    redisReply *r = NULL;
    int64_t n = 0;
    int rc;

    lens[0] = rlock__owner(c, thread, owner);
    lens[1] = (size_t)snprintf(token_s, sizeof token_s, "%" PRIu64, token);
    rc = rlock__eval(c, RLOCK__S_TK_RELEASE, &r, 1, (const char **)m->keys,
                     m->key_lens, 2, args, lens);
    if (rc != RLOCK_OK)
        return rc;
    rc = rlock__parse_release(r, &n);
    freeReplyObject(r);
    if (rc != RLOCK_OK)
        return rlock__fail(c, RLOCK_EPROTO,
                           "unexpected reply to the token release script");
    if (n < 0)
        return rlock__fail(c, RLOCK_ELOST,
                           "the hold had expired or was taken by another "
                           "owner; nothing was released");
    return RLOCK_OK;
}

/* The token layout's value v (NULL: no key) into st. The script has
 * refused every value that cannot be a lock (empty, NUL, spaces, ...). */
static void fill(rlock_status *st, const char *v, int64_t pttl)
{
    memset(st, 0, sizeof *st);
    st->lease_ms = -1;
    if (!v)
        return;
    st->held = 1;
    st->count = 1;
    st->lease_ms = pttl;
    st->token = rlock__token_value(v);
    snprintf(st->holder, sizeof st->holder, "%s", v);
    rlock__parse_identity(st, v);
}

int rlock__lay_status(rlock_mutex *m, rlock_status *st)
{
    redisReply *r = NULL;
    int rc = eval(m, RLOCK__S_TK_STATUS, &r, 2, 0, NULL, NULL);

    if (rc != RLOCK_OK)
        return rc;
    if ((rc = rlock__not_a_lock(m, r, NULL)) != RLOCK_OK) {
        freeReplyObject(r);
        return rc;
    }
    if (redisson(m)) {
        /* The snapshot has the shape of rlock's own status script's. */
        rc = rlock__parse_status(r, st);
    } else if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
               r->element[0]->type != REDIS_REPLY_STRING ||
               r->element[1]->type != REDIS_REPLY_INTEGER ||
               r->element[2]->type != REDIS_REPLY_STRING) {
        rc = RLOCK_EPROTO;
    } else {
        fill(st, r->element[0]->len ? r->element[0]->str : NULL,
             r->element[1]->integer);
        st->last_token = strtoull(r->element[2]->str, NULL, 10);
    }
    freeReplyObject(r);
    if (rc != RLOCK_OK)
        return rlock__fail(m->c, RLOCK_EPROTO,
                           "unexpected reply to the %s status script",
                           redisson(m) ? "Redisson layout's" : "token");
    return RLOCK_OK;
}

int rlock__lay_force(rlock_mutex *m, rlock_status *removed)
{
    const char *args[1] = {m->channel};
    size_t lens[1] = {m->channel_len};
    redisReply *r = NULL;
    int rc = eval(m, RLOCK__S_TK_FORCE, &r, 2, 1, args, lens);

    if (rc != RLOCK_OK)
        return rc;
    if ((rc = rlock__not_a_lock(m, r, NULL)) != RLOCK_OK) {
        freeReplyObject(r);
        return rc;
    }
    if (redisson(m))
        rc = rlock__parse_force(r, removed);
    else
        fill(removed, r->type == REDIS_REPLY_STRING ? r->str : NULL, 0);
    freeReplyObject(r);
    if (rc != RLOCK_OK)
        return rlock__fail(m->c, RLOCK_EPROTO,
                           "unexpected reply to the Redisson layout's force "
                           "script");
    return RLOCK_OK;
}
