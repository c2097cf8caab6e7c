/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Sentinel (redis-sentinel://): one master, two replicas and three
 * sentinels, all real processes. Clients find the master through the
 * sentinels and follow it through a failover (SENTINEL FAILOVER, and a
 * SIGKILLed master during contention); a hold whose key is not on the new
 * master is reported lost.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/aloop.h"
#include "harness/fake_server.h"
#include "harness/test.h"

static rt_server *servers[3]; /* the master first, then two replicas */
static rt_server *sentinels[3];
static char url[256];

static long long count_of(rt_server *s, const char *what)
{
    redisReply *r = rt_cmd(s, "SENTINEL %s mymaster", what);
    long long n = r->type == REDIS_REPLY_ARRAY ? (long long)r->elements : -1;

    freeReplyObject(r);
    return n;
}

/* The port the sentinel names as the master's, 0 if none. */
static int master_port(rt_server *sentinel)
{
    redisReply *r =
        rt_cmd(sentinel, "SENTINEL get-master-addr-by-name mymaster");
    int port = 0;

    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2)
        port = atoi(r->element[1]->str);
    freeReplyObject(r);
    return port;
}

static rt_server *server_on(int port)
{
    int i;

    for (i = 0; i < 3; i++)
        if (rt_server_port(servers[i]) == port)
            return servers[i];
    rt_fail(__FILE__, __LINE__, "no server on port %d", port);
    return NULL;
}

static const char *start_deployment(void)
{
    char monitor[64];
    rt_server_opts o;
    size_t len;
    int i;

    servers[0] = rt_server_start(NULL);
    servers[1] = rt_replica_start(servers[0], NULL, NULL);
    servers[2] = rt_replica_start(servers[0], NULL, NULL);
    snprintf(monitor, sizeof monitor, "mymaster 127.0.0.1 %d 2",
             rt_server_port(servers[0]));
    memset(&o, 0, sizeof o);
    o.sentinel_monitor = monitor;
    len = (size_t)snprintf(url, sizeof url, "redis-sentinel://");
    for (i = 0; i < 3; i++) {
        sentinels[i] = rt_server_start(&o);
        len += (size_t)snprintf(url + len, sizeof url - len, "%s127.0.0.1:%d",
                                i ? "," : "", rt_server_port(sentinels[i]));
    }
    snprintf(url + len, sizeof url - len, "/mymaster");
    /* Each sentinel knows both replicas and the two other sentinels. */
    for (i = 0; i < 3; i++)
        RT_WAIT_UNTIL(count_of(sentinels[i], "replicas") == 2 &&
                          count_of(sentinels[i], "sentinels") == 2,
                      20000);
    return url;
}

/* Waits until every sentinel names a master other than old_port and it
 * says it is one; returns it. */
static rt_server *wait_new_master(int old_port)
{
    rt_server *m;
    int i;

    for (i = 0; i < 3; i++)
        RT_WAIT_UNTIL(master_port(sentinels[i]) != 0 &&
                          master_port(sentinels[i]) != old_port,
                      30000);
    m = server_on(master_port(sentinels[0]));
    RT_WAIT_UNTIL(rt_info_says(m, "replication", "role:master"), 10000);
    return m;
}

static void stop_deployment(void)
{
    int i;

    for (i = 0; i < 3; i++) {
        rt_server_stop(sentinels[i]);
        rt_server_stop(servers[i]);
    }
}

/* This thread takes m ("later"), another thread of the same client waits
 * for it,
 * and the release wakes the waiter by a message from master (not by its
 * own timer: a place is refreshed every 1.7 s, a lease lasts 30 s). */
static void hand_over(rlock_mutex *m, rt_server *master)
{
    rt_locker l;
    int64_t t0;

    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    rt_locker_start(&l, m, 1);
    RT_WAIT_UNTIL(rt_cmd_int(master, "LLEN {rlock:later}:queue") == 1, 10000);
    t0 = rt_now_ms();
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    CHECK_RC(rt_locker_join(&l), RLOCK_OK);
    CHECK_INT(rt_now_ms() - t0, <, 1000);
}

