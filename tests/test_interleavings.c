/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Orders of events that broke the lock's promise (issue 29's holes), each
 * replayed against real servers: a re-lock while a loss notice waits, a
 * callback that runs long, an extension confirmed after the loss, a hand-
 * over synced under an expired deadline, an undo overtaking its attempt,
 * calls past their bound, a re-entry that renews nothing, a late request
 * of one hold acting on the next hold of the same owner. Each test fails
 * on the library as it was before its fix.
 */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness/fake_server.h"
#include "harness/proxy.h"
#include "harness/test.h"

/* ---- helpers ------------------------------------------------------------ */

/* An on_lost that notes when it was called (ms), and may sleep. */
typedef struct notice {
    atomic_llong at_ms; /* first call */
    atomic_int calls;
    atomic_int started; /* inside the callback */
    int sleep_ms;
} notice;

static void on_lost_note(rlock_mutex *m, void *arg)
{
    notice *n = arg;
    long long zero = 0;

    (void)m;
    atomic_compare_exchange_strong(&n->at_ms, &zero, (long long)rt_now_ms());
    atomic_fetch_add(&n->calls, 1);
    atomic_store(&n->started, 1);
    if (n->sleep_ms > 0)
        rt_sleep_ms(n->sleep_ms);
}

static rlock_mutex *noting_mutex(rlock_client *c, const char *name,
                                 int64_t lease_ms, notice *n)
{
    rlock_mutex_opts o;

    rlock_mutex_opts_init(&o);
    o.lease_ms = lease_ms;
    o.on_lost = on_lost_note;
    o.on_lost_arg = n;
    return rt_mutex(c, name, &o);
}

static rlock_client *client_with(const char *url, int64_t watchdog_ms,
                                 int timeout_ms)
{
    rlock_client_opts o;

    rlock_client_opts_init(&o);
    if (watchdog_ms)
        o.watchdog_lease_ms = watchdog_ms;
    if (timeout_ms)
        o.command_timeout_ms = timeout_ms;
    return rt_client(url, &o);
}

/* A client that waits for one replica (1 s at most) after each write; a
 * mutex with a fixed lease. */
static rlock_client *synced_client(const char *url, int timeout_ms)
{
    rlock_client_opts o;

    rlock_client_opts_init(&o);
    o.sync_replicas = 1;
    o.sync_timeout_ms = 1000;
    o.command_timeout_ms = timeout_ms;
    return rt_client(url, &o);
}

static rlock_mutex *leased_mutex(rlock_client *c, const char *name,
                                 int64_t lease_ms)
{
    rlock_mutex_opts mo;

    rlock_mutex_opts_init(&mo);
    mo.lease_ms = lease_ms;
    return rt_mutex(c, name, &mo);
}

/* ---- 1. a re-lock while a loss notice is pending ----------------------- */

/*
 * Both holds of one thread are lost at once (FLUSHALL). While the first
 * one's on_lost runs (slowly), the thread locks the second mutex again: a
 * re-entry as far as it knows. It must hear RLOCK_ELOST, never get a fresh
 * hold, and the second mutex's on_lost must still come.
 */
