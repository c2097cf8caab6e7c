/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The lean protocol of rlock's own layout (docs/protocol.md): while a
 * name is calm, an acquisition goes as a plain SET NX PX (the lean form,
 * no token drawn) or, once the mutex's callers have asked for a token,
 * in the fenced fast form (three keys and three arguments), and a last
 * release in its fast form (one key and one); a token is drawn when first
 * asked for; contention sends the full forms, in the same call when a
 * fast form could not decide, and a full acquisition that finds the lock
 * free with nobody queued makes the name calm again. What each request
 * carried is read from the server's own SLOWLOG, every command logged, so
 * these tests see exactly what went over the wire. Also: a queue keeps
 * its lock key alive, so no fast form jumps it, even after the holder's
 * lease ended; a lost counter is seeded from the clock in either form;
 * and a server that answers "ask the full form" to the full form too gets
 * a protocol error, not a loop.
 */
#include <string.h>

#include "harness/fake_server.h"
#include "harness/proxy.h"
#include "harness/test.h"

/* ---- what the server saw ------------------------------------------------ */

/* Logs every command from now on, and forgets what was logged. */
static void log_all(rt_server *s)
{
    freeReplyObject(rt_cmd(s, "CONFIG SET slowlog-log-slower-than 0"));
    freeReplyObject(rt_cmd(s, "CONFIG SET slowlog-max-len 4096"));
    freeReplyObject(rt_cmd(s, "SLOWLOG RESET"));
}

/* The requests logged since log_all, oldest first, as a string of
 * "<numkeys>/<arguments after the keys>" for each EVALSHA, "set" for
 * each SET ... NX PX, and "delex" or "delifeq" for those commands,
 * separated by spaces (say "set 1/1"), into out; the log is reset unless
 * keep. */
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
        if (argv->type == REDIS_REPLY_ARRAY && argv->elements == 6 &&
            strcasecmp(argv->element[0]->str, "SET") == 0 &&
            strcasecmp(argv->element[3]->str, "NX") == 0 &&
            strcasecmp(argv->element[4]->str, "PX") == 0) {
            n += (size_t)snprintf(out + n, len - n, "%sset", n ? " " : "");
            CHECK(n < len);
            continue;
        }
        if (argv->type == REDIS_REPLY_ARRAY && argv->elements >= 3 &&
            (strcasecmp(argv->element[0]->str, "DELEX") == 0 ||
             strcasecmp(argv->element[0]->str, "DELIFEQ") == 0)) {
            n += (size_t)snprintf(out + n, len - n, "%s%s", n ? " " : "",
                                  strcasecmp(argv->element[0]->str, "DELEX")
                                      ? "delifeq"
                                      : "delex");
            CHECK(n < len);
            continue;
        }
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

/* Whether the log since log_all is want, possibly followed by more full
 * acquisitions ("4/5") of a waiter that retried (not reset). */
static int sent_so_far(rt_server *s, const char *want)
{
    char got[512];
    const char *rest;
    size_t n = strlen(want);

    evalshas_keep(s, got, sizeof got, 1);
    if (strncmp(got, want, n) != 0)
        return 0;
    for (rest = got + n; *rest; rest += 4)
        if (strncmp(rest, " 4/5", 4) != 0)
            return 0;
    return 1;
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
        /* Nobody queued, no token drawn. */
        CHECK(strcmp(rt_lock_field(s, "calm", RT_WAITERS, buf, sizeof buf),
                     "0") == 0);
        CHECK(strcmp(rt_lock_field(s, "calm", RT_TOKEN, buf, sizeof buf),
                     "0") == 0);
        CHECK_INT(rt_cmd_int(s, "PTTL {rlock:calm}"), >, 25000);
        CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
        CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:calm}"), ==, 0);
    }
    CHECK_SENT(s, "set 1/1 set 1/1 set 1/1");
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:calm}:fence"), ==, 0);
    /* A re-entry carries its count and the hold's nonce: the full form;
     * so does the release of a level that is not the last. */
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    CHECK_INT(rt_lock_count(s, "calm"), ==, 2);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    CHECK_SENT(s, "set 4/6 4/2 1/1");
    rlock_mutex_free(m);
    rlock_client_close(c);
    rt_server_stop(s);
}

