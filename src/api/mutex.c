/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The mutex's public functions: create and free, and lock, unlock, extend
 * and token as the calling thread or as an rlock_owner, the callback
 * form, and the operators' status and forced release. Each checks its
 * arguments, starts the call's context and hands the work to the engine.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "backend/backend.h"
#include "bg/bg.h"
#include "core/handles.h"
#include "engine/engine.h"
#include "layout/layout.h"
#include "util/clock.h"

void rlock_mutex_opts_init(rlock_mutex_opts *o)
{
    memset(o, 0, sizeof *o);
}

static int check_opts(rlock__call *call, const rlock_client *c,
                      const rlock_mutex_opts *opts)
{
    const rlock__layout *lay = rlock__layout_of(opts->layout);

    if (opts->lease_ms < 0 || opts->lease_ms > RLOCK_MS_MAX)
        return rlock__fail(call, RLOCK_EINVAL,
                           "lease_ms must be 0 (watchdog) or 1 to %" PRId64,
                           RLOCK_MS_MAX);
    if (opts->sync_replicas != RLOCK_SYNC_OFF &&
        (opts->sync_replicas < 0 || opts->sync_replicas > RLOCK__SYNC_MAX))
        return rlock__fail(call, RLOCK_EINVAL,
                           "sync_replicas must be RLOCK_SYNC_OFF or in "
                           "[0, %d]",
                           RLOCK__SYNC_MAX);
    if (!lay)
        return rlock__fail(call, RLOCK_EINVAL,
                           "layout must be RLOCK_LAYOUT_NATIVE, "
                           "RLOCK_LAYOUT_TOKEN or RLOCK_LAYOUT_REDISSON");
    if (!(c->backend->flags & RLOCK__BK_ONE_COPY) &&
        !(lay->flags & RLOCK__LAY_COPIES))
        return rlock__fail(call, RLOCK_EINVAL,
                           "the %s layout is not available on %s", lay->name,
                           c->backend->scheme ? c->backend->scheme
                                              : c->backend->name);
    if (opts->sync_replicas > 0 && !(c->backend->flags & RLOCK__BK_WAIT))
        return rlock__fail(
            call, RLOCK_EINVAL, "sync_replicas is not available on %s",
            c->backend->scheme ? c->backend->scheme : c->backend->name);
    return RLOCK_OK;
}

rlock_mutex *rlock_mutex_new_len(rlock_client *c, const char *name,
                                 size_t name_len, const rlock_mutex_opts *opts,
                                 int *err)
{
    rlock_mutex_opts defaults;
    rlock__call call = {0};
    rlock_mutex *m;
    int dummy, rc;

    if (!err)
        err = &dummy;
    rlock__call_init(&call, 0);
    if (!c) {
        *err =
            rlock__api_done(&call, NULL, NULL,
                            rlock__fail(&call, RLOCK_EINVAL, "client is NULL"));
        return NULL;
    }
    rlock__api_enter(c);
    if (!opts) {
        rlock_mutex_opts_init(&defaults);
        opts = &defaults;
    }
    if (!name)
        rc = rlock__fail(&call, RLOCK_EINVAL, "lock name is NULL");
    else if (name_len == 0 || name_len > RLOCK_NAME_MAX)
        rc = rlock__fail(&call, RLOCK_EINVAL,
                         "lock name must be 1 to %d bytes (got %zu)",
                         RLOCK_NAME_MAX, name_len);
    else
        rc = check_opts(&call, c, opts);
    if (rc != RLOCK_OK) {
        *err = rlock__api_done(&call, c, NULL, rc);
        return NULL;
    }
    /* The name in the handle's own block: a loop may keep 100,000
     * handles. */
    m = calloc(1, sizeof *m + name_len + 1);
    if (!m) {
        *err = rlock__api_done(
            &call, c, NULL, rlock__fail(&call, RLOCK_ENOMEM, "out of memory"));
        return NULL;
    }
    m->c = c;
    m->calm = 1; /* until a fast form finds otherwise */
    m->opts = *opts;
    m->layout = rlock__layout_of(opts->layout);
    m->counts_here = !(m->layout->flags & RLOCK__LAY_COUNTS) ||
                     !(c->backend->flags & RLOCK__BK_ONE_COPY);
    m->lease_ms =
        opts->lease_ms > 0 ? opts->lease_ms : c->opts.watchdog_lease_ms;
    m->replicas = opts->sync_replicas == RLOCK_SYNC_OFF ? 0
                  : opts->sync_replicas > 0             ? opts->sync_replicas
                                                        : c->opts.sync_replicas;
    m->name = (char *)(m + 1);
    m->name_len = name_len;
    memcpy(m->name, name, name_len);
    rlock__call_end(&call);
    if (opts->lease_ms > 0) {
        pthread_mutex_lock(&c->mu);
        if (opts->lease_ms < c->shortest_lease_ms)
            c->shortest_lease_ms = opts->lease_ms;
        pthread_mutex_unlock(&c->mu);
    }
    *err = RLOCK_OK;
    return m;
}

