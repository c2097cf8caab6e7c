/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Observing a client (issue 31): the events of acquiring, waiting,
 * renewing, losing, reconnecting and releasing, in order, against real
 * servers; callbacks that call the library back; callbacks that take
 * their time while other holds must be renewed; the log callback; the
 * counters after a known sequence; the Prometheus text, read by
 * prometheus_client's own parser.
 */
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness/test.h"

/* ---- a recorder of events ------------------------------------------------ */

#define REC_MAX 512

typedef struct rec_ev {
    int type, code, cause;
    unsigned flags;
    char name[64];
    char owner[160];
    char node[160];
    char detail[512];
    uint64_t token;
    int64_t count, lease_ms, wait_us, hold_us, attempts, time_ns;
    pthread_t thread;
} rec_ev;

typedef struct recorder {
    pthread_mutex_t mu;
    rec_ev ev[REC_MAX];
    int n;
    /* Called after recording, outside mu (may call the library). */
    void (*hook)(struct recorder *r, const rlock_event *ev);
    void *ctx;
} recorder;

static void rec_init(recorder *r)
{
    memset(r, 0, sizeof *r);
    pthread_mutex_init(&r->mu, NULL);
}

static void record(const rlock_event *ev, void *arg)
{
    recorder *r = arg;
    rec_ev *e;

    CHECK(ev->size >= sizeof(rlock_event));
    pthread_mutex_lock(&r->mu);
    if (r->n < REC_MAX) {
        e = &r->ev[r->n++];
        memset(e, 0, sizeof *e);
        e->type = ev->type;
        e->code = ev->code;
        e->cause = ev->cause;
        e->flags = ev->flags;
        if (ev->name) {
            CHECK(ev->name[ev->name_len] == '\0');
            snprintf(e->name, sizeof e->name, "%.*s", (int)ev->name_len,
                     ev->name);
        }
        snprintf(e->owner, sizeof e->owner, "%s", ev->owner);
        snprintf(e->node, sizeof e->node, "%s", ev->node);
        snprintf(e->detail, sizeof e->detail, "%s", ev->detail);
        e->token = ev->token;
        e->count = ev->count;
        e->lease_ms = ev->lease_ms;
        e->wait_us = ev->wait_us;
        e->hold_us = ev->hold_us;
        e->attempts = ev->attempts;
        e->time_ns = ev->time_ns;
        e->thread = pthread_self();
    }
    pthread_mutex_unlock(&r->mu);
    if (r->hook)
        r->hook(r, ev);
}

/* How many events of type (0: any) about name (NULL: any) were recorded. */
static int rec_count(recorder *r, int type, const char *name)
{
    int i, k = 0;

    pthread_mutex_lock(&r->mu);
    for (i = 0; i < r->n; i++)
        if ((!type || r->ev[i].type == type) &&
            (!name || strcmp(r->ev[i].name, name) == 0))
            k++;
    pthread_mutex_unlock(&r->mu);
    return k;
}

/* The k-th event (from 0) about name, or NULL. */
static rec_ev *rec_nth(recorder *r, const char *name, int k)
{
    int i;

    for (i = 0; i < r->n; i++)
        if (!name || strcmp(r->ev[i].name, name) == 0)
            if (k-- == 0)
                return &r->ev[i];
    return NULL;
}

/* The first event of type about name, or NULL. */
static rec_ev *rec_first(recorder *r, int type, const char *name)
{
    int i;

    for (i = 0; i < r->n; i++)
        if (r->ev[i].type == type && (!name || !strcmp(r->ev[i].name, name)))
            return &r->ev[i];
    return NULL;
}

/* The types recorded about name, as "1,3,2", into buf. */
static const char *rec_types(recorder *r, const char *name, char *buf,
                             size_t len)
{
    size_t k = 0;
    int i;

    buf[0] = '\0';
    pthread_mutex_lock(&r->mu);
    for (i = 0; i < r->n && k + 8 < len; i++)
        if (!name || strcmp(r->ev[i].name, name) == 0)
            k += (size_t)snprintf(buf + k, len - k, "%s%d", k ? "," : "",
                                  r->ev[i].type);
    pthread_mutex_unlock(&r->mu);
    return buf;
}

#define CHECK_TYPES(r, name, want)                                             \
    do {                                                                       \
        char buf_[512];                                                        \
        rec_types(r, name, buf_, sizeof buf_);                                 \
        if (strcmp(buf_, want) != 0)                                           \
            rt_fail(__FILE__, __LINE__, "events of %s: %s, want %s",           \
                    name ? name : "*", buf_, want);                            \
    } while (0)

static rlock_client *client_with(const char *url, int64_t watchdog_ms,
                                 int timeout_ms)
{
    rlock_client_opts o;

    rlock_client_opts_init(&o);
    if (watchdog_ms)
        o.watchdog_lease_ms = watchdog_ms;
    if (timeout_ms)
        o.command_timeout_ms = o.connect_timeout_ms = timeout_ms;
    return rt_client(url, &o);
}

static rlock_client *recorded(const char *url, int64_t watchdog_ms, recorder *r)
{
    rlock_client *c = client_with(url, watchdog_ms, 0);

    rec_init(r);
    CHECK_RC(rlock_client_set_event_cb(c, record, r), RLOCK_OK);
    return c;
}

/* The holder an operator sees: the owner the events carry. */
static void check_owner_is_holder(rlock_mutex *m, const char *owner)
{
    rlock_status st;

    CHECK_RC(rlock_mutex_status(m, &st), RLOCK_OK);
    CHECK(st.held);
    if (strcmp(st.holder, owner) != 0)
        rt_fail(__FILE__, __LINE__, "event owner %s, holder %s", owner,
                st.holder);
}

/* ---- acquire, re-enter, release ------------------------------------------ */

