/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Redis Cluster (redis-cluster://): three masters made into a cluster by
 * redis-cli --cluster create. Locks spread over many slots hold and renew
 * (a renewal script never mixes slots), a release on one node wakes a
 * waiter whose subscriber connection is to another, and a slot migrated
 * under a held lock is followed (ASK while it moves, MOVED after). Slots
 * migrated by hand (CLUSTER SETSLOT, MIGRATE), each stage held for
 * seconds: locks stay exclusive and renewed, waiters are served, and a
 * migration that outlasts a call's deadline is RLOCK_EUNAVAILABLE then.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/aloop.h"
#include "harness/fake_server.h"
#include "harness/test.h"

#define NODES 3

static rt_server *nodes[NODES];
static char url[128];

/* Three masters of binary (NULL: the default server). */
static const char *start_cluster_of(const char *binary)
{
    rt_server_opts o;
    char cmd[256];
    int i;

    memset(&o, 0, sizeof o);
    o.cluster_enabled = 1;
    o.binary = binary;
    for (i = 0; i < NODES; i++)
        nodes[i] = rt_server_start(&o);
    snprintf(cmd, sizeof cmd,
             "redis-cli --cluster create 127.0.0.1:%d 127.0.0.1:%d "
             "127.0.0.1:%d --cluster-yes >/dev/null 2>&1",
             rt_server_port(nodes[0]), rt_server_port(nodes[1]),
             rt_server_port(nodes[2]));
    CHECK_INT(system(cmd), ==, 0);
    for (i = 0; i < NODES; i++)
        RT_WAIT_UNTIL(rt_cluster_ok(nodes[i]), 20000);
    snprintf(url, sizeof url, "redis-cluster://127.0.0.1:%d",
             rt_server_port(nodes[1]));
    return url;
}

static const char *start_cluster(void)
{
    return start_cluster_of(NULL);
}

static void stop_cluster(void)
{
    int i;

    for (i = 0; i < NODES; i++)
        rt_server_stop(nodes[i]);
}

/* The node that has key (EXISTS 1; the others answer MOVED), or -1. */
static int node_with(const char *key)
{
    int i, found = -1;

    for (i = 0; i < NODES; i++) {
        redisReply *r = rt_cmd(nodes[i], "EXISTS %s", key);
        if (r->type == REDIS_REPLY_INTEGER && r->integer == 1)
            found = i;
        freeReplyObject(r);
    }
    return found;
}

/* The node that serves key's slot. */
static int owner_of(const char *key)
{
    int i, found = -1;

    for (i = 0; i < NODES; i++) {
        redisReply *r = rt_cmd(nodes[i], "TYPE %s", key);
        if (r->type == REDIS_REPLY_STATUS)
            found = i;
        freeReplyObject(r);
    }
    return found;
}

TEST(cluster_locks_over_many_slots_hold_and_renew)
{
    rlock_client_opts co;
    rlock_mutex_opts mo;
    rlock_client *c, *other;
    rlock_mutex *m[30], *mo2[30];
    int used[NODES] = {0}, i, spread = 0;
    char name[16], key[32];

    rlock_client_opts_init(&co);
    co.watchdog_lease_ms = 900;
    c = rt_client(start_cluster(), &co);
    other = rt_client(url, NULL);
    rlock_mutex_opts_init(&mo);
    mo.on_lost = rt_count_lost;
    atomic_store(&rt_lost_calls, 0);
    for (i = 0; i < 30; i++) {
        snprintf(name, sizeof name, "n%d", i);
        m[i] = rt_mutex(c, name, &mo);
        mo2[i] = rt_mutex(other, name, NULL);
        CHECK_RC(rlock_mutex_lock(m[i]), RLOCK_OK);
        snprintf(key, sizeof key, "{rlock:%s}", name);
        CHECK_INT(node_with(key), ==, owner_of(key));
        used[node_with(key)] = 1;
        CHECK_RC(rlock_mutex_trylock(mo2[i]), RLOCK_EBUSY);
    }
    for (i = 0; i < NODES; i++)
        spread += used[i];
    CHECK_INT(spread, ==, NODES);
    rt_sleep_ms(2000); /* two leases: renewals over every slot */
    CHECK_INT(atomic_load(&rt_lost_calls), ==, 0);
    for (i = 0; i < 30; i++) {
        CHECK_RC(rlock_mutex_trylock(mo2[i]), RLOCK_EBUSY);
        CHECK_RC(rlock_mutex_unlock(m[i]), RLOCK_OK);
        snprintf(key, sizeof key, "{rlock:n%d}", i);
        CHECK_INT(node_with(key), ==, -1);
        rlock_mutex_free(m[i]);
        rlock_mutex_free(mo2[i]);
    }
    rlock_client_close(c);
    rlock_client_close(other);
    stop_cluster();
}

TEST(cluster_waiters_are_woken_by_releases_on_any_node)
{
    rlock_client *c, *w;
    int i;

    c = rt_client(start_cluster(), NULL);
    w = rt_client(url, NULL);
    /* Names on different masters; the waiter's subscriber connection is
     * to one of them only. */
    for (i = 0; i < 12; i++) {
        char name[16], key[32];
        rlock_mutex *h, *m;
        rt_locker l;
        int64_t t0;

        snprintf(name, sizeof name, "w%d", i);
        snprintf(key, sizeof key, "{rlock:%s}:queue", name);
        h = rt_mutex(c, name, NULL);
        m = rt_mutex(w, name, NULL);
        CHECK_RC(rlock_mutex_lock(h), RLOCK_OK);
        rt_locker_start(&l, m, 1);
        RT_WAIT_UNTIL(node_with(key) >= 0, 5000); /* queued */
        t0 = rt_now_ms();
        CHECK_RC(rlock_mutex_unlock(h), RLOCK_OK);
        CHECK_RC(rt_locker_join(&l), RLOCK_OK);
        /* Woken by the message, not by the 30 s lease's end. */
        CHECK_INT(rt_now_ms() - t0, <, 2000);
        rlock_mutex_free(h);
        rlock_mutex_free(m);
    }
    rlock_client_close(c);
    rlock_client_close(w);
    stop_cluster();
}

/* Redisson's layout on a cluster: the hash, its token counter and its
 * channel share the name's slot (Redisson's braces), and releases on any
 * master wake waiters whose subscriber is on another. */
TEST(cluster_redisson_layout_locks_and_wakes_across_nodes)
{
    rlock_client_opts wo;
    rlock_mutex_opts mo;
    rlock_client *c, *w;
    int i, on[NODES] = {0};

    rlock_client_opts_init(&wo);
    wo.waiter_ttl_ms = 60000; /* no waiter wakes on its own for 20 s */
    c = rt_client(start_cluster(), NULL);
    w = rt_client(url, &wo);
    rlock_mutex_opts_init(&mo);
    mo.layout = RLOCK_LAYOUT_REDISSON;
    for (i = 0; i < 12; i++) {
        char name[16];
        rlock_mutex *h, *m;
        rt_locker l;
        int64_t t0;
        uint64_t token;
        int n;

        snprintf(name, sizeof name, "r%d", i);
        h = rt_mutex(c, name, &mo);
        m = rt_mutex(w, name, &mo);
        CHECK_RC(rlock_mutex_lock(h), RLOCK_OK);
        token = rlock_mutex_token(h);
        n = node_with(name);
        CHECK(n >= 0);
        on[n] = 1;
        rt_locker_start(&l, m, 1);
        rt_sleep_ms(200); /* it tried, subscribed, tried, and sleeps */
        t0 = rt_now_ms();
        CHECK_RC(rlock_mutex_unlock(h), RLOCK_OK);
        CHECK_RC(rt_locker_join(&l), RLOCK_OK);
        /* Woken by the message, not by the 30 s lease or a 20 s timer. */
        CHECK_INT(rt_now_ms() - t0, <, 5000);
        CHECK(l.token > token);
        rlock_mutex_free(h);
        rlock_mutex_free(m);
    }
    CHECK(on[0] + on[1] + on[2] >= 2);
    rlock_client_close(c);
    rlock_client_close(w);
    stop_cluster();
}

static char *node_id(rt_server *s)
{
    static char ids[NODES][64];
    static int k;
    redisReply *r = rt_cmd(s, "CLUSTER MYID");
    char *id = ids[k++ % NODES];

    CHECK(r->type == REDIS_REPLY_STRING);
    snprintf(id, sizeof ids[0], "%s", r->str);
    freeReplyObject(r);
    return id;
}

struct migration {
    long long slot;
    const char *id;
};

/* Gives the slot to the node id on every node, 300 ms from now. */
static void *finish_migration(void *arg)
{
    struct migration *f = arg;
    redisContext *ctx[NODES];
    int i;

    rt_sleep_ms(300);
    /* Connections of its own: the test's are the main thread's. */
    for (i = 0; i < NODES; i++)
        ctx[i] = redisConnect("127.0.0.1", rt_server_port(nodes[i]));
    for (i = 0; i < NODES; i++) {
        redisReply *r = redisCommand(ctx[i], "CLUSTER SETSLOT %lld NODE %s",
                                     f->slot, f->id);
        if (r)
            freeReplyObject(r);
        redisFree(ctx[i]);
    }
    return NULL;
}

TEST(cluster_slot_migration_is_followed)
{
    rlock_client *c, *other;
    rlock_mutex *m, *mo;
    int src, dst, i;
    long long slot;
    uint64_t t1, t2;
    char *src_id, *dst_id;
    redisReply *keys;
    struct migration fin;
    pthread_t th;
    int64_t t0;

    c = rt_client(start_cluster(), NULL);
    other = rt_client(url, NULL);
    m = rt_mutex(c, "mig", NULL);
    mo = rt_mutex(other, "mig", NULL);
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    /* Held twice: the first unlock below is a four-key request (a count
     * to set), the last a one-key one (the fast form). */
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    t1 = rlock_mutex_token(m);
    src = owner_of("{rlock:mig}");
    dst = (src + 1) % NODES;
    slot = rt_cmd_int(nodes[src], "CLUSTER KEYSLOT {rlock:mig}");
    src_id = node_id(nodes[src]);
    dst_id = node_id(nodes[dst]);
    /* Move the slot's keys; the slot is still the source's. */
    freeReplyObject(
        rt_cmd(nodes[dst], "CLUSTER SETSLOT %lld IMPORTING %s", slot, src_id));
    freeReplyObject(
        rt_cmd(nodes[src], "CLUSTER SETSLOT %lld MIGRATING %s", slot, dst_id));
    keys = rt_cmd(nodes[src], "CLUSTER GETKEYSINSLOT %lld 100", slot);
    CHECK(keys->type == REDIS_REPLY_ARRAY && keys->elements >= 2);
    for (i = 0; i < (int)keys->elements; i++) {
        redisReply *r =
            rt_cmd(nodes[src], "MIGRATE 127.0.0.1 %d %s 0 5000",
                   rt_server_port(nodes[dst]), keys->element[i]->str);
        CHECK(r->type == REDIS_REPLY_STATUS);
        freeReplyObject(r);
    }
    freeReplyObject(keys);
    /* While it moves, the source answers ASK and the importing node
     * TRYAGAIN (not every key of the lock exists there); the client tries
     * again until the slot is the destination's, and then follows MOVED. */
    /* A one-key request (an extension) is served by the importing node
     * after ASKING, while the slot is still the source's. */
    CHECK_RC(rlock_mutex_extend(m, 20000), RLOCK_OK);
    fin.slot = slot;
    fin.id = dst_id;
    pthread_create(&th, NULL, finish_migration, &fin);
    t0 = rt_now_ms();
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    CHECK_INT(rt_now_ms() - t0, >=, 250);
    CHECK_INT(rt_cmd_int(nodes[dst], "EXISTS {rlock:mig}"), ==, 1);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    CHECK_INT(rt_cmd_int(nodes[dst], "EXISTS {rlock:mig}"), ==, 0);
    pthread_join(th, NULL);
    CHECK_RC(rlock_mutex_trylock(mo), RLOCK_OK);
    t2 = rlock_mutex_token(mo);
    CHECK(t2 > t1);
    CHECK_RC(rlock_mutex_unlock(mo), RLOCK_OK);
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    CHECK(rlock_mutex_token(m) > t2);
    CHECK_INT(node_with("{rlock:mig}"), ==, dst);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    {
        /* ASK and MOVED were followed: counted (RLOCK_EV_REDIRECT). */
        rlock_stats st = RLOCK_STATS_INIT;
        CHECK_RC(rlock_client_stats(c, &st), RLOCK_OK);
        CHECK_INT(st.redirects, >=, 2);
    }
    rlock_mutex_free(m);
    rlock_mutex_free(mo);
    rlock_client_close(c);
    rlock_client_close(other);
    stop_cluster();
}

/* ---- a slot migrated by hand, as redis-cli --cluster reshard does ------ */

/* The node id of s, copied into id. */
static void node_id_of(rt_server *s, char id[64])
{
    redisReply *r = rt_cmd(s, "CLUSTER MYID");

    CHECK(r->type == REDIS_REPLY_STRING);
    snprintf(id, 64, "%s", r->str);
    freeReplyObject(r);
}

/* The importing side first, then the migrating one: from here on the
 * source answers ASK for keys it no longer has, and both answer TRYAGAIN
 * to a request naming keys of the slot that are not all there. */
static void migration_start(int src, int dst, long long slot)
{
    char src_id[64], dst_id[64];

    node_id_of(nodes[src], src_id);
    node_id_of(nodes[dst], dst_id);
    freeReplyObject(
        rt_cmd(nodes[dst], "CLUSTER SETSLOT %lld IMPORTING %s", slot, src_id));
    freeReplyObject(
        rt_cmd(nodes[src], "CLUSTER SETSLOT %lld MIGRATING %s", slot, dst_id));
}

/* MIGRATEs the slot's keys from src to dst: only the key named only, or
 * every key (only NULL). */
static void migrate_keys(int src, int dst, long long slot, const char *only)
{
    redisReply *keys =
        rt_cmd(nodes[src], "CLUSTER GETKEYSINSLOT %lld 100", slot);
    int i;

    CHECK(keys->type == REDIS_REPLY_ARRAY);
    for (i = 0; i < (int)keys->elements; i++) {
        redisReply *r;
        if (only && strcmp(keys->element[i]->str, only) != 0)
            continue;
        r = rt_cmd(nodes[src], "MIGRATE 127.0.0.1 %d %s 0 5000",
                   rt_server_port(nodes[dst]), keys->element[i]->str);
        CHECK(r->type == REDIS_REPLY_STATUS);
        freeReplyObject(r);
    }
    freeReplyObject(keys);
}

/* The slot is dst's, on every node (the new owner first). */
static void migration_end(int dst, long long slot)
{
    char dst_id[64];
    int i;

    node_id_of(nodes[dst], dst_id);
    freeReplyObject(
        rt_cmd(nodes[dst], "CLUSTER SETSLOT %lld NODE %s", slot, dst_id));
    for (i = 0; i < NODES; i++)
        if (i != dst)
            freeReplyObject(
                rt_cmd(nodes[i], "CLUSTER SETSLOT %lld NODE %s", slot, dst_id));
}

/* A second client's trylocks of one lock, one after the other on a thread
 * of its own while a migration goes on: each must say EBUSY. What else
 * came, the number of tries and the longest. */
typedef struct prober {
    rlock_mutex *m;
    atomic_int stop;
    int tries;
    int bad_rc; /* the first answer other than EBUSY (1: RLOCK_OK), or 0 */
    char bad_msg[512];
    int64_t longest_ms;
    pthread_t thread;
} prober;

static void *prober_main(void *arg)
{
    prober *p = arg;

    while (!atomic_load(&p->stop)) {
        int64_t t0 = rt_now_ms();
        int rc = rlock_mutex_trylock(p->m);
        if (rt_now_ms() - t0 > p->longest_ms)
            p->longest_ms = rt_now_ms() - t0;
        p->tries++;
        if (rc != RLOCK_EBUSY && p->bad_rc == 0) {
            p->bad_rc = rc == RLOCK_OK ? 1 : rc;
            snprintf(p->bad_msg, sizeof p->bad_msg, "%s",
                     rlock_client_errmsg(rlock_mutex_client(p->m)));
        }
        if (rc == RLOCK_OK)
            rlock_mutex_unlock(p->m);
        rt_sleep_ms(20);
    }
    return NULL;
}

static void prober_start(prober *p, rlock_mutex *m)
{
    memset(p, 0, sizeof *p);
    p->m = m;
    pthread_create(&p->thread, NULL, prober_main, p);
}

/* Stops the prober and fails the test if a trylock said other than
 * EBUSY. */
static void prober_check(prober *p, const char *name)
{
    atomic_store(&p->stop, 1);
    pthread_join(p->thread, NULL);
    fprintf(stderr, "%s: %d trylocks, the longest %lld ms\n", name, p->tries,
            (long long)p->longest_ms);
    if (p->bad_rc != 0)
        rt_fail(__FILE__, __LINE__,
                "%s: a trylock during the migration: %s (%s)", name,
                p->bad_rc == 1 ? "RLOCK_OK" : rlock_strerror(p->bad_rc),
                p->bad_msg);
}

/* An owner's lock or unlock on a thread of its own: either may wait out a
 * migration. A waiter (lock) keeps its hold until told to let go. */
typedef struct actor {
    rlock_mutex *m;
    rlock_owner *o;
    int lock; /* lock, hold until let_go, unlock; else unlock */
    int rc, unlock_rc;
    atomic_int done, let_go;
    pthread_t thread;
} actor;

static void *actor_main(void *arg)
{
    actor *a = arg;

    if (!a->lock) {
        a->rc = rlock_mutex_unlock_as(a->m, a->o);
        atomic_store(&a->done, 1);
        return NULL;
    }
    a->rc = rlock_mutex_lock_as(a->m, a->o);
    atomic_store(&a->done, 1);
    while (!atomic_load(&a->let_go))
        rt_sleep_ms(5);
    if (a->rc == RLOCK_OK)
        a->unlock_rc = rlock_mutex_unlock_as(a->m, a->o);
    return NULL;
}

static void actor_start(actor *a, rlock_mutex *m, rlock_owner *o, int lock)
{
    memset(a, 0, sizeof *a);
    a->m = m;
    a->o = o;
    a->lock = lock;
    pthread_create(&a->thread, NULL, actor_main, a);
}

/* A client of the cluster with a watchdog lease (0: the default) and a
 * command timeout; a waiter's place lasts 20 s, longer than a refresh of
 * it may wait out a migration stage. */
static rlock_client *cluster_client(int64_t watchdog_ms, int timeout_ms)
{
    rlock_client_opts o;

    rlock_client_opts_init(&o);
    if (watchdog_ms)
        o.watchdog_lease_ms = watchdog_ms;
    o.command_timeout_ms = timeout_ms;
    o.waiter_ttl_ms = 20000;
    return rt_client(url, &o);
}

/*
 * Two locks held while their slots migrate, as redis-cli --cluster
 * reshard moves them (IMPORTING, MIGRATING, MIGRATE key by key, SETSLOT
 * NODE), slowed down so that every window lasts: "held" (its lock and
 * fencing counter; no queue keys, so every request naming them meets
 * TRYAGAIN from MIGRATING to the end, from the source and, once the keys
 * moved, from the importing node behind ASKING), and "waited" (a waiter
 * queued: every key exists, so TRYAGAIN lasts only while they are split).
 * The holder's renewals (a 900 ms lease, for about 4.5 s) are served; a
 * second client's trylocks say EBUSY every time, however long the window
 * (2 s each, longer than the redirection limit used to last); the release
 * of "waited" waits out the split and hands the lock to the waiter.
 */
TEST(cluster_locks_stay_exclusive_while_their_slots_migrate)
{
    const char *names[2] = {"held", "waited"};
    rlock_client *hc, *wc, *bc;
    rlock_mutex *hm[2], *bm[2], *wm;
    rlock_owner *o, *wo;
    rlock_mutex_opts mo;
    prober pr[2];
    actor un, w;
    int src[2], dst[2], i;
    long long slot[2];
    char key[32];
    int64_t left = 0, t0;

    start_cluster();
    hc = cluster_client(900, 8000);
    wc = cluster_client(0, 8000);
    bc = cluster_client(0, 8000);
    o = rlock_owner_new(NULL);
    wo = rlock_owner_new(NULL);
    CHECK(o != NULL && wo != NULL);
    rlock_mutex_opts_init(&mo);
    mo.on_lost = rt_count_lost;
    atomic_store(&rt_lost_calls, 0);
    for (i = 0; i < 2; i++) {
        uint64_t token;
        snprintf(key, sizeof key, "{rlock:%s}", names[i]);
        hm[i] = rt_mutex(hc, names[i], &mo);
        bm[i] = rt_mutex(bc, names[i], NULL);
        CHECK_RC(rlock_mutex_lock_as(hm[i], o), RLOCK_OK);
        CHECK_RC(rlock_mutex_fence_as(hm[i], o, &token), RLOCK_OK);
        src[i] = owner_of(key);
        dst[i] = (src[i] + 1) % NODES;
        slot[i] = rt_cmd_int(nodes[src[i]], "CLUSTER KEYSLOT %s", key);
    }
    CHECK(slot[0] != slot[1]);
    wm = rt_mutex(wc, "waited", NULL);
    actor_start(&w, wm, wo, 1);
    RT_WAIT_UNTIL(node_with("{rlock:waited}:queue") == src[1], 5000);
    for (i = 0; i < 2; i++)
        prober_start(&pr[i], bm[i]);
    rt_sleep_ms(100);

    for (i = 0; i < 2; i++)
        migration_start(src[i], dst[i], slot[i]);
    /* "waited" split: its lock on the importing node, the rest not. */
    migrate_keys(src[1], dst[1], slot[1], "{rlock:waited}");
    rt_sleep_ms(2000);
    /* The release of "waited" (the full script: a waiter is queued)
     * waits for the keys to be on one side. */
    actor_start(&un, hm[1], o, 0);
    rt_sleep_ms(500);
    CHECK_INT(atomic_load(&un.done), ==, 0);
    CHECK_INT(atomic_load(&w.done), ==, 0);
    /* Every key moved: "waited" is served by the importing node, "held"
     * meets TRYAGAIN there until the slot is its own. */
    for (i = 0; i < 2; i++)
        migrate_keys(src[i], dst[i], slot[i], NULL);
    RT_WAIT_UNTIL(atomic_load(&un.done), 5000);
    pthread_join(un.thread, NULL);
    CHECK_RC(un.rc, RLOCK_OK);
    rt_sleep_ms(2000);
    t0 = rt_now_ms();
    for (i = 0; i < 2; i++)
        migration_end(dst[i], slot[i]);
    /* The waiter was handed the lock; it returns at once, or, if it was
     * refreshing its place when the grant came, once that request is
     * served (the grant deleted the queue keys it names: TRYAGAIN until
     * the slot is the new node's). */
    RT_WAIT_UNTIL(atomic_load(&w.done), 3000);
    CHECK_RC(w.rc, RLOCK_OK);

    prober_check(&pr[0], "held");
    prober_check(&pr[1], "waited");
    /* The trylocks of "held" ended with its migration, and one waited
     * out the whole TRYAGAIN window (about 4.7 s). */
    CHECK_INT(rt_now_ms() - t0, <, 2500);
    CHECK_INT(pr[0].longest_ms, >=, 4000);
    CHECK(pr[0].tries >= 3 && pr[1].tries >= 3);
    /* Renewed all along (5 s of a 900 ms lease), now on the new owner. */
    CHECK_INT(atomic_load(&rt_lost_calls), ==, 0);
    CHECK_RC(rlock_mutex_lease_left_as(hm[0], o, &left), RLOCK_OK);
    CHECK(left > 0);
    CHECK_INT(node_with("{rlock:held}"), ==, dst[0]);
    CHECK_RC(rlock_mutex_unlock_as(hm[0], o), RLOCK_OK);
    atomic_store(&w.let_go, 1);
    pthread_join(w.thread, NULL);
    CHECK_RC(w.unlock_rc, RLOCK_OK);
    for (i = 0; i < 2; i++) {
        CHECK_RC(rlock_mutex_trylock(bm[i]), RLOCK_OK);
        CHECK_RC(rlock_mutex_unlock(bm[i]), RLOCK_OK);
        rlock_mutex_free(hm[i]);
        rlock_mutex_free(bm[i]);
    }
    rlock_mutex_free(wm);
    rlock_owner_free(o);
    rlock_owner_free(wo);
    rlock_client_close(hc);
    rlock_client_close(wc);
    rlock_client_close(bc);
    stop_cluster();
}

/* A name whose lock shares the slot of name's lock ("{rlock:NAME}"), into
 * out: asked of the server (CLUSTER KEYSLOT, pipelined) until one is
 * found. */
static void name_in_slot_of(const char *name, char *out, size_t len)
{
    redisContext *ctx = rt_server_ctx(nodes[0]);
    long long want = rt_cmd_int(nodes[0], "CLUSTER KEYSLOT {rlock:%s}", name);
    int base, i, found = -1;

    for (base = 0; found < 0 && base < 64 * 4096; base += 4096) {
        for (i = 0; i < 4096; i++)
            redisAppendCommand(ctx, "CLUSTER KEYSLOT {rlock:s%d}", base + i);
        for (i = 0; i < 4096; i++) {
            redisReply *r = NULL;
            CHECK(redisGetReply(ctx, (void **)&r) == REDIS_OK && r != NULL);
            if (found < 0 && r->type == REDIS_REPLY_INTEGER &&
                r->integer == want)
                found = base + i;
            freeReplyObject(r);
        }
    }
    CHECK(found >= 0);
    snprintf(out, len, "s%d", found);
}

/*
 * The watchdog renews the holds of one slot in one script. While a
 * migration has moved one lock's key and not the other's, that script is
 * refused (TRYAGAIN) for as long as the keys stay split; each hold is then
 * renewed alone (a one-key script is served on either side). Split for
 * four leases: nothing is lost.
 */
TEST(cluster_holds_sharing_a_slot_are_renewed_while_their_keys_are_split)
{
    rlock_client *c;
    rlock_mutex *m[2];
    rlock_mutex_opts mo;
    char names[2][32] = {"pair", ""};
    int src, dst, i;
    long long slot;

    start_cluster();
    name_in_slot_of(names[0], names[1], sizeof names[1]);
    c = cluster_client(600, 2000);
    rlock_mutex_opts_init(&mo);
    mo.on_lost = rt_count_lost;
    atomic_store(&rt_lost_calls, 0);
    for (i = 0; i < 2; i++) {
        m[i] = rt_mutex(c, names[i], &mo);
        CHECK_RC(rlock_mutex_lock(m[i]), RLOCK_OK);
    }
    src = owner_of("{rlock:pair}");
    dst = (src + 1) % NODES;
    slot = rt_cmd_int(nodes[src], "CLUSTER KEYSLOT {rlock:pair}");
    migration_start(src, dst, slot);
    migrate_keys(src, dst, slot, "{rlock:pair}");
    rt_sleep_ms(2400);
    CHECK_INT(atomic_load(&rt_lost_calls), ==, 0);
    migrate_keys(src, dst, slot, NULL);
    migration_end(dst, slot);
    rt_sleep_ms(600);
    CHECK_INT(atomic_load(&rt_lost_calls), ==, 0);
    for (i = 0; i < 2; i++) {
        char key[48];
        snprintf(key, sizeof key, "{rlock:%s}", names[i]);
        CHECK_INT(node_with(key), ==, dst);
        CHECK_RC(rlock_mutex_unlock(m[i]), RLOCK_OK);
        rlock_mutex_free(m[i]);
    }
    rlock_client_close(c);
    stop_cluster();
}

/* A call that met TRYAGAIN until its deadline: RLOCK_EUNAVAILABLE within
 * it (2 s) and a little more, with a message naming the migration. */
static void unavailable_while_migrating(rlock_mutex *m, long long slot)
{
    char want[64];
    int64_t t0 = rt_now_ms(), took;
    const char *msg;

    CHECK_RC(rlock_mutex_trylock(m), RLOCK_EUNAVAILABLE);
    took = rt_now_ms() - t0;
    msg = rlock_client_errmsg(rlock_mutex_client(m));
    fprintf(stderr, "trylock: %lld ms: %s\n", (long long)took, msg);
    CHECK_INT(took, >=, 1800);
    CHECK_INT(took, <, 2500);
    snprintf(want, sizeof want, "slot %lld of cluster", slot);
    CHECK(strstr(msg, want) != NULL);
    CHECK(strstr(msg, "is migrating") != NULL);
    CHECK(strstr(msg, "TRYAGAIN") != NULL);
}

/*
 * A migration that does not end: the lock's keys all on the source, then
 * split, then all on the importing node. A request naming its queue keys
 * meets TRYAGAIN at every stage; it is asked again until the call's
 * deadline and then says so (RLOCK_EUNAVAILABLE), neither sooner (the
 * redirection limit) nor later, nor with the raw ASK or TRYAGAIN. The
 * holder's one-key requests (an extension) are served throughout.
 */
TEST(cluster_a_migration_that_outlasts_the_deadline_is_unavailable)
{
    rlock_client *hc, *bc;
    rlock_mutex *hm, *bm;
    rlock_status st;
    uint64_t token;
    int src, dst;
    long long slot;

    start_cluster();
    hc = rt_client(url, NULL);
    bc = rt_client(url, NULL); /* the command timeout: 2 s */
    hm = rt_mutex(hc, "stuck", NULL);
    bm = rt_mutex(bc, "stuck", NULL);
    CHECK_RC(rlock_mutex_lock(hm), RLOCK_OK);
    CHECK_RC(rlock_mutex_fence(hm, &token), RLOCK_OK);
    src = owner_of("{rlock:stuck}");
    dst = (src + 1) % NODES;
    slot = rt_cmd_int(nodes[src], "CLUSTER KEYSLOT {rlock:stuck}");
    migration_start(src, dst, slot);
    unavailable_while_migrating(bm, slot);
    CHECK_RC(rlock_mutex_status(bm, &st), RLOCK_EUNAVAILABLE);
    migrate_keys(src, dst, slot, "{rlock:stuck}");
    unavailable_while_migrating(bm, slot);
    CHECK_RC(rlock_mutex_extend(hm, 20000), RLOCK_OK);
    migrate_keys(src, dst, slot, NULL);
    unavailable_while_migrating(bm, slot);
    CHECK_RC(rlock_mutex_extend(hm, 20000), RLOCK_OK);
    migration_end(dst, slot);
    CHECK_RC(rlock_mutex_trylock(bm), RLOCK_EBUSY);
    CHECK_RC(rlock_mutex_status(bm, &st), RLOCK_OK);
    CHECK(st.held && st.token == token);
    CHECK_RC(rlock_mutex_unlock(hm), RLOCK_OK);
    CHECK_RC(rlock_mutex_trylock(bm), RLOCK_OK);
    CHECK(rlock_mutex_token(bm) > token);
    CHECK_RC(rlock_mutex_unlock(bm), RLOCK_OK);
    rlock_mutex_free(hm);
    rlock_mutex_free(bm);
    rlock_client_close(hc);
    rlock_client_close(bc);
    stop_cluster();
}

TEST(cluster_bad_urls_are_refused)
{
    static const char *const bad[] = {
        "redis-cluster://",
        "redis-cluster://127.0.0.1:1/0",
        "redis-cluster://u:p@127.0.0.1:1",
        "redis-cluster://127.0.0.1:1?x=1",
        "redis-cluster://127.0.0.1:1,,127.0.0.1:2",
        "redis-cluster://127.0.0.1:99999",
    };

    rt_check_urls_refused(bad, sizeof bad / sizeof bad[0]);
}

TEST(a_cluster_that_is_down_is_unavailable)
{
    rlock_client *c = rt_client(start_cluster(), NULL);
    rlock_mutex *m = rt_mutex(c, "down", NULL);
    int owner = owner_of("{rlock:down}");
    long long slot = rt_cmd_int(nodes[owner], "CLUSTER KEYSLOT {rlock:down}");

    /* The owner gives the slot up: with full coverage required, it says
     * the cluster is down. */
    freeReplyObject(rt_cmd(nodes[owner], "CLUSTER DELSLOTS %lld", slot));
    RT_WAIT_UNTIL(!rt_cluster_ok(nodes[owner]), 10000);
    CHECK_RC(rlock_mutex_trylock(m), RLOCK_EUNAVAILABLE);
    CHECK(strstr(rlock_client_errmsg(c), "CLUSTERDOWN") != NULL);
    freeReplyObject(rt_cmd(nodes[owner], "CLUSTER ADDSLOTS %lld", slot));
    RT_WAIT_UNTIL(rlock_mutex_trylock(m) == RLOCK_OK, 20000);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    rlock_mutex_free(m);
    rlock_client_close(c);
    stop_cluster();
}

/* Moves slot of the node src to the node dst at once, keys and all. */
static void move_slot(int src, int dst, long long slot)
{
    migration_start(src, dst, slot);
    migrate_keys(src, dst, slot, NULL);
    migration_end(dst, slot);
}

/*
 * The native release of a calm hold is the server's own compare-and-
 * delete (DELIFEQ on the newest Valkey). Its slot moved to another master
 * while it was held: the command meets MOVED, which is followed; the full
 * release script is not sent in its place.
 */
TEST(cluster_a_native_release_follows_moved)
{
    rlock_client *c;
    rlock_mutex *m;
    int src, dst;
    long long slot;

    c = rt_client(start_cluster_of(rt_newest_valkey_binary()), NULL);
    m = rt_mutex(c, "moving", NULL);
    /* One pair first: the client settles on the command the server has. */
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    src = owner_of("{rlock:moving}");
    dst = (src + 1) % NODES;
    slot = rt_cmd_int(nodes[src], "CLUSTER KEYSLOT {rlock:moving}");
    move_slot(src, dst, slot);
    CHECK_INT(rt_cmd_int(nodes[dst], "EXISTS {rlock:moving}"), ==, 1);
    freeReplyObject(rt_cmd(nodes[dst], "CONFIG RESETSTAT"));
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    CHECK_INT(rt_cmd_int(nodes[dst], "EXISTS {rlock:moving}"), ==, 0);
    CHECK_INT(rt_cmdstat_calls(nodes[dst], "delifeq"), ==, 1);
    CHECK_INT(rt_cmdstat_calls(nodes[dst], "evalsha") +
                  rt_cmdstat_calls(nodes[dst], "eval"),
              ==, 0);
    rlock_mutex_free(m);
    rlock_client_close(c);
    stop_cluster();
}

static void cluster_take_away(const char *name, void *arg)
{
    char key[128];
    int k;

    (void)arg;
    snprintf(key, sizeof key, "{rlock:%s}", name);
    CHECK((k = owner_of(key)) >= 0);
    CHECK_INT(rt_cmd_int(nodes[k], "DEL %s", key), ==, 1);
}

/* The event-loop API on a cluster: each request to the master of its
 * slot, the wait woken on the releasing node, all on one loop. */
TEST(async_on_cluster)
{
    rt_async_deployment("cluster", start_cluster(), NULL, 1000,
                        cluster_take_away, NULL);
    stop_cluster();
}

/*
 * A loop never waits for a cluster node asked for the slot map. The
 * first seed accepts connections and answers nothing: rlock_async_open
 * returns at once, and the first lock asks that seed for its connect
 * timeout, then the next, as exchanges the loop waits for like any
 * other. (Read inside the request's routing, as before, the map held the
 * loop for the connect timeout at open.) With no node that answers, the
 * lock fails naming the last.
 */
TEST(async_on_cluster_never_waits_for_a_node)
{
    rt_fake *silent = rt_fake_start(RT_FAKE_SILENT, 1);
    const char *real = start_cluster(), *fport;
    rlock_async *a;
    rlock_async_mutex *m;
    char u[320], msg[512];
    rt_aloop p;

    fport = strrchr(rt_fake_url(silent), ':') + 1;
    snprintf(u, sizeof u, "redis-cluster://127.0.0.1:%s,%s", fport,
             real + strlen("redis-cluster://"));
    a = rt_async_past_a_silent_node(&p, "cluster", u, "clu-loop", 600, &m);
    CHECK(node_with("{rlock:clu-loop}") >= 0);
    CHECK_RC(rt_al_unlock(&p, m), RLOCK_OK);
    rlock_async_mutex_free(m);
    rlock_async_close(a);
    CHECK_INT(p.n, ==, 0);

    /* Only the silent seed: the lock fails on time, the loop free. */
    snprintf(u, sizeof u, "redis-cluster://127.0.0.1:%s", fport);
    CHECK_RC(rt_async_nobody_answers(&p, "cluster", u, "clu-loop", 600, msg,
                                     sizeof msg),
             RLOCK_ECONNECT);
    CHECK(strstr(msg, "answered CLUSTER SLOTS") != NULL);
    CHECK(strstr(msg, fport) != NULL);
    rt_fake_stop(silent);
    stop_cluster();
}