TEST(a_relock_while_a_loss_notice_is_pending_reports_the_loss)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *c = client_with(rt_server_url(s), 900, 0);
    notice na, nb;
    rlock_mutex *ma, *mb;

    memset(&na, 0, sizeof na);
    memset(&nb, 0, sizeof nb);
    na.sleep_ms = 1000;
    mb = noting_mutex(c, "second", 0, &nb);
    ma = noting_mutex(c, "first", 0, &na);
    /* b first: a is the newer hold, whose notice comes first. */
    CHECK_RC(rlock_mutex_lock(mb), RLOCK_OK);
    CHECK_RC(rlock_mutex_lock(ma), RLOCK_OK);
    freeReplyObject(rt_cmd(s, "FLUSHALL"));
    RT_WAIT_UNTIL(atomic_load(&na.started) || atomic_load(&nb.started), 5000);
    /* A re-lock of b: its hold is lost, whatever the callbacks do. */
    CHECK_RC(rlock_mutex_lock(mb), RLOCK_ELOST);
    CHECK(strstr(rlock_client_errmsg(c), "lost") != NULL);
    /* Reported and forgotten: nothing to unlock, and b's notice comes. */
    CHECK_RC(rlock_mutex_unlock(mb), RLOCK_ENOTOWNER);
    RT_WAIT_UNTIL(atomic_load(&nb.calls) == 1, 5000);
    RT_WAIT_UNTIL(atomic_load(&na.calls) == 1, 5000);
    /* The next lock is a fresh hold, and Redis has it. */
    CHECK_RC(rlock_mutex_lock(mb), RLOCK_OK);
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:second}"), ==, 1);
    CHECK_RC(rlock_mutex_unlock(mb), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(ma), RLOCK_ELOST);
    CHECK_INT(atomic_load(&nb.calls), ==, 1);
    rlock_mutex_free(ma);
    rlock_mutex_free(mb);
    rlock_client_close(c);
    rt_server_stop(s);
}

/* ---- 2. a slow on_lost callback ----------------------------------------- */

/*
 * One hold's on_lost sleeps 4 s. Another hold lost just after it must be
 * told within a renewal period, and a third hold must go on being
 * renewed: another client cannot take it meanwhile.
 */
TEST(a_slow_on_lost_holds_up_no_other_holds_renewal_or_notice)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *a = client_with(rt_server_url(s), 900, 0);
    rlock_client *b = rt_client(rt_server_url(s), NULL);
    notice ns, nq, nk;
    rlock_mutex *slow, *quick, *kept, *other;
    long long deleted_at;

    memset(&ns, 0, sizeof ns);
    memset(&nq, 0, sizeof nq);
    memset(&nk, 0, sizeof nk);
    ns.sleep_ms = 4000;
    slow = noting_mutex(a, "slow", 0, &ns);
    quick = noting_mutex(a, "quick", 0, &nq);
    kept = noting_mutex(a, "kept", 0, &nk);
    other = rt_mutex(b, "kept", NULL);
    CHECK_RC(rlock_mutex_lock(slow), RLOCK_OK);
    CHECK_RC(rlock_mutex_lock(quick), RLOCK_OK);
    CHECK_RC(rlock_mutex_lock(kept), RLOCK_OK);
    CHECK_INT(rt_cmd_int(s, "DEL {rlock:slow}"), ==, 1);
    RT_WAIT_UNTIL(atomic_load(&ns.started), 5000);
    /* The slow callback runs. */
    deleted_at = rt_now_ms();
    CHECK_INT(rt_cmd_int(s, "DEL {rlock:quick}"), ==, 1);
    /* Found gone by the next renewal (a third of 900 ms), told at once:
     * 2 s is a margin for a busy machine, against the 4 s callback. */
    RT_WAIT_UNTIL(atomic_load(&nq.calls) == 1, 10000);
    CHECK_INT(atomic_load(&nq.at_ms) - deleted_at, <, 2000);
    /* Meanwhile the third hold is renewed: b cannot take it while the
     * slow callback still runs. */
    CHECK_RC(rlock_mutex_timedlock(other, 1500), RLOCK_ETIMEDOUT);
    CHECK_INT(atomic_load(&ns.calls), ==, 1);
    CHECK_INT(atomic_load(&nk.calls), ==, 0);
    CHECK_RC(rlock_mutex_unlock(kept), RLOCK_OK);
    rlock_mutex_free(slow); /* waits for its callback */
    rlock_mutex_free(quick);
    rlock_mutex_free(kept);
    rlock_mutex_free(other);
    rlock_client_close(a);
    rlock_client_close(b);
    rt_server_stop(s);
}

/* ---- 3. an extension confirmed after the loss --------------------------- */

/*
 * A 1 s fixed lease; at 0.65 s the holder asks for 60 s more, and the
 * reply takes 600 ms: Redis extends the key at once, but the hold's lease
 * as the client counts it ends before the answer. The call says
 * RLOCK_ELOST, and the lock must not be left held by nobody for a minute:
 * it is given back.
 */
