/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The lock operations over Redlock's nodes (redlock.c runs the requests):
 * acquire with a majority inside the validity, fencing tokens chosen over
 * the nodes, release everywhere, extend and renew by majority, and the
 * operators' status and forced release.
 *
 * Every request goes to every node, also to the nodes that seemed to fail
 * before: a node that did not answer may still have done it.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "reply.h"

static int64_t lease_of(const rlock_mutex *m)
{
    return m->opts.lease_ms > 0 ? m->opts.lease_ms
                                : m->c->opts.watchdog_lease_ms;
}

/* Gives back, on every node, whatever the acquisition nonce took. */
static void undo(rlock_mutex *m, const char *owner, size_t owner_len,
                 const char *nonce, size_t nonce_len)
{
    rlock__node_result res[RLOCK__NODES_MAX];
    const char *args[3] = {owner, m->channel, nonce};
    size_t lens[3] = {owner_len, m->channel_len, nonce_len};

    rlock__rl_eval(m->c, RLOCK__S_CANCEL, RLOCK__K_COUNT,
                   (const char **)m->keys, m->key_lens, 3, args, lens, NULL,
                   res);
    rlock__rl_results_free(m->c, res);
}

/* Second round: the chosen token on the nodes that hold with less. Clears
 * got[i] where that failed. */
static void retoken(rlock_mutex *m, const char *owner, size_t owner_len,
                    const char *nonce, size_t nonce_len, uint64_t token,
                    const uint64_t *tok, int *got)
{
    rlock_client *c = m->c;
    rlock__node_result res[RLOCK__NODES_MAX];
    int which[RLOCK__NODES_MAX], i, any = 0;
    char token_s[24];
    const char *args[3] = {owner, nonce, token_s};
    size_t lens[3] = {owner_len, nonce_len, 0};

    for (i = 0; i < c->nnodes; i++) {
        which[i] = got[i] && tok[i] < token;
        any |= which[i];
    }
    if (!any)
        return;
    lens[2] = (size_t)snprintf(token_s, sizeof token_s, "%" PRIu64, token);
    rlock__rl_eval(c, RLOCK__S_RETOKEN, 2, (const char **)m->keys, m->key_lens,
                   3, args, lens, which, res);
    for (i = 0; i < c->nnodes; i++) {
        int done;
        if (!which[i])
            continue;
        done = res[i].rc == RLOCK_OK && res[i].reply &&
               res[i].reply->type == REDIS_REPLY_INTEGER &&
               res[i].reply->integer == 1;
        if (!done)
            got[i] = 0;
    }
    rlock__rl_results_free(c, res);
}

