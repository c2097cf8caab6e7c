/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The event-loop API (rlock/async.h) through its generic hooks, on a loop
 * of the test's own: poll(2) over the descriptors the library asks it to
 * watch, and the one timer it asks for. The loop checks the library's
 * word: a descriptor it is told to forget is still open, none it watches
 * is closed, and no turn takes long.
 */
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <rlock/async.h>

#include "harness/aloop.h"
#include "harness/fake_server.h"
#include "harness/proxy.h"
#include "harness/test.h"

/* Hooks that are never called: an attach that must be refused. */
static void no_watch(void *arg, int fd, int events)
{
    (void)arg;
    (void)fd;
    (void)events;
    CHECK(0);
}

static void no_timer(void *arg, int64_t after_ms)
{
    (void)arg;
    (void)after_ms;
    CHECK(0);
}

/* What a callback saw. */
typedef struct seen {
    int calls, status;
    uint64_t token;
    rlock_async_mutex *m;
    int order; /* the how-many-th callback of the test it was */
} seen;

static int callbacks_so_far;

static void lock_cb(rlock_async_mutex *m, int status, uint64_t token, void *arg)
{
    seen *s = arg;

    s->calls++;
    s->status = status;
    s->token = token;
    s->m = m;
    s->order = ++callbacks_so_far;
}

static void done_cb(rlock_async_mutex *m, int status, void *arg)
{
    seen *s = arg;

    s->calls++;
    s->status = status;
    s->m = m;
    s->order = ++callbacks_so_far;
}

/* Locks m (waiting up to wait_ms) and turns until the callback: its
 * status. */
static int al_lock(rt_aloop *p, rlock_async_mutex *m, int64_t wait_ms,
                   uint64_t *token)
{
    seen s;

    memset(&s, 0, sizeof s);
    CHECK_RC(rlock_async_lock(m, wait_ms, lock_cb, &s), RLOCK_OK);
    CHECK_INT(s.calls, ==, 0); /* never inside the call */
    rt_al_until(p, &s.calls, 20000);
    CHECK_INT(s.calls, ==, 1);
    CHECK(s.m == m);
    if (token)
        *token = s.token;
    return s.status;
}

static int al_unlock(rt_aloop *p, rlock_async_mutex *m)
{
    seen s;

    memset(&s, 0, sizeof s);
    CHECK_RC(rlock_async_unlock(m, done_cb, &s), RLOCK_OK);
    CHECK_INT(s.calls, ==, 0);
    rt_al_until(p, &s.calls, 20000);
    CHECK_INT(s.calls, ==, 1);
    return s.status;
}

static int al_extend(rt_aloop *p, rlock_async_mutex *m, int64_t lease_ms)
{
    seen s;

    memset(&s, 0, sizeof s);
    CHECK_RC(rlock_async_extend(m, lease_ms, done_cb, &s), RLOCK_OK);
    rt_al_until(p, &s.calls, 20000);
    CHECK_INT(s.calls, ==, 1);
    return s.status;
}

/* An async client of s on p, with two handles on name (5 s leases). */
static rlock_async *open_two(rt_server *s, rt_aloop *p, const char *name,
                             rlock_async_mutex **m1, rlock_async_mutex **m2)
{
    rlock_async *a;
    rlock_mutex_opts mo;
    int err;

    CHECK((a = rlock_async_open(rt_server_url(s), NULL, &err)) != NULL);
    rt_al_attach(p, a);
    rlock_mutex_opts_init(&mo);
    mo.lease_ms = 5000;
    CHECK((*m1 = rlock_async_mutex_new(a, name, &mo, &err)) != NULL);
    CHECK((*m2 = rlock_async_mutex_new(a, name, &mo, &err)) != NULL);
    return a;
}

/*
 * The mutex's calls through the generic hooks: a try, a busy try of
 * another handle, re-entry counted per handle, an extension, the token
 * growing with each fresh acquisition, unlock of nothing; and the loop
 * never told to watch a closed descriptor, no turn long.
 */
TEST(async_lock_unlock_and_extend_through_the_hooks)
{
    rt_server *s = rt_server_start(NULL);
    rlock_async_mutex *m1, *m2;
    uint64_t t1 = 0, t2 = 0, t3 = 0;
    rt_aloop p;
    rlock_async *a = open_two(s, &p, "as-basic", &m1, &m2);

    CHECK_RC(al_lock(&p, m1, 0, &t1), RLOCK_OK);
    CHECK(t1 > 0);
    CHECK_RC(al_lock(&p, m2, 0, NULL), RLOCK_EBUSY);
    CHECK(strlen(rlock_async_errmsg(m2)) > 0);
    /* Re-entry: the handle owns the hold. */
    CHECK_RC(al_lock(&p, m1, 0, &t2), RLOCK_OK);
    CHECK_RC(al_extend(&p, m1, 20000), RLOCK_OK);
    CHECK_INT(rt_cmd_int(s, "PTTL {rlock:as-basic}"), >, 10000);
    CHECK_RC(al_unlock(&p, m1), RLOCK_OK);
    CHECK_RC(al_lock(&p, m2, 0, NULL), RLOCK_EBUSY); /* one level left */
    CHECK_RC(al_unlock(&p, m1), RLOCK_OK);
    CHECK_RC(al_unlock(&p, m1), RLOCK_ENOTOWNER);
    CHECK_RC(al_lock(&p, m2, 1000, &t3), RLOCK_OK);
    CHECK(t3 > t1);
    CHECK_RC(al_unlock(&p, m2), RLOCK_OK);
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:as-basic}"), ==, 0);
    printf("%d turns, %d timers, longest turn %lld ms\n", p.turns, p.timers,
           (long long)p.longest_ms);
    CHECK_INT(p.longest_ms, <, 500);
    rlock_async_close(a);
    CHECK_INT(p.n, ==, 0); /* every descriptor forgotten */
    CHECK_INT(p.due_ms, ==, -1);
    CHECK_INT(p.cleanups, ==, 1);
    rt_server_stop(s);
}

/* Draws m's token and turns until the callback: its status. */
static int al_fence(rt_aloop *p, rlock_async_mutex *m, uint64_t *token)
{
    seen s;

    memset(&s, 0, sizeof s);
    CHECK_RC(rlock_async_fence(m, lock_cb, &s), RLOCK_OK);
    CHECK_INT(s.calls, ==, 0);
    rt_al_until(p, &s.calls, 20000);
    CHECK_INT(s.calls, ==, 1);
    CHECK(s.m == m);
    *token = s.token;
    return s.status;
}

/* m's tokens on demand, a lock (lean: token 0), and its token drawn,
 * greater than prev: that token (the hold is kept). */
static uint64_t lean_then_fence(rt_aloop *p, rlock_async_mutex *m,
                                uint64_t prev)
{
    uint64_t t = 1, ft = 0;

    CHECK_RC(rlock_async_mutex_tokens(m, RLOCK_ASYNC_TOKENS_ON_DEMAND),
             RLOCK_OK);
    CHECK_RC(al_lock(p, m, 0, &t), RLOCK_OK);
    CHECK(t == 0);
    CHECK_RC(al_fence(p, m, &ft), RLOCK_OK);
    CHECK(ft > prev);
    return ft;
}

/*
 * A handle whose tokens come on demand: an uncontended lock is a bare SET
 * NX PX (counted by the server) with token 0; rlock_async_fence draws the
 * token within the hold, greater than every token before it, and from
 * then on the handle's locks draw theirs at once; asking for on demand
 * again makes them lean again. A lock that waited in the queue has its
 * token either way. A fence of nothing, a fence beside a pending call,
 * bad arguments are refused; a pending fence can be canceled.
 */