TEST(a_token_is_drawn_when_first_asked_for_then_with_each_acquisition)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *c = rt_client(rt_server_url(s), NULL);
    rlock_client *d = rt_client(rt_server_url(s), NULL);
    rlock_mutex *m = rt_mutex(c, "fenced", NULL);
    rlock_mutex *other = rt_mutex(d, "fenced", NULL);
    uint64_t t1, t2, t3, t4;
    char buf[64];

    log_all(s);
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    CHECK_SENT(s, "set");
    /* Drawn now: one script with the lock and the counter and "<owner>
     * <nonce> ", kept with the hold in Redis and in the client. */
    CHECK_RC(rlock_mutex_fence(m, &t1), RLOCK_OK);
    CHECK_SENT(s, "2/1");
    CHECK(t1 > 0 && t1 == rt_fence_counter(s, "fenced"));
    CHECK(strtoull(rt_lock_field(s, "fenced", RT_TOKEN, buf, sizeof buf),
                   NULL, 10) == t1);
    CHECK(rlock_mutex_token(m) == t1);
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK); /* a re-entry keeps it */
    CHECK(rlock_mutex_token(m) == t1);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    CHECK_SENT(s, "4/6 4/2");
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    CHECK_SENT(s, "1/1");
    /* From now on this handle's acquisitions draw the token at once: the
     * fenced fast form, and asking sends nothing. */
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    t2 = rlock_mutex_token(m);
    CHECK_SENT(s, "3/3");
    CHECK(t2 > t1 && t2 == rt_fence_counter(s, "fenced"));
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    CHECK_SENT(s, "1/1");
    /* Another client's handle has not asked yet: lean, and its token,
     * drawn later in its hold, is still greater than every earlier one. */
    CHECK_RC(rlock_mutex_lock(other), RLOCK_OK);
    CHECK(rt_fence_counter(s, "fenced") == t2);
    t3 = rlock_mutex_token(other);
    CHECK_SENT(s, "set 2/1");
    CHECK(t3 > t2);
    CHECK_RC(rlock_mutex_unlock(other), RLOCK_OK);
    /* m draws at once still, whoever held the name in between. */
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    t4 = rlock_mutex_token(m);
    CHECK(t4 > t3);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    /* Asking without a hold: no token, and nothing sent. */
    log_all(s);
    CHECK(rlock_mutex_token(m) == 0);
    CHECK_RC(rlock_mutex_fence(m, &t1), RLOCK_ENOTOWNER);
    CHECK(t1 == 0);
    CHECK_SENT(s, "");
    rlock_mutex_free(m);
    rlock_mutex_free(other);
    rlock_client_close(c);
    rlock_client_close(d);
    rt_server_stop(s);
}

static int keep_token(void *arg, uint64_t token)
{
    *(uint64_t *)arg = token;
    return 7;
}

TEST(rlock_with_draws_the_token_with_the_acquisition)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *c = rt_client(rt_server_url(s), NULL);
    rlock_mutex *m = rt_mutex(c, "with", NULL);
    uint64_t got = 0;

    log_all(s);
    CHECK_INT(rlock_with(m, 0, keep_token, &got), ==, 7);
    CHECK_SENT(s, "3/3 1/1");
    CHECK(got > 0 && got == rt_fence_counter(s, "with"));
    rlock_mutex_free(m);
    rlock_client_close(c);
    rt_server_stop(s);
}

TEST(a_token_is_not_drawn_for_a_hold_that_is_gone)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *c = rt_client(rt_server_url(s), NULL);
    rlock_client *d = rt_client(rt_server_url(s), NULL);
    rlock_mutex_opts mo;
    rlock_mutex *m, *m2, *other = rt_mutex(d, "gone", NULL);
    char owner_tok[32];
    uint64_t t;

    rlock_mutex_opts_init(&mo);
    mo.on_lost = rt_count_lost;
    m = rt_mutex(c, "gone", &mo);
    atomic_store(&rt_lost_calls, 0);
    /* Deleted behind the holder's back, and taken by another owner: the
     * fence script finds no hold of this owner and acquisition, draws
     * nothing, and the hold is lost. */
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    CHECK_INT(rt_cmd_int(s, "DEL {rlock:gone}"), ==, 1);
    CHECK_RC(rlock_mutex_lock(other), RLOCK_OK);
    CHECK_RC(rlock_mutex_fence(m, &t), RLOCK_ELOST);
    CHECK(t == 0);
    CHECK(strstr(rlock_client_errmsg(c), "no token was drawn") != NULL);
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:gone}:fence"), ==, 0);
    RT_WAIT_UNTIL(atomic_load(&rt_lost_calls) == 1, 5000);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_ELOST);
    /* The other owner's hold is untouched, and its own token is drawn. */
    CHECK(rlock_mutex_token(other) > 0);
    CHECK_RC(rlock_mutex_unlock(other), RLOCK_OK);
    /* A hold of the same owner under another acquisition (nonce) is not
     * the one asked about (through a new handle: m draws at once now). */
    m2 = rt_mutex(c, "gone", NULL);
    CHECK_RC(rlock_mutex_lock(m2), RLOCK_OK);
    {
        char owner[160], v[256];
        rt_lock_field(s, "gone", RT_OWNER, owner, sizeof owner);
        snprintf(v, sizeof v, "%s 999999 1 0 0", owner);
        freeReplyObject(rt_cmd(s, "SET {rlock:gone} %s KEEPTTL", v));
    }
    CHECK_RC(rlock_mutex_fence(m2, &t), RLOCK_ELOST);
    CHECK(t == 0);
    CHECK(strcmp(rt_lock_field(s, "gone", RT_TOKEN, owner_tok,
                               sizeof owner_tok),
                 "0") == 0);
    rlock_mutex_free(m);
    rlock_mutex_free(m2);
    rlock_mutex_free(other);
    rlock_client_close(c);
    rlock_client_close(d);
    rt_server_stop(s);
}

