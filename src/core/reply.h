/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Private: what the library makes of Redis's answers (reply.c).
 *
 * Each function reads one reply that hiredis built and returns what it
 * means, or RLOCK_EPROTO if it is not a reply the script can give. They are
 * pure: no connection, no client, no lock, no error detail recorded (the
 * caller records it), and they never keep a pointer into the reply except
 * where a field says so. Any reply of any type may be passed, so that
 * fuzz/fuzz_reply.c can feed them whatever the reader makes of arbitrary
 * bytes.
 */
#ifndef RLOCK_REPLY_H
#define RLOCK_REPLY_H

#include <stddef.h>
#include <stdint.h>

#include <rlock/rlock.h>

#include "compat/hiredis_compat.h"

/* ---- the scripts' replies ---------------------------------------------- */

/* The largest token a script's integer answer may carry: 2^53, above
 * which a Lua number is no longer exact. */
#define RLOCK__TOKEN_MAX (UINT64_C(1) << 53)

/* The acquire script's answer: {1, token, count} (token "0": a hold
 * whose token is not drawn yet), {0, hint_ms}, {0, hint_ms, nodes} (held
 * by a client of a node list of another length), {-1}, or the token alone
 * (an integer: a fresh acquisition of a free lock nobody waited for,
 * count 1); 0 from a fast form: nothing done, ask the full script. The
 * lean form's SET NX answers +OK (taken, count 1, no token drawn) or nil
 * (nothing done: ask the full script). */
#define RLOCK__ACQ_AGAIN 2
typedef struct rlock__acquired {
    int status;      /* 1 held, 0 busy, -1 a re-entry found the hold gone,
                        RLOCK__ACQ_AGAIN */
    int plain;       /* status 1 from the token alone, or +OK */
    uint64_t token;  /* status 1: the fencing token, 0 if not drawn */
    int64_t count;   /* status 1: the hold count, >= 1 */
    int64_t hint_ms; /* status 0: how long the holder's lease lasts at
                        most, in [0, RLOCK_MS_MAX]; -1 if unknown */
    int list_nodes;  /* status 0: the holder's client lists that many
                        nodes, not as many as the caller's; 0 if not said */
} rlock__acquired;

int rlock__parse_acquire(const redisReply *r, rlock__acquired *out);

/* The release script's answer: the count left (0: released), or -1 if the
 * hold was not there, or RLOCK__RELEASE_AGAIN from a fast form (nothing
 * done: waiters may be queued, ask the full script); or {0, error}:
 * released, but the waiters could not be told (a refused PUBLISH), error
 * saying why. */
#define RLOCK__RELEASE_AGAIN (-2)
typedef struct rlock__released {
    int64_t remaining;
    char unnotified[200]; /* printable ASCII; "" if they were told */
} rlock__released;

int rlock__parse_release(const redisReply *r, rlock__released *out);

/* The fence script's answer: the token (*token, >= 1), or 0 in *token if
 * the hold is gone. */
int rlock__parse_fence(const redisReply *r, uint64_t *token);

/* The extend script's answer: *extended is 1 if the lease was set, 0 if
 * the hold was gone. */
int rlock__parse_extend(const redisReply *r, int *extended);

/* The renew script's answer to a batch of n holds: RLOCK_OK if it is an
 * array of n elements; then rlock__renewed(r, i) says whether hold i
 * (i < n) was renewed. */
int rlock__parse_renew(const redisReply *r, size_t n);
int rlock__renewed(const redisReply *r, size_t i);

/* The answers to a pipeline of n compare-and-set renewals (rs[0..nr)):
 * RLOCK_OK if there are n, each +OK (renewed), nil (not that value) or a
 * WRONGTYPE error (another type under the name); RLOCK_EPROTO for
 * anything else. Then rlock__cas_renewed(rs, i) says whether hold i
 * (i < n) was renewed. */
int rlock__parse_renew_cas(redisReply *const *rs, size_t nr, size_t n);
int rlock__cas_renewed(redisReply *const *rs, size_t i);
/* Whether such answers say that the server cannot renew so: an ERR that
 * the command is unknown, or malformed to it (a server without IFEQ says
 * "ERR syntax error"), NOPERM, or an answer that is no reply to SET at
 * all. Errors about the data, and those that pass (MOVED, ASK, LOADING,
 * BUSY, OOM, READONLY, TRYAGAIN...), do not. */