TEST(events_of_a_lock_come_in_order_on_the_calling_thread)
{
    rt_server *s = rt_server_start(NULL);
    recorder r;
    rlock_client *c = recorded(rt_server_url(s), 0, &r);
    rlock_mutex *m = rt_mutex(c, "ev", NULL);
    pthread_t me = pthread_self();
    uint64_t token;
    rec_ev *e;
    int i;

    CHECK_RC(rlock_mutex_trylock(m), RLOCK_OK);
    /* Delivered before the call returned. */
    CHECK_TYPES(&r, "ev", "1");
    e = rec_nth(&r, "ev", 0);
    check_owner_is_holder(m, e->owner);
    CHECK_INT(e->count, ==, 1);
    CHECK_INT(e->attempts, ==, 1);
    CHECK_INT(e->lease_ms, ==, 30000);
    CHECK_INT(e->token, ==, 0); /* the lean form: none drawn yet */
    CHECK(!(e->flags & (RLOCK_EVF_REENTRY | RLOCK_EVF_HANDED_OVER)));
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK); /* a re-entry */
    e = rec_nth(&r, "ev", 1);
    CHECK_INT(e->type, ==, RLOCK_EV_ACQUIRED);
    CHECK_INT(e->count, ==, 2);
    CHECK(e->flags & RLOCK_EVF_REENTRY);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    CHECK_RC(rlock_mutex_extend(m, 20000), RLOCK_OK);
    rt_sleep_ms(20);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    CHECK_TYPES(&r, "ev", "1,1,2,7,2");
    e = rec_nth(&r, "ev", 2);
    CHECK_INT(e->count, ==, 1);
    CHECK(e->flags & RLOCK_EVF_REENTRY);
    CHECK_INT(rec_nth(&r, "ev", 3)->lease_ms, ==, 20000);
    e = rec_nth(&r, "ev", 4);
    CHECK_INT(e->count, ==, 0);
    CHECK_INT(e->hold_us, >=, 20000);
    /* A token drawn: the next acquisition carries it. */
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    CHECK_RC(rlock_mutex_fence(m, &token), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    token = rlock_mutex_token(m);
    CHECK(token > 0);
    CHECK_INT(rec_nth(&r, "ev", 7)->token, ==, token);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    CHECK_TYPES(&r, "ev", "1,1,2,7,2,1,2,1,2");
    /* Each on this thread, in time order. */
    for (i = 0; i < r.n; i++) {
        CHECK(pthread_equal(r.ev[i].thread, me));
        if (i > 0)
            CHECK(r.ev[i].time_ns >= r.ev[i - 1].time_ns);
    }
    rlock_mutex_free(m);
    rlock_client_close(c);
    rt_server_stop(s);
}

/* ---- a wait woken by the release message --------------------------------- */

TEST(events_of_a_wait_woken_by_the_release_message)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *a = rt_client(rt_server_url(s), NULL);
    recorder r;
    rlock_client *b = recorded(rt_server_url(s), 0, &r);
    rlock_mutex *ma = rt_mutex(a, "w", NULL), *mb = rt_mutex(b, "w", NULL);
    rt_locker l;
    rec_ev *e;

    CHECK_RC(rlock_mutex_lock(ma), RLOCK_OK);
    rt_locker_start(&l, mb, 0);
    /* Told that it waits while it waits, between its attempts. */
    RT_WAIT_UNTIL(rec_count(&r, RLOCK_EV_WAITING, "w") == 1, 5000);
    CHECK_INT(rec_count(&r, RLOCK_EV_ACQUIRED, "w"), ==, 0);
    rt_sleep_ms(100);
    CHECK_RC(rlock_mutex_unlock(ma), RLOCK_OK);
    CHECK_RC(rt_locker_join(&l), RLOCK_OK);
    CHECK_TYPES(&r, "w", "5,1");
    e = rec_nth(&r, "w", 1);
    /* Handed over by the releaser's script and its message. */
    CHECK(e->flags & RLOCK_EVF_HANDED_OVER);
    CHECK_INT(e->wait_us, >=, 100000);
    CHECK_INT(e->attempts, >=, 1);
    CHECK(pthread_equal(e->thread, l.thread));
    CHECK(pthread_equal(rec_nth(&r, "w", 0)->thread, l.thread));
    {
        rlock_stats st = RLOCK_STATS_INIT;
        CHECK_RC(rlock_client_stats(b, &st), RLOCK_OK);
        CHECK_INT(st.acquisitions, ==, 1);
        CHECK_INT(st.contended, ==, 1);
        CHECK_INT(st.wait.count, ==, 1);
        CHECK_INT(st.wait.sum_us, >=, 100000);
    }
    rlock_mutex_free(ma);
    rlock_mutex_free(mb); /* the locker's hold is forgotten */
    rlock_client_close(a);
    rlock_client_close(b);
    rt_server_stop(s);
}

/* ---- renewals, on a thread of the client's own --------------------------- */

TEST(renewals_are_reported_on_a_thread_of_the_clients_own)
{
    rt_server *s = rt_server_start(NULL);
    recorder r;
    rlock_client *c = recorded(rt_server_url(s), 300, &r);
    rlock_mutex *m = rt_mutex(c, "rn", NULL);
    rlock_stats st = RLOCK_STATS_INIT;
    rec_ev *e;
    int n;

    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    RT_WAIT_UNTIL(rec_count(&r, RLOCK_EV_RENEWED, "rn") >= 3, 5000);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    n = rec_count(&r, 0, "rn");
    CHECK_INT(rec_nth(&r, "rn", 0)->type, ==, RLOCK_EV_ACQUIRED);
    CHECK_INT(rec_nth(&r, "rn", n - 1)->type, ==, RLOCK_EV_RELEASED);
    e = rec_nth(&r, "rn", 1);
    CHECK_INT(e->type, ==, RLOCK_EV_RENEWED);
    CHECK_INT(e->lease_ms, ==, 300);
    CHECK(!pthread_equal(e->thread, pthread_self()));
    CHECK_RC(rlock_client_stats(c, &st), RLOCK_OK);
    CHECK_INT(st.renewals, >=, 3);
    CHECK_INT(st.renewals, ==, rec_count(&r, RLOCK_EV_RENEWED, "rn"));
    rlock_mutex_free(m);
    rlock_client_close(c);
    rt_server_stop(s);
}

/* ---- losses and their causes --------------------------------------------- */

