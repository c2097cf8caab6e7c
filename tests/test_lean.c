/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The lean protocol of rlock's own layout (docs/protocol.md): while a
 * name is calm, an acquisition and a last release go in their fast forms
 * (three keys and three arguments; one key and one); contention sends the
 * full forms, in the same call when a fast form could not decide, and a
 * full acquisition that finds the lock free with nobody queued makes the
 * name calm again. What each request carried is read from the server's
 * own SLOWLOG, every command logged, so these tests see exactly what went
 * over the wire. Also: a fast form never jumps the queue, a lost counter
 * is seeded from the clock in either form, and a server that answers
 * "ask the full form" to the full form too gets a protocol error, not a
 * loop.
 */
#include <string.h>

#include "harness/fake_server.h"
#include "harness/test.h"

/* ---- what the server saw ------------------------------------------------ */

/* Logs every command from now on, and forgets what was logged. */
static void log_all(rt_server *s)
{
    freeReplyObject(rt_cmd(s, "CONFIG SET slowlog-log-slower-than 0"));
    freeReplyObject(rt_cmd(s, "CONFIG SET slowlog-max-len 4096"));
    freeReplyObject(rt_cmd(s, "SLOWLOG RESET"));
}

/* The EVALSHA requests logged since log_all, oldest first, as a string of
 * "<numkeys>/<arguments after the keys>" separated by spaces (say "3/3
 * 1/1"), into out; the log is reset unless keep. */
static const char *evalshas_keep(rt_server *s, char *out, size_t len,
                                 int keep)
{
    redisReply *r = rt_cmd(s, "SLOWLOG GET -1");
    size_t i, n = 0;

    out[0] = '\0';
    CHECK(r->type == REDIS_REPLY_ARRAY);
    for (i = r->elements; i-- > 0;) {
        const redisReply *e = r->element[i], *argv;
        long keys, args;

        CHECK(e->type == REDIS_REPLY_ARRAY && e->elements >= 4);
        argv = e->element[3];
        if (argv->type != REDIS_REPLY_ARRAY || argv->elements < 3 ||
            strcasecmp(argv->element[0]->str, "EVALSHA") != 0)
            continue;
        keys = strtol(argv->element[2]->str, NULL, 10);
        args = (long)argv->elements - 3 - keys;
        n += (size_t)snprintf(out + n, len - n, "%s%ld/%ld", n ? " " : "",
                              keys, args);
        CHECK(n < len);
    }
    freeReplyObject(r);
    if (!keep)
        freeReplyObject(rt_cmd(s, "SLOWLOG RESET"));
    return out;
}

static const char *evalshas(rt_server *s, char *out, size_t len)
{
    return evalshas_keep(s, out, len, 0);
}

/* Whether the log since log_all is exactly want (not reset). */
static int sent_so_far(rt_server *s, const char *want)
{
    char got[256];

    return strcmp(evalshas_keep(s, got, sizeof got, 1), want) == 0;
}

#define CHECK_SENT(s, want)                                                    \
    do {                                                                       \
        char got_[256];                                                        \
        evalshas((s), got_, sizeof got_);                                      \
        if (strcmp(got_, (want)) != 0)                                         \
            rt_fail(__FILE__, __LINE__, "requests sent: \"%s\", want \"%s\"",  \
                    got_, (want));                                             \
    } while (0)

/* The server's clock in microseconds. */
static uint64_t server_us(rt_server *s)
{
    redisReply *r = rt_cmd(s, "TIME");
    uint64_t us;

    CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 2);
    us = strtoull(r->element[0]->str, NULL, 10) * 1000000 +
         strtoull(r->element[1]->str, NULL, 10);
    freeReplyObject(r);
    return us;
}

/* ---- the tests ---------------------------------------------------------- */

