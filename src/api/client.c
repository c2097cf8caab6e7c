/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The client's public functions: options, opening (connect at once, by
 * the backend the URL names), closing, ping, cancelling waits, the error
 * detail, and what happens to a client inherited through fork().
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "backend/backend.h"
#include "bg/bg.h"
#include "core/error.h"
#include "core/fork.h"
#include "core/observe.h"
#include "layout/layout.h"
#include "net/tls.h"
#include "util/clock.h"

static atomic_uint_fast64_t next_serial = 1;

void rlock_client_opts_init(rlock_client_opts *o)
{
    memset(o, 0, sizeof *o);
    o->connect_timeout_ms = 2000;
    o->command_timeout_ms = 2000;
    o->watchdog_lease_ms = 30000;
    o->waiter_ttl_ms = 5000;
    o->use_pubsub = 1;
    o->backoff_min_ms = 5;
    o->backoff_max_ms = 100;
    o->max_connections = 64;
    o->key_prefix = "rlock";
    o->sync_timeout_ms = 1000;
}

static int check_opts(const rlock_client_opts *o, rlock__call *call)
{
    if (o->connect_timeout_ms <= 0)
        return rlock__fail(call, RLOCK_EINVAL,
                           "connect_timeout_ms must be > 0");
    if (o->command_timeout_ms <= 0)
        return rlock__fail(call, RLOCK_EINVAL,
                           "command_timeout_ms must be > 0");
    if (o->watchdog_lease_ms < 30 || o->watchdog_lease_ms > RLOCK_MS_MAX)
        return rlock__fail(call, RLOCK_EINVAL,
                           "watchdog_lease_ms must be in [30, RLOCK_MS_MAX]");
    if (o->waiter_ttl_ms < 30 || o->waiter_ttl_ms > RLOCK_MS_MAX)
        return rlock__fail(call, RLOCK_EINVAL,
                           "waiter_ttl_ms must be in [30, RLOCK_MS_MAX]");
    if (o->backoff_min_ms < 1 || o->backoff_max_ms < o->backoff_min_ms)
        return rlock__fail(call, RLOCK_EINVAL,
                           "need 1 <= backoff_min_ms <= backoff_max_ms");
    if (o->max_reply_bytes < 0 ||
        (o->max_reply_bytes > 0 && o->max_reply_bytes < 1024))
        return rlock__fail(call, RLOCK_EINVAL,
                           "max_reply_bytes must be 0 (default) or >= 1024");
    if (o->max_bulk_bytes < 0 || o->max_array_elements < 0)
        return rlock__fail(call, RLOCK_EINVAL,
                           "max_bulk_bytes and max_array_elements must be "
                           ">= 0 (0: default)");
    if (o->max_depth < 0 || o->max_depth > RLOCK__BOUND_DEPTH_MAX)
        return rlock__fail(call, RLOCK_EINVAL,
                           "max_depth must be 0 (default) to 7");
    if (o->max_connections < 1 || o->max_connections > 1024)
        return rlock__fail(call, RLOCK_EINVAL,
                           "max_connections must be in [1, 1024]");
    if (!o->key_prefix || !o->key_prefix[0] || strpbrk(o->key_prefix, "{}") ||
        strlen(o->key_prefix) > RLOCK__PREFIX_MAX)
        return rlock__fail(call, RLOCK_EINVAL,
                           "key_prefix must be 1 to %d bytes without '{' "
                           "or '}'",
                           RLOCK__PREFIX_MAX);
    if (o->username && !o->password)
        return rlock__fail(call, RLOCK_EINVAL,
                           "username given without password");
    if (o->sync_replicas < 0 || o->sync_replicas > RLOCK__SYNC_MAX)
        return rlock__fail(call, RLOCK_EINVAL,
                           "sync_replicas must be in [0, %d]", RLOCK__SYNC_MAX);
    if (o->sync_timeout_ms <= 0)
        return rlock__fail(call, RLOCK_EINVAL, "sync_timeout_ms must be > 0");
    return RLOCK_OK;
}

static void init_sync(rlock_client *c)
{
    pthread_mutex_init(&c->mu, NULL);
    rlock__cond_init(&c->state_cv);
}

/* What fork() holds of the client: mu, then the backend's locks (no code
 * takes mu while it holds one of those), then the observer's (core/
 * observe.c takes nothing while it holds that one, and no code takes it
 * but there), so that the child finds each of them unlocked, its
 * callbacks and queue as at one moment. */
