/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The operators' calls: a lock's state and its administrative release,
 * for every layout and backend.
 *
 * They act only on keys shaped like a lock of the mutex's layout: the
 * layout's scripts refuse anything else ({0, what it is}), and then
 * nothing is changed and the call says what the key is. Over several
 * nodes, a node that refuses is reported; the state is what a quorum of
 * nodes agrees on (the same holder and token), and the release removes
 * the lock wherever it is held.
 */
#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "core/handles.h"
#include "core/reply.h"
#include "engine/engine.h"
#include "engine/hold_ops.h"
#include "layout/layout.h"

/* If any node refused (the key is someone's data), records
 * RLOCK_ENOTLOCK naming the first such and returns it. */
static int refused(rlock__call *call, rlock_mutex *m, const rlock__results *res)
{
    char why[128], label[300];
    int i;

    for (i = 0; i < res->n; i++) {
        if (res->r[i].rc != RLOCK_OK ||
            !rlock__parse_refusal(res->r[i].reply, why, sizeof why))
            continue;
        /* The name is the caller's own bytes; printed as given, up to a
         * NUL (rlock(1) escapes what it prints). */
        return rlock__fail(
            call, RLOCK_ENOTLOCK,
            "'%.*s' is not a lock of the %s layout%s: %s; "
            "left untouched",
            (int)m->name_len, m->name, m->layout->name,
            m->c->backend->node_label(m->c, i, label, sizeof label), why);
    }
    return RLOCK_OK;
}

int rlock__status(rlock__call *call, rlock_mutex *m, rlock_status *st)
{
    rlock_client *c = m->c;
    rlock_status s[RLOCK__NODES_MAX];
    int ok[RLOCK__NODES_MAX] = {0};
    rlock__results res;
    rlock__req req;
    int i, k, answered = 0, rc;

    memset(st, 0, sizeof *st);
    st->lease_ms = -1;
    m->layout->status(m, &req);
    if ((rc = rlock__send(call, m, &req, 0, &res)) == RLOCK_OK)
        rc = refused(call, m, &res);
    for (i = 0; rc == RLOCK_OK && i < res.n; i++) {
        if (res.r[i].rc != RLOCK_OK)
            continue;
        if (m->layout->decode_status(res.r[i].reply, &s[i]) != RLOCK_OK) {
            res.r[i].rc = rlock__err_set(&res.r[i].err, RLOCK_EPROTO,
                                         "unexpected reply to the %s script",
                                         req.script->name);
            continue;
        }
        ok[i] = 1;
        if (!answered++ || s[i].waiters < st->waiters)
            st->waiters = s[i].waiters;
        if (s[i].last_token > st->last_token)
            st->last_token = s[i].last_token;
    }
    if (rc == RLOCK_OK && answered < c->quorum)
        rc = c->backend->failure(c, "status", answered, &res, NULL, call);
    /* Held if a quorum names the same owner and token; the lease is the
     * shortest of theirs. */
    for (i = 0; rc == RLOCK_OK && i < res.n; i++) {
        int same = 0;
        int64_t lease = -1, waiters = 0;
        if (!ok[i] || !s[i].held)
            continue;
        for (k = 0; k < res.n; k++)
            if (ok[k] && s[k].held && s[k].token == s[i].token &&
                strcmp(s[k].holder, s[i].holder) == 0) {
                if (!same++ || s[k].waiters < waiters)
                    waiters = s[k].waiters;
                if (lease < 0 || s[k].lease_ms < lease)
                    lease = s[k].lease_ms;
            }
        if (same >= c->quorum) {
            uint64_t last = st->last_token;
            *st = s[i];
            st->lease_ms = lease;
            st->last_token = last;
            st->waiters = waiters;
            break;
        }
    }
    rlock__results_free(&res);
    rlock__req_free(&req);
    return rc;
}

int rlock__force(rlock__call *call, rlock_mutex *m, unsigned flags,
                 rlock_status *removed)
{
    rlock_client *c = m->c;
    char unnotified[200] = "";
    rlock__results res;
    rlock__req req;
    int i, answered = 0, rc;

    memset(removed, 0, sizeof *removed);
    removed->lease_ms = -1;
    m->layout->force(m, flags, &req);
    if ((rc = rlock__send(call, m, &req, 0, &res)) == RLOCK_OK)
        rc = refused(call, m, &res);
    for (i = 0; rc == RLOCK_OK && i < res.n; i++) {
        rlock_status r;
        char why[200];
        if (res.r[i].rc != RLOCK_OK)
            continue;
        if (m->layout->decode_force(res.r[i].reply, &r, why, sizeof why) !=
            RLOCK_OK) {
            res.r[i].rc = rlock__err_set(&res.r[i].err, RLOCK_EPROTO,
                                         "unexpected reply to the %s script",
                                         req.script->name);
            continue;
        }
        answered++;
        if (r.held && !removed->held)
            *removed = r;
        if (why[0] && !unnotified[0])
            snprintf(unnotified, sizeof unnotified, "%s", why);
    }
    if (rc == RLOCK_OK && answered < c->quorum)
        rc = c->backend->failure(c, "force unlock", answered, &res, NULL, call);
    if (rc == RLOCK_OK && unnotified[0])
        rc = rlock__fail(call, RLOCK_ENOTIFY,
                         "removed; its waiters were not notified and wake "
                         "by their own timers: %s",
                         unnotified);
    rlock__results_free(&res);
    rlock__req_free(&req);
    return rc;
}