TEST(async_tokens_on_demand_are_drawn_by_fence)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *c = rt_client(rt_server_url(s), NULL);
    rlock_mutex *holder = rt_mutex(c, "as-lean", NULL);
    rlock_async_mutex *m, *other;
    uint64_t t = 1, ft = 0, ft2 = 0, prev;
    seen pending, fence_seen;
    rt_aloop p;
    rlock_async *a = open_two(s, &p, "as-lean", &m, &other);
    int i;

    /* A token drawn by the default handle first: every later one is
     * greater. */
    CHECK_RC(al_lock(&p, other, 0, &prev), RLOCK_OK);
    CHECK(prev > 0);
    CHECK_RC(al_unlock(&p, other), RLOCK_OK);

    CHECK_RC(rlock_async_mutex_tokens(m, RLOCK_ASYNC_TOKENS_ON_DEMAND),
             RLOCK_OK);
    CHECK_RC(al_lock(&p, m, 0, &t), RLOCK_OK); /* the pool warmed */
    CHECK(t == 0);
    CHECK_RC(al_unlock(&p, m), RLOCK_OK);
    freeReplyObject(rt_cmd(s, "CONFIG RESETSTAT"));
    for (i = 0; i < 5; i++) {
        t = 1;
        CHECK_RC(al_lock(&p, m, i % 2 ? 0 : 1000, &t), RLOCK_OK);
        CHECK(t == 0);
        CHECK_RC(al_unlock(&p, m), RLOCK_OK);
    }
    /* Lean: SET NX PX to take, the release's script to let go. */
    CHECK_INT(rt_cmdstat_calls(s, "set"), ==, 5);
    CHECK_INT(rt_cmdstat_calls(s, "evalsha"), ==, 5);
    CHECK_INT(rt_cmdstat_calls(s, "eval"), ==, 0);

    /* Nothing held: nothing to fence; but the handle asked for tokens,
     * and its next acquisition draws its own at once. */
    CHECK_RC(al_fence(&p, m, &ft), RLOCK_ENOTOWNER);
    CHECK(ft == 0);
    CHECK(strlen(rlock_async_errmsg(m)) > 0);
    CHECK_RC(al_lock(&p, m, 0, &t), RLOCK_OK);
    CHECK(t > prev);
    prev = t;
    CHECK_RC(al_unlock(&p, m), RLOCK_OK);

    ft = lean_then_fence(&p, m, prev);
    CHECK_RC(al_fence(&p, m, &ft2), RLOCK_OK); /* the hold keeps it */
    CHECK(ft2 == ft);
    /* A re-entry's callback has the hold's token. */
    CHECK_RC(al_lock(&p, m, 0, &t), RLOCK_OK);
    CHECK(t == ft);
    CHECK_RC(al_unlock(&p, m), RLOCK_OK);
    CHECK_RC(al_unlock(&p, m), RLOCK_OK);

    /* Asked once: later acquisitions draw theirs at once. */
    CHECK_RC(al_lock(&p, m, 0, &t), RLOCK_OK);
    CHECK(t > ft);
    prev = t;
    CHECK_RC(al_unlock(&p, m), RLOCK_OK);
    /* On demand again: lean again. */
    prev = lean_then_fence(&p, m, prev);

    /* Beside a pending call, a fence is refused; a pending fence can be
     * canceled (its callback before the cancel returns). */
    CHECK_RC(rlock_async_mutex_tokens(m, RLOCK_ASYNC_TOKENS_ON_DEMAND),
             RLOCK_OK);
    CHECK_RC(al_unlock(&p, m), RLOCK_OK);
    CHECK_RC(al_lock(&p, m, 0, &t), RLOCK_OK);
    CHECK(t == 0);
    memset(&pending, 0, sizeof pending);
    memset(&fence_seen, 0, sizeof fence_seen);
    CHECK_RC(rlock_async_fence(m, lock_cb, &pending), RLOCK_OK);
    CHECK_RC(rlock_async_fence(m, lock_cb, &fence_seen), RLOCK_EINVAL);
    CHECK_RC(rlock_async_lock(m, 0, lock_cb, &fence_seen), RLOCK_EINVAL);
    CHECK_RC(rlock_async_cancel(m), RLOCK_OK);
    CHECK_INT(pending.calls, ==, 1);
    CHECK(pending.status == RLOCK_ECANCELED || pending.status == RLOCK_OK);
    CHECK(pending.status == RLOCK_OK ? pending.token > prev
                                     : pending.token == 0);
    CHECK_INT(fence_seen.calls, ==, 0);
    /* Still held, and a token can still be drawn. */
    CHECK_RC(al_fence(&p, m, &ft), RLOCK_OK);
    CHECK(ft > prev);
    CHECK_RC(al_unlock(&p, m), RLOCK_OK);

    /* Waited in the queue: its token comes with it, on demand or not. */
    CHECK_RC(rlock_async_mutex_tokens(m, RLOCK_ASYNC_TOKENS_ON_DEMAND),
             RLOCK_OK);
    CHECK_RC(rlock_mutex_lock(holder), RLOCK_OK);
    memset(&pending, 0, sizeof pending);
    CHECK_RC(rlock_async_lock(m, 10000, lock_cb, &pending), RLOCK_OK);
    rt_al_for(&p, 100);
    CHECK_INT(pending.calls, ==, 0);
    CHECK_RC(rlock_mutex_unlock(holder), RLOCK_OK);
    rt_al_until(&p, &pending.calls, 20000);
    CHECK_RC(pending.status, RLOCK_OK);
    CHECK(pending.token > ft);
    CHECK_RC(al_unlock(&p, m), RLOCK_OK);

    /* Bad input. */
    CHECK_RC(rlock_async_mutex_tokens(NULL, RLOCK_ASYNC_TOKENS_ON_DEMAND),
             RLOCK_EINVAL);
    CHECK_RC(rlock_async_mutex_tokens(m, 2), RLOCK_EINVAL);
    CHECK_RC(rlock_async_mutex_tokens(m, -1), RLOCK_EINVAL);
    CHECK(strlen(rlock_async_errmsg(m)) > 0);
    CHECK_RC(rlock_async_fence(NULL, lock_cb, &pending), RLOCK_EINVAL);
    CHECK_RC(rlock_async_fence(m, NULL, &pending), RLOCK_EINVAL);
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:as-lean}"), ==, 0);

    rlock_async_mutex_free(other);
    rlock_async_close(a);
    rlock_mutex_free(holder);
    rlock_client_close(c);
    rt_server_stop(s);
}

/* A proxy policy: while on, the chunks of the proxy's first connection
 * that go dir are held ms each, but for the first skip of them. */
typedef struct conn0_hold {
    int on, dir, skip, seen;
    int64_t ms;
} conn0_hold;

static int64_t hold_conn0(void *arg, long conn_no, int dir, size_t len)
{
    conn0_hold *h = arg;

    (void)len;
    if (conn_no != 0 || dir != h->dir ||
        !__atomic_load_n(&h->on, __ATOMIC_ACQUIRE))
        return 0;
    return __atomic_fetch_add(&h->seen, 1, __ATOMIC_ACQ_REL) >= h->skip ? h->ms
                                                                        : 0;
}

/* Turns p until h has seen n chunks (20 s at most). */
static void until_seen(rt_aloop *p, conn0_hold *h, int n)
{
    int64_t t0 = rt_now_ms();

    while (__atomic_load_n(&h->seen, __ATOMIC_ACQUIRE) < n &&
           rt_now_ms() - t0 < 20000)
        rt_al_turn(p);
    CHECK_INT(__atomic_load_n(&h->seen, __ATOMIC_ACQUIRE), ==, n);
}

/*
 * A lock taken lean (tokens on demand) while its handle is switched to
 * tokens at once draws its token after the acquisition, a request of its
 * own; canceled while that request is held up, the lock was granted all
 * the same: its callback says RLOCK_OK with token 0, and the hold stays
 * the handle's (its unlock lets it go), as rlock_async_cancel says. (Had
 * the cancel given the hold up, the key would stay, renewed by nobody.)
 */
TEST(async_a_lock_canceled_while_its_token_is_drawn_keeps_its_hold)
{
    rt_server *s = rt_server_start(NULL);
    rt_proxy *px = rt_proxy_start(rt_server_port(s));
    conn0_hold held = {0, RT_PROXY_TO_SERVER, 1, 0, 3000};
    rlock_client_opts co;
    rlock_mutex_opts mo;
    rlock_async *a;
    rlock_async_mutex *m;
    rt_aloop p;
    uint64_t t = 1;
    seen v;
    int err;

    rlock_client_opts_init(&co);
    co.max_connections = 1;
    co.command_timeout_ms = 10000; /* the unlock waits behind the held one */
    CHECK((a = rlock_async_open(rt_proxy_url(px), &co, &err)) != NULL);
    rt_al_attach(&p, a);
    rlock_mutex_opts_init(&mo);
    mo.lease_ms = 30000;
    CHECK((m = rlock_async_mutex_new(a, "as-cancel-token", &mo, &err)) != NULL);
    CHECK_RC(rlock_async_mutex_tokens(m, RLOCK_ASYNC_TOKENS_ON_DEMAND),
             RLOCK_OK);
    CHECK_RC(al_lock(&p, m, 0, &t), RLOCK_OK); /* the connection */
    CHECK(t == 0);
    CHECK_RC(al_unlock(&p, m), RLOCK_OK);

    rt_proxy_set_policy(px, hold_conn0, &held);
    __atomic_store_n(&held.on, 1, __ATOMIC_RELEASE);
    memset(&v, 0, sizeof v);
    CHECK_RC(rlock_async_lock(m, 0, lock_cb, &v), RLOCK_OK); /* lean */
    CHECK_RC(rlock_async_mutex_tokens(m, RLOCK_ASYNC_TOKENS_AT_ONCE), RLOCK_OK);
    until_seen(&p, &held, 2); /* taken; its token's request held */
    CHECK_INT(v.calls, ==, 0);
    CHECK_RC(rlock_async_cancel(m), RLOCK_OK);
    CHECK_INT(v.calls, ==, 1);
    CHECK_RC(v.status, RLOCK_OK);
    CHECK(v.token == 0);
    __atomic_store_n(&held.on, 0, __ATOMIC_RELEASE);
    CHECK_RC(al_unlock(&p, m), RLOCK_OK);
    CHECK_INT(rt_lock_count(s, "as-cancel-token"), ==, 0);

    rlock_async_mutex_free(m);
    rlock_async_close(a);
    rt_proxy_stop(px);
    rt_server_stop(s);
}

/*
 * Waits on one loop are FIFO and woken by pub/sub: four handles wait
 * (with no limit, and with one) behind a fifth, holders of another client
 * of the blocking API; each gets the lock in the order it asked, at once
 * when the one before lets go. With the watchdog the hold is renewed on
 * the loop for several leases, and no thread is started for it.
 */
TEST(async_waits_are_fifo_woken_by_pubsub_and_renewed)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client_opts co;
    rlock_async *a;
    rlock_client *c;
    rlock_mutex *holder;
    rlock_async_mutex *w[4];
    seen got[4], freed[4];
    rt_aloop p;
    int i, err, threads;
    int64_t t0;

    rlock_client_opts_init(&co);
    co.watchdog_lease_ms = 400;
    CHECK((a = rlock_async_open(rt_server_url(s), &co, &err)) != NULL);
    CHECK((c = rlock_client_open(rt_server_url(s), NULL, &err)) != NULL);
    CHECK((holder = rlock_mutex_new(c, "as-fifo", NULL, &err)) != NULL);
    rt_al_attach(&p, a);
    CHECK_RC(rlock_mutex_lock(holder), RLOCK_OK);
    threads = rt_thread_count(); /* the blocking client's are started */
    memset(got, 0, sizeof got);
    memset(freed, 0, sizeof freed);
    for (i = 0; i < 4; i++) {
        CHECK((w[i] = rlock_async_mutex_new(a, "as-fifo", NULL, &err)) != NULL);
        CHECK_RC(rlock_async_lock(w[i], i % 2 ? 30000 : -1, lock_cb, &got[i]),
                 RLOCK_OK);
        rt_al_for(&p, 100); /* queued in this order */
    }
    CHECK_RC(rlock_mutex_unlock(holder), RLOCK_OK);
    for (i = 0; i < 4; i++) {
        int j;
        t0 = rt_now_ms();
        rt_al_until(&p, &got[i].calls, 20000);
        printf("waiter %d: %d after %lld ms\n", i, got[i].status,
               (long long)(rt_now_ms() - t0));
        CHECK_RC(got[i].status, RLOCK_OK);
        CHECK(got[i].token > 0);
        CHECK_INT(rt_now_ms() - t0, <, 1000); /* woken, not polled for */
        for (j = i + 1; j < 4; j++)
            CHECK_INT(got[j].calls, ==, 0);
        if (i == 0) {
            /* Held for three leases: renewed on the loop. */
            rt_al_for(&p, 1200);
            CHECK_INT(rt_cmd_int(s, "PTTL {rlock:as-fifo}"), >, 0);
            CHECK_INT(rt_thread_count(), ==, threads);
        }
        CHECK_RC(rlock_async_unlock(w[i], done_cb, &freed[i]), RLOCK_OK);
    }
    for (i = 0; i + 1 < 4; i++)
        CHECK_INT(got[i].order, <, got[i + 1].order);
    rt_al_until(&p, &freed[3].calls, 5000);
    for (i = 0; i < 4; i++)
        CHECK_RC(freed[i].status, RLOCK_OK);
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:as-fifo}"), ==, 0);
    CHECK_INT(p.longest_ms, <, 500);
    rlock_async_close(a);
    rlock_mutex_free(holder);
    rlock_client_close(c);
    rt_server_stop(s);
}

