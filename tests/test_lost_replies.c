/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Requests whose replies are lost. The server is paused so that a request
 * times out on the client but is carried out when the server resumes; the
 * client must end up agreeing with Redis, never holding less than it
 * believes, and never releasing twice.
 */
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "harness/test.h"

static rlock_client *short_timeouts(rt_server *s)
{
    rlock_client_opts o;

    rlock_client_opts_init(&o);
    o.command_timeout_ms = 300;
    return rt_client(rt_server_url(s), &o);
}

/* Runs op on m while the server is paused for longer than the command
 * timeout; the request is applied when the server resumes. */
static int paused_call(rt_server *s, int (*op)(rlock_mutex *), rlock_mutex *m)
{
    int rc;

    rt_server_pause(s);
    rc = op(m);
    rt_server_resume(s);
    rt_sleep_ms(100); /* let the server carry out what it received */
    return rc;
}

TEST(retried_unlock_never_releases_twice)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *c = short_timeouts(s);
    rlock_mutex *m = rt_mutex(c, "twice", NULL);

    /* A first pair: the client learns which last release this server
     * takes (a command the server does not know would not be carried
     * out when it resumes, which is not what this test is about). */
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    /* The inner unlock's reply is lost, but Redis did it. */
    CHECK_RC(paused_call(s, rlock_mutex_unlock, m), RLOCK_ENOREPLY);
    CHECK_INT(rt_lock_count(s, "twice"), ==, 1);
    /* Retried: still held once, as the caller believes. */
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:twice}"), ==, 1);
    CHECK_INT(rt_lock_count(s, "twice"), ==, 1);
    /* The final unlock's reply is lost too; the retry reports success. */
    CHECK_RC(paused_call(s, rlock_mutex_unlock, m), RLOCK_ENOREPLY);
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:twice}"), ==, 0);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_ENOTOWNER);
    rlock_mutex_free(m);
    rlock_client_close(c);
    rt_server_stop(s);
}

TEST(lost_reentry_reply_leaves_no_extra_hold)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *c = short_timeouts(s);
    rlock_mutex *m = rt_mutex(c, "reentry", NULL);

    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    /* The re-entry happens in Redis, but the caller hears a timeout and so
     * does not count it. */
    CHECK_RC(paused_call(s, rlock_mutex_lock, m), RLOCK_ENOREPLY);
    CHECK_INT(rt_lock_count(s, "reentry"), ==, 2);
    /* One unlock matches the one lock the caller believes it has. */
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:reentry}"), ==, 0);
    rlock_mutex_free(m);
    rlock_client_close(c);
    rt_server_stop(s);
}

/* Written by the background thread, read by the test's: an atomic, not a
 * volatile (which orders nothing between threads). */
static atomic_int callback_busy;

static void slow_on_lost(rlock_mutex *m, void *arg)
{
    (void)m;
    (void)arg;
    callback_busy = 1;
    rt_sleep_ms(3000); /* keeps the background thread away meanwhile */
    callback_busy = 0;
}

TEST(undo_of_a_late_attempt_never_removes_the_hold_taken_after_it)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client_opts co;
    rlock_client *c;
    rlock_client *other = rt_client(rt_server_url(s), NULL);
    rlock_mutex_opts o;
    rlock_mutex *busy, *mo;
    rlock_mutex *late;
    rt_locker b;

    rlock_client_opts_init(&co);
    co.command_timeout_ms = 10000; /* late, not timed out */
    c = rt_client(rt_server_url(s), &co);
    mo = rt_mutex(other, "late-undo", NULL);
    rlock_mutex_opts_init(&o);
    o.lease_ms = 100;
    o.on_lost = slow_on_lost;
    busy = rt_mutex(c, "keeps-bg-busy", &o);
    o.on_lost = NULL;
    o.lease_ms = 2000;
    late = rt_mutex(c, "late-undo", &o);

    /* The background thread will sit in a slow callback... */
    CHECK_RC(rlock_mutex_lock(busy), RLOCK_OK);
    RT_WAIT_UNTIL(callback_busy, 3000);
    /* ...while an acquire's reply arrives after its lease would have
     * ended. Its undo is queued for the background thread; the waiter
     * tries again, and finds the lock is its own. */
    rt_server_pause(s);
    rt_locker_start(&b, late, 0);
    rt_sleep_ms(2200); /* longer than the lease */
    rt_server_resume(s);
    CHECK_RC(rt_locker_join(&b), RLOCK_OK);
    CHECK(callback_busy); /* the undo has not been sent yet */
    RT_WAIT_UNTIL(!callback_busy, 5000);
    rt_sleep_ms(200); /* the background thread sends the queued undo */
    /* The undo named the abandoned attempt, not this hold (whose lease,
     * restarted by the claim, still runs). */
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:late-undo}"), ==, 1);
    CHECK_RC(rlock_mutex_trylock(mo), RLOCK_EBUSY);
    {
        /* The hold belongs to the thread that took it, which is gone. */
        rlock_status st;
        CHECK_RC(rlock_mutex_force_unlock(mo, &st), RLOCK_OK);
        CHECK(st.held && st.count == 1);
    }
    CHECK_RC(rlock_mutex_unlock(busy), RLOCK_ELOST);
    rlock_mutex_free(late);
    rlock_mutex_free(busy);
    rlock_mutex_free(mo);
    rlock_client_close(c);
    rlock_client_close(other);
    rt_server_stop(s);
}