TEST(a_token_that_cannot_be_drawn_in_rlock_with_keeps_the_outer_hold)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *c = rt_client(rt_server_url(s), NULL);
    rlock_mutex *m = rt_mutex(c, "nested", NULL);
    uint64_t got = 0;

    /* An outer hold taken lean; rlock_with inside it re-enters, and its
     * token cannot be drawn (the counter's key holds a hash: Redis
     * refuses the INCR). */
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    freeReplyObject(rt_cmd(s, "HSET {rlock:nested}:fence x 1"));
    CHECK_RC(rlock_with(m, 0, keep_token, &got), RLOCK_EREDIS);
    CHECK(got == 0); /* fn was not called */
    /* rlock_with's level went back; the outer hold is still known and
     * still in Redis, and its unlock frees the lock. */
    CHECK_INT(rt_lock_count(s, "nested"), ==, 1);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:nested}"), ==, 0);
    rlock_mutex_free(m);
    rlock_client_close(c);
    rt_server_stop(s);
}

TEST(a_hold_of_another_acquisition_of_the_owner_is_never_claimed)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *c = rt_client(rt_server_url(s), NULL);
    rlock_mutex *m = rt_mutex(c, "claimed", NULL);
    char owner[160], v[256];
    redisReply *r;
    int64_t t0;

    /* Redis has a hold of this owner with count 2 under a nonce the
     * client does not hold (a late attempt of an earlier acquisition, or
     * a hold the client counted lost and forgot). A new acquisition must
     * not take it over: a late attempt that did would hand the owner's
     * current hold to its own undo, which frees it under its holder (the
     * explorer found two holders so). It is busy until it ends; then the
     * lock is taken afresh, counting from one. */
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    rt_lock_field(s, "claimed", RT_OWNER, owner, sizeof owner);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    snprintf(v, sizeof v, "%s 424242 2 0 0", owner);
    freeReplyObject(rt_cmd(s, "SET {rlock:claimed} %s PX 1500", v));
    CHECK_RC(rlock_mutex_trylock(m), RLOCK_EBUSY);
    r = rt_cmd(s, "GET {rlock:claimed}");
    CHECK(r->type == REDIS_REPLY_STRING && strcmp(r->str, v) == 0);
    freeReplyObject(r);
    t0 = rt_now_ms();
    CHECK_RC(rlock_mutex_timedlock(m, 10000), RLOCK_OK);
    CHECK_INT(rt_now_ms() - t0, >=, 500);
    CHECK_INT(rt_lock_count(s, "claimed"), ==, 1);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:claimed}"), ==, 0);
    rlock_mutex_free(m);
    rlock_client_close(c);
    rt_server_stop(s);
}

/* The lock's value with its token replaced by 0, its expiry kept: what a
 * replica promoted before the write that drew the token reached it would
 * hold. */
static void lose_the_token(rt_server *s, const char *name)
{
    char o[160], n[32], cnt[16], v[256];

    rt_lock_field(s, name, RT_OWNER, o, sizeof o);
    rt_lock_field(s, name, RT_NONCE, n, sizeof n);
    rt_lock_field(s, name, RT_COUNT, cnt, sizeof cnt);
    snprintf(v, sizeof v, "%s %s %s 0 0", o, n, cnt);
    freeReplyObject(rt_cmd(s, "SET {rlock:%s} %s KEEPTTL", name, v));
}