TEST(uncontended_pairs_use_the_fast_forms)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *c = rt_client(rt_server_url(s), NULL);
    rlock_mutex *m = rt_mutex(c, "calm", NULL);
    char buf[64];
    int i;

    log_all(s);
    for (i = 0; i < 3; i++) {
        CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
        CHECK(strcmp(rt_lock_field(s, "calm", RT_COUNT, buf, sizeof buf),
                     "1") == 0);
        CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
        CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:calm}"), ==, 0);
    }
    CHECK_SENT(s, "3/3 1/1 3/3 1/1 3/3 1/1");
    /* A re-entry carries its count and token: the full form; so does the
     * release of a level that is not the last. */
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    CHECK_INT(rt_lock_count(s, "calm"), ==, 2);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    CHECK_SENT(s, "3/3 4/7 4/2 1/1");
    rlock_mutex_free(m);
    rlock_client_close(c);
    rt_server_stop(s);
}

TEST(contention_takes_the_full_forms_until_the_name_is_calm_again)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *a = rt_client(rt_server_url(s), NULL);
    rlock_client *b = rt_client(rt_server_url(s), NULL);
    rlock_mutex *ma = rt_mutex(a, "busy", NULL);
    rlock_mutex *mb = rt_mutex(b, "busy", NULL);

    CHECK_RC(rlock_mutex_lock(ma), RLOCK_OK);
    log_all(s);
    /* The fast form cannot decide on a held lock: the full one follows in
     * the same call, and from then on the full form goes first. */
    CHECK_RC(rlock_mutex_trylock(mb), RLOCK_EBUSY);
    CHECK_SENT(s, "3/3 4/5");
    CHECK_RC(rlock_mutex_trylock(mb), RLOCK_EBUSY);
    CHECK_SENT(s, "4/5");
    /* Nobody queued behind a: its release is still the fast one. */
    CHECK_RC(rlock_mutex_unlock(ma), RLOCK_OK);
    CHECK_SENT(s, "1/1");
    /* b's full form finds the lock free with nobody queued: calm again. */
    CHECK_RC(rlock_mutex_trylock(mb), RLOCK_OK);
    CHECK_SENT(s, "4/5");
    CHECK_RC(rlock_mutex_unlock(mb), RLOCK_OK);
    CHECK_RC(rlock_mutex_lock(mb), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(mb), RLOCK_OK);
    CHECK_SENT(s, "1/1 3/3 1/1");
    rlock_mutex_free(ma);
    rlock_mutex_free(mb);
    rlock_client_close(a);
    rlock_client_close(b);
    rt_server_stop(s);
}

TEST(a_fast_release_behind_a_waiter_hands_the_lock_over)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *a = rt_client(rt_server_url(s), NULL);
    rlock_client *b = rt_client(rt_server_url(s), NULL);
    rlock_mutex *ma = rt_mutex(a, "handover", NULL);
    rlock_mutex *mb = rt_mutex(b, "handover", NULL);
    rt_locker l;
    char owner[256], buf[64];

    CHECK_RC(rlock_mutex_lock(ma), RLOCK_OK);
    log_all(s);
    rt_locker_start(&l, mb, 0);
    /* b's waiting: the fast form, the full one that queues it, and once
     * its subscription is confirmed the attempt it sleeps on. */
    RT_WAIT_UNTIL(sent_so_far(s, "3/3 4/5 4/5"), 10000);
    CHECK_INT(rt_cmd_int(s, "LLEN {rlock:handover}:queue"), ==, 1);
    /* The waiter marked the hold: a's release finds it in its fast form,
     * does nothing there, and the full form hands the lock over. */
    CHECK(strcmp(rt_lock_field(s, "handover", RT_WAITERS, buf, sizeof buf),
                 "1") == 0);
    log_all(s);
    CHECK_RC(rlock_mutex_unlock(ma), RLOCK_OK);
    CHECK_RC(rt_locker_join(&l), RLOCK_OK);
    CHECK_SENT(s, "1/1 4/2");
    rt_lock_field(s, "handover", RT_OWNER, owner, sizeof owner);
    CHECK(strlen(owner) > 0);
    CHECK(strcmp(rt_lock_field(s, "handover", RT_TOKEN, buf, sizeof buf), "") !=
          0);
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:handover}:queue"), ==, 0);
    rlock_mutex_free(ma);
    rlock_mutex_free(mb);
    rlock_client_close(a);
    rlock_client_close(b);
    rt_server_stop(s);
}

