/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Finding the locks on the servers (rlock list, rlock top).
 *
 * A key says which lock it belongs to by its shape (docs/protocol.md,
 * docs/interop.md), and only these keys make a lock worth a look:
 *
 *   native     {rlock:NAME}                 the lock (a string)
 *              {rlock:NAME}:queue, :qinfo   its queue (the lock exists)
 *              {rlock:NAME}:fence           its counter (it may be free)
 *   token      NAME:rlock-fence             the counter rlock keeps for
 *                                           NAME: the lock key is NAME
 *                                           itself, a plain string whose
 *                                           shape says nothing
 *   Redisson   redisson_lock_token:{NAME}   RFencedLock's counter (and
 *              (:NAME if NAME has a '{')    rlock's)
 *              NAME, a hash                 the lock: every hash is a
 *                                           candidate (a second walk,
 *                                           SCAN TYPE hash)
 *
 * The queue and counters are never locks of their own: they name their
 * lock. A candidate is read with rlock_mutex_status, whose scripts check
 * the shape of every key (a string that is no lock value, a hash with
 * fields Redisson never writes, a key without expiry) and refuse it:
 * such a key is counted as skipped and never shown.
 *
 * A token-layout lock that only the peers (redis-py, node-redlock, ...)
 * ever took has no counter: its key is a string like any other, and it
 * is not found (rlock status --layout token NAME reads it).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "find.h"

#define NATIVE_OPEN "{rlock:"
#define TOKEN_COUNTER ":rlock-fence"
#define REDISSON_COUNTER "redisson_lock_token:"

const char *layout_name(int layout)
{
    switch (layout) {
    case RLOCK_LAYOUT_TOKEN:
        return "token";
    case RLOCK_LAYOUT_REDISSON:
        return "redisson";
    default:
        return "native";
    }
}

/* ------------------------------------------------------------------------ */
/* Patterns                                                                 */
/* ------------------------------------------------------------------------ */

int glob_check(const char *pat)
{
    const char *p;

    for (p = pat; *p; p++) {
        if (*p == '\\') {
            if (!p[1])
                return -1;
            p++;
        } else if (*p == '[') {
            for (p++; *p && *p != ']'; p++)
                if (*p == '\\' && !*++p)
                    return -1;
            if (!*p)
                return -1;
        }
    }
    return 0;
}

/* Whether the one-character element of the pattern at p (an escaped or
 * plain byte, '?', or a class, which glob_check found closed) takes c;
 * *step gets its length. */
static int element_takes(const char *p, unsigned char c, size_t *step)
{
    const char *q;
    int neg, hit = 0;

    if (*p == '?') {
        *step = 1;
        return 1;
    }
    if (*p == '\\') {
        *step = 2;
        return (unsigned char)p[1] == c;
    }
    if (*p != '[') {
        *step = 1;
        return (unsigned char)*p == c;
    }
    q = p + 1;
    neg = *q == '^';
    if (neg)
        q++;
    while (*q != ']') {
        unsigned char lo, hi;
        if (*q == '\\')
            q++;
        lo = hi = (unsigned char)*q;
        if (q[1] == '-' && q[2] && q[2] != ']') {
            q += 2;
            if (*q == '\\')
                q++;
            hi = (unsigned char)*q;
            if (lo > hi) {
                unsigned char t = lo;
                lo = hi;
                hi = t;
            }
        }
        if (c >= lo && c <= hi)
            hit = 1;
        q++;
    }
    *step = (size_t)(q + 1 - p);
    return neg ? !hit : hit;
}

/* Each element but '*' takes one byte, so one place to go back to (the
 * last '*') is enough: linear, whatever the pattern. */
int glob_match(const char *pat, const char *name, size_t len)
{
    const char *p = pat, *star = NULL;
    size_t i = 0, star_i = 0, step;

    while (i < len) {
        if (*p == '*') {
            while (*p == '*')
                p++;
            if (!*p)
                return 1;
            star = p;
            star_i = i;
        } else if (*p && element_takes(p, (unsigned char)name[i], &step)) {
            p += step;
            i++;
        } else if (star) {
            p = star;
            i = ++star_i;
        } else {
            return 0;
        }
    }
    while (*p == '*')
        p++;
    return !*p;
}

