/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Host names looked up without blocking (net/resolve.h): inside a call's
 * deadline for the blocking API, and on the loop without stalling it for
 * the event-loop API, against a DNS server of the tests' own
 * (harness/fake_dns.h) that answers, is slow, is silent, says the name
 * does not exist, or answers what is not DNS.
 */
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rlock/async.h>
#include <rlock/rlock.h>

#include "harness/aloop.h"
#include "harness/fake_dns.h"
#include "harness/server.h"
#include "harness/test.h"
#include "net/conn.h"
#include "net/resolve.h"
#include "util/clock.h"

/* A name no resolver but the fake one knows. */
#define NAME "redis.rlock.test"

/* Open descriptors of this process, in *set if given (fd < 1024);
 * *cloexec: all of those not in was (NULL: none) are close-on-exec. */
static int count_fds(const char *was, char *set, int *cloexec)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    int n = 0;

    CHECK(d != NULL);
    if (cloexec)
        *cloexec = 1;
    if (set)
        memset(set, 0, 1024);
    while ((e = readdir(d)) != NULL) {
        int fd;
        if (e->d_name[0] == '.')
            continue;
        fd = atoi(e->d_name);
        if (fd == dirfd(d))
            continue;
        n++;
        if (set && fd < 1024)
            set[fd] = 1;
        if (cloexec && fd < 1024 && !(was && was[fd]) &&
            !(fcntl(fd, F_GETFD) & FD_CLOEXEC)) {
            fprintf(stderr, "descriptor %d is not close-on-exec\n", fd);
            *cloexec = 0;
        }
    }
    closedir(d);
    return n;
}

static rlock__endpoint endpoint(int port)
{
    rlock__endpoint ep;

    memset(&ep, 0, sizeof ep);
    ep.host = NAME;
    ep.port = port;
    return ep;
}

/* A DNS server of the tests' own, which every later lookup asks. */
static rt_dns *dns(rt_dns_mode mode, int delay_ms)
{
    rt_dns *d = rt_dns_start(mode, delay_ms);

    rlock__resolve_test_servers(rt_dns_addr(d));
    return d;
}

/* Default options but for the two timeouts. */
static void timeouts(rlock_client_opts *o, int connect_ms, int command_ms)
{
    rlock_client_opts_init(o);
    o->connect_timeout_ms = connect_ms;
    o->command_timeout_ms = command_ms;
}

/* Opens a connection to NAME by deadline_ms: its status, the text in
 * *ne, the time it took in *took_ms; a PING is answered if it opened. */
static int open_by_name(int port, int64_t deadline_ms, rlock__neterr *ne,
                        int64_t *took_ms)
{
    rlock__endpoint ep = endpoint(port);
    rlock__conn *c = NULL;
    int64_t t0 = rt_now_ms();
    int rc = rlock__conn_open(&ep, rlock__after_ms(deadline_ms), &c, ne);

    *took_ms = rt_now_ms() - t0;
    if (rc == RLOCK_OK) {
        const char *ping[] = {"PING"};
        size_t one = 1;
        redisReply *r = NULL;
        CHECK_RC(rlock__conn_append(c, 1, ping, NULL), RLOCK_OK);
        CHECK_RC(rlock__net_run(&c, 1, &one, rlock__after_ms(5000)), RLOCK_OK);
        CHECK(rlock__conn_take(c, &r) == 1);
        CHECK(r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0);
        freeReplyObject(r);
        rlock__conn_close(c);
    }
    return rc;
}

