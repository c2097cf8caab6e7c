/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Waiting: woken by the release at once, in arrival order, with no missed
 * wake-ups, and never stranded by a waiter or holder that died.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness/test.h"

static int64_t mono_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Channels with subscribers whose name starts with prefix (each client
 * listens on the lock's wake channel followed by ":<client id>"). */
static long long numsub(rt_server *s, const char *prefix)
{
    redisReply *r = rt_cmd(s, "PUBSUB CHANNELS %s:*", prefix);
    long long n = r->type == REDIS_REPLY_ARRAY ? (long long)r->elements : -1;

    freeReplyObject(r);
    return n;
}

struct child_arg {
    rt_server *s;
    const char *name;
    int index;
    int64_t wait_ms; /* < 0: lock; else timedlock */
    int64_t waiter_ttl_ms;
    int use_pubsub;
};

/* A separate process: take the lock, log (index, time) under it, release. */
static int waiter_child(void *p)
{
    struct child_arg *a = p;
    rlock_client_opts o;
    rlock_client *c;
    rlock_mutex *m;
    redisContext *ctx;
    redisReply *r;
    int err, rc;

    rlock_client_opts_init(&o);
    if (a->waiter_ttl_ms)
        o.waiter_ttl_ms = a->waiter_ttl_ms;
    o.use_pubsub = a->use_pubsub;
    c = rlock_client_open(rt_server_url(a->s), &o, &err);
    if (!c)
        return 30;
    m = rlock_mutex_new(c, a->name, NULL, &err);
    rc = a->wait_ms < 0 ? rlock_mutex_lock(m) : rlock_mutex_timedlock(m, a->wait_ms);
    if (rc == RLOCK_ETIMEDOUT)
        return 3;
    if (rc != RLOCK_OK)
        return 31;
    ctx = redisConnect("127.0.0.1", rt_server_port(a->s));
    r = redisCommand(ctx, "RPUSH log:%s %d:%lld", a->name, a->index,
                     (long long)mono_us());
    freeReplyObject(r);
    redisFree(ctx);
    if (rlock_mutex_unlock(m) != RLOCK_OK)
        return 32;
    rlock_mutex_free(m);
    rlock_client_close(c);
    return 0;
}

/* Entry i of log:NAME as (index, time in us). */
static void log_entry(rt_server *s, const char *name, int i, int *index,
                      int64_t *us)
{
    redisReply *r = rt_cmd(s, "LINDEX log:%s %d", name, i);
    long long t;

    CHECK(r->type == REDIS_REPLY_STRING);
    CHECK(sscanf(r->str, "%d:%lld", index, &t) == 2);
    *us = t;
    freeReplyObject(r);
}

static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int64_t median_wake_us(int use_pubsub)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *c = rt_client(rt_server_url(s), NULL);
    rlock_mutex *m = rt_mutex(c, "wake", NULL);
    int64_t delays[9];
    int i;

    for (i = 0; i < 9; i++) {
        struct child_arg a = {s, "wake", i, -1, 0, use_pubsub};
        int64_t released, acquired;
        int index;
        pid_t pid;

        CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
        pid = rt_fork(waiter_child, &a);
        RT_WAIT_UNTIL(rt_cmd_int(s, "LLEN {rlock:wake}:queue") == 1, 5000);
        if (use_pubsub)
            RT_WAIT_UNTIL(numsub(s, "{rlock:wake}:wake") == 1, 5000);
        rt_sleep_ms(20); /* let the waiter settle into its sleep */
        released = mono_us();
        CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
        CHECK_INT(rt_wait(pid), ==, 0);
        log_entry(s, "wake", i, &index, &acquired);
        delays[i] = acquired - released;
    }
    qsort(delays, 9, sizeof delays[0], cmp64);
    rlock_mutex_free(m);
    rlock_client_close(c);
    rt_server_stop(s);
    return delays[4];
}

TEST(waiter_is_woken_within_milliseconds_of_the_release)
{
    /* The lease is 30 s: only the release's message can wake the waiter
     * this soon. 100 ms polling would give a median near 50 ms. */
    int64_t median = median_wake_us(1);

    printf("median wake-up after release: %lld us\n", (long long)median);
    CHECK_INT(median, <, 25000);
}

