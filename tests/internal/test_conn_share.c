/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * One connection carrying several requests at once (net/conn.h, the
 * marks): each request knows whether any of its bytes went out, takes
 * its own replies only once every reply before them is taken or given
 * up, and gives its replies up wherever they stand in the line, before
 * or after they came, without disturbing the requests around it. The
 * server is a real one; the order of its replies is Redis's own.
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/server.h"
#include "harness/test.h"
#include "net/conn.h"
#include "util/clock.h"

static rlock__conn *open_conn(rt_server *s)
{
    rlock__endpoint ep;
    rlock__neterr ne;
    rlock__conn *c = NULL;

    memset(&ep, 0, sizeof ep);
    ep.host = "127.0.0.1";
    ep.port = rt_server_port(s);
    CHECK_RC(rlock__conn_open(&ep, rlock__after_ms(5000), &c, &ne), RLOCK_OK);
    return c;
}

/* Queues ECHO word, marked in *m first (m NULL: not marked). */
static void echo(rlock__conn *c, rlock__conn_mark_t *m, const char *word)
{
    const char *argv[2] = {"ECHO", word};

    if (m)
        rlock__conn_mark(c, m);
    CHECK_RC(rlock__conn_append(c, 2, argv, NULL), RLOCK_OK);
}

/* Queues ECHO w[i], marked in m[i], for i in [0, n). */
static void echoes(rlock__conn *c, rlock__conn_mark_t *m, const char *const *w,
                   int n)
{
    int i;

    for (i = 0; i < n; i++)
        echo(c, &m[i], w[i]);
}

/* Drives c until the server answered everything written to it. */
static void answered(rlock__conn *c)
{
    int64_t until = rlock__after_ms(5000);

    rlock__conn_flush(c);
    while (rlock__conn_expected(c) > 0 && rlock__now_ns() < until &&
           rlock__conn_error(c)->code == 0) {
        /* (Polled by hand: the replies still to come may all be given
         * up, which rlock__net_run's want cannot say.) */
        struct pollfd p = {rlock__conn_fd(c), rlock__conn_events(c), 0};
        poll(&p, 1, 100);
        rlock__conn_io(c, p.revents);
    }
    if (rlock__conn_error(c)->code != 0)
        printf("%s\n", rlock__conn_error(c)->msg);
    CHECK_INT(rlock__conn_error(c)->code, ==, 0);
    CHECK_INT(rlock__conn_expected(c), ==, 0);
}

static void takes(rlock__conn *c, const char *word)
{
    redisReply *r = NULL;

    CHECK(rlock__conn_take(c, &r) == 1);
    CHECK(r->type == REDIS_REPLY_STRING && strcmp(r->str, word) == 0);
    freeReplyObject(r);
}

/* The request marked m takes its next reply, wherever it stands. */
static void takes_at(rlock__conn *c, const rlock__conn_mark_t *m,
                     const char *word)
{
    redisReply *r = NULL;

    CHECK(rlock__conn_take_at(c, m, &r) == 1);
    CHECK(r->type == REDIS_REPLY_STRING && strcmp(r->str, word) == 0);
    freeReplyObject(r);
}