TEST(sentinel_clients_find_the_master_and_follow_a_failover)
{
    rlock_client *c;
    rlock_mutex_opts mo;
    rlock_mutex *kept, *gone, *later;
    rt_server *m2;
    rlock_server_info info;

    start_deployment();
    /* The default 30 s lease: the old master keeps taking the renewals
     * until Sentinel demotes it (seconds), and the new master's copy of a
     * hold must outlive that window. */
    c = rt_client(url, NULL);
    rlock_mutex_opts_init(&mo);
    mo.on_lost = rt_count_lost;
    kept = rt_mutex(c, "kept", &mo);
    gone = rt_mutex(c, "gone", &mo);
    later = rt_mutex(c, "later", NULL);
    atomic_store(&rt_lost_calls, 0);
    CHECK_RC(rlock_client_ping(c, &info), RLOCK_OK);
    {
        /* The tightest bound on replies does not refuse the sentinels'
         * answers (SENTINEL MASTER's fields are over 1 KiB), which are
         * the library's own questions: the client opens and locks. */
        rlock_client_opts tight;
        rlock_client *t;
        rlock_mutex *tm;
        rlock_client_opts_init(&tight);
        tight.max_reply_bytes = 1024;
        t = rt_client(url, &tight);
        tm = rt_mutex(t, "tight", NULL);
        CHECK_RC(rlock_mutex_lock(tm), RLOCK_OK);
        CHECK_RC(rlock_mutex_unlock(tm), RLOCK_OK);
        rlock_mutex_free(tm);
        rlock_client_close(t);
    }
    CHECK_RC(rlock_mutex_lock(kept), RLOCK_OK);
    CHECK_RC(rlock_mutex_lock(gone), RLOCK_OK);
    CHECK_INT(rt_cmd_int(servers[0], "EXISTS {rlock:kept}"), ==, 1);
    /* Both keys reached the replicas before the failover. */
    RT_WAIT_UNTIL(rt_cmd_int(servers[1], "EXISTS {rlock:gone}") == 1 &&
                      rt_cmd_int(servers[2], "EXISTS {rlock:gone}") == 1,
                  5000);
    /* A hand-over now, so that the client is subscribed on the old
     * master when it fails over. */
    hand_over(later, servers[0]);
    freeReplyObject(rt_cmd(sentinels[0], "SENTINEL FAILOVER mymaster"));
    m2 = wait_new_master(rt_server_port(servers[0]));
    /* Until Sentinel turns the old master into a replica (which closes
     * its clients' connections), it still takes writes: Sentinel's own
     * window, in which clients that have not moved keep using it. */
    RT_WAIT_UNTIL(rt_info_says(servers[0], "replication", "role:slave"), 30000);
    /* Make one hold a write that never reached the new master. */
    rt_cmd_int(m2, "DEL {rlock:gone}");
    /* The hold that is there is kept and renewed there; the other one is
     * reported lost at the next renewal. */
    RT_WAIT_UNTIL(atomic_load(&rt_lost_calls) == 1, 30000);
    rt_sleep_ms(200);
    CHECK_INT(atomic_load(&rt_lost_calls), ==, 1);
    CHECK_INT(rt_cmd_int(m2, "EXISTS {rlock:kept}"), ==, 1);
    CHECK_RC(rlock_mutex_unlock(gone), RLOCK_ELOST);
    RT_WAIT_UNTIL(rlock_mutex_trylock(later) == RLOCK_OK, 10000);
    CHECK_INT(rt_cmd_int(m2, "EXISTS {rlock:later}"), ==, 1);
    CHECK_RC(rlock_mutex_unlock(later), RLOCK_OK);
    /* Waiters are woken by the new master's messages: the client
     * subscribed again there. */
    hand_over(later, m2);
    CHECK_RC(rlock_mutex_unlock(kept), RLOCK_OK);
    CHECK_INT(rt_cmd_int(m2, "EXISTS {rlock:kept}"), ==, 0);
    {
        /* The failover is counted (RLOCK_EV_FAILOVER), the first address
         * the sentinels named at open is not. */
        rlock_stats st = RLOCK_STATS_INIT;
        CHECK_RC(rlock_client_stats(c, &st), RLOCK_OK);
        CHECK_INT(st.failovers, ==, 1);
    }
    rlock_mutex_free(kept);
    rlock_mutex_free(gone);
    rlock_mutex_free(later);
    rlock_client_close(c);
    stop_deployment();
}