TEST(a_hold_whose_drawn_token_redis_lost_is_lost)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client_opts co;
    rlock_mutex_opts mo;
    rlock_client *c;
    rlock_mutex *renewed, *fixed;

    /* The watchdog's renewal finds the token gone from the hold. */
    rlock_client_opts_init(&co);
    co.watchdog_lease_ms = 900;
    c = rt_client(rt_server_url(s), &co);
    rlock_mutex_opts_init(&mo);
    mo.on_lost = rt_count_lost;
    renewed = rt_mutex(c, "renewed", &mo);
    atomic_store(&rt_lost_calls, 0);
    CHECK_RC(rlock_mutex_lock(renewed), RLOCK_OK);
    CHECK(rlock_mutex_token(renewed) > 0);
    lose_the_token(s, "renewed");
    RT_WAIT_UNTIL(atomic_load(&rt_lost_calls) == 1, 5000);
    CHECK_RC(rlock_mutex_unlock(renewed), RLOCK_ELOST);
    /* So does extend, for a fixed lease. */
    mo.on_lost = NULL;
    mo.lease_ms = 60000;
    fixed = rt_mutex(c, "fixed", &mo);
    CHECK_RC(rlock_mutex_lock(fixed), RLOCK_OK);
    CHECK(rlock_mutex_token(fixed) > 0);
    CHECK_RC(rlock_mutex_extend(fixed, 60000), RLOCK_OK);
    lose_the_token(s, "fixed");
    CHECK_RC(rlock_mutex_extend(fixed, 60000), RLOCK_ELOST);
    /* A hold whose token was never drawn renews as ever. */
    rlock_mutex_free(fixed);
    fixed = rt_mutex(c, "fixed2", &mo);
    CHECK_RC(rlock_mutex_lock(fixed), RLOCK_OK);
    CHECK_RC(rlock_mutex_extend(fixed, 60000), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(fixed), RLOCK_OK);
    rlock_mutex_free(renewed);
    rlock_mutex_free(fixed);
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
    CHECK_SENT(s, "set 4/5");
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
    CHECK_SENT(s, "1/1 set 1/1");
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
    /* b's waiting: the lean form, the full one that queues it, and once
     * its subscription is confirmed the attempt it sleeps on (on a
     * machine too busy to confirm it in time, b retries in the full form
     * a few times more before it sleeps). */
    RT_WAIT_UNTIL(sent_so_far(s, "set 4/5 4/5") &&
                      rt_cmd_int(s, "LLEN {rlock:handover}:queue") == 1,
                  10000);
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
    /* A hand-over draws the new holder's token. */
    CHECK(l.token > 0 &&
          strtoull(rt_lock_field(s, "handover", RT_TOKEN, buf, sizeof buf),
                   NULL, 10) == l.token);
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:handover}:queue"), ==, 0);
    rlock_mutex_free(ma);
    rlock_mutex_free(mb);
    rlock_client_close(a);
    rlock_client_close(b);
    rt_server_stop(s);
}

/* ---- the release by the server's own compare-and-delete ----------------- */

/* Whether the server knows command name (COMMAND INFO). */
static int knows(rt_server *s, const char *name)
{
    redisReply *r = rt_cmd(s, "COMMAND INFO %s", name);
    int yes = r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
              r->element[0]->type == REDIS_REPLY_ARRAY;

    freeReplyObject(r);
    return yes;
}

/*
 * On a server that has DELEX ... IFEQ (Redis 8.4, Valkey 9.2) or DELIFEQ
 * (Valkey 9.0), a calm hold's last release is that command, no script:
 * the value it compares is the whole calm value, token included (so a
 * hold whose token was drawn is released so too). A hold with a waiter
 * behind it is answered 0 and the full release hands the lock over; a
 * hold gone is lost; someone's data of another type under the name is
 * left alone, and the release script says what it is. The command the
 * server must take ("delex", "delifeq"; "1/1", the fast script, where it
 * knows neither) and how many "ERR unknown command" answers the client
 * may cause in all (each form tried once, then none for 60 s) follow from
 * what the server knows; native: whether it must know one.
 */