TEST(a_shared_connection_serves_each_request_its_own_replies)
{
    rt_server *s = rt_server_start(NULL);
    rlock__conn *c = open_conn(s);
    rlock__conn_mark_t a, b, d, e, f, after;

    /* Three requests, the middle one of two commands. Nothing written
     * yet: none was sent. */
    echo(c, &a, "a");
    echo(c, &b, "b1");
    echo(c, NULL, "b2");
    echo(c, &d, "d");
    CHECK(!rlock__conn_sent_from(c, &a) && !rlock__conn_sent_from(c, &d));
    CHECK_INT(rlock__conn_pending(c), ==, 4);

    /* b gives up before a byte went out: its replies are dropped when
     * they come; a's and d's are not. */
    rlock__conn_drop(c, &b, 2);
    CHECK_INT(rlock__conn_pending(c), ==, 2);
    CHECK(!rlock__conn_settled_at(c, &a, 1) &&
          !rlock__conn_complete_at(c, &d, 1));
    rlock__conn_mark(c, &after);
    answered(c);
    CHECK(rlock__conn_sent_from(c, &a) && rlock__conn_sent_from(c, &d));
    CHECK(!rlock__conn_sent_from(c, &after));
    CHECK_INT(rlock__conn_ready(c), ==, 2);
    /* d's reply is there, and a's before it, not taken: each request has
     * its own, and d takes its own first (one waits for nothing that is
     * not its own), then a. */
    CHECK(rlock__conn_settled_at(c, &a, 1));
    CHECK(rlock__conn_settled_at(c, &d, 1));
    CHECK(!rlock__conn_complete_at(c, &d, 2)); /* (one of its own only) */
    takes_at(c, &d, "d");
    CHECK(!rlock__conn_settled_at(c, &d, 1));
    takes_at(c, &a, "a");
    CHECK_INT(rlock__conn_pending(c), ==, 0);

    /* A request in the middle gives up after its replies came, while the
     * one before it has not taken its own: the line closes up. */
    echo(c, &a, "a");
    echo(c, &b, "b1");
    echo(c, NULL, "b2");
    echo(c, &d, "d");
    answered(c);
    CHECK_INT(rlock__conn_ready(c), ==, 4);
    rlock__conn_drop(c, &b, 2);
    CHECK_INT(rlock__conn_ready(c), ==, 2);
    CHECK(rlock__conn_settled_at(c, &d, 1));
    takes(c, "a");
    takes_at(c, &d, "d");

    /* Giving up the oldest (a connection whose sole user stops waiting)
     * skips what a later request gave up already, and the request after
     * both gets its reply. */
    echo(c, &d, "d");
    echo(c, &e, "e");
    echo(c, &f, "f");
    rlock__conn_drop(c, &e, 1);
    rlock__conn_discard(c, 1); /* d's */
    CHECK_INT(rlock__conn_pending(c), ==, 1);
    answered(c);
    CHECK_INT(rlock__conn_ready(c), ==, 1);
    CHECK(rlock__conn_settled_at(c, &f, 1));
    takes(c, "f");

    /* A span given up across ranges given up before (a gap, a range, a
     * gap, a range) counts each place once. */
    {
        rlock__conn_mark_t m[4];
        static const char *const w[4] = {"a", "b", "c", "d"};
        echoes(c, m, w, 4);
        rlock__conn_drop(c, &m[1], 1);
        rlock__conn_drop(c, &m[3], 1);
        rlock__conn_drop(c, &m[0], 4);
        CHECK_INT(rlock__conn_pending(c), ==, 0);
        echo(c, &e, "e");
        echo(c, &f, "f");
        rlock__conn_drop(c, &e, 1);
        answered(c);
        CHECK_INT(rlock__conn_ready(c), ==, 1);
        CHECK(rlock__conn_settled_at(c, &f, 1));
        takes(c, "f");
    }

    /* Ranges given up out of order, touching and apart, are each dropped
     * once: of ten replies, the 2nd, 3rd, 4th, 6th and 8th go. */
    {
        rlock__conn_mark_t m[10];
        static const char *const w[10] = {"0", "1", "2", "3", "4",
                                          "5", "6", "7", "8", "9"};
        echoes(c, m, w, 10);
        rlock__conn_drop(c, &m[3], 1);
        rlock__conn_drop(c, &m[1], 1);
        rlock__conn_drop(c, &m[7], 1);
        rlock__conn_drop(c, &m[2], 1); /* joins 1 and 3 */
        rlock__conn_drop(c, &m[5], 1);
        CHECK_INT(rlock__conn_pending(c), ==, 5);
        rlock__conn_discard(c, 2); /* 0 and 4 */
        CHECK_INT(rlock__conn_pending(c), ==, 3);
        answered(c);
        CHECK(rlock__conn_settled_at(c, &m[6], 1));
        takes(c, "6");
        takes(c, "8");
        CHECK(rlock__conn_settled_at(c, &m[9], 1));
        takes(c, "9");
        CHECK_INT(rlock__conn_pending(c), ==, 0);
    }
    /* Still a healthy connection with nothing owed. */
    CHECK(rlock__conn_idle_ok(c, 0));
    rlock__conn_close(c);
    rt_server_stop(s);
}