TEST(an_extension_confirmed_after_the_loss_gives_the_lock_back)
{
    rt_server *s = rt_server_start(NULL);
    rt_proxy *p = rt_proxy_start(rt_server_port(s));
    rlock_client *a = client_with(rt_proxy_url(p), 0, 3000);
    rlock_client *b = rt_client(rt_server_url(s), NULL);
    rlock_mutex *ma, *mb;
    notice n;

    memset(&n, 0, sizeof n);
    ma = noting_mutex(a, "extended", 1000, &n);
    mb = rt_mutex(b, "extended", NULL);
    CHECK_RC(rlock_mutex_lock(ma), RLOCK_OK);
    rt_sleep_ms(650);
    rt_proxy_set_delay(p, 0, 600);
    CHECK_RC(rlock_mutex_extend(ma, 60000), RLOCK_ELOST);
    rt_proxy_set_delay(p, 0, 0);
    /* Given back (within the extension's own call, or just after): b
     * takes it well before the minute. */
    CHECK_RC(rlock_mutex_timedlock(mb, 3000), RLOCK_OK);
    CHECK_INT(rt_cmd_int(s, "PTTL {rlock:extended}"), <=, 30000);
    CHECK_RC(rlock_mutex_unlock(mb), RLOCK_OK);
    RT_WAIT_UNTIL(atomic_load(&n.calls) == 1, 5000);
    rlock_mutex_free(ma);
    rlock_mutex_free(mb);
    rlock_client_close(a);
    rlock_client_close(b);
    rt_proxy_stop(p);
    rt_server_stop(s);
}

/*
 * The same gap in the replica check of a new hold (sync_replicas): the
 * acquisition's answer comes in time, the check's answer (the lease set
 * again, then WAIT) only after the lease as counted ended. The call must
 * not report the lock lost to a caller who never held it, and must give
 * it back.
 */
TEST(a_replica_check_confirmed_after_the_loss_gives_the_lock_back)
{
    rt_server *s = rt_server_start(NULL);
    rt_server *r = rt_replica_start(s, NULL, NULL);
    rt_proxy *p = rt_proxy_start(rt_server_port(s));
    rlock_client *a = synced_client(rt_proxy_url(p), 3000);
    rlock_mutex *m = leased_mutex(a, "checked", 700);
    int rc;

    /* 400 ms for each answer: the acquisition is in time (700 ms lease),
     * the check's answer 800 ms after the acquisition left is not. */
    rt_proxy_set_delay(p, 0, 400);
    rc = rlock_mutex_trylock(m);
    rt_proxy_set_delay(p, 0, 0);
    /* (A machine so slow that the acquisition itself came too late says
     * EBUSY too.) */
    CHECK_RC(rc, RLOCK_EBUSY);
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:checked}"), ==, 0);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_ENOTOWNER);
    rlock_mutex_free(m);
    rlock_client_close(a);
    rt_proxy_stop(p);
    rt_server_stop(r);
    rt_server_stop(s);
}

/* ---- 4. a hand-over after a long wait, with sync_replicas --------------- */

static void *lock_on_thread(void *arg)
{
    rt_locker *l = arg;

    l->rc = rlock_mutex_lock(l->m);
    if (l->rc == RLOCK_OK)
        l->rc = rlock_mutex_unlock(l->m);
    return NULL;
}

/*
 * A waiter handed the lock after 4 s (longer than one call's deadline:
 * command timeout 2 s + sync timeout 1 s) checks the replica under a
 * deadline of its own: lock() returns RLOCK_OK, and the lock is its.
 */