int rlock__rl_acquire(rlock_mutex *m, int64_t *hint_ms)
{
    rlock_client *c = m->c;
    rlock__node_result res[RLOCK__NODES_MAX];
    uint64_t thread = rlock__thread_number(), tok[RLOCK__NODES_MAX] = {0};
    uint64_t token = 0, nonce = rlock__new_nonce(c);
    int64_t lease = lease_of(m), t0, hint = -1;
    int got[RLOCK__NODES_MAX] = {0}, i, held = 0, busy = 0, rc;
    rlock__acquire_argv aa;
    const char *owner, *nonce_s;
    size_t owner_len, nonce_len;

    rlock__acquire_args(m, thread, 't', nonce, 0, 0, &aa);
    owner = aa.owner;
    owner_len = aa.lens[0];
    nonce_s = aa.nonce;
    nonce_len = aa.lens[5];

    /* The validity is counted from before the first request left. */
    t0 = rlock__now_ns();
    if (rlock__rl_eval(c, RLOCK__S_ACQUIRE, RLOCK__K_COUNT,
                       (const char **)m->keys, m->key_lens, 8, aa.args, aa.lens,
                       NULL, res) < 0)
        return RLOCK_ENOMEM;
    for (i = 0; i < c->nnodes; i++) {
        rlock__acquired a;
        if (res[i].rc != RLOCK_OK)
            continue;
        if (rlock__parse_acquire(res[i].reply, &a) != RLOCK_OK) {
            res[i].rc = RLOCK_EPROTO;
            snprintf(res[i].err, sizeof res[i].err,
                     "%s: unexpected reply to the acquire script",
                     rlock__rl_node_name(c, i));
            continue;
        }
        if (a.status == 1) {
            got[i] = 1;
            tok[i] = a.token;
            if (a.token > token)
                token = a.token;
        } else {
            busy++;
            if (a.hint_ms > hint)
                hint = a.hint_ms;
        }
    }
    rlock__rl_results_free(c, res);
    for (i = 0; i < c->nnodes; i++)
        held += got[i];
    if (held >= c->quorum) {
        retoken(m, owner, owner_len, nonce_s, nonce_len, token, tok, got);
        for (held = 0, i = 0; i < c->nnodes; i++)
            held += got[i];
    }
    if (held >= c->quorum) {
        int64_t valid_until =
            t0 + lease * RLOCK__NS_PER_MS - rlock__rl_drift_ns(c, lease);
        if (rlock__now_ns() < valid_until) {
            rlock__hold *h;
            pthread_mutex_lock(&c->mu);
            rc = rlock__hold_record(m, thread, token, 1, t0, lease);
            h = rc == RLOCK_OK ? rlock__hold_find(c, m, thread) : NULL;
            if (h)
                h->valid_until = valid_until;
            pthread_mutex_unlock(&c->mu);
            if (rc == RLOCK_OK)
                return RLOCK_OK;
        } else {
            rc = rlock__fail(c, RLOCK_EQUORUM,
                             "a majority took the lock, but only after its "
                             "validity had ended (%" PRId64 " ms)",
                             (rlock__now_ns() - t0) / RLOCK__NS_PER_MS);
        }
        undo(m, owner, owner_len, nonce_s, nonce_len);
        return rc;
    }
    /* Not a majority: give back what was taken, on every node. */
    if (held > 0 || busy < c->nnodes)
        undo(m, owner, owner_len, nonce_s, nonce_len);
    if (hint_ms)
        *hint_ms = hint;
    if (busy > c->nnodes - c->quorum)
        return rlock__fail(c, RLOCK_EBUSY, "lock is held on %d of %d nodes",
                           busy, c->nnodes);
    return rlock__rl_quorum_error(c, "acquire", held, res, got);
}

int rlock__rl_release(rlock_mutex *m, uint64_t token)
{
    rlock_client *c = m->c;
    rlock__node_result res[RLOCK__NODES_MAX];
    char owner[RLOCK__OWNER_MAX], token_s[24];
    const char *args[4] = {owner, token_s, m->channel, "1"};
    size_t lens[4];
    int i, released = 0, gone = 0, answered;

    lens[0] = rlock__owner(c, rlock__thread_number(), owner);
    lens[1] = (size_t)snprintf(token_s, sizeof token_s, "%" PRIu64, token);
    lens[2] = m->channel_len;
    lens[3] = 1;
    answered = rlock__rl_eval(c, RLOCK__S_RELEASE, RLOCK__K_COUNT,
                              (const char **)m->keys, m->key_lens, 4, args,
                              lens, NULL, res);
    for (i = 0; i < c->nnodes; i++) {
        int64_t n;
        if (res[i].rc == RLOCK_OK &&
            rlock__parse_release(res[i].reply, &n) == RLOCK_OK)
            *(n < 0 ? &gone : &released) += 1;
    }
    if (gone > c->nnodes - c->quorum) {
        rlock__rl_results_free(c, res);
        return rlock__fail(c, RLOCK_ELOST,
                           "the hold was gone on %d of %d nodes (expired or "
                           "taken); nothing of another owner was released",
                           gone, c->nnodes);
    }
    if (answered < c->quorum) {
        int rc = rlock__rl_quorum_error(c, "release", answered, res, NULL);
        rlock__rl_results_free(c, res);
        return rc;
    }
    rlock__rl_results_free(c, res);
    return RLOCK_OK;
}

