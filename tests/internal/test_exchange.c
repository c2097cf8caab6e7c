/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The node exchange (backend/node.h, rlock__xchg) driven by hand, as an
 * event loop drives it: the test watches the descriptors the rounds name,
 * with poll(2) calls that never wait, and hands readiness back. Nothing
 * the exchange does may block the loop: each turn is timed.
 */
#include <poll.h>
#include <stdio.h>
#include <string.h>

#include "backend/node.h"
#include "harness/fake_server.h"
#include "harness/server.h"
#include "harness/test.h"
#include "util/clock.h"

/* A script that no server knows by this digest: the first round is
 * answered NOSCRIPT, and the exchange sends the body in a second. */
static const rlock__script echo = {
    "echo", "return ARGV[1]",
    14,     "0000000000000000000000000000000000000000",
    NULL,   0};

static const rlock__script ping = {"ping", NULL, 0, NULL, "PING", 0};

static rlock__node_cfg cfg_init(void)
{
    rlock__node_cfg cfg;

    memset(&cfg, 0, sizeof cfg);
    cfg.connect_timeout_ms = 1000;
    cfg.request_timeout_ms = 1000;
    cfg.sync_timeout_ms = 1000;
    cfg.max_connections = 4;
    cfg.wait_for_connection = 0;
    return cfg;
}

/* The loop: drives the exchanges xs[0..n) round by round, interleaved,
 * never waiting in a system call for more than 1 ms. Returns the longest
 * turn in microseconds; counts rounds in *rounds. */
typedef struct driven {
    rlock__xchg x;
    rlock__conn *conns[RLOCK__NODES_MAX];
    size_t want[RLOCK__NODES_MAX];
    int64_t until;
    int live;
    int rounds;
    int turns; /* turns of the loop while this exchange was live */
} driven;

static int64_t drive(driven *d, int n)
{
    int64_t longest = 0;
    int i, k, left = n;

    for (i = 0; i < n; i++) {
        d[i].live =
            rlock__xchg_round(&d[i].x, d[i].conns, d[i].want, &d[i].until);
        left -= !d[i].live;
    }
    while (left > 0) {
        struct pollfd fds[64];
        int who[64], which[64], nfds = 0, r;
        int64_t t0;

        for (i = 0; i < n; i++)
            for (k = 0; d[i].live && k < d[i].x.n; k++) {
                rlock__conn *c = d[i].conns[k];
                if (rlock__conn_settled(c, d[i].want[k]))
                    continue;
                fds[nfds].fd = rlock__conn_fd(c);
                fds[nfds].events = rlock__conn_events(c);
                fds[nfds].revents = 0;
                who[nfds] = i;
                which[nfds++] = k;
            }
        for (i = 0; i < n; i++)
            d[i].turns += d[i].live;
        r = poll(fds, (nfds_t)nfds, 1);
        CHECK(r >= 0);
        t0 = rlock__now_ns();
        for (k = 0; k < nfds; k++) {
            rlock__conn *c = d[who[k]].conns[which[k]];
            if (fds[k].revents || rlock__conn_buffered(c))
                rlock__conn_io(c, fds[k].revents);
        }
        for (i = 0; i < n; i++) {
            int settled = 1;
            if (!d[i].live)
                continue;
            for (k = 0; k < d[i].x.n; k++)
                settled &= rlock__conn_settled(d[i].conns[k], d[i].want[k]);
            if (!settled && rlock__now_ns() < d[i].until)
                continue;
            rlock__xchg_after(&d[i].x);
            d[i].rounds++;
            d[i].live =
                rlock__xchg_round(&d[i].x, d[i].conns, d[i].want, &d[i].until);
            left -= !d[i].live;
        }
        if (rlock__now_ns() - t0 > longest)
            longest = rlock__now_ns() - t0;
    }
    return longest / 1000;
}