TEST(a_hand_over_after_a_long_wait_reaches_the_replicas)
{
    rt_server *s = rt_server_start(NULL);
    rt_server *r = rt_replica_start(s, NULL, NULL);
    rlock_client *a = synced_client(rt_server_url(s), 2000);
    rlock_client *b = synced_client(rt_server_url(s), 2000);
    rlock_mutex *ma, *mb;
    rt_locker l;

    ma = rt_mutex(a, "handed", NULL);
    mb = rt_mutex(b, "handed", NULL);
    CHECK_RC(rlock_mutex_lock(ma), RLOCK_OK);
    memset(&l, 0, sizeof l);
    l.m = mb;
    CHECK(pthread_create(&l.thread, NULL, lock_on_thread, &l) == 0);
    rt_sleep_ms(4000);
    CHECK_RC(rlock_mutex_unlock(ma), RLOCK_OK);
    pthread_join(l.thread, NULL);
    CHECK_RC(l.rc, RLOCK_OK);
    rlock_mutex_free(ma);
    rlock_mutex_free(mb);
    rlock_client_close(a);
    rlock_client_close(b);
    rt_server_stop(r);
    rt_server_stop(s);
}

/* ---- 5. an undo runs behind its attempt --------------------------------- */

/* The MONITOR lines of s that name key, read until `lines` came or ms
 * passed. */
typedef struct monitor {
    redisContext *ctx;
} monitor;