/* ------------------------------------------------------------------------ */
/* Keys                                                                     */
/* ------------------------------------------------------------------------ */

enum role { ROLE_NONE, ROLE_LOCK, ROLE_COUNTER };

static int ends_with(const char *k, size_t len, const char *tail)
{
    size_t n = strlen(tail);

    return len >= n && memcmp(k + len - n, tail, n) == 0;
}

static int starts_with(const char *k, size_t len, const char *head)
{
    size_t n = strlen(head);

    return len >= n && memcmp(k, head, n) == 0;
}

/* The lock a key of the names walk belongs to: its role, layout and name
 * (a part of key). A lock key of the native layout ends with its hash
 * tag's '}', its other keys with "}:" and a suffix: a name ending with
 * "}:fence" still has a lock key ending with '}', so the two never mix. */
static int role_of(const char *k, size_t len, int *layout, const char **name,
                   size_t *nlen)
{
    static const struct {
        const char *tail;
        int role;
    } native_keys[] = {
        {"}", ROLE_LOCK},
        {"}:queue", ROLE_LOCK},
        {"}:qinfo", ROLE_LOCK},
        {"}:fence", ROLE_COUNTER},
    };
    size_t i, open = strlen(NATIVE_OPEN);

    if (starts_with(k, len, NATIVE_OPEN)) {
        for (i = 0; i < sizeof native_keys / sizeof native_keys[0]; i++) {
            size_t t = strlen(native_keys[i].tail);
            if (len > open + t && ends_with(k, len, native_keys[i].tail)) {
                *layout = RLOCK_LAYOUT_NATIVE;
                *name = k + open;
                *nlen = len - open - t;
                return native_keys[i].role;
            }
        }
    }
    if (len > strlen(TOKEN_COUNTER) && ends_with(k, len, TOKEN_COUNTER)) {
        *layout = RLOCK_LAYOUT_TOKEN;
        *name = k;
        *nlen = len - strlen(TOKEN_COUNTER);
        return ROLE_COUNTER;
    }
    if (len > strlen(REDISSON_COUNTER) &&
        starts_with(k, len, REDISSON_COUNTER)) {
        const char *r = k + strlen(REDISSON_COUNTER);
        size_t rl = len - strlen(REDISSON_COUNTER);
        *layout = RLOCK_LAYOUT_REDISSON;
        /* Redisson's rule: "{NAME}", or NAME as it is if it has a '{'. */
        if (rl > 2 && r[0] == '{' && r[rl - 1] == '}' &&
            !memchr(r + 1, '{', rl - 2)) {
            *name = r + 1;
            *nlen = rl - 2;
            return ROLE_COUNTER;
        }
        if (memchr(r, '{', rl)) {
            *name = r;
            *nlen = rl;
            return ROLE_COUNTER;
        }
    }
    return ROLE_NONE;
}

/* ------------------------------------------------------------------------ */
/* The table of locks found                                                 */
/* ------------------------------------------------------------------------ */

static size_t hash_of(int layout, const char *name, size_t len)
{
    uint64_t h = 1469598103934665603ull ^ (uint64_t)layout;
    size_t i;

    for (i = 0; i < len; i++) {
        h ^= (unsigned char)name[i];
        h *= 1099511628211ull;
    }
    return (size_t)h;
}

static found *lookup(const finder *f, int layout, const char *name, size_t len)
{
    found *x = f->buckets[hash_of(layout, name, len) % f->nbuckets];

    for (; x; x = x->next)
        if (x->layout == layout && x->len == len &&
            memcmp(x->name, name, len) == 0)
            return x;
    return NULL;
}