TEST(a_calm_name_never_jumps_the_queue)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *c = rt_client(rt_server_url(s), NULL);
    rlock_mutex *m = rt_mutex(c, "fifo", NULL);
    long long now_ms = (long long)(server_us(s) / 1000);
    char buf[64];

    /* The lock is free, but a waiter queued first (its holder expired
     * before the release could hand it over): written by hand the way a
     * waiter enqueues. */
    freeReplyObject(rt_cmd(s, "RPUSH {rlock:fifo}:queue first"));
    snprintf(buf, sizeof buf, "%lld 30000 7", now_ms + 60000);
    freeReplyObject(rt_cmd(s, "HSET {rlock:fifo}:qinfo first %s", buf));
    log_all(s);
    CHECK_RC(rlock_mutex_trylock(m), RLOCK_EBUSY);
    CHECK_SENT(s, "3/3 4/5");
    /* The full form handed it to the waiter that came first. */
    CHECK(strcmp(rt_lock_field(s, "fifo", RT_OWNER, buf, sizeof buf),
                 "first") == 0);
    CHECK(strcmp(rt_lock_field(s, "fifo", RT_NONCE, buf, sizeof buf), "7") ==
          0);
    CHECK_INT(rt_cmd_int(s, "PTTL {rlock:fifo}"), >, 0);
    rlock_mutex_free(m);
    rlock_client_close(c);
    rt_server_stop(s);
}

TEST(a_lost_counter_starts_at_the_clock_in_either_form)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *a = rt_client(rt_server_url(s), NULL);
    rlock_client *b = rt_client(rt_server_url(s), NULL);
    rlock_mutex *ma = rt_mutex(a, "seed", NULL);
    rlock_mutex *mb = rt_mutex(b, "seed", NULL);
    uint64_t before, t1, t2, t3;

    /* The fast form, on a new name. */
    before = server_us(s);
    CHECK_RC(rlock_mutex_lock(ma), RLOCK_OK);
    t1 = rlock_mutex_token(ma);
    CHECK(t1 >= before);
    CHECK_RC(rlock_mutex_unlock(ma), RLOCK_OK);
    /* The counter lost (evicted, deleted, a restart without
     * persistence): the next token is still greater. */
    CHECK_INT(rt_cmd_int(s, "DEL {rlock:seed}:fence"), ==, 1);
    CHECK_RC(rlock_mutex_lock(ma), RLOCK_OK);
    t2 = rlock_mutex_token(ma);
    CHECK(t2 > t1);
    /* The full form: b has met contention. */
    CHECK_RC(rlock_mutex_trylock(mb), RLOCK_EBUSY);
    CHECK_RC(rlock_mutex_unlock(ma), RLOCK_OK);
    CHECK_INT(rt_cmd_int(s, "DEL {rlock:seed}:fence"), ==, 1);
    log_all(s);
    CHECK_RC(rlock_mutex_trylock(mb), RLOCK_OK);
    CHECK_SENT(s, "4/5");
    t3 = rlock_mutex_token(mb);
    CHECK(t3 > t2);
    CHECK_RC(rlock_mutex_unlock(mb), RLOCK_OK);
    rlock_mutex_free(ma);
    rlock_mutex_free(mb);
    rlock_client_close(a);
    rlock_client_close(b);
    rt_server_stop(s);
}

TEST(a_server_that_always_says_again_gets_a_protocol_error)
{
    rt_fake *f = rt_fake_start(RT_FAKE_ZERO, 0);
    rlock_client *c = rt_client(rt_fake_url(f), NULL);
    rlock_mutex *m = rt_mutex(c, "again", NULL);
    int64_t t0 = rt_now_ms();

    /* Fast form: "again"; full form: "again" too, which it never says. */
    CHECK_RC(rlock_mutex_trylock(m), RLOCK_EPROTO);
    CHECK(strstr(rlock_client_errmsg(c), "unexpected reply") != NULL);
    CHECK_INT(rt_now_ms() - t0, <, 5000);
    rlock_mutex_free(m);
    rlock_client_close(c);
    rt_fake_stop(f);
}