/*
 * Two requests on one node, driven in one loop at once: each takes a
 * connection of its own; the script's request meets NOSCRIPT and is sent
 * again with the body in a second round; both answers are right, and
 * every turn of the loop is short.
 */
TEST(an_exchange_is_driven_by_readiness_and_never_blocks_the_loop)
{
    rt_server *s = rt_server_start(NULL);
    rlock__node_cfg cfg = cfg_init();
    rlock__node *node;
    rlock__results res[2];
    rlock__req req[2];
    driven d[2];
    int64_t longest;

    CHECK_RC(rlock__node_new(&cfg, "127.0.0.1", rt_server_port(s), NULL, NULL,
                             &node),
             RLOCK_OK);
    rlock__req_init(&req[0], &echo);
    rlock__req_args(&req[0], "hello");
    CHECK_RC(rlock__req_finish(&req[0]), RLOCK_OK);
    rlock__req_init(&req[1], &ping);
    CHECK_RC(rlock__req_finish(&req[1]), RLOCK_OK);
    memset(d, 0, sizeof d);
    CHECK_RC(rlock__results_reserve(&res[0], 1), RLOCK_OK);
    CHECK_RC(rlock__results_reserve(&res[1], 1), RLOCK_OK);
    rlock__xchg_start(&d[0].x, &node, 1, &req[0], 0, rlock__after_ms(5000),
                      &res[0]);
    rlock__xchg_start(&d[1].x, &node, 1, &req[1], 0, rlock__after_ms(5000),
                      &res[1]);
    /* Nothing is written before the loop drives it. */
    CHECK(rlock__conn_sent(d[0].x.legs[0].conn) == 0);
    CHECK(d[0].x.legs[0].conn != d[1].x.legs[0].conn);
    longest = drive(d, 2);
    printf("longest turn %lld us; rounds %d and %d\n", (long long)longest,
           d[0].rounds, d[1].rounds);
    CHECK_RC(res[0].r[0].rc, RLOCK_OK);
    CHECK(res[0].r[0].reply->type == REDIS_REPLY_STRING &&
          strcmp(res[0].r[0].reply->str, "hello") == 0);
    /* EVALSHA, answered NOSCRIPT, then EVAL: one round more. */
    CHECK_INT(d[0].rounds, ==, d[1].rounds + 1);
    CHECK_RC(res[1].r[0].rc, RLOCK_OK);
    CHECK(res[1].r[0].reply->type == REDIS_REPLY_STATUS &&
          strcmp(res[1].r[0].reply->str, "PONG") == 0);
    CHECK_INT(longest, <, 200000); /* generous: a busy machine */
    rlock__results_free(&res[0]);
    rlock__results_free(&res[1]);
    rlock__req_free(&req[0]);
    rlock__req_free(&req[1]);
    rlock__node_free(node);
    rt_server_stop(s);
}

/*
 * A server that never answers: the round ends at the exchange's deadline
 * by the loop's own clock (the loop kept turning meanwhile), the result
 * says no reply and that the request was sent, and the connection still
 * owes its answer: it is not handed out again (the next exchange on the
 * node opens another).
 */
