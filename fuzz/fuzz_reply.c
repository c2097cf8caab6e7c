/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Fuzz target: what the library makes of Redis's answers.
 *
 * The input is fed to hiredis's reply reader as bytes from the server, and
 * every reply the reader makes of it goes to every interpreter in
 * src/reply.c (acquire, release, extend, renew, status, force, INFO, the
 * subscriber's pushes) and to rlock__reply_error. So that the string
 * parsers inside them are reached without the fuzzer having to get RESP
 * length prefixes right, the input is also wrapped, as it is, into the
 * places of real replies: a grant message's text, an acquire reply's
 * token, the status reply's fields, INFO's version and an error line.
 *
 * The checks are what the callers rely on:
 *  - acquire: status is -1, 0 or 1; a hold has count >= 1 and a token
 *    >= 1 whose decimal form is the token string Redis sent (the release,
 *    extend and renew scripts compare tokens as strings); a busy hint is
 *    -1 (unknown) or in [0, RLOCK_MS_MAX] (wait.c adds to it and scales it
 *    to nanoseconds);
 *  - a grant has a token >= 1 sent in canonical decimal, a lease in
 *    [0, RLOCK_MS_MAX] (wait.c scales it to nanoseconds), and the owner it
 *    names holds no space; channel and owner point into the reply;
 *  - status and force leave NUL-terminated holders, and a free lock has
 *    no count, token or lease; INFO's version is NUL-terminated within
 *    its buffer and holds no line break;
 *  - a token-layout value gives 0 or exactly the number after its last
 *    ':' (no leading zero, no sign, at most 19 digits);
 *  - an error reply maps to RLOCK_EAUTH or RLOCK_EREDIS, except the
 *    deployment states, by their code (the first word): NOREPLICAS to
 *    RLOCK_EREPLICAS; READONLY, LOADING, MASTERDOWN and CLUSTERDOWN to
 *    RLOCK_EUNAVAILABLE.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/node.h"
#include "core/reply.h"

#include "fuzz.h"

/* hiredis allocates an array's element table as soon as it reads the
 * header "*N": cap N, as a server's reply would be, so that a header
 * alone cannot ask for gigabytes. The count's type is hiredis's. */
#if defined(HIREDIS_MAJOR) && HIREDIS_MAJOR >= 1
typedef size_t array_count;
#else
typedef int array_count;
#endif
#define MAX_ELEMENTS 4096
#define MAX_REPLIES 64

static void *(*real_create_array)(const redisReadTask *, array_count);

static void *create_array_capped(const redisReadTask *task, array_count n)
{
    if ((size_t)n > MAX_ELEMENTS)
        return NULL; /* the reader reports out of memory */
    return real_create_array(task, n);
}

/* ---- checks ---------------------------------------------------------- */

static int canonical_u64(const redisReply *s, uint64_t v)
{
    char buf[24];
    int n = snprintf(buf, sizeof buf, "%" PRIu64, v);

    return s->type == REDIS_REPLY_STRING && (size_t)s->len == (size_t)n &&
           memcmp(s->str, buf, (size_t)n) == 0;
}

static void check_acquire(const redisReply *r)
{
    rlock__acquired a;

    if (rlock__parse_acquire(r, &a) != RLOCK_OK)
        return;
    FUZZ_CHECK((a.status >= -1 && a.status <= 1) ||
               a.status == RLOCK__ACQ_AGAIN);
    FUZZ_CHECK(!a.plain ||
               (a.status == 1 && (r->type == REDIS_REPLY_INTEGER ||
                                  r->type == REDIS_REPLY_STATUS)));
    if (a.status == RLOCK__ACQ_AGAIN) {
        /* A fast form's "ask the full script": the integer 0 alone, or
         * the lean form's nil. */
        FUZZ_CHECK((r->type == REDIS_REPLY_INTEGER && r->integer == 0) ||
                   r->type == REDIS_REPLY_NIL);
    } else if (a.status == 1 && r->type == REDIS_REPLY_STATUS) {
        /* The lean form's +OK: taken, count 1, no token drawn. */
        FUZZ_CHECK(a.plain && a.count == 1 && a.token == 0 && r->len == 2 &&
                   memcmp(r->str, "OK", 2) == 0);
    } else if (a.status == 1 && r->type == REDIS_REPLY_INTEGER) {
        /* The short answer: an exact token, count 1. */
        FUZZ_CHECK(a.count == 1 && a.token >= 1 &&
                   a.token <= RLOCK__TOKEN_MAX &&
                   (long long)a.token == r->integer);
    } else if (a.status == 1) {
        /* Token 0: a hold whose token is not drawn yet. */
        FUZZ_CHECK(a.count >= 1);
        FUZZ_CHECK(canonical_u64(r->element[1], a.token));
    } else if (a.status == 0) {
        FUZZ_CHECK(a.hint_ms >= -1 && a.hint_ms <= RLOCK_MS_MAX);
        /* The holder's node count only where the script says it. */
        FUZZ_CHECK(a.list_nodes == 0 ||
                   (r->elements == 3 && a.list_nodes >= 1 &&
                    a.list_nodes <= 65535 &&
                    a.list_nodes == r->element[2]->integer));
    }
}

static void check_counts(const redisReply *r)
{
    rlock__released rel;
    int ok = -1;
    size_t i;

    rel.remaining = -12345;
    if (rlock__parse_release(r, &rel) == RLOCK_OK) {
        FUZZ_CHECK(memchr(rel.unnotified, '\0', sizeof rel.unnotified));
        if (r->type == REDIS_REPLY_INTEGER)
            FUZZ_CHECK(rel.remaining == r->integer &&
                       rel.remaining >= RLOCK__RELEASE_AGAIN &&
                       !rel.unnotified[0]);
        else /* released, the waiters not told: why, printable */
            FUZZ_CHECK(r->type == REDIS_REPLY_ARRAY && rel.remaining == 0 &&
                       rel.unnotified[0] &&
                       strspn(rel.unnotified,
                              " !\"#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHI"
                              "JKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstu"
                              "vwxyz{|}~") == strlen(rel.unnotified));
    } else {
        FUZZ_CHECK(rel.remaining == -12345);
    }
    if (rlock__parse_extend(r, &ok) == RLOCK_OK)
        FUZZ_CHECK(ok == 0 || ok == 1);
    else
        FUZZ_CHECK(ok == -1);
    {
        /* The fence script: a token (exact, within 53 bits) or -1, gone;
         * anything else refused, *token 0. */
        uint64_t token = 12345;
        if (rlock__parse_fence(r, &token) == RLOCK_OK)
            FUZZ_CHECK(r->type == REDIS_REPLY_INTEGER &&
                       ((r->integer == -1 && token == 0) ||
                        (r->integer >= 1 && token <= RLOCK__TOKEN_MAX &&
                         (long long)token == r->integer)));
        else
            FUZZ_CHECK(token == 0);
    }
    {
        /* A compare-and-delete's answer: deleted or kept only for the
         * integers 1 and 0; any other answer but an error is a refusal;
         * no answer is none of them. */
        int d = rlock__parse_cad(r);
        FUZZ_CHECK(d == RLOCK__CAD_DELETED || d == RLOCK__CAD_KEPT ||
                   d == RLOCK__CAD_REFUSED || d == RLOCK__CAD_OTHER);
        FUZZ_CHECK((d == RLOCK__CAD_DELETED || d == RLOCK__CAD_KEPT) ==
                   (r->type == REDIS_REPLY_INTEGER &&
                    (r->integer == 0 || r->integer == 1)));
        FUZZ_CHECK(d != RLOCK__CAD_OTHER || r->type == REDIS_REPLY_ERROR);
        FUZZ_CHECK(d == RLOCK__CAD_REFUSED || r->type == REDIS_REPLY_ERROR ||
                   r->type == REDIS_REPLY_INTEGER);
        FUZZ_CHECK(rlock__parse_cad(NULL) == RLOCK__CAD_OTHER);
    }
    if (r->type != REDIS_REPLY_ARRAY) {
        FUZZ_CHECK(rlock__parse_renew(r, 1) != RLOCK_OK);
        return;
    }
    FUZZ_CHECK(rlock__parse_renew(r, r->elements) == RLOCK_OK);
    FUZZ_CHECK(rlock__parse_renew(r, r->elements + 1) != RLOCK_OK);
    for (i = 0; i < r->elements; i++) {
        int v = rlock__renewed(r, i);
        FUZZ_CHECK(v == 0 || v == 1);
    }
}

/* The holder and its identity: NUL-terminated; a host only with a pid,
 * of the characters rlock writes. */
static void check_holder(const rlock_status *st)
{
    FUZZ_CHECK(memchr(st->holder, '\0', sizeof st->holder) != NULL);
    FUZZ_CHECK(memchr(st->holder_host, '\0', sizeof st->holder_host) != NULL);
    FUZZ_CHECK((st->holder_host[0] != '\0') == (st->holder_pid > 0));
    FUZZ_CHECK(strspn(st->holder_host,
                      "abcdefghijklmnopqrstuvwxyz"
                      "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                      "0123456789._-") == strlen(st->holder_host));
    FUZZ_CHECK(st->holder_pid >= 0 && st->holder_pid <= 9999999999LL);
}

static void check_refusal(const redisReply *r)
{
    char why[16];
    size_t i;

    memset(why, 0x5a, sizeof why);
    if (!rlock__parse_refusal(r, why, 8)) {
        FUZZ_CHECK(why[0] == 0x5a);
        return;
    }
    FUZZ_CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 2);
    FUZZ_CHECK(memchr(why, '\0', 8) != NULL);
    for (i = 0; why[i]; i++)
        FUZZ_CHECK(why[i] >= ' ' && why[i] < 0x7f);
    for (i = 8; i < sizeof why; i++)
        FUZZ_CHECK(why[i] == 0x5a);
    FUZZ_CHECK(rlock__parse_refusal(r, why, 0) == 0); /* writes nothing */
}

/* An owner string's identity from any string the reply holds. */
static void check_identity(const redisReply *r)
{
    rlock_status st;
    char buf[256];
    size_t n;

    if (r->type != REDIS_REPLY_STRING)
        return;
    n = (size_t)r->len < sizeof buf - 1 ? (size_t)r->len : sizeof buf - 1;
    memcpy(buf, r->str, n);
    buf[n] = '\0';
    memset(&st, 0, sizeof st);
    rlock__parse_identity(&st, buf);
    check_holder(&st);
}

static void check_status(const redisReply *r)
{
    rlock_status st;

    memset(&st, 0x5a, sizeof st);
    if (rlock__parse_status(r, &st) != RLOCK_OK) {
        unsigned char *p = (unsigned char *)&st;
        size_t i;
        for (i = 0; i < sizeof st; i++)
            FUZZ_CHECK(p[i] == 0x5a); /* untouched */
        return;
    }
    check_holder(&st);
    FUZZ_CHECK(st.held == (st.holder[0] != '\0'));
    if (!st.held)
        FUZZ_CHECK(st.count == 0 && st.token == 0 && st.lease_ms == -1);
}

static void check_force(const redisReply *r)
{
    rlock_status st;
    char why[16];

    memset(&st, 0x5a, sizeof st);
    memset(why, 0x5a, sizeof why);
    if (rlock__parse_force(r, &st, why, 8) != RLOCK_OK) {
        FUZZ_CHECK(!st.held && st.holder[0] == '\0' && st.lease_ms == -1);
        return;
    }
    check_holder(&st);
    FUZZ_CHECK(memchr(why, '\0', 8) != NULL && why[8] == 0x5a);
    FUZZ_CHECK(st.lease_ms == -1);
    if (st.held)
        FUZZ_CHECK(st.last_token == st.token);
    else
        FUZZ_CHECK(r->type == REDIS_REPLY_NIL && st.count == 0 &&
                   st.token == 0);
}

static void check_info(const redisReply *r)
{
    static const size_t lens[] = {1, 2, 8, 32};
    char buf[48];
    size_t i, k;

    for (i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        memset(buf, 0x5a, sizeof buf);
        rlock__parse_info_field(r, i % 2 ? "redis_version" : "server_name", buf,
                                lens[i]);
        FUZZ_CHECK(memchr(buf, '\0', lens[i]) != NULL);
        FUZZ_CHECK(strpbrk(buf, "\r\n") == NULL);
        for (k = lens[i]; k < sizeof buf; k++)
            FUZZ_CHECK(buf[k] == 0x5a);
    }
    rlock__parse_info_field(r, "redis_version", buf, 0); /* writes nothing */
    /* A server is known (not 0) only by a run_id the reply has. */
    rlock__parse_info_field(r, "run_id", buf, sizeof buf);
    FUZZ_CHECK((rlock__parse_run_id(r) != 0) == (buf[0] != '\0'));
}

static void check_pubsub(const redisReply *r)
{
    rlock__pubsub p;
    const redisReply *msg;
    char expect[96];
    int n;

    if (rlock__parse_pubsub(r, &p) != RLOCK_OK)
        return;
    FUZZ_CHECK(r->type == REDIS_REPLY_ARRAY && r->elements >= 3);
    FUZZ_CHECK(p.kind == RLOCK__PS_OTHER || p.kind == RLOCK__PS_MESSAGE ||
               p.kind == RLOCK__PS_SUBSCRIBE);
    FUZZ_CHECK(p.channel == r->element[1]->str &&
               p.channel_len == (size_t)r->element[1]->len);
    if (p.kind != RLOCK__PS_MESSAGE) {
        FUZZ_CHECK(!p.grant && !p.who);
        return;
    }
    msg = r->element[2];
    FUZZ_CHECK(msg->type == REDIS_REPLY_STRING && p.who == msg->str);
    FUZZ_CHECK(p.who_len <= (size_t)msg->len);
    FUZZ_CHECK(memchr(p.who, ' ', p.who_len) == NULL);
    if (!p.grant) {
        FUZZ_CHECK(p.who_len == (size_t)msg->len);
        return;
    }
    FUZZ_CHECK(p.token >= 1);
    FUZZ_CHECK(p.lease_ms >= 0 && p.lease_ms <= RLOCK_MS_MAX);
    /* What the scripts send, byte for byte. */
    n = snprintf(expect, sizeof expect, " %" PRIu64 " %" PRIu64 " %" PRId64,
                 p.token, p.nonce, p.lease_ms);
    FUZZ_CHECK(n > 0 && (size_t)msg->len == p.who_len + (size_t)n);
    FUZZ_CHECK(memcmp(msg->str + p.who_len, expect, (size_t)n) == 0);
}

static int code_is(const redisReply *r, const char *word)
{
    size_t n = strlen(word);

    return r->str && (size_t)r->len >= n && memcmp(r->str, word, n) == 0 &&
           ((size_t)r->len == n || r->str[n] == ' ');
}

static void check_error(const redisReply *r)
{
    const char *msg;
    rlock__err e;
    int rc;

    if (r->type != REDIS_REPLY_ERROR)
        return;
    rc = rlock__reply_error("fuzz:1", r, &e);
    FUZZ_CHECK(rc == RLOCK_EAUTH || rc == RLOCK_EREDIS ||
               rc == RLOCK_EREPLICAS || rc == RLOCK_EUNAVAILABLE ||
               rc == RLOCK_EPERM);
    /* The deployment's states by their code (the first word), nothing
     * else. */
    if (code_is(r, "NOREPLICAS"))
        FUZZ_CHECK(rc == RLOCK_EREPLICAS);
    else if (code_is(r, "READONLY") || code_is(r, "LOADING") ||
             code_is(r, "MASTERDOWN") || code_is(r, "CLUSTERDOWN"))
        FUZZ_CHECK(rc == RLOCK_EUNAVAILABLE);
    else if (code_is(r, "NOPERM"))
        FUZZ_CHECK(rc == RLOCK_EPERM); /* an ACL's refusal, by its code */
    else
        FUZZ_CHECK(rc == RLOCK_EAUTH || rc == RLOCK_EREDIS);
    msg = e.msg;
    FUZZ_CHECK(e.code == rc && memchr(msg, '\0', sizeof e.msg) != NULL);
}

/* A token-layout value: 0, or exactly the digits after the last ':'. */
static void check_token_value(const redisReply *r)
{
    uint64_t t;
    char back[32];

    if (r->type != REDIS_REPLY_STRING || memchr(r->str, '\0', (size_t)r->len))
        return;
    t = rlock__token_value(r->str);
    if (t == 0)
        return;
    snprintf(back, sizeof back, ":%" PRIu64, t);
    FUZZ_CHECK(strlen(r->str) >= strlen(back) &&
               strcmp(r->str + strlen(r->str) - strlen(back), back) == 0);
}

static void check_reply(const redisReply *r)
{
    check_token_value(r);
    check_acquire(r);
    check_counts(r);
    check_status(r);
    check_force(r);
    check_refusal(r);
    check_identity(r);
    check_info(r);
    check_pubsub(r);
    check_error(r);
}

/* ---- feeding the reader -------------------------------------------------- */

static void feed(const char *buf, size_t len)
{
    redisReader *reader = redisReaderCreate();
    redisReplyObjectFunctions fn;
    void *reply;
    int i;

    if (!reader)
        abort();
    fn = *reader->fn;
    real_create_array = fn.createArray;
    fn.createArray = create_array_capped;
    reader->fn = &fn;
    if (redisReaderFeed(reader, buf, len) == REDIS_OK) {
        for (i = 0; i < MAX_REPLIES; i++) {
            reply = NULL;
            if (redisReaderGetReply(reader, &reply) != REDIS_OK || !reply)
                break;
            check_reply(reply);
            freeReplyObject(reply);
        }
    }
    redisReaderFree(reader);
}

typedef struct {
    char *p;
    size_t len, cap;
} out_buf;

static void put(out_buf *o, const void *s, size_t n)
{
    if (n == 0)
        return;
    if (o->len + n > o->cap) {
        size_t cap = (o->len + n) * 2 + 64;
        char *bigger = realloc(o->p, cap);
        if (!bigger)
            abort();
        o->p = bigger;
        o->cap = cap;
    }
    memcpy(o->p + o->len, s, n);
    o->len += n;
}

static void puts_(out_buf *o, const char *s)
{
    put(o, s, strlen(s));
}

/* The input as one bulk string: "$<len>\r\n<data>\r\n". */
static void put_bulk(out_buf *o, const uint8_t *data, size_t size)
{
    char head[32];

    snprintf(head, sizeof head, "$%zu\r\n", size);
    puts_(o, head);
    put(o, data, size);
    puts_(o, "\r\n");
}

static void feed_wrapped(const uint8_t *data, size_t size)
{
    static const char channel[] =
        "{rlock:job}:wake:0123456789abcdef0123456789abcdef";
    static const char info[] = "# Server\r\nredis_version:";
    out_buf o = {NULL, 0, 0};
    char head[64];

    /* A message on a wake channel whose text is the input. */
    puts_(&o, "*3\r\n$7\r\nmessage\r\n");
    put_bulk(&o, (const uint8_t *)channel, sizeof channel - 1);
    put_bulk(&o, data, size);
    feed(o.p, o.len);

    /* An acquire reply whose token is the input. */
    o.len = 0;
    puts_(&o, "*3\r\n:1\r\n");
    put_bulk(&o, data, size);
    puts_(&o, ":1\r\n");
    feed(o.p, o.len);

    /* A status reply whose string fields are the input. */
    o.len = 0;
    puts_(&o, "*6\r\n");
    put_bulk(&o, data, size);
    put_bulk(&o, data, size);
    put_bulk(&o, data, size);
    puts_(&o, ":1500\r\n");
    put_bulk(&o, data, size);
    puts_(&o, ":2\r\n");
    feed(o.p, o.len);

    /* INFO whose redis_version is the input. */
    o.len = 0;
    snprintf(head, sizeof head, "$%zu\r\n", sizeof info - 1 + size + 2);
    puts_(&o, head);
    puts_(&o, info);
    put(&o, data, size);
    puts_(&o, "\r\n\r\n");
    feed(o.p, o.len);

    /* An error line. */
    o.len = 0;
    puts_(&o, "-");
    put(&o, data, size);
    puts_(&o, "\r\n");
    feed(o.p, o.len);
    free(o.p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    feed((const char *)data, size);
    feed_wrapped(data, size);
    return 0;
}