TEST(a_name_is_looked_up_inside_the_deadline_and_never_blocks)
{
    rt_server *s = rt_server_start(NULL);
    int port = rt_server_port(s), before, after, cloexec, rc;
    rlock__endpoint ep = endpoint(port);
    rlock__neterr ne;
    rlock__conn *c = NULL;
    int64_t took, longest = 0, t0;
    rt_dns *d;
    char had[1024];
    int fd, i;
    static const struct {
        const char *what;
        rt_dns_mode mode;
        int64_t deadline_ms, at_least_ms;
        int want;
        const char *says;
    } fails[] = {
        {"silent server", RT_DNS_SILENT, 400, 350, RLOCK_ENOREPLY,
         "not resolved"},
        {"no such name", RT_DNS_NXDOMAIN, 3000, 0, RLOCK_ECONNECT,
         "cannot resolve " NAME ": Domain name not found"},
        {"not DNS", RT_DNS_GARBAGE, 3000, 0, RLOCK_ECONNECT,
         "cannot resolve " NAME},
    };

    if (!rlock__resolve_async()) {
        /* Built without c-ares: names go to getaddrinfo(3), as the
         * header says; an address still connects. */
        rlock__resolve *r = NULL;
        CHECK_INT(rlock__resolve_start(NAME, &r, &ne), ==,
                  RLOCK__RESOLVE_BLOCKING);
        printf("built without c-ares: lookups block (not tested here)\n");
        rt_server_stop(s);
        return;
    }
    before = count_fds(NULL, had, NULL);

    /* Answered (100 ms late, so that the lookup is surely under way
     * when the start returns: an answer at once may be read by the
     * start's own look): its descriptors close-on-exec; the socket then
     * takes its number. */
    d = dns(RT_DNS_ANSWER, 100);
    CHECK_RC(rlock__conn_start(&ep, &c, &ne), RLOCK_OK);
    CHECK_INT(rlock__conn_stage(c), ==, RLOCK__CONN_RESOLVING);
    CHECK(rlock__conn_events(c) == POLLIN);
    fd = rlock__conn_fd(c);
    CHECK_INT(count_fds(had, NULL, &cloexec), >=, before + 3);
    CHECK(cloexec);
    {
        const char *ping[] = {"PING"};
        size_t one = 1;
        redisReply *r = NULL;
        CHECK_RC(rlock__conn_append(c, 1, ping, NULL), RLOCK_OK);
        CHECK_RC(rlock__net_run(&c, 1, &one, rlock__after_ms(5000)), RLOCK_OK);
        CHECK(rlock__conn_error(c)->code == 0);
        CHECK(rlock__conn_take(c, &r) == 1);
        CHECK(r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0);
        freeReplyObject(r);
    }
    CHECK_INT(rlock__conn_fd(c), ==, fd);
    CHECK(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    CHECK_INT(rt_dns_asked(d), >=, 1);
    rlock__conn_close(c);
    rt_dns_stop(d);
    CHECK_INT(count_fds(NULL, NULL, NULL), ==, before);

    /* Slow (each answer 300 ms late): driven as a loop drives it, with
     * polls that never wait, no step of the connection takes long. */
    d = dns(RT_DNS_ANSWER, 300);
    CHECK_RC(rlock__conn_start(&ep, &c, &ne), RLOCK_OK);
    {
        const char *ping[] = {"PING"};
        CHECK_RC(rlock__conn_append(c, 1, ping, NULL), RLOCK_OK);
    }
    t0 = rt_now_ms();
    while (!rlock__conn_settled(c, 1) && rt_now_ms() - t0 < 10000) {
        struct pollfd p = {rlock__conn_fd(c), rlock__conn_events(c), 0};
        int64_t s0;
        poll(&p, 1, 5);
        s0 = rt_now_ms();
        rlock__conn_io(c, p.revents);
        if (rt_now_ms() - s0 > longest)
            longest = rt_now_ms() - s0;
    }
    CHECK(rlock__conn_error(c)->code == 0);
    CHECK_INT(rlock__conn_ready(c), ==, 1);
    CHECK_INT(rt_now_ms() - t0, >=, 250); /* it did wait for the answer */
    printf("slow server: resolved and answered in %lld ms, longest step "
           "%lld ms\n",
           (long long)(rt_now_ms() - t0), (long long)longest);
    CHECK_INT(longest, <, 200); /* (a step that waited: 300 ms at least) */
    rlock__conn_close(c);
    rt_dns_stop(d);
    CHECK_INT(count_fds(NULL, NULL, NULL), ==, before);

    /* Silent: the deadline ends it, not c-ares's tries. No such name,
     * and an answer that is no record: refused at once. */
    for (i = 0; i < (int)(sizeof fails / sizeof fails[0]); i++) {
        d = dns(fails[i].mode, 0);
        rc = open_by_name(port, fails[i].deadline_ms, &ne, &took);
        printf("%s: %d (%s) after %lld ms\n", fails[i].what, rc, ne.msg,
               (long long)took);
        CHECK_RC(rc, fails[i].want);
        CHECK(strstr(ne.msg, fails[i].says) != NULL);
        CHECK_INT(took, >=, fails[i].at_least_ms);
        CHECK_INT(took, <, 2000);
        CHECK_INT(rt_dns_asked(d), >=, 1);
        rt_dns_stop(d);
        CHECK_INT(count_fds(NULL, NULL, NULL), ==, before);
    }

    /* A name longer than DNS allows: refused, not cut to another. */
    {
        char longname[300];
        rlock__endpoint lep = endpoint(port);
        memset(longname, 'a', sizeof longname - 1);
        longname[sizeof longname - 1] = '\0';
        lep.host = longname;
        CHECK_RC(rlock__conn_start(&lep, &c, &ne), RLOCK_ECONNECT);
        CHECK(strstr(ne.msg, "name too long") != NULL);
    }

    rlock__resolve_test_servers(NULL);
    after = count_fds(NULL, NULL, NULL);
    CHECK_INT(after, ==, before);
    rt_server_stop(s);
}

/* A server, and in url "redis://NAME:port" for it; NULL in a build
 * without c-ares, where these tests have nothing to look at. */
static rt_server *server_by_name(char *url, size_t len)
{
    rt_server *s;

    if (!rlock__resolve_async()) {
        printf("built without c-ares: lookups block (not tested here)\n");
        return NULL;
    }
    s = rt_server_start(NULL);
    snprintf(url, len, "redis://" NAME ":%d", rt_server_port(s));
    return s;
}

typedef struct seen {
    int calls, status;
} seen;

static void unlocked(rlock_async_mutex *m, int status, void *arg)
{
    seen *s = arg;

    (void)m;
    s->calls++;
    s->status = status;
}

static void locked(rlock_async_mutex *m, int status, uint64_t token, void *arg)
{
    seen *s = arg;

    (void)m;
    (void)token;
    s->calls++;
    s->status = status;
}

TEST(both_apis_reach_a_server_by_its_name_and_the_loop_never_waits)
{
    rt_server *s;
    rlock_client_opts o;
    rlock_client *bc;
    rlock_mutex *bm;
    rlock_async *a;
    rlock_async_mutex *m1, *m2;
    rt_aloop p;
    seen w;
    rt_dns *d;
    char url[128];
    int err;
    int64_t t0, took;

    if (!(s = server_by_name(url, sizeof url)))
        return;

    /* The blocking API: a slow server's answer within the call. */
    d = dns(RT_DNS_ANSWER, 100);
    bc = rt_client(url, NULL);
    bm = rt_mutex(bc, "resolve-blocking", NULL);
    CHECK_RC(rlock_mutex_lock(bm), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(bm), RLOCK_OK);
    rlock_mutex_free(bm);
    rlock_client_close(bc);
    CHECK_INT(rt_dns_asked(d), >=, 1);
    rt_dns_stop(d);

    /* A silent one: the client's open ends by its connect timeout. */
    d = dns(RT_DNS_SILENT, 0);
    timeouts(&o, 300, 500);
    t0 = rt_now_ms();
    bc = rlock_client_open(url, &o, &err);
    took = rt_now_ms() - t0;
    printf("blocking open, silent DNS: %d (%s) after %lld ms\n", err,
           rlock_strerror(err), (long long)took);
    CHECK(bc == NULL);
    CHECK(err == RLOCK_ENOREPLY || err == RLOCK_ECONNECT);
    CHECK_INT(took, <, 2000);
    rt_dns_stop(d);

    /* The loop: every answer 300 ms late (a lookup asks twice, A and
     * AAAA), for the requests' connections and the subscriber's. No
     * turn waits for it, and each number the loop watches keeps naming
     * the file it registered (aloop.c checks) while the socket takes
     * the lookup's place. */
    d = dns(RT_DNS_ANSWER, 300);
    timeouts(&o, 5000, 5000);
    t0 = rt_now_ms();
    CHECK((a = rlock_async_open(url, &o, &err)) != NULL);
    CHECK_INT(rt_now_ms() - t0, <, 300); /* (a lookup: 600 ms) */
    rt_al_attach(&p, a);
    CHECK((m1 = rlock_async_mutex_new(a, "resolve-async", NULL, &err)) != NULL);
    CHECK((m2 = rlock_async_mutex_new(a, "resolve-async", NULL, &err)) != NULL);
    t0 = rt_now_ms();
    CHECK_RC(rt_al_lock(&p, m1, 0), RLOCK_OK);
    CHECK_INT(rt_now_ms() - t0, >=, 250); /* the lookup was waited for */
    memset(&w, 0, sizeof w);
    CHECK_RC(rlock_async_lock(m2, 20000, locked, &w), RLOCK_OK);
    rt_al_for(&p, 1500); /* m2 queues; the subscriber connects by name */
    CHECK_INT(w.calls, ==, 0);
    t0 = rt_now_ms();
    CHECK_RC(rt_al_unlock(&p, m1), RLOCK_OK);
    rt_al_until(&p, &w.calls, 10000);
    CHECK_INT(w.calls, ==, 1);
    CHECK_RC(w.status, RLOCK_OK);
    printf("loop: hand-over %lld ms after the release; %d turns, longest "
           "%lld ms; %d questions\n",
           (long long)(rt_now_ms() - t0), p.turns, (long long)p.longest_ms,
           rt_dns_asked(d));
    CHECK_RC(rt_al_unlock(&p, m2), RLOCK_OK);
    CHECK_INT(p.longest_ms, <, 250); /* (a turn that waited: 600 ms) */
    rlock_async_mutex_free(m1);
    rlock_async_mutex_free(m2);
    rlock_async_close(a);
    CHECK_INT(p.cleanups, ==, 1);
    rt_dns_stop(d);
    rlock__resolve_test_servers(NULL);
    rt_server_stop(s);
}

/* A lookup that never ends (a silent DNS server) under a lock that is
 * canceled, a handle that is freed, and a client that is closed: each
 * callback runs once with RLOCK_ECANCELED, the loop is told to forget
 * every descriptor before it closes (aloop.c checks), and no descriptor
 * is left open. Then a slow answer that comes after its call was
 * canceled is no harm: the next call resolves afresh and succeeds. */
TEST(a_lookup_under_way_ends_with_its_call_and_leaves_nothing)
{
    rt_server *s;
    rlock_client_opts o;
    rlock_async *a;
    rlock_async_mutex *m1, *m2, *m3;
    rt_aloop p;
    seen w1, w2, w3;
    rt_dns *d;
    char url[128];
    int err, before;

    if (!(s = server_by_name(url, sizeof url)))
        return;
    before = count_fds(NULL, NULL, NULL);
    d = dns(RT_DNS_SILENT, 0);
    timeouts(&o, 20000, 20000);
    CHECK((a = rlock_async_open(url, &o, &err)) != NULL);
    rt_al_attach(&p, a);
    CHECK((m1 = rlock_async_mutex_new(a, "resolve-cancel", NULL, &err)) !=
          NULL);
    CHECK((m2 = rlock_async_mutex_new(a, "resolve-cancel-2", NULL, &err)) !=
          NULL);
    CHECK((m3 = rlock_async_mutex_new(a, "resolve-cancel-3", NULL, &err)) !=
          NULL);
    memset(&w1, 0, sizeof w1);
    memset(&w2, 0, sizeof w2);
    memset(&w3, 0, sizeof w3);
    CHECK_RC(rlock_async_lock(m1, -1, locked, &w1), RLOCK_OK);
    CHECK_RC(rlock_async_lock(m2, 0, locked, &w2), RLOCK_OK);
    CHECK_RC(rlock_async_lock(m3, 5000, locked, &w3), RLOCK_OK);
    rt_al_for(&p, 300);
    CHECK_INT(rt_dns_asked(d), >=, 1);
    CHECK_INT(w1.calls + w2.calls + w3.calls, ==, 0);
    CHECK_INT(p.n, >=, 1); /* a lookup's descriptor is watched */
    CHECK_RC(rlock_async_cancel(m1), RLOCK_OK);
    CHECK_INT(w1.calls, ==, 1);
    CHECK_RC(w1.status, RLOCK_ECANCELED);
    rlock_async_mutex_free(m2);
    CHECK_INT(w2.calls, ==, 1);
    CHECK_RC(w2.status, RLOCK_ECANCELED);
    rt_al_for(&p, 100);
    rlock_async_close(a);
    CHECK_INT(w3.calls, ==, 1);
    CHECK_RC(w3.status, RLOCK_ECANCELED);
    CHECK_INT(p.cleanups, ==, 1);
    rt_dns_stop(d);
    CHECK_INT(count_fds(NULL, NULL, NULL), ==, before);

    /* Answers 800 ms late: the first lock gives up at 400 ms (its lookup
     * is dropped with it); the next one waits and holds. */
    d = dns(RT_DNS_ANSWER, 800);
    timeouts(&o, 400, 400);
    CHECK((a = rlock_async_open(url, &o, &err)) != NULL);
    rt_al_attach(&p, a);
    CHECK((m1 = rlock_async_mutex_new(a, "resolve-late", NULL, &err)) != NULL);
    CHECK_RC(rt_al_lock(&p, m1, 0), RLOCK_ENOREPLY);
    printf("late answer: %s\n", rlock_async_errmsg(m1));
    CHECK_INT(p.longest_ms, <, 300); /* (a turn that waited: 400 ms) */
    rlock_async_close(a);
    rt_dns_stop(d);
    d = dns(RT_DNS_ANSWER, 0);
    CHECK((a = rlock_async_open(url, NULL, &err)) != NULL);
    rt_al_attach(&p, a);
    CHECK((m1 = rlock_async_mutex_new(a, "resolve-late", NULL, &err)) != NULL);
    CHECK_RC(rt_al_lock(&p, m1, 0), RLOCK_OK);
    CHECK_RC(rt_al_unlock(&p, m1), RLOCK_OK);
    rlock_async_mutex_free(m1);
    rlock_async_close(a);
    rt_dns_stop(d);
    rlock__resolve_test_servers(NULL);
    CHECK_INT(count_fds(NULL, NULL, NULL), ==, before);
    rt_server_stop(s);
}

TEST(a_redlock_list_of_names_is_compared_by_deadline_and_never_on_a_loop)
{
    rlock_client_opts o;
    rlock_async *a;
    rlock_client *c;
    rt_dns *d;
    char url[200];
    int err;
    int64_t t0, took;

    if (!rlock__resolve_async()) {
        printf("built without c-ares: lookups block (not tested here)\n");
        return;
    }
    rlock_client_opts_init(&o);
    o.connect_timeout_ms = 600;

    /* Answered: a name and its address are one server, refused at the
     * blocking open, as before c-ares. */
    d = dns(RT_DNS_ANSWER, 0);
    snprintf(url, sizeof url,
             "redlock://" NAME ":7001,127.0.0.1:7002,127.0.0.1:7001");
    c = rlock_client_open(url, &o, &err);
    CHECK(c == NULL);
    CHECK_RC(err, RLOCK_EINVAL);
    CHECK(strstr(rlock_client_errmsg(NULL), "the same server") != NULL);
    rt_dns_stop(d);

    /* Silent: the blocking open's lookups end by its connect timeout
     * (the nodes are then down: no majority, or the same refusal by
     * text); an event loop's open looks nothing up and returns at once. */
    d = dns(RT_DNS_SILENT, 0);
    snprintf(url, sizeof url,
             "redlock://a." NAME ":7001,b." NAME ":7002,c." NAME ":7003");
    t0 = rt_now_ms();
    c = rlock_client_open(url, &o, &err);
    took = rt_now_ms() - t0;
    printf("blocking redlock open, silent DNS: %d after %lld ms\n", err,
           (long long)took);
    CHECK(c == NULL);
    CHECK_INT(took, <, 4 * o.connect_timeout_ms);
    t0 = rt_now_ms();
    CHECK((a = rlock_async_open(url, &o, &err)) != NULL);
    took = rt_now_ms() - t0;
    printf("async redlock open, silent DNS: %lld ms\n", (long long)took);
    CHECK_INT(took, <, 300); /* (the lookups: 600 ms) */
    rlock_async_close(a);
    rt_dns_stop(d);
    rlock__resolve_test_servers(NULL);
}

#ifdef RLOCK_TEST_LIBUV
#include <rlock/adapters/libuv.h>

static void uv_tick(uv_timer_t *t)
{
    (void)t;
}

static void uv_until(uv_loop_t *loop, const int *flag, int64_t ms)
{
    int64_t t0 = rt_now_ms();

    while (!*flag && rt_now_ms() - t0 < ms)
        uv_run(loop, UV_RUN_ONCE);
}
#endif

/* libuv aborts when epoll refuses a change to a registration whose file
 * went away under it: a connection whose socket took its lookup's
 * number without the loop being told would end the test here. */
TEST(a_libuv_loop_follows_a_connection_from_its_lookup_to_its_socket)
{
#ifdef RLOCK_TEST_LIBUV
    rt_server *s;
    rlock_client_opts o;
    rlock_async *a;
    rlock_async_mutex *m1, *m2;
    uv_loop_t loop;
    uv_timer_t tick;
    seen l1, l2;
    rt_dns *d;
    char url[128];
    int err, i;

    if (!(s = server_by_name(url, sizeof url)))
        return;
    d = dns(RT_DNS_ANSWER, 200);
    CHECK(uv_loop_init(&loop) == 0);
    uv_timer_init(&loop, &tick);
    uv_timer_start(&tick, uv_tick, 50, 50);
    timeouts(&o, 5000, 5000);
    CHECK((a = rlock_async_open(url, &o, &err)) != NULL);
    CHECK_RC(rlock_libuv_attach(a, &loop), RLOCK_OK);
    CHECK((m1 = rlock_async_mutex_new(a, "resolve-uv", NULL, &err)) != NULL);
    CHECK((m2 = rlock_async_mutex_new(a, "resolve-uv", NULL, &err)) != NULL);
    memset(&l1, 0, sizeof l1);
    memset(&l2, 0, sizeof l2);
    CHECK_RC(rlock_async_lock(m1, 0, locked, &l1), RLOCK_OK);
    uv_until(&loop, &l1.calls, 10000);
    CHECK_INT(l1.calls, ==, 1);
    CHECK_RC(l1.status, RLOCK_OK);
    CHECK_RC(rlock_async_lock(m2, 20000, locked, &l2), RLOCK_OK);
    {
        static const int never = 0;
        uv_until(&loop, &never, 1500); /* the subscriber connects */
    }
    CHECK_INT(l2.calls, ==, 0);
    memset(&l1, 0, sizeof l1);
    CHECK_RC(rlock_async_unlock(m1, unlocked, &l1), RLOCK_OK);
    uv_until(&loop, &l1.calls, 10000);
    CHECK_RC(l1.status, RLOCK_OK);
    uv_until(&loop, &l2.calls, 10000);
    CHECK_INT(l2.calls, ==, 1);
    CHECK_RC(l2.status, RLOCK_OK);
    printf("libuv: %d questions\n", rt_dns_asked(d));
    rlock_async_mutex_free(m2);
    rlock_async_close(a);
    uv_close((uv_handle_t *)&tick, NULL);
    for (i = 0; i < 10; i++)
        uv_run(&loop, UV_RUN_NOWAIT);
    CHECK_INT(uv_loop_close(&loop), ==, 0);
    rt_dns_stop(d);
    rlock__resolve_test_servers(NULL);
    rt_server_stop(s);
#else
    rt_fail(__FILE__, __LINE__,
            "built without libuv (Debian: libuv1-dev; RLOCK_ADAPTERS)");
#endif
}
