/*
 * The token layout (RLOCK_LAYOUT_TOKEN): a lock shared with libraries that
 * keep it as one string key set with SET NX PX (redis-py's Lock,
 * node-redlock, redsync, the usual PHP and Go snippets). The scripts are in
 * scripts.c; what differs from rlock's own layout is here: acquisition
 * without a queue, release by compare-and-delete, and the operators'
 * status and forced release. Re-entry is counted by the client and waiting
 * is by retries (mutex.c, wait.c): these peers publish nothing.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "reply.h"

/* Gives back whatever hold this thread's owner has: the attempt whose
 * reply was lost or came too late took it. Best effort: if this fails
 * too, the key expires with its lease. */
static void undo(rlock_mutex *m, const char *owner, size_t owner_len)
{
    redisReply *r = NULL;
    const char *args[1] = {owner};
    size_t lens[1] = {owner_len};

    if (rlock__eval(m->c, RLOCK__S_TK_CANCEL, &r, 1, (const char **)m->keys,
                    m->key_lens, 1, args, lens) == RLOCK_OK)
        freeReplyObject(r);
}

int rlock__tk_acquire(rlock_mutex *m, int64_t *hint_ms)
{
    rlock_client *c = m->c;
    uint64_t thread = rlock__thread_number();
    int64_t lease =
        m->opts.lease_ms > 0 ? m->opts.lease_ms : c->opts.watchdog_lease_ms;
    char owner[RLOCK__OWNER_MAX], lease_s[24];
    const char *args[2] = {owner, lease_s};
    size_t lens[2];
    redisReply *r = NULL;
    rlock__acquired a;
    int64_t t0;
    int rc;

    lens[0] = rlock__owner(c, thread, owner);
    lens[1] = (size_t)snprintf(lease_s, sizeof lease_s, "%" PRId64, lease);
    t0 = rlock__now_ns();
    rc = rlock__eval(c, RLOCK__S_TK_ACQUIRE, &r, 2, (const char **)m->keys,
                     m->key_lens, 2, args, lens);
    if (rc != RLOCK_OK) {
        if (rlock__outcome_unknown(rc))
            undo(m, owner, lens[0]);
        return rc;
    }
    rc = rlock__parse_acquire(r, &a);
    freeReplyObject(r);
    if (rc != RLOCK_OK || a.status < 0)
        return rlock__fail(c, RLOCK_EPROTO,
                           "unexpected reply to the token acquire script");
    if (a.status == 0) {
        if (hint_ms)
            *hint_ms = a.hint_ms;
        return rlock__fail(c, RLOCK_EBUSY, "lock is held");
    }
    if (rlock__now_ns() - t0 >= lease * RLOCK__NS_PER_MS) {
        undo(m, owner, lens[0]);
        if (hint_ms)
            *hint_ms = 0;
        return rlock__fail(c, RLOCK_EBUSY,
                           "reply arrived after the lease had ended");
    }
    pthread_mutex_lock(&c->mu);
    rc = rlock__hold_record(m, thread, a.token, 1, t0, lease);
    pthread_mutex_unlock(&c->mu);
    if (rc != RLOCK_OK) {
        undo(m, owner, lens[0]);
        return rc;
    }
    return rlock__sync_new_hold(m);
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

static void fill(rlock_status *st, const char *v, int64_t pttl)
{
    memset(st, 0, sizeof *st);
    st->lease_ms = -1;
    if (!v || !*v)
        return;
    st->held = 1;
    st->count = 1;
    st->lease_ms = pttl;
    st->token = rlock__token_value(v);
    snprintf(st->holder, sizeof st->holder, "%s", v);
}

int rlock__tk_status(rlock_mutex *m, rlock_status *st)
{
    redisReply *r = NULL;
    int rc = rlock__eval(m->c, RLOCK__S_TK_STATUS, &r, 2,
                         (const char **)m->keys, m->key_lens, 0, NULL, NULL);

    if (rc != RLOCK_OK)
        return rc;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
        r->element[0]->type != REDIS_REPLY_STRING ||
        r->element[1]->type != REDIS_REPLY_INTEGER ||
        r->element[2]->type != REDIS_REPLY_STRING) {
        freeReplyObject(r);
        return rlock__fail(m->c, RLOCK_EPROTO,
                           "unexpected reply to the token status script");
    }
    fill(st, r->element[0]->str, r->element[1]->integer);
    st->last_token = strtoull(r->element[2]->str, NULL, 10);
    freeReplyObject(r);
    return RLOCK_OK;
}

int rlock__tk_force(rlock_mutex *m, rlock_status *removed)
{
    redisReply *r = NULL;
    int rc = rlock__eval(m->c, RLOCK__S_TK_FORCE, &r, 1, (const char **)m->keys,
                         m->key_lens, 0, NULL, NULL);

    if (rc != RLOCK_OK)
        return rc;
    fill(removed, r->type == REDIS_REPLY_STRING ? r->str : NULL, 0);
    freeReplyObject(r);
    return RLOCK_OK;
}