static void release_by_compare_and_delete(const char *binary, int native)
{
    rt_server_opts so;
    rt_server *s;
    rlock_client *a, *b;
    rlock_mutex *ma, *mb;
    char want[128], errs[64], buf[64], sent[256], kept[256];
    const char *cmd;
    uint64_t token;
    rt_locker l;
    int i, refusals;

    memset(&so, 0, sizeof so);
    so.binary = binary;
    s = rt_server_start(&so);
    /* What the client must end up sending, whichever version the server
     * is (sid and experimental move on): DELEX where the server has it,
     * else DELIFEQ (after one refusal of DELEX), else the fast script
     * (after two). */
    cmd = knows(s, "DELEX") ? "delex" : knows(s, "DELIFEQ") ? "delifeq" : "1/1";
    refusals = !strcmp(cmd, "delex") ? 0 : !strcmp(cmd, "delifeq") ? 1 : 2;
    CHECK_INT(strcmp(cmd, "1/1") != 0, ==, native);
    a = rt_client(rt_server_url(s), NULL);
    b = rt_client(rt_server_url(s), NULL);
    ma = rt_mutex(a, "cad", NULL);
    mb = rt_mutex(b, "cad", NULL);

    log_all(s);
    for (i = 0; i < 3; i++) {
        CHECK_RC(rlock_mutex_lock(ma), RLOCK_OK);
        CHECK_RC(rlock_mutex_unlock(ma), RLOCK_OK);
        CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:cad}"), ==, 0);
    }
    snprintf(want, sizeof want, "set %s set %s set %s", cmd, cmd, cmd);
    CHECK_SENT(s, want);

    /* The token is in the value compared. */
    CHECK_RC(rlock_mutex_lock(ma), RLOCK_OK);
    CHECK_RC(rlock_mutex_fence(ma, &token), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(ma), RLOCK_OK);
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:cad}"), ==, 0);
    snprintf(want, sizeof want, "set 2/1 %s", cmd);
    CHECK_SENT(s, want);

    /* A waiter behind the hold: the full release hands it over. */
    CHECK_RC(rlock_mutex_lock(ma), RLOCK_OK);
    rt_locker_start(&l, mb, 1);
    RT_WAIT_UNTIL(rt_cmd_int(s, "LLEN {rlock:cad}:queue") == 1, 10000);
    CHECK(strcmp(rt_lock_field(s, "cad", RT_WAITERS, buf, sizeof buf), "1") ==
          0);
    log_all(s);
    CHECK_RC(rlock_mutex_unlock(ma), RLOCK_OK);
    CHECK_RC(rt_locker_join(&l), RLOCK_OK);
    CHECK(l.token > 0);
    /* Then b's own release; and b's full attempts ("4/5", on a busy
     * machine) may come before or after a's, left out here. */
    snprintf(want, sizeof want, "%s 4/2 4/2", cmd);
    evalshas(s, sent, sizeof sent);
    {
        char *in = sent, *tok;
        size_t n = 0;
        kept[0] = '\0';
        while ((tok = strsep(&in, " ")) != NULL)
            if (strcmp(tok, "4/5") != 0)
                n += (size_t)snprintf(kept + n, sizeof kept - n, "%s%s",
                                      n ? " " : "", tok);
    }
    if (strcmp(kept, want) != 0)
        rt_fail(__FILE__, __LINE__, "requests sent (b's attempts left out): "
                "\"%s\", want \"%s\"", kept, want);
    RT_WAIT_UNTIL(rt_cmd_int(s, "EXISTS {rlock:cad}") == 0, 10000);

    /* Each form the server does not know was tried once. */
    snprintf(errs, sizeof errs, "errorstat_ERR:count=%d\r", refusals);
    CHECK(refusals ? rt_info_says(s, "errorstats", errs)
                   : !rt_info_says(s, "errorstats", "errorstat_ERR:"));

    /* Calm again; then a hold gone, and one replaced by a hash. */
    CHECK_RC(rlock_mutex_lock(ma), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(ma), RLOCK_OK);
    CHECK_RC(rlock_mutex_lock(ma), RLOCK_OK);
    CHECK_INT(rt_cmd_int(s, "DEL {rlock:cad}"), ==, 1);
    CHECK_RC(rlock_mutex_unlock(ma), RLOCK_ELOST);
    CHECK_RC(rlock_mutex_lock(ma), RLOCK_OK);
    CHECK_INT(rt_cmd_int(s, "DEL {rlock:cad}"), ==, 1);
    CHECK_INT(rt_cmd_int(s, "HSET {rlock:cad} someone data"), ==, 1);
    /* The release script's WRONGTYPE, as without the native form. */
    CHECK_RC(rlock_mutex_unlock(ma), RLOCK_EREDIS);
    CHECK_INT(rt_cmd_int(s, "HLEN {rlock:cad}"), ==, 1);
    /* An error about the data is not a refusal: the native form stays. */
    CHECK_INT(rt_cmd_int(s, "DEL {rlock:cad}"), ==, 1);
    CHECK_RC(rlock_mutex_unlock(ma), RLOCK_ELOST);
    CHECK_RC(rlock_mutex_lock(ma), RLOCK_OK);
    log_all(s);
    CHECK_RC(rlock_mutex_unlock(ma), RLOCK_OK);
    CHECK_SENT(s, cmd);
    rlock_mutex_free(ma);
    rlock_mutex_free(mb);
    rlock_client_close(a);
    rlock_client_close(b);
    rt_server_stop(s);
}

/*
 * A native release whose reply is lost (the server paused past the
 * command timeout): the call says so, and calling again reports the
 * release done, whether the lost command ran (it did, when the client
 * had settled on a command the server knows) or not (the client's first
 * release, DELEX, which Valkey 9.0 and 9.1 do not know). The lock is
 * free at the end either way, and only once.
 */