static void kill_the_master(rt_check *chk, void *arg)
{
    int64_t until = rt_now_ms() + 20000;

    (void)arg;
    while (rt_check_holds(chk) < 40 && rt_now_ms() < until)
        rt_sleep_ms(5);
    rt_server_kill(servers[0]);
    wait_new_master(rt_server_port(servers[0]));
}

TEST(sentinel_failover_after_a_killed_master_breaks_no_exclusion)
{
    rt_check_opts o;

    rt_check_opts_init(&o);
    o.url = start_deployment();
    o.name = "killed";
    o.workers = 4;
    o.iterations = 40;
    o.client.watchdog_lease_ms = 1500;
    /* Every acquisition waits for a replica: the promoted one (the most
     * up to date) then has every lock and fencing token handed out. */
    o.client.sync_replicas = 1;
    o.client.command_timeout_ms = 1000;
    o.client.connect_timeout_ms = 500;
    o.deadline_ms = 90000;
    o.during = kill_the_master;
    rt_checker_completes(&o);
    stop_deployment();
}

/* ---- a stalled master (SIGSTOP) ---------------------------------------- */

/* A waiter of its own client: lock (wait_ms < 0) or timedlock(wait_ms).
 * Holding, it checks that nobody else of the test holds, keeps the lock
 * a moment and lets go. */
typedef struct stall_waiter {
    rlock_mutex *m;
    int64_t wait_ms;
    int rc;
    int64_t took_ms;     /* from the start of the call to its return */
    int64_t got_at;      /* when it held (rt_now_ms), 0 if it did not */
    int64_t released_at; /* when it let go */
    atomic_int phase;    /* 0 waiting, 1 holding, 2 releasing, 3 done */
    atomic_int done;
    pthread_t thread;
} stall_waiter;

static atomic_int stall_holders;
static atomic_int stall_overlaps;

/* What the test's clients logged (every level), each line with the
 * milliseconds since the test began and which client said it: printed
 * if the test fails, with where each waiter got to. */
static pthread_mutex_t stall_log_mu = PTHREAD_MUTEX_INITIALIZER;
static char stall_log[96 * 1024];
static size_t stall_log_len;
static int64_t stall_t0;

static void stall_note(const char *who, const char *msg)
{
    pthread_mutex_lock(&stall_log_mu);
    if (stall_log_len < sizeof stall_log)
        stall_log_len += (size_t)snprintf(
            stall_log + stall_log_len, sizeof stall_log - stall_log_len,
            "%7lld ms %s: %s\n", (long long)(rt_now_ms() - stall_t0), who, msg);
    if (stall_log_len > sizeof stall_log)
        stall_log_len = sizeof stall_log;
    pthread_mutex_unlock(&stall_log_mu);
}

static void stall_log_cb(int level, const char *msg, void *arg)
{
    (void)level;
    stall_note(arg, msg);
}

/* Waits at most ms for both waiters; if they do not finish, says where
 * each got to and what the clients logged, and fails. */