static void monitor_start(monitor *mon, rt_server *s)
{
    redisReply *r;

    mon->ctx = redisConnect("127.0.0.1", rt_server_port(s));
    CHECK(mon->ctx && !mon->ctx->err);
    r = redisCommand(mon->ctx, "MONITOR");
    CHECK(r && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
}

/* The client address of a MONITOR line ("... [0 127.0.0.1:5000] ..."). */
static void line_addr(const char *line, char *out, size_t len)
{
    const char *b = strchr(line, '['), *sp, *e;

    out[0] = '\0';
    if (!b || !(sp = strchr(b, ' ')) || !(e = strchr(sp, ']')) ||
        (size_t)(e - sp - 1) >= len)
        return;
    memcpy(out, sp + 1, (size_t)(e - sp - 1));
    out[e - sp - 1] = '\0';
}

/*
 * The server is paused while a trylock's request waits in its socket: the
 * call times out and its undo is sent at once. The server, resumed, must
 * run the undo after the attempt, on the attempt's own connection (the
 * same client address in MONITOR); an undo on a fresh connection could run
 * first, and the late attempt would then take a lock nobody owns.
 */
TEST(an_undo_runs_on_its_attempts_connection_after_it)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *c = client_with(rt_server_url(s), 0, 300);
    rlock_mutex *m = rt_mutex(c, "undone", NULL);
    char attempt_addr[64] = "", addr[64];
    int seen_attempt = 0, seen_undo = 0;
    monitor mon;

    /* A connection in the pool, and the name calm: the attempt is the
     * lean SET NX. */
    CHECK_RC(rlock_mutex_trylock(m), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    monitor_start(&mon, s);
    rt_server_pause(s);
    CHECK_RC(rlock_mutex_trylock(m), RLOCK_ENOREPLY);
    rt_sleep_ms(700); /* the background sends the undo again meanwhile */
    rt_server_resume(s);
    /* Every command on the lock after the attempt, up to and including
     * the first undo, comes from the attempt's connection. */
    while (!seen_undo) {
        redisReply *r = NULL;
        CHECK(redisGetReply(mon.ctx, (void **)&r) == REDIS_OK && r);
        CHECK(r->type == REDIS_REPLY_STATUS);
        if (strstr(r->str, "{rlock:undone}")) {
            line_addr(r->str, addr, sizeof addr);
            if (!seen_attempt && strstr(r->str, "\"SET\"")) {
                seen_attempt = 1;
                snprintf(attempt_addr, sizeof attempt_addr, "%s", addr);
            } else if (strstr(r->str, "\"EVALSHA\"") ||
                       strstr(r->str, "\"EVAL\"")) {
                if (!seen_attempt)
                    rt_fail(__FILE__, __LINE__,
                            "the undo ran before the attempt: %s", r->str);
                if (strcmp(addr, attempt_addr) != 0)
                    rt_fail(__FILE__, __LINE__,
                            "the undo came from %s, the attempt from %s", addr,
                            attempt_addr);
                seen_undo = 1;
            }
        }
        freeReplyObject(r);
    }
    /* Nobody holds it. */
    RT_WAIT_UNTIL(rt_cmd_int(s, "EXISTS {rlock:undone}") == 0, 3000);
    CHECK_RC(rlock_mutex_trylock(m), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    redisFree(mon.ctx);
    rlock_mutex_free(m);
    rlock_client_close(c);
    rt_server_stop(s);
}

/* ---- 6. every call ends within its bound -------------------------------- */

/*
 * timedlock(100) behind a holder, every reply 800 ms late, command timeout
 * 1 s: the attempt finds the lock busy after the wait's deadline; leaving
 * the queue must not start a deadline of its own. Bound: wait_ms + the
 * command timeout (the header's), 1.1 s; the undo that did not fit goes
 * to the background.
 */
TEST(a_timed_out_wait_leaves_the_queue_within_its_bound)
{
    rt_server *s = rt_server_start(NULL);
    rt_proxy *p = rt_proxy_start(rt_server_port(s));
    rlock_client *a = rt_client(rt_server_url(s), NULL);
    rlock_client *b = client_with(rt_proxy_url(p), 0, 1000);
    rlock_mutex *ma = rt_mutex(a, "bounded", NULL);
    rlock_mutex *mb = rt_mutex(b, "bounded", NULL);
    int64_t t0, took;

    CHECK_RC(rlock_mutex_lock(ma), RLOCK_OK);
    /* b has met contention: its next attempt is one round trip. */
    CHECK_RC(rlock_mutex_trylock(mb), RLOCK_EBUSY);
    rt_proxy_set_delay(p, 0, 800);
    t0 = rt_now_ms();
    CHECK_RC(rlock_mutex_timedlock(mb, 100), RLOCK_ETIMEDOUT);
    took = rt_now_ms() - t0;
    /* 1.1 s, and 300 ms for a busy machine; leaving afresh took 1.6 s. */
    CHECK_INT(took, <=, 1100 + 300);
    rt_proxy_set_delay(p, 0, 0);
    /* The place is given up in the background: the queue empties. */
    RT_WAIT_UNTIL(rt_cmd_int(s, "LLEN {rlock:bounded}:queue") == 0, 5000);
    CHECK_RC(rlock_mutex_unlock(ma), RLOCK_OK);
    rlock_mutex_free(ma);
    rlock_mutex_free(mb);
    rlock_client_close(a);
    rlock_client_close(b);
    rt_proxy_stop(p);
    rt_server_stop(s);
}

/*
 * Every reply 1.49 s late, a 1.5 s lease, command timeout 3 s: each
 * acquisition comes back after its lease and is undone. timedlock(3000)
 * must end by 3 s + 3 s (it took 7.5 s: an undo and the leaving each
 * started a deadline of their own).
 */
TEST(a_wait_whose_answers_come_at_the_lease_end_ends_within_its_bound)
{
    rt_server *s = rt_server_start(NULL);
    rt_proxy *p = rt_proxy_start(rt_server_port(s));
    rlock_client *c = client_with(rt_proxy_url(p), 0, 3000);
    rlock_mutex *m = leased_mutex(c, "late", 1500);
    int64_t t0, took;

    CHECK_RC(rlock_mutex_trylock(m), RLOCK_OK); /* connected, warm */
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    rt_proxy_set_delay(p, 0, 1490);
    t0 = rt_now_ms();
    CHECK_RC(rlock_mutex_timedlock(m, 3000), RLOCK_ETIMEDOUT);
    took = rt_now_ms() - t0;
    CHECK_INT(took, <=, 6000 + 500);
    rt_proxy_set_delay(p, 0, 0);
    /* Whatever the late answers took is given back. */
    RT_WAIT_UNTIL(rt_cmd_int(s, "EXISTS {rlock:late}") == 0, 5000);
    rlock_mutex_free(m);
    rlock_client_close(c);
    rt_proxy_stop(p);
    rt_server_stop(s);
}

/*
 * sync_replicas with the replica stopped and every answer 800 ms late:
 * the acquisition (0.8 s), the check (WAIT 1 s + 0.8 s) and the giving
 * back (0.8 s) would take 3.4 s; trylock's bound is the command timeout
 * plus the sync timeout, 2.8 s. What does not fit is given back in the
 * background.
 */
TEST(a_hold_the_replicas_did_not_confirm_is_given_back_within_the_bound)
{
    rt_server *s = rt_server_start(NULL);
    rt_server *r = rt_replica_start(s, NULL, NULL);
    rt_proxy *p = rt_proxy_start(rt_server_port(s));
    rlock_client *c = synced_client(rt_proxy_url(p), 1800);
    rlock_mutex *m = leased_mutex(c, "unsynced", 10000);
    int64_t t0, took;
    int rc;

    CHECK_RC(rlock_mutex_trylock(m), RLOCK_OK); /* warm */
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    rt_server_pause(r);
    rt_proxy_set_delay(p, 0, 800);
    t0 = rt_now_ms();
    rc = rlock_mutex_trylock(m);
    took = rt_now_ms() - t0;
    /* (On a machine too slow for the check to end in 2.8 s, it is the
     * deadline that says so.) */
    CHECK(rc == RLOCK_EREPLICAS || rc == RLOCK_ENOREPLY);
    CHECK_INT(took, <=, 2800 + 300);
    rt_proxy_set_delay(p, 0, 0);
    RT_WAIT_UNTIL(rt_cmd_int(s, "EXISTS {rlock:unsynced}") == 0, 5000);
    rt_server_resume(r);
    rlock_mutex_free(m);
    rlock_client_close(c);
    rt_proxy_stop(p);
    rt_server_stop(r);
    rt_server_stop(s);
}

/*
 * rlock(1) run -n against a server that answers the handshake but
 * trickles every later reply (a byte every 50 ms): exit 69 within about
 * the command timeout (2 s), not twice it.
 */
TEST(rlock_run_n_against_a_trickling_server_ends_within_the_command_timeout)
{
    rt_fake *f = rt_fake_start(RT_FAKE_TRICKLE, 0);
    const char *bin = getenv("RLOCK_BIN");
    int64_t t0, took;
    pid_t pid;
    int st;

    CHECK(bin != NULL);
    t0 = rt_now_ms();
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 1);
        dup2(devnull, 2);
        execl(bin, "rlock", "--redis", rt_fake_url(f), "run", "-n", "x", "--",
              "true", (char *)NULL);
        _exit(127);
    }
    CHECK(waitpid(pid, &st, 0) == pid);
    took = rt_now_ms() - t0;
    CHECK(WIFEXITED(st));
    CHECK_INT(WEXITSTATUS(st), ==, 69);
    CHECK_INT(took, <=, 2000 + 1000);
    rt_fake_stop(f);
}

