/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Explicit owners (rlock_owner, the _as calls): a hold that any thread may
 * release, re-entry counted per owner in every layout, owners that exclude
 * each other on one thread, waiting and hand-over as an owner, error
 * details kept per owner, and an owner's holds forgotten when it is freed.
 * Also: a release that Redis carries out but whose notification an ACL
 * refuses is reported as exactly that, never as a hold kept.
 */
#include <pthread.h>
#include <string.h>

#include "harness/test.h"

/* ---- a call on another thread ------------------------------------------ */

typedef struct as_call {
    rlock_mutex *m;
    rlock_owner *o;
    int op; /* 'l' lock_as, 'u' unlock_as, 't' trylock_as, 'n' unlock */
    int rc;
    pthread_t thread;
} as_call;

static void *as_main(void *arg)
{
    as_call *a = arg;

    switch (a->op) {
    case 'l':
        a->rc = rlock_mutex_lock_as(a->m, a->o);
        break;
    case 'u':
        a->rc = rlock_mutex_unlock_as(a->m, a->o);
        break;
    case 't':
        a->rc = rlock_mutex_trylock_as(a->m, a->o);
        break;
    default:
        a->rc = rlock_mutex_unlock(a->m);
        break;
    }
    return NULL;
}

/* Runs one call on a new thread and returns its code. */
static int on_thread(rlock_mutex *m, rlock_owner *o, int op)
{
    as_call a = {m, o, op, -100, 0};

    CHECK(pthread_create(&a.thread, NULL, as_main, &a) == 0);
    CHECK(pthread_join(a.thread, NULL) == 0);
    return a.rc;
}

static const int layouts[] = {RLOCK_LAYOUT_NATIVE, RLOCK_LAYOUT_TOKEN,
                              RLOCK_LAYOUT_REDISSON};

static rlock_mutex *mutex_of(rlock_client *c, const char *name, int layout)
{
    rlock_mutex_opts mo;

    rlock_mutex_opts_init(&mo);
    mo.layout = layout;
    return rt_mutex(c, name, &mo);
}

/* The lock's key, as each layout names it. */
static long long key_exists(rt_server *s, const char *name, int layout)
{
    if (layout == RLOCK_LAYOUT_NATIVE)
        return rt_cmd_int(s, "EXISTS {rlock:%s}", name);
    return rt_cmd_int(s, "EXISTS %s", name);
}

TEST(an_owner_locks_on_one_thread_and_unlocks_on_another)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *c = rt_client(rt_server_url(s), NULL);
    size_t i;

    for (i = 0; i < sizeof layouts / sizeof layouts[0]; i++) {
        rlock_mutex *m = mutex_of(c, "handed", layouts[i]);
        rlock_owner *o = rlock_owner_new(NULL);
        uint64_t token;

        CHECK(o != NULL);
        CHECK_RC(rlock_mutex_lock_as(m, o), RLOCK_OK);
        token = rlock_mutex_token_as(m, o);
        CHECK(token != 0 || layouts[i] == RLOCK_LAYOUT_REDISSON);
        /* The owner holds it, not the thread that locked: the thread's
         * own calls see no hold, on this thread and any other. */
        CHECK_INT(rlock_mutex_token(m), ==, 0);
        CHECK_RC(rlock_mutex_unlock(m), RLOCK_ENOTOWNER);
        CHECK_RC(on_thread(m, NULL, 'n'), RLOCK_ENOTOWNER);
        CHECK_INT(key_exists(s, "handed", layouts[i]), ==, 1);
        /* Any thread may act as the owner. */
        CHECK_RC(on_thread(m, o, 'u'), RLOCK_OK);
        CHECK_INT(key_exists(s, "handed", layouts[i]), ==, 0);
        CHECK_INT(rlock_mutex_token_as(m, o), ==, 0);
        CHECK_RC(rlock_mutex_unlock_as(m, o), RLOCK_ENOTOWNER);
        rlock_owner_free(o);
        rlock_mutex_free(m);
    }
    rlock_client_close(c);
    rt_server_stop(s);
}