TEST(fifo_order_with_queued_processes)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *c = rt_client(rt_server_url(s), NULL);
    rlock_mutex *m = rt_mutex(c, "fifo", NULL);
    struct child_arg a[5];
    pid_t pids[5];
    int i;

    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    for (i = 0; i < 5; i++) {
        a[i] = (struct child_arg){s, "fifo", i, -1, 0, 1};
        pids[i] = rt_fork(waiter_child, &a[i]);
        /* Arrival order is the order of joining the queue in Redis. */
        RT_WAIT_UNTIL(rt_cmd_int(s, "LLEN {rlock:fifo}:queue") == i + 1, 5000);
    }
    /* The holder comes straight back after releasing: it must not barge
     * ahead of the five queued waiters. */
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    CHECK_RC(rlock_mutex_trylock(m), RLOCK_EBUSY);
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    for (i = 0; i < 5; i++)
        CHECK_INT(rt_wait(pids[i]), ==, 0);
    for (i = 0; i < 5; i++) {
        int index;
        int64_t us;
        log_entry(s, "fifo", i, &index, &us);
        CHECK_INT(index, ==, i);
    }
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    rlock_mutex_free(m);
    rlock_client_close(c);
    rt_server_stop(s);
}

TEST(timed_out_waiter_leaves_no_trace)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *c = rt_client(rt_server_url(s), NULL);
    rlock_mutex *m = rt_mutex(c, "giveup", NULL);
    struct child_arg quitter = {s, "giveup", 0, 300, 0, 1};
    struct child_arg patient = {s, "giveup", 1, -1, 0, 1};
    pid_t q, p;
    int64_t released, acquired;
    int index;

    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    q = rt_fork(waiter_child, &quitter);
    RT_WAIT_UNTIL(rt_cmd_int(s, "LLEN {rlock:giveup}:queue") == 1, 5000);
    p = rt_fork(waiter_child, &patient);
    RT_WAIT_UNTIL(rt_cmd_int(s, "LLEN {rlock:giveup}:queue") == 2, 5000);
    CHECK_INT(rt_wait(q), ==, 3); /* ETIMEDOUT */
    /* Its place is gone the moment timedlock returned. */
    CHECK_INT(rt_cmd_int(s, "LLEN {rlock:giveup}:queue"), ==, 1);
    CHECK_INT(rt_cmd_int(s, "HLEN {rlock:giveup}:qinfo"), ==, 1);
    released = mono_us();
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    CHECK_INT(rt_wait(p), ==, 0);
    log_entry(s, "giveup", 0, &index, &acquired);
    CHECK_INT(index, ==, 1);
    /* Not delayed by the quitter (a stale head would cost waiter_ttl, 5 s). */
    CHECK_INT(acquired - released, <, 1000000);
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:giveup}:queue"), ==, 0);
    rlock_mutex_free(m);
    rlock_client_close(c);
    rt_server_stop(s);
}

TEST(dead_waiter_blocks_the_queue_at_most_waiter_ttl)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *c = rt_client(rt_server_url(s), NULL);
    rlock_mutex *m = rt_mutex(c, "deadwaiter", NULL);
    struct child_arg dead = {s, "deadwaiter", 0, -1, 600, 1};
    struct child_arg live = {s, "deadwaiter", 1, -1, 600, 1};
    int64_t released, acquired;
    pid_t d, l;
    int index;

    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    d = rt_fork(waiter_child, &dead);
    RT_WAIT_UNTIL(rt_cmd_int(s, "LLEN {rlock:deadwaiter}:queue") == 1, 5000);
    l = rt_fork(waiter_child, &live);
    RT_WAIT_UNTIL(rt_cmd_int(s, "LLEN {rlock:deadwaiter}:queue") == 2, 5000);
    kill(d, SIGKILL);
    CHECK_INT(rt_wait(d), ==, 128 + SIGKILL);
    released = mono_us();
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    CHECK_INT(rt_wait(l), ==, 0);
    log_entry(s, "deadwaiter", 0, &index, &acquired);
    CHECK_INT(index, ==, 1);
    /* At most the dead waiter's ttl (600 ms) plus the live waiter's own
     * refresh period, with room for a busy machine. */
    CHECK_INT(acquired - released, <, 2500000);
    rlock_mutex_free(m);
    rlock_client_close(c);
    rt_server_stop(s);
}

struct race {
    rt_server *s;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int phase; /* 0 idle, 1 held, 2 waiter starting, 3 done */
    int iterations;
    int failed;
};

