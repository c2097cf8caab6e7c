/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The mutex operations: create, acquire once, release, extend, token, and
 * the callback form. Waiting lives in wait.c, lease renewal in watchdog.c.
 *
 * Each operation is one script call (one round trip when uncontended). The
 * client's hold table is updated only after Redis has answered, and under
 * client->mu, never across a round trip.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "reply.h"

void rlock_mutex_opts_init(rlock_mutex_opts *o)
{
    memset(o, 0, sizeof *o);
}

/* "{prefix:name}" followed by suffix, as a byte string. */
static char *make_key(const rlock_client *c, const char *name, size_t len,
                      const char *suffix, size_t *out_len)
{
    size_t plen = strlen(c->prefix), slen = strlen(suffix);
    size_t n = 1 + plen + 1 + len + 1 + slen;
    char *k = malloc(n + 1), *p;

    if (!k)
        return NULL;
    p = k;
    *p++ = '{';
    memcpy(p, c->prefix, plen);
    p += plen;
    *p++ = ':';
    memcpy(p, name, len);
    p += len;
    *p++ = '}';
    memcpy(p, suffix, slen);
    p[slen] = '\0';
    *out_len = n;
    return k;
}

/* name followed by suffix, as a byte string. */
static char *plain_key(const char *name, size_t len, const char *suffix,
                       size_t *out_len)
{
    size_t slen = strlen(suffix);
    char *k = malloc(len + slen + 1);

    if (!k)
        return NULL;
    memcpy(k, name, len);
    memcpy(k + len, suffix, slen + 1);
    *out_len = len + slen;
    return k;
}

/* Redisson's names for a lock's other keys and channel: prefix ":" name
 * when the name has a '{' already, else prefix ":{" name "}", so that they
 * share the lock's cluster slot (RedissonObject.prefixName). */
static char *redisson_key(const char *prefix, const char *name, size_t len,
                          size_t *out_len)
{
    size_t plen = strlen(prefix);
    int tag = memchr(name, '{', len) == NULL;
    size_t n = plen + 1 + (size_t)tag + len + (size_t)tag;
    char *k = malloc(n + 1), *p;

    if (!k)
        return NULL;
    p = k;
    memcpy(p, prefix, plen);
    p += plen;
    *p++ = ':';
    if (tag)
        *p++ = '{';
    memcpy(p, name, len);
    p += len;
    if (tag)
        *p++ = '}';
    *p = '\0';
    *out_len = n;
    return k;
}

static void free_mutex(rlock_mutex *m)
{
    int i;

    for (i = 0; i < RLOCK__K_COUNT; i++)
        free(m->keys[i]);
    free(m->channel);
    free(m->name);
    free(m);
}