static void stall_wait_both(stall_waiter *w, int64_t ms, int line)
{
    static const char *phases[] = {"still in its lock call", "holding",
                                   "in its unlock call", "done"};
    int64_t until = rt_now_ms() + ms;
    int i;

    while (!atomic_load(&w[0].done) || !atomic_load(&w[1].done)) {
        if (rt_now_ms() <= until) {
            rt_sleep_ms(2);
            continue;
        }
        pthread_mutex_lock(&stall_log_mu);
        fprintf(stderr, "--- the clients' log:\n%.*s---\n", (int)stall_log_len,
                stall_log);
        pthread_mutex_unlock(&stall_log_mu);
        for (i = 0; i < 2; i++) {
            /* Only what the waiter wrote before its phase is read. */
            int phase = atomic_load(&w[i].phase);
            fprintf(stderr, "waiter %d (%s): %s", i,
                    w[i].wait_ms < 0 ? "lock" : "timedlock", phases[phase]);
            if (phase == 1 || phase == 2)
                fprintf(stderr, ", held %lld ms in, after %lld ms of wait",
                        (long long)(w[i].got_at - stall_t0),
                        (long long)w[i].took_ms);
            if (phase == 3)
                fprintf(stderr, ", returned %s", rlock_strerror(w[i].rc));
            fprintf(stderr, "\n");
        }
        rt_fail(__FILE__, line,
                "the waiters did not both finish within %lld ms",
                (long long)ms);
    }
}

static void *stall_waiter_main(void *p)
{
    stall_waiter *w = p;
    int64_t t0 = rt_now_ms();

    w->rc = w->wait_ms < 0 ? rlock_mutex_lock(w->m)
                           : rlock_mutex_timedlock(w->m, w->wait_ms);
    w->took_ms = rt_now_ms() - t0;
    if (w->rc != RLOCK_OK) {
        atomic_store(&w->phase, 3);
        atomic_store(&w->done, 1);
        return NULL;
    }
    w->got_at = rt_now_ms();
    atomic_store(&w->phase, 1);
    if (atomic_fetch_add(&stall_holders, 1) != 0)
        atomic_fetch_add(&stall_overlaps, 1);
    rt_sleep_ms(300);
    atomic_fetch_sub(&stall_holders, 1);
    w->released_at = rt_now_ms();
    atomic_store(&w->phase, 2);
    w->rc = rlock_mutex_unlock(w->m);
    atomic_store(&w->phase, 3);
    atomic_store(&w->done, 1);
    return NULL;
}

/*
 * Issue 33, item 10. The master is stopped (SIGSTOP, not killed: its
 * connections stay open and silent) while one client holds a lock there
 * and two others wait for it, one without a bound (lock) and one with
 * timedlock(25000). The holder's lease ends 1.5 s after it took the lock,
 * so the waiters wake and try again while the master is stopped and
 * before Sentinel can have promoted a replica: the stopped master never
 * answers those attempts. That makes the waiters ask the sentinels again,
 * and their waits go on, on the new master once there is one. Both get
 * the lock, one after the other, and neither returns RLOCK_ENOREPLY. The
 * second is handed the lock by a message of the new master well within
 * 2.5 s of the first's release (its keep-alive is 5 s away, the first
 * holder's lease 30 s): the waiters subscribed again there. Each waiter's
 * client has one connection, which the stopped master keeps owing an
 * answer (an undo waits behind it): it does not keep the client from the
 * new master.
 */