static pthread_t loop_thread;

/* on_lost: status says whether it came on the loop's thread. */
static void lost_cb(rlock_mutex *m, void *arg)
{
    seen *s = arg;

    s->calls++;
    s->m = rlock_async_mutex_of(m);
    s->status = pthread_equal(pthread_self(), loop_thread);
}

/* A client on loop p whose watchdog leases last lease_ms, and a handle
 * of name that holds it, its losses counted in lost. */
static rlock_async_mutex *held_on_a_loop(rt_server *s, rt_aloop *p,
                                         int lease_ms, const char *name,
                                         seen *lost, rlock_async **a)
{
    rlock_client_opts co;
    rlock_mutex_opts mo;
    rlock_async_mutex *m;
    int err;

    rlock_client_opts_init(&co);
    co.watchdog_lease_ms = lease_ms;
    CHECK((*a = rlock_async_open(rt_server_url(s), &co, &err)) != NULL);
    rt_al_attach(p, *a);
    memset(lost, 0, sizeof *lost);
    rlock_mutex_opts_init(&mo);
    mo.on_lost = lost_cb;
    mo.on_lost_arg = lost;
    loop_thread = pthread_self();
    CHECK((m = rlock_async_mutex_new(*a, name, &mo, &err)) != NULL);
    CHECK_RC(al_lock(p, m, 0, NULL), RLOCK_OK);
    return m;
}

/*
 * on_lost on the loop: a hold whose key is deleted behind its back is
 * reported by the next renewal, on the loop's thread, naming its handle;
 * the handle's next call says RLOCK_ELOST.
 */
TEST(async_on_lost_comes_on_the_loop)
{
    rt_server *s = rt_server_start(NULL);
    rlock_async *a;
    rlock_async_mutex *m;
    seen lost;
    rt_aloop p;

    m = held_on_a_loop(s, &p, 300, "as-lost", &lost, &a);
    CHECK_INT(rt_cmd_int(s, "DEL {rlock:as-lost}"), ==, 1);
    rt_al_until(&p, &lost.calls, 3000);
    rt_al_for(&p, 300);
    CHECK_INT(lost.calls, ==, 1);
    CHECK(lost.m == m);
    CHECK(lost.status); /* on the loop's thread */
    CHECK_RC(al_extend(&p, m, 1000), RLOCK_ELOST);
    rlock_async_close(a);
    rt_server_stop(s);
}

/*
 * rlock_async_lease_left: what the client counts, at once. A hold has
 * lease left; another handle of the name holds nothing; a loop that
 * stalled past the lease (the application's own code kept it) finds the
 * hold lost, never renewed late as if held, and on_lost comes on the
 * loop once it turns again.
 */
TEST(async_lease_left_says_what_the_client_counts)
{
    rt_server *s = rt_server_start(NULL);
    rlock_async *a;
    rlock_async_mutex *m, *other;
    seen lost;
    rt_aloop p;
    int64_t left = 0;
    int err;

    m = held_on_a_loop(s, &p, 600, "as-left", &lost, &a);
    CHECK((other = rlock_async_mutex_new(a, "as-left", NULL, &err)) != NULL);
    CHECK_RC(rlock_async_lease_left(m, &left), RLOCK_OK);
    CHECK(left > 0 && left <= 600);
    CHECK_RC(rlock_async_lease_left(other, &left), RLOCK_ENOTOWNER);
    /* Renewed by the loop while it turns. */
    rt_al_for(&p, 1500);
    CHECK_RC(rlock_async_lease_left(m, &left), RLOCK_OK);
    CHECK(left > 0);
    /* The application stalls its loop past the lease. */
    rt_sleep_ms(900);
    CHECK_RC(rlock_async_lease_left(m, &left), RLOCK_ELOST);
    CHECK_INT(left, ==, 0);
    CHECK(strlen(rlock_async_errmsg(m)) > 0);
    CHECK_INT(lost.calls, ==, 0); /* never inside the call */
    rt_al_until(&p, &lost.calls, 3000);
    CHECK_INT(lost.calls, ==, 1);
    CHECK(lost.status); /* on the loop's thread */
    CHECK_RC(al_extend(&p, m, 1000), RLOCK_ELOST);
    rlock_async_close(a);
    rt_server_stop(s);
}

typedef struct chain {
    rlock_async *a;
    rt_aloop *p;
    rlock_async_mutex *m, *other;
    int step, status, closed;
    seen next;
} chain;

/* Frees its own mutex. */
static void cb_frees(rlock_async_mutex *m, int status, uint64_t token,
                     void *arg)
{
    chain *ch = arg;

    (void)token;
    ch->status = status;
    rlock_async_mutex_free(m);
    ch->step = 1;
}

/* Starts another lock on another handle. */
static void cb_starts(rlock_async_mutex *m, int status, uint64_t token,
                      void *arg)
{
    chain *ch = arg;

    (void)m;
    (void)token;
    ch->status = status;
    CHECK_RC(rlock_async_lock(ch->other, 0, lock_cb, &ch->next), RLOCK_OK);
    ch->step = 1;
}

/* Closes the client. */
static void cb_closes(rlock_async_mutex *m, int status, uint64_t token,
                      void *arg)
{
    chain *ch = arg;

    (void)m;
    (void)token;
    ch->status = status;
    rlock_async_close(ch->a);
    ch->p->a = NULL;
    ch->closed = 1;
    ch->step = 1;
}

/*
 * A callback may free its mutex, start another lock, or close the client
 * (then every other pending call is called back with RLOCK_ECANCELED,
 * before rlock_async_close returns); nothing leaks (the sanitizer
 * builds), and the loop is told to forget every descriptor.
 */
TEST(async_callbacks_may_free_start_or_close)
{
    rt_server *s = rt_server_start(NULL);
    rlock_async *a;
    rlock_async_mutex *m, *other, *waiting;
    chain ch;
    seen w;
    rt_aloop p;
    int err;

    CHECK((a = rlock_async_open(rt_server_url(s), NULL, &err)) != NULL);
    rt_al_attach(&p, a);
    memset(&ch, 0, sizeof ch);
    ch.a = a;
    ch.p = &p;

    CHECK((m = rlock_async_mutex_new(a, "as-cb-1", NULL, &err)) != NULL);
    CHECK_RC(rlock_async_lock(m, 0, cb_frees, &ch), RLOCK_OK);
    rt_al_until(&p, &ch.step, 5000);
    CHECK_RC(ch.status, RLOCK_OK);

    ch.step = 0;
    CHECK((m = rlock_async_mutex_new(a, "as-cb-2", NULL, &err)) != NULL);
    CHECK((ch.other = rlock_async_mutex_new(a, "as-cb-3", NULL, &err)) != NULL);
    CHECK_RC(rlock_async_lock(m, 0, cb_starts, &ch), RLOCK_OK);
    rt_al_until(&p, &ch.next.calls, 5000);
    CHECK_RC(ch.status, RLOCK_OK);
    CHECK_RC(ch.next.status, RLOCK_OK);

    /* A wait that cannot end (m holds as-cb-2), and a lock whose callback
     * closes the client. */
    memset(&w, 0, sizeof w);
    CHECK((waiting = rlock_async_mutex_new(a, "as-cb-2", NULL, &err)) != NULL);
    CHECK_RC(rlock_async_lock(waiting, -1, lock_cb, &w), RLOCK_OK);
    rt_al_for(&p, 200);
    ch.step = 0;
    CHECK((other = rlock_async_mutex_new(a, "as-cb-4", NULL, &err)) != NULL);
    CHECK_RC(rlock_async_lock(other, 0, cb_closes, &ch), RLOCK_OK);
    rt_al_until(&p, &ch.closed, 5000);
    CHECK(ch.closed);
    CHECK_INT(w.calls, ==, 1);
    CHECK_RC(w.status, RLOCK_ECANCELED);
    CHECK_INT(p.n, ==, 0);
    rt_server_stop(s);
}

/*
 * rlock_async_cancel: a waiting lock is called back at once with
 * RLOCK_ECANCELED, before the call returns, and leaves the queue: the
 * waiter behind it gets the lock when the holder lets go, and the
 * canceled one never does. Nothing pending: RLOCK_ENOTOWNER. Closing
 * the client cancels what waits the same way.
 */
TEST(async_cancel_and_close_end_pending_calls)
{
    rt_server *s = rt_server_start(NULL);
    rlock_async *a;
    rlock_async_mutex *h, *w1, *w2, *w3;
    seen s1, s2, s3;
    rt_aloop p;
    int err;

    CHECK((a = rlock_async_open(rt_server_url(s), NULL, &err)) != NULL);
    rt_al_attach(&p, a);
    CHECK((h = rlock_async_mutex_new(a, "as-cancel", NULL, &err)) != NULL);
    CHECK((w1 = rlock_async_mutex_new(a, "as-cancel", NULL, &err)) != NULL);
    CHECK((w2 = rlock_async_mutex_new(a, "as-cancel", NULL, &err)) != NULL);
    CHECK((w3 = rlock_async_mutex_new(a, "as-cancel", NULL, &err)) != NULL);
    CHECK_RC(al_lock(&p, h, 0, NULL), RLOCK_OK);
    memset(&s1, 0, sizeof s1);
    memset(&s2, 0, sizeof s2);
    memset(&s3, 0, sizeof s3);
    CHECK_RC(rlock_async_cancel(w1), RLOCK_ENOTOWNER);
    CHECK_RC(rlock_async_lock(w1, -1, lock_cb, &s1), RLOCK_OK);
    rt_al_for(&p, 150);
    CHECK_RC(rlock_async_lock(w2, 30000, lock_cb, &s2), RLOCK_OK);
    rt_al_for(&p, 150);
    CHECK_RC(rlock_async_cancel(w1), RLOCK_OK);
    CHECK_INT(s1.calls, ==, 1);
    CHECK_RC(s1.status, RLOCK_ECANCELED);
    CHECK_RC(al_unlock(&p, h), RLOCK_OK);
    rt_al_until(&p, &s2.calls, 10000);
    CHECK_RC(s2.status, RLOCK_OK);
    rt_al_for(&p, 200);
    CHECK_INT(s1.calls, ==, 1);
    /* w3 waits behind w2; closing ends its wait. */
    CHECK_RC(rlock_async_lock(w3, -1, lock_cb, &s3), RLOCK_OK);
    rt_al_for(&p, 150);
    rlock_async_close(a);
    CHECK_INT(s3.calls, ==, 1);
    CHECK_RC(s3.status, RLOCK_ECANCELED);
    CHECK_INT(p.n, ==, 0);
    rt_server_stop(s);
}

