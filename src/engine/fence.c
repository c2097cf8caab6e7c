/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The fencing token of a hold.
 *
 * Most holds learn their token from the acquisition. A lean acquisition
 * (the native layout's SET NX PX, taken while nobody contends the name
 * and nobody has asked this mutex for a token) draws none: Redis then
 * spends on the lock no more than a bare SET NX PX costs. The token is
 * drawn here, when the holder first asks, by the layout's fence script,
 * which draws it only while the hold is there and its lease lasts, and
 * keeps it with the hold. That is what makes it a fencing token: every
 * earlier holder's hold had ended before this one began, and each of
 * their tokens was drawn within its hold, so every one of them is smaller.
 *
 * Asking also marks the mutex: its later acquisitions draw their token at
 * once, in the fenced form, so a caller that uses tokens pays the round
 * trip once, not once per hold.
 */
#include "bg/driver.h"
#include "bg/notify.h"
#include "core/handles.h"
#include "core/reply.h"
#include "engine/engine.h"
#include "engine/hold_ops.h"
#include "engine/ops.h"
#include "layout/layout.h"
#include "util/clock.h"

/* Owner's hold of m as a fence request sees it (mu held): RLOCK_OK with
 * *token (0: to draw), *nonce and *serial; or why there is none. */
static int look(rlock__call *call, rlock_mutex *m, rlock__as owner,
                uint64_t *token, uint64_t *nonce, uint64_t *serial)
{
    rlock__hold *h = rlock__hold_find(&m->c->holds, m, owner.no);

    if (!h)
        return rlock__fail(call, RLOCK_ENOTOWNER,
                           "%s holds no lock of this name",
                           owner.obj ? "this owner" : "this thread");
    if (h->lost || h->valid_until <= rlock__now_ns())
        return rlock__fail(call, RLOCK_ELOST,
                           "the hold was lost or its lease ended before "
                           "its token was asked for");
    *token = h->token;
    *nonce = h->nonce;
    *serial = h->serial;
    return RLOCK_OK;
}

/* The hold is gone in Redis: lost, told to on_lost, and its unlock will
 * say so (mu held). */
static void lose(rlock_client *c, rlock_mutex *m, rlock__as owner,
                 uint64_t serial)
{
    rlock__hold *h = rlock__hold_find(&c->holds, m, owner.no);

    if (h && h->serial == serial)
        rlock__bg_lose(c, h, RLOCK_LOST_GONE,
                       "drawing its token found it gone in Redis");
}

void rlock__want_tokens(rlock_mutex *m)
{
    __atomic_store_n(&m->fenced, 1, __ATOMIC_RELAXED);
}

void rlock__tokens_on_demand(rlock_mutex *m)
{
    __atomic_store_n(&m->fenced, 0, __ATOMIC_RELAXED);
}

void rlock__fence_op_init(rlock__fence_op *f, rlock__call *call, rlock_mutex *m,
                          rlock__as owner)
{
    f->call = call;
    f->m = m;
    f->owner = owner;
    f->stage = 0;
    f->rc = RLOCK_OK;
    f->peek = 0;
    f->token = 0;
}

/* The fence script's answer: the token, or why there is none. */
static int fence_read(rlock__fence_op *f, uint64_t *got)
{
    rlock_mutex *m = f->m;
    rlock__call *call = f->call;
    rlock__results *res = &f->s.res;
    int rc = f->s.rc;

    /* Only a hold of one copy is ever taken without a token. */
    if (rc == RLOCK_OK && res->r[0].rc != RLOCK_OK) {
        rlock__call_set(call, &res->r[0].err);
        rc = res->r[0].rc;
    } else if (rc == RLOCK_OK &&
               rlock__parse_fence(res->r[0].reply, got) != RLOCK_OK) {
        rc =
            rlock__fail(call, RLOCK_EPROTO, "unexpected reply to the %s script",
                        f->s.req.script->name);
    } else if (rc == RLOCK_OK && *got != 0 && res->r[0].acks < m->replicas) {
        /* Drawn, but a failover now could hand the same token out again.
         * Redis keeps it with the hold: asking again waits once more. */
        rc = rlock__fail(call, RLOCK_EREPLICAS,
                         "token drawn, but %lld of %d replicas acknowledged "
                         "it within %d ms",
                         res->r[0].acks < 0 ? 0 : res->r[0].acks, m->replicas,
                         m->c->opts.sync_timeout_ms);
    }
    rlock__results_free(res);
    rlock__req_free(&f->s.req);
    return rc;
}

int rlock__fence_step(rlock__fence_op *f, rlock__slot **slot)
{
    rlock_mutex *m = f->m;
    rlock_client *c = m->c;
    rlock__call *call = f->call;
    rlock__hold *h;
    uint64_t got = 0;

    if (f->stage == 0) {
        if (!f->peek)
            rlock__want_tokens(m);
        pthread_mutex_lock(&c->mu);
        f->rc = look(call, m, f->owner, &f->token, &f->nonce, &f->serial);
        pthread_mutex_unlock(&c->mu);
        if (f->rc != RLOCK_OK || f->token != 0 || f->peek)
            return RLOCK__STEP_DONE;
        if (!m->layout->fence) {
            f->rc = rlock__fail(call, RLOCK_EPROTO,
                                "the hold has no token and its layout "
                                "cannot draw one");
            return RLOCK__STEP_DONE;
        }
        m->layout->fence(m, f->who,
                         m->layout->owner(c, f->owner.no, f->nonce, f->who),
                         f->nonce, &f->s.req);
        f->s.req.replicas = m->replicas;
        f->s.flags = 0;
        f->s.call = call;
        f->stage = 1;
        *slot = &f->s;
        return RLOCK__STEP_SEND;
    }
    if ((f->rc = fence_read(f, &got)) != RLOCK_OK)
        return RLOCK__STEP_DONE;
    pthread_mutex_lock(&c->mu);
    h = rlock__hold_find(&c->holds, m, f->owner.no);
    if (got == 0) {
        lose(c, m, f->owner, f->serial);
        f->rc = rlock__fail(call, RLOCK_ELOST,
                            "the hold had expired or was taken by another "
                            "owner; no token was drawn");
    } else if (!h || h->serial != f->serial || h->lost ||
               h->valid_until <= rlock__now_ns()) {
        /* Released meanwhile, or its lease ended (as this client counts
         * it) before the token came: not a token to act on. */
        f->rc = rlock__fail(call, RLOCK_ELOST,
                            "the hold ended while its token was drawn");
    } else {
        h->token = got;
        f->token = got;
    }
    pthread_mutex_unlock(&c->mu);
    return RLOCK__STEP_DONE;
}

int rlock__token(rlock__call *call, rlock_mutex *m, rlock__as owner,
                 uint64_t *token)
{
    rlock__fence_op f;

    rlock__fence_op_init(&f, call, m, owner);
    rlock__run(call, m, owner, (rlock__step_fn)rlock__fence_step, &f);
    /* 0 on error (look may have read the token of a hold it refused). */
    *token = f.rc == RLOCK_OK ? f.token : 0;
    return f.rc;
}