static void fork_hold(void *arg, int take)
{
    rlock_client *c = arg;

    if (take) {
        pthread_mutex_lock(&c->mu);
        c->backend->fork_hold(c, 1);
        rlock__obs_fork_hold(c->obs, 1);
    } else {
        rlock__obs_fork_hold(c->obs, 0);
        c->backend->fork_hold(c, 0);
        pthread_mutex_unlock(&c->mu);
    }
}

static void free_client(rlock_client *c)
{
    if (c->fork_guard.hold)
        rlock__fork_guard_remove(&c->fork_guard);
    /* What this thread has not delivered yet of this client goes, and so
     * does what the background queued: nobody may call into the client
     * any more. */
    if (c->obs) {
        rlock__obs_drop(c->obs);
        rlock__obs_close(c->obs);
    }
    rlock__bg_free(c);
    if (c->backend)
        c->backend->close(c);
    rlock__hold_clear(&c->holds, NULL);
    rlock__waiters_free(&c->waiters);
    free(c->prefix);
    free(c->username);
    if (c->password) {
        memset(c->password, 0, strlen(c->password));
        free(c->password);
    }
    rlock__tls_ctx_free(c->tls);
    free(c->tls_sni);
    free((char *)c->opts.tls_ca_file);
    free((char *)c->opts.tls_cert_file);
    free((char *)c->opts.tls_key_file);
    rlock__obs_free(c->obs);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->state_cv);
    free(c);
}

/* The parts every client has: options, identity, locks. The strings of
 * the options are not kept (the backend copies what it needs). */
static int init_common(rlock_client *c, const rlock_client_opts *opts,
                       rlock__call *call)
{
    init_sync(c);
    c->serial = atomic_fetch_add(&next_serial, 1);
    c->opts = *opts;
    c->opts.key_prefix = NULL;
    c->opts.username = NULL;
    c->opts.password = NULL;
    c->opts.tls_ca_file = c->opts.tls_cert_file = c->opts.tls_key_file =
        c->opts.tls_sni = NULL;
    /* A hand-over's lease can be as short as what is left of the
     * waiter's place, at least about two thirds of waiter_ttl_ms. */
    c->shortest_lease_ms = opts->waiter_ttl_ms / 2 < opts->watchdog_lease_ms
                               ? opts->waiter_ttl_ms / 2
                               : opts->watchdog_lease_ms;
    c->fork_gen = rlock__fork_generation();
    c->scripts = rlock__layout_scripts(&c->nscripts);
    if (!(c->obs = rlock__obs_new()) ||
        !(c->prefix = strdup(opts->key_prefix)) ||
        rlock__bg_new(c, &rlock__thread_driver) != 0)
        return rlock__fail(call, RLOCK_ENOMEM, "out of memory");
    if (rlock__random_id(c->id) != 0)
        return rlock__fail(call, RLOCK_ENOMEM,
                           "no randomness from getrandom(2)");
    rlock__who(c->who);
    return RLOCK_OK;
}

rlock_client *rlock_client_open(const char *url, const rlock_client_opts *opts,
                                int *err)
{
    return rlock__client_open(url, opts, 0, err);
}

rlock_client *rlock__client_open(const char *url, const rlock_client_opts *opts,
                                 int lazy, int *err)
{
    rlock_client_opts defaults;
    rlock__call call = {0};
    rlock_client *c;
    int rc, dummy;

    if (!err)
        err = &dummy;
    if (!opts) {
        rlock_client_opts_init(&defaults);
        opts = &defaults;
    }
    /* Opening connects by the connect timeout alone (each backend says
     * how), also when it runs inside another call. */
    rlock__call_init(&call, 0);
    if ((rc = check_opts(opts, &call)) != RLOCK_OK) {
        *err = rlock__api_done(&call, NULL, NULL, rc);
        return NULL;
    }
    c = calloc(1, sizeof *c);
    if (!c) {
        rlock__fail(&call, RLOCK_ENOMEM, "out of memory");
        *err = rlock__api_done(&call, NULL, NULL, RLOCK_ENOMEM);
        return NULL;
    }
    rc = init_common(c, opts, &call);
    c->lazy = lazy;
    if (rc == RLOCK_OK) {
        c->backend = rlock__backend_for(url);
        rc = c->backend->open(c, url, opts, &call);
    }
    if (rc != RLOCK_OK) {
        free_client(c);
        *err = rlock__api_done(&call, NULL, NULL, rc);
        return NULL;
    }
    c->fork_guard.hold = fork_hold;
    c->fork_guard.arg = c;
    rlock__fork_guard_add(&c->fork_guard);
    rlock__call_end(&call); /* (a cause gathered on the way, if any) */
    *err = RLOCK_OK;
    return c;
}