TEST(a_lost_hold_is_reported_with_its_cause)
{
    rt_server *s = rt_server_start(NULL);
    recorder r;
    rlock_client *c = recorded(rt_server_url(s), 300, &r);
    rlock_mutex_opts mo;
    rlock_mutex *gone = rt_mutex(c, "gone", NULL), *capped, *paused;
    rlock_stats st = RLOCK_STATS_INIT;
    rec_ev *e;

    /* Deleted under the holder: the next renewal finds it gone. */
    CHECK_RC(rlock_mutex_lock(gone), RLOCK_OK);
    CHECK_INT(rt_cmd_int(s, "DEL {rlock:gone}"), ==, 1);
    RT_WAIT_UNTIL(rec_count(&r, RLOCK_EV_LOST, "gone") == 1, 5000);
    e = rec_first(&r, RLOCK_EV_LOST, "gone");
    CHECK_INT(e->cause, ==, RLOCK_LOST_GONE);
    CHECK_INT(e->hold_us, >, 0);
    CHECK(strstr(e->detail, "renewal") != NULL);
    CHECK_RC(rlock_mutex_unlock(gone), RLOCK_ELOST);
    /* Renewed once, then let go. */
    rlock_mutex_opts_init(&mo);
    mo.max_renewals = 1;
    capped = rt_mutex(c, "capped", &mo);
    CHECK_RC(rlock_mutex_lock(capped), RLOCK_OK);
    RT_WAIT_UNTIL(rec_count(&r, RLOCK_EV_LOST, "capped") == 1, 5000);
    CHECK_TYPES(&r, "capped", "1,3,4");
    CHECK_INT(rec_nth(&r, "capped", 2)->cause, ==, RLOCK_LOST_CAPPED);
    CHECK_RC(rlock_mutex_unlock(capped), RLOCK_ELOST);
    /* The server stopped past the lease: nothing confirmed in time. */
    paused = rt_mutex(c, "paused", NULL);
    CHECK_RC(rlock_mutex_lock(paused), RLOCK_OK);
    rt_server_pause(s);
    RT_WAIT_UNTIL(rec_count(&r, RLOCK_EV_LOST, "paused") == 1, 5000);
    rt_server_resume(s);
    CHECK_INT(rec_first(&r, RLOCK_EV_LOST, "paused")->cause, ==,
              RLOCK_LOST_EXPIRED);
    CHECK_RC(rlock_mutex_unlock(paused), RLOCK_ELOST);
    /* Each loss once, whatever found it first. */
    CHECK_INT(rec_count(&r, RLOCK_EV_LOST, NULL), ==, 3);
    CHECK_RC(rlock_client_stats(c, &st), RLOCK_OK);
    CHECK_INT(st.losses, ==, 3);
    CHECK_INT(st.losses_by_cause[RLOCK_LOST_GONE], ==, 1);
    CHECK_INT(st.losses_by_cause[RLOCK_LOST_CAPPED], ==, 1);
    CHECK_INT(st.losses_by_cause[RLOCK_LOST_EXPIRED], ==, 1);
    CHECK_INT(st.renewal_failures, >=, 1);
    CHECK_INT(st.releases, ==, 0);
    rlock_mutex_free(gone);
    rlock_mutex_free(capped);
    rlock_mutex_free(paused);
    rlock_client_close(c);
    rt_server_stop(s);
}

/* ---- a connection killed, and made again ----------------------------------
 */

TEST(a_killed_connection_is_reported_and_made_again)
{
    rt_server *s = rt_server_start(NULL);
    recorder r;
    rlock_client *c = recorded(rt_server_url(s), 0, &r);
    rlock_mutex *m = rt_mutex(c, "k", NULL);
    rlock_stats st = RLOCK_STATS_INIT;
    redisReply *rep;
    rec_ev *e;

    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    rep = rt_cmd(s, "CLIENT KILL TYPE normal SKIPME yes");
    CHECK(rep && rep->type == REDIS_REPLY_INTEGER && rep->integer >= 1);
    freeReplyObject(rep);
    rt_sleep_ms(100); /* the server's close reaches the client */
    CHECK_RC(rlock_mutex_trylock(m), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    /* In the order they happened, on the calling thread, before the
     * trylock returned. */
    CHECK_TYPES(&r, NULL, "1,2,9,10,1,2");
    e = rec_nth(&r, NULL, 2);
    CHECK_INT(e->code, ==, RLOCK_EIO);
    CHECK(strstr(e->node, "127.0.0.1:") != NULL);
    CHECK(e->name[0] == '\0');
    CHECK(pthread_equal(e->thread, pthread_self()));
    CHECK(strcmp(rec_nth(&r, NULL, 3)->node, e->node) == 0);
    CHECK_RC(rlock_client_stats(c, &st), RLOCK_OK);
    CHECK_INT(st.conn_errors, ==, 1);
    CHECK_INT(st.reconnects, ==, 1);
    rlock_mutex_free(m);
    rlock_client_close(c);
    rt_server_stop(s);
}

/* ---- a wait that times out ----------------------------------------------- */

TEST(a_wait_that_times_out_leaves_the_queue_and_says_so)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *a = rt_client(rt_server_url(s), NULL);
    recorder r;
    rlock_client *b = recorded(rt_server_url(s), 0, &r);
    rlock_mutex *ma = rt_mutex(a, "t", NULL), *mb = rt_mutex(b, "t", NULL);
    rlock_stats st = RLOCK_STATS_INIT;
    rec_ev *e;

    CHECK_RC(rlock_mutex_lock(ma), RLOCK_OK);
    CHECK_RC(rlock_mutex_timedlock(mb, 300), RLOCK_ETIMEDOUT);
    /* Waiting, its place in the queue given back (the undo), timed out. */
    CHECK_TYPES(&r, "t", "5,8,6");
    e = rec_nth(&r, "t", 2);
    CHECK_INT(e->wait_us, >=, 300000);
    CHECK_INT(e->attempts, >=, 1);
    CHECK(!(rec_nth(&r, "t", 1)->flags & RLOCK_EVF_LATER));
    CHECK_RC(rlock_mutex_trylock(mb), RLOCK_EBUSY);
    CHECK_RC(rlock_mutex_timedlock(mb, 0), RLOCK_ETIMEDOUT);
    CHECK_TYPES(&r, "t", "5,8,6,6");
    CHECK_RC(rlock_client_stats(b, &st), RLOCK_OK);
    CHECK_INT(st.failures, ==, 3);
    CHECK_INT(st.failures_by_code[-RLOCK_ETIMEDOUT], ==, 2);
    CHECK_INT(st.failures_by_code[-RLOCK_EBUSY], ==, 1);
    CHECK_INT(st.wait_timeouts, ==, 2);
    CHECK_INT(st.undos, ==, 1);
    CHECK_INT(st.acquisitions, ==, 0);
    CHECK_RC(rlock_mutex_unlock(ma), RLOCK_OK);
    rlock_mutex_free(ma);
    rlock_mutex_free(mb);
    rlock_client_close(a);
    rlock_client_close(b);
    rt_server_stop(s);
}

/* ---- an undo sent by the background -------------------------------------- */

