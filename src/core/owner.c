/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Owner numbers, the explicit owners' references, and the strings that
 * name an owner in Redis.
 *
 * The client part of an owner string is 128 bits from the OS random
 * source, so another process cannot guess it and release our lock; the
 * number is handed out once per thread or owner object.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fork.h"
#include "core/owner.h"
#include "util/dec.h"

static atomic_uint_fast64_t next_no = 1;
static _Thread_local uint64_t tl_no;

/* The owners' error texts are guarded by a few locks that every owner
 * shares, picked by its address: an async handle is an owner (100,000
 * of them on a loop), a lock of its own was 40 bytes of it, and errors
 * are rare and brief to record. */
#define ERRMSG_LOCKS 8
static pthread_mutex_t errmsg_locks[ERRMSG_LOCKS] = {
    PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
    PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
    PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
    PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER};

static pthread_mutex_t *errmsg_lock(const rlock_owner *o)
{
    uintptr_t a = (uintptr_t)o;

    return &errmsg_locks[((a >> 6) ^ (a >> 12)) % ERRMSG_LOCKS];
}

/* fork() holds them (core/fork.h), so that a child never finds one held
 * by a thread it does not have. */
static rlock__fork_guard errmsg_guard;
static pthread_once_t errmsg_once = PTHREAD_ONCE_INIT;

static void errmsg_hold(void *arg, int take)
{
    int i;

    (void)arg;
    for (i = 0; i < ERRMSG_LOCKS; i++)
        if (take)
            pthread_mutex_lock(&errmsg_locks[i]);
        else
            pthread_mutex_unlock(&errmsg_locks[i]);
}

static void errmsg_guard_add(void)
{
    errmsg_guard.hold = errmsg_hold;
    rlock__fork_guard_add(&errmsg_guard);
}

static uint64_t new_no(void)
{
    return atomic_fetch_add(&next_no, 1);
}

rlock__as rlock__as_thread(void)
{
    rlock__as as;

    if (tl_no == 0)
        tl_no = new_no();
    as.no = tl_no;
    as.obj = NULL;
    return as;
}

rlock__as rlock__as_owner(rlock_owner *o)
{
    rlock__as as;

    as.no = o->no;
    as.obj = o;
    return as;
}

/* The public functions of owners live here beside their references, so
 * that nothing else needs the object's insides. */
rlock_owner *rlock_owner_new(int *err)
{
    rlock_owner *o = calloc(1, sizeof *o);

    if (!o) {
        if (err)
            *err = RLOCK_ENOMEM;
        return NULL;
    }
    pthread_once(&errmsg_once, errmsg_guard_add);
    o->no = new_no();
    atomic_init(&o->refs, 1);
    atomic_init(&o->freed, 0);
    if (err)
        *err = RLOCK_OK;
    return o;
}

void rlock_owner_free(rlock_owner *o)
{
    if (!o)
        return;
    atomic_store(&o->freed, 1);
    rlock__owner_unref(o);
}

const char *rlock_owner_errmsg(rlock_owner *o)
{
    /* A copy for the calling thread, taken under the owner's lock: calls
     * as the owner on other threads (another mutex, or lease_left from a
     * thread that watches the hold) may write the owner's text meanwhile,
     * and a reader must never see it half written. */
    static _Thread_local char copy[RLOCK__ERR_MAX];

    if (!o)
        return "";
    pthread_mutex_lock(errmsg_lock(o));
    if (o->errmsg)
        memcpy(copy, o->errmsg, sizeof copy);
    else
        copy[0] = '\0';
    pthread_mutex_unlock(errmsg_lock(o));
    return copy;
}

void rlock__owner_ref(rlock_owner *obj)
{
    if (obj)
        atomic_fetch_add(&obj->refs, 1);
}

void rlock__owner_unref(rlock_owner *obj)
{
    if (obj && atomic_fetch_sub(&obj->refs, 1) == 1) {
        free(obj->errmsg);
        free(obj);
    }
}

int rlock__owner_gone(const rlock_owner *obj)
{
    return obj && atomic_load(&obj->freed);
}

void rlock__owner_set_errmsg(rlock_owner *obj, const char *msg)
{
    pthread_mutex_lock(errmsg_lock(obj));
    /* (Out of memory: the owner's record stays as it was.) */
    if (obj->errmsg || (obj->errmsg = malloc(RLOCK__ERR_MAX)) != NULL)
        snprintf(obj->errmsg, RLOCK__ERR_MAX, "%s", msg);
    pthread_mutex_unlock(errmsg_lock(obj));
}

/*
 * The identity an operator needs to find a holder: its host and process.
 * It travels inside the owner string (after the random id, before the
 * number), so it is kept with every hold at no cost: no extra field, no
 * extra command. Nothing compares it apart from the whole owner string,
 * and the wake-up channel is named by the random id alone.
 */
void rlock__who(char out[RLOCK__WHO_MAX])
{
    char host[256] = "";
    size_t i;

    if (gethostname(host, sizeof host - 1) != 0 || !host[0])
        snprintf(host, sizeof host, "unknown");
    host[RLOCK__HOST_MAX] = '\0';
    for (i = 0; host[i]; i++) {
        char ch = host[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
              (ch >= '0' && ch <= '9') || ch == '.' || ch == '-' || ch == '_'))
            host[i] = '_';
    }
    snprintf(out, RLOCK__WHO_MAX, "@%.48s/%ld", host, (long)getpid());
}

size_t rlock__owner_plain(const char id[RLOCK__ID_LEN + 1], const char *who,
                          uint64_t no, char buf[RLOCK__OWNER_MAX])
{
    /* Built for every request: copies, not printf. RLOCK__WHO_MAX bounds
     * who, so the whole always fits. */
    size_t n = strlen(who);

    memcpy(buf, id, RLOCK__ID_LEN);
    memcpy(buf + RLOCK__ID_LEN, who, n);
    n += RLOCK__ID_LEN;
    buf[n++] = ':';
    n += rlock__dec_u64(buf + n, no);
    buf[n] = '\0';
    return n;
}

size_t rlock__owner_uuid(const char id[RLOCK__ID_LEN + 1], uint64_t no,
                         char buf[RLOCK__OWNER_MAX])
{
    /* The client's 128 random bits grouped as a UUID keep every property
     * of the id (unguessable, unique per client and per fork). */
    return (size_t)snprintf(buf, RLOCK__OWNER_MAX,
                            "%.8s-%.4s-%.4s-%.4s-%.12s:%llu", id, id + 8,
                            id + 12, id + 16, id + 20, (unsigned long long)no);
}