rlock_mutex *rlock_mutex_new(rlock_client *c, const char *name,
                             const rlock_mutex_opts *opts, int *err)
{
    return rlock_mutex_new_len(c, name, name ? strlen(name) : 0, opts, err);
}

void rlock_mutex_free(rlock_mutex *m)
{
    rlock_client *c;

    if (!m)
        return;
    c = m->c;
    rlock__api_enter(c);
    pthread_mutex_lock(&c->mu);
    /* Notices not delivered yet are dropped; a callback under way is
     * waited for. */
    rlock__notify_forget(c, m);
    while (m->callbacks > 0)
        pthread_cond_wait(&c->state_cv, &c->mu);
    /* Forget this mutex's holds: no renewal after this point, the keys
     * expire on their own. */
    rlock__hold_clear(&c->holds, m);
    if (m->subscribed)
        rlock__sub_release(c, m);
    pthread_mutex_unlock(&c->mu);
    free(m);
}

rlock_client *rlock_mutex_client(rlock_mutex *m)
{
    return m ? m->c : NULL;
}

/* ---- lock, unlock, extend, token: as a thread or an owner --------------- */

/* Checks m (and o, for the _as calls: as_owner) and starts the call.
 * RLOCK_OK, or the argument error already recorded. */
static int enter(rlock__call *call, rlock_mutex *m, rlock_owner *o,
                 int as_owner, rlock__as *as)
{
    rlock__call_init(call, 0);
    if (!m || (as_owner && !o))
        return rlock__api_done(
            call, m ? m->c : NULL, o,
            rlock__fail(call, RLOCK_EINVAL,
                        as_owner && m ? "owner is NULL" : "mutex is NULL"));
    rlock__api_enter(m->c);
    rlock__call_begin(call, m);
    *as = as_owner ? rlock__as_owner(o) : rlock__as_thread();
    return RLOCK_OK;
}

static int done(rlock__call *call, rlock_mutex *m, rlock__as as, int rc)
{
    return rlock__api_done(call, m->c, as.obj, rc);
}

/*
 * The end of a call that took or extended a hold. Its events were just
 * delivered on this thread, on the lease's time: a callback that ran
 * past the lease's end (a fixed lease, or renewals that failed meanwhile)
 * must not see the call return the hold as held. It returns RLOCK_ELOST
 * and the level it took is gone (its loss reported as any other).
 */
static int held(rlock__call *call, rlock_mutex *m, rlock__as as, int rc)
{
    rlock__call check = {0};
    int64_t left;

    if ((rc = done(call, m, as, rc)) != RLOCK_OK)
        return rc;
    rlock__call_init(&check, 0);
    if (rlock__lease_left(&check, m, as, &left) != RLOCK_ELOST) {
        rlock__call_end(&check);
        return RLOCK_OK;
    }
    rlock__forget(m, as);
    return done(&check, m, as, RLOCK_ELOST);
}

