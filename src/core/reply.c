/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What the library makes of Redis's answers: the scripts' replies
 * (scripts.c says what each script returns) and the pushes on the
 * subscriber connection.
 *
 * These are the only places where bytes from the server become numbers the
 * library computes with (tokens, counts, leases), so they are kept apart
 * from the code that talks to Redis and fuzzed on their own
 * (fuzz/fuzz_reply.c). A reply of a shape the script cannot give is
 * RLOCK_EPROTO; the caller records the detail.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/reply.h"

static int is_int(const redisReply *r)
{
    return r->type == REDIS_REPLY_INTEGER;
}

static int is_str(const redisReply *r, const char *s)
{
    return r->type == REDIS_REPLY_STRING && (size_t)r->len == strlen(s) &&
           memcmp(r->str, s, (size_t)r->len) == 0;
}

/* A number as the scripts write it (Lua's tostring of an integer, or what
 * the client itself sent with "%" PRIu64): decimal digits, no sign, no
 * leading zero, at most UINT64_MAX, exactly [s, s+len). 0 or -1. */
static int parse_u64(const char *s, size_t len, uint64_t *out)
{
    uint64_t v = 0;
    size_t i;

    if (len == 0 || len > 20 || (s[0] == '0' && len > 1))
        return -1;
    for (i = 0; i < len; i++) {
        unsigned d;
        if (s[i] < '0' || s[i] > '9')
            return -1;
        d = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

/* ---- the scripts' replies ---------------------------------------------- */

/*
 * The token must be the exact decimal text Redis holds: the release,
 * extend and renew scripts compare tokens as strings, and 0 means "no
 * hold" to rlock_mutex_token. The busy hint is PTTL: kept in [-1,
 * RLOCK_MS_MAX], since wait.c adds to it and scales it to nanoseconds.
 */

int rlock__parse_acquire(const redisReply *r, rlock__acquired *a)
{
    const redisReply *e;

    memset(a, 0, sizeof *a);
    /* The lean form's SET NX: taken, or nothing done. */
    if (r->type == REDIS_REPLY_STATUS && r->len == 2 &&
        memcmp(r->str, "OK", 2) == 0) {
        a->status = 1;
        a->plain = 1;
        a->count = 1;
        return RLOCK_OK;
    }
    if (r->type == REDIS_REPLY_NIL) {
        a->status = RLOCK__ACQ_AGAIN;
        return RLOCK_OK;
    }
    /* A fresh acquisition's short answer: the token alone (count 1); or
     * a fast form's 0. */
    if (is_int(r)) {
        if (r->integer == 0) {
            a->status = RLOCK__ACQ_AGAIN;
            return RLOCK_OK;
        }
        if (r->integer < 1 || (uint64_t)r->integer > RLOCK__TOKEN_MAX)
            return RLOCK_EPROTO;
        a->status = 1;
        a->plain = 1;
        a->token = (uint64_t)r->integer;
        a->count = 1;
        return RLOCK_OK;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
        !is_int(r->element[0]))
        return RLOCK_EPROTO;
    if (r->element[0]->integer < 0) {
        a->status = -1;
        return RLOCK_OK;
    }
    if (r->element[0]->integer == 0) {
        if (r->elements < 2 || !is_int(r->element[1]))
            return RLOCK_EPROTO;
        a->hint_ms = r->element[1]->integer;
        if (a->hint_ms < 0)
            a->hint_ms = -1;
        else if (a->hint_ms > RLOCK_MS_MAX)
            a->hint_ms = RLOCK_MS_MAX;
        /* The holder's node count: a number a URL can give (65,535 is
         * far above any list a client accepts). Nothing more. */
        if (r->elements > 3)
            return RLOCK_EPROTO;
        if (r->elements == 3) {
            if (!is_int(r->element[2]) || r->element[2]->integer < 1 ||
                r->element[2]->integer > 65535)
                return RLOCK_EPROTO;
            a->list_nodes = (int)r->element[2]->integer;
        }
        return RLOCK_OK;
    }
    if (r->elements != 3)
        return RLOCK_EPROTO;
    e = r->element[1];
    if (e->type != REDIS_REPLY_STRING || !is_int(r->element[2]) ||
        r->element[2]->integer < 1 ||
        parse_u64(e->str, (size_t)e->len, &a->token) != 0)
        return RLOCK_EPROTO;
    a->status = 1;
    a->count = r->element[2]->integer;
    return RLOCK_OK;
}

int rlock__parse_fence(const redisReply *r, uint64_t *token)
{
    *token = 0;
    if (!is_int(r) || r->integer == 0 || r->integer < -1 ||
        (r->integer > 0 && (uint64_t)r->integer > RLOCK__TOKEN_MAX))
        return RLOCK_EPROTO;
    if (r->integer > 0)
        *token = (uint64_t)r->integer;
    return RLOCK_OK;
}

/* A server's text into out (len > 0 bytes): printable ASCII, others as
 * '?', cut to fit; it goes to messages and terminals. */
static void copy_text(char *out, size_t len, const redisReply *r)
{
    size_t n = 0;

    if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS ||
        r->type == REDIS_REPLY_ERROR)
        for (; n < len - 1 && n < (size_t)r->len; n++)
            out[n] = r->str[n] >= ' ' && r->str[n] < 0x7f ? r->str[n] : '?';
    out[n] = '\0';
}

int rlock__parse_release(const redisReply *r, rlock__released *out)
{
    out->unnotified[0] = '\0';
    if (is_int(r)) {
        if (r->integer < RLOCK__RELEASE_AGAIN)
            return RLOCK_EPROTO;
        out->remaining = r->integer;
        return RLOCK_OK;
    }
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        is_int(r->element[0]) && r->element[0]->integer == 0) {
        out->remaining = 0;
        copy_text(out->unnotified, sizeof out->unnotified, r->element[1]);
        if (!out->unnotified[0])
            snprintf(out->unnotified, sizeof out->unnotified, "refused");
        return RLOCK_OK;
    }
    return RLOCK_EPROTO;
}