rlock_mutex *rlock_mutex_new_len(rlock_client *c, const char *name,
                                 size_t name_len, const rlock_mutex_opts *opts,
                                 int *err)
{
    static const char *suffix[RLOCK__K_COUNT] = {"", ":fence", ":queue",
                                                 ":qttl", ":qinfo"};
    /* The peers' layouts' lock is the name itself; only the counter is
     * used besides (the other keys are never written). */
    static const char *token_suffix[RLOCK__K_COUNT] = {
        "", ":rlock-fence", ":rlock-queue", ":rlock-qttl", ":rlock-qinfo"};
    rlock_mutex *m;
    int i, dummy;

    if (!err)
        err = &dummy;
    if (!c) {
        *err = rlock__fail(NULL, RLOCK_EINVAL, "client is NULL");
        return NULL;
    }
    rlock__client_after_fork_check(c);
    if (!name) {
        *err = rlock__fail(c, RLOCK_EINVAL, "lock name is NULL");
        return NULL;
    }
    if (name_len == 0 || name_len > RLOCK_NAME_MAX) {
        *err = rlock__fail(c, RLOCK_EINVAL,
                           "lock name must be 1 to %d bytes (got %zu)",
                           RLOCK_NAME_MAX, name_len);
        return NULL;
    }
    if (opts && (opts->lease_ms < 0 || opts->lease_ms > RLOCK_MS_MAX)) {
        *err = rlock__fail(c, RLOCK_EINVAL,
                           "lease_ms must be 0 (watchdog) or 1 to %" PRId64,
                           RLOCK_MS_MAX);
        return NULL;
    }
    if (opts && opts->sync_replicas != RLOCK_SYNC_OFF &&
        (opts->sync_replicas < 0 || opts->sync_replicas > RLOCK__SYNC_MAX)) {
        *err = rlock__fail(c, RLOCK_EINVAL,
                           "sync_replicas must be RLOCK_SYNC_OFF or in "
                           "[0, %d]",
                           RLOCK__SYNC_MAX);
        return NULL;
    }
    if (opts && opts->layout != RLOCK_LAYOUT_NATIVE &&
        opts->layout != RLOCK_LAYOUT_TOKEN &&
        opts->layout != RLOCK_LAYOUT_REDISSON) {
        *err = rlock__fail(c, RLOCK_EINVAL,
                           "layout must be RLOCK_LAYOUT_NATIVE, "
                           "RLOCK_LAYOUT_TOKEN or RLOCK_LAYOUT_REDISSON");
        return NULL;
    }
    if (opts && opts->layout != RLOCK_LAYOUT_NATIVE && c->nnodes) {
        *err = rlock__fail(
            c, RLOCK_EINVAL, "the %s layout is not available on redlock://",
            opts->layout == RLOCK_LAYOUT_TOKEN ? "token" : "Redisson");
        return NULL;
    }
    m = calloc(1, sizeof *m);
    if (!m) {
        *err = rlock__fail(c, RLOCK_ENOMEM, "out of memory");
        return NULL;
    }
    m->c = c;
    if (opts)
        m->opts = *opts;
    if (m->opts.lease_ms > 0) {
        pthread_mutex_lock(&c->mu);
        if (m->opts.lease_ms < c->shortest_lease_ms)
            c->shortest_lease_ms = m->opts.lease_ms;
        pthread_mutex_unlock(&c->mu);
    }
    m->name = malloc(name_len);
    m->name_len = name_len;
    if (m->name)
        memcpy(m->name, name, name_len);
    for (i = 0; i < RLOCK__K_COUNT; i++) {
        if (m->opts.layout == RLOCK_LAYOUT_NATIVE)
            m->keys[i] =
                make_key(c, name, name_len, suffix[i], &m->key_lens[i]);
        else if (m->opts.layout == RLOCK_LAYOUT_REDISSON && i == RLOCK__K_FENCE)
            m->keys[i] = redisson_key("redisson_lock_token", name, name_len,
                                      &m->key_lens[i]);
        else
            m->keys[i] =
                plain_key(name, name_len, token_suffix[i], &m->key_lens[i]);
    }
    if (m->opts.layout == RLOCK_LAYOUT_REDISSON)
        m->channel = redisson_key("redisson_lock__channel", name, name_len,
                                  &m->channel_len);
    else
        m->channel = make_key(c, name, name_len, ":wake", &m->channel_len);
    for (i = 0; i < RLOCK__K_COUNT; i++)
        if (!m->keys[i])
            break;
    if (!m->name || i < RLOCK__K_COUNT || !m->channel) {
        free_mutex(m);
        *err = rlock__fail(c, RLOCK_ENOMEM, "out of memory");
        return NULL;
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
    rlock__client_after_fork_check(c);
    pthread_mutex_lock(&c->mu);
    while (c->in_callback == m)
        pthread_cond_wait(&c->callback_cv, &c->mu);
    /* Forget this mutex's holds: no renewal after this point, the keys
     * expire on their own. */
    rlock__hold_clear(c, m);
    if (m->subscribed)
        rlock__sub_release(c, m);
    pthread_mutex_unlock(&c->mu);
    free_mutex(m);
}

rlock_client *rlock_mutex_client(rlock_mutex *m)
{
    return m ? m->c : NULL;
}

static int token_layout(const rlock_mutex *m)
{
    return m->opts.layout == RLOCK_LAYOUT_TOKEN;
}

static int redisson_layout(const rlock_mutex *m)
{
    return m->opts.layout == RLOCK_LAYOUT_REDISSON;
}

static int64_t hold_lease_ms(const rlock_mutex *m)
{
    return m->opts.lease_ms > 0 ? m->opts.lease_ms
                                : m->c->opts.watchdog_lease_ms;
}

static int bad_reply(rlock_client *c, const char *script)
{
    return rlock__fail(c, RLOCK_EPROTO, "unexpected reply to the %s script",
                       script);
}

/* Undoes an attempt whose outcome is unknown or unwanted: the acquisition
 * leaves the queue and gives up the hold it may have taken. The caller
 * already waited for Redis once; the background thread does it. The nonce
 * is spent: should the caller try again, it does so under a new one, so
 * that the undo, whenever it arrives, cannot touch what the new attempts
 * take. */
static void abandon(rlock_mutex *m, uint64_t *nonce)
{
    rlock__defer_cancel(m, *nonce);
    *nonce = rlock__new_nonce(m->c);
}

uint64_t rlock__new_nonce(rlock_client *c)
{
    return __atomic_add_fetch(&c->next_attempt, 1, __ATOMIC_RELAXED);
}

int rlock__hold_record(rlock_mutex *m, uint64_t thread, uint64_t token,
                       int64_t count, int64_t t0, int64_t granted_ms)
{
    rlock_client *c = m->c;
    rlock__hold *h = rlock__hold_find(c, m, thread);
    int rc = rlock__bg_ensure(c);

    /* The background thread first: a hold nobody renews or watches must
     * not be recorded. */
    if (rc != RLOCK_OK)
        return rc;
    if (!h) {
        h = calloc(1, sizeof *h);
        if (!h)
            return rlock__fail(c, RLOCK_ENOMEM, "out of memory");
        h->serial = ++c->next_hold_serial;
        h->m = m;
        h->thread = thread;
        h->watchdog = m->opts.lease_ms == 0;
        if (rlock__hold_add(c, h) != RLOCK_OK) {
            free(h);
            return rlock__fail(c, RLOCK_ENOMEM, "out of memory");
        }
    }
    h->token = token;
    h->count = count;
    h->lease_ms = hold_lease_ms(m);
    h->cur_lease_ms = granted_ms;
    if (granted_ms < c->shortest_lease_ms)
        c->shortest_lease_ms = granted_ms;
    h->lost = 0;
    h->notify = 0;
    h->valid_until =
        t0 + granted_ms * RLOCK__NS_PER_MS - rlock__margin_ns(granted_ms);
    h->renew_at = t0 + granted_ms * RLOCK__NS_PER_MS / 3;
    rlock__bg_kick_before(c, h->renew_at);
    return RLOCK_OK;
}

void rlock__acquire_args(rlock_mutex *m, uint64_t thread, char mode,
                         uint64_t nonce, int64_t count, uint64_t token,
                         rlock__acquire_argv *a)
{
    a->args[0] = a->owner;
    a->lens[0] = rlock__owner(m->c, thread, a->owner);
    a->args[1] = a->lease;
    a->lens[1] = (size_t)snprintf(a->lease, sizeof a->lease, "%" PRId64,
                                  hold_lease_ms(m));
    a->mode[0] = mode;
    a->mode[1] = '\0';
    a->args[2] = a->mode;
    a->lens[2] = 1;
    a->args[3] = a->ttl;
    a->lens[3] = (size_t)snprintf(a->ttl, sizeof a->ttl, "%" PRId64,
                                  m->c->opts.waiter_ttl_ms);
    a->args[4] = m->channel;
    a->lens[4] = m->channel_len;
    a->args[5] = a->nonce;
    a->lens[5] = (size_t)snprintf(a->nonce, sizeof a->nonce, "%" PRIu64,
                                  nonce);
    a->args[6] = a->count;
    a->lens[6] = (size_t)snprintf(a->count, sizeof a->count, "%" PRId64,
                                  count);
    a->args[7] = a->token;
    a->lens[7] = (size_t)snprintf(a->token, sizeof a->token, "%" PRIu64,
                                  token);
}

int rlock__try_acquire(rlock_mutex *m, char mode, uint64_t *nonce_io,
                       int64_t *hint_ms)
{
    rlock_client *c = m->c;
    uint64_t thread = rlock__thread_number();
    int64_t lease = hold_lease_ms(m), t0, now;
    rlock__acquire_argv aa;
    redisReply *r = NULL;
    rlock__acquired a;
    int64_t count;
    uint64_t token, nonce = *nonce_io;
    int64_t had_count = 0;
    uint64_t had_token = 0;
    rlock__hold *h;
    int rc;

    pthread_mutex_lock(&c->mu);
    h = rlock__hold_find(c, m, thread);
    if (h && h->lost) {
        rlock__hold_remove(c, h); /* reported already; start afresh */
        h = NULL;
    }
    if (h) {
        mode = 'r';
        had_count = h->count;
        had_token = h->token;
    }
    if ((c->nnodes || token_layout(m)) && h) {
        /* Redlock and the token layout: re-entry is counted here; Redis
         * sees one hold. */
        h->count++;
        pthread_mutex_unlock(&c->mu);
        return RLOCK_OK;
    }
    pthread_mutex_unlock(&c->mu);
    if (c->nnodes)
        return rlock__rl_acquire(m, hint_ms);
    /* The peers' layouts have no queue: mode 'w' is a plain attempt. A
     * Redisson-layout re-entry is counted in the hash, where Redisson
     * looks for it. */
    if (m->opts.layout != RLOCK_LAYOUT_NATIVE)
        return rlock__lay_acquire(m, hint_ms, had_count, had_token);

    rlock__acquire_args(m, thread, mode, nonce, had_count, had_token, &aa);

    /* The lease is counted from before the request left: whatever Redis
     * did, it did after this instant, so our idea of the lease end is never
     * later than Redis's. */
    t0 = rlock__now_ns();
    rc = rlock__eval(c, RLOCK__S_ACQUIRE, &r, RLOCK__K_COUNT,
                     (const char **)m->keys, m->key_lens, 8, aa.args,
                     aa.lens);
    if (rc != RLOCK_OK) {
        /* A lost reply may hide a success: never report it, undo it. (A
         * re-entry needs no undo: counts are set, not added, so the
         * owner's next request makes Redis agree with it again.) */
        if (rlock__outcome_unknown(rc) && mode != 'r')
            abandon(m, nonce_io);
        return rc;
    }
    rc = rlock__parse_acquire(r, &a);
    freeReplyObject(r);
    if (rc != RLOCK_OK)
        return bad_reply(c, "acquire");
    if (a.status < 0) {
        pthread_mutex_lock(&c->mu);
        h = rlock__hold_find(c, m, thread);
        if (h)
            rlock__hold_remove(c, h);
        pthread_mutex_unlock(&c->mu);
        return rlock__fail(c, RLOCK_ELOST,
                           "re-entry found the hold gone (expired or taken)");
    }
    if (a.status == 0) {
        if (hint_ms)
            *hint_ms = a.hint_ms;
        return rlock__fail(c, RLOCK_EBUSY, "lock is held or queued for");
    }
    token = a.token;
    count = a.count;

    now = rlock__now_ns();
    if (now - t0 >= lease * RLOCK__NS_PER_MS) {
        /* The answer came after the lease would have ended (a pause, a
         * stalled network): the hold may already belong to someone else,
         * so it is not reported as ours. */
        if (mode != 'r')
            abandon(m, nonce_io);
        if (hint_ms)
            *hint_ms = 0;
        return rlock__fail(c, RLOCK_EBUSY,
                           "reply arrived after the lease had ended");
    }

    pthread_mutex_lock(&c->mu);
    rc = rlock__hold_record(m, thread, token, count, t0, lease);
    pthread_mutex_unlock(&c->mu);
    if (rc != RLOCK_OK && mode != 'r')
        abandon(m, nonce_io);
    if (rc == RLOCK_OK && mode != 'r')
        rc = rlock__sync_new_hold(m);
    return rc;
}

int rlock_mutex_trylock(rlock_mutex *m)
{
    if (!m)
        return rlock__fail(NULL, RLOCK_EINVAL, "mutex is NULL");
    rlock__client_after_fork_check(m->c);
    uint64_t nonce = rlock__new_nonce(m->c);
    return rlock__try_acquire(m, 't', &nonce, NULL);
}

int rlock_mutex_lock(rlock_mutex *m)
{
    if (!m)
        return rlock__fail(NULL, RLOCK_EINVAL, "mutex is NULL");
    rlock__client_after_fork_check(m->c);
    return rlock__wait_acquire(m, 0, 1);
}

int rlock_mutex_timedlock(rlock_mutex *m, int64_t wait_ms)
{
    int rc;

    if (!m)
        return rlock__fail(NULL, RLOCK_EINVAL, "mutex is NULL");
    rlock__client_after_fork_check(m->c);
    if (wait_ms < 0 || wait_ms > RLOCK_MS_MAX)
        return rlock__fail(m->c, RLOCK_EINVAL,
                           "wait_ms must be 0 to %" PRId64, RLOCK_MS_MAX);
    if (wait_ms == 0) {
        uint64_t nonce = rlock__new_nonce(m->c);
        rc = rlock__try_acquire(m, 't', &nonce, NULL);
        return rc == RLOCK_EBUSY
                   ? rlock__fail(m->c, RLOCK_ETIMEDOUT, "lock is busy")
                   : rc;
    }
    return rlock__wait_acquire(m, rlock__now_ns() + wait_ms * RLOCK__NS_PER_MS,
                               0);
}

/* Looks up the calling thread's hold for unlock/extend. On RLOCK_OK the
 * hold's token and count are in *token and *count and mu is released. An
 * extend waits for a renewal in flight, and keeps renewals off the hold
 * until it is done, so that the last lease Redis set is the one the client
 * records. */
static int own_hold(rlock_mutex *m, uint64_t thread, uint64_t *token,
                    int64_t *count, int *unknown, int extending)
{
    rlock_client *c = m->c;
    rlock__hold *h;

    pthread_mutex_lock(&c->mu);
    for (;;) {
        h = rlock__hold_find(c, m, thread);
        if (!h || !extending || !h->renewing)
            break;
        pthread_cond_wait(&c->callback_cv, &c->mu);
    }
    if (!h) {
        pthread_mutex_unlock(&c->mu);
        return rlock__fail(c, RLOCK_ENOTOWNER,
                           "this thread holds no lock of this name");
    }
    if (h->lost) {
        rlock__hold_remove(c, h);
        pthread_mutex_unlock(&c->mu);
        return rlock__fail(c, RLOCK_ELOST,
                           "the hold was lost before this call");
    }
    /* The lease as this client counts it (from the moment the last
     * acquisition or renewal that Redis confirmed was sent) is over: Redis
     * may have given the lock to someone else already, whatever a reply
     * still on its way would say. The background thread reports it too;
     * this call need not wait for that. */
    if (h->valid_until <= rlock__now_ns()) {
        rlock__hold_remove(c, h);
        pthread_mutex_unlock(&c->mu);
        return rlock__fail(c, RLOCK_ELOST,
                           "the hold's lease ended before this call, with "
                           "no renewal confirmed in time");
    }
    *token = h->token;
    *count = h->count;
    if (unknown)
        *unknown = h->release_unknown;
    if (extending)
        h->extending = 1;
    else if (h->count == 1)
        h->releasing = 1;
    pthread_mutex_unlock(&c->mu);
    return RLOCK_OK;
}

/* The unlock of Redlock and of the token layout: one level off the
 * client's count; at zero, the release (on every node for Redlock). The
 * hold stays if the release may not have happened (call again). */
static int release_counted(rlock_mutex *m, uint64_t thread, uint64_t token,
                           int64_t count)
{
    rlock_client *c = m->c;
    rlock__hold *h;
    int rc = count > 1        ? RLOCK_OK
             : c->nnodes      ? rlock__rl_release(m, token)
                              : rlock__tk_release(m, thread, token);

    pthread_mutex_lock(&c->mu);
    h = rlock__hold_find(c, m, thread);
    if (h && count > 1)
        h->count--;
    else if (h && (rc == RLOCK_OK || rc == RLOCK_ELOST))
        rlock__hold_remove(c, h);
    else if (h)
        h->releasing = 0;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int rlock_mutex_unlock(rlock_mutex *m)
{
    rlock_client *c;
    uint64_t thread, token = 0;
    int64_t count = 0;
    char owner[RLOCK__OWNER_MAX], token_s[24], count_s[24];
    const char *args[4];
    size_t lens[4];
    redisReply *r = NULL;
    rlock__hold *h;
    int64_t n = 0;
    int rc, unknown = 0;

    if (!m)
        return rlock__fail(NULL, RLOCK_EINVAL, "mutex is NULL");
    c = m->c;
    rlock__client_after_fork_check(c);
    thread = rlock__thread_number();
    if ((rc = own_hold(m, thread, &token, &count, &unknown, 0)) != RLOCK_OK)
        return rc;
    if (c->nnodes || token_layout(m))
        return release_counted(m, thread, token, count);

    /* rlock's own layout and the Redisson layout keep the count in Redis:
     * every level is a round trip, with the same arguments (the Redisson
     * layout's script has no use for the token, and takes only the lock's
     * key: the others could be in other cluster slots). */
    lens[0] = rlock__owner_of(m, thread, owner);
    args[0] = owner;
    lens[1] = (size_t)snprintf(token_s, sizeof token_s, "%" PRIu64, token);
    args[1] = token_s;
    args[2] = m->channel;
    lens[2] = m->channel_len;
    lens[3] = (size_t)snprintf(count_s, sizeof count_s, "%" PRId64, count);
    args[3] = count_s;
    rc = rlock__eval(
        c, redisson_layout(m) ? RLOCK__S_RS_RELEASE : RLOCK__S_RELEASE, &r,
        redisson_layout(m) ? 1 : RLOCK__K_COUNT, (const char **)m->keys,
        m->key_lens, 4, args, lens);
    if (rc == RLOCK_OK && rlock__parse_release(r, &n) != RLOCK_OK)
        rc = bad_reply(c, "release");
    if (r)
        freeReplyObject(r);

    pthread_mutex_lock(&c->mu);
    h = rlock__hold_find(c, m, thread);
    if (rc != RLOCK_OK) {
        if (h) {
            h->releasing = 0;
            /* Redis may have released it: calling again is safe (counts
             * are set, not subtracted), and if the hold is gone then, it
             * is this call that released it. */
            if (rlock__outcome_unknown(rc) && count == 1)
                h->release_unknown = 1;
        }
    } else if (n < 0 && unknown && count == 1) {
        if (h)
            rlock__hold_remove(c, h); /* released by the lost first try */
    } else if (n < 0) {
        if (h)
            rlock__hold_remove(c, h);
        rc = rlock__fail(c, RLOCK_ELOST,
                         "the hold had expired or was taken by another "
                         "owner; nothing was released");
    } else if (n == 0) {
        if (h)
            rlock__hold_remove(c, h);
    } else if (h) {
        h->count = n;
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* Sets the calling thread's lease to lease_ms from now; with m's
 * sync_replicas, WAITs for the replicas in the same round trip, and too few
 * acknowledgements make it RLOCK_EREPLICAS with the lease end as we count
 * it left where it was. */
static int extend_hold(rlock_mutex *m, int64_t lease_ms)
{
    rlock_client *c = m->c;
    uint64_t thread, token = 0;
    int64_t count;
    char owner[RLOCK__OWNER_MAX], token_s[24], lease_s[24];
    const char *args[3];
    size_t lens[3];
    redisReply *r = NULL;
    rlock__hold *h;
    int ok = 0, replicas = rlock__sync_replicas(m);
    long long acks = 0;
    int64_t t0, drift_ns; /* how much sooner than Redis to give up */
    int rc;

    thread = rlock__thread_number();
    if ((rc = own_hold(m, thread, &token, &count, NULL, 1)) != RLOCK_OK)
        return rc;

    lens[0] = rlock__owner_of(m, thread, owner);
    args[0] = owner;
    lens[1] = (size_t)snprintf(token_s, sizeof token_s, "%" PRIu64, token);
    args[1] = token_s;
    lens[2] = (size_t)snprintf(lease_s, sizeof lease_s, "%" PRId64, lease_ms);
    args[2] = lease_s;
    t0 = rlock__now_ns();
    drift_ns = rlock__margin_ns(lease_ms);
    if (c->nnodes) {
        /* Redlock: a majority, within the validity (drift allowed). */
        rc = rlock__rl_extend(m, token, lease_ms);
        ok = rc == 1;
        if (rc >= 0)
            rc = RLOCK_OK;
        drift_ns = rlock__rl_drift_ns(c, lease_ms);
        if (ok && rlock__now_ns() >=
                      t0 + lease_ms * RLOCK__NS_PER_MS - drift_ns)
            rc = rlock__fail(c, RLOCK_EQUORUM,
                             "extend: a majority answered only after the "
                             "new lease's validity had ended");
    } else {
        rc = rlock__eval_sync(c,
                              m->opts.layout == RLOCK_LAYOUT_NATIVE
                                  ? RLOCK__S_EXTEND
                                  : rlock__lay_script(m, RLOCK__S_TK_EXTEND),
                              &r, 1, (const char **)m->keys, m->key_lens, 3,
                              args, lens, replicas, &acks);
    }
    if (rc == RLOCK_OK && r && rlock__parse_extend(r, &ok) != RLOCK_OK)
        rc = bad_reply(c, "extend");
    if (r)
        freeReplyObject(r);
    /* Extended on the master, but a failover now could undo it. */
    if (rc == RLOCK_OK && ok && acks < replicas)
        rc = rlock__replicas_error(c, "extend", acks, replicas,
                                   "the lease end this client counts with "
                                   "is unchanged");

    pthread_mutex_lock(&c->mu);
    h = rlock__hold_find(c, m, thread);
    if (h)
        h->extending = 0;
    if (rc != RLOCK_OK) {
        /* The lease may or may not have been changed: believe whichever
         * ends first. */
        if (h && t0 + lease_ms * RLOCK__NS_PER_MS - drift_ns < h->valid_until)
            h->valid_until = t0 + lease_ms * RLOCK__NS_PER_MS - drift_ns;
    } else if (!ok) {
        if (h)
            rlock__hold_remove(c, h);
        rc = rlock__fail(c, RLOCK_ELOST,
                         "the hold had expired or was taken by another "
                         "owner; nothing was extended");
    } else if (h && h->lost) {
        /* Told lost already (the old lease ran out while this call
         * waited for its reply): it stays lost. */
        rlock__hold_remove(c, h);
        rc = rlock__fail(c, RLOCK_ELOST,
                         "the hold was reported lost before the extension "
                         "was confirmed");
    } else if (h) {
        h->valid_until = t0 + lease_ms * RLOCK__NS_PER_MS - drift_ns;
        h->cur_lease_ms = lease_ms;
        if (lease_ms < c->shortest_lease_ms)
            c->shortest_lease_ms = lease_ms;
        if (!h->watchdog)
            h->lease_ms = lease_ms; /* the caller's latest wish */
        if (h->watchdog)
            h->renew_at = t0 + lease_ms * RLOCK__NS_PER_MS / 3;
        rlock__bg_kick(c);
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int rlock_mutex_extend(rlock_mutex *m, int64_t lease_ms)
{
    if (!m)
        return rlock__fail(NULL, RLOCK_EINVAL, "mutex is NULL");
    rlock__client_after_fork_check(m->c);
    if (lease_ms <= 0 || lease_ms > RLOCK_MS_MAX)
        return rlock__fail(m->c, RLOCK_EINVAL,
                           "lease_ms must be 1 to %" PRId64, RLOCK_MS_MAX);
    return extend_hold(m, lease_ms);
}

int rlock__sync_new_hold(rlock_mutex *m)
{
    rlock_client *c = m->c;
    int replicas = rlock__sync_replicas(m), rc;
    char detail[512];

    if (replicas == 0)
        return RLOCK_OK;
    /* A write of our own (the lease set again) behind which WAIT counts:
     * replication keeps order, so a replica that has it has the
     * acquisition or grant too, whichever connection wrote that. */
    rc = extend_hold(m, hold_lease_ms(m));
    if (rc == RLOCK_OK || rc == RLOCK_ELOST)
        return rc;
    snprintf(detail, sizeof detail, "%s", rlock_client_errmsg(c));
    if (rc == RLOCK_EREPLICAS) {
        char *p = strstr(detail, "; the lease end");
        if (p)
            snprintf(p, sizeof detail - (size_t)(p - detail),
                     "; the lock was released again");
    }
    /* Not safely held: give it back (to the next waiter, if any). */
    rlock_mutex_unlock(m);
    return rlock__fail(c, rc, "%s", detail);
}

uint64_t rlock_mutex_token(rlock_mutex *m)
{
    rlock__hold *h;
    uint64_t token = 0;

    if (!m)
        return 0;
    rlock__client_after_fork_check(m->c);
    pthread_mutex_lock(&m->c->mu);
    h = rlock__hold_find(m->c, m, rlock__thread_number());
    if (h && !h->lost)
        token = h->token;
    pthread_mutex_unlock(&m->c->mu);
    return token;
}

int rlock_with(rlock_mutex *m, int64_t wait_ms,
               int (*fn)(void *arg, uint64_t token), void *arg)
{
    int rc, result;

    if (!m || !fn)
        return rlock__fail(m ? m->c : NULL, RLOCK_EINVAL,
                           "mutex and fn must not be NULL");
    if (wait_ms == RLOCK_WAIT_FOREVER)
        rc = rlock_mutex_lock(m);
    else
        rc = rlock_mutex_timedlock(m, wait_ms);
    if (rc != RLOCK_OK)
        return rc;
    result = fn(arg, rlock_mutex_token(m));
    rc = rlock_mutex_unlock(m);
    if (rc != RLOCK_OK && rc != RLOCK_ELOST)
        rc = rlock_mutex_unlock(m);
    if (rc == RLOCK_ELOST)
        return rc;
    if (rc != RLOCK_OK) {
        /* Redis could not be reached twice: stop renewing and let the lease
         * run out, since nobody is left to unlock. fn's work was done under
         * a valid hold, so its result stands. */
        rlock__hold *h;
        pthread_mutex_lock(&m->c->mu);
        h = rlock__hold_find(m->c, m, rlock__thread_number());
        if (h)
            rlock__hold_remove(m->c, h);
        pthread_mutex_unlock(&m->c->mu);
    }
    return result;
}