static void set_phase(struct race *r, int phase)
{
    pthread_mutex_lock(&r->mu);
    r->phase = phase;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

static void await_phase(struct race *r, int phase)
{
    pthread_mutex_lock(&r->mu);
    while (r->phase != phase)
        pthread_cond_wait(&r->cv, &r->mu);
    pthread_mutex_unlock(&r->mu);
}

static void *race_holder(void *p)
{
    struct race *r = p;
    rlock_client *c = rt_client(rt_server_url(r->s), NULL);
    rlock_mutex_opts o;
    rlock_mutex *m;
    int i;

    rlock_mutex_opts_init(&o);
    o.lease_ms = 30000;
    m = rt_mutex(c, "race", &o);
    for (i = 0; i < r->iterations; i++) {
        if (rlock_mutex_lock(m) != RLOCK_OK)
            r->failed = 1;
        set_phase(r, 1);
        await_phase(r, 2);
        /* Release somewhere around the waiter's first attempt and its
         * subscription. */
        if (i % 4)
            usleep((useconds_t)(rand() % 400));
        if (rlock_mutex_unlock(m) != RLOCK_OK)
            r->failed = 1;
        await_phase(r, 3);
    }
    rlock_mutex_free(m);
    rlock_client_close(c);
    return NULL;
}

TEST(release_subscribe_race_never_strands_a_waiter)
{
    struct race r = {rt_server_start(NULL), PTHREAD_MUTEX_INITIALIZER,
                     PTHREAD_COND_INITIALIZER, 0, 1500, 0};
    rlock_client_opts o;
    rlock_client *c;
    pthread_t th;
    int64_t worst = 0;
    int i;

    /* Only a message can wake the waiter quickly: the holder's lease is
     * 30 s and the waiter refreshes its place every 20 s. */
    rlock_client_opts_init(&o);
    o.waiter_ttl_ms = 60000;
    c = rt_client(rt_server_url(r.s), &o);
    pthread_create(&th, NULL, race_holder, &r);
    for (i = 0; i < r.iterations; i++) {
        /* A fresh mutex each time: a fresh subscription to race with. */
        rlock_mutex *m = rt_mutex(c, "race", NULL);
        int64_t t0;

        await_phase(&r, 1);
        set_phase(&r, 2);
        t0 = rt_now_ms();
        CHECK_RC(rlock_mutex_timedlock(m, 10000), RLOCK_OK);
        if (rt_now_ms() - t0 > worst)
            worst = rt_now_ms() - t0;
        CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
        rlock_mutex_free(m);
        set_phase(&r, 3);
    }
    pthread_join(th, NULL);
    CHECK_INT(r.failed, ==, 0);
    printf("%d iterations, longest wait %lld ms\n", r.iterations,
           (long long)worst);
    CHECK_INT(worst, <, 2000);
    rlock_client_close(c);
    rt_server_stop(r.s);
}

static int holder_child(void *p)
{
    rt_server *s = p;
    rlock_mutex_opts o;
    rlock_client *c = rlock_client_open(rt_server_url(s), NULL, NULL);
    rlock_mutex *m;

    rlock_mutex_opts_init(&o);
    o.lease_ms = 800;
    m = rlock_mutex_new(c, "crash", &o, NULL);
    if (rlock_mutex_lock(m) != RLOCK_OK)
        return 1;
    for (;;)
        pause(); /* killed while holding */
}

TEST(killed_holder_hands_over_within_the_lease)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *c = rt_client(rt_server_url(s), NULL);
    rlock_mutex *m = rt_mutex(c, "crash", NULL);
    pid_t pid = rt_fork(holder_child, s);
    int64_t killed, took;

    RT_WAIT_UNTIL(rt_cmd_int(s, "EXISTS {rlock:crash}") == 1, 5000);
    kill(pid, SIGKILL);
    CHECK_INT(rt_wait(pid), ==, 128 + SIGKILL);
    killed = rt_now_ms();
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    took = rt_now_ms() - killed;
    CHECK_INT(took, <, 800 + 700);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    rlock_mutex_free(m);
    rlock_client_close(c);
    rt_server_stop(s);
}