TEST(sentinel_waits_outlive_a_stopped_master)
{
    rlock_client *h, *a, *b;
    rlock_client_opts wo;
    rlock_mutex_opts ho;
    rlock_mutex *held;
    stall_waiter w[2];
    int i;

    start_deployment();
    stall_t0 = rt_now_ms();
    stall_log_len = 0;
    h = rt_client(url, NULL);
    rlock_client_set_log_cb(h, RLOCK_LOG_DEBUG, stall_log_cb, "holder");
    rlock_mutex_opts_init(&ho);
    ho.lease_ms = 1500; /* fixed, and over before the failover */
    held = rt_mutex(h, "stalled", &ho);
    rlock_client_opts_init(&wo);
    wo.waiter_ttl_ms = 15000; /* a keep-alive every 5 s */
    wo.max_connections = 1;
    a = rt_client(url, &wo);
    b = rt_client(url, &wo);
    rlock_client_set_log_cb(a, RLOCK_LOG_DEBUG, stall_log_cb, "waiter 0");
    rlock_client_set_log_cb(b, RLOCK_LOG_DEBUG, stall_log_cb, "waiter 1");
    memset(w, 0, sizeof w);
    w[0].m = rt_mutex(a, "stalled", NULL);
    w[0].wait_ms = -1;
    w[1].m = rt_mutex(b, "stalled", NULL);
    w[1].wait_ms = 25000;
    atomic_store(&stall_holders, 0);
    atomic_store(&stall_overlaps, 0);
    CHECK_RC(rlock_mutex_lock(held), RLOCK_OK);
    RT_WAIT_UNTIL(rt_cmd_int(servers[1], "EXISTS {rlock:stalled}") == 1 &&
                      rt_cmd_int(servers[2], "EXISTS {rlock:stalled}") == 1,
                  1000);
    for (i = 0; i < 2; i++)
        CHECK(pthread_create(&w[i].thread, NULL, stall_waiter_main, &w[i]) ==
              0);
    RT_WAIT_UNTIL(rt_cmd_int(servers[0], "LLEN {rlock:stalled}:queue") == 2,
                  10000);
    rt_server_pause(servers[0]);
    stall_note("test", "master stopped");
    CHECK(w[0].got_at == 0 && w[1].got_at == 0);
    wait_new_master(rt_server_port(servers[0]));
    stall_note("test", "the sentinels name a new master");
    stall_wait_both(w, 40000, __LINE__);
    for (i = 0; i < 2; i++)
        pthread_join(w[i].thread, NULL);
    for (i = 0; i < 2; i++) {
        printf("waiter %d (%s): %s after %lld ms\n", i,
               w[i].wait_ms < 0 ? "lock" : "timedlock 25000",
               rlock_strerror(w[i].rc), (long long)w[i].took_ms);
        CHECK_RC(w[i].rc, RLOCK_OK);
        CHECK(w[i].got_at > 0);
    }
    CHECK_INT(atomic_load(&stall_overlaps), ==, 0);
    CHECK_INT(w[1].took_ms, <, 25000);
    {
        stall_waiter *first = w[0].got_at < w[1].got_at ? &w[0] : &w[1];
        stall_waiter *second = first == &w[0] ? &w[1] : &w[0];
        CHECK_INT(second->got_at, >=, first->released_at);
        /* A message, not the keep-alive 5 s away: 2.5 s allows a TSan
         * build beside another failover test (1.3 s was seen there). */
        CHECK_INT(second->got_at - first->released_at, <, 2500);
    }
    rt_server_resume(servers[0]);
    for (i = 0; i < 2; i++)
        rlock_mutex_free(w[i].m);
    rlock_mutex_free(held);
    rlock_client_close(a);
    rlock_client_close(b);
    rlock_client_close(h);
    stop_deployment();
}

/* ---- a move while threads wait for the pool ---------------------------- */

#define MOVERS 8        /* clients */
#define MOVER_THREADS 4 /* of each */

/* A thread of a client (max_connections = 1) tries its own lock in a
 * loop, each try let go at once, until told to stop; what the last try
 * returned and when the first success after movers_go_at came. */
typedef struct mover {
    rlock_client *c;
    rlock_mutex *m;
    atomic_int stop;
    atomic_llong ok_after; /* rt_now_ms() of a success once go_at is set */
    atomic_int last_rc;
    char last_err[256]; /* its detail (written by the thread only) */
    pthread_t thread;
} mover;

static atomic_llong movers_go_at;

static void *mover_main(void *p)
{
    mover *mv = p;

    while (!atomic_load(&mv->stop)) {
        int rc = rlock_mutex_trylock(mv->m);
        if (rc != RLOCK_OK)
            snprintf(mv->last_err, sizeof mv->last_err, "%s",
                     rlock_client_errmsg(mv->c));
        atomic_store(&mv->last_rc, rc);
        if (rc == RLOCK_OK) {
            long long go = atomic_load(&movers_go_at), none = 0;
            rlock_mutex_unlock(mv->m);
            if (go != 0)
                atomic_compare_exchange_strong(&mv->ok_after, &none,
                                               (long long)rt_now_ms());
        }
        rt_sleep_ms(5);
    }
    return NULL;
}

