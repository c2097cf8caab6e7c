/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The engine's calls as objects (engine/ops.h) driven by hand, as an
 * event loop drives them: each step of the op, and each request it asks
 * for as an rlock__bexec whose connections the test watches with poll(2)
 * calls of at most 1 ms. The same ops the blocking API runs, with the
 * same results in Redis; no turn of the loop may block.
 */
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "bg/bg.h"
#include "core/handles.h"
#include "engine/engine.h"
#include "engine/ops.h"
#include "harness/server.h"
#include "harness/test.h"
#include "util/clock.h"

typedef struct loop_stats {
    int64_t longest_ns; /* the longest turn */
    int sends;          /* requests the op asked for */
    int rounds;         /* rounds of those requests */
    int widest;         /* most connections in one round */
    int sleeps;         /* sleeps a wait asked for */
} loop_stats;

static void turn_done(loop_stats *st, int64_t t0)
{
    if (rlock__now_ns() - t0 > st->longest_ns)
        st->longest_ns = rlock__now_ns() - t0;
}

/* One round's connections, driven until each is settled or until comes. */
static void drive_round(rlock__conn **conns, const size_t *want, int n,
                        int64_t until, loop_stats *st)
{
    for (;;) {
        struct pollfd fds[RLOCK__NODES_MAX];
        int which[RLOCK__NODES_MAX], nfds = 0, i, r;
        int64_t t0;

        for (i = 0; i < n; i++) {
            if (rlock__conn_settled(conns[i], want[i]))
                continue;
            if (rlock__conn_events(conns[i]) == 0) {
                rlock__conn_fail(conns[i], RLOCK_EINVAL,
                                 "waiting for a reply to no command");
                continue;
            }
            fds[nfds].fd = rlock__conn_fd(conns[i]);
            fds[nfds].events = rlock__conn_events(conns[i]);
            fds[nfds].revents = 0;
            which[nfds++] = i;
        }
        if (nfds == 0 || rlock__now_ns() >= until)
            return;
        r = poll(fds, (nfds_t)nfds, 1);
        CHECK(r >= 0);
        t0 = rlock__now_ns();
        for (i = 0; i < nfds; i++)
            if (fds[i].revents || rlock__conn_buffered(conns[which[i]]))
                rlock__conn_io(conns[which[i]], fds[i].revents);
        turn_done(st, t0);
    }
}

/* Runs op to its end on the hand loop. */
static void run_op(rlock_mutex *m, rlock__step_fn step, void *op,
                   loop_stats *st)
{
    memset(st, 0, sizeof *st);
    for (;;) {
        rlock__conn *conns[RLOCK__NODES_MAX];
        size_t want[RLOCK__NODES_MAX];
        rlock__slot *slot;
        rlock__bexec b;
        int64_t until, t0 = rlock__now_ns();
        int what = step(op, &slot), n;

        turn_done(st, t0);
        if (what == RLOCK__STEP_DONE)
            return;
        if (what == RLOCK__STEP_QUIET) {
            poll(NULL, 0, 1);
            continue;
        }
        if (what == RLOCK__STEP_SLEEP) {
            /* The wait's sleep, as a loop without a wake-up callback has
             * it: a look at the waiter at every turn. */
            rlock__wait_op *w = op;
            int woken;
            st->sleeps++;
            do {
                poll(NULL, 0, 1);
                pthread_mutex_lock(&m->c->mu);
                woken = w->w.woken;
                pthread_mutex_unlock(&m->c->mu);
            } while (!woken && rlock__now_ns() < w->until);
            continue;
        }
        st->sends++;
        t0 = rlock__now_ns();
        if (!rlock__slot_start(slot, m->c, &b))
            continue;
        turn_done(st, t0);
        for (;;) {
            t0 = rlock__now_ns();
            if (!rlock__bexec_round(&b, conns, want, &n, &until))
                break;
            turn_done(st, t0);
            st->rounds++;
            if (n > st->widest)
                st->widest = n;
            if (n == 0)
                poll(NULL, 0, 1); /* a pause: the loop's timer */
            else
                drive_round(conns, want, n, until, st);
            t0 = rlock__now_ns();
            rlock__bexec_after(&b);
            turn_done(st, t0);
        }
        turn_done(st, t0);
    }
}

