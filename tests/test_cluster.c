/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Redis Cluster (redis-cluster://): three masters made into a cluster by
 * redis-cli --cluster create. Locks spread over many slots hold and renew
 * (a renewal script never mixes slots), a release on one node wakes a
 * waiter whose subscriber connection is to another, and a slot migrated
 * under a held lock is followed (ASK while it moves, MOVED after).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    rlock_mutex_free(m);
    rlock_mutex_free(mo);
    rlock_client_close(c);
    rlock_client_close(other);
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
    char *src_id = node_id(nodes[src]), *dst_id = node_id(nodes[dst]);
    redisReply *keys;
    int i;

    freeReplyObject(
        rt_cmd(nodes[dst], "CLUSTER SETSLOT %lld IMPORTING %s", slot, src_id));
    freeReplyObject(
        rt_cmd(nodes[src], "CLUSTER SETSLOT %lld MIGRATING %s", slot, dst_id));
    keys = rt_cmd(nodes[src], "CLUSTER GETKEYSINSLOT %lld 100", slot);
    CHECK(keys->type == REDIS_REPLY_ARRAY);
    for (i = 0; i < (int)keys->elements; i++)
        freeReplyObject(rt_cmd(nodes[src], "MIGRATE 127.0.0.1 %d %s 0 5000",
                               rt_server_port(nodes[dst]),
                               keys->element[i]->str));
    freeReplyObject(keys);
    for (i = 0; i < NODES; i++)
        freeReplyObject(
            rt_cmd(nodes[i], "CLUSTER SETSLOT %lld NODE %s", slot, dst_id));
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
