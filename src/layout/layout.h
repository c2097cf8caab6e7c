/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Layouts: how a lock is kept in Redis. Each fills one table:
 *
 *   native.c    rlock's own: a string with owner, token, count, a FIFO
 *               queue, hand-over by a message to the next waiter
 *   token.c     the "SET key token NX PX" string of redis-py, node-redlock
 *               and redsync
 *   redisson.c  Redisson's RLock hash and its release channel
 *
 * A layout names the lock's keys and channel, builds each request (the
 * script and its arguments), reads each answer into the form the engine
 * works with, and says how its waiters are woken. It performs no I/O: the
 * engine sends what it builds through the backend. Adding a layout means
 * one file that fills this table, and a line in registry.c; a new
 * primitive (a read-write lock, a semaphore) is a new layout of the same
 * engine.
 */
#ifndef RLOCK_LAYOUT_LAYOUT_H
#define RLOCK_LAYOUT_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include <rlock/rlock.h>

#include "core/handles.h"
#include "core/hold.h"
#include "core/owner.h"
#include "core/reply.h"
#include "core/request.h"

/* What an acquisition asks for. */
typedef struct rlock__acq {
    const char *owner; /* as the layout writes it */
    size_t owner_len;
    int64_t lease_ms;
    char mode;      /* 't' try; 'w' wait (join the queue); 'r' re-enter */
    uint64_t nonce; /* names this acquisition (all its attempts) */
    int64_t count;  /* 'r': the count held */
    uint64_t token; /* 'r': the token held */
    uint64_t id;    /* 'r': the hold's id (hold_id) */
    int64_t waiter_ttl_ms;
    const char *who; /* the holder's "host/pid", for operators */
    int fast;        /* the fast form (RLOCK__LAY_FAST; 't' and 'w') */
    /* With fast: the token drawn with the acquisition. 0: the lean form,
     * which draws none where the layout can draw it later (fence). */
    int fenced;
} rlock__acq;

/* Re-entry is counted in Redis (the layout's scripts take and return the
 * count); without it the client counts re-entries and Redis sees one
 * hold. */
#define RLOCK__LAY_COUNTS 1u
/* Waiters queue in Redis ('w' attempts) and a release hands the lock to
 * the first of them (grants). */
#define RLOCK__LAY_QUEUE 2u
/* Can be held over a quorum of independent copies (Redlock): its scripts
 * need no queue or channel, and it can retoken. */
#define RLOCK__LAY_COPIES 4u
/* Its acquire and last-level release have a fast form (rlock__acq.fast,
 * release's fast) for a name nobody contends: fewer keys and arguments,
 * each of which costs Redis time, or no script at all. A fast form may
 * answer "again" (RLOCK__ACQ_AGAIN, RLOCK__RELEASE_AGAIN): nothing was
 * done, and the full form must be sent. */
#define RLOCK__LAY_FAST 8u

/* The longest key prefix a client takes (rlock_client_opts.key_prefix). */
#define RLOCK__PREFIX_MAX 64
/* key's i for the channel rather than a key. */
#define RLOCK__CHANNEL (-1)

/* A key or channel as a layout spells it: pieces (the name, the client's
 * key prefix, the layout's own words) that, end to end, make it. Written
 * into a request where it goes, or compared piece by piece, which stops
 * at the first piece that differs, as comparing whole strings did. */
#define RLOCK__KEY_PIECES 6 /* the most a layout uses (native) */
typedef struct rlock__key {
    const char *p[RLOCK__KEY_PIECES];
    size_t n[RLOCK__KEY_PIECES];
    int count;
    size_t len; /* of all pieces */
} rlock__key;