TEST(a_native_release_whose_reply_is_lost_is_retried_to_the_end)
{
    rt_server_opts so;
    rt_server *s;
    rlock_client_opts o;
    rlock_client *c;
    rlock_mutex *m;
    int round;

    memset(&so, 0, sizeof so);
    so.binary = rt_newest_valkey_binary();
    s = rt_server_start(&so);
    rlock_client_opts_init(&o);
    o.command_timeout_ms = 300;
    c = rt_client(rt_server_url(s), &o);
    m = rt_mutex(c, "lost_cad", NULL);
    for (round = 0; round < 2; round++) {
        CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
        rt_server_pause(s);
        CHECK_RC(rlock_mutex_unlock(m), RLOCK_ENOREPLY);
        rt_server_resume(s);
        rt_sleep_ms(100); /* the server carries out what it received */
        CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
        CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:lost_cad}"), ==, 0);
        CHECK_RC(rlock_mutex_unlock(m), RLOCK_ENOTOWNER);
    }
    /* The second round's command had run: it is what released it. */
    CHECK(rt_cmdstat_calls(s, "delifeq") + rt_cmdstat_calls(s, "delex") >= 2);
    rlock_mutex_free(m);
    rlock_client_close(c);
    rt_server_stop(s);
}

/* Valkey 9.0 and 9.1 have DELIFEQ; 9.2 DELEX as well. */
TEST(a_calm_release_is_delifeq_or_delex_on_the_newest_valkey)
{
    release_by_compare_and_delete(rt_newest_valkey_binary(), 1);
}

TEST(a_calm_release_is_delex_on_the_newest_redis)
{
    release_by_compare_and_delete(rt_newest_redis_binary(), 1);
}

TEST(a_calm_release_is_the_fast_script_where_no_compare_and_delete_exists)
{
    release_by_compare_and_delete(NULL, 0);
}

/* The server's clock in milliseconds. */
static long long server_ms(rt_server *s)
{
    return (long long)(server_us(s) / 1000);
}

TEST(a_queue_keeps_an_expired_holders_key_so_no_newcomer_jumps_it)
{
    rt_server *s = rt_server_start(NULL);
    rt_proxy *p = rt_proxy_start(rt_server_port(s));
    rlock_client *a = rt_client(rt_server_url(s), NULL);
    rlock_client_opts bo;
    rlock_client *b;
    rlock_client *c = rt_client(rt_server_url(s), NULL);
    rlock_mutex_opts mo;
    rlock_mutex *ma, *mb, *mc = rt_mutex(c, "fifo", NULL);
    char waiter[160], buf[64], holder[160];
    long long end;
    rlock_status st;
    rt_locker l;

    /* b's calls may stay in the stalled network for a few seconds: its
     * deadline must outlast them, however slow the machine. */
    rlock_client_opts_init(&bo);
    bo.command_timeout_ms = 30000;
    b = rt_client(rt_proxy_url(p), &bo);
    mb = rt_mutex(b, "fifo", NULL);
    /* a holds with a fixed lease it never extends (a holder that died);
     * b queues behind it, and then its network stalls, so that b cannot
     * come back for the lock when a's lease ends. */
    rlock_mutex_opts_init(&mo);
    mo.lease_ms = 1500;
    ma = rt_mutex(a, "fifo", &mo);
    CHECK_RC(rlock_mutex_lock(ma), RLOCK_OK);
    rt_locker_start(&l, mb, 1);
    RT_WAIT_UNTIL(rt_cmd_int(s, "LLEN {rlock:fifo}:queue") == 1, 10000);
    rt_proxy_blackhole(p, RT_PROXY_TO_SERVER | RT_PROXY_TO_CLIENT);
    CHECK(strcmp(rt_lock_field(s, "fifo", RT_WAITERS, buf, sizeof buf), "1") ==
          0);
    {
        redisReply *r = rt_cmd(s, "LINDEX {rlock:fifo}:queue 0");
        CHECK(r->type == REDIS_REPLY_STRING);
        snprintf(waiter, sizeof waiter, "%s", r->str);
        freeReplyObject(r);
    }
    /* The lease's end is in the value; the key lives as long as the
     * queue. */
    end = strtoll(rt_lock_field(s, "fifo", RT_END, buf, sizeof buf), NULL, 10);
    CHECK_INT(end, >, server_ms(s));
    CHECK_INT(end, <=, server_ms(s) + 1500);
    CHECK_INT(rt_cmd_int(s, "PTTL {rlock:fifo}"), >=,
              rt_cmd_int(s, "PTTL {rlock:fifo}:queue") - 50);
    RT_WAIT_UNTIL(server_ms(s) > end + 50, 10000);
    /* a's lease is over, its key kept for b: nobody holds it, one waits. */
    rt_lock_field(s, "fifo", RT_OWNER, holder, sizeof holder);
    CHECK(strcmp(holder, waiter) != 0 && holder[0]);
    CHECK_INT(rt_cmd_int(s, "PTTL {rlock:fifo}"), >, 0);
    CHECK_RC(rlock_mutex_status(mc, &st), RLOCK_OK);
    CHECK(!st.held && st.waiters == 1);
    /* A newcomer on a calm name: its SET NX finds the key, and the full
     * form hands the lock to b, who came first. */
    log_all(s);
    CHECK_RC(rlock_mutex_trylock(mc), RLOCK_EBUSY);
    CHECK_SENT(s, "set 4/5");
    CHECK(strcmp(rt_lock_field(s, "fifo", RT_OWNER, buf, sizeof buf),
                 waiter) == 0);
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:fifo}:queue"), ==, 0);
    /* a learns that its hold is gone. */
    CHECK_RC(rlock_mutex_unlock(ma), RLOCK_ELOST);
    /* b's network comes back: it has the lock, and gives it back. */
    rt_proxy_blackhole(p, 0);
    CHECK_RC(rt_locker_join(&l), RLOCK_OK);
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:fifo}"), ==, 0);
    rlock_mutex_free(ma);
    rlock_mutex_free(mb);
    rlock_mutex_free(mc);
    rlock_client_close(a);
    rlock_client_close(b);
    rlock_client_close(c);
    rt_proxy_stop(p);
    rt_server_stop(s);
}