static int grow(finder *f)
{
    size_t nb = f->nbuckets * 2, i;
    found **b = calloc(nb, sizeof *b);

    if (!b)
        return -1;
    for (i = 0; i < f->nbuckets; i++) {
        found *x = f->buckets[i], *next;
        for (; x; x = next) {
            size_t h = hash_of(x->layout, x->name, x->len) % nb;
            next = x->next;
            x->next = b[h];
            b[h] = x;
        }
    }
    free(f->buckets);
    f->buckets = b;
    f->nbuckets = nb;
    return 0;
}

/* Keeps what a key said of a lock. */
static void note(finder *f, int layout, int role, const char *name, size_t len)
{
    found *x;
    size_t h;

    if (len == 0 || len > RLOCK_NAME_MAX || !(f->layouts & (1 << layout)) ||
        (f->redlock && layout != RLOCK_LAYOUT_NATIVE) ||
        (f->pattern && !glob_match(f->pattern, name, len)))
        return;
    /* A native counter alone is a free lock, unless its key turns up. */
    if (role == ROLE_COUNTER && layout == RLOCK_LAYOUT_NATIVE && !f->free_too)
        return;
    if ((x = lookup(f, layout, name, len)) != NULL) {
        x->walked = f->generation;
        return;
    }
    if (f->n >= f->max) {
        f->dropped++;
        return;
    }
    if (f->n >= f->nbuckets && grow(f) != 0) {
        f->dropped++;
        return;
    }
    if (!(x = calloc(1, sizeof *x + len + 1))) {
        f->dropped++;
        return;
    }
    x->layout = layout;
    x->walked = f->generation;
    x->seq = f->next_seq++;
    x->rate = -1;
    x->len = len;
    memcpy(x->name, name, len);
    h = hash_of(layout, name, len) % f->nbuckets;
    x->next = f->buckets[h];
    f->buckets[h] = x;
    f->n++;
}

static void on_name_key(void *arg, const char *key, size_t len)
{
    finder *f = arg;
    const char *name;
    size_t nlen;
    int layout, role = role_of(key, len, &layout, &name, &nlen);

    if (role != ROLE_NONE)
        note(f, layout, role, name, nlen);
}

/* Every hash may be a Redisson lock, but the native queue's entries. */
static void on_hash_key(void *arg, const char *key, size_t len)
{
    if (starts_with(key, len, NATIVE_OPEN) && ends_with(key, len, "}:qinfo"))
        return;
    note(arg, RLOCK_LAYOUT_REDISSON, ROLE_LOCK, key, len);
}

int finder_init(finder *f, struct cli *cli, rlock_client *c,
                const char *pattern, int layouts, int free_too, size_t max)
{
    memset(f, 0, sizeof *f);
    f->cli = cli;
    f->c = c;
    f->pattern =
        pattern && *pattern && strcmp(pattern, "*") != 0 ? pattern : NULL;
    f->layouts = layouts;
    f->free_too = free_too;
    f->redlock = strncmp(cli->url, "redlock://", 10) == 0;
    f->count = 1000;
    f->max = max;
    f->dbsize = -1;
    /* Redisson's locks are hashes under their bare names: only a walk over
     * the hashes finds one that no counter names. */
    f->wanted[0] = 1;
    f->wanted[1] = !f->redlock && (layouts & (1 << RLOCK_LAYOUT_REDISSON));
    f->nbuckets = 1024;
    if (!(f->buckets = calloc(f->nbuckets, sizeof *f->buckets))) {
        fprintf(stderr, "%s: out of memory\n", cli->prog);
        return -1;
    }
    return 0;
}

void finder_restart(finder *f)
{
    int w;

    for (w = 0; w < 2; w++) {
        rlock_scan_free(f->walk[w]);
        f->walk[w] = NULL;
        f->ended[w] = 0;
    }
    f->gen_keys = 0;
    f->dropped = 0;
}

void finder_prune(finder *f)
{
    size_t i;

    for (i = 0; i < f->nbuckets; i++) {
        found **at = &f->buckets[i];
        while (*at) {
            found *x = *at;
            if (x->walked < f->generation) {
                *at = x->next;
                free(x);
                f->n--;
            } else {
                at = &x->next;
            }
        }
    }
}