/*
 * A re-entry that waits for its hold's renewal to end (the watchdog's
 * request is in flight, its answer held back) is canceled at once: the
 * cancel does not spin until that wait's own call would have ended (the
 * command timeout, 10 s here), and the hold is the holder's still.
 */
TEST(async_a_canceled_reentry_behind_a_renewal_ends_at_once)
{
    rt_server *s = rt_server_start(NULL);
    rt_proxy *px = rt_proxy_start(rt_server_port(s));
    rlock_client_opts co;
    rlock_async *a;
    rlock_async_mutex *m;
    seen again;
    rt_aloop p;
    int err;
    int64_t t0, took_ms;

    rlock_client_opts_init(&co);
    co.watchdog_lease_ms = 3000;
    co.command_timeout_ms = 10000;
    CHECK((a = rlock_async_open(rt_proxy_url(px), &co, &err)) != NULL);
    rt_al_attach(&p, a);
    CHECK((m = rlock_async_mutex_new(a, "as-quiet", NULL, &err)) != NULL);
    CHECK_RC(al_lock(&p, m, 0, NULL), RLOCK_OK);
    /* The next renewal's answer is held back: the renewal stays in
     * flight. */
    rt_proxy_blackhole(px, RT_PROXY_TO_CLIENT);
    t0 = rt_now_ms();
    while (rt_proxy_pending(px, RT_PROXY_TO_CLIENT) == 0 &&
           rt_now_ms() - t0 < 5000)
        rt_al_turn(&p);
    CHECK(rt_proxy_pending(px, RT_PROXY_TO_CLIENT) > 0);
    memset(&again, 0, sizeof again);
    CHECK_RC(rlock_async_lock(m, 5000, lock_cb, &again), RLOCK_OK);
    rt_al_for(&p, 100);
    CHECK_INT(again.calls, ==, 0);
    t0 = rt_now_ms();
    CHECK_RC(rlock_async_cancel(m), RLOCK_OK);
    took_ms = rt_now_ms() - t0;
    printf("the cancel took %lld ms\n", (long long)took_ms);
    CHECK_INT(took_ms, <, 2000);
    CHECK_INT(again.calls, ==, 1);
    CHECK_RC(again.status, RLOCK_ECANCELED);
    /* The renewal's answer comes: the first level is still held. */
    rt_proxy_blackhole(px, 0);
    rt_al_for(&p, 300);
    CHECK_RC(al_unlock(&p, m), RLOCK_OK);
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:as-quiet}"), ==, 0);
    rlock_async_close(a);
    rt_proxy_stop(px);
    rt_server_stop(s);
}

typedef struct other_thread {
    rlock_async *a;
    rlock_async_mutex *m;
    int rc_lock, rc_cancel, rc_stats, rc_extend, rc_unlock, rc_attach;
    int rc_fence, rc_tokens;
    rlock_async_mutex *made;
    int err;
    char msg[256];
} other_thread;

static void *other_main(void *arg)
{
    other_thread *o = arg;

    rlock_stats st = RLOCK_STATS_INIT;
    rlock_async_hooks h;

    memset(&h, 0, sizeof h);
    o->rc_lock = rlock_async_lock(o->m, 0, lock_cb, NULL);
    o->rc_unlock = rlock_async_unlock(o->m, done_cb, NULL);
    o->rc_extend = rlock_async_extend(o->m, 1000, done_cb, NULL);
    o->rc_fence = rlock_async_fence(o->m, lock_cb, NULL);
    o->rc_tokens = rlock_async_mutex_tokens(o->m, RLOCK_ASYNC_TOKENS_ON_DEMAND);
    o->rc_stats = rlock_async_stats(o->a, &st);
    o->rc_attach = rlock_async_attach(o->a, &h);
    rlock_async_ready(o->a, 0, RLOCK_ASYNC_READ); /* does nothing */
    o->rc_cancel = rlock_async_cancel(o->m);
    o->made = rlock_async_mutex_new(o->a, "as-bad-2", NULL, &o->err);
    snprintf(o->msg, sizeof o->msg, "%s", rlock_async_errmsg(NULL));
    rlock_async_timeout(o->a);    /* does nothing */
    rlock_async_close(o->a);      /* does nothing */
    rlock_async_mutex_free(o->m); /* does nothing */
    return NULL;
}

/*
 * Bad input gets a clear error and sends nothing: NULL handles and
 * callbacks, a second call on a handle with one pending, a name too
 * long, bad times, calls before the client is attached, and any call
 * from a thread other than the loop's. Redis stays empty.
 */
TEST(async_bad_input_is_refused_and_changes_nothing)
{
    rt_server *s = rt_server_start(NULL);
    rlock_async *a;
    rlock_async_mutex *m;
    rlock_async_hooks h;
    other_thread o;
    pthread_t th;
    char *big;
    seen s1;
    rt_aloop p;
    int err;

    CHECK(rlock_async_open("nonsense://x", NULL, &err) == NULL);
    CHECK_RC(err, RLOCK_EINVAL);
    CHECK(rlock_async_open(NULL, NULL, &err) == NULL);
    CHECK_RC(err, RLOCK_EINVAL);
    CHECK(strlen(rlock_async_errmsg(NULL)) > 0);
    /* NULL is a no-op where nothing is returned, EINVAL where it is. */
    rlock_async_ready(NULL, 0, RLOCK_ASYNC_READ);
    rlock_async_timeout(NULL);
    rlock_async_close(NULL);
    rlock_async_mutex_free(NULL);
    CHECK(rlock_async_mutex_of(NULL) == NULL);
    {
        rlock_stats st = RLOCK_STATS_INIT;
        CHECK_RC(rlock_async_stats(NULL, &st), RLOCK_EINVAL);
    }
    CHECK((a = rlock_async_open(rt_server_url(s), NULL, &err)) != NULL);
    CHECK((m = rlock_async_mutex_new(a, "as-bad", NULL, &err)) != NULL);
    /* Not attached yet. */
    CHECK_RC(rlock_async_lock(m, 0, lock_cb, &s1), RLOCK_EINVAL);
    CHECK_RC(rlock_async_fence(m, lock_cb, &s1), RLOCK_EINVAL);
    memset(&h, 0, sizeof h);
    CHECK_RC(rlock_async_attach(a, &h), RLOCK_EINVAL);
    CHECK_RC(rlock_async_attach(NULL, &h), RLOCK_EINVAL);
    rt_al_attach(&p, a);
    h.watch = no_watch;
    h.timer = no_timer;
    CHECK_RC(rlock_async_attach(a, &h), RLOCK_EINVAL); /* twice */

    CHECK_RC(rlock_async_lock(NULL, 0, lock_cb, &s1), RLOCK_EINVAL);
    CHECK_RC(rlock_async_lock(m, 0, NULL, &s1), RLOCK_EINVAL);
    CHECK_RC(rlock_async_unlock(m, NULL, NULL), RLOCK_EINVAL);
    CHECK_RC(rlock_async_extend(m, 0, done_cb, &s1), RLOCK_EINVAL);
    CHECK_RC(rlock_async_extend(m, -5, done_cb, &s1), RLOCK_EINVAL);
    CHECK_RC(rlock_async_fence(NULL, lock_cb, &s1), RLOCK_EINVAL);
    CHECK_RC(rlock_async_fence(m, NULL, &s1), RLOCK_EINVAL);
    CHECK_RC(rlock_async_mutex_tokens(NULL, RLOCK_ASYNC_TOKENS_AT_ONCE),
             RLOCK_EINVAL);
    CHECK_RC(rlock_async_mutex_tokens(m, 5), RLOCK_EINVAL);
    CHECK_RC(rlock_async_cancel(NULL), RLOCK_EINVAL);
    {
        int64_t left = 7;
        CHECK_RC(rlock_async_lease_left(NULL, &left), RLOCK_EINVAL);
        CHECK_INT(left, ==, 0);
        CHECK_RC(rlock_async_lease_left(m, NULL), RLOCK_EINVAL);
        left = 7;
        CHECK_RC(rlock_async_lease_left(m, &left), RLOCK_ENOTOWNER);
        CHECK_INT(left, ==, 0);
    }
    CHECK(rlock_async_mutex_new(NULL, "x", NULL, &err) == NULL);
    CHECK_RC(err, RLOCK_EINVAL);
    CHECK(rlock_async_mutex_new(a, NULL, NULL, &err) == NULL);
    CHECK_RC(err, RLOCK_EINVAL);
    CHECK((big = malloc(100000)) != NULL);
    memset(big, 'x', 99999);
    big[99999] = '\0';
    CHECK(rlock_async_mutex_new(a, big, NULL, &err) == NULL);
    CHECK_RC(err, RLOCK_EINVAL);
    free(big);

    rt_al_for(&p, 100);
    CHECK_INT(rt_commands_from_clients(s), ==, 0); /* nothing was sent */

    /* A second call while one is pending. */
    memset(&s1, 0, sizeof s1);
    CHECK_RC(rlock_async_lock(m, 0, lock_cb, &s1), RLOCK_OK);
    CHECK_RC(rlock_async_lock(m, 0, lock_cb, &s1), RLOCK_EINVAL);
    CHECK(strstr(rlock_async_errmsg(m), "pending") != NULL);
    CHECK_RC(rlock_async_unlock(m, done_cb, &s1), RLOCK_EINVAL);
    rt_al_until(&p, &s1.calls, 5000);
    CHECK_INT(s1.calls, ==, 1);
    CHECK_RC(s1.status, RLOCK_OK);
    CHECK_RC(al_unlock(&p, m), RLOCK_OK);
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:as-bad}"), ==, 0);

    /* Another thread. */
    memset(&o, 0, sizeof o);
    o.a = a;
    o.m = m;
    CHECK(pthread_create(&th, NULL, other_main, &o) == 0);
    pthread_join(th, NULL);
    CHECK_RC(o.rc_lock, RLOCK_EINVAL);
    CHECK_RC(o.rc_cancel, RLOCK_EINVAL);
    CHECK_RC(o.rc_stats, RLOCK_EINVAL);
    CHECK_RC(o.rc_extend, RLOCK_EINVAL);
    CHECK_RC(o.rc_unlock, RLOCK_EINVAL);
    CHECK_RC(o.rc_attach, RLOCK_EINVAL);
    CHECK_RC(o.rc_fence, RLOCK_EINVAL);
    CHECK_RC(o.rc_tokens, RLOCK_EINVAL);
    CHECK(o.made == NULL);
    CHECK_RC(o.err, RLOCK_EINVAL);
    CHECK(strstr(o.msg, "thread") != NULL);
    /* Still usable on its own thread. */
    CHECK(rlock_async_mutex_of(NULL) == NULL);
    {
        rlock_stats st = RLOCK_STATS_INIT;
        CHECK_RC(rlock_async_stats(a, &st), RLOCK_OK);
        CHECK_INT(st.acquisitions, >=, 1);
    }
    CHECK_RC(al_lock(&p, m, 0, NULL), RLOCK_OK);
    CHECK_RC(al_unlock(&p, m), RLOCK_OK);
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:as-bad}"), ==, 0);
    rlock_async_close(a);
    rt_server_stop(s);
}