TEST(an_undo_of_an_unanswered_attempt_is_reported)
{
    rt_server *s = rt_server_start(NULL);
    recorder r;
    rlock_client_opts o;
    rlock_client *c;
    rlock_mutex *m;
    rlock_stats st = RLOCK_STATS_INIT;

    rlock_client_opts_init(&o);
    o.command_timeout_ms = 300;
    c = rt_client(rt_server_url(s), &o);
    rec_init(&r);
    CHECK_RC(rlock_client_set_event_cb(c, record, &r), RLOCK_OK);
    m = rt_mutex(c, "u", NULL);
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK); /* a connection, warm */
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    rt_server_pause(s);
    CHECK_RC(rlock_mutex_trylock(m), RLOCK_ENOREPLY);
    rt_server_resume(s);
    /* The attempt may have taken the lock: undone, behind it. */
    RT_WAIT_UNTIL(rec_count(&r, RLOCK_EV_UNDO, "u") == 1, 5000);
    CHECK_INT(rec_count(&r, RLOCK_EV_CONN_ERROR, NULL), ==, 1);
    CHECK_INT(rec_nth(&r, NULL, 2)->code, ==, RLOCK_ENOREPLY);
    RT_WAIT_UNTIL(rt_lock_count(s, "u") == 0, 5000);
    CHECK_RC(rlock_mutex_trylock(m), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    CHECK_RC(rlock_client_stats(c, &st), RLOCK_OK);
    CHECK_INT(st.undos, ==, 1);
    CHECK_INT(st.failures_by_code[-RLOCK_ENOREPLY], ==, 1);
    rlock_mutex_free(m);
    rlock_client_close(c);
    rt_server_stop(s);
}

/* ---- callbacks that call the library back -------------------------------- */

struct reentrant {
    rlock_mutex *outer, *inner;
    atomic_int status_rc, inner_rc, renew_status_rc, nested;
};

static void call_back(recorder *r, const rlock_event *ev)
{
    struct reentrant *x = r->ctx;
    rlock_status st;

    if (!ev->name)
        return;
    if (ev->type == RLOCK_EV_ACQUIRED && strcmp(ev->name, "outer") == 0 &&
        !(ev->flags & RLOCK_EVF_REENTRY)) {
        /* On the calling thread, which holds the lock now: the library's
         * own locks are not held. */
        atomic_store(&x->status_rc, rlock_mutex_status(x->outer, &st));
        CHECK(st.held);
        atomic_store(&x->inner_rc, rlock_mutex_trylock(x->inner));
        /* Its events come after this callback returns, never inside. */
        atomic_store(&x->nested, rec_count(r, 0, "inner"));
        CHECK_RC(rlock_mutex_unlock(x->inner), RLOCK_OK);
        CHECK_INT(rec_count(r, 0, "inner"), ==, 0);
    }
    if (ev->type == RLOCK_EV_RENEWED && strcmp(ev->name, "outer") == 0 &&
        atomic_load(&x->renew_status_rc) == 1)
        /* On a notifier thread: the library may be called there too. */
        atomic_store(&x->renew_status_rc, rlock_mutex_status(x->outer, &st));
}

TEST(callbacks_may_call_the_library)
{
    rt_server *s = rt_server_start(NULL);
    recorder r;
    rlock_client *c = recorded(rt_server_url(s), 300, &r);
    struct reentrant x;

    memset(&x, 0, sizeof x);
    x.outer = rt_mutex(c, "outer", NULL);
    x.inner = rt_mutex(c, "inner", NULL);
    atomic_store(&x.status_rc, 1);
    atomic_store(&x.inner_rc, 1);
    atomic_store(&x.renew_status_rc, 1);
    r.ctx = &x;
    r.hook = call_back;
    CHECK_RC(rlock_mutex_lock(x.outer), RLOCK_OK);
    CHECK_RC(atomic_load(&x.status_rc), RLOCK_OK);
    CHECK_RC(atomic_load(&x.inner_rc), RLOCK_OK);
    CHECK_INT(atomic_load(&x.nested), ==, 0);
    /* The inner lock's events, after the outer's acquisition. */
    CHECK_TYPES(&r, NULL, "1,1,2");
    CHECK(strcmp(rec_nth(&r, NULL, 1)->name, "inner") == 0);
    RT_WAIT_UNTIL(atomic_load(&x.renew_status_rc) != 1, 5000);
    CHECK_RC(atomic_load(&x.renew_status_rc), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(x.outer), RLOCK_OK);
    /* Setting the callbacks from inside one is allowed too. */
    rlock_mutex_free(x.outer);
    rlock_mutex_free(x.inner);
    rlock_client_close(c);
    rt_server_stop(s);
}

/* ---- every call delivers its events before it returns -------------------
 */

static int never_called(void *arg, uint64_t token)
{
    (void)arg;
    (void)token;
    return 1;
}

static void count_key(void *arg, const char *key, size_t len)
{
    (void)key;
    (void)len;
    ++*(int *)arg;
}

/*
 * Calls that return early or with something other than a code delivered
 * nothing of what they caused until the thread's next call: rlock_with
 * whose token could not be drawn (it gives its level back: RELEASED), and
 * a step of a walk over the keys that found its connection broken
 * (CONN_ERROR) and made another.
 */
TEST(rlock_with_and_a_walk_deliver_their_events_before_they_return)
{
    rt_server *s = rt_server_start(NULL);
    recorder r;
    rlock_client *c = recorded(rt_server_url(s), 0, &r);
    rlock_mutex *m = rt_mutex(c, "wd", NULL);
    rlock_scan *walk;
    redisReply *rep;
    int err, keys = 0;

    /* An outer hold taken lean; rlock_with re-enters it, and its token
     * cannot be drawn (the counter's key holds a hash). */
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    freeReplyObject(rt_cmd(s, "HSET {rlock:wd}:fence x 1"));
    CHECK_RC(rlock_with(m, 0, never_called, NULL), RLOCK_EREDIS);
    CHECK_TYPES(&r, "wd", "1,1,2");
    CHECK(rec_nth(&r, "wd", 2)->flags & RLOCK_EVF_REENTRY);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    CHECK_TYPES(&r, "wd", "1,1,2,2");
    /* The walk's step finds the pooled connection killed. */
    rep = rt_cmd(s, "CLIENT KILL TYPE normal SKIPME yes");
    CHECK(rep && rep->type == REDIS_REPLY_INTEGER && rep->integer >= 1);
    freeReplyObject(rep);
    rt_sleep_ms(100); /* the server's close reaches the client */
    walk = rlock_scan_new(c, NULL, NULL, &err);
    CHECK(walk != NULL);
    CHECK_RC(rlock_scan_next(walk, 100, count_key, &keys), 0);
    CHECK_TYPES(&r, NULL, "1,1,2,2,9");
    CHECK(pthread_equal(rec_nth(&r, NULL, 4)->thread, pthread_self()));
    rlock_scan_free(walk);
    rlock_mutex_free(m);
    rlock_client_close(c);
    rt_server_stop(s);
}