int rlock__parse_extend(const redisReply *r, int *extended)
{
    if (!is_int(r))
        return RLOCK_EPROTO;
    *extended = r->integer != 0;
    return RLOCK_OK;
}

int rlock__parse_renew(const redisReply *r, size_t n)
{
    return r->type == REDIS_REPLY_ARRAY && r->elements == n ? RLOCK_OK
                                                            : RLOCK_EPROTO;
}

int rlock__renewed(const redisReply *r, size_t i)
{
    return is_int(r->element[i]) && r->element[i]->integer == 1;
}

int rlock__parse_renew_cas(redisReply *const *rs, size_t nr, size_t n)
{
    size_t i;

    if (!rs || nr != n)
        return RLOCK_EPROTO;
    for (i = 0; i < n; i++) {
        const redisReply *e = rs[i];
        if (e->type == REDIS_REPLY_NIL || rlock__cas_renewed(rs, i))
            continue;
        if (e->type == REDIS_REPLY_ERROR && e->str &&
            strncmp(e->str, "WRONGTYPE", 9) == 0)
            continue;
        return RLOCK_EPROTO;
    }
    return RLOCK_OK;
}

int rlock__cas_renewed(redisReply *const *rs, size_t i)
{
    const redisReply *e = rs[i];

    return e->type == REDIS_REPLY_STATUS && e->len == 2 &&
           memcmp(e->str, "OK", 2) == 0;
}

/* Whether error e says that the server does not take the command as
 * sent, whatever the data: it does not know it (or this option of it), or
 * the user may not run it. Errors about the data (WRONGTYPE; Redis 8.4's
 * "ERR Key should be of string type" for DELEX on another type) and the
 * passing ones (LOADING, MOVED, BUSY, OOM...) do not. */
static int refusal(const redisReply *e)
{
    static const char *const says[] = {
        "ERR unknown command", "ERR unknown subcommand",
        "ERR wrong number of arguments", "ERR syntax error", "NOPERM",
    };
    size_t i;

    if (!e->str)
        return 1;
    for (i = 0; i < sizeof says / sizeof says[0]; i++)
        if (strncmp(e->str, says[i], strlen(says[i])) == 0)
            return 1;
    return 0;
}

int rlock__cas_refused(redisReply *const *rs, size_t nr)
{
    size_t i;

    for (i = 0; i < nr; i++) {
        const redisReply *e = rs[i];
        if (e->type == REDIS_REPLY_NIL || rlock__cas_renewed(rs, i))
            continue;
        if (e->type != REDIS_REPLY_ERROR || refusal(e))
            return 1;
    }
    return 0;
}

int rlock__parse_cad(const redisReply *e)
{
    if (!e)
        return RLOCK__CAD_OTHER;
    if (e->type == REDIS_REPLY_INTEGER && (e->integer == 0 || e->integer == 1))
        return e->integer ? RLOCK__CAD_DELETED : RLOCK__CAD_KEPT;
    if (e->type != REDIS_REPLY_ERROR || refusal(e))
        return RLOCK__CAD_REFUSED;
    return RLOCK__CAD_OTHER;
}