static int64_t key_pttl(rt_server *s, const char *name)
{
    return rt_cmd_int(s, "PTTL {rlock:%s}", name);
}

/*
 * An acquisition, an extension, a token drawn and a release, each an op
 * on the hand loop: Redis has the lock, then the longer lease, then no
 * lock; the token is drawn by one request, then known; a second
 * client of the blocking API finds it busy meanwhile; an attempt on the
 * lock that client then holds answers busy, with how long its lease
 * lasts.
 */
TEST(an_attempt_extend_and_release_run_as_objects_on_a_loop)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client_opts co;
    rlock_mutex_opts mo;
    rlock_client *c, *other;
    rlock_mutex *m, *m2;
    rlock__attempt_op a;
    rlock__extend_op e;
    rlock__release_op r;
    rlock__fence_op f;
    rlock__call call = {0};
    loop_stats st;
    uint64_t nonce, token;
    int64_t hint = 123, longest = 0;
    rlock__as me = rlock__as_thread();
    int err;

    rlock_client_opts_init(&co);
    rlock_mutex_opts_init(&mo);
    mo.lease_ms = 2000;
    CHECK((c = rlock_client_open(rt_server_url(s), &co, &err)) != NULL);
    CHECK((other = rlock_client_open(rt_server_url(s), &co, &err)) != NULL);
    CHECK((m = rlock_mutex_new(c, "ops", &mo, &err)) != NULL);
    CHECK((m2 = rlock_mutex_new(other, "ops", &mo, &err)) != NULL);

    nonce = rlock__new_nonce(c);
    rlock__call_end(&call);
    rlock__call_begin(&call, m);
    rlock__attempt_op_init(&a, &call, m, me, 't', &nonce, &hint);
    run_op(m, (rlock__step_fn)rlock__attempt_step, &a, &st);
    printf("acquired: %d, %d sends, %d rounds, longest turn %lld us\n", a.rc,
           st.sends, st.rounds, (long long)st.longest_ns / 1000);
    CHECK_RC(a.rc, RLOCK_OK);
    CHECK_INT(st.sends, >=, 1);
    CHECK_INT(key_pttl(s, "ops"), >, 0);
    CHECK_RC(rlock_mutex_trylock(m2), RLOCK_EBUSY);
    if (st.longest_ns > longest)
        longest = st.longest_ns;

    rlock__call_end(&call);
    rlock__call_begin(&call, m);
    rlock__extend_op_init(&e, &call, m, me, 60000, "extend", "unchanged");
    run_op(m, (rlock__step_fn)rlock__extend_step, &e, &st);
    CHECK_RC(e.rc, RLOCK_OK);
    CHECK_INT(key_pttl(s, "ops"), >, 30000);
    if (st.longest_ns > longest)
        longest = st.longest_ns;

    /* The lean acquisition drew no token: the fence op draws it, once. */
    rlock__call_end(&call);
    rlock__call_begin(&call, m);
    rlock__fence_op_init(&f, &call, m, me);
    run_op(m, (rlock__step_fn)rlock__fence_step, &f, &st);
    CHECK_RC(f.rc, RLOCK_OK);
    CHECK(f.token > 0);
    CHECK_INT(st.sends, ==, 1);
    token = f.token;
    rlock__fence_op_init(&f, &call, m, me);
    run_op(m, (rlock__step_fn)rlock__fence_step, &f, &st);
    CHECK_RC(f.rc, RLOCK_OK);
    CHECK(f.token == token);
    CHECK_INT(st.sends, ==, 0);

    rlock__call_end(&call);
    rlock__call_begin(&call, m);
    rlock__release_op_init(&r, &call, m, me);
    run_op(m, (rlock__step_fn)rlock__release_step, &r, &st);
    CHECK_RC(r.rc, RLOCK_OK);
    CHECK_INT(key_pttl(s, "ops"), ==, -2);
    if (st.longest_ns > longest)
        longest = st.longest_ns;

    /* Held by the other client now: busy, with a lease hint. */
    CHECK_RC(rlock_mutex_lock(m2), RLOCK_OK);
    nonce = rlock__new_nonce(c);
    rlock__call_end(&call);
    rlock__call_begin(&call, m);
    rlock__attempt_op_init(&a, &call, m, me, 't', &nonce, &hint);
    run_op(m, (rlock__step_fn)rlock__attempt_step, &a, &st);
    CHECK_RC(a.rc, RLOCK_EBUSY);
    CHECK_INT(hint, >, 0);
    CHECK_INT(hint, <=, 2000);
    if (st.longest_ns > longest)
        longest = st.longest_ns;
    /* The handle holds nothing: its release says so, without Redis. */
    rlock__call_end(&call);
    rlock__call_begin(&call, m);
    rlock__release_op_init(&r, &call, m, me);
    run_op(m, (rlock__step_fn)rlock__release_step, &r, &st);
    CHECK_RC(r.rc, RLOCK_ENOTOWNER);
    CHECK_INT(st.sends, ==, 0);
    CHECK_RC(rlock_mutex_unlock(m2), RLOCK_OK);

    printf("longest turn of the loop: %lld us\n", (long long)longest / 1000);
    CHECK_INT(longest, <, 200 * RLOCK__NS_PER_MS); /* a busy machine */
    rlock_mutex_free(m);
    rlock_mutex_free(m2);
    rlock_client_close(c);
    rlock_client_close(other);
    rt_server_stop(s);
    rlock__call_end(&call);
}