TEST(without_pubsub_waiters_back_off_with_jitter)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *c = rt_client(rt_server_url(s), NULL);
    rlock_mutex *m = rt_mutex(c, "nopubsub", NULL);
    struct child_arg a = {s, "nopubsub", 0, -1, 0, 0};
    int64_t released, acquired;
    int index;
    pid_t pid;

    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    pid = rt_fork(waiter_child, &a);
    RT_WAIT_UNTIL(rt_cmd_int(s, "LLEN {rlock:nopubsub}:queue") == 1, 5000);
    rt_sleep_ms(300);
    CHECK_INT(numsub(s, "{rlock:nopubsub}:wake"), ==, 0);
    released = mono_us();
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    CHECK_INT(rt_wait(pid), ==, 0);
    log_entry(s, "nopubsub", 0, &index, &acquired);
    /* Retries come every 5 to 100 ms: well before the 30 s lease. */
    CHECK_INT(acquired - released, <, 1000000);
    rlock_mutex_free(m);
    rlock_client_close(c);
    rt_server_stop(s);
}

struct late {
    rlock_mutex *m;
    int rc;
};

static void *late_trylock(void *p)
{
    struct late *l = p;

    l->rc = rlock_mutex_trylock(l->m);
    return NULL;
}

TEST(a_reply_later_than_the_lease_is_not_a_hold)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *c = rt_client(rt_server_url(s), NULL);
    rlock_mutex_opts o;
    struct late l;
    pthread_t th;

    rlock_mutex_opts_init(&o);
    o.lease_ms = 200;
    l.m = rt_mutex(c, "late", &o);
    CHECK_RC(rlock_mutex_lock(l.m), RLOCK_OK); /* warm connection */
    CHECK_RC(rlock_mutex_unlock(l.m), RLOCK_OK);
    rt_server_pause(s);
    pthread_create(&th, NULL, late_trylock, &l);
    rt_sleep_ms(500); /* longer than the lease */
    rt_server_resume(s);
    pthread_join(th, NULL);
    /* Redis granted it, but the answer came after the lease would have
     * ended: not reported as held, and undone in the background. */
    CHECK_RC(l.rc, RLOCK_EBUSY);
    CHECK(rlock_mutex_token(l.m) == 0);
    RT_WAIT_UNTIL(rt_cmd_int(s, "EXISTS {rlock:late}") == 0, 2000);
    rlock_mutex_free(l.m);
    rlock_client_close(c);
    rt_server_stop(s);
}

TEST(a_grant_for_another_acquisition_is_ignored)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *a = rt_client(rt_server_url(s), NULL);
    rlock_client *b = rt_client(rt_server_url(s), NULL);
    rlock_mutex *ma = rt_mutex(a, "stale", NULL);
    rlock_mutex *mb = rt_mutex(b, "stale", NULL);
    rt_locker w;
    redisReply *head;
    char client[64];

    CHECK_RC(rlock_mutex_lock(ma), RLOCK_OK);
    rt_locker_start(&w, mb, 1);
    RT_WAIT_UNTIL(numsub(s, "{rlock:stale}:wake") == 1, 5000);
    RT_WAIT_UNTIL(rt_cmd_int(s, "LLEN {rlock:stale}:queue") == 1, 5000);
    head = rt_cmd(s, "LINDEX {rlock:stale}:queue 0");
    CHECK(head->type == REDIS_REPLY_STRING);
    /* The channel is named by the random id, before "@host/pid". */
    snprintf(client, sizeof client, "%.*s", (int)strcspn(head->str, ":@"),
             head->str);
    /* A grant naming this waiter but an acquisition it is not making (an
     * earlier wait of the same thread that gave up, say). */
    {
        char channel[128], msg[128];
        snprintf(channel, sizeof channel, "{rlock:stale}:wake:%s", client);
        snprintf(msg, sizeof msg, "%s 999 987654321 30000", head->str);
        CHECK_INT(rt_cmd_int(s, "PUBLISH %s %s", channel, msg), ==, 1);
    }
    freeReplyObject(head);
    rt_sleep_ms(300);
    CHECK(!w.done);
    CHECK_RC(rlock_mutex_unlock(ma), RLOCK_OK);
    CHECK_RC(rt_locker_join(&w), RLOCK_OK);
    CHECK(w.token != 999 && w.token > 1);
    rlock_mutex_free(mb);
    rlock_mutex_free(ma);
    rlock_client_close(a);
    rlock_client_close(b);
    rt_server_stop(s);
}

/* ---- a waiter reading the subscriber connection itself ------------------ */