/*
 * The node's move to the new master is one step: a thread that waited
 * for the pool's only connection (owed by a request the stopped master
 * never answered) and is woken by the move takes a connection to the new
 * master, never one to the old address counted as the new master's.
 * That one, owing for ever with an undo behind it, held the only slot
 * for good: every later request of the client failed, and a wait with no
 * bound never ended (sentinel_waits_outlive_a_stopped_master, seen in
 * CI). Several clients, four threads each, trying all through the
 * failover, so that some thread waits for the pool when another moves
 * the node: each client takes its locks again soon after.
 */
TEST(sentinel_threads_waiting_for_the_pool_follow_a_move)
{
    rlock_client_opts o;
    rlock_client *c[MOVERS];
    mover mv[MOVERS][MOVER_THREADS];
    char name[32];
    int i, k, bad = 0;

    start_deployment();
    rlock_client_opts_init(&o);
    o.max_connections = 1;
    atomic_store(&movers_go_at, 0);
    memset(mv, 0, sizeof mv);
    for (i = 0; i < MOVERS; i++) {
        c[i] = rt_client(url, &o);
        for (k = 0; k < MOVER_THREADS; k++) {
            snprintf(name, sizeof name, "move-%d-%d", i, k);
            mv[i][k].c = c[i];
            mv[i][k].m = rt_mutex(c[i], name, NULL);
            CHECK_RC(rlock_mutex_trylock(mv[i][k].m), RLOCK_OK);
            CHECK_RC(rlock_mutex_unlock(mv[i][k].m), RLOCK_OK);
        }
    }
    rt_server_pause(servers[0]);
    for (i = 0; i < MOVERS; i++)
        for (k = 0; k < MOVER_THREADS; k++)
            CHECK(pthread_create(&mv[i][k].thread, NULL, mover_main,
                                 &mv[i][k]) == 0);
    wait_new_master(rt_server_port(servers[0]));
    atomic_store(&movers_go_at, (long long)rt_now_ms());
    /* A client's requests reach the new master within a few tries (a
     * command timeout each, at most) once the sentinels name it. */
    {
        int64_t until = rt_now_ms() + 20000;
        int all;
        do {
            rt_sleep_ms(20);
            all = 1;
            for (i = 0; i < MOVERS; i++)
                for (k = 0; k < MOVER_THREADS; k++)
                    all &= atomic_load(&mv[i][k].ok_after) != 0;
        } while (!all && rt_now_ms() < until);
    }
    for (i = 0; i < MOVERS; i++)
        for (k = 0; k < MOVER_THREADS; k++)
            atomic_store(&mv[i][k].stop, 1);
    for (i = 0; i < MOVERS; i++)
        for (k = 0; k < MOVER_THREADS; k++)
            pthread_join(mv[i][k].thread, NULL);
    for (i = 0; i < MOVERS; i++)
        for (k = 0; k < MOVER_THREADS; k++) {
            long long at = atomic_load(&mv[i][k].ok_after);
            if (at == 0) {
                int rc = atomic_load(&mv[i][k].last_rc);
                printf("client %d thread %d: no lock since the failover; "
                       "last try %s: %s\n",
                       i, k, rlock_strerror(rc), mv[i][k].last_err);
                bad++;
            } else {
                printf("client %d thread %d: locked %lld ms after the "
                       "failover\n",
                       i, k, at - atomic_load(&movers_go_at));
            }
        }
    CHECK_INT(bad, ==, 0);
    rt_server_resume(servers[0]);
    for (i = 0; i < MOVERS; i++) {
        for (k = 0; k < MOVER_THREADS; k++)
            rlock_mutex_free(mv[i][k].m);
        rlock_client_close(c[i]);
    }
    stop_deployment();
}