/*
 * Redlock's attempt over three masters: one request, whose one round
 * drives every master's connection at once (not one after the other),
 * and every master has the lock.
 */
TEST(a_redlock_attempt_asks_every_master_in_one_round)
{
    rt_server *s[3];
    rlock_client_opts co;
    rlock_mutex_opts mo;
    rlock_client *c;
    rlock_mutex *m;
    rlock__attempt_op a;
    rlock__release_op r;
    rlock__call call = {0};
    loop_stats st;
    uint64_t nonce;
    char url[256];
    int i, err;

    for (i = 0; i < 3; i++)
        s[i] = rt_server_start(NULL);
    snprintf(url, sizeof url,
             "redlock://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d",
             rt_server_port(s[0]), rt_server_port(s[1]), rt_server_port(s[2]));
    rlock_client_opts_init(&co);
    rlock_mutex_opts_init(&mo);
    mo.lease_ms = 5000;
    CHECK((c = rlock_client_open(url, &co, &err)) != NULL);
    CHECK((m = rlock_mutex_new(c, "ops-rl", &mo, &err)) != NULL);

    nonce = rlock__new_nonce(c);
    rlock__call_end(&call);
    rlock__call_begin(&call, m);
    rlock__attempt_op_init(&a, &call, m, rlock__as_thread(), 't', &nonce, NULL);
    run_op(m, (rlock__step_fn)rlock__attempt_step, &a, &st);
    printf("acquired: %d, %d sends, %d rounds, widest %d\n", a.rc, st.sends,
           st.rounds, st.widest);
    CHECK_RC(a.rc, RLOCK_OK);
    CHECK_INT(st.widest, ==, 3);
    for (i = 0; i < 3; i++)
        CHECK_INT(key_pttl(s[i], "ops-rl"), >, 0);

    rlock__call_end(&call);
    rlock__call_begin(&call, m);
    rlock__release_op_init(&r, &call, m, rlock__as_thread());
    run_op(m, (rlock__step_fn)rlock__release_step, &r, &st);
    CHECK_RC(r.rc, RLOCK_OK);
    CHECK_INT(st.widest, ==, 3);
    for (i = 0; i < 3; i++)
        CHECK_INT(key_pttl(s[i], "ops-rl"), ==, -2);

    rlock_mutex_free(m);
    rlock_client_close(c);
    for (i = 0; i < 3; i++)
        rt_server_stop(s[i]);
    rlock__call_end(&call);
}

