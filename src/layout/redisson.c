/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The Redisson layout (RLOCK_LAYOUT_REDISSON): Redisson's RLock, so that
 * rlock and Redisson (Java) exclude each other. The lock is a hash under
 * the name itself whose one field "<client id as a UUID>:<number>" holds
 * the hold count (re-entry is counted there, as Redisson counts its own);
 * the final release deletes it and publishes "0" on
 * "redisson_lock__channel:{<name>}", where Redisson's waiters listen.
 * Fencing tokens come from RFencedLock's counter
 * "redisson_lock_token:{<name>}".
 *
 * Redisson has no queue: a message wakes one waiting thread per client
 * (as Redisson does), which tries again; whoever comes first takes the
 * lock, and a thread that leaves without it passes the wake-up on.
 */
#include <stdlib.h>
#include <string.h>

#include "core/waiter.h"
#include "layout/layout.h"
#include "layout/scripts.h"

/* The lock's key is its name as given (the client's key prefix is not
 * used). Redisson's names for its other key and its channel are prefix
 * ":" name when the name has a '{' already, else prefix ":{" name "}", so
 * that they share the lock's cluster slot (RedissonObject.prefixName). */
static void key(const rlock_mutex *m, int i, rlock__key *k)
{
    static const char channel[] = "redisson_lock__channel",
                      token[] = "redisson_lock_token";
    int tag = memchr(m->name, '{', m->name_len) == NULL;

    rlock__key_init(k);
    if (i == RLOCK__CHANNEL)
        rlock__key_add(k, channel, sizeof channel - 1);
    else if (i == 1)
        rlock__key_add(k, token, sizeof token - 1);
    if (i != 0)
        rlock__key_add(k, tag ? ":{" : ":", tag ? 2 : 1);
    rlock__key_add(k, m->name, m->name_len);
    if (i != 0 && tag)
        rlock__key_add(k, "}", 1);
}

/* Redisson's field is "<UUID of the client>:<Java thread id>". rlock
 * writes a field of its own for each hold, "<client UUID>:<nonce>" (the
 * acquisition's nonce is unique in the client), so that a late request
 * of one hold (an undo, a retried release, a renewal never answered)
 * finds a later hold of the same owner a stranger. Redisson's clients
 * read only their own fields. */
static size_t owner(const rlock_client *c, uint64_t no, uint64_t nonce,
                    char buf[RLOCK__OWNER_MAX])
{
    (void)no;
    return rlock__owner_uuid(c->id, nonce, buf);
}

/* KEYS: lock, fence. ARGV: owner, lease_ms, count held (0: fresh), token
 * held, "host/pid". */
static void acquire(const rlock_mutex *m, const rlock__acq *a, rlock__req *r)
{
    rlock__req_init(r, &rlock__lua_redisson_acquire);
    rlock__req_lock_key(r, m, 0);
    rlock__req_lock_key(r, m, 1);
    rlock__req_arg(r, a->owner, a->owner_len);
    rlock__req_argi(r, a->lease_ms);
    rlock__req_argi(r, a->mode == 'r' ? a->count : 0);
    rlock__req_argu(r, a->mode == 'r' ? a->token : 0);
    rlock__req_args(r, a->who);
}

/* KEYS: lock. ARGV: owner, channel, count held. No token is kept with
 * the hold: the owner's field is the proof. */
static void release(const rlock_mutex *m, const char *o, size_t len,
                    uint64_t token, int64_t count, int fast, rlock__req *r)
{
    (void)token;
    (void)fast; /* no fast form */
    rlock__req_init(r, &rlock__lua_redisson_release);
    rlock__req_lock_key(r, m, 0);
    rlock__req_arg(r, o, len);
    rlock__req_lock_arg(r, m, RLOCK__CHANNEL);
    rlock__req_argi(r, count);
}

/* KEYS: lock. ARGV: owner, token (unused), lease_ms. */
static void extend(const rlock_mutex *m, const char *o, size_t len,
                   uint64_t token, uint64_t token_again, int64_t lease_ms,
                   rlock__req *r)
{
    (void)token_again;
    rlock__extend_req(&rlock__lua_redisson_extend, m, o, len, token, lease_ms,
                      r);
}