/* ---- 7. a re-entry the client counts renews the lease ------------------- */

static void reentry_renews(const char *url, int layout, const char *key)
{
    rlock_client *a = rt_client(url, NULL);
    rlock_client *b = rt_client(url, NULL);
    rlock_mutex_opts o;
    rlock_mutex *ma, *mb;

    rlock_mutex_opts_init(&o);
    o.lease_ms = 1000;
    o.layout = layout;
    ma = rt_mutex(a, key, &o);
    mb = rt_mutex(b, key, &o);
    CHECK_RC(rlock_mutex_lock(ma), RLOCK_OK);
    rt_sleep_ms(700);
    CHECK_RC(rlock_mutex_lock(ma), RLOCK_OK); /* renews: 1 s from now */
    rt_sleep_ms(600);                         /* past the first lease */
    CHECK_RC(rlock_mutex_trylock(mb), RLOCK_EBUSY);
    CHECK_RC(rlock_mutex_unlock(ma), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(ma), RLOCK_OK);
    CHECK_RC(rlock_mutex_trylock(mb), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(mb), RLOCK_OK);
    /* Past its counted end, a re-entry is the loss's report. */
    CHECK_RC(rlock_mutex_lock(ma), RLOCK_OK);
    rt_sleep_ms(1100);
    CHECK_RC(rlock_mutex_lock(ma), RLOCK_ELOST);
    CHECK_RC(rlock_mutex_unlock(ma), RLOCK_ENOTOWNER);
    rlock_mutex_free(ma);
    rlock_mutex_free(mb);
    rlock_client_close(a);
    rlock_client_close(b);
}