typedef struct rlock__layout {
    const char *name; /* "native", "token", "Redisson" */
    int id;           /* RLOCK_LAYOUT_* */
    unsigned flags;   /* RLOCK__LAY_* */
    /* Waiters are woken by messages on a channel (is_channel, message);
     * 0: by retries after a random delay only. */
    int wakes;

    /* How many keys a lock has (a request names some of them, the
     * lock's own key first). */
    int nkeys;
    /* Spells key i (0 .. nkeys - 1) of m's lock, or with RLOCK__CHANNEL
     * the channel its releases are announced on (layouts that wake), in
     * k. A handle keeps its lock's name only, and its keys are written
     * into each request as it is built: a copy of a few dozen bytes there
     * saves every handle (and so every waiter of a loop) its own copy of
     * five names. */
    void (*key)(const rlock_mutex *m, int i, rlock__key *k);
    /* The owner string of owner number no of client c, for the hold
     * taken (or the acquisition made) under nonce: layouts that know a
     * hold by its owner only (no nonce in Redis) write a string of its
     * own for each hold, so that a late request of one hold can never act
     * on another hold of the same owner. */
    size_t (*owner)(const rlock_client *c, uint64_t no, uint64_t nonce,
                    char buf[RLOCK__OWNER_MAX]);

    /* The requests. Strings given are borrowed by the request. */
    void (*acquire)(const rlock_mutex *m, const rlock__acq *a, rlock__req *r);
    void (*release)(const rlock_mutex *m, const char *owner, size_t len,
                    uint64_t id, int64_t count, int fast, rlock__req *r);
    void (*extend)(const rlock_mutex *m, const char *owner, size_t len,
                   uint64_t id, uint64_t token, int64_t lease_ms,
                   rlock__req *r);
    /* Undoes acquisition nonce (0: only the owner's place in the queue). */
    void (*cancel)(const rlock_mutex *m, const char *owner, size_t len,
                   uint64_t nonce, rlock__req *r);
    /* Redlock's second round: the hold nonce took gets token (NULL:
     * tokens are never agreed over copies). */
    void (*retoken)(const rlock_mutex *m, const char *owner, size_t len,
                    uint64_t nonce, uint64_t token, rlock__req *r);
    /* The token of owner's hold taken by acquisition nonce without one
     * (the lean form); the answer is the token, or -1 if the hold is gone
     * (rlock__parse_fence). NULL: every acquisition draws its token. */
    void (*fence)(const rlock_mutex *m, const char *owner, size_t len,
                  uint64_t nonce, rlock__req *r);
    void (*status)(const rlock_mutex *m, rlock__req *r);
    /* flags: RLOCK_FORCE_* (rlock_mutex_force_unlock_ex). */
    void (*force)(const rlock_mutex *m, unsigned flags, rlock__req *r);
    /* The watchdog's batch: KEYS are lock keys, ARGV (owner, id, token,
     * lease_ms) per key (token: the client's, 0 if not drawn); the answer
     * is 1 (renewed) or 0 (gone) per key. */
    const rlock__script *renew;
    /* The same renewal as a server-native compare-and-set, where the
     * server has one (NULL: the layout has no value a client can know
     * whole): renew_cas is the pipeline (rlock__script.each) and
     * renew_cas_add appends one hold's command to it, for the hold as
     * the client knows it (count: the count Redis keeps; token 0 if not
     * drawn). Each command's answer is +OK (renewed), nil (the value is
     * not that one: the script must decide) or an error. */
    const rlock__script *renew_cas;
    void (*renew_cas_add)(rlock__req *r, const char *key, size_t key_len,
                          const char *owner, size_t len, uint64_t id,
                          int64_t count, uint64_t token, int64_t lease_ms);
    /* The last level's release as a server-native compare-and-delete,
     * where the server has one (NULL: the layout has no value a client
     * can know whole). release_cad lists the commands to try, in order,
     * NULL-ended (a server may know one, both or none); release_cad_add
     * builds form f's request for the hold as the client knows it (count
     * 1, token 0 if not drawn). The answer is 1 (deleted: released, and
     * nobody was queued), 0 (the value is not that one: the full release
     * must decide) or an error. */
    const rlock__script *const *release_cad;
    void (*release_cad_add)(const rlock__script *f, const rlock_mutex *m,
                            const char *owner, size_t len, uint64_t id,
                            uint64_t token, rlock__req *r);
    /* Every script the layout's requests name (NULL-terminated), for the
     * servers to load before the first request. */
    const rlock__script *const *scripts;

    /* The answers. RLOCK_EPROTO for a reply the script cannot give. */
    int (*decode_acquire)(const redisReply *r, rlock__acquired *a);
    int (*decode_release)(const redisReply *r, rlock__released *out);
    int (*decode_status)(const redisReply *r, rlock_status *st);
    int (*decode_force)(const redisReply *r, rlock_status *removed,
                        char *unnotified, size_t len);

    /* Waking (wakes != 0). The channel client c listens on for m's lock
     * (malloc'ed, *len set), whether ch is it, and what a message on it
     * does to c's waiters (c->mu held). */
    char *(*sub_channel)(const rlock_client *c, const rlock_mutex *m,
                         size_t *len);
    int (*is_channel)(const rlock_client *c, const rlock_mutex *m,
                      const char *ch, size_t len);
    void (*message)(rlock_client *c, const rlock__pubsub *p);
    /* A waiter of m leaves without the lock: a wake-up it may have taken
     * goes to another waiter (c->mu held). NULL: nothing to pass on. */
    void (*pass_on)(rlock_client *c, const rlock_mutex *m);
} rlock__layout;

/* The layout of id (RLOCK_LAYOUT_*), or NULL. */
const rlock__layout *rlock__layout_of(int id);
/* Every script of every layout; *n is set to how many. */
const rlock__script *const *rlock__layout_scripts(int *n);

/* Makes k empty. */
void rlock__key_init(rlock__key *k);
/* Adds the n bytes at p (borrowed) after k's pieces. */
void rlock__key_add(rlock__key *k, const char *p, size_t n);

/* "prefix" ":" name followed by suffix, in braces as a hash tag:
 * "{prefix:name}suffix", in k. */
void rlock__tagged_key(const char *prefix, const char *name, size_t len,
                       const char *suffix, rlock__key *k);

/* Key i of m's lock (or RLOCK__CHANNEL), copied into request r: a key,
 * or with _arg an argument. */
void rlock__req_lock_key(rlock__req *r, const rlock_mutex *m, int i);
void rlock__req_lock_arg(rlock__req *r, const rlock_mutex *m, int i);
/* Key i of m's lock (or RLOCK__CHANNEL) followed by len bytes of tail,
 * in a block of its own (malloc'ed; *out_len set), or NULL. */
char *rlock__lock_key_dup(const rlock_mutex *m, int i, const char *tail,
                          size_t len, size_t *out_len);
/* Whether the len bytes at p are key i of m's lock (or RLOCK__CHANNEL)
 * followed by tail (tail_len bytes). */
int rlock__lock_key_is(const rlock_mutex *m, int i, const char *tail,
                       size_t tail_len, const char *p, size_t len);

/* The extend request every layout sends: KEYS lock, ARGV owner, id,
 * lease_ms, to script s (a layout may add arguments after them). */
void rlock__extend_req(const rlock__script *s, const rlock_mutex *m,
                       const char *owner, size_t len, uint64_t id,
                       int64_t lease_ms, rlock__req *r);

extern const rlock__layout rlock__layout_native;
extern const rlock__layout rlock__layout_token;
extern const rlock__layout rlock__layout_redisson;

#endif