/* ---- callbacks that unset callbacks at once -------------------------------
 */

struct two_unset {
    rlock_client *c;
    atomic_int inside, done;
};

static void unset_from_inside(const rlock_event *ev, void *arg)
{
    struct two_unset *u = arg;
    int i;

    if (ev->type != RLOCK_EV_ACQUIRED)
        return;
    /* Both threads are in a callback of the client before either unsets
     * (up to 5 s: if they never meet, the test still ends). */
    atomic_fetch_add(&u->inside, 1);
    for (i = 0; i < 5000 && atomic_load(&u->inside) < 2; i++)
        rt_sleep_ms(1);
    CHECK_RC(rlock_client_set_event_cb(u->c, NULL, NULL), RLOCK_OK);
    CHECK_RC(rlock_client_set_log_cb(u->c, RLOCK_LOG_DEBUG, NULL, NULL),
             RLOCK_OK);
    atomic_fetch_add(&u->done, 1);
}

static void *lock_one(void *arg)
{
    rlock_mutex *m = arg;

    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    return NULL;
}

/*
 * Two threads, each in the client's event callback, both remove it: each
 * waited for the other's callback to return, for ever. A setter inside a
 * callback does not wait.
 */
TEST(two_callbacks_may_unset_the_callbacks_at_once)
{
    rt_server *s = rt_server_start(NULL);
    struct two_unset u;
    rlock_mutex *m1, *m2;
    pthread_t t1, t2;
    int i;

    memset(&u, 0, sizeof u);
    u.c = rt_client(rt_server_url(s), NULL);
    m1 = rt_mutex(u.c, "u1", NULL);
    m2 = rt_mutex(u.c, "u2", NULL);
    CHECK_RC(rlock_client_set_event_cb(u.c, unset_from_inside, &u), RLOCK_OK);
    CHECK(pthread_create(&t1, NULL, lock_one, m1) == 0);
    CHECK(pthread_create(&t2, NULL, lock_one, m2) == 0);
    for (i = 0; i < 10000 && atomic_load(&u.done) < 2; i++)
        rt_sleep_ms(1);
    CHECK_INT(atomic_load(&u.inside), ==, 2);
    /* Not joined if they hang: the test fails here rather than at its
     * time limit. */
    CHECK_INT(atomic_load(&u.done), ==, 2);
    CHECK(pthread_join(t1, NULL) == 0);
    CHECK(pthread_join(t2, NULL) == 0);
    rlock_mutex_free(m1);
    rlock_mutex_free(m2);
    rlock_client_close(u.c);
    rt_server_stop(s);
}

/* ---- a callback that outlives a fixed lease -------------------------------
 */

static void sleep_on_acquired_or_extended(recorder *r, const rlock_event *ev)
{
    if ((ev->type == RLOCK_EV_ACQUIRED || ev->type == RLOCK_EV_EXTENDED) &&
        *(atomic_int *)r->ctx)
        rt_sleep_ms(900);
}

/*
 * The ACQUIRED and EXTENDED events are delivered on the calling thread
 * before the call returns. A callback that sleeps past a fixed lease of
 * 400 ms made lock and extend return RLOCK_OK for a hold whose lease had
 * ended (another client took the lock meanwhile): they return
 * RLOCK_ELOST, and the level is gone.
 */
TEST(a_call_whose_callback_outlived_the_lease_does_not_return_it_held)
{
    rt_server *s = rt_server_start(NULL);
    recorder r;
    rlock_client *c = recorded(rt_server_url(s), 0, &r);
    rlock_client *other = rt_client(rt_server_url(s), NULL);
    rlock_mutex_opts mo;
    rlock_mutex *m, *m2;
    atomic_int slow = 1;

    memset(&mo, 0, sizeof mo);
    mo.lease_ms = 400;
    m = rt_mutex(c, "fixed", &mo);
    m2 = rt_mutex(other, "fixed", NULL);
    r.ctx = &slow;
    r.hook = sleep_on_acquired_or_extended;
    CHECK_RC(rlock_mutex_lock(m), RLOCK_ELOST);
    CHECK_INT(rec_count(&r, RLOCK_EV_LOST, "fixed"), ==, 1);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_ENOTOWNER);
    CHECK_RC(rlock_mutex_trylock(m), RLOCK_ELOST);
    CHECK_RC(rlock_mutex_timedlock(m, 1000), RLOCK_ELOST);
    /* The lock was free for another all along. */
    CHECK_RC(rlock_mutex_trylock(m2), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(m2), RLOCK_OK);
    /* extend: the hold is taken quickly, the extension's callback is
     * slow. */
    atomic_store(&slow, 0);
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    atomic_store(&slow, 1);
    CHECK_RC(rlock_mutex_extend(m, 400), RLOCK_ELOST);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_ENOTOWNER);
    /* A quick callback leaves the hold alone. */
    atomic_store(&slow, 0);
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    CHECK_RC(rlock_mutex_extend(m, 400), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    rlock_mutex_free(m);
    rlock_mutex_free(m2);
    rlock_client_close(other);
    rlock_client_close(c);
    rt_server_stop(s);
}

/* ---- a client closed while its events wait in another's delivery ---------
 */

struct nested_close {
    rlock_client *y;
    rlock_mutex *my;
    recorder *ry;
    atomic_int go, closed, inner_rc, seen_inside;
};

static void *close_y(void *arg)
{
    struct nested_close *n = arg;

    while (!atomic_load(&n->go))
        rt_sleep_ms(1);
    rlock_mutex_free(n->my);
    rlock_client_close(n->y);
    atomic_store(&n->closed, 1);
    return NULL;
}