/*
 * rlock_async_open returns at once, whatever is at the address: nothing
 * listens there, and the first call says so (RLOCK_ECONNECT) through its
 * callback. A server that accepts and never answers (the proxy holds
 * every byte) ends a lock at its deadline (command_timeout_ms), and no
 * turn of the loop waits for it.
 */
TEST(async_calls_end_at_their_deadline_and_never_block_the_loop)
{
    rt_server *s = rt_server_start(NULL);
    rt_proxy *px = rt_proxy_start(rt_server_port(s));
    rlock_client_opts co;
    rlock_async *a;
    rlock_async_mutex *m;
    char url[64];
    rt_aloop p;
    int err;
    int64_t t0;

    rlock_client_opts_init(&co);
    co.connect_timeout_ms = 300;
    co.command_timeout_ms = 300;
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", rt_free_port());
    t0 = rt_now_ms();
    CHECK((a = rlock_async_open(url, &co, &err)) != NULL);
    CHECK_INT(rt_now_ms() - t0, <, 100);
    rt_al_attach(&p, a);
    CHECK((m = rlock_async_mutex_new(a, "as-dead", NULL, &err)) != NULL);
    CHECK_RC(al_lock(&p, m, 0, NULL), RLOCK_ECONNECT);
    printf("nobody there: %s\n", rlock_async_errmsg(m));
    rlock_async_close(a);

    CHECK((a = rlock_async_open(rt_proxy_url(px), &co, &err)) != NULL);
    rt_al_attach(&p, a);
    CHECK((m = rlock_async_mutex_new(a, "as-silent", NULL, &err)) != NULL);
    rt_proxy_blackhole(px, RT_PROXY_TO_CLIENT);
    t0 = rt_now_ms();
    CHECK_RC(al_lock(&p, m, 2000, NULL), RLOCK_ENOREPLY);
    printf("silent: %lld ms, %s; longest turn %lld ms\n",
           (long long)(rt_now_ms() - t0), rlock_async_errmsg(m),
           (long long)p.longest_ms);
    CHECK_INT(rt_now_ms() - t0, >=, 250);
    CHECK_INT(rt_now_ms() - t0, <, 3000);
    CHECK_INT(p.longest_ms, <, 150);
    rlock_async_close(a);
    CHECK_INT(p.n, ==, 0);
    rt_proxy_blackhole(px, 0);
    rt_proxy_stop(px);
    rt_server_stop(s);
}

/*
 * Scale: one loop thread with 10,000 waiters on 100 names, beside two
 * processes taking the same names with the blocking API.
 */
#define S_NAMES 100
#define S_WAVES 100
#define S_CHILD_ROUNDS 25

typedef struct scale_shared {
    int holder[S_NAMES]; /* 0 nobody, 1 the loop, 2 a child */
    int overlaps;
    int go, stop;
    int child_acquired;
} scale_shared;

static scale_shared *sh;

typedef struct scale_waiter {
    rlock_async_mutex *m;
    int name, wave, calls, status, unlocked;
    long seq; /* when it got the lock, among all of the loop's */
} scale_waiter;

static long scale_seq;
static int scale_done, scale_failed;

static void scale_unlocked(rlock_async_mutex *m, int status, void *arg)
{
    scale_waiter *w = arg;

    w->unlocked++;
    if (status != RLOCK_OK && scale_failed++ < 5)
        fprintf(stderr, "unlock of scale-%d: %s\n", w->name,
                rlock_async_errmsg(m));
    scale_done++;
}

static void scale_locked(rlock_async_mutex *m, int status, uint64_t token,
                         void *arg)
{
    scale_waiter *w = arg;

    (void)token;
    w->calls++;
    w->status = status;
    w->seq = ++scale_seq;
    if (status != RLOCK_OK) {
        if (scale_failed++ < 5)
            fprintf(stderr, "lock of scale-%d: %s\n", w->name,
                    rlock_async_errmsg(m));
        scale_done++;
        return;
    }
    if (__atomic_exchange_n(&sh->holder[w->name], 1, __ATOMIC_SEQ_CST) != 0)
        __atomic_add_fetch(&sh->overlaps, 1, __ATOMIC_SEQ_CST);
    /* The critical section ends at once: the callback never blocks. */
    __atomic_store_n(&sh->holder[w->name], 0, __ATOMIC_SEQ_CST);
    if (rlock_async_unlock(m, scale_unlocked, w) != RLOCK_OK) {
        if (scale_failed++ < 5)
            fprintf(stderr, "unlock of scale-%d refused: %s\n", w->name,
                    rlock_async_errmsg(m));
        scale_done++;
    }
}

static int scale_child(void *arg)
{
    const char *url = arg;
    rlock_client *c;
    rlock_mutex *m[S_NAMES];
    char name[32];
    int i, err, bad = 0;
    unsigned seed = (unsigned)getpid();

    while (!__atomic_load_n(&sh->go, __ATOMIC_SEQ_CST))
        poll(NULL, 0, 2);
    if (!(c = rlock_client_open(url, NULL, &err)))
        return 10;
    for (i = 0; i < S_NAMES; i++) {
        snprintf(name, sizeof name, "scale-%d", i);
        if (!(m[i] = rlock_mutex_new(c, name, NULL, &err)))
            return 11;
    }
    for (i = 0; i < S_CHILD_ROUNDS; i++) {
        int k = (int)(rand_r(&seed) % S_NAMES);
        if (rlock_mutex_timedlock(m[k], 120000) != RLOCK_OK) {
            bad++;
            continue;
        }
        if (__atomic_exchange_n(&sh->holder[k], 2, __ATOMIC_SEQ_CST) != 0)
            __atomic_add_fetch(&sh->overlaps, 1, __ATOMIC_SEQ_CST);
        poll(NULL, 0, 1);
        __atomic_store_n(&sh->holder[k], 0, __ATOMIC_SEQ_CST);
        if (rlock_mutex_unlock(m[k]) != RLOCK_OK)
            bad++;
        __atomic_add_fetch(&sh->child_acquired, 1, __ATOMIC_SEQ_CST);
    }
    for (i = 0; i < S_NAMES; i++)
        rlock_mutex_free(m[i]);
    rlock_client_close(c);
    return bad ? 12 : 0;
}

/* Waiters queued in Redis over every name (the sum of the queues). */
static long long queued_total(rt_server *s)
{
    return rt_cmd_int(s, "EVAL %s 0",
                      "local n = 0 for i = 0, 99 do n = n + redis.call('LLEN', "
                      "'{rlock:scale-' .. i .. '}:queue') end return n");
}

/*
 * 10,000 waiters on 100 names on one loop thread, in 100 waves (a wave is
 * one waiter per name, sent once the wave before is in Redis's queues),
 * behind 100 holders of the loop; then two processes of the blocking API
 * join the queues and the holders let go. Every waiter gets its lock
 * exactly once, in its wave's order on its name (FIFO); no two holders of
 * a name ever overlap, across the three processes; every release
 * succeeds; and no turn of the loop is long.
 */
