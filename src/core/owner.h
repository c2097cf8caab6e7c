/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Owners: who holds a hold.
 *
 * An owner is a number, unique in the process and never 0, and the client
 * it acts through; in Redis it is written as the client's random id, the
 * process's identity for operators and the number (the layout decides the
 * exact form, layout/layout.h). Two kinds of owner share the numbers:
 *  - each thread is an owner (the pthread-like calls act as the calling
 *    thread);
 *  - an rlock_owner object is an owner that any thread may act as (the
 *    _as calls): a task of a thread pool, a coroutine, an event-loop
 *    callback. It also keeps the detail of its own last error, so that one
 *    task's error is not overwritten by another's on the same thread.
 * Re-entry is counted per owner: the hold table's key is (lock, owner).
 *
 * An rlock_owner is reference-counted: the application holds one
 * reference, and every hold taken as the owner holds one more. When the
 * application frees it, its holds are forgotten (no longer renewed; their
 * keys expire at the end of their lease), as rlock_mutex_free forgets a
 * mutex's holds.
 */
#ifndef RLOCK_CORE_OWNER_H
#define RLOCK_CORE_OWNER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <rlock/rlock.h>

#include "util/err.h"
#include "util/random.h"

/* The holder's identity for operators: "@<host>/<pid>", the host name cut
 * to RLOCK__HOST_MAX bytes of [A-Za-z0-9._-] (others become '_'). */
#define RLOCK__HOST_MAX 48
#define RLOCK__WHO_MAX (1 + RLOCK__HOST_MAX + 1 + 20 + 1)
/* The client id as a UUID (8-4-4-4-12 hex digits), as Redisson names its
 * clients. */
#define RLOCK__UUID_LEN 36
/* Longest client tag at the end of an owner string, with its NUL
 * (handles.h, owner_tag). */
#define RLOCK__TAG_MAX 16
/* Longest owner string of any layout, with its NUL. */
#define RLOCK__OWNER_MAX                                                       \
    (RLOCK__UUID_LEN + RLOCK__WHO_MAX + 1 + 20 + 1 + 20 + 1)

struct rlock_owner {
    uint64_t no;
    atomic_int refs;    /* the application's, and one per hold */
    atomic_int freed;   /* rlock_owner_free was called */
    /* RLOCK__ERR_MAX bytes, allocated at the first error (NULL before):
     * an owner that never fails costs little (one per async handle).
     * Guarded by one of a few locks shared by every owner (owner.c). */
    char *errmsg;
};

/* The owner a call acts as. */
typedef struct rlock__as {
    uint64_t no;      /* never 0 */
    rlock_owner *obj; /* the explicit owner, or NULL: the calling thread */
} rlock__as;

/* The calling thread as an owner. */
rlock__as rlock__as_thread(void);
/* o as an owner (o != NULL). */
rlock__as rlock__as_owner(rlock_owner *o);

/* A hold takes a reference on its explicit owner, and gives it back when
 * it goes (obj may be NULL: a thread). */
void rlock__owner_ref(rlock_owner *obj);
void rlock__owner_unref(rlock_owner *obj);
/* Whether the application freed the owner (its holds are forgotten). */
int rlock__owner_gone(const rlock_owner *obj);
/* Keeps msg as the owner's last error detail. */
void rlock__owner_set_errmsg(rlock_owner *obj, const char *msg);

/* "@<host>/<pid>" of the calling process into out. */
void rlock__who(char out[RLOCK__WHO_MAX]);

/* The owner strings the layouts write: "<id><who>:<no>", and Redisson's
 * field "<id as a UUID>:<no>". Return the length. */
size_t rlock__owner_plain(const char id[RLOCK__ID_LEN + 1], const char *who,
                          uint64_t no, char buf[RLOCK__OWNER_MAX]);
size_t rlock__owner_uuid(const char id[RLOCK__ID_LEN + 1], uint64_t no,
                         char buf[RLOCK__OWNER_MAX]);

#endif