/* KEYS: lock. ARGV: owner, channel. */
static void cancel(const rlock_mutex *m, const char *o, size_t len,
                   uint64_t nonce, rlock__req *r)
{
    (void)nonce;
    rlock__req_init(r, &rlock__lua_redisson_cancel);
    rlock__req_lock_key(r, m, 0);
    rlock__req_arg(r, o, len);
    rlock__req_lock_arg(r, m, RLOCK__CHANNEL);
}

static void status(const rlock_mutex *m, rlock__req *r)
{
    rlock__req_init(r, &rlock__lua_redisson_status);
    rlock__req_lock_key(r, m, 0);
    rlock__req_lock_key(r, m, 1);
}

/* ARGV: channel. */
static void force(const rlock_mutex *m, unsigned flags, rlock__req *r)
{
    (void)flags; /* its locks always have an expiry */
    rlock__req_init(r, &rlock__lua_redisson_force);
    rlock__req_lock_key(r, m, 0);
    rlock__req_lock_key(r, m, 1);
    rlock__req_lock_arg(r, m, RLOCK__CHANNEL);
}

/* One channel per lock, shared by every client. */
static char *sub_channel(const rlock_client *c, const rlock_mutex *m,
                         size_t *len)
{
    (void)c;
    return rlock__lock_key_dup(m, RLOCK__CHANNEL, NULL, 0, len);
}

static int is_channel(const rlock_client *c, const rlock_mutex *m,
                      const char *ch, size_t len)
{
    (void)c;
    return rlock__lock_key_is(m, RLOCK__CHANNEL, NULL, 0, ch, len);
}

/* The longest-waiting thread that is not woken already (the list is
 * newest first) of the channel ch, or with ch NULL of m's lock; or NULL. */
static rlock__waiter *first_asleep(rlock_client *c, const char *ch, size_t len,
                                   const rlock_mutex *m)
{
    rlock__waiter *w, *found = NULL;

    for (w = c->waiters.list; w; w = w->next)
        if (w->m->layout == &rlock__layout_redisson && !w->woken &&
            (ch ? is_channel(c, w->m, ch, len)
                : w->m->name_len == m->name_len &&
                      memcmp(w->m->name, m->name, m->name_len) == 0))
            found = w;
    return found;
}

/* "1" (Redisson's read-write lock) wakes every waiter of the lock,
 * anything else ("0") one: a waiter already woken will try again after
 * this release anyway, so it does not count. */
static void message(rlock_client *c, const rlock__pubsub *p)
{
    rlock__waiter *w;

    if (p->who_len == 1 && p->who[0] == '1') {
        for (w = c->waiters.list; w; w = w->next)
            if (w->m->layout == &rlock__layout_redisson &&
                is_channel(c, w->m, p->channel, p->channel_len))
                rlock__waiter_wake(w);
    } else if ((w = first_asleep(c, p->channel, p->channel_len, NULL)) !=
               NULL) {
        rlock__waiter_wake(w);
    }
}

/* Its channel is its name's (the key prefix is not used): the waiters of
 * the same name. */
static void pass_on(rlock_client *c, const rlock_mutex *m)
{
    rlock__waiter *w = first_asleep(c, NULL, 0, m);

    if (w)
        rlock__waiter_wake(w);
}

static const rlock__script *const scripts[] = {
    &rlock__lua_redisson_acquire, &rlock__lua_redisson_release,
    &rlock__lua_redisson_extend,  &rlock__lua_redisson_renew,
    &rlock__lua_redisson_cancel,  &rlock__lua_redisson_status,
    &rlock__lua_redisson_force,   NULL,
};

const rlock__layout rlock__layout_redisson = {
    "Redisson",
    RLOCK_LAYOUT_REDISSON,
    RLOCK__LAY_COUNTS,
    1,
    2,
    key,
    owner,
    acquire,
    release,
    extend,
    cancel,
    NULL, /* retoken */
    NULL, /* fence: every acquisition draws its token */
    status,
    force,
    &rlock__lua_redisson_renew,
    NULL, /* renew_cas: no value to compare whole */
    NULL,
    NULL, /* release_cad: the same */
    NULL,
    scripts,
    rlock__parse_acquire,
    rlock__parse_release,
    rlock__parse_status,
    rlock__parse_force,
    sub_channel,
    is_channel,
    message,
    pass_on,
};