/* One attempt that does not wait: trylock, and timedlock with no time
 * to wait (busy is then RLOCK_ETIMEDOUT). */
static int try_once(rlock__call *call, rlock_mutex *m, rlock__as as,
                    int busy_rc)
{
    int64_t t0 = rlock__now_ns();
    uint64_t nonce = rlock__new_nonce(m->c);
    int rc = rlock__attempt(call, m, as, 't', &nonce, NULL);

    if (rc == RLOCK_EBUSY && busy_rc != RLOCK_EBUSY)
        rc = rlock__fail(call, busy_rc, "lock is busy");
    rlock__report_acquire(m, as, rc, t0, 1, 0, 0);
    return rc;
}

static int trylock_as(rlock_mutex *m, rlock_owner *o, int as_owner)
{
    rlock__call call = {0};
    rlock__as as;
    int rc;

    if ((rc = enter(&call, m, o, as_owner, &as)) != RLOCK_OK)
        return rc;
    return held(&call, m, as, try_once(&call, m, as, RLOCK_EBUSY));
}

static int lock_as(rlock_mutex *m, rlock_owner *o, int as_owner)
{
    rlock__call call = {0};
    rlock__as as;
    int rc;

    if ((rc = enter(&call, m, o, as_owner, &as)) != RLOCK_OK)
        return rc;
    return held(&call, m, as, rlock__acquire(&call, m, as, 0, 1));
}

static int timedlock_as(rlock_mutex *m, rlock_owner *o, int as_owner,
                        int64_t wait_ms)
{
    rlock__call call = {0};
    rlock__as as;
    int rc;

    if ((rc = enter(&call, m, o, as_owner, &as)) != RLOCK_OK)
        return rc;
    if (wait_ms < 0 || wait_ms > RLOCK_MS_MAX)
        return done(&call, m, as,
                    rlock__fail(&call, RLOCK_EINVAL,
                                "wait_ms must be 0 to %" PRId64, RLOCK_MS_MAX));
    if (wait_ms == 0)
        return held(&call, m, as, try_once(&call, m, as, RLOCK_ETIMEDOUT));
    return held(&call, m, as,
                rlock__acquire(&call, m, as, rlock__after_ms(wait_ms), 0));
}

static int unlock_as(rlock_mutex *m, rlock_owner *o, int as_owner)
{
    rlock__call call = {0};
    rlock__as as;
    int rc;

    if ((rc = enter(&call, m, o, as_owner, &as)) != RLOCK_OK)
        return rc;
    return done(&call, m, as, rlock__release(&call, m, as));
}

static int extend_as(rlock_mutex *m, rlock_owner *o, int as_owner,
                     int64_t lease_ms)
{
    rlock__call call = {0};
    rlock__as as;
    int rc;

    if ((rc = enter(&call, m, o, as_owner, &as)) != RLOCK_OK)
        return rc;
    if (lease_ms <= 0 || lease_ms > RLOCK_MS_MAX)
        return done(&call, m, as,
                    rlock__fail(&call, RLOCK_EINVAL,
                                "lease_ms must be 1 to %" PRId64,
                                RLOCK_MS_MAX));
    return held(&call, m, as, rlock__extend(&call, m, as, lease_ms));
}

/* The token into *token (0 on error); the call's code. */
static int token_rc(rlock_mutex *m, rlock_owner *o, int as_owner,
                    uint64_t *token)
{
    rlock__call call = {0};
    rlock__as as;
    int rc;

    *token = 0;
    if ((rc = enter(&call, m, o, as_owner, &as)) != RLOCK_OK)
        return rc;
    return done(&call, m, as, rlock__token(&call, m, as, token));
}

static uint64_t token_as(rlock_mutex *m, rlock_owner *o, int as_owner)
{
    uint64_t token;

    token_rc(m, o, as_owner, &token);
    return token;
}