typedef struct holder {
    rlock_mutex *m;
    rlock_owner *o;
    int delay_ms;
    int64_t released_at;
} holder;

static void *release_later(void *arg)
{
    holder *h = arg;

    poll(NULL, 0, h->delay_ms);
    h->released_at = rlock__now_ns();
    CHECK_RC(rlock_mutex_unlock_as(h->m, h->o), RLOCK_OK);
    return NULL;
}

/*
 * A wait as an op on the hand loop: the lock is held by another client
 * for a 10 s lease and released after 300 ms; the wait sleeps (asks the
 * loop to), is woken by the release's message and holds the lock soon
 * after the release, not at the end of the lease. A second wait, on a
 * lock nobody releases, ends at its own deadline, leaving no place in
 * the queue.
 */
TEST(a_wait_runs_as_an_object_and_is_woken_by_the_release)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client_opts co;
    rlock_mutex_opts mo;
    rlock_client *c, *other;
    rlock_mutex *m, *m2;
    rlock__wait_op w;
    rlock__call call = {0};
    loop_stats st;
    holder h;
    pthread_t th;
    int64_t t0, after_ms, took_ms;
    int err;

    rlock_client_opts_init(&co);
    rlock_mutex_opts_init(&mo);
    mo.lease_ms = 10000;
    CHECK((c = rlock_client_open(rt_server_url(s), &co, &err)) != NULL);
    CHECK((other = rlock_client_open(rt_server_url(s), &co, &err)) != NULL);
    CHECK((m = rlock_mutex_new(c, "ops-wait", &mo, &err)) != NULL);
    CHECK((m2 = rlock_mutex_new(other, "ops-wait", &mo, &err)) != NULL);

    CHECK((h.o = rlock_owner_new(&err)) != NULL);
    CHECK_RC(rlock_mutex_lock_as(m2, h.o), RLOCK_OK);
    h.m = m2;
    h.delay_ms = 300;
    CHECK(pthread_create(&th, NULL, release_later, &h) == 0);
    rlock__call_end(&call);
    rlock__call_begin(&call, m);
    rlock__wait_op_init(&w, &call, m, rlock__as_thread(), rlock__after_ms(8000),
                        0);
    run_op(m, (rlock__step_fn)rlock__wait_step, &w, &st);
    after_ms = (rlock__now_ns() - h.released_at) / RLOCK__NS_PER_MS;
    pthread_join(th, NULL);
    printf("wait: %d after %d attempts, %d sleeps, granted %d; %lld ms after "
           "the release; longest turn %lld us\n",
           w.rc, w.attempts, st.sleeps, w.granted, (long long)after_ms,
           (long long)st.longest_ns / 1000);
    CHECK_RC(w.rc, RLOCK_OK);
    CHECK(w.waited == 1);
    CHECK_INT(st.sleeps, >=, 1);
    CHECK_INT(after_ms, <, 3000); /* woken, not the 10 s lease */
    CHECK_INT(st.longest_ns, <, 200 * RLOCK__NS_PER_MS);
    CHECK_INT(rt_cmd_int(s, "PTTL {rlock:ops-wait}"), >, 0);
    CHECK_RC(rlock_mutex_trylock(m2), RLOCK_EBUSY);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);

    /* Nobody releases: the wait ends at its deadline, and leaves. */
    CHECK_RC(rlock_mutex_lock(m2), RLOCK_OK);
    t0 = rlock__now_ns();
    rlock__call_end(&call);
    rlock__call_begin(&call, m);
    rlock__wait_op_init(&w, &call, m, rlock__as_thread(), rlock__after_ms(400),
                        0);
    run_op(m, (rlock__step_fn)rlock__wait_step, &w, &st);
    took_ms = (rlock__now_ns() - t0) / RLOCK__NS_PER_MS;
    printf("timed wait: %d after %lld ms: %s\n", w.rc, (long long)took_ms,
           rlock__call_msg(&call));
    CHECK_RC(w.rc, RLOCK_ETIMEDOUT);
    CHECK_INT(took_ms, >=, 390);
    CHECK_INT(took_ms, <, 5000);
    /* Its place in the queue is gone: the holder's release leaves the
     * lock free, handed to nobody. */
    CHECK_RC(rlock_mutex_unlock(m2), RLOCK_OK);
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:ops-wait}"), ==, 0);

    rlock_owner_free(h.o);
    rlock_mutex_free(m);
    rlock_mutex_free(m2);
    rlock_client_close(c);
    rlock_client_close(other);
    rt_server_stop(s);
    rlock__call_end(&call);
}