static void call_y_then_wait_for_its_close(recorder *r, const rlock_event *ev)
{
    struct nested_close *n = r->ctx;
    int rc;

    if (ev->type != RLOCK_EV_ACQUIRED || (ev->flags & RLOCK_EVF_REENTRY))
        return;
    /* Y's events of these calls wait in this thread's outbox until this
     * callback returns. */
    rc = rlock_mutex_trylock(n->my);
    if (rc == RLOCK_OK)
        rc = rlock_mutex_unlock(n->my);
    atomic_store(&n->inner_rc, rc);
    atomic_store(&n->seen_inside, rec_count(n->ry, 0, "ny"));
    atomic_store(&n->go, 1);
    while (!atomic_load(&n->closed))
        rt_sleep_ms(1);
}

/*
 * A callback of client X calls client Y, whose events wait in the
 * thread's outbox until the callback returns; meanwhile another thread
 * closes Y. Those events go to nobody (Y is closed), and nothing of Y is
 * touched after its close freed it (AddressSanitizer: a use after free
 * in the delivery, before).
 */
TEST(events_of_a_client_closed_before_they_were_delivered_go_to_nobody)
{
    rt_server *s = rt_server_start(NULL);
    recorder rx, ry;
    rlock_client *x = recorded(rt_server_url(s), 0, &rx);
    struct nested_close n;
    rlock_mutex *mx = rt_mutex(x, "nx", NULL);
    pthread_t closer;

    memset(&n, 0, sizeof n);
    n.y = recorded(rt_server_url(s), 0, &ry);
    n.my = rt_mutex(n.y, "ny", NULL);
    n.ry = &ry;
    rx.ctx = &n;
    rx.hook = call_y_then_wait_for_its_close;
    CHECK(pthread_create(&closer, NULL, close_y, &n) == 0);
    CHECK_RC(rlock_mutex_lock(mx), RLOCK_OK);
    CHECK(pthread_join(closer, NULL) == 0);
    CHECK_RC(atomic_load(&n.inner_rc), RLOCK_OK);
    CHECK_INT(atomic_load(&n.seen_inside), ==, 0);
    /* Y was closed before its events could be delivered: none was. */
    CHECK_INT(rec_count(&ry, 0, NULL), ==, 0);
    CHECK_TYPES(&rx, "nx", "1");
    CHECK_RC(rlock_mutex_unlock(mx), RLOCK_OK);
    rlock_mutex_free(mx);
    rlock_client_close(x);
    rt_server_stop(s);
}

/* ---- a callback that takes its time stalls no renewal ---------------------
 */

struct sleeper {
    atomic_int slept_async, slept_sync;
};

static void sleep_once(recorder *r, const rlock_event *ev)
{
    struct sleeper *z = r->ctx;

    if (!ev->name)
        return;
    if (ev->type == RLOCK_EV_RENEWED && strcmp(ev->name, "x") == 0 &&
        atomic_exchange(&z->slept_async, 1) == 0)
        rt_sleep_ms(2000);
    if (ev->type == RLOCK_EV_ACQUIRED && strcmp(ev->name, "z") == 0 &&
        atomic_exchange(&z->slept_sync, 1) == 0)
        rt_sleep_ms(2000);
}

/*
 * Holds of 600 ms leases, renewed every 200 ms, while a callback sleeps
 * 2 s: first one of a renewal (the background's event, delivered on a
 * notifier thread), then one of an acquisition (on the caller's thread).
 * Delivered on the thread that renews, either would let y's lease run out
 * (another client would take it, and y would be lost).
 */
TEST(a_callback_that_sleeps_stalls_no_renewal)
{
    rt_server *s = rt_server_start(NULL);
    recorder r;
    rlock_client *c = recorded(rt_server_url(s), 600, &r);
    rlock_client *other = rt_client(rt_server_url(s), NULL);
    rlock_mutex *x = rt_mutex(c, "x", NULL), *y = rt_mutex(c, "y", NULL);
    rlock_mutex *z = rt_mutex(c, "z", NULL), *oy = rt_mutex(other, "y", NULL);
    struct sleeper zz;
    int64_t left, t0;
    int i;

    memset(&zz, 0, sizeof zz);
    r.ctx = &zz;
    r.hook = sleep_once;
    CHECK_RC(rlock_mutex_lock(y), RLOCK_OK);
    CHECK_RC(rlock_mutex_lock(x), RLOCK_OK);
    RT_WAIT_UNTIL(atomic_load(&zz.slept_async) == 1, 5000);
    /* The callback sleeps for 2 s from now: y must stay held. */
    for (i = 0; i < 10; i++) {
        rt_sleep_ms(220);
        CHECK_RC(rlock_mutex_lease_left(y, &left), RLOCK_OK);
        CHECK_RC(rlock_mutex_trylock(oy), RLOCK_EBUSY);
    }
    /* Now a callback on this thread sleeps. */
    t0 = rt_now_ms();
    CHECK_RC(rlock_mutex_lock(z), RLOCK_OK);
    CHECK_INT(rt_now_ms() - t0, >=, 1900);
    CHECK_RC(rlock_mutex_lease_left(y, &left), RLOCK_OK);
    CHECK_RC(rlock_mutex_trylock(oy), RLOCK_EBUSY);
    CHECK_INT(rec_count(&r, RLOCK_EV_LOST, NULL), ==, 0);
    CHECK_RC(rlock_mutex_unlock(z), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(x), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(y), RLOCK_OK);
    rlock_mutex_free(x);
    rlock_mutex_free(y);
    rlock_mutex_free(z);
    rlock_mutex_free(oy);
    rlock_client_close(other);
    rlock_client_close(c);
    rt_server_stop(s);
}

/* ---- a loss is not held up by another hold's renewal ---------------------
 */

static void note_lost_at(recorder *r, const rlock_event *ev)
{
    atomic_llong *at = r->ctx;

    if (ev->type == RLOCK_EV_LOST && ev->name && strcmp(ev->name, "short") == 0)
        atomic_store(at, (long long)rt_now_ms());
}

/*
 * The server is stopped while the client holds a fixed lease of 1.5 s and
 * a watchdog hold of 7.2 s, which is renewed from 1.2 s on, at the latest
 * in the step that wakes at the fixed lease's end: that step's sweep
 * finds the fixed hold lost, then the renewal waits for its reply up to
 * the shortest lease (1.5 s). The LOST event the sweep found is delivered
 * at once, not after that stalled round trip.
 */