static int lease_left_as(rlock_mutex *m, rlock_owner *o, int as_owner,
                         int64_t *left_ms)
{
    rlock__call call = {0};
    rlock__as as;
    int rc;

    if (!left_ms) {
        rlock__call_init(&call, 0);
        return rlock__api_done(
            &call, m ? m->c : NULL, o,
            rlock__fail(&call, RLOCK_EINVAL, "left_ms is NULL"));
    }
    *left_ms = 0;
    if ((rc = enter(&call, m, o, as_owner, &as)) != RLOCK_OK)
        return rc;
    return done(&call, m, as, rlock__lease_left(&call, m, as, left_ms));
}

static int fence_as(rlock_mutex *m, rlock_owner *o, int as_owner,
                    uint64_t *token)
{
    rlock__call call = {0};

    if (!token) {
        rlock__call_init(&call, 0);
        return rlock__api_done(&call, m ? m->c : NULL, o,
                               rlock__fail(&call, RLOCK_EINVAL,
                                           "token is NULL"));
    }
    return token_rc(m, o, as_owner, token);
}

static int with_as(rlock_mutex *m, rlock_owner *o, int as_owner,
                   int64_t wait_ms, int (*fn)(void *arg, uint64_t token),
                   void *arg)
{
    rlock__call call = {0};
    uint64_t token;
    int rc, result;

    if (!m || !fn || (as_owner && !o)) {
        rlock__call_init(&call, 0);
        return rlock__api_done(
            &call, m ? m->c : NULL, o,
            rlock__fail(&call, RLOCK_EINVAL,
                        as_owner ? "mutex, owner and fn must not be NULL"
                                 : "mutex and fn must not be NULL"));
    }
    /* fn is given the token: drawn with the acquisition. */
    rlock__want_tokens(m);
    if (wait_ms == RLOCK_WAIT_FOREVER)
        rc = lock_as(m, o, as_owner);
    else
        rc = timedlock_as(m, o, as_owner, wait_ms);
    if (rc != RLOCK_OK)
        return rc;
    if ((rc = token_rc(m, o, as_owner, &token)) != RLOCK_OK) {
        /* Held without a token (rare: a hold claimed back after a lost
         * reply) that could not be drawn now: fn, which is owed one, is
         * not called. A lost hold has nothing to release. */
        rlock__as as = as_owner ? rlock__as_owner(o) : rlock__as_thread();
        rlock__call undo = {0};
        int urc;
        if (rc != RLOCK_ELOST) {
            /* rlock_with's own level goes back; an outer hold of the same
             * owner stays. */
            rlock__call_begin(&undo, m);
            urc = rlock__release(&undo, m, as);
            if (urc != RLOCK_OK && urc != RLOCK_ENOTIFY && urc != RLOCK_ELOST)
                rlock__forget(m, as);
            rlock__call_end(&undo);
            /* The level given back is told before the call returns. */
            rlock__obs_flush();
        }
        return rc;
    }
    result = fn(arg, token);
    rc = unlock_as(m, o, as_owner);
    if (rc != RLOCK_OK && rc != RLOCK_ELOST && rc != RLOCK_ENOTIFY)
        rc = unlock_as(m, o, as_owner);
    if (rc == RLOCK_ELOST)
        return rc;
    if (rc != RLOCK_OK && rc != RLOCK_ENOTIFY)
        /* Redis could not be reached twice: stop renewing and let the
         * lease run out, since nobody is left to unlock (an outer hold of
         * the same owner keeps its own level). fn's work was done under a
         * valid hold, so its result stands. */
        rlock__forget(m, as_owner ? rlock__as_owner(o) : rlock__as_thread());
    rlock__obs_flush();
    return result;
}

int rlock_mutex_trylock(rlock_mutex *m)
{
    return trylock_as(m, NULL, 0);
}

int rlock_mutex_lock(rlock_mutex *m)
{
    return lock_as(m, NULL, 0);
}

int rlock_mutex_timedlock(rlock_mutex *m, int64_t wait_ms)
{
    return timedlock_as(m, NULL, 0, wait_ms);
}

int rlock_mutex_unlock(rlock_mutex *m)
{
    return unlock_as(m, NULL, 0);
}