/* Client options under which only a message (or a ring) can end a wait
 * quickly: no fallback timer would end it within seconds. */
static rlock_client *slow_timers_client(rt_server *s)
{
    rlock_client_opts o;

    rlock_client_opts_init(&o);
    o.waiter_ttl_ms = 60000; /* keep-alive every 20 s */
    o.backoff_min_ms = 5000;
    o.backoff_max_ms = 5000;
    return rt_client(rt_server_url(s), &o);
}

TEST(a_cancel_reaches_a_waiter_reading_the_subscriber)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *a = rt_client(rt_server_url(s), NULL);
    rlock_client *b = slow_timers_client(s);
    rlock_mutex *ma = rt_mutex(a, "ring", NULL);
    rlock_mutex *mb = rt_mutex(b, "ring", NULL);
    rt_locker w;
    int64_t t0;

    CHECK_RC(rlock_mutex_lock(ma), RLOCK_OK);
    rt_locker_start(&w, mb, 0);
    RT_WAIT_UNTIL(rt_cmd_int(s, "LLEN {rlock:ring}:queue") == 1, 5000);
    RT_WAIT_UNTIL(numsub(s, "{rlock:ring}:wake") == 1, 5000);
    rt_sleep_ms(50); /* asleep on the subscriber connection by now */
    t0 = rt_now_ms();
    rlock_client_cancel_waits(b);
    CHECK_RC(rt_locker_join(&w), RLOCK_ECANCELED);
    CHECK_INT(rt_now_ms() - t0, <, 1000);
    CHECK_INT(rt_cmd_int(s, "LLEN {rlock:ring}:queue"), ==, 0);
    rlock_mutex_free(ma);
    rlock_mutex_free(mb);
    rlock_client_close(a);
    rlock_client_close(b);
    rt_server_stop(s);
}

TEST(a_waiter_reading_the_subscriber_gives_it_back_and_wakes_the_others)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *d = rt_client(rt_server_url(s), NULL);
    rlock_client *c = slow_timers_client(s);
    rlock_mutex *dx = rt_mutex(d, "x", NULL), *dy = rt_mutex(d, "y", NULL);
    rlock_mutex *cx = rt_mutex(c, "x", NULL), *cy = rt_mutex(c, "y", NULL);
    rt_locker wx, wy;
    int64_t t0;

    CHECK_RC(rlock_mutex_lock(dx), RLOCK_OK);
    CHECK_RC(rlock_mutex_lock(dy), RLOCK_OK);
    /* The first waiter of c takes the subscriber connection over. */
    rt_locker_start(&wx, cx, 1);
    RT_WAIT_UNTIL(rt_cmd_int(s, "LLEN {rlock:x}:queue") == 1, 5000);
    RT_WAIT_UNTIL(numsub(s, "{rlock:x}:wake") == 1, 5000);
    rt_sleep_ms(50);
    /* A second name of c must be subscribed on that connection: the
     * background thread rings the reader for it, sends the SUBSCRIBE, and
     * Redis confirms it within the subscription wait (5 s of backoff
     * otherwise). */
    t0 = rt_now_ms();
    rt_locker_start(&wy, cy, 1);
    RT_WAIT_UNTIL(numsub(s, "{rlock:y}:wake") == 1, 5000);
    RT_WAIT_UNTIL(rt_cmd_int(s, "LLEN {rlock:y}:queue") == 1, 5000);
    CHECK_INT(rt_now_ms() - t0, <, 2000);
    rt_sleep_ms(50);
    /* Each release's message reaches its waiter, whichever thread of c
     * reads the connection: one of them sleeps on its condition variable
     * and is woken by the other. */
    t0 = rt_now_ms();
    CHECK_RC(rlock_mutex_unlock(dy), RLOCK_OK);
    CHECK_RC(rt_locker_join(&wy), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(dx), RLOCK_OK);
    CHECK_RC(rt_locker_join(&wx), RLOCK_OK);
    CHECK_INT(rt_now_ms() - t0, <, 2000);
    rlock_mutex_free(cx);
    rlock_mutex_free(cy);
    rlock_mutex_free(dx);
    rlock_mutex_free(dy);
    rlock_client_close(c);
    rlock_client_close(d);
    rt_server_stop(s);
}