/*
 * The same, at random against a model: requests of one to three
 * commands are queued, given up (before or after their replies came, in
 * any order), the oldest pending replies discarded, the connection
 * driven and replies taken; every reply taken is the one the model says
 * is next, and the counts agree throughout. The seed is printed.
 */
enum { M_LIVE, M_DROPPED, M_TAKEN };

TEST(a_shared_connections_line_matches_a_model_at_random)
{
    rt_server *s = rt_server_start(NULL);
    rlock__conn *c = open_conn(s);
    static rlock__conn_mark_t marks[4096];
    static int first[4096], count[4096], state[16384];
    unsigned seed = (unsigned)rlock__now_ns();
    int nreq = 0, nrep = 0, next = 0, op;

    printf("seed %u\n", seed);
    for (op = 0; op < 3000 && nreq < 4096 && nrep < 16000; op++) {
        int what = (int)(rand_r(&seed) % 10), i, k;
        size_t pend = 0;

        if (what < 4) { /* a request of one to three commands */
            int n = 1 + (int)(rand_r(&seed) % 3);
            first[nreq] = nrep;
            count[nreq] = n;
            for (k = 0; k < n; k++) {
                char w[16];
                snprintf(w, sizeof w, "%d", nrep);
                echo(c, k == 0 ? &marks[nreq] : NULL, w);
                state[nrep++] = M_LIVE;
            }
            nreq++;
        } else if (what < 6 && nreq > 0) { /* one gives up */
            /* (Among the last few: the older ones are taken.) */
            int r = nreq - 1 - (int)(rand_r(&seed) % (nreq < 8 ? nreq : 8)),
                span = count[r];
            /* Now and then a span of this request and up to three after
             * it (a caller that gives up more than one request's replies,
             * across places given up before). */
            if (rand_r(&seed) % 3 == 0)
                for (k = 1; k <= 3 && r + k < nreq; k++)
                    span += count[r + k];
            for (k = 0; k < span; k++)
                if (state[first[r] + k] == M_TAKEN)
                    break;
            if (k < span)
                continue; /* begun: not given up any more */
            rlock__conn_drop(c, &marks[r], (size_t)span);
            for (k = 0; k < span; k++)
                state[first[r] + k] = M_DROPPED;
        } else if (what == 6) { /* the oldest pending, given up */
            int n = (int)(rand_r(&seed) % 3);
            rlock__conn_discard(c, (size_t)n);
            for (i = next; i < nrep && n > 0; i++)
                if (state[i] == M_LIVE) {
                    state[i] = M_DROPPED;
                    n--;
                }
        } else if (what < 9) { /* driven */
            answered(c);
        } else { /* what is ready, taken */
            while (rlock__conn_ready(c) > 0) {
                char w[16];
                while (next < nrep && state[next] != M_LIVE)
                    next++;
                CHECK(next < nrep);
                snprintf(w, sizeof w, "%d", next);
                takes(c, w);
                state[next++] = M_TAKEN;
            }
        }
        for (i = next; i < nrep; i++)
            pend += state[i] == M_LIVE;
        CHECK_INT(rlock__conn_pending(c), ==, pend);
        CHECK_INT(rlock__conn_error(c)->code, ==, 0);
        /* The first live reply, if it begins its request, is that
         * request's turn. */
        for (i = next; i < nrep && state[i] != M_LIVE; i++)
            ;
        for (k = 0; i < nrep && k < nreq; k++) {
            if (first[k] != i)
                continue;
            CHECK(rlock__conn_settled_at(c, &marks[k], 0));
            if (rlock__conn_ready(c) > 0)
                CHECK(rlock__conn_settled_at(c, &marks[k], 1));
            break;
        }
    }
    printf("%d requests, %d replies\n", nreq, nrep);
    rlock__conn_close(c);
    rt_server_stop(s);
}