void finder_free(finder *f)
{
    size_t i;

    finder_restart(f);
    for (i = 0; i < f->nbuckets; i++) {
        found *x = f->buckets[i], *next;
        for (; x; x = next) {
            next = x->next;
            free(x);
        }
    }
    free(f->buckets);
}

/* The names walk's MATCH: what every key of the layouts looked for has
 * in it (the filter on names is applied to each key's name after). */
static char *names_match(const finder *f)
{
    const char *p = f->pattern ? f->pattern : "";
    size_t n = strlen(p) + 64;
    char *m = malloc(n);

    if (!m)
        return NULL;
    if (f->layouts == 1 << RLOCK_LAYOUT_NATIVE)
        snprintf(m, n, NATIVE_OPEN "%s}*", f->pattern ? p : "*");
    else if (f->layouts == 1 << RLOCK_LAYOUT_TOKEN)
        snprintf(m, n, "%s" TOKEN_COUNTER, f->pattern ? p : "*");
    else if (f->layouts == 1 << RLOCK_LAYOUT_REDISSON)
        snprintf(m, n, REDISSON_COUNTER "*%s*", p);
    else if (f->pattern)
        snprintf(m, n, "*%s*", p);
    else
        m[0] = '\0';
    return m;
}

static int begin(finder *f)
{
    char *match = names_match(f);
    int err = RLOCK_ENOMEM, w;

    if (match) {
        f->walk[0] = rlock_scan_new(f->c, match, NULL, &err);
        if (f->walk[0] && f->wanted[1])
            f->walk[1] = rlock_scan_new(f->c, f->pattern, "hash", &err);
        free(match);
    }
    if (!f->walk[0] || (f->wanted[1] && !f->walk[1])) {
        finder_restart(f);
        return err;
    }
    for (w = 0; w < 2; w++) {
        f->ended[w] = !f->wanted[w];
        /* A cluster's slot map, read as the walk begins. */
        if (f->walk[w])
            f->commands += rlock_scan_info(f->walk[w], RLOCK_SCAN_COMMANDS);
    }
    f->generation++;
    return RLOCK_OK;
}

/* What the present walks know of the servers. */
static void figures(finder *f)
{
    int w;

    f->servers = 0;
    f->dbsize = -1;
    for (w = 0; w < 2; w++) {
        if (!f->walk[w])
            continue;
        f->servers = rlock_scan_info(f->walk[w], RLOCK_SCAN_SERVERS);
        if (rlock_scan_info(f->walk[w], RLOCK_SCAN_DBSIZE) > f->dbsize)
            f->dbsize = rlock_scan_info(f->walk[w], RLOCK_SCAN_DBSIZE);
    }
}

int finder_walk(finder *f, int steps)
{
    static void (*const each[2])(void *, const char *, size_t) = {on_name_key,
                                                                  on_hash_key};
    int w = 0, rc;

    if (!f->walk[0] && (rc = begin(f)) != RLOCK_OK)
        return rc;
    while (steps > 0 && !(f->ended[0] && f->ended[1])) {
        int64_t before;
        /* The walks take turns, so that neither kind waits for the other
         * to end. */
        if (f->ended[w])
            w = !w;
        before = rlock_scan_info(f->walk[w], RLOCK_SCAN_COMMANDS);
        rc = rlock_scan_next(f->walk[w], f->count, each[w], f);
        f->commands +=
            rlock_scan_info(f->walk[w], RLOCK_SCAN_COMMANDS) - before;
        if (rc == RLOCK_EPROTO && f->count > 10) {
            /* An answer over the reply bounds (long key names): the
             * same step again, asking for fewer keys. */
            f->count /= 10;
            continue;
        }
        if (rc < 0)
            return rc;
        steps--;
        f->ended[w] = rc == 0;
        w = !w;
    }
    for (w = 0, f->gen_keys = 0; w < 2; w++)
        if (f->walk[w])
            f->gen_keys +=
                (int64_t)rlock_scan_info(f->walk[w], RLOCK_SCAN_STEPS) *
                f->count;
    figures(f);
    return !(f->ended[0] && f->ended[1]);
}