void rlock_client_close(rlock_client *c)
{
    if (!c)
        return;
    /* In a forked child whose first call this is, the client is still the
     * parent's copy: threads to join that the child does not have,
     * condition variables the parent's threads waited on. It takes its
     * own state first, as every call does. */
    rlock__api_enter(c);
    free_client(c);
}

const char *rlock_client_errmsg(rlock_client *c)
{
    return rlock__errmsg_get(c ? c->serial : 0);
}

/*
 * In a forked child the client's memory is a copy of the parent's: the
 * same owner id (the child would re-enter the parent's locks), sockets
 * shared with the parent (replies would go to either process), and a
 * background thread that does not exist. The child gets a new identity,
 * forgets the parent's holds without touching them, and opens its own
 * connections. Only the thread that called fork() exists in the child:
 * mu is unlocked (fork() held it, and the child's handler gave it back),
 * but the condition variable may still count the parent's threads that
 * waited on it, so it is made anew (destroying it could wait for them).
 */
void rlock__api_enter(rlock_client *c)
{
    unsigned gen = rlock__fork_generation();

    if (c->fork_gen == gen)
        return;
    c->fork_gen = gen;
    rlock__cond_init(&c->state_cv);
    rlock__hold_clear(&c->holds, NULL); /* the parent's; mutexes stay */
    rlock__waiters_forget(&c->waiters);
    c->backend->after_fork(c);
    rlock__bg_after_fork(c);
    rlock__obs_after_fork(c->obs);
    if (rlock__random_id(c->id) != 0)
        c->id[0] = 'x'; /* never the parent's id, even without randomness */
    rlock__who(c->who);
}

/* The log level of a call's failure: a busy lock is the caller's
 * business, a bad argument a slip, the rest the deployment's. */
static int failure_level(int rc)
{
    switch (rc) {
    case RLOCK_EBUSY:
    case RLOCK_ETIMEDOUT:
    case RLOCK_ECANCELED:
    case RLOCK_ENOTOWNER:
        return RLOCK_LOG_DEBUG;
    case RLOCK_EINVAL:
    case RLOCK_ELOST:
    case RLOCK_ENOTIFY:
    case RLOCK_ENOTLOCK:
        return RLOCK_LOG_WARN;
    default:
        return RLOCK_LOG_ERROR;
    }
}

int rlock__api_done(rlock__call *call, rlock_client *c, rlock_owner *owner,
                    int rc)
{
    const char *msg;

    if (rc != RLOCK_OK) {
        msg = call->msg && call->msg[0] ? call->msg : rlock_strerror(rc);
        rlock__errmsg_set(c ? c->serial : 0, msg);
        if (owner)
            rlock__owner_set_errmsg(owner, msg);
        if (c)
            rlock__obs_log(c->obs, failure_level(rc), "%s (%s)", msg,
                           rlock_strerror(rc));
    }
    rlock__call_end(call);
    /* The events of the call, and its log line, on this thread before it
     * returns (no lock of the library is held here). */
    rlock__obs_flush();
    return rc;
}

int rlock_client_ping(rlock_client *c, rlock_server_info *info)
{
    rlock__call call = {0};

    rlock__call_init(&call, 0);
    if (!c || !info)
        return rlock__api_done(&call, c, NULL,
                               rlock__fail(&call, RLOCK_EINVAL,
                                           "client and info must not be NULL"));
    rlock__api_enter(c);
    rlock__call_init(&call, rlock__after_ms(c->opts.command_timeout_ms));
    memset(info, 0, sizeof *info);
    return rlock__api_done(&call, c, NULL, c->backend->ping(c, info, &call));
}

void rlock_client_cancel_waits(rlock_client *c)
{
    rlock__waiter *w;

    if (!c)
        return;
    /* In a forked child: the waiters listed are the parent's threads. */
    rlock__api_enter(c);
    pthread_mutex_lock(&c->mu);
    c->cancel_gen++;
    for (w = c->waiters.list; w; w = w->next)
        rlock__waiter_wake(w);
    pthread_mutex_unlock(&c->mu);
}