TEST(async_ten_thousand_waiters_on_one_loop)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client_opts co;
    rlock_async *a;
    rlock_async_mutex *first[S_NAMES];
    scale_waiter *w;
    seen got[S_NAMES];
    pid_t kids[2];
    rt_aloop p;
    char name[32];
    int i, k, err, total = S_NAMES * S_WAVES;
    int64_t t0;

    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE,
              MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(sh != MAP_FAILED);
    memset(sh, 0, sizeof *sh);
    for (k = 0; k < 2; k++)
        kids[k] = rt_fork(scale_child, (void *)rt_server_url(s));
    rlock_client_opts_init(&co);
    /* Each waiter refreshes its place every third of waiter_ttl_ms: 10,000
     * of them at the default 5 s are 6,000 requests a second, which a
     * sanitizer's build cannot serve on top of the test. The test is of
     * the loop's scale, not of that load: the places last longer. */
    co.waiter_ttl_ms = 120000;
    /* A hand-over wakes the next waiter's attempt while the unlocks and the
     * other names' attempts queue for the 64 connections: on a slow
     * machine under TSan a turn of the loop took 450 ms and a queued
     * request missed the default 2 s deadline. The deadline is not what
     * this test is of. */
    co.command_timeout_ms = 60000;
    CHECK((a = rlock_async_open(rt_server_url(s), &co, &err)) != NULL);
    rt_al_attach(&p, a);
    memset(got, 0, sizeof got);
    for (i = 0; i < S_NAMES; i++) {
        snprintf(name, sizeof name, "scale-%d", i);
        CHECK((first[i] = rlock_async_mutex_new(a, name, NULL, &err)) != NULL);
        CHECK_RC(rlock_async_lock(first[i], 0, lock_cb, &got[i]), RLOCK_OK);
    }
    for (i = 0; i < S_NAMES; i++) {
        rt_al_until(&p, &got[i].calls, 20000);
        CHECK_RC(got[i].status, RLOCK_OK);
    }
    CHECK((w = calloc((size_t)total, sizeof *w)) != NULL);
    t0 = rt_now_ms();
    for (k = 0; k < S_WAVES; k++) {
        for (i = 0; i < S_NAMES; i++) {
            scale_waiter *x = &w[k * S_NAMES + i];
            snprintf(name, sizeof name, "scale-%d", i);
            x->name = i;
            x->wave = k;
            CHECK((x->m = rlock_async_mutex_new(a, name, NULL, &err)) != NULL);
            CHECK_RC(rlock_async_lock(x->m, -1, scale_locked, x), RLOCK_OK);
        }
        /* The wave is in the queues before the next is sent. */
        while (queued_total(s) < (long long)(k + 1) * S_NAMES &&
               rt_now_ms() - t0 < 240000)
            rt_al_turn(&p);
        CHECK_INT(queued_total(s), ==, (long long)(k + 1) * S_NAMES);
    }
    printf("10,000 waiters queued in %lld ms; longest turn %lld ms\n",
           (long long)(rt_now_ms() - t0), (long long)p.longest_ms);
    /* The other processes join, then the holders let go. */
    __atomic_store_n(&sh->go, 1, __ATOMIC_SEQ_CST);
    rt_al_for(&p, 200);
    t0 = rt_now_ms();
    for (i = 0; i < S_NAMES; i++) {
        memset(&got[i], 0, sizeof got[i]);
        CHECK_RC(rlock_async_unlock(first[i], done_cb, &got[i]), RLOCK_OK);
    }
    while (scale_done < total && scale_failed == 0 && rt_now_ms() - t0 < 240000)
        rt_al_turn(&p);
    printf("10,000 acquisitions and releases in %lld ms (%d of the other "
           "processes' meanwhile); %d turns, longest %lld ms\n",
           (long long)(rt_now_ms() - t0), sh->child_acquired, p.turns,
           (long long)p.longest_ms);
    CHECK_INT(scale_done, ==, total);
    CHECK_INT(scale_failed, ==, 0);
    for (k = 0; k < 2; k++)
        CHECK_INT(rt_wait(kids[k]), ==, 0);
    CHECK_INT(sh->child_acquired, ==, 2 * S_CHILD_ROUNDS);
    CHECK_INT(sh->overlaps, ==, 0);
    for (i = 0; i < total; i++) {
        CHECK_INT(w[i].calls, ==, 1);
        CHECK_INT(w[i].unlocked, ==, 1);
        /* FIFO on its name: after the waiter of the wave before. */
        if (w[i].wave > 0)
            CHECK_INT(w[i].seq, >, w[i - S_NAMES].seq);
    }
    for (i = 0; i < S_NAMES; i++)
        CHECK_RC(got[i].status, RLOCK_OK);
    CHECK_INT(rt_cmd_int(s, "DBSIZE"), <=, S_NAMES); /* fence counters */
    rlock_async_close(a);
    free(w);
    munmap(sh, sizeof *sh);
    rt_server_stop(s);
}

/*
 * The hostile servers of test_hostile.c, through the async client: a
 * server that trickles, stalls half-way, sends an endless bulk string or
 * an array too large, nests too deep, sends garbage, or says more than it
 * was asked. Every lock ends by its deadline (command_timeout_ms) with an
 * error, never RLOCK_OK, and no turn of the loop waits on the server.
 */
TEST(async_hostile_servers_end_calls_by_their_deadline)
{
    static const rt_fake_mode modes[] = {
        RT_FAKE_SILENT, RT_FAKE_TRICKLE, RT_FAKE_STALL,   RT_FAKE_BULK,
        RT_FAKE_ARRAY,  RT_FAKE_DEEP,    RT_FAKE_GARBAGE, RT_FAKE_EXTRA};
    size_t k;

    for (k = 0; k < sizeof modes / sizeof modes[0]; k++) {
        rt_fake *f = rt_fake_start(modes[k], 0);
        rlock_client_opts co;
        rlock_async *a;
        rlock_async_mutex *m;
        rt_aloop p;
        int err, rc;
        int64_t t0;

        rlock_client_opts_init(&co);
        co.connect_timeout_ms = 500;
        co.command_timeout_ms = 500;
        co.use_pubsub = 0;
        CHECK((a = rlock_async_open(rt_fake_url(f), &co, &err)) != NULL);
        rt_al_attach(&p, a);
        CHECK((m = rlock_async_mutex_new(a, "as-hostile", NULL, &err)) != NULL);
        t0 = rt_now_ms();
        rc = al_lock(&p, m, 0, NULL);
        printf("mode %d: %s after %lld ms (%s), longest turn %lld ms\n",
               (int)modes[k], rlock_strerror(rc), (long long)(rt_now_ms() - t0),
               rlock_async_errmsg(m), (long long)p.longest_ms);
        CHECK(rc != RLOCK_OK);
        CHECK_INT(rt_now_ms() - t0, <, 3000);
        CHECK_INT(p.longest_ms, <, 200);
        rlock_async_close(a);
        CHECK_INT(p.n, ==, 0);
        rt_fake_stop(f);
    }
}

typedef struct ender {
    rlock_async *a;
    rlock_async_mutex *m;
    int calls, status, relock, closes;
} ender;

/* The callback of a call ended from outside a callback: frees its mutex
 * (again), tries to start another call on it, or closes the client. */
static void ended_cb(rlock_async_mutex *m, int status, uint64_t token,
                     void *arg)
{
    ender *e = arg;

    (void)token;
    e->calls++;
    e->status = status;
    if (e->closes) {
        rlock_async_close(e->a);
        return;
    }
    e->relock = rlock_async_lock(m, 0, ended_cb, e);
    rlock_async_mutex_free(m);
}

/*
 * A pending call ended from the application's own code, outside any
 * callback (rlock_async_mutex_free, rlock_async_cancel): its callback runs
 * before the call returns and may free the mutex again, try to start
 * another call on a mutex being freed (refused), or close the client;
 * nothing is freed twice or used after it was (the sanitizer builds).
 */
TEST(async_a_call_ended_from_outside_may_free_or_close_in_its_callback)
{
    rt_server *s = rt_server_start(NULL);
    rlock_async *a;
    rlock_async_mutex *h, *m;
    ender e;
    rt_aloop p;
    int err;

    CHECK((a = rlock_async_open(rt_server_url(s), NULL, &err)) != NULL);
    rt_al_attach(&p, a);
    CHECK((h = rlock_async_mutex_new(a, "as-end", NULL, &err)) != NULL);
    CHECK_RC(al_lock(&p, h, 0, NULL), RLOCK_OK);

    /* mutex_free from outside; the callback frees it again. */
    memset(&e, 0, sizeof e);
    CHECK((m = rlock_async_mutex_new(a, "as-end", NULL, &err)) != NULL);
    CHECK_RC(rlock_async_lock(m, -1, ended_cb, &e), RLOCK_OK);
    rt_al_for(&p, 100);
    rlock_async_mutex_free(m);
    CHECK_INT(e.calls, ==, 1);
    CHECK_RC(e.status, RLOCK_ECANCELED);
    CHECK_RC(e.relock, RLOCK_EINVAL);

    /* cancel from outside; the callback frees the mutex. */
    memset(&e, 0, sizeof e);
    CHECK((m = rlock_async_mutex_new(a, "as-end", NULL, &err)) != NULL);
    CHECK_RC(rlock_async_lock(m, -1, ended_cb, &e), RLOCK_OK);
    rt_al_for(&p, 100);
    CHECK_RC(rlock_async_cancel(m), RLOCK_OK);
    /* Its callback started a try and freed the mutex, which ended that
     * try: a second callback, inside, whose own try was refused. */
    CHECK_INT(e.calls, ==, 2);
    CHECK_RC(e.status, RLOCK_ECANCELED);
    CHECK_RC(e.relock, RLOCK_EINVAL);

    /* mutex_free from outside; the callback closes the client. */
    memset(&e, 0, sizeof e);
    e.a = a;
    e.closes = 1;
    CHECK((m = rlock_async_mutex_new(a, "as-end", NULL, &err)) != NULL);
    CHECK_RC(rlock_async_lock(m, -1, ended_cb, &e), RLOCK_OK);
    rt_al_for(&p, 100);
    rlock_async_mutex_free(m);
    CHECK_INT(e.calls, ==, 1);
    CHECK_INT(p.n, ==, 0); /* closed: every descriptor forgotten */
    CHECK_INT(p.cleanups, ==, 1);
    rt_server_stop(s);
}

/* Turns p until every one of n callbacks came (or ms pass). */
static void al_until_all(rt_aloop *p, seen *v, int n, int64_t ms)
{
    int64_t until = rt_now_ms() + ms;
    int i;

    for (;;) {
        for (i = 0; i < n && v[i].calls > 0; i++)
            ;
        if (i == n || rt_now_ms() > until)
            return;
        rt_al_turn(p);
    }
}

#define SHARE_N 48

/*
 * A loop's requests share a node's busy connections: with room for two
 * connections and 48 locks asked at once through a path that takes
 * 100 ms each way, the locks are all taken in a few round trips (each
 * after the one before it on its connection would take some 4.8 s: the
 * bound is half that), and
 * the server sees no more connections than that room. Then a request
 * given up in the middle of a shared line: its neighbours, asked before
 * and after it on the one connection, are answered as if it had never
 * been sent; the canceled one's attempt, which ran, is undone behind it;
 * nothing else changes.
 */