const char *keys_walked(const finder *f, char *buf, size_t len)
{
    if (f->dbsize > 0)
        snprintf(buf, len, "about %lld of %lld keys (%lld%%)",
                 (long long)f->gen_keys, (long long)f->dbsize,
                 (long long)(f->gen_keys < f->dbsize
                                 ? f->gen_keys * 100 / f->dbsize
                                 : 100));
    else
        snprintf(buf, len, "about %lld keys", (long long)f->gen_keys);
    return buf;
}

const char *walk_failure(int rc)
{
    return rc == RLOCK_EPERM ? "walking the keys needs SCAN (ACL)"
                             : "walk over the keys";
}

/* ------------------------------------------------------------------------ */
/* Looking at a lock                                                        */
/* ------------------------------------------------------------------------ */

int found_busy(const found *x)
{
    return x->state == LOOK_OK && (x->st.held || x->st.waiters > 0);
}

/* The same hold as the last look's: the same holder and token. */
static int same_hold(const rlock_status *a, const rlock_status *b)
{
    return a->held && b->held && a->token == b->token &&
           strcmp(a->holder, b->holder) == 0;
}

int finder_look(finder *f, found *x, int64_t now_ms)
{
    rlock_mutex_opts mo;
    rlock_status st;
    rlock_mutex *m;
    int err;

    rlock_mutex_opts_init(&mo);
    mo.layout = x->layout;
    m = rlock_mutex_new_len(f->c, x->name, x->len, &mo, &err);
    if (m) {
        err = rlock_mutex_status(m, &st);
        rlock_mutex_free(m);
    }
    x->looks++;
    if (err == RLOCK_ENOTLOCK || err == RLOCK_EINVAL) {
        /* Someone's data in a lock's shape of name, or a name the layout
         * cannot take: never shown as a lock. */
        if (x->state != LOOK_NOTLOCK)
            f->skipped++;
        x->state = LOOK_NOTLOCK;
        return RLOCK_OK;
    }
    if (err == RLOCK_EREDIS || err == RLOCK_EPROTO) {
        /* This lock only (CROSSSLOT: a token lock and its counter in two
         * slots of a cluster; WRONGTYPE). */
        if (x->state != LOOK_ERROR && f->failed++ == 0)
            snprintf(f->failure, sizeof f->failure, "%s",
                     rlock_client_errmsg(f->c));
        x->state = LOOK_ERROR;
        return RLOCK_OK;
    }
    if (err != RLOCK_OK)
        return err;
    if (x->state == LOOK_OK && now_ms > x->looked_ms &&
        st.last_token >= x->st.last_token)
        x->rate = (double)(st.last_token - x->st.last_token) * 1000.0 /
                  (double)(now_ms - x->looked_ms);
    else
        x->rate = -1;
    if (!st.held) {
        x->held_since_ms = 0;
    } else if (x->state != LOOK_OK || !same_hold(&x->st, &st)) {
        x->held_since_ms = now_ms;
        x->held_before = x->state != LOOK_OK;
    }
    x->st = st;
    x->state = LOOK_OK;
    x->looked_ms = now_ms;
    return RLOCK_OK;
}

static int by_seq(const void *a, const void *b)
{
    const found *x = *(found *const *)a, *y = *(found *const *)b;

    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

found **finder_all(const finder *f, size_t *n)
{
    found **all = malloc((f->n ? f->n : 1) * sizeof *all);
    size_t i, k = 0;

    if (!all)
        return NULL;
    for (i = 0; i < f->nbuckets; i++) {
        found *x = f->buckets[i];
        for (; x; x = x->next)
            all[k++] = x;
    }
    qsort(all, k, sizeof *all, by_seq);
    *n = k;
    return all;
}
