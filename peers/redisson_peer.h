/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A Redisson client, played on the wire with raw hiredis, for the tests
 * (tests/test_redisson.c) and the bench (bench/interop.c) of rlock's
 * Redisson layout. It lives apart from both (peers/) because it is
 * neither: a model of another library's protocol, which the benchmark
 * measures against and the tests check against, with no test-harness code
 * in it.
 *
 * Redisson itself needs a JVM and Maven Central, which this project's
 * machines do not reach, so this does what Redisson's RLock, RFencedLock
 * and LockPubSub do, as their sources describe it (docs/interop.md names
 * the versions):
 *  - lock: if the hash is missing or has my field, add 1 to my field and
 *    set the lease; otherwise answer the lock's PTTL;
 *  - unlock (3.24 and later): a per-request "unlock latch" key makes a
 *    retried unlock idempotent; take 1 from my field, and at 0 delete the
 *    hash and publish 0 on redisson_lock__channel:{name};
 *  - waiting: subscribe to that channel, then try again after each message,
 *    or after the PTTL the last try answered;
 *  - RFencedLock: every acquisition INCRs redisson_lock_token:{name};
 *  - forceUnlock: delete, and publish 0 if there was something.
 * Each function uses the connection it is given, one thread at a time.
 * Errors are -1 with a line on stderr.
 */
#ifndef RLOCK_PEERS_REDISSON_PEER_H
#define RLOCK_PEERS_REDISSON_PEER_H

#include <stddef.h>

#include "../src/compat/hiredis_compat.h"

/* Redisson's name for a lock's channel or token key: prefix ":" name if
 * the name has a '{', else prefix ":{" name "}". */
void rp_name(char *buf, size_t len, const char *prefix, const char *name);

/* RLock.tryLock once: 1 held (Redisson's nil), 0 busy with the lock's PTTL
 * in *out. fenced: as RFencedLock, which also INCRs the token key; the
 * token is then in *out. */
int rp_try(redisContext *x, const char *name, const char *field,
           long long lease_ms, int fenced, long long *out);

/* RLock.unlock: 1 released, 0 one level off, -2 not held (Redisson's
 * IllegalMonitorStateException). */
int rp_unlock(redisContext *x, const char *name, const char *field,
              long long lease_ms);

/* RLock.forceUnlock: 1 if there was a lock, 0 if not. */
int rp_force_unlock(redisContext *x, const char *name);

/* Subscribes x to the lock's channel, as LockPubSub does (sharded: with
 * SSUBSCRIBE, as Redisson's sharded mode on a Redis 7 cluster). x is a
 * subscriber from then on. 0 or -1. */
int rp_listen(redisContext *x, const char *name, int sharded);

/* The next message on a listening connection within timeout_ms: 1 with
 * its text in msg, 0 if none came, -1 on error. */
int rp_message(redisContext *x, int timeout_ms, char *msg, size_t len);

#endif