TEST(reentry_is_counted_per_owner_whichever_thread_calls)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *c = rt_client(rt_server_url(s), NULL);
    size_t i;

    for (i = 0; i < sizeof layouts / sizeof layouts[0]; i++) {
        rlock_mutex *m = mutex_of(c, "again", layouts[i]);
        rlock_owner *o = rlock_owner_new(NULL);
        uint64_t token;

        CHECK_RC(rlock_mutex_lock_as(m, o), RLOCK_OK);
        token = rlock_mutex_token_as(m, o);
        /* Re-entry from another thread: the same owner, one more level. */
        CHECK_RC(on_thread(m, o, 't'), RLOCK_OK);
        CHECK_INT(rlock_mutex_token_as(m, o), ==, token);
        if (layouts[i] == RLOCK_LAYOUT_NATIVE)
            CHECK_INT(rt_lock_count(s, "again"), ==, 2);
        /* The thread is another owner: it waits its turn. */
        CHECK_RC(rlock_mutex_trylock(m), RLOCK_EBUSY);
        CHECK_RC(on_thread(m, o, 'u'), RLOCK_OK);
        CHECK_INT(key_exists(s, "again", layouts[i]), ==, 1);
        CHECK_RC(rlock_mutex_trylock(m), RLOCK_EBUSY);
        CHECK_RC(rlock_mutex_unlock_as(m, o), RLOCK_OK);
        CHECK_INT(key_exists(s, "again", layouts[i]), ==, 0);
        /* Now the thread's turn. */
        CHECK_RC(rlock_mutex_trylock(m), RLOCK_OK);
        CHECK_RC(rlock_mutex_trylock_as(m, o), RLOCK_EBUSY);
        CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
        rlock_owner_free(o);
        rlock_mutex_free(m);
    }
    rlock_client_close(c);
    rt_server_stop(s);
}

static int with_seen;
static int with_fn(void *arg, uint64_t token)
{
    rlock_mutex *m = arg;

    with_seen = token != 0 && rlock_mutex_trylock(m) == RLOCK_EBUSY;
    return 42;
}

TEST(owners_on_one_thread_exclude_each_other_and_wait_their_turn)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *c = rt_client(rt_server_url(s), NULL);
    rlock_mutex *m = rt_mutex(c, "pool", NULL);
    rlock_owner *a = rlock_owner_new(NULL), *b = rlock_owner_new(NULL);
    as_call wait = {m, b, 'l', -100, 0};
    int64_t t0;

    CHECK_RC(rlock_mutex_lock_as(m, a), RLOCK_OK);
    CHECK_RC(rlock_mutex_trylock_as(m, b), RLOCK_EBUSY);
    CHECK_RC(rlock_mutex_timedlock_as(m, b, 50), RLOCK_ETIMEDOUT);
    /* b waits (queued, woken by the release's message). */
    CHECK(pthread_create(&wait.thread, NULL, as_main, &wait) == 0);
    rt_sleep_ms(200);
    t0 = rt_now_ms();
    CHECK_RC(rlock_mutex_unlock_as(m, a), RLOCK_OK);
    CHECK(pthread_join(wait.thread, NULL) == 0);
    CHECK_RC(wait.rc, RLOCK_OK);
    /* Handed over by the release's message, not by a timer. */
    CHECK_INT(rt_now_ms() - t0, <, 1000);
    CHECK(rlock_mutex_token_as(m, b) != 0);
    CHECK_RC(rlock_mutex_unlock_as(m, b), RLOCK_OK);
    /* The callback form as an owner. */
    CHECK_INT(rlock_with_as(m, a, 1000, with_fn, m), ==, 42);
    CHECK(with_seen);
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:pool}"), ==, 0);
    rlock_owner_free(a);
    rlock_owner_free(b);
    rlock_mutex_free(m);
    rlock_client_close(c);
    rt_server_stop(s);
}