int rlock__rl_extend(rlock_mutex *m, uint64_t token, int64_t lease_ms)
{
    rlock_client *c = m->c;
    rlock__node_result res[RLOCK__NODES_MAX];
    char owner[RLOCK__OWNER_MAX], token_s[24], lease_s[24];
    const char *args[3] = {owner, token_s, lease_s};
    size_t lens[3];
    int i, extended = 0, gone = 0, rc;

    lens[0] = rlock__owner(c, rlock__thread_number(), owner);
    lens[1] = (size_t)snprintf(token_s, sizeof token_s, "%" PRIu64, token);
    lens[2] = (size_t)snprintf(lease_s, sizeof lease_s, "%" PRId64, lease_ms);
    rlock__rl_eval(c, RLOCK__S_EXTEND, 1, (const char **)m->keys, m->key_lens,
                   3, args, lens, NULL, res);
    for (i = 0; i < c->nnodes; i++) {
        int ok;
        if (res[i].rc == RLOCK_OK &&
            rlock__parse_extend(res[i].reply, &ok) == RLOCK_OK)
            *(ok ? &extended : &gone) += 1;
    }
    if (extended >= c->quorum)
        rc = 1;
    else if (gone > c->nnodes - c->quorum)
        rc = 0;
    else
        rc = rlock__rl_quorum_error(c, "extend", extended, res, NULL);
    rlock__rl_results_free(c, res);
    return rc;
}

int rlock__rl_renew(rlock_client *c, int n, const char **keys,
                    const size_t *key_lens, const char **args,
                    const size_t *arg_lens, int *outcome)
{
    rlock__node_result res[RLOCK__NODES_MAX];
    int ok[RLOCK__NODES_MAX], i, k;

    rlock__rl_eval(c, RLOCK__S_RENEW, n, keys, key_lens, 3 * n, args, arg_lens,
                   NULL, res);
    for (i = 0; i < c->nnodes; i++)
        ok[i] = res[i].rc == RLOCK_OK &&
                rlock__parse_renew(res[i].reply, (size_t)n) == RLOCK_OK;
    for (k = 0; k < n; k++) {
        int renewed = 0, gone = 0;
        for (i = 0; i < c->nnodes; i++)
            if (ok[i])
                *(rlock__renewed(res[i].reply, (size_t)k) ? &renewed : &gone) +=
                    1;
        /* 1: renewed on a majority; 0: a majority no longer has it; -1:
         * not known yet (try again). */
        outcome[k] = renewed >= c->quorum           ? 1
                     : gone > c->nnodes - c->quorum ? 0
                                                    : -1;
    }
    rlock__rl_results_free(c, res);
    return RLOCK_OK;
}

/* A node whose keys are not a lock (someone's data there) refuses the
 * operators' scripts: the call reports the first such node, and frees the
 * results. RLOCK_OK if none refused (results kept). */
static int refused(rlock_mutex *m, rlock__node_result *res)
{
    char where[80];
    int i, rc;

    for (i = 0; i < m->c->nnodes; i++) {
        if (res[i].rc != RLOCK_OK)
            continue;
        snprintf(where, sizeof where, " on node %s",
                 rlock__rl_node_name(m->c, i));
        if ((rc = rlock__not_a_lock(m, res[i].reply, where)) != RLOCK_OK) {
            rlock__rl_results_free(m->c, res);
            return rc;
        }
    }
    return RLOCK_OK;
}