int rlock__cas_refused(redisReply *const *rs, size_t nr);

/* The answer to a compare-and-delete release (NULL: none):
 * RLOCK__CAD_DELETED (1), RLOCK__CAD_KEPT (0: not that value, or no
 * key), RLOCK__CAD_REFUSED (the server cannot delete so, as for
 * rlock__cas_refused: the command unknown or malformed to it, NOPERM, or
 * an answer no such command gives), RLOCK__CAD_OTHER (another error:
 * about the data, such as WRONGTYPE, or one that passes: the full
 * release decides). */
#define RLOCK__CAD_DELETED 1
#define RLOCK__CAD_KEPT 0
#define RLOCK__CAD_REFUSED (-1)
#define RLOCK__CAD_OTHER (-2)
int rlock__parse_cad(const redisReply *e);

/* The status script's snapshot into *st (untouched on RLOCK_EPROTO),
 * the holder's host and pid among it when its owner string or the
 * Redisson layout's seventh element names them. */
int rlock__parse_status(const redisReply *r, rlock_status *st);

/* The force script's answer: what was removed, or nothing (nil). *removed
 * is reset first, whatever the reply. A fifth element says why the
 * waiters could not be told (into unnotified, len bytes; "" otherwise). */
int rlock__parse_force(const redisReply *r, rlock_status *removed,
                       char *unnotified, size_t len);

/* The operators' scripts' refusal {0, "what the key is"}: 1, with that
 * text (printable ASCII, cut to len - 1 bytes) in why; 0 for any other
 * reply. */
int rlock__parse_refusal(const redisReply *r, char *why, size_t len);

/* The holder's host and pid from an owner string "<32 hex
 * digits>@<host>/<pid>:..." (rlock's own holds, and the token layout's
 * values rlock wrote) into st->holder_host and st->holder_pid; left ""
 * and 0 for anything else. */
void rlock__parse_identity(rlock_status *st, const char *owner);

/* The value of one INFO field ("redis_version", without the colon) into
 * out (len bytes, always NUL-terminated when len > 0; printable ASCII up
 * to the first space or line end; "" if absent). */
void rlock__parse_info_field(const redisReply *r, const char *field, char *out,
                             size_t len);

/* Which server answered an INFO (server section) reply: a digest of its
 * run_id, random for each start of the server, never 0; 0 when the reply
 * names none (an error: INFO renamed away, or denied by an ACL). */
uint64_t rlock__parse_run_id(const redisReply *r);

/* ---- the subscriber's messages ------------------------------------------ */

enum {
    RLOCK__PS_OTHER,    /* a push the subscriber does not act on */
    RLOCK__PS_MESSAGE,  /* a message on a wake channel */
    RLOCK__PS_SUBSCRIBE /* Redis confirmed a SUBSCRIBE */
};

/*
 * One push on the subscriber connection. A message is "<owner>" (try
 * again) or "<owner> <token> <nonce> <lease_ms>" (the lock was handed to
 * that owner's acquisition nonce, with that lease). channel and who point
 * into the reply.
 */
typedef struct rlock__pubsub {
    int kind; /* RLOCK__PS_* */
    const char *channel;
    size_t channel_len;
    const char *who; /* MESSAGE: the owner it names */
    size_t who_len;
    int grant;        /* MESSAGE: a grant, with: */
    uint64_t token;   /*   its fencing token, >= 1 */
    uint64_t nonce;   /*   the acquisition it was made to */
    int64_t lease_ms; /*   the lease Redis set, [0, RLOCK_MS_MAX] */
} rlock__pubsub;

/* RLOCK_EPROTO: not a push the subscriber understands (ignore it). */
int rlock__parse_pubsub(const redisReply *r, rlock__pubsub *out);

/* The fencing token at the end of a token-layout value
 * "<client id>@<host>/<pid>:<thread>:<token>" (rlock's own), or 0 for anything
 * else (a peer's value). */
uint64_t rlock__token_value(const char *v);

#endif