TEST(a_holder_behind_a_queue_renews_and_extends_its_lease_in_the_value)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client_opts co;
    rlock_client *a, *b;
    rlock_mutex *ma, *mb;
    long long end1, end2, end3;
    char buf[64];
    rlock_status st;
    rt_locker l;

    rlock_client_opts_init(&co);
    co.watchdog_lease_ms = 900; /* renewed every 300 ms */
    a = rt_client(rt_server_url(s), &co);
    b = rt_client(rt_server_url(s), NULL);
    ma = rt_mutex(a, "renewed", NULL);
    mb = rt_mutex(b, "renewed", NULL);
    CHECK_RC(rlock_mutex_lock(ma), RLOCK_OK);
    rt_locker_start(&l, mb, 1);
    RT_WAIT_UNTIL(strcmp(rt_lock_field(s, "renewed", RT_WAITERS, buf,
                                       sizeof buf),
                         "1") == 0,
                  10000);
    end1 = strtoll(rt_lock_field(s, "renewed", RT_END, buf, sizeof buf), NULL,
                   10);
    /* The watchdog moves the end in the value, not only the key's
     * expiry; the hold outlives several leases. */
    RT_WAIT_UNTIL(strtoll(rt_lock_field(s, "renewed", RT_END, buf, sizeof buf),
                          NULL, 10) > end1,
                  5000);
    rt_sleep_ms(2000);
    CHECK_RC(rlock_mutex_status(mb, &st), RLOCK_OK);
    CHECK(st.held && st.lease_ms > 0 && st.lease_ms <= 900 && st.waiters == 1);
    /* extend too, by hand. */
    CHECK_RC(rlock_mutex_extend(ma, 20000), RLOCK_OK);
    end2 = strtoll(rt_lock_field(s, "renewed", RT_END, buf, sizeof buf), NULL,
                   10);
    CHECK_INT(end2, >=, server_ms(s) + 15000);
    CHECK_RC(rlock_mutex_status(mb, &st), RLOCK_OK);
    CHECK_INT(st.lease_ms, >, 15000);
    CHECK_INT(rt_cmd_int(s, "PTTL {rlock:renewed}"), >, 15000);
    /* A shorter lease is a shorter lease, though the key lives on for
     * the queue. */
    CHECK_RC(rlock_mutex_extend(ma, 5000), RLOCK_OK);
    end3 = strtoll(rt_lock_field(s, "renewed", RT_END, buf, sizeof buf), NULL,
                   10);
    CHECK_INT(end3, <, end2);
    CHECK_INT(rt_cmd_int(s, "PTTL {rlock:renewed}"), >, 15000);
    CHECK(!l.done);
    CHECK_RC(rlock_mutex_unlock(ma), RLOCK_OK);
    CHECK_RC(rt_locker_join(&l), RLOCK_OK);
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:renewed}"), ==, 0);
    rlock_mutex_free(ma);
    rlock_mutex_free(mb);
    rlock_client_close(a);
    rlock_client_close(b);
    rt_server_stop(s);
}

/* The lock's value, whole. */
static void get_value(rt_server *s, const char *name, char *buf, size_t cap)
{
    redisReply *r = rt_cmd(s, "GET {rlock:%s}", name);

    CHECK(r->type == REDIS_REPLY_STRING && r->len < cap);
    memcpy(buf, r->str, r->len + 1);
    freeReplyObject(r);
}

/* A waiter joining a queue that exists already leaves the holder's value
 * as it is (its lease's end is in it), but the lock key must still live
 * as long as the queue, whose life that waiter may have made longer: a
 * lock key gone before its queue would let a newcomer's SET NX jump it. */
