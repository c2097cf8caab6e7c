/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * rlock's own layout (RLOCK_LAYOUT_NATIVE, docs/protocol.md): the lock is
 * a string "<owner> <nonce> <count> <w> <token>[ <end>]" under
 * "{prefix:name}" (lua/native_value.lua), read and written whole, beside
 * a fencing counter and a FIFO queue of waiters (a list, and a hash of
 * each place's deadline and what it asked for). A release hands the lock
 * to the first live waiter and tells that waiter's client on its own
 * channel, "{prefix:name}:wake:<client id>", so a release wakes one
 * process, not every process waiting for the lock. All four keys and the
 * channel share one hash tag: one cluster slot. A hold is known by its
 * owner and the nonce of the acquisition that took it.
 *
 * While a name is calm (m->calm), the acquisition and the last release go
 * in a fast form that carries only what the uncontended case reads. The
 * acquisition's lean form is no script at all: SET lock value NX PX
 * lease, which Redis runs as cheaply as any lock can be taken; it draws
 * no fencing token (the value says token 0), and fence() draws one when
 * the holder first asks. A queue keeps its lock key alive, so SET NX
 * never passes a queued waiter. For a mutex whose callers use tokens the
 * fast form is the fenced script instead (three keys, three arguments,
 * the token in the answer). The release's fast form is one key and one
 * argument. Each key and argument costs Redis time on every call
 * (docs/performance.md).
 *
 * It is the one layout that can be held over a quorum of copies
 * (Redlock): its acquire script takes a plain attempt, and its tokens can
 * be agreed over the nodes afterwards (retoken).
 */
#include <stdlib.h>
#include <string.h>

#include "core/waiter.h"
#include "layout/layout.h"
#include "layout/scripts.h"
#include "util/dec.h"

/* "{prefix:name}" and the key's suffix: lock, fence, queue, qinfo, and
 * the channel (the client id follows it: sub_channel). */
static void key(const rlock_mutex *m, int i, rlock__key *k)
{
    static const char *const suffix[] = {":wake", "", ":fence", ":queue",
                                         ":qinfo"};

    rlock__tagged_key(m->c->prefix, m->name, m->name_len, suffix[i + 1], k);
}

/* The longest plain owner string and the longest tag fit the owner
 * buffers. */
_Static_assert(RLOCK__ID_LEN + RLOCK__WHO_MAX + 1 + 20 + RLOCK__TAG_MAX <=
                   RLOCK__OWNER_MAX,
               "an owner string with its tag must fit RLOCK__OWNER_MAX");

/* The nonce is in the value beside the owner: the owner is the same for
 * every hold. The client's tag ends it (Redlock's node count: the acquire
 * script refuses a hold of another count). */
static size_t owner(const rlock_client *c, uint64_t no, uint64_t nonce,
                    char buf[RLOCK__OWNER_MAX])
{
    size_t n = rlock__owner_plain(c->id, c->who, no, buf);
    size_t t = strlen(c->owner_tag);

    (void)nonce;
    memcpy(buf + n, c->owner_tag, t + 1);
    return n + t;
}

/* The first n keys: lock, fence, queue, qinfo. */
static void keys(const rlock_mutex *m, int n, rlock__req *r)
{
    int i;

    for (i = 0; i < n; i++)
        rlock__req_lock_key(r, m, i);
}

/* "<owner> <nonce> " into buf (len + 22 bytes at most); its length. */
static size_t start(const char *o, size_t len, uint64_t nonce, char *buf)
{
    size_t n = len;

    memcpy(buf, o, len);
    buf[n++] = ' ';
    n += rlock__dec_u64(buf + n, nonce);
    buf[n++] = ' ';
    return n;
}

/* The lean acquisition: no script. A new lock "<owner> <nonce> 1 0 0"
 * (count 1, nobody queued, no token drawn) if the key is absent: +OK,
 * or nil (busy, queued for, or someone's data: ask the full form). */
static const rlock__script lean_set = {"acquire", NULL, 0, NULL, "SET", 0};

/* Lean form: SET lock value NX PX lease_ms. Fenced fast form: KEYS lock,
 * fence, queue; ARGV owner, lease_ms, nonce. Full: the four keys; ARGV
 * owner, lease_ms, nonce (a re-entry: the hold's), mode, waiter_ttl_ms,
 * and for a re-entry the count. */
static void acquire(const rlock_mutex *m, const rlock__acq *a, rlock__req *r)
{
    if (a->fast && !a->fenced) {
        char v[RLOCK__OWNER_MAX + RLOCK__DEC_MAX + 8];
        size_t n = start(a->owner, a->owner_len, a->nonce, v);
        memcpy(v + n, "1 0 0", 5);
        rlock__req_init(r, &lean_set);
        keys(m, 1, r);
        rlock__req_argcopy(r, v, n + 5);
        rlock__req_arg(r, "NX", 2);
        rlock__req_arg(r, "PX", 2);
        rlock__req_argi(r, a->lease_ms);
        return;
    }
    rlock__req_init(r, a->fast ? &rlock__lua_native_acquire_fast
                               : &rlock__lua_native_acquire);
    keys(m, a->fast ? 3 : 4, r);
    rlock__req_arg(r, a->owner, a->owner_len);
    rlock__req_argi(r, a->lease_ms);
    rlock__req_argu(r, a->mode == 'r' ? a->id : a->nonce);
    if (a->fast)
        return;
    rlock__req_arg(r, &a->mode, 1);
    rlock__req_argi(r, a->waiter_ttl_ms);
    if (a->mode == 'r')
        rlock__req_argi(r, a->count);
}

/* "<owner> <nonce> ": how the value of the hold starts. */
static void start_arg(const char *o, size_t len, uint64_t nonce, rlock__req *r)
{
    char buf[RLOCK__OWNER_MAX + RLOCK__DEC_MAX + 2];

    rlock__req_argcopy(r, buf, start(o, len, nonce, buf));
}

/* Fast form (the last level): KEYS lock; ARGV "<owner> <nonce> ". Full:
 * the four keys; ARGV that, count. */
static void release(const rlock_mutex *m, const char *o, size_t len,
                    uint64_t nonce, int64_t count, int fast, rlock__req *r)
{
    rlock__req_init(r, fast ? &rlock__lua_native_release_fast
                            : &rlock__lua_native_release);
    keys(m, fast ? 1 : 4, r);
    start_arg(o, len, nonce, r);
    if (!fast)
        rlock__req_argi(r, count);
}

/* KEYS: lock. ARGV: owner, nonce, lease_ms, the client's token (0: none
 * drawn), which Redis must still have. */
static void extend(const rlock_mutex *m, const char *o, size_t len,
                   uint64_t nonce, uint64_t token, int64_t lease_ms,
                   rlock__req *r)
{
    rlock__extend_req(&rlock__lua_native_extend, m, o, len, nonce, lease_ms, r);
    rlock__req_argu(r, token);
}

/* KEYS: lock, fence. ARGV: "<owner> <nonce> ". */
static void fence(const rlock_mutex *m, const char *o, size_t len,
                  uint64_t nonce, rlock__req *r)
{
    rlock__req_init(r, &rlock__lua_native_fence);
    keys(m, 2, r);
    start_arg(o, len, nonce, r);
}

/* ARGV: owner, nonce. */
static void cancel(const rlock_mutex *m, const char *o, size_t len,
                   uint64_t nonce, rlock__req *r)
{
    rlock__req_init(r, &rlock__lua_native_cancel);
    keys(m, 4, r);
    rlock__req_arg(r, o, len);
    rlock__req_argu(r, nonce);
}

/* KEYS: lock, fence. ARGV: owner, nonce, token. */
static void retoken(const rlock_mutex *m, const char *o, size_t len,
                    uint64_t nonce, uint64_t token, rlock__req *r)
{
    rlock__req_init(r, &rlock__lua_native_retoken);
    keys(m, 2, r);
    rlock__req_arg(r, o, len);
    rlock__req_argu(r, nonce);
    rlock__req_argu(r, token);
}

static void status(const rlock_mutex *m, rlock__req *r)
{
    rlock__req_init(r, &rlock__lua_native_status);
    keys(m, 4, r);
}

static void force(const rlock_mutex *m, unsigned flags, rlock__req *r)
{
    (void)flags; /* its locks always have an expiry */
    rlock__req_init(r, &rlock__lua_native_force);
    keys(m, 4, r);
}

/* "<wake channel>:<client id>": this client's channel for m's lock. */
static char *sub_channel(const rlock_client *c, const rlock_mutex *m,
                         size_t *len)
{
    char tail[1 + RLOCK__ID_LEN];

    tail[0] = ':';
    memcpy(tail + 1, c->id, RLOCK__ID_LEN);
    return rlock__lock_key_dup(m, RLOCK__CHANNEL, tail, sizeof tail, len);
}

static int is_channel(const rlock_client *c, const rlock_mutex *m,
                      const char *ch, size_t len)
{
    char tail[1 + RLOCK__ID_LEN];

    tail[0] = ':';
    memcpy(tail + 1, c->id, RLOCK__ID_LEN);
    return rlock__lock_key_is(m, RLOCK__CHANNEL, tail, sizeof tail, ch, len);
}

/* "<owner>" asks that waiter to try again; a grant tells it the lock was
 * handed to it. */
static void message(rlock_client *c, const rlock__pubsub *p)
{
    size_t hash = rlock__owner_hash(p->who, p->who_len);
    char who[RLOCK__OWNER_MAX];
    rlock__waiter *w;
    int by_list;

    /* The waiters of that owner string only (its bucket of the index). */
    for (w = rlock__waiter_first(&c->waiters, p->who, p->who_len, &by_list); w;
         w = by_list ? w->next : w->hnext) {
        c->waiters_looked++;
        if (w->m->layout != &rlock__layout_native || w->hash != hash ||
            owner(c, w->owner_no, w->nonce, who) != p->who_len ||
            memcmp(who, p->who, p->who_len) != 0 ||
            !is_channel(c, w->m, p->channel, p->channel_len))
            continue;
        /* A grant for another acquisition of this owner (one that gave
         * up) is not this wait's to take; but the lock may be this
         * owner's now, so it tries again at once: the attempt claims it
         * with a lease of its own. */
        if (p->grant && w->nonce == p->nonce) {
            w->granted = 1;
            w->grant_token = p->token;
            w->grant_ms = p->lease_ms;
        }
        rlock__waiter_wake(w);
    }
}

/* The watchdog's renewal where the server can compare and set (Valkey
 * 8.1's SET IFEQ): a hold nobody queues behind is "<owner> <nonce>
 * <count> 0 <token>", all of which its client knows, and its lease is the
 * key's expiry. SET key value IFEQ value PX lease_ms renews exactly that
 * hold and nothing else: any other value (waiters queued, another count,
 * another holder) is left as it is, answered nil, and asked again with
 * the renewal script. */
static const rlock__script renew_cas = {"renewal", NULL, 0, NULL, "SET", 7};

/* The whole value of a calm hold: "<owner> <nonce> <count> 0 <token>". */
#define CALM_MAX (RLOCK__OWNER_MAX + 3 * RLOCK__DEC_MAX + 8)
static size_t calm_value(const char *o, size_t len, uint64_t nonce,
                         int64_t count, uint64_t token, char v[CALM_MAX])
{
    size_t n = start(o, len, nonce, v);

    n += rlock__dec_i64(v + n, count);
    memcpy(v + n, " 0 ", 3);
    n += 3;
    return n + rlock__dec_u64(v + n, token);
}

static void renew_cas_add(rlock__req *r, const char *key, size_t key_len,
                          const char *o, size_t len, uint64_t nonce,
                          int64_t count, uint64_t token, int64_t lease_ms)
{
    char v[CALM_MAX];
    size_t n = calm_value(o, len, nonce, count, token, v);
    const char *p;

    rlock__req_command(r, key, key_len);
    rlock__req_argcopy(r, v, n);
    p = r->argv[r->argc - 1]; /* the copy, for IFEQ as well */
    rlock__req_arg(r, "IFEQ", 4);
    rlock__req_arg(r, p, n);
    rlock__req_arg(r, "PX", 2);
    rlock__req_argi(r, lease_ms);
}

/* The release of a calm hold's last level without a script: delete the
 * key if its value is exactly the calm hold's ("1 0": count 1, nobody
 * queued, so nobody to hand over to). Redis 8.4 and Valkey 9.2 have
 * DELEX key IFEQ value; Valkey 9.0 has DELIFEQ key value. Any other value
 * (waiters queued, another count or holder, a token the client does not
 * know) is left as it is, answered 0, and the full release decides. */
static const rlock__script release_delex = {"release", NULL, 0,
                                            NULL,      "DELEX", 4};
static const rlock__script release_delifeq = {"release", NULL, 0,
                                              NULL,      "DELIFEQ", 3};
static const rlock__script *const release_cad[] = {&release_delex,
                                                   &release_delifeq, NULL};

static void release_cad_add(const rlock__script *f, const rlock_mutex *m,
                            const char *o, size_t len, uint64_t nonce,
                            uint64_t token, rlock__req *r)
{
    char v[CALM_MAX];
    size_t n = calm_value(o, len, nonce, 1, token, v);

    rlock__req_init(r, f);
    /* The first command of the request: its name is the head, its key
     * the request's (rlock__req_command's first key, copied). */
    rlock__req_lock_key(r, m, 0);
    if (f == &release_delex)
        rlock__req_arg(r, "IFEQ", 4);
    rlock__req_argcopy(r, v, n);
}

static const rlock__script *const scripts[] = {
    &rlock__lua_native_acquire,
    &rlock__lua_native_acquire_fast,
    &rlock__lua_native_release,
    &rlock__lua_native_release_fast,
    &rlock__lua_native_extend,
    &rlock__lua_native_renew,
    &rlock__lua_native_cancel,
    &rlock__lua_native_retoken,
    &rlock__lua_native_fence,
    &rlock__lua_native_status,
    &rlock__lua_native_force,
    NULL,
};

const rlock__layout rlock__layout_native = {
    "native",
    RLOCK_LAYOUT_NATIVE,
    RLOCK__LAY_COUNTS | RLOCK__LAY_QUEUE | RLOCK__LAY_COPIES | RLOCK__LAY_FAST,
    1,
    4,
    key,
    owner,
    acquire,
    release,
    extend,
    cancel,
    retoken,
    fence,
    status,
    force,
    &rlock__lua_native_renew,
    &renew_cas,
    renew_cas_add,
    release_cad,
    release_cad_add,
    scripts,
    rlock__parse_acquire,
    rlock__parse_release,
    rlock__parse_status,
    rlock__parse_force,
    sub_channel,
    is_channel,
    message,
    NULL,
};