int rlock_mutex_extend(rlock_mutex *m, int64_t lease_ms)
{
    return extend_as(m, NULL, 0, lease_ms);
}

int rlock_mutex_fence(rlock_mutex *m, uint64_t *token)
{
    return fence_as(m, NULL, 0, token);
}

uint64_t rlock_mutex_token(rlock_mutex *m)
{
    return token_as(m, NULL, 0);
}

int rlock_mutex_lease_left(rlock_mutex *m, int64_t *left_ms)
{
    return lease_left_as(m, NULL, 0, left_ms);
}

int rlock_with(rlock_mutex *m, int64_t wait_ms,
               int (*fn)(void *arg, uint64_t token), void *arg)
{
    return with_as(m, NULL, 0, wait_ms, fn, arg);
}

int rlock_mutex_trylock_as(rlock_mutex *m, rlock_owner *o)
{
    return trylock_as(m, o, 1);
}

int rlock_mutex_lock_as(rlock_mutex *m, rlock_owner *o)
{
    return lock_as(m, o, 1);
}

int rlock_mutex_timedlock_as(rlock_mutex *m, rlock_owner *o, int64_t wait_ms)
{
    return timedlock_as(m, o, 1, wait_ms);
}

int rlock_mutex_unlock_as(rlock_mutex *m, rlock_owner *o)
{
    return unlock_as(m, o, 1);
}

int rlock_mutex_extend_as(rlock_mutex *m, rlock_owner *o, int64_t lease_ms)
{
    return extend_as(m, o, 1, lease_ms);
}

int rlock_mutex_fence_as(rlock_mutex *m, rlock_owner *o, uint64_t *token)
{
    return fence_as(m, o, 1, token);
}

uint64_t rlock_mutex_token_as(rlock_mutex *m, rlock_owner *o)
{
    return token_as(m, o, 1);
}

int rlock_mutex_lease_left_as(rlock_mutex *m, rlock_owner *o, int64_t *left_ms)
{
    return lease_left_as(m, o, 1, left_ms);
}

int rlock_with_as(rlock_mutex *m, rlock_owner *o, int64_t wait_ms,
                  int (*fn)(void *arg, uint64_t token), void *arg)
{
    return with_as(m, o, 1, wait_ms, fn, arg);
}

/* ---- the operators' calls ----------------------------------------------- */

int rlock_mutex_status(rlock_mutex *m, rlock_status *st)
{
    rlock__call call = {0};

    rlock__call_init(&call, 0);
    if (!m || !st)
        return rlock__api_done(
            &call, m ? m->c : NULL, NULL,
            rlock__fail(&call, RLOCK_EINVAL,
                        "mutex and status must not be NULL"));
    rlock__api_enter(m->c);
    rlock__call_begin(&call, m);
    return rlock__api_done(&call, m->c, NULL, rlock__status(&call, m, st));
}

int rlock_mutex_force_unlock_ex(rlock_mutex *m, unsigned flags,
                                rlock_status *removed)
{
    rlock_status dummy;
    rlock__call call = {0};

    rlock__call_init(&call, 0);
    if (!m)
        return rlock__api_done(
            &call, NULL, NULL,
            rlock__fail(&call, RLOCK_EINVAL, "mutex is NULL"));
    if (flags & ~(unsigned)RLOCK_FORCE_NO_EXPIRY)
        return rlock__api_done(
            &call, m->c, NULL,
            rlock__fail(&call, RLOCK_EINVAL,
                        "flags must be 0 or RLOCK_FORCE_NO_EXPIRY (got %#x)",
                        flags));
    rlock__api_enter(m->c);
    rlock__call_begin(&call, m);
    return rlock__api_done(
        &call, m->c, NULL,
        rlock__force(&call, m, flags, removed ? removed : &dummy));
}

int rlock_mutex_force_unlock(rlock_mutex *m, rlock_status *removed)
{
    return rlock_mutex_force_unlock_ex(m, 0, removed);
}