TEST(an_owners_error_detail_is_its_own)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *c = rt_client(rt_server_url(s), NULL);
    rlock_mutex *m = rt_mutex(c, "detail", NULL);
    rlock_owner *a = rlock_owner_new(NULL), *b = rlock_owner_new(NULL);

    CHECK(*rlock_owner_errmsg(a) == '\0');
    CHECK_RC(rlock_mutex_unlock_as(m, a), RLOCK_ENOTOWNER);
    CHECK(strstr(rlock_owner_errmsg(a), "holds no lock") != NULL);
    /* Another owner's failure on the same thread overwrites the thread's
     * record, not a's. */
    CHECK_RC(rlock_mutex_lock_as(m, b), RLOCK_OK);
    CHECK_RC(rlock_mutex_trylock_as(m, a), RLOCK_EBUSY);
    CHECK(strstr(rlock_owner_errmsg(a), "held") != NULL);
    CHECK_RC(rlock_mutex_extend_as(m, b, 0), RLOCK_EINVAL);
    CHECK(strstr(rlock_client_errmsg(c), "lease_ms") != NULL);
    CHECK(strstr(rlock_owner_errmsg(b), "lease_ms") != NULL);
    CHECK(strstr(rlock_owner_errmsg(a), "held") != NULL);
    CHECK_RC(rlock_mutex_unlock_as(m, b), RLOCK_OK);
    rlock_owner_free(a);
    rlock_owner_free(b);
    rlock_mutex_free(m);
    rlock_client_close(c);
    rt_server_stop(s);
}

TEST(freeing_an_owner_forgets_its_holds)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client_opts co;
    rlock_client *c;
    rlock_mutex *m;
    rlock_owner *o = rlock_owner_new(NULL), *kept = rlock_owner_new(NULL);
    rlock_mutex *other;

    rlock_client_opts_init(&co);
    co.watchdog_lease_ms = 600; /* renewed every 200 ms while held */
    c = rt_client(rt_server_url(s), &co);
    m = rt_mutex(c, "forgotten", NULL);
    other = rt_mutex(c, "kept", NULL);
    CHECK_RC(rlock_mutex_lock_as(m, o), RLOCK_OK);
    CHECK_RC(rlock_mutex_lock_as(other, kept), RLOCK_OK);
    rlock_owner_free(o);
    /* Not released: the key stays for what is left of its lease... */
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:forgotten}"), ==, 1);
    /* ...and is no longer renewed, while the other owner's is. */
    RT_WAIT_UNTIL(rt_cmd_int(s, "EXISTS {rlock:forgotten}") == 0, 3000);
    rt_sleep_ms(700);
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:kept}"), ==, 1);
    CHECK_RC(rlock_mutex_trylock(m), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock_as(other, kept), RLOCK_OK);
    rlock_owner_free(kept);
    rlock_mutex_free(m);
    rlock_mutex_free(other);
    rlock_client_close(c);
    rt_server_stop(s);
}

/* ---- a release whose notification is refused ---------------------------- */