TEST(a_reentry_counted_by_the_client_renews_the_lease)
{
    rt_server *s[3];
    char url[256];
    int i;

    for (i = 0; i < 3; i++)
        s[i] = rt_server_start(NULL);
    /* The token layout counts re-entries in the client. */
    reentry_renews(rt_server_url(s[0]), RLOCK_LAYOUT_TOKEN, "tok-reentry");
    /* So does every layout over Redlock's copies. */
    snprintf(url, sizeof url,
             "redlock://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d",
             rt_server_port(s[0]), rt_server_port(s[1]), rt_server_port(s[2]));
    reentry_renews(url, RLOCK_LAYOUT_NATIVE, "rl-reentry");
    for (i = 0; i < 3; i++)
        rt_server_stop(s[i]);
}

/* ---- the interop layouts: a late request touches its own hold only ------ */

/*
 * Redisson's release is owner-only. A final unlock held up in the network
 * (its caller got RLOCK_ENOREPLY and retried, as the header invites), then
 * a new hold of the same owner: when the old unlock arrives it must find a
 * stranger, not delete the new hold.
 */
TEST(a_late_release_of_one_redisson_hold_leaves_the_next_alone)
{
    rt_server *s = rt_server_start(NULL);
    rt_proxy *p = rt_proxy_start(rt_server_port(s));
    rlock_client *a = client_with(rt_proxy_url(p), 0, 300);
    rlock_client *b = rt_client(rt_server_url(s), NULL);
    rlock_mutex_opts o;
    rlock_mutex *ma, *mb;

    rlock_mutex_opts_init(&o);
    o.layout = RLOCK_LAYOUT_REDISSON;
    o.lease_ms = 30000;
    ma = rt_mutex(a, "rsn-late", &o);
    mb = rt_mutex(b, "rsn-late", &o);
    CHECK_RC(rlock_mutex_lock(ma), RLOCK_OK);
    rt_proxy_set_delay(p, 1500, 0); /* the request is held on its way */
    CHECK_RC(rlock_mutex_unlock(ma), RLOCK_ENOREPLY);
    rt_proxy_set_delay(p, 0, 0); /* new connections go at once */
    CHECK_RC(rlock_mutex_unlock(ma), RLOCK_OK);
    CHECK_RC(rlock_mutex_lock(ma), RLOCK_OK); /* the owner's next hold */
    rt_sleep_ms(1800);                        /* the old unlock lands */
    CHECK_INT(rt_cmd_int(s, "EXISTS rsn-late"), ==, 1);
    CHECK_RC(rlock_mutex_trylock(mb), RLOCK_EBUSY);
    CHECK_RC(rlock_mutex_unlock(ma), RLOCK_OK);
    rlock_mutex_free(ma);
    rlock_mutex_free(mb);
    rlock_client_close(a);
    rlock_client_close(b);
    rt_proxy_stop(p);
    rt_server_stop(s);
}

/*
 * The token layout's undo: an attempt held up in the network times out,
 * its undo is queued behind it, and the owner's retry takes the lock on
 * a fresh connection. When the old attempt and its undo arrive, the undo
 * must leave the retry's hold alone.
 */
