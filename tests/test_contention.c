/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Many owners on one lock: separate processes and threads increment a
 * counter with a deliberately racy read-sleep-write under the lock. Any
 * overlap of two holds loses an increment, so an exact final count means
 * mutual exclusion held; tokens logged inside the critical section must
 * come out strictly increasing.
 */
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "harness/test.h"

struct worker {
    const char *url;
    const char *name;
    int iterations;
    int use_pubsub;
    rt_server *s;
};

/* The racy section: read the counter, give others time to interleave,
 * write it back plus one; log the token. */
static int racy_increment(redisContext *ctx, const char *name, uint64_t token)
{
    redisReply *r = redisCommand(ctx, "GET counter:%s", name);
    long long v;

    if (!r)
        return -1;
    v = r->type == REDIS_REPLY_STRING ? atoll(r->str) : 0;
    freeReplyObject(r);
    usleep(200);
    r = redisCommand(ctx, "SET counter:%s %lld", name, v + 1);
    if (!r)
        return -1;
    freeReplyObject(r);
    r = redisCommand(ctx, "RPUSH tokens:%s %llu", name,
                     (unsigned long long)token);
    if (!r)
        return -1;
    freeReplyObject(r);
    return 0;
}

static int process_worker(void *arg)
{
    struct worker *w = arg;
    rlock_client_opts o;
    rlock_client *c;
    rlock_mutex *m;
    redisContext *ctx;
    int i, err;

    rlock_client_opts_init(&o);
    o.use_pubsub = w->use_pubsub;
    c = rlock_client_open(w->url, &o, &err);
    if (!c)
        return 20;
    m = rlock_mutex_new(c, w->name, NULL, &err);
    ctx = redisConnect("127.0.0.1", rt_server_port(w->s));
    if (!m || !ctx || ctx->err)
        return 21;
    for (i = 0; i < w->iterations; i++) {
        if (rlock_mutex_lock(m) != RLOCK_OK)
            return 22;
        if (racy_increment(ctx, w->name, rlock_mutex_token(m)) != 0)
            return 23;
        if (rlock_mutex_unlock(m) != RLOCK_OK)
            return 24;
    }
    redisFree(ctx);
    rlock_mutex_free(m);
    rlock_client_close(c);
    return 0;
}

static void check_history(rt_server *s, const char *name, long long expect)
{
    redisReply *r = rt_cmd(s, "GET counter:%s", name);
    size_t i;

    CHECK(r->type == REDIS_REPLY_STRING);
    CHECK_INT(atoll(r->str), ==, expect);
    freeReplyObject(r);
    r = rt_cmd(s, "LRANGE tokens:%s 0 -1", name);
    CHECK_INT(r->elements, ==, expect);
    for (i = 1; i < r->elements; i++)
        CHECK(strtoull(r->element[i]->str, NULL, 10) >
              strtoull(r->element[i - 1]->str, NULL, 10));
    freeReplyObject(r);
}

static void run_processes(int nproc, int iterations, int use_pubsub)
{
    rt_server *s = rt_server_start(NULL);
    struct worker w = {rt_server_url(s), "shared", iterations, use_pubsub, s};
    pid_t pids[16];
    int i;

    for (i = 0; i < nproc; i++)
        pids[i] = rt_fork(process_worker, &w);
    for (i = 0; i < nproc; i++)
        CHECK_INT(rt_wait(pids[i]), ==, 0);
    check_history(s, "shared", (long long)nproc * iterations);
    rt_server_stop(s);
}

TEST(processes_contending_keep_an_exact_count)
{
    run_processes(6, 150, 1);
}

TEST(processes_contending_without_pubsub_keep_an_exact_count)
{
    run_processes(4, 60, 0);
}

struct thread_arg {
    rlock_client *c;
    rt_server *s;
    const char *name;
    int iterations;
    int failed;
};

static void *thread_worker(void *arg)
{
    struct thread_arg *t = arg;
    rlock_mutex *m = rlock_mutex_new(t->c, t->name, NULL, NULL);
    redisContext *ctx = redisConnect("127.0.0.1", rt_server_port(t->s));
    int i;

    if (!m || !ctx || ctx->err) {
        t->failed = 1;
        return NULL;
    }
    for (i = 0; i < t->iterations && !t->failed; i++) {
        if (rlock_mutex_lock(m) != RLOCK_OK ||
            racy_increment(ctx, t->name, rlock_mutex_token(m)) != 0 ||
            rlock_mutex_unlock(m) != RLOCK_OK)
            t->failed = 1;
    }
    redisFree(ctx);
    rlock_mutex_free(m);
    return NULL;
}

/* 64 threads of one process share one client, over 4 names, while two
 * other processes hammer the same names. */
TEST(sixty_four_threads_and_processes_over_four_names)
{
    static const char *names[4] = {"n0", "n1", "n2", "n3"};
    rt_server *s = rt_server_start(NULL);
    rlock_client *c = rt_client(rt_server_url(s), NULL);
    struct thread_arg args[64];
    struct worker w[4];
    pthread_t th[64];
    pid_t pids[4];
    int i, per_thread = 12, per_proc = 24;

    for (i = 0; i < 4; i++) {
        w[i] = (struct worker){rt_server_url(s), names[i], per_proc, 1, s};
        pids[i] = rt_fork(process_worker, &w[i]);
    }
    for (i = 0; i < 64; i++) {
        args[i] = (struct thread_arg){c, s, names[i % 4], per_thread, 0};
        pthread_create(&th[i], NULL, thread_worker, &args[i]);
    }
    for (i = 0; i < 64; i++) {
        pthread_join(th[i], NULL);
        CHECK_INT(args[i].failed, ==, 0);
    }
    for (i = 0; i < 4; i++)
        CHECK_INT(rt_wait(pids[i]), ==, 0);
    for (i = 0; i < 4; i++)
        check_history(s, names[i], 16 * per_thread + per_proc);
    rlock_client_close(c);
    rt_server_stop(s);
}