TEST(a_loss_is_delivered_before_another_holds_stalled_renewal)
{
    rt_server *s = rt_server_start(NULL);
    recorder r;
    rlock_client *c = recorded(rt_server_url(s), 7200, &r);
    rlock_mutex_opts fixed;
    rlock_mutex *lng, *shrt;
    atomic_llong lost_at;
    int64_t left, end;

    atomic_store(&lost_at, 0);
    r.ctx = &lost_at;
    r.hook = note_lost_at;
    rlock_mutex_opts_init(&fixed);
    fixed.lease_ms = 1500;
    lng = rt_mutex(c, "long", NULL);
    shrt = rt_mutex(c, "short", &fixed);
    CHECK_RC(rlock_mutex_lock(lng), RLOCK_OK);
    CHECK_RC(rlock_mutex_lock(shrt), RLOCK_OK);
    CHECK_RC(rlock_mutex_lease_left(shrt, &left), RLOCK_OK);
    end = rt_now_ms() + left;
    rt_server_pause(s);
    RT_WAIT_UNTIL(atomic_load(&lost_at) != 0, 5000);
    rt_server_resume(s);
    printf("LOST delivered %lld ms after the lease end\n",
           (long long)(atomic_load(&lost_at) - end));
    CHECK_INT(atomic_load(&lost_at) - end, <, 500);
    CHECK_RC(rlock_mutex_unlock(shrt), RLOCK_ELOST);
    rlock_mutex_unlock(lng); /* renewed late or lost: let go either way */
    rlock_mutex_free(lng);
    rlock_mutex_free(shrt);
    rlock_client_close(c);
    rt_server_stop(s);
}

/* ---- the log callback ---------------------------------------------------- */

typedef struct logbook {
    pthread_mutex_t mu;
    int n;
    int level[64];
    char msg[64][600];
} logbook;

static void log_line(int level, const char *msg, void *arg)
{
    logbook *b = arg;

    pthread_mutex_lock(&b->mu);
    if (b->n < 64) {
        b->level[b->n] = level;
        snprintf(b->msg[b->n], sizeof b->msg[0], "%s", msg);
        b->n++;
    }
    pthread_mutex_unlock(&b->mu);
}

/* The index of the first line containing text, or -1. */
static int log_find(logbook *b, const char *text)
{
    int i, at = -1;

    pthread_mutex_lock(&b->mu);
    for (i = 0; i < b->n && at < 0; i++)
        if (strstr(b->msg[i], text))
            at = i;
    pthread_mutex_unlock(&b->mu);
    return at;
}

TEST(the_log_carries_error_details_and_what_the_background_finds)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *a = rt_client(rt_server_url(s), NULL);
    rlock_client *c = client_with(rt_server_url(s), 300, 0);
    rlock_mutex *ma = rt_mutex(a, "lg\001x", NULL);
    rlock_mutex *m = rt_mutex(c, "lg\001x", NULL),
                *g = rt_mutex(c, "lg2", NULL);
    logbook b;
    int i;

    memset(&b, 0, sizeof b);
    pthread_mutex_init(&b.mu, NULL);
    CHECK_RC(rlock_client_set_log_cb(c, RLOCK_LOG_DEBUG, log_line, &b),
             RLOCK_OK);
    CHECK_RC(rlock_mutex_lock(ma), RLOCK_OK);
    CHECK_RC(rlock_mutex_trylock(m), RLOCK_EBUSY);
    i = log_find(&b, rlock_client_errmsg(c));
    CHECK(i >= 0);
    CHECK_INT(b.level[i], ==, RLOCK_LOG_DEBUG);
    CHECK_RC(rlock_mutex_timedlock(m, -1), RLOCK_EINVAL);
    i = log_find(&b, "wait_ms must be");
    CHECK(i >= 0);
    CHECK_INT(b.level[i], ==, RLOCK_LOG_WARN);
    /* Events as lines, names escaped. */
    CHECK_RC(rlock_mutex_lock(g), RLOCK_OK);
    CHECK(log_find(&b, "acquired \"lg2\" token=") >= 0);
    CHECK_RC(rlock_mutex_unlock(ma), RLOCK_OK);
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    CHECK(log_find(&b, "acquired \"lg\\x01x\"") >= 0);
    /* Only WARN and above from now: a loss, found by the background. */
    CHECK_RC(rlock_client_set_log_cb(c, RLOCK_LOG_WARN, log_line, &b),
             RLOCK_OK);
    b.n = 0;
    CHECK_RC(rlock_mutex_trylock(g), RLOCK_OK); /* a re-entry: no line */
    CHECK_INT(rt_cmd_int(s, "DEL {rlock:lg2}"), ==, 1);
    RT_WAIT_UNTIL(log_find(&b, "lost \"lg2\"") >= 0, 5000);
    i = log_find(&b, "lost \"lg2\"");
    CHECK_INT(b.level[i], ==, RLOCK_LOG_WARN);
    CHECK(strstr(b.msg[i], "cause=gone") != NULL);
    CHECK_INT(log_find(&b, "acquired"), ==, -1);
    /* Removed: nothing more. */
    CHECK_RC(rlock_client_set_log_cb(c, 0, NULL, NULL), RLOCK_OK);
    i = b.n;
    CHECK_RC(rlock_mutex_timedlock(m, -1), RLOCK_EINVAL);
    CHECK_INT(b.n, ==, i);
    rlock_mutex_free(ma);
    rlock_mutex_free(m);
    rlock_mutex_free(g);
    rlock_client_close(a);
    rlock_client_close(c);
    rt_server_stop(s);
}

/* ---- the counters after a known sequence --------------------------------- */