TEST(an_exchange_with_a_silent_server_ends_at_its_deadline)
{
    rt_fake *f = rt_fake_start(RT_FAKE_SILENT, 1);
    rlock__node_cfg cfg = cfg_init();
    rlock__node *node;
    rlock__results res;
    rlock__req req;
    driven d;
    int64_t t0, took_ms, longest;
    int port;

    CHECK(sscanf(rt_fake_url(f), "redis://127.0.0.1:%d", &port) == 1);
    CHECK_RC(rlock__node_new(&cfg, "127.0.0.1", port, NULL, NULL, &node),
             RLOCK_OK);
    rlock__req_init(&req, &ping);
    CHECK_RC(rlock__req_finish(&req), RLOCK_OK);
    memset(&d, 0, sizeof d);
    t0 = rlock__now_ns();
    CHECK_RC(rlock__results_reserve(&res, 1), RLOCK_OK);
    rlock__xchg_start(&d.x, &node, 1, &req, 0, rlock__after_ms(300), &res);
    longest = drive(&d, 1);
    took_ms = (rlock__now_ns() - t0) / RLOCK__NS_PER_MS;
    printf("ended after %lld ms, longest turn %lld us: %s\n",
           (long long)took_ms, (long long)longest, res.r[0].err.msg);
    CHECK_RC(res.r[0].rc, RLOCK_ENOREPLY);
    CHECK(res.r[0].sent == 1);
    CHECK_INT(took_ms, <, 3000);
    CHECK_INT(longest, <, 200000);
    /* Polls of 1 ms for 300 ms: many turns, even on a busy machine. */
    CHECK_INT(d.turns, >=, 10);
    rlock__results_free(&res);
    /* The next exchange does not get the connection that owes. */
    memset(&d, 0, sizeof d);
    CHECK_RC(rlock__results_reserve(&res, 1), RLOCK_OK);
    rlock__xchg_start(&d.x, &node, 1, &req, 0, rlock__after_ms(100), &res);
    CHECK(d.x.legs[0].conn != NULL && d.x.legs[0].fresh == 1);
    drive(&d, 1);
    CHECK_RC(res.r[0].rc, RLOCK_ENOREPLY);
    rlock__results_free(&res);
    rlock__req_free(&req);
    rlock__node_free(node);
    rt_fake_stop(f);
}

static int served_count;

static void count_served(void *arg)
{
    (void)arg;
    served_count++;
}

/*
 * A loop's leg that waits for a pooled connection (RLOCK__X_NOWAIT, the
 * node's only connection busy) is served the moment the connection comes
 * back, and its driver is told then (not at the leg's next look, a pause
 * later); it then runs on that connection.
 */
TEST(a_queued_leg_is_told_when_a_connection_comes_back)
{
    rt_server *s = rt_server_start(NULL);
    rlock__node_cfg cfg = cfg_init();
    rlock__node *node;
    rlock__results res[2];
    rlock__req req;
    driven d[2];

    cfg.max_connections = 1;
    cfg.wait_for_connection = 1;
    CHECK_RC(rlock__node_new(&cfg, "127.0.0.1", rt_server_port(s), NULL, NULL,
                             &node),
             RLOCK_OK);
    rlock__req_init(&req, &ping);
    CHECK_RC(rlock__req_finish(&req), RLOCK_OK);
    memset(d, 0, sizeof d);
    served_count = 0;
    CHECK_RC(rlock__results_reserve(&res[0], 1), RLOCK_OK);
    CHECK_RC(rlock__results_reserve(&res[1], 1), RLOCK_OK);
    rlock__xchg_start(&d[0].x, &node, 1, &req, RLOCK__X_NOWAIT,
                      rlock__after_ms(5000), &res[0]);
    d[1].x.served = count_served;
    rlock__xchg_start(&d[1].x, &node, 1, &req, RLOCK__X_NOWAIT,
                      rlock__after_ms(5000), &res[1]);
    CHECK(d[0].x.legs[0].conn != NULL);
    CHECK(rlock__xchg_pooling(&d[1].x));
    CHECK_INT(served_count, ==, 0);
    /* The first exchange ends and gives its connection back: the second,
     * not driven meanwhile, is served at that moment. */
    drive(&d[0], 1);
    CHECK_RC(res[0].r[0].rc, RLOCK_OK);
    CHECK_INT(served_count, ==, 1);
    drive(&d[1], 1);
    CHECK_RC(res[1].r[0].rc, RLOCK_OK);
    CHECK(res[1].r[0].reply->type == REDIS_REPLY_STATUS &&
          strcmp(res[1].r[0].reply->str, "PONG") == 0);
    rlock__results_free(&res[0]);
    rlock__results_free(&res[1]);
    rlock__req_free(&req);
    rlock__node_free(node);
    rt_server_stop(s);
}