int rlock__rl_status(rlock_mutex *m, rlock_status *st)
{
    rlock_client *c = m->c;
    rlock__node_result res[RLOCK__NODES_MAX];
    rlock_status s[RLOCK__NODES_MAX];
    int ok[RLOCK__NODES_MAX] = {0}, i, k, answered = 0;

    rlock__rl_eval(c, RLOCK__S_STATUS, RLOCK__K_COUNT, (const char **)m->keys,
                   m->key_lens, 0, NULL, NULL, NULL, res);
    memset(st, 0, sizeof *st);
    st->lease_ms = -1;
    if ((i = refused(m, res)) != RLOCK_OK)
        return i;
    for (i = 0; i < c->nnodes; i++) {
        if (res[i].rc != RLOCK_OK ||
            rlock__parse_status(res[i].reply, &s[i]) != RLOCK_OK)
            continue;
        ok[i] = 1;
        answered++;
        if (s[i].last_token > st->last_token)
            st->last_token = s[i].last_token;
    }
    if (answered < c->quorum) {
        int rc = rlock__rl_quorum_error(c, "status", answered, res, NULL);
        rlock__rl_results_free(c, res);
        return rc;
    }
    rlock__rl_results_free(c, res);
    /* Held if a majority names the same owner and token; the lease is the
     * shortest of theirs. */
    for (i = 0; i < c->nnodes; i++) {
        int same = 0;
        int64_t lease = -1;
        if (!ok[i] || !s[i].held)
            continue;
        for (k = 0; k < c->nnodes; k++)
            if (ok[k] && s[k].held && s[k].token == s[i].token &&
                strcmp(s[k].holder, s[i].holder) == 0) {
                same++;
                if (lease < 0 || s[k].lease_ms < lease)
                    lease = s[k].lease_ms;
            }
        if (same >= c->quorum) {
            uint64_t last = st->last_token;
            *st = s[i];
            st->lease_ms = lease;
            st->last_token = last;
            st->waiters = 0;
            break;
        }
    }
    return RLOCK_OK;
}

int rlock__rl_force(rlock_mutex *m, rlock_status *removed)
{
    rlock_client *c = m->c;
    rlock__node_result res[RLOCK__NODES_MAX];
    const char *args[1] = {m->channel};
    size_t lens[1] = {m->channel_len};
    int i, answered;

    answered = rlock__rl_eval(c, RLOCK__S_FORCE, RLOCK__K_COUNT,
                              (const char **)m->keys, m->key_lens, 1, args,
                              lens, NULL, res);
    memset(removed, 0, sizeof *removed);
    removed->lease_ms = -1;
    if ((i = refused(m, res)) != RLOCK_OK)
        return i;
    for (i = 0; i < c->nnodes; i++) {
        rlock_status r;
        if (res[i].rc == RLOCK_OK &&
            rlock__parse_force(res[i].reply, &r) == RLOCK_OK && r.held &&
            !removed->held)
            *removed = r;
    }
    if (answered < c->quorum) {
        int rc = rlock__rl_quorum_error(c, "force unlock", answered, res, NULL);
        rlock__rl_results_free(c, res);
        return rc;
    }
    rlock__rl_results_free(c, res);
    return RLOCK_OK;
}

int rlock__rl_ping(rlock_client *c, rlock_server_info *info)
{
    int i, answered = 0, rc = RLOCK_OK;
    char errs[400] = "";
    size_t len = 0;

    /* One node after the other: an operator's call, each bounded by the
     * per-node timeout. The version is the first node's; the round trip
     * the slowest answer's. */
    memset(info, 0, sizeof *info);
    for (i = 0; i < c->nnodes; i++) {
        rlock_server_info one;
        rlock_client *sub = rlock__rl_node_client(c, i);
        rc = rlock_client_ping(sub, &one);
        if (rc == RLOCK_OK) {
            if (!answered)
                memcpy(info->version, one.version, sizeof info->version);
            if (one.rtt_us > info->rtt_us)
                info->rtt_us = one.rtt_us;
            answered++;
        } else if (len < sizeof errs) {
            len += (size_t)snprintf(errs + len, sizeof errs - len, "; %s: %s",
                                    rlock__rl_node_name(c, i),
                                    rlock_client_errmsg(sub));
        }
    }
    if (answered < c->quorum)
        return rlock__fail(c, RLOCK_EQUORUM,
                           "ping: %d of %d nodes (a majority is %d)%s",
                           answered, c->nnodes, c->quorum, errs);
    return RLOCK_OK;
}