TEST(a_later_waiter_keeps_the_lock_key_as_long_as_the_longer_queue)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client_opts bo, co;
    rlock_client *a = rt_client(rt_server_url(s), NULL);
    rlock_client *b, *c;
    rlock_mutex *ma, *mb, *mc;
    char v1[256], v2[256];
    rt_locker lb, lc;

    rlock_client_opts_init(&bo);
    bo.waiter_ttl_ms = 2000; /* the queue lives 5 s after b joins */
    b = rt_client(rt_server_url(s), &bo);
    rlock_client_opts_init(&co);
    co.waiter_ttl_ms = 20000; /* ... and 41 s after c joins */
    c = rt_client(rt_server_url(s), &co);
    /* a's lease (the watchdog's, 30 s) is longer than the first and
     * shorter than the second. */
    ma = rt_mutex(a, "longer", NULL);
    mb = rt_mutex(b, "longer", NULL);
    mc = rt_mutex(c, "longer", NULL);
    CHECK_RC(rlock_mutex_lock(ma), RLOCK_OK);
    rt_locker_start(&lb, mb, 1);
    RT_WAIT_UNTIL(rt_cmd_int(s, "LLEN {rlock:longer}:queue") == 1, 10000);
    get_value(s, "longer", v1, sizeof v1);
    CHECK_INT(rt_cmd_int(s, "PTTL {rlock:longer}:queue"), <=, 5000);
    CHECK_INT(rt_cmd_int(s, "PTTL {rlock:longer}"), <=, 30000);
    rt_locker_start(&lc, mc, 1);
    RT_WAIT_UNTIL(rt_cmd_int(s, "LLEN {rlock:longer}:queue") == 2, 10000);
    get_value(s, "longer", v2, sizeof v2);
    CHECK(strcmp(v1, v2) == 0);
    CHECK_INT(rt_cmd_int(s, "PTTL {rlock:longer}:queue"), >, 35000);
    CHECK_INT(rt_cmd_int(s, "PTTL {rlock:longer}"), >=,
              rt_cmd_int(s, "PTTL {rlock:longer}:queue") - 50);
    CHECK_INT(rt_cmd_int(s, "PTTL {rlock:longer}"), >=,
              rt_cmd_int(s, "PTTL {rlock:longer}:qinfo") - 50);
    /* In order, once a lets go. */
    CHECK_RC(rlock_mutex_unlock(ma), RLOCK_OK);
    CHECK_RC(rt_locker_join(&lb), RLOCK_OK);
    CHECK_RC(rt_locker_join(&lc), RLOCK_OK);
    CHECK(lb.token > 0 && lc.token > lb.token); /* b's grant came first */
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:longer}"), ==, 0);
    rlock_mutex_free(ma);
    rlock_mutex_free(mb);
    rlock_mutex_free(mc);
    rlock_client_close(a);
    rlock_client_close(b);
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

    /* A token drawn for a lean hold, on a new name. */
    before = server_us(s);
    CHECK_RC(rlock_mutex_lock(ma), RLOCK_OK);
    t1 = rlock_mutex_token(ma);
    CHECK(t1 >= before);
    CHECK_RC(rlock_mutex_unlock(ma), RLOCK_OK);
    /* The counter lost (evicted, deleted, a restart without
     * persistence): the next token is still greater (the fenced fast
     * form now). */
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

TEST(a_server_that_says_ok_to_a_script_gets_a_protocol_error)
{
    rt_fake *f = rt_fake_start(RT_FAKE_OK, 0);
    rlock_client *c = rt_client(rt_fake_url(f), NULL);
    rlock_mutex *m = rt_mutex(c, "ok", NULL);
    rlock_mutex *fenced = rt_mutex(c, "ok2", NULL);
    uint64_t t = 7;

    /* "+OK" is the lean SET NX's "taken": a hold, without a token. */
    CHECK_RC(rlock_mutex_trylock(m), RLOCK_OK);
    /* No script answers so: not the fence script (no token), not a
     * re-entry's full form, not the fenced fast form (no hold). */
    CHECK_RC(rlock_mutex_fence(m, &t), RLOCK_EPROTO);
    CHECK(t == 0);
    CHECK(strstr(rlock_client_errmsg(c), "unexpected reply") != NULL);
    CHECK_RC(rlock_mutex_trylock(m), RLOCK_EPROTO);
    CHECK(strstr(rlock_client_errmsg(c), "unexpected reply") != NULL);
    CHECK_RC(rlock_mutex_fence(fenced, &t), RLOCK_ENOTOWNER); /* asked */
    CHECK_RC(rlock_mutex_trylock(fenced), RLOCK_EPROTO);
    CHECK(strstr(rlock_client_errmsg(c), "unexpected reply") != NULL);
    CHECK(rlock_mutex_token(fenced) == 0);
    rlock_mutex_free(m);
    rlock_mutex_free(fenced);
    rlock_client_close(c);
    rt_fake_stop(f);
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