TEST(async_requests_share_a_busy_nodes_connections)
{
    rt_server *s = rt_server_start(NULL);
    rt_proxy *px = rt_proxy_start(rt_server_port(s));
    rlock_client_opts co;
    rlock_async *a;
    rt_aloop p_share;
    rlock_async_mutex *m[SHARE_N];
    seen v[SHARE_N];
    char name[64];
    int64_t t0, took;
    long before;
    int i, err;

    rlock_client_opts_init(&co);
    co.max_connections = 2;
    CHECK((a = rlock_async_open(rt_proxy_url(px), &co, &err)) != NULL);
    rt_al_attach(&p_share, a);
    for (i = 0; i < SHARE_N; i++) {
        snprintf(name, sizeof name, "as-share-%d", i);
        CHECK((m[i] = rlock_async_mutex_new(a, name, NULL, &err)) != NULL);
    }
    /* Both connections open, and back in the pool. */
    CHECK_RC(al_lock(&p_share, m[0], 0, NULL), RLOCK_OK);
    CHECK_RC(al_unlock(&p_share, m[0]), RLOCK_OK);
    before = rt_proxy_accepted(px);
    rt_proxy_set_delay(px, 100, 100);
    memset(v, 0, sizeof v);
    t0 = rt_now_ms();
    for (i = 0; i < SHARE_N; i++)
        CHECK_RC(rlock_async_lock(m[i], 0, lock_cb, &v[i]), RLOCK_OK);
    al_until_all(&p_share, v, SHARE_N, 20000);
    took = rt_now_ms() - t0;
    for (i = 0; i < SHARE_N; i++) {
        CHECK_INT(v[i].calls, ==, 1);
        CHECK_RC(v[i].status, RLOCK_OK);
        snprintf(name, sizeof name, "as-share-%d", i);
        CHECK_INT(rt_lock_count(s, name), ==, 1);
    }
    CHECK_INT(took, <, 2400);
    CHECK_INT(rt_proxy_accepted(px) - before, <=, 1);
    memset(v, 0, sizeof v);
    for (i = 0; i < SHARE_N; i++)
        CHECK_RC(rlock_async_unlock(m[i], done_cb, &v[i]), RLOCK_OK);
    al_until_all(&p_share, v, SHARE_N, 20000);
    for (i = 0; i < SHARE_N; i++) {
        CHECK_INT(v[i].calls, ==, 1);
        CHECK_RC(v[i].status, RLOCK_OK);
        snprintf(name, sizeof name, "as-share-%d", i);
        CHECK_INT(rt_lock_count(s, name), ==, 0);
    }

    /* Given up in the middle: replies held back, the middle one of
     * three on a connection is canceled. */
    rt_proxy_set_delay(px, 0, 0);
    rt_proxy_blackhole(px, RT_PROXY_TO_CLIENT);
    memset(v, 0, sizeof v);
    for (i = 0; i < 6; i++)
        CHECK_RC(rlock_async_lock(m[i], 0, lock_cb, &v[i]), RLOCK_OK);
    rt_al_for(&p_share, 300);
    for (i = 0; i < 6; i++) {
        CHECK_INT(v[i].calls, ==, 0);
        snprintf(name, sizeof name, "as-share-%d", i);
        CHECK_INT(rt_lock_count(s, name), ==, 1); /* they ran */
    }
    CHECK_RC(rlock_async_cancel(m[2]), RLOCK_OK);
    CHECK_INT(v[2].calls, ==, 1);
    CHECK_RC(v[2].status, RLOCK_ECANCELED);
    rt_proxy_blackhole(px, 0);
    al_until_all(&p_share, v, 6, 10000);
    for (i = 0; i < 6; i++) {
        CHECK_INT(v[i].calls, ==, 1);
        if (i != 2)
            CHECK_RC(v[i].status, RLOCK_OK);
    }
    /* The canceled attempt is undone (its lease is 30 s). */
    t0 = rt_now_ms();
    while (rt_lock_count(s, "as-share-2") != 0 && rt_now_ms() - t0 < 8000)
        rt_al_turn(&p_share);
    CHECK_INT(rt_lock_count(s, "as-share-2"), ==, 0);
    for (i = 0; i < 6; i++) {
        if (i == 2)
            continue;
        snprintf(name, sizeof name, "as-share-%d", i);
        CHECK_INT(rt_lock_count(s, name), ==, 1);
        CHECK_RC(al_unlock(&p_share, m[i]), RLOCK_OK);
        CHECK_INT(rt_lock_count(s, name), ==, 0);
    }
    CHECK_INT(rt_proxy_accepted(px), <=, 3);
    CHECK_INT(p_share.longest_ms, <, 500);
    for (i = 0; i < SHARE_N; i++)
        rlock_async_mutex_free(m[i]);
    rlock_async_close(a);
    rt_proxy_stop(px);
    rt_server_stop(s);
}

/*
 * A request with WAIT keeps a connection of its own: the server holds
 * the connection until the replicas answer, and a request pipelined
 * behind it would wait as long. 16 locks at once that ask for a replica
 * the server does not have each wait out the 400 ms of WAIT; with a
 * connection each they end together (well under 1.6 s), where sharing
 * two connections would line them up for some 3.2 s.
 */
TEST(async_requests_with_wait_do_not_share_a_connection)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client_opts co;
    rlock_async *a;
    rt_aloop p;
    rlock_async_mutex *m[16];
    seen v[16];
    char name[64];
    int64_t t0, took;
    int i, err;

    rlock_client_opts_init(&co);
    co.sync_replicas = 1;
    co.sync_timeout_ms = 400;
    CHECK((a = rlock_async_open(rt_server_url(s), &co, &err)) != NULL);
    rt_al_attach(&p, a);
    for (i = 0; i < 16; i++) {
        snprintf(name, sizeof name, "as-wait-%d", i);
        CHECK((m[i] = rlock_async_mutex_new(a, name, NULL, &err)) != NULL);
    }
    memset(v, 0, sizeof v);
    t0 = rt_now_ms();
    for (i = 0; i < 16; i++)
        CHECK_RC(rlock_async_lock(m[i], 0, lock_cb, &v[i]), RLOCK_OK);
    al_until_all(&p, v, 16, 20000);
    took = rt_now_ms() - t0;
    for (i = 0; i < 16; i++) {
        CHECK_INT(v[i].calls, ==, 1);
        CHECK_RC(v[i].status, RLOCK_EREPLICAS);
    }
    CHECK_INT(took, <, 1600);
    for (i = 0; i < 16; i++)
        rlock_async_mutex_free(m[i]);
    rlock_async_close(a);
    rt_server_stop(s);
}

/*
 * Redlock's requests share a node's connection while another node is
 * slower: both of node 1's answers come in one read, the first request
 * still waits for node 2's, and the second must take its own answer from
 * behind the first's (not fail the connection for waiting on replies to
 * nothing, nor wait for the first to finish).
 */
TEST(async_redlock_requests_take_their_own_replies_from_a_shared_line)
{
    rt_server *s1 = rt_server_start(NULL);
    rt_server *s2 = rt_server_start(NULL);
    rt_proxy *px = rt_proxy_start(rt_server_port(s2));
    rlock_client_opts co;
    rlock_async *a;
    rt_aloop p;
    rlock_async_mutex *m[4];
    seen v[4];
    char url[256], name[32];
    int i, round, err;

    snprintf(url, sizeof url, "redlock://127.0.0.1:%d,127.0.0.1:%d",
             rt_server_port(s1), rt_proxy_port(px));
    rlock_client_opts_init(&co);
    co.max_connections = 1;
    CHECK((a = rlock_async_open(url, &co, &err)) != NULL);
    rt_al_attach(&p, a);
    for (i = 0; i < 4; i++) {
        snprintf(name, sizeof name, "as-rl-line-%d", i);
        CHECK((m[i] = rlock_async_mutex_new(a, name, NULL, &err)) != NULL);
    }
    /* Two connections to each node (a Redlock node that has none free
     * fails a request at once: it does not wait for one). */
    memset(v, 0, sizeof v);
    for (i = 0; i < 2; i++)
        CHECK_RC(rlock_async_lock(m[i], 0, lock_cb, &v[i]), RLOCK_OK);
    al_until_all(&p, v, 2, 10000);
    for (i = 0; i < 2; i++) {
        CHECK_RC(v[i].status, RLOCK_OK);
        CHECK_RC(al_unlock(&p, m[i]), RLOCK_OK);
    }
    for (round = 0; round < 3; round++) {
        /* Node 2's answers come 40 ms late: three requests, the third
         * on a connection of node 1 behind one of the first two. */
        rt_proxy_set_delay(px, 0, 40);
        memset(v, 0, sizeof v);
        for (i = 1; i < 4; i++)
            CHECK_RC(rlock_async_lock(m[i], 0, lock_cb, &v[i]), RLOCK_OK);
        al_until_all(&p, v + 1, 3, 10000);
        for (i = 1; i < 4; i++) {
            if (v[i].status != RLOCK_OK)
                printf("lock %d: %s\n", i, rlock_async_errmsg(m[i]));
            CHECK_RC(v[i].status, RLOCK_OK);
        }
        rt_proxy_set_delay(px, 0, 0);
        for (i = 1; i < 4; i++)
            CHECK_RC(al_unlock(&p, m[i]), RLOCK_OK);
    }
    for (i = 0; i < 4; i++)
        rlock_async_mutex_free(m[i]);
    rlock_async_close(a);
    rt_proxy_stop(px);
    rt_server_stop(s1);
    rt_server_stop(s2);
}

/*
 * A lock canceled while its attempt, alone on its connection, is held up
 * on the way to the server: the attempt still runs when it arrives, and
 * its undo must run after it. The connection is kept owing (not closed),
 * and the undo goes behind the attempt on it; an undo sent on another
 * connection would overtake the attempt and leave the lock taken by
 * nobody for its whole lease.
 */
TEST(async_a_canceled_attempt_is_undone_after_it_not_before)
{
    rt_server *s = rt_server_start(NULL);
    rt_proxy *px = rt_proxy_start(rt_server_port(s));
    rlock_client_opts co;
    rlock_async *a;
    rt_aloop p;
    rlock_async_mutex *m0, *m1;
    conn0_hold hold = {0, RT_PROXY_TO_SERVER, 0, 0, 800};
    seen v;
    int err;

    rlock_client_opts_init(&co);
    co.max_connections = 1;
    CHECK((a = rlock_async_open(rt_proxy_url(px), &co, &err)) != NULL);
    rt_al_attach(&p, a);
    CHECK((m0 = rlock_async_mutex_new(a, "as-undo-after-0", NULL, &err)) !=
          NULL);
    CHECK((m1 = rlock_async_mutex_new(a, "as-undo-after-1", NULL, &err)) !=
          NULL);
    CHECK_RC(al_lock(&p, m0, 0, NULL), RLOCK_OK); /* the connection */
    CHECK_RC(al_unlock(&p, m0), RLOCK_OK);
    rt_proxy_set_policy(px, hold_conn0, &hold);
    __atomic_store_n(&hold.on, 1, __ATOMIC_RELEASE);
    memset(&v, 0, sizeof v);
    CHECK_RC(rlock_async_lock(m1, 0, lock_cb, &v), RLOCK_OK);
    rt_al_for(&p, 50);
    CHECK_INT(v.calls, ==, 0);
    CHECK_RC(rlock_async_cancel(m1), RLOCK_OK);
    CHECK_RC(v.status, RLOCK_ECANCELED);
    /* The attempt lands at about 800 ms; its undo after it. */
    rt_al_for(&p, 2500);
    CHECK_INT(rt_lock_count(s, "as-undo-after-1"), ==, 0);
    __atomic_store_n(&hold.on, 0, __ATOMIC_RELEASE);
    CHECK_RC(al_lock(&p, m1, 0, NULL), RLOCK_OK);
    CHECK_RC(al_unlock(&p, m1), RLOCK_OK);
    rlock_async_mutex_free(m0);
    rlock_async_mutex_free(m1);
    rlock_async_close(a);
    rt_proxy_stop(px);
    rt_server_stop(s);
}