TEST(the_counters_are_exact_after_a_known_sequence)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *a = rt_client(rt_server_url(s), NULL);
    rlock_client *c = rt_client(rt_server_url(s), NULL);
    rlock_mutex *m = rt_mutex(c, "cnt", NULL), *ma = rt_mutex(a, "cnt", NULL);
    rlock_mutex_opts fixed;
    rlock_mutex *f;
    rlock_stats st = RLOCK_STATS_INIT;
    struct {
        rlock_stats st;
        char more[64]; /* a newer header's fields */
    } big;
    uint64_t sum;
    int i;

    rlock_mutex_opts_init(&fixed);
    fixed.lease_ms = 5000;
    f = rt_mutex(c, "cnt-fixed", &fixed);
    for (i = 0; i < 5; i++) {
        CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
        CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    }
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK); /* re-entry */
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    rt_sleep_ms(30);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    CHECK_RC(rlock_mutex_lock(ma), RLOCK_OK);
    CHECK_RC(rlock_mutex_trylock(m), RLOCK_EBUSY);
    CHECK_RC(rlock_mutex_timedlock(m, 50), RLOCK_ETIMEDOUT);
    CHECK_RC(rlock_mutex_unlock(ma), RLOCK_OK);
    CHECK_RC(rlock_mutex_trylock(f), RLOCK_OK);
    CHECK_RC(rlock_mutex_extend(f, 6000), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_ENOTOWNER); /* not counted */
    CHECK_RC(rlock_client_stats(c, &st), RLOCK_OK);
    CHECK_INT(st.size, ==, sizeof st);
    CHECK_INT(st.acquisitions, ==, 7);
    CHECK_INT(st.reentries, ==, 1);
    CHECK_INT(st.contended, ==, 0);
    CHECK_INT(st.releases, ==, 6);
    CHECK_INT(st.failures, ==, 2);
    CHECK_INT(st.failures_by_code[-RLOCK_EBUSY], ==, 1);
    CHECK_INT(st.failures_by_code[-RLOCK_ETIMEDOUT], ==, 1);
    CHECK_INT(st.wait_timeouts, ==, 1);
    CHECK_INT(st.undos, ==, 1); /* the timed-out wait's place */
    CHECK_INT(st.extensions, ==, 1);
    CHECK_INT(st.losses, ==, 0);
    CHECK_INT(st.conn_errors, ==, 0);
    CHECK_INT(st.reconnects, ==, 0);
    CHECK_INT(st.held, ==, 1);
    CHECK_INT(st.wait.count, ==, 7);
    CHECK_INT(st.hold.count, ==, 6);
    CHECK_INT(st.hold.sum_us, >=, 30000);
    for (sum = 0, i = 0; i < RLOCK_STATS_BUCKETS; i++)
        sum += st.hold.bucket[i];
    CHECK_INT(sum, ==, 6);
    /* The one held 30 ms and more is above the 25 ms bound. */
    for (sum = 0, i = 5; i < RLOCK_STATS_BUCKETS; i++)
        sum += st.hold.bucket[i];
    CHECK_INT(sum, ==, 1);
    /* A larger struct: ours filled, the rest zeroed, size says ours. */
    memset(&big, 0xab, sizeof big);
    big.st.size = sizeof big;
    CHECK_RC(rlock_client_stats(c, &big.st), RLOCK_OK);
    CHECK_INT(big.st.size, ==, sizeof(rlock_stats));
    CHECK_INT(big.st.acquisitions, ==, 7);
    for (i = 0; i < (int)sizeof big.more; i++)
        CHECK_INT(big.more[i], ==, 0);
    CHECK_RC(rlock_mutex_unlock(f), RLOCK_OK);
    rlock_mutex_free(m);
    rlock_mutex_free(ma);
    rlock_mutex_free(f);
    rlock_client_close(a);
    rlock_client_close(c);
    rt_server_stop(s);
}

/* ---- the Prometheus text ------------------------------------------------- */

/* Runs prometheus_client's parser on path (tests/metrics/parse.py): 0 if
 * it read the text and every figure it was told to expect. */
static int parse_with_prometheus_client(const char *path, const char *expect)
{
    char cmd[2048];

    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 %s/tests/metrics/parse.py %s %s",
             RLOCK_SOURCE_DIR, path, expect);
    return system(cmd);
}

TEST(metrics_text_is_prometheus_and_written_as_snprintf_does)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client_opts o;
    rlock_client *c;
    rlock_mutex *m, *ma;
    rlock_client *a = rt_client(rt_server_url(s), NULL);
    char path[] = "/tmp/rlock-metrics-XXXXXX", expect[512], *buf, small[64];
    long need, again;
    FILE *f;
    int fd, i;

    rlock_client_opts_init(&o);
    o.key_prefix = "we\"ird\\pre\nfix"; /* escaped in the labels */
    c = rt_client(rt_server_url(s), &o);
    m = rt_mutex(c, "pm", NULL);
    ma = rt_mutex(a, "pm", NULL);
    for (i = 0; i < 3; i++) {
        CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
        CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    }
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    /* rlock_client_metrics_text(c, NULL, 0): the length, as snprintf. */
    need = rlock_client_metrics_text(c, NULL, 0);
    CHECK(need > 1000);
    buf = malloc((size_t)need + 1 + 16);
    CHECK(buf != NULL);
    /* Short buffers: cut, NUL-terminated, nothing written past len. */
    for (i = 0; i <= 40; i += 8) {
        memset(small, 'Z', sizeof small);
        CHECK_INT(rlock_client_metrics_text(c, small, (size_t)i), ==, need);
        if (i > 0)
            CHECK_INT(strlen(small), ==, i - 1);
        CHECK(small[i] == 'Z');
    }
    memset(buf, 'Z', (size_t)need + 1 + 16);
    CHECK_INT(rlock_client_metrics_text(c, buf, (size_t)need), ==, need);
    CHECK_INT(strlen(buf), ==, need - 1);
    CHECK(buf[need] == 'Z');
    again = rlock_client_metrics_text(c, buf, (size_t)need + 1);
    CHECK_INT(again, ==, need);
    CHECK_INT(strlen(buf), ==, need);
    CHECK(buf[need + 1] == 'Z');
    CHECK(strstr(buf, "# TYPE rlock_acquisitions_total counter\n") != NULL);
    CHECK(strstr(buf, "prefix=\"we\\\"ird\\\\pre\\nfix\"") != NULL);
    CHECK_INT(rlock_client_metrics_text(NULL, buf, 10), ==, RLOCK_EINVAL);
    CHECK_INT(rlock_client_metrics_text(c, NULL, 10), ==, RLOCK_EINVAL);
    fd = mkstemp(path);
    CHECK(fd >= 0);
    f = fdopen(fd, "w");
    fputs(buf, f);
    fclose(f);
    /* What the parser must find: acquisitions 4, releases 3, one hold,
     * 4 waits, 3 hold times. */
    snprintf(expect, sizeof expect,
             "rlock_acquisitions_total=4 rlock_releases_total=3 "
             "rlock_holds=1 rlock_wait_seconds_count=4 "
             "rlock_hold_seconds_count=3 "
             "rlock_acquire_failures_total{code=EBUSY}=0");
    CHECK_INT(parse_with_prometheus_client(path, expect), ==, 0);
    unlink(path);
    free(buf);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    rlock_mutex_free(m);
    rlock_mutex_free(ma);
    rlock_client_close(a);
    rlock_client_close(c);
    rt_server_stop(s);
}