/*
 * Waiters that queued at the same moment refresh their places apart:
 * each waits a random time between a quarter and a third of
 * waiter_ttl_ms before its next refresh, rather than exactly a third, so
 * that a burst of waiters does not become a burst of refreshes every
 * third of the TTL for as long as they wait (10,000 waiters of one loop
 * once kept a release from a connection that way). The refreshes are
 * counted from the server's own command statistics, every few
 * milliseconds: no short window holds most of them.
 */
#define SPREAD_WAITERS 24

struct spread_arg {
    rlock_client *c;
    pthread_barrier_t *go;
    int rc;
};

static void *spread_waiter(void *p)
{
    struct spread_arg *a = p;
    int err;
    rlock_mutex *m = rlock_mutex_new(a->c, "spread", NULL, &err);

    pthread_barrier_wait(a->go);
    a->rc = m ? rlock_mutex_timedlock(m, 3400) : err;
    rlock_mutex_free(m);
    return NULL;
}

/* Calls of EVALSHA and EVAL so far. */
static long long script_calls(rt_server *s)
{
    redisReply *r = rt_cmd(s, "INFO commandstats");
    long long n = 0;
    const char *names[2] = {"cmdstat_evalsha:calls=", "cmdstat_eval:calls="};
    int i;

    for (i = 0; i < 2; i++) {
        const char *p =
            r->type == REDIS_REPLY_STRING ? strstr(r->str, names[i]) : NULL;
        if (p)
            n += atoll(p + strlen(names[i]));
    }
    freeReplyObject(r);
    return n;
}

TEST(waiters_that_queued_together_refresh_their_places_apart)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client_opts o;
    rlock_mutex_opts mo;
    rlock_client *holder_c, *c;
    rlock_mutex *holder;
    pthread_t th[SPREAD_WAITERS];
    struct spread_arg args[SPREAD_WAITERS];
    pthread_barrier_t go;
    static long long calls[1000];
    static int64_t at[1000];
    int i, k, n = 0, worst = 0;
    int64_t t0;

    rlock_client_opts_init(&o);
    holder_c = rt_client(rt_server_url(s), &o);
    rlock_mutex_opts_init(&mo);
    mo.lease_ms = 60000; /* no renewal while the test watches */
    holder = rlock_mutex_new(holder_c, "spread", &mo, NULL);
    CHECK_RC(rlock_mutex_lock(holder), RLOCK_OK);
    o.waiter_ttl_ms = 2400; /* a refresh every 600 to 800 ms */
    o.max_connections = SPREAD_WAITERS;
    c = rt_client(rt_server_url(s), &o);
    pthread_barrier_init(&go, NULL, SPREAD_WAITERS + 1);
    for (i = 0; i < SPREAD_WAITERS; i++) {
        args[i].c = c;
        args[i].go = &go;
        args[i].rc = -1;
        CHECK(pthread_create(&th[i], NULL, spread_waiter, &args[i]) == 0);
    }
    pthread_barrier_wait(&go);
    t0 = mono_us();
    /* Sampled until the waiters give up (3.4 s): refreshes at about 0.7,
     * 1.4, 2.1 and 2.8 s, each of the 24 waiters once in each. */
    while (n < 1000 && mono_us() - t0 < 3300000) {
        calls[n] = script_calls(s);
        at[n++] = mono_us() - t0;
        usleep(5000);
    }
    for (i = 0; i < SPREAD_WAITERS; i++) {
        pthread_join(th[i], NULL);
        CHECK_RC(args[i].rc, RLOCK_ETIMEDOUT);
    }
    /* After the first attempts (the first 400 ms), the most script
     * calls in any 40 ms: with refreshes every exact third, a window
     * holds all 24 of a round (waiters that started within a few ms of
     * each other); spread over 200 ms, a handful. */
    for (i = 0; i < n; i++) {
        if (at[i] < 400000)
            continue;
        for (k = i; k < n && at[k] - at[i] <= 40000; k++)
            ;
        if (calls[k - 1] - calls[i] > worst)
            worst = (int)(calls[k - 1] - calls[i]);
    }
    printf("most script calls in 40 ms: %d of %d waiters (%d samples)\n", worst,
           SPREAD_WAITERS, n);
    CHECK_INT(worst, <=, 3 * SPREAD_WAITERS / 4);
    pthread_barrier_destroy(&go);
    rlock_mutex_free(holder);
    rlock_client_close(c);
    rlock_client_close(holder_c);
    rt_server_stop(s);
}
