/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Sentinel (redis-sentinel://): one master, two replicas and three
 * sentinels, all real processes. Clients find the master through the
 * sentinels and follow it through a failover (SENTINEL FAILOVER, and a
 * SIGKILLed master during contention); a hold whose key is not on the new
 * master is reported lost.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
