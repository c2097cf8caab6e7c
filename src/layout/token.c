/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The token layout (RLOCK_LAYOUT_TOKEN): one string key, the lock's name
 * itself, set with SET NX PX to "<owner>:<token>", the owner string being
 * the hold's own (it ends with the acquisition's nonce) (redis-py's Lock,
 * node-redlock, redsync, the usual PHP and Go snippets), released by
 * compare-and-delete and extended by compare-and-pexpire, so that rlock
 * and those libraries exclude each other. Fencing tokens come from the
 * counter "<name>:rlock-fence", which only rlock increments.
 *
 * These peers publish nothing and count nothing: re-entry is counted by
 * the client, and waiting is by retries.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layout/layout.h"
#include "layout/scripts.h"
#include "util/dec.h"

/* The name as given (the peers' key), and the name with ":rlock-fence".
 * The client's key prefix is not used. */
static void key(const rlock_mutex *m, int i, rlock__key *k)
{
    static const char fence[] = ":rlock-fence";

    rlock__key_init(k);
    rlock__key_add(k, m->name, m->name_len);
    if (i == 1)
        rlock__key_add(k, fence, sizeof fence - 1);
}

/* "<client id>@<host>/<pid>:<owner number>.<nonce>": each hold writes
 * an owner string of its own, so that a late request of one hold (an
 * undo, a retried release, a renewal never answered) finds a later hold
 * of the same owner a stranger. The peers see an opaque token. */
static size_t owner(const rlock_client *c, uint64_t no, uint64_t nonce,
                    char buf[RLOCK__OWNER_MAX])
{
    size_t n = rlock__owner_plain(c->id, c->who, no, buf);

    buf[n++] = '.';
    n += rlock__dec_u64(buf + n, nonce);
    buf[n] = '\0';
    return n;
}

static void both_keys(const rlock_mutex *m, rlock__req *r)
{
    rlock__req_lock_key(r, m, 0);
    rlock__req_lock_key(r, m, 1);
}

/* KEYS: lock, fence. ARGV: owner, lease_ms. */
static void acquire(const rlock_mutex *m, const rlock__acq *a, rlock__req *r)
{
    rlock__req_init(r, &rlock__lua_token_acquire);
    both_keys(m, r);
    rlock__req_arg(r, a->owner, a->owner_len);
    rlock__req_argi(r, a->lease_ms);
}

/* KEYS: lock. ARGV: owner (the hold's own), nonce. */
static void release(const rlock_mutex *m, const char *o, size_t len,
                    uint64_t nonce, int64_t count, int fast, rlock__req *r)
{
    (void)count;
    (void)fast; /* no fast form */
    rlock__req_init(r, &rlock__lua_token_release);
    rlock__req_lock_key(r, m, 0);
    rlock__req_arg(r, o, len);
    rlock__req_argu(r, nonce);
}

/* KEYS: lock. ARGV: owner (the hold's own), token, lease_ms: the whole
 * value is compared. */
static void extend(const rlock_mutex *m, const char *o, size_t len,
                   uint64_t nonce, uint64_t token, int64_t lease_ms,
                   rlock__req *r)
{
    (void)nonce; /* in the owner string */
    rlock__extend_req(&rlock__lua_token_extend, m, o, len, token, lease_ms, r);
}

/* KEYS: lock. ARGV: owner, the abandoned acquisition's own string: the
 * hold it took, if any, is the one whose value starts with it. */
static void cancel(const rlock_mutex *m, const char *o, size_t len,
                   uint64_t nonce, rlock__req *r)
{
    (void)nonce;
    rlock__req_init(r, &rlock__lua_token_cancel);
    rlock__req_lock_key(r, m, 0);
    rlock__req_arg(r, o, len);
}

static void status(const rlock_mutex *m, rlock__req *r)
{
    rlock__req_init(r, &rlock__lua_token_status);
    both_keys(m, r);
}

/* ARGV: "1" to remove a key without expiry too. */
static void force(const rlock_mutex *m, unsigned flags, rlock__req *r)
{
    rlock__req_init(r, &rlock__lua_token_force);
    both_keys(m, r);
    rlock__req_args(r, flags & RLOCK_FORCE_NO_EXPIRY ? "1" : "0");
}

/* The lock's value v (NULL: no key) into st. The scripts refuse every
 * value that cannot be a lock (empty, NUL, spaces, ...), and a value is
 * a peer's own text: the token is rlock's only if it ends one. */
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

/* {value or '', pttl, last token}. */
static int decode_status(const redisReply *r, rlock_status *st)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
        r->element[0]->type != REDIS_REPLY_STRING ||
        r->element[1]->type != REDIS_REPLY_INTEGER ||
        r->element[2]->type != REDIS_REPLY_STRING)
        return RLOCK_EPROTO;
    fill(st, r->element[0]->len ? r->element[0]->str : NULL,
         r->element[1]->integer);
    st->last_token = strtoull(r->element[2]->str, NULL, 10);
    return RLOCK_OK;
}

/* The value removed, or nil. */
static int decode_force(const redisReply *r, rlock_status *removed,
                        char *unnotified, size_t len)
{
    if (len > 0)
        unnotified[0] = '\0';
    if (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_NIL)
        return RLOCK_EPROTO;
    fill(removed, r->type == REDIS_REPLY_STRING ? r->str : NULL, 0);
    return RLOCK_OK;
}

static const rlock__script *const scripts[] = {
    &rlock__lua_token_acquire, &rlock__lua_token_release,
    &rlock__lua_token_extend,  &rlock__lua_token_renew,
    &rlock__lua_token_cancel,  &rlock__lua_token_status,
    &rlock__lua_token_force,   NULL,
};

const rlock__layout rlock__layout_token = {
    "token",
    RLOCK_LAYOUT_TOKEN,
    0,
    0,
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
    &rlock__lua_token_renew,
    NULL, /* renew_cas: no value to compare whole */
    NULL,
    NULL, /* release_cad: the same */
    NULL,
    scripts,
    rlock__parse_acquire,
    rlock__parse_release,
    decode_status,
    decode_force,
    NULL,
    NULL,
    NULL,
    NULL,
};