/* A number the status and force scripts return either as an integer or as
 * the string a hash field holds; 0 for anything else. */
static int64_t str_int(const redisReply *r)
{
    if (r->type == REDIS_REPLY_INTEGER)
        return r->integer;
    if (r->type == REDIS_REPLY_STRING)
        return strtoll(r->str, NULL, 10);
    return 0;
}

static void copy_holder(rlock_status *st, const redisReply *r)
{
    size_t n = 0;

    if (r->type == REDIS_REPLY_STRING) {
        n = (size_t)r->len < sizeof st->holder - 1 ? (size_t)r->len
                                                   : sizeof st->holder - 1;
        memcpy(st->holder, r->str, n);
    }
    st->holder[n] = '\0';
}

/* "<host>/<pid>" at [s, s + len) into st: the host as rlock writes it
 * ([A-Za-z0-9._-], at most RLOCK__HOST_MAX bytes), the pid 1 to 10 digits.
 * Anything else leaves st as it is. */
static void who_into(rlock_status *st, const char *s, size_t len)
{
    size_t slash = len, i;
    int64_t pid = 0;

    while (slash > 0 && s[slash - 1] != '/')
        slash--;
    if (slash < 2 || slash - 1 >= sizeof st->holder_host || len - slash < 1 ||
        len - slash > 10)
        return;
    for (i = slash; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return;
        pid = pid * 10 + (s[i] - '0');
    }
    if (pid == 0)
        return;
    for (i = 0; i + 1 < slash; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
              (s[i] >= '0' && s[i] <= '9') || s[i] == '.' || s[i] == '-' ||
              s[i] == '_'))
            return;
    memcpy(st->holder_host, s, slash - 1);
    st->holder_host[slash - 1] = '\0';
    st->holder_pid = pid;
}

void rlock__parse_identity(rlock_status *st, const char *owner)
{
    const char *colon;
    size_t i;

    for (i = 0; i < 32; i++)
        if (!((owner[i] >= '0' && owner[i] <= '9') ||
              (owner[i] >= 'a' && owner[i] <= 'f')))
            return;
    if (owner[32] != '@' || !(colon = strchr(owner + 33, ':')))
        return;
    who_into(st, owner + 33, (size_t)(colon - (owner + 33)));
}

int rlock__parse_status(const redisReply *r, rlock_status *st)
{
    if (r->type != REDIS_REPLY_ARRAY || (r->elements != 6 && r->elements != 7))
        return RLOCK_EPROTO;
    memset(st, 0, sizeof *st);
    copy_holder(st, r->element[0]);
    st->held = st->holder[0] != '\0';
    st->count = st->held ? str_int(r->element[1]) : 0;
    st->token = st->held ? (uint64_t)str_int(r->element[2]) : 0;
    st->lease_ms = st->held ? str_int(r->element[3]) : -1;
    st->last_token = (uint64_t)str_int(r->element[4]);
    st->waiters = str_int(r->element[5]);
    if (st->held && r->elements == 7 &&
        r->element[6]->type == REDIS_REPLY_STRING)
        who_into(st, r->element[6]->str, (size_t)r->element[6]->len);
    else if (st->held)
        rlock__parse_identity(st, st->holder);
    return RLOCK_OK;
}

int rlock__parse_force(const redisReply *r, rlock_status *removed,
                       char *unnotified, size_t len)
{
    memset(removed, 0, sizeof *removed);
    removed->lease_ms = -1;
    if (len > 0)
        unnotified[0] = '\0';
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 5 && len > 0) {
        copy_text(unnotified, len, r->element[4]);
        if (!unnotified[0])
            snprintf(unnotified, len, "refused");
    }
    if (r->type == REDIS_REPLY_ARRAY &&
        (r->elements == 3 || r->elements == 4 || r->elements == 5)) {
        copy_holder(removed, r->element[0]);
        removed->held = 1;
        removed->count = str_int(r->element[1]);
        removed->token = (uint64_t)str_int(r->element[2]);
        removed->last_token = removed->token;
        if (r->elements >= 4 && r->element[3]->type == REDIS_REPLY_STRING &&
            r->element[3]->len > 0)
            who_into(removed, r->element[3]->str, (size_t)r->element[3]->len);
        else
            rlock__parse_identity(removed, removed->holder);
    } else if (r->type != REDIS_REPLY_NIL) {
        return RLOCK_EPROTO;
    }
    return RLOCK_OK;
}