/*
 * The watchdog's renewals as a call in steps, on the hand loop: three
 * watchdog holds made due at once go out in one batch, each
 * lease in Redis is set again (from the 2 s the test cut it to), and each
 * hold counts the renewal. The client's own background thread cannot take
 * them meanwhile: collecting marks them renewing.
 */
TEST(the_watchdogs_renewals_run_as_an_object_on_a_loop)
{
    rt_server *s = rt_server_start(NULL);
    static const char *names[3] = {"ops-wd-a", "ops-wd-b", "ops-wd-c"};
    rlock_client_opts co;
    rlock_client *c;
    rlock_mutex *m[3];
    rlock__renew_op *op;
    rlock__hold *h;
    loop_stats st;
    int i, err, sends = 0, rounds = 0;
    int64_t longest = 0;

    rlock_client_opts_init(&co);
    co.watchdog_lease_ms = 30000;
    CHECK((c = rlock_client_open(rt_server_url(s), &co, &err)) != NULL);
    for (i = 0; i < 3; i++) {
        CHECK((m[i] = rlock_mutex_new(c, names[i], NULL, &err)) != NULL);
        CHECK_RC(rlock_mutex_lock(m[i]), RLOCK_OK);
        CHECK(rt_cmd_int(s, "PEXPIRE {rlock:%s} 2000", names[i]) == 1);
    }
    pthread_mutex_lock(&c->mu);
    for (h = c->holds.list; h; h = h->next)
        h->renew_at = rlock__now_ns();
    op = rlock__renew_begin(c);
    CHECK(op != NULL);
    memset(&st, 0, sizeof st);
    for (;;) {
        rlock__conn *conns[RLOCK__NODES_MAX];
        size_t want[RLOCK__NODES_MAX];
        rlock__slot *slot;
        rlock__bexec b;
        int64_t until;
        int n;

        if (rlock__renew_step(op, &slot) != RLOCK__STEP_SEND)
            break;
        pthread_mutex_unlock(&c->mu);
        sends++;
        if (rlock__slot_start(slot, c, &b))
            while (rlock__bexec_round(&b, conns, want, &n, &until)) {
                rounds++;
                drive_round(conns, want, n, until, &st);
                rlock__bexec_after(&b);
            }
        pthread_mutex_lock(&c->mu);
    }
    rlock__renew_end(op);
    for (h = c->holds.list; h; h = h->next)
        CHECK_INT(h->renewals, ==, 1);
    pthread_mutex_unlock(&c->mu);
    longest = st.longest_ns;
    printf("renewed in %d request(s), %d round(s); longest turn %lld us\n",
           sends, rounds, (long long)longest / 1000);
    /* One batch: the native compare-and-set pipeline (a server without
     * SET IFEQ refuses it), then the script for what it left; never a
     * request per hold. */
    CHECK_INT(sends, >=, 1);
    CHECK_INT(sends, <=, 2);
    CHECK_INT(rounds, ==, sends);
    for (i = 0; i < 3; i++)
        CHECK_INT(rt_cmd_int(s, "PTTL {rlock:%s}", names[i]), >, 20000);
    CHECK_INT(longest, <, 200 * RLOCK__NS_PER_MS);
    for (i = 0; i < 3; i++) {
        CHECK_RC(rlock_mutex_unlock(m[i]), RLOCK_OK);
        rlock_mutex_free(m[i]);
    }
    rlock_client_close(c);
    rt_server_stop(s);
}