/*
 * A call that spent its whole deadline waiting for the master's one
 * connection (the stalled master owes it a reply) says so. It used to ask
 * the sentinels again with no time left, and reported that none of them
 * had named the master in time: true, and no help to whoever reads it.
 * The sentinels cannot have failed the master over yet (it is down after
 * 1 s; both calls end in 600 ms).
 */
TEST(sentinel_a_call_that_waited_out_its_deadline_for_a_connection_says_so)
{
    rlock_client_opts o;
    rlock_client *c;
    rlock_mutex *m;
    const char *msg;
    int64_t t0, took;

    start_deployment();
    rlock_client_opts_init(&o);
    o.max_connections = 1;
    o.command_timeout_ms = 300;
    c = rt_client(url, &o);
    m = rt_mutex(c, "owed", NULL);
    CHECK_RC(rlock_mutex_trylock(m), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    rt_server_pause(servers[0]);
    /* Its one connection now owes the answer. */
    CHECK_RC(rlock_mutex_trylock(m), RLOCK_ENOREPLY);
    t0 = rt_now_ms();
    CHECK_RC(rlock_mutex_trylock(m), RLOCK_ENOREPLY);
    took = rt_now_ms() - t0;
    msg = rlock_client_errmsg(c);
    printf("second call: %lld ms: %s\n", (long long)took, msg);
    CHECK(strstr(msg, "still wait for earlier replies") != NULL);
    CHECK(strstr(msg, "no sentinel") == NULL);
    CHECK_INT(took, <, 300 + 1500);
    rt_server_resume(servers[0]);
    rlock_mutex_free(m);
    rlock_client_close(c);
    stop_deployment();
}

/*
 * Issue 33, item 10. A client that was idle while its master stalled and
 * Sentinel promoted a replica: its first call does not spend a whole
 * command timeout on the pooled connection to the stopped master (which
 * would answer nothing) before asking the sentinels. A master the client
 * has not heard from for half of the sentinels' down-after period is
 * asked about first; with no sentinel left, it is used as it was.
 */
TEST(sentinel_first_call_after_a_failover_asks_the_sentinels_first)
{
    rlock_client_opts o;
    rlock_client *c;
    rlock_mutex *m;
    rt_server *m2;
    int64_t t0, took;
    int i, rc;

    start_deployment();
    rlock_client_opts_init(&o);
    o.command_timeout_ms = 3000;
    c = rt_client(url, &o);
    m = rt_mutex(c, "first", NULL);
    CHECK_RC(rlock_mutex_trylock(m), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    rt_server_pause(servers[0]);
    m2 = wait_new_master(rt_server_port(servers[0]));
    t0 = rt_now_ms();
    rc = rlock_mutex_trylock(m);
    took = rt_now_ms() - t0;
    printf("first trylock after the failover: %s in %lld ms\n",
           rlock_strerror(rc), (long long)took);
    CHECK_RC(rc, RLOCK_OK);
    CHECK_INT(took, <, 1500);
    CHECK_INT(rt_cmd_int(m2, "EXISTS {rlock:first}"), ==, 1);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    /* Asking first is a precaution: with every sentinel gone, a client
     * that was idle still reaches the master it knows. */
    for (i = 0; i < 3; i++)
        rt_server_kill(sentinels[i]);
    rt_sleep_ms(1000);
    t0 = rt_now_ms();
    CHECK_RC(rlock_mutex_trylock(m), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    CHECK_INT(rt_now_ms() - t0, <, 1500);
    rt_server_resume(servers[0]);
    rlock_mutex_free(m);
    rlock_client_close(c);
    stop_deployment();
}

TEST(sentinel_bad_urls_are_refused)
{
    static const char *const bad[] = {
        "redis-sentinel://",
        "redis-sentinel://127.0.0.1:1",
        "redis-sentinel://127.0.0.1:1/",
        "redis-sentinel:///mymaster",
        "redis-sentinel://127.0.0.1:1,,127.0.0.1:2/mymaster",
        "redis-sentinel://127.0.0.1:1/mymaster?db=x",
        "redis-sentinel://127.0.0.1:1/mymaster?foo=1",
        "redis-sentinel://u:p@127.0.0.1:1/mymaster",
        "redis-sentinel://127.0.0.1:99999/mymaster",
        "redis-sentinel://127.0.0.1:1/my/master",
    };

    rt_check_urls_refused(bad, sizeof bad / sizeof bad[0]);
}

static void sentinel_take_away(const char *name, void *arg)
{
    rt_server *m = server_on(master_port(sentinels[0]));

    (void)arg;
    CHECK_INT(rt_cmd_int(m, "DEL {rlock:%s}", name), ==, 1);
}

/* The event-loop API over Sentinel: the master found through the
 * sentinels, waits woken by the master's messages, renewals, tokens and
 * on_lost, all on one loop (harness/aloop.h). */
TEST(async_on_sentinel)
{
    rt_async_deployment("sentinel", start_deployment(), NULL, 1000,
                        sentinel_take_away, NULL);
    stop_deployment();
}

/*
 * A loop never waits for a sentinel. The first sentinel named accepts
 * connections and answers nothing: rlock_async_open returns at once, the
 * first lock asks that sentinel for its connect timeout, then the next,
 * all as exchanges the loop waits for like any other, and no turn of
 * the loop takes long. (Asked inside the request's routing, as before,
 * the open and the first lock each held the loop for the connect
 * timeout.) With no sentinel that answers, the lock fails naming each.
 */
TEST(async_on_sentinel_never_waits_for_a_sentinel)
{
    rt_fake *silent = rt_fake_start(RT_FAKE_SILENT, 1);
    const char *real = start_deployment(), *fport;
    rlock_client_opts o;
    rlock_async *a;
    rlock_async_mutex *m;
    rlock_client *c;
    rlock_mutex *bm;
    char u[320], msg[512];
    rt_aloop p;
    int err, dead = rt_free_port();

    fport = strrchr(rt_fake_url(silent), ':') + 1;
    snprintf(u, sizeof u, "redis-sentinel://127.0.0.1:%s,%s", fport,
             real + strlen("redis-sentinel://"));
    a = rt_async_past_a_silent_node(&p, "sentinel", u, "sent-loop", 600, &m);
    CHECK_INT(rt_cmd_int(servers[0], "EXISTS {rlock:sent-loop}"), ==, 1);
    /* A blocking client on the same URL sees it held. */
    rlock_client_opts_init(&o);
    o.connect_timeout_ms = 600;
    c = rt_client(u, &o);
    bm = rt_mutex(c, "sent-loop", NULL);
    CHECK_RC(rlock_mutex_trylock(bm), RLOCK_EBUSY);
    CHECK_RC(rt_al_unlock(&p, m), RLOCK_OK);
    CHECK_RC(rlock_mutex_trylock(bm), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(bm), RLOCK_OK);
    rlock_mutex_free(bm);
    rlock_client_close(c);
    rlock_async_mutex_free(m);
    rlock_async_close(a);
    CHECK_INT(p.n, ==, 0);

    /* No sentinel answers: the lock fails, naming both, on time. */
    snprintf(u, sizeof u, "redis-sentinel://127.0.0.1:%s,127.0.0.1:%d/mymaster",
             fport, dead);
    err = rt_async_nobody_answers(&p, "sentinel", u, "sent-loop", 600, msg,
                                  sizeof msg);
    CHECK(err == RLOCK_ECONNECT || err == RLOCK_ENOREPLY);
    CHECK(strstr(msg, "no sentinel named the master 'mymaster'") != NULL);
    CHECK(strstr(msg, fport) != NULL);
    snprintf(u, sizeof u, "127.0.0.1:%d", dead);
    CHECK(strstr(msg, u) != NULL);
    rt_fake_stop(silent);
    stop_deployment();
}