/*
 * A request with WAIT has a connection of its own (never shared). A
 * re-entry whose WAIT is in progress (the replica stopped) is canceled:
 * what went out may still run, so its connection is kept owing, never
 * closed, and later requests go behind it on it; the unlock after it
 * needs no new connection. (Closing it would let a later request of the
 * owner overtake the re-entry on another.)
 */
TEST(async_a_canceled_request_with_wait_keeps_its_connection)
{
    rt_server *s = rt_server_start(NULL);
    rt_server *r = rt_replica_start(s, NULL, NULL);
    rlock_client_opts co;
    rlock_mutex_opts mo;
    rlock_async *a;
    rlock_async_mutex *m;
    rt_aloop p;
    long long conns;
    seen v;
    int err, rc;

    rlock_client_opts_init(&co);
    co.max_connections = 1;
    co.sync_replicas = 1;
    co.sync_timeout_ms = 2000;
    CHECK((a = rlock_async_open(rt_server_url(s), &co, &err)) != NULL);
    rt_al_attach(&p, a);
    rlock_mutex_opts_init(&mo);
    mo.lease_ms = 20000;
    CHECK((m = rlock_async_mutex_new(a, "as-wait-owe", &mo, &err)) != NULL);
    CHECK_RC(al_lock(&p, m, 0, NULL), RLOCK_OK);
    conns = rt_info_field(s, "stats", "total_connections_received");

    rt_server_pause(r);
    memset(&v, 0, sizeof v);
    CHECK_RC(rlock_async_lock(m, 0, lock_cb, &v), RLOCK_OK); /* re-entry */
    rt_al_for(&p, 200);
    CHECK_INT(v.calls, ==, 0); /* its WAIT waits for the replica */
    CHECK_RC(rlock_async_cancel(m), RLOCK_OK);
    CHECK_INT(v.calls, ==, 1);
    CHECK_RC(v.status, RLOCK_ECANCELED);
    rt_server_resume(r);
    rt_al_for(&p, 300);
    /* Let go of what the client counts (one level, or two if the
     * re-entry is counted); then nothing is held. */
    while ((rc = al_unlock(&p, m)) == RLOCK_OK)
        ;
    CHECK_RC(rc, RLOCK_ENOTOWNER);
    CHECK_INT(rt_lock_count(s, "as-wait-owe"), ==, 0);
    CHECK_INT(rt_info_field(s, "stats", "total_connections_received"), ==,
              conns);

    rlock_async_mutex_free(m);
    rlock_async_close(a);
    rt_server_stop(r);
    rt_server_stop(s);
}

/*
 * Two locks share the one connection; the server answers the first and
 * goes away, its answer and the end of the connection read in one go.
 * The first keeps its answer (its replies came before the break); the
 * second fails with the connection's error; the break is told to the
 * client's observers once (counted once), by whichever leg sees it.
 */
TEST(async_a_shared_connection_that_breaks_is_told_once)
{
    rt_fake *f = rt_fake_start(RT_FAKE_CLOSE_SECOND, 0);
    rlock_client_opts co;
    rlock_mutex_opts mo;
    rlock_async *a;
    rlock_async_mutex *m[3];
    rlock_stats st = RLOCK_STATS_INIT;
    seen v[2];
    rt_aloop p;
    int i, err;

    rlock_client_opts_init(&co);
    co.max_connections = 1;
    co.command_timeout_ms = 3000;
    CHECK((a = rlock_async_open(rt_fake_url(f), &co, &err)) != NULL);
    rt_al_attach(&p, a);
    rlock_mutex_opts_init(&mo);
    mo.lease_ms = 20000;
    for (i = 0; i < 3; i++) {
        char name[32];
        snprintf(name, sizeof name, "as-told-%d", i);
        CHECK((m[i] = rlock_async_mutex_new(a, name, &mo, &err)) != NULL);
        /* (Lean: a bare SET, which this server's "+OK" answers.) */
        CHECK_RC(rlock_async_mutex_tokens(m[i], RLOCK_ASYNC_TOKENS_ON_DEMAND),
                 RLOCK_OK);
    }
    CHECK_RC(al_lock(&p, m[0], 0, NULL), RLOCK_OK); /* the connection */
    memset(v, 0, sizeof v);
    CHECK_RC(rlock_async_lock(m[1], 0, lock_cb, &v[0]), RLOCK_OK);
    CHECK_RC(rlock_async_lock(m[2], 0, lock_cb, &v[1]), RLOCK_OK);
    rt_al_until(&p, &v[0].calls, 10000);
    rt_al_until(&p, &v[1].calls, 10000);
    CHECK_RC(v[0].status, RLOCK_OK);
    CHECK(v[1].status != RLOCK_OK && v[1].status != RLOCK_ECANCELED &&
          v[1].status != RLOCK_ETIMEDOUT && v[1].status != RLOCK_ENOREPLY);
    CHECK_RC(rlock_async_stats(a, &st), RLOCK_OK);
    CHECK_INT(st.conn_errors, ==, 1);

    rlock_async_close(a);
    rt_fake_stop(f);
}

/*
 * An extension's reply is held back past its deadline (1 s) and past
 * the time a connection may owe replies (10 s: ten deadlines). The
 * connection, still owed that reply, is then closed, not given back to
 * the pool: the unlock after it goes on a new connection, and no failure
 * is reported but the extension's. Pooled, it would be found unfit when
 * taken and reported as a connection the server closed.
 */
TEST(async_a_connection_owing_past_its_limit_is_closed_not_reused)
{
    rt_server *s = rt_server_start(NULL);
    rt_proxy *px = rt_proxy_start(rt_server_port(s));
    rlock_client_opts co;
    rlock_mutex_opts mo;
    rlock_async *a;
    rlock_async_mutex *m;
    rlock_stats st = RLOCK_STATS_INIT;
    rt_aloop p;
    conn0_hold hold = {0, RT_PROXY_TO_CLIENT, 0, 0, 14000};
    int err;

    rlock_client_opts_init(&co);
    co.max_connections = 1;
    co.command_timeout_ms = 1000;
    CHECK((a = rlock_async_open(rt_proxy_url(px), &co, &err)) != NULL);
    rt_al_attach(&p, a);
    rlock_mutex_opts_init(&mo);
    mo.lease_ms = 30000;
    CHECK((m = rlock_async_mutex_new(a, "as-owe-limit", &mo, &err)) != NULL);
    CHECK_RC(al_lock(&p, m, 0, NULL), RLOCK_OK);
    rt_proxy_set_policy(px, hold_conn0, &hold);
    __atomic_store_n(&hold.on, 1, __ATOMIC_RELEASE);
    CHECK(al_extend(&p, m, 30000) != RLOCK_OK); /* its reply held */
    __atomic_store_n(&hold.on, 0, __ATOMIC_RELEASE);
    rt_al_for(&p, 10600); /* past the limit; the reply still held */
    CHECK_RC(al_unlock(&p, m), RLOCK_OK);
    CHECK_INT(rt_lock_count(s, "as-owe-limit"), ==, 0);
    CHECK_INT(rt_proxy_accepted(px), ==, 2);
    /* One failure: the extension's silence. The connection closed for
     * owing too long is none (pooled, it would be found "closed by the
     * server" when taken, a failure that never was). */
    CHECK_RC(rlock_async_stats(a, &st), RLOCK_OK);
    CHECK_INT(st.conn_errors, ==, 1);
    rlock_async_mutex_free(m);
    rlock_async_close(a);
    rt_proxy_stop(px);
    rt_server_stop(s);
}

/*
 * A lock canceled while its new connection's handshake is unanswered
 * (the server's replies held back): the connection is kept until the
 * answers come, and then closed, never pooled with a handshake nobody
 * read. Here the password is wrong: a connection pooled unchecked would
 * serve the next request unauthenticated (NOAUTH); closed, the next
 * request opens another, whose AUTH is refused (WRONGPASS).
 */
TEST(async_a_connection_given_up_in_its_handshake_is_never_pooled)
{
    rt_server_opts so;
    rt_server *s;
    rt_proxy *px;
    rlock_client_opts co;
    rlock_async *a;
    rt_aloop p;
    rlock_async_mutex *m;
    seen v;
    long accepted;
    int err;

    memset(&so, 0, sizeof so);
    so.password = "right";
    s = rt_server_start(&so);
    px = rt_proxy_start(rt_server_port(s));
    rlock_client_opts_init(&co);
    co.password = "wrong";
    co.command_timeout_ms = 5000;
    co.connect_timeout_ms = 5000;
    CHECK((a = rlock_async_open(rt_proxy_url(px), &co, &err)) != NULL);
    rt_al_attach(&p, a);
    CHECK((m = rlock_async_mutex_new(a, "as-unchecked", NULL, &err)) != NULL);
    rt_al_for(&p, 300); /* (whatever connecting at open does) */
    rt_proxy_set_delay(px, 0, 700);
    accepted = rt_proxy_accepted(px);
    memset(&v, 0, sizeof v);
    CHECK_RC(rlock_async_lock(m, 0, lock_cb, &v), RLOCK_OK);
    rt_al_for(&p, 150);
    CHECK_INT(v.calls, ==, 0);
    CHECK_INT(rt_proxy_accepted(px), ==, accepted + 1);
    CHECK_RC(rlock_async_cancel(m), RLOCK_OK);
    CHECK_RC(v.status, RLOCK_ECANCELED);
    rt_al_for(&p, 1500); /* the answers come; the connection goes */
    rt_proxy_set_delay(px, 0, 0);
    accepted = rt_proxy_accepted(px);
    memset(&v, 0, sizeof v);
    CHECK_RC(rlock_async_lock(m, 0, lock_cb, &v), RLOCK_OK);
    rt_al_until(&p, &v.calls, 10000);
    CHECK_RC(v.status, RLOCK_EAUTH);
    printf("%s\n", rlock_async_errmsg(m));
    CHECK(strstr(rlock_async_errmsg(m), "WRONGPASS") != NULL);
    CHECK_INT(rt_proxy_accepted(px), >, accepted);
    rlock_async_mutex_free(m);
    rlock_async_close(a);
    rt_proxy_stop(px);
    rt_server_stop(s);
}