int rlock__parse_refusal(const redisReply *r, char *why, size_t len)
{
    const redisReply *e;
    size_t n = 0;

    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        !is_int(r->element[0]) || r->element[0]->integer != 0 ||
        r->element[1]->type != REDIS_REPLY_STRING || len == 0)
        return 0;
    e = r->element[1];
    while (n < len - 1 && n < (size_t)e->len && e->str[n] >= ' ' &&
           e->str[n] < 0x7f) {
        why[n] = e->str[n];
        n++;
    }
    why[n] = '\0';
    return 1;
}

void rlock__parse_info_field(const redisReply *r, const char *field, char *out,
                             size_t len)
{
    size_t flen = strlen(field), n = 0;
    const char *v = NULL, *p;

    if (len == 0)
        return;
    if (rlock__reply_is_text(r)) {
        /* "field:" at the start of a line: not inside another's name
         * (redis_version inside a made-up xredis_version). */
        for (p = r->str; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
            if (strncmp(p, field, flen) == 0 && p[flen] == ':') {
                v = p + flen + 1;
                break;
            }
    }
    /* Printable ASCII only: the value goes to terminals and logs. */
    while (v && n < len - 1 && v[n] > ' ' && v[n] < 0x7f)
        n++;
    if (v)
        memcpy(out, v, n);
    out[n] = '\0';
}

uint64_t rlock__parse_run_id(const redisReply *r)
{
    char id[64];
    uint64_t h = UINT64_C(14695981039346656037);
    size_t i;

    /* FNV-1a: the run_id is 160 random bits in hex, any 64 of which tell
     * two servers apart; the digest only spares the caller a string. */
    rlock__parse_info_field(r, "run_id", id, sizeof id);
    if (!id[0])
        return 0;
    for (i = 0; id[i]; i++) {
        h ^= (unsigned char)id[i];
        h *= UINT64_C(1099511628211);
    }
    return h ? h : 1;
}

/* ---- the subscriber's messages ------------------------------------------ */

/*
 * " <token> <nonce> <lease_ms>" after the owner of a grant, exactly as the
 * scripts write it. The token becomes the hold's (compared as a string by
 * the scripts later, never 0) and the lease is scaled to nanoseconds
 * (wait.c), so anything else is not a grant Redis made: ignored.
 */
static int parse_grant(const char *s, size_t len, rlock__pubsub *p)
{
    uint64_t f[3];
    size_t i = 0, start, k;

    for (k = 0; k < 3; k++) {
        if (i >= len || s[i] != ' ')
            return RLOCK_EPROTO;
        start = ++i;
        while (i < len && s[i] != ' ')
            i++;
        if (parse_u64(s + start, i - start, &f[k]) != 0)
            return RLOCK_EPROTO;
    }
    if (i != len || f[0] == 0 || f[2] > (uint64_t)RLOCK_MS_MAX)
        return RLOCK_EPROTO;
    p->grant = 1;
    p->token = f[0];
    p->nonce = f[1];
    p->lease_ms = (int64_t)f[2];
    return RLOCK_OK;
}

int rlock__parse_pubsub(const redisReply *r, rlock__pubsub *p)
{
    const redisReply *kind, *ch, *msg;
    const char *sp;

    memset(p, 0, sizeof *p);
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 3)
        return RLOCK_EPROTO;
    kind = r->element[0];
    ch = r->element[1];
    if (ch->type != REDIS_REPLY_STRING)
        return RLOCK_EPROTO;
    p->channel = ch->str;
    p->channel_len = (size_t)ch->len;
    if (is_str(kind, "subscribe")) {
        p->kind = RLOCK__PS_SUBSCRIBE;
        return RLOCK_OK;
    }
    if (!is_str(kind, "message")) {
        p->kind = RLOCK__PS_OTHER;
        return RLOCK_OK;
    }
    msg = r->element[2];
    if (msg->type != REDIS_REPLY_STRING)
        return RLOCK_EPROTO;
    p->kind = RLOCK__PS_MESSAGE;
    p->who = msg->str;
    sp = memchr(msg->str, ' ', (size_t)msg->len);
    p->who_len = sp ? (size_t)(sp - msg->str) : (size_t)msg->len;
    if (sp)
        return parse_grant(sp, (size_t)msg->len - p->who_len, p);
    return RLOCK_OK;
}

uint64_t rlock__token_value(const char *v)
{
    const char *colon = strrchr(v, ':');
    size_t n;

    if (!colon)
        return 0;
    n = strlen(colon + 1);
    if (n == 0 || n > 19 || strspn(colon + 1, "0123456789") != n ||
        colon[1] == '0')
        return 0;
    return strtoull(colon + 1, NULL, 10);
}