/* A client as the ACL user "nopub", who may do everything but publish. */
static rlock_client *no_publish_client(rt_server *s)
{
    rlock_client_opts o;
    redisReply *r = rt_cmd(s, "ACL SETUSER nopub on >pw ~* &* +@all "
                              "-publish -spublish");

    CHECK(r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
    rlock_client_opts_init(&o);
    o.username = "nopub";
    o.password = "pw";
    return rt_client(rt_server_url(s), &o);
}

TEST(a_release_whose_notification_is_refused_says_so_and_holds_nothing)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *holder = no_publish_client(s), *waiting;
    rlock_client_opts wo;
    rlock_mutex *hm, *wm;
    rlock_status st;
    rt_locker w;
    int64_t t0;

    /* The waiter's keep-alive (a third of its place's life) is the timer
     * that must bring it the lock when no message does. */
    rlock_client_opts_init(&wo);
    wo.waiter_ttl_ms = 1500;
    waiting = rt_client(rt_server_url(s), &wo);
    hm = rt_mutex(holder, "unheard", NULL);
    wm = rt_mutex(waiting, "unheard", NULL);
    CHECK_RC(rlock_mutex_lock(hm), RLOCK_OK);
    rt_locker_start(&w, wm, 1);
    RT_WAIT_UNTIL(rt_cmd_int(s, "LLEN {rlock:unheard}:queue") == 1, 5000);
    t0 = rt_now_ms();
    CHECK_RC(rlock_mutex_unlock(hm), RLOCK_ENOTIFY);
    CHECK(strstr(rlock_client_errmsg(holder), "not notified") != NULL);
    /* The server's own words (Redis 7.0: "... can't run this command";
     * Valkey 8: "ACL failure in script: ... no permissions to run ...";
     * others NOPERM). */
    CHECK(strstr(rlock_client_errmsg(holder), "can't run") != NULL ||
          strstr(rlock_client_errmsg(holder), "permission") != NULL ||
          strstr(rlock_client_errmsg(holder), "NOPERM") != NULL);
    /* Released, and handed to the waiter: the holder claims nothing. */
    CHECK_INT(rlock_mutex_token(hm), ==, 0);
    CHECK_RC(rlock_mutex_unlock(hm), RLOCK_ENOTOWNER);
    /* Held by the waiter it was handed to, unless the waiter has taken
     * it already by its own timer (and then lets it go at once): on a slow
     * machine (ThreadSanitizer's) that can come before this status. */
    {
        int taken = atomic_load(&w.done);
        CHECK_RC(rlock_mutex_status(hm, &st), RLOCK_OK);
        CHECK(taken || (st.held && strstr(st.holder, "@") != NULL));
    }
    /* The waiter takes it by its own timer. */
    CHECK_RC(rt_locker_join(&w), RLOCK_OK);
    CHECK_INT(rt_now_ms() - t0, <, 1500 + 2000);
    CHECK(w.token != 0);
    /* An operator's release as that user says the same. */
    CHECK_RC(rlock_mutex_lock(wm), RLOCK_OK);
    rt_locker_start(&w, hm, 1);
    RT_WAIT_UNTIL(rt_cmd_int(s, "LLEN {rlock:unheard}:queue") == 1, 5000);
    {
        rlock_mutex *op = rt_mutex(holder, "unheard", NULL);
        rlock_status removed;
        CHECK_RC(rlock_mutex_force_unlock(op, &removed), RLOCK_ENOTIFY);
        CHECK(removed.held && removed.token != 0);
        rlock_mutex_free(op);
    }
    /* The waiter that was handed the lock takes it by its own timer. */
    CHECK_RC(rt_locker_join(&w), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(wm), RLOCK_ELOST);
    rlock_mutex_free(hm);
    rlock_mutex_free(wm);
    rlock_client_close(holder);
    rlock_client_close(waiting);
    rt_server_stop(s);
}

TEST(a_redisson_release_whose_message_is_refused_says_so)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *holder = no_publish_client(s), *waiting;
    rlock_client_opts wo;
    rlock_mutex *hm, *wm;
    rt_locker w;

    rlock_client_opts_init(&wo);
    wo.waiter_ttl_ms = 1500;
    waiting = rt_client(rt_server_url(s), &wo);
    hm = mutex_of(holder, "quiet", RLOCK_LAYOUT_REDISSON);
    wm = mutex_of(waiting, "quiet", RLOCK_LAYOUT_REDISSON);
    CHECK_RC(rlock_mutex_lock(hm), RLOCK_OK);
    rt_locker_start(&w, wm, 1);
    rt_sleep_ms(200);
    CHECK_RC(rlock_mutex_unlock(hm), RLOCK_ENOTIFY);
    CHECK_INT(rlock_mutex_token(hm), ==, 0);
    CHECK_RC(rlock_mutex_unlock(hm), RLOCK_ENOTOWNER);
    /* The waiter was told nothing: its own timer (a third of
     * waiter_ttl_ms) brings it back. */
    CHECK_RC(rt_locker_join(&w), RLOCK_OK);
    rlock_mutex_free(hm);
    rlock_mutex_free(wm);
    rlock_client_close(holder);
    rlock_client_close(waiting);
    rt_server_stop(s);
}