TEST(a_late_undo_of_one_token_hold_leaves_the_next_alone)
{
    rt_server *s = rt_server_start(NULL);
    rt_proxy *p = rt_proxy_start(rt_server_port(s));
    rlock_client *a = client_with(rt_proxy_url(p), 0, 300);
    rlock_client *b = rt_client(rt_server_url(s), NULL);
    rlock_mutex_opts o;
    rlock_mutex *ma, *mb;

    rlock_mutex_opts_init(&o);
    o.layout = RLOCK_LAYOUT_TOKEN;
    o.lease_ms = 30000;
    ma = rt_mutex(a, "tok-late", &o);
    mb = rt_mutex(b, "tok-late", &o);
    CHECK_RC(rlock_mutex_trylock(ma), RLOCK_OK); /* a pooled connection */
    CHECK_RC(rlock_mutex_unlock(ma), RLOCK_OK);
    rt_proxy_set_delay(p, 1500, 0);
    CHECK_RC(rlock_mutex_trylock(ma), RLOCK_ENOREPLY);
    rt_proxy_set_delay(p, 0, 0);
    CHECK_RC(rlock_mutex_trylock(ma), RLOCK_OK); /* the retry */
    rt_sleep_ms(1800); /* the old attempt (busy) and its undo land */
    CHECK_INT(rt_cmd_int(s, "EXISTS tok-late"), ==, 1);
    CHECK_RC(rlock_mutex_trylock(mb), RLOCK_EBUSY);
    CHECK_RC(rlock_mutex_unlock(ma), RLOCK_OK);
    rlock_mutex_free(ma);
    rlock_mutex_free(mb);
    rlock_client_close(a);
    rlock_client_close(b);
    rt_proxy_stop(p);
    rt_server_stop(s);
}

/* ---- the watchdog never shortens an extension -------------------------- */

/*
 * A watchdog hold extended well past its watchdog lease: the watchdog
 * renews with its own, shorter lease, and renewing at a third of the
 * extension (or earlier) set a lease end sooner than the one the owner
 * was told of, so an owner that stalled then lost the lock before that end
 * (found by the explorer: seed 7027). Its renewals now wait until a
 * renewal leaves the end where it was, and then keep the hold.
 */
TEST(the_watchdog_never_shortens_an_extension)
{
    static const int layouts[] = {RLOCK_LAYOUT_TOKEN, RLOCK_LAYOUT_NATIVE};
    static const char *const names[] = {"wd-ext-tok", "wd-ext-nat"};
    static const char *const keys[] = {"wd-ext-tok", "{rlock:wd-ext-nat}"};
    rt_server *s = rt_server_start(NULL);
    rlock_client *a = client_with(rt_server_url(s), 900, 0);
    rlock_client *b = rt_client(rt_server_url(s), NULL);
    rlock_mutex *ma[2], *mb[2];
    long long t0;
    int64_t left;
    int i;

    for (i = 0; i < 2; i++) {
        rlock_mutex_opts o;

        rlock_mutex_opts_init(&o);
        o.layout = layouts[i];
        ma[i] = rt_mutex(a, names[i], &o);
        mb[i] = rt_mutex(b, names[i], &o);
        CHECK_RC(rlock_mutex_lock(ma[i]), RLOCK_OK);
    }
    t0 = rt_now_ms();
    for (i = 0; i < 2; i++)
        CHECK_RC(rlock_mutex_extend(ma[i], 4500), RLOCK_OK);
    /* Past a third of the extension (and past where half a period early
     * would renew): a renewal with 900 ms would have left under 900. */
    rt_sleep_ms(1800);
    for (i = 0; i < 2; i++) {
        long long gone = rt_now_ms() - t0;

        CHECK_INT(rt_cmd_int(s, "PTTL %s", keys[i]), >=, 4500 - gone - 400);
        CHECK_RC(rlock_mutex_lease_left(ma[i], &left), RLOCK_OK);
        CHECK_INT(left, >=, 4500 - (rt_now_ms() - t0) - 400);
    }
    /* Past the extension's end: renewed in time, still held. */
    rt_sleep_ms(3200);
    for (i = 0; i < 2; i++) {
        CHECK_RC(rlock_mutex_trylock(mb[i]), RLOCK_EBUSY);
        CHECK_RC(rlock_mutex_lease_left(ma[i], &left), RLOCK_OK);
        CHECK_INT(left, >, 0);
        CHECK_RC(rlock_mutex_unlock(ma[i]), RLOCK_OK);
        rlock_mutex_free(ma[i]);
        rlock_mutex_free(mb[i]);
    }
    rlock_client_close(a);
    rlock_client_close(b);
    rt_server_stop(s);
}
