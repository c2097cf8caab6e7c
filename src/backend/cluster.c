/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Redis Cluster (redis-cluster://host:port[,host:port...]): every key and
 * channel of one lock shares a hash tag (the layout names them so), so
 * each lock lives in one slot, on one master, and its scripts run there
 * whole.
 *
 * The client keeps the slot map (CLUSTER SLOTS, asked of any node it
 * knows, the seeds last) and a node per master, reached when first
 * needed. A request goes to the master of its slot; the cluster's
 * redirections are followed, read from the error reply itself: MOVED (the
 * slot has a new owner: the map is corrected and read again), ASK (the
 * slot is being migrated and the keys are on the importing node: the
 * request is sent there behind ASKING), TRYAGAIN (a multi-key request
 * during a migration: the same node is asked again after a short pause,
 * until the call's deadline; see routed_cluster). Notifications need
 * nothing special: a PUBLISH on any node reaches the subscribers of every
 * node, so the subscriber connection may be to any of them.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "util/clock.h"

#define SLOTS 16384
#define SEEDS_MAX 16
#define MASTERS_MAX 64
#define REDIRECTS_MAX 16

typedef struct master {
    char host[64];
    int port;
    rlock__node *node; /* made on first use */
} master;

typedef struct cluster {
    rlock__url seeds[SEEDS_MAX];
    int nseeds;
    rlock__node_cfg cfg;
    pthread_mutex_t mu; /* guards the table and the map */
    master masters[MASTERS_MAX];
    int nmasters;
    short map[SLOTS]; /* master per slot, -1 if unknown */
    /* The slot map is read over connections of its own (acfg: the
     * masters' handshake, bounds as wide as a discovery's answer needs,
     * no scripts), to master i at asks[i] and to seed j at
     * asks[MASTERS_MAX + j], each made on first use (mu); slots is the
     * question, CLUSTER SLOTS, built once. */
    rlock__node_cfg acfg;
    rlock__node *asks[MASTERS_MAX + SEEDS_MAX];
    rlock__req slots;
    /* A node could not be reached: the next request reads the map
     * first (relaxed atomics). */
    int stale;
} cluster;

static cluster *of(const rlock_client *c)
{
    return c->bk;
}

/* CRC16-CCITT (XMODEM), the key hash of Redis Cluster. */
static unsigned crc16(const char *buf, size_t len)
{
    unsigned crc = 0;
    size_t i;
    int b;

    for (i = 0; i < len; i++) {
        crc ^= (unsigned)(unsigned char)buf[i] << 8;
        for (b = 0; b < 8; b++)
            crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff
                               : (crc << 1) & 0xffff;
    }
    return crc;
}

/* The slot of a key: its hash tag's, if it has one. */
int rlock__key_slot(const char *key, size_t len)
{
    const char *open = memchr(key, '{', len), *close;

    if (open) {
        size_t rest = len - (size_t)(open - key) - 1;
        close = memchr(open + 1, '}', rest);
        if (close && close > open + 1)
            return (int)(crc16(open + 1, (size_t)(close - open - 1)) % SLOTS);
    }
    return (int)(crc16(key, len) % SLOTS);
}

static int group_cluster(const rlock_client *c, const char *key, size_t len)
{
    (void)c;
    return rlock__key_slot(key, len);
}

/* Index of host:port in the table, added if new; -1 if full (mu held). */
static int master_index(cluster *k, const char *host, int port)
{
    int i;

    for (i = 0; i < k->nmasters; i++)
        if (k->masters[i].port == port && strcmp(k->masters[i].host, host) == 0)
            return i;
    if (k->nmasters == MASTERS_MAX || strlen(host) >= 64)
        return -1;
    snprintf(k->masters[k->nmasters].host, sizeof k->masters[0].host, "%s",
             host);
    k->masters[k->nmasters].port = port;
    return k->nmasters++;
}

static const rlock__script cluster_slots = {"slot map", NULL,      0,
                                            NULL,       "CLUSTER", 0};

/* The node that asks node i of a reading for the map (i < n: master i of
 * the n known when the reading began, else seed i - n), made if needed:
 * NULL if out of memory. */
static rlock__node *ask_node(cluster *k, int i, int n)
{
    rlock__node **slot, *node;
    const char *host;
    int port;

    pthread_mutex_lock(&k->mu);
    if (i < n) {
        slot = &k->asks[i];
        host = k->masters[i].host;
        port = k->masters[i].port;
    } else {
        slot = &k->asks[MASTERS_MAX + i - n];
        host = k->seeds[i - n].host;
        port = k->seeds[i - n].port;
    }
    if (!*slot)
        rlock__node_new(&k->acfg, host, port, NULL, NULL, slot);
    node = *slot;
    pthread_mutex_unlock(&k->mu);
    return node;
}

/* Takes the map from r, node where's answer to CLUSTER SLOTS (host: the
 * address it was reached at): RLOCK_OK, or the failure in e. */
static int take_map(cluster *k, const char *host, const char *where,
                    const rlock__result *r, rlock__err *e)
{
    const redisReply *a = r->reply;
    size_t i;

    if (r->rc != RLOCK_OK) {
        *e = r->err;
        return r->rc;
    }
    if (!a || a->type != REDIS_REPLY_ARRAY || a->elements == 0)
        return rlock__err_set(e, RLOCK_EUNAVAILABLE, "%s has no slots assigned",
                              where);
    pthread_mutex_lock(&k->mu);
    for (i = 0; i < a->elements; i++) {
        redisReply *el = a->element[i], *m;
        long long from, to, sl;
        int idx;
        if (el->type != REDIS_REPLY_ARRAY || el->elements < 3)
            continue;
        m = el->element[2];
        if (el->element[0]->type != REDIS_REPLY_INTEGER ||
            el->element[1]->type != REDIS_REPLY_INTEGER ||
            m->type != REDIS_REPLY_ARRAY || m->elements < 2 ||
            m->element[0]->type != REDIS_REPLY_STRING ||
            m->element[1]->type != REDIS_REPLY_INTEGER)
            continue;
        from = el->element[0]->integer;
        to = el->element[1]->integer;
        /* A node that does not know its own address (one that never met
         * another) names it "" or "?": it is the one asked. */
        idx = master_index(k,
                           m->element[0]->str[0] &&
                                   strcmp(m->element[0]->str, "?") != 0
                               ? m->element[0]->str
                               : host,
                           (int)m->element[1]->integer);
        if (idx < 0 || from < 0 || to >= SLOTS)
            continue;
        for (sl = from; sl <= to; sl++)
            k->map[sl] = (short)idx;
    }
    pthread_mutex_unlock(&k->mu);
    return RLOCK_OK;
}

/* The host node i of a reading is at (see ask_node), copied to host,
 * and its address to where. */
static void ask_host(cluster *k, int i, int n, char *host, size_t len,
                     char *where, size_t wlen)
{
    int port;

    pthread_mutex_lock(&k->mu);
    snprintf(host, len, "%s",
             i < n ? k->masters[i].host : k->seeds[i - n].host);
    port = i < n ? k->masters[i].port : k->seeds[i - n].port;
    pthread_mutex_unlock(&k->mu);
    snprintf(where, wlen, "%s:%d", host, port);
}

/* Node i's answer (r) to a reading that began with n masters known:
 * RLOCK_OK with the map taken, or the failure in e. */
static int read_from(rlock_client *c, int i, int n, const rlock__result *r,
                     rlock__err *e)
{
    cluster *k = of(c);
    char host[300], where[320];

    /* (A seed's name may be longer than a master's table keeps: then a
     * node that names itself "" or "?" maps no slot, rather than a name
     * cut short.) */
    ask_host(k, i, n, host, sizeof host, where, sizeof where);
    return take_map(k, host, where, r, e);
}

/* The failure of a reading that no node answered, why the last cause. */
static int none_answered(rlock_client *c, const char *why, rlock__call *call)
{
    return rlock__fail(call, RLOCK_ECONNECT,
                       "no node of %s answered CLUSTER SLOTS%s%.300s", c->where,
                       why[0] ? ": " : "", why);
}

/* Reads the slot map again, blocking: from a known master, else from a
 * seed, each by the connect timeout within the call's deadline. (A
 * routed request reads it in steps instead: route_cluster.) */
static int refresh(rlock_client *c, rlock__call *call)
{
    cluster *k = of(c);
    char why[RLOCK__ERR_MAX] = "";
    int i, n;

    pthread_mutex_lock(&k->mu);
    n = k->nmasters;
    pthread_mutex_unlock(&k->mu);
    for (i = 0; i < n + k->nseeds; i++) {
        rlock__node *node = ask_node(k, i, n);
        rlock__results res;
        rlock__err e;
        int rc;
        if (!node || rlock__nodes_exec(&node, 1, &k->slots, 0,
                                       rlock__ask_until(c, call->deadline_ns),
                                       &res) != RLOCK_OK)
            return rlock__fail(call, RLOCK_ENOMEM, "out of memory");
        rlock__err_clear(&e);
        rc = read_from(c, i, n, &res.r[0], &e);
        rlock__results_free(&res);
        if (rc == RLOCK_OK)
            return RLOCK_OK;
        /* The last cause is kept: a certificate not trusted, a refused
         * password, a node that is not a cluster node. */
        snprintf(why, sizeof why, "%s", e.msg);
    }
    return none_answered(c, why, call);
}

/* Master i's node, made if needed. */
static rlock__node *node_of(cluster *k, int i)
{
    rlock__node *n;

    pthread_mutex_lock(&k->mu);
    if (!k->masters[i].node)
        rlock__node_new(&k->cfg, k->masters[i].host, k->masters[i].port, NULL,
                        NULL, &k->masters[i].node);
    n = k->masters[i].node;
    pthread_mutex_unlock(&k->mu);
    return n;
}

static int slot_master(cluster *k, int slot)
{
    int idx;

    pthread_mutex_lock(&k->mu);
    idx = k->map[slot];
    pthread_mutex_unlock(&k->mu);
    return idx;
}

/* "MOVED 3999 127.0.0.1:6381" or "ASK ...": the master named, or -1. */
static int redirect_target(cluster *k, const char *msg, int *slot)
{
    const char *sp = strchr(msg, ' '), *colon;
    char host[64];
    int idx;

    if (!sp)
        return -1;
    *slot = atoi(sp + 1);
    sp = strchr(sp + 1, ' ');
    colon = sp ? strrchr(sp, ':') : NULL;
    if (!colon || (size_t)(colon - sp - 1) >= sizeof host || *slot < 0 ||
        *slot >= SLOTS)
        return -1;
    memcpy(host, sp + 1, (size_t)(colon - sp - 1));
    host[colon - sp - 1] = '\0';
    pthread_mutex_lock(&k->mu);
    idx = master_index(k, host, atoi(colon + 1));
    pthread_mutex_unlock(&k->mu);
    return idx;
}

/* The error reply a redirection is read from: a failed request's, or the
 * one answer of a pipeline of one command (a native compare-and-delete
 * release), whose errors are answers, not failures. A longer pipeline's
 * answers are its commands' (the watchdog's batch decides per hold). */
static const redisReply *error_of(const rlock__result *r)
{
    if (r->rc != RLOCK_OK)
        return r->reply;
    if (r->nreplies == 1 && r->replies[0] &&
        r->replies[0]->type == REDIS_REPLY_ERROR)
        return r->replies[0];
    return NULL;
}

/* The server's error reply of a result, if it starts with word. */
static const char *redirect(const rlock__result *r, const char *word)
{
    const redisReply *e = error_of(r);
    size_t n = strlen(word);

    if (!e || e->type != REDIS_REPLY_ERROR || !e->str ||
        strncmp(e->str, word, n) != 0)
        return NULL;
    return e->str;
}

static void fail_one(rlock__results *res, rlock__call *call)
{
    rlock__results_init(res, 1);
    res->r[0].rc = call->code;
    rlock__call_get(call, &res->r[0].err);
}

/* The first pause after a TRYAGAIN and the longest (each is drawn between
 * half of it and all of it, so that the clients waiting for one slot do
 * not come back in step). A slot's keys usually move in a few
 * milliseconds; the pause doubles so that a long migration is asked about
 * 20 to 40 times a second, not hundreds. */
#define TRYAGAIN_FIRST_MS 10
#define TRYAGAIN_LONGEST_MS 50

/*
 * The pause before a request that met TRYAGAIN is sent again: 0 and
 * *until_out, when the next exchange may start, or -1 when the call's
 * deadline would pass before another answer could come (the pause and a
 * round trip as long as the last one), which the caller then reports.
 * The pause grows in *pause_ms. Whoever drives the exchanges waits it
 * out (rlock__backend_exec sleeps; a loop would arm a timer).
 */
static int tryagain_pause(int64_t *pause_ms, int64_t rtt_ns, int64_t deadline,
                          int64_t *until_out)
{
    int64_t ms = rlock__jitter(*pause_ms / 2, *pause_ms);
    int64_t until = rlock__now_ns() + ms * RLOCK__NS_PER_MS;

    if (until + rtt_ns >= deadline)
        return -1;
    *until_out = until;
    *pause_ms = *pause_ms * 2 < TRYAGAIN_LONGEST_MS ? *pause_ms * 2
                                                    : TRYAGAIN_LONGEST_MS;
    return 0;
}

/*
 * A request goes to the master of its slot, following the cluster's
 * redirections (route_cluster, then routed_cluster after each exchange),
 * all within one deadline (the call's, and the command timeout from
 * now):
 *
 * - MOVED: the slot has a new owner; the map is corrected and read again.
 * - ASK: the slot is migrating and the request's keys are not on the old
 *   node; it goes to the importing node behind ASKING, in one write on one
 *   connection (ASKING holds for the next command only).
 * - TRYAGAIN: the keys of a multi-key request are not all on the node
 *   asked (some moved, or some never existed: rlock's scripts name a
 *   lock's queue keys, which exist only while somebody waits, so every
 *   such request meets TRYAGAIN from MIGRATING to the end of the
 *   migration). The same node is asked again after a short pause, the
 *   importing node again behind ASKING: going back to the old node would
 *   only be sent back by ASK, and each round counted as two redirections
 *   used up the limit in a second while the migration went on. With
 *   RLOCK__X_BRIEF (the background's renewals and undos) it is not waited
 *   for, nor is a third redirection (MOVED, ASK) paused before: they are
 *   retried on their own schedule, and a round that waited would hold up
 *   the renewals of every other slot.
 *
 * MOVED and ASK count against REDIRECTS_MAX, TRYAGAIN does not: its
 * pauses end by the deadline. A migration that outlasts the deadline, and
 * redirections without end, are RLOCK_EUNAVAILABLE with a message that
 * says so: the cluster cannot serve this lock now, and the request was
 * not carried out (a redirection is an answer of a node that did not run
 * it).
 */

/* What a request's route keeps between its exchanges (rlock__route's
 * own). */
typedef struct cluster_route {
    int slot;
    int flags;
    int redirects; /* MOVED and ASK followed */
    int asking;    /* the importing node's index after ASK, or -1 */
    int tryagains;
    int refresh;      /* read the map again before the next exchange */
    int reading;      /* the node asked for the map, plus 1 (0: none) */
    int reading_n;    /*   the masters known when the reading began */
    int must;         /*   the request needs the map (its slot had none) */
    int read;         /* the map was read for this request */
    int64_t pause_ms; /* the next TRYAGAIN pause, at most */
    int64_t started;
    int64_t deadline;
    size_t errlen; /* call->err.msg's length before the reading */
} cluster_route;

_Static_assert(sizeof(cluster_route) <= sizeof(((rlock__route *)0)->own.bytes),
               "a cluster route fits in rlock__route's own");

/* A reading of the map begins: from the masters known, then the seeds. */
static void begin_reading(cluster *k, cluster_route *s, int must,
                          const rlock__call *call)
{
    pthread_mutex_lock(&k->mu);
    s->reading_n = k->nmasters;
    pthread_mutex_unlock(&k->mu);
    s->reading = 1;
    s->must = must;
    s->errlen = strlen(rlock__call_msg(call));
}

/* The next exchange of the route (after the pause routed asked for, if
 * any): the importing node behind ASKING, or the slot's master; the map
 * read first (CLUSTER SLOTS to one node after another, each an exchange
 * of the route, so that a loop is not held up by a node slow to answer)
 * after a MOVED (other slots may have moved too), after a node could not
 * be reached, or if it names no master for the slot. RLOCK_OK, or the
 * failure in res and call. */
static int route_cluster(rlock_client *c, const rlock__req *req, int flags,
                         rlock__route *rt, rlock__results *res,
                         rlock__call *call)
{
    cluster *k = of(c);
    cluster_route s;
    rlock__node *node;
    int idx;

    if (rt->exchanges == 0) {
        size_t key_len = 0;
        const char *key = rlock__req_first_key(req, &key_len);
        memset(&s, 0, sizeof s);
        s.slot = key ? rlock__key_slot(key, key_len) : 0;
        s.flags = flags;
        s.asking = -1;
        s.pause_ms = TRYAGAIN_FIRST_MS;
        s.started = rlock__now_ns();
        s.deadline = rlock__call_until(call, c->opts.command_timeout_ms);
    } else {
        memcpy(&s, rt->own.bytes, sizeof s);
    }
    if (!s.reading &&
        (s.refresh || __atomic_exchange_n(&k->stale, 0, __ATOMIC_RELAXED))) {
        s.refresh = 0;
        begin_reading(k, &s, 0, call);
    }
    if (!s.reading && s.asking < 0 && slot_master(k, s.slot) < 0) {
        /* Not covered: the map may be old. */
        if (s.read) {
            rlock__fail(call, RLOCK_EUNAVAILABLE,
                        "no master serves slot %d of %s", s.slot, c->where);
            fail_one(res, call);
            return RLOCK_EUNAVAILABLE;
        }
        begin_reading(k, &s, 1, call);
    }
    if (s.reading) {
        node = ask_node(k, s.reading - 1, s.reading_n);
        rt->req = &k->slots;
        rt->flags = s.flags & RLOCK__X_NOWAIT;
        rt->deadline_ns = rlock__ask_until(c, s.deadline);
    } else {
        idx = s.asking >= 0 ? s.asking : slot_master(k, s.slot);
        node = node_of(k, idx);
        rt->req = NULL;
        rt->flags =
            (s.flags & ~RLOCK__X_BRIEF) | (s.asking >= 0 ? RLOCK__X_ASKING : 0);
        rt->deadline_ns = s.deadline;
    }
    if (!node) {
        rlock__fail(call, RLOCK_ENOMEM, "out of memory");
        fail_one(res, call);
        return RLOCK_ENOMEM;
    }
    rt->nodes[0] = node;
    rt->n = 1;
    memcpy(rt->own.bytes, &s, sizeof s);
    return RLOCK_OK;
}

/* The end of one node's answer to CLUSTER SLOTS: the request's own
 * exchange next (the map read, or a precaution that no node answered),
 * or the next node's, or the request's failure when it needs the map
 * and no node gave it. The last cause waits at the end of call->err.msg
 * meanwhile. */
static int read_step(rlock_client *c, cluster_route *s, rlock__results *res,
                     rlock__call *call)
{
    cluster *k = of(c);
    rlock__err e;
    char *buf;
    int rc;

    rlock__err_clear(&e);
    rc = read_from(c, s->reading - 1, s->reading_n, &res->r[0], &e);
    rlock__results_clear(res);
    if (rc != RLOCK_OK && (buf = rlock__call_buf(call)) != NULL)
        snprintf(buf + s->errlen, RLOCK__ERR_MAX - s->errlen, "%s", e.msg);
    if (rc != RLOCK_OK && rc != RLOCK_ENOMEM &&
        s->reading < s->reading_n + k->nseeds &&
        rlock__now_ns() < s->deadline) {
        s->reading++;
        return RLOCK__ROUTE_AGAIN;
    }
    s->reading = 0;
    /* A map read, or none to be had when it was needed: the slot's
     * master is not asked for again by this request. */
    s->read = rc == RLOCK_OK || s->must;
    if (rc == RLOCK_OK || (rc != RLOCK_ENOMEM && !s->must)) {
        rlock__call_cut(call, s->errlen);
        return RLOCK__ROUTE_AGAIN;
    }
    if (rc == RLOCK_ENOMEM) {
        rlock__fail(call, rc, "out of memory");
    } else {
        char why[RLOCK__ERR_MAX];
        snprintf(why, sizeof why, "%s", rlock__call_msg(call) + s->errlen);
        none_answered(c, why, call);
    }
    fail_one(res, call);
    return RLOCK__ROUTE_DONE;
}

static int routed_cluster(rlock_client *c, const rlock__req *req,
                          rlock__route *rt, rlock__results *res,
                          rlock__call *call)
{
    cluster *k = of(c);
    rlock__node *node = rt->nodes[0];
    int64_t rtt = rlock__now_ns() - rt->sent_ns;
    const char *msg;
    char last[RLOCK__ERR_MAX];
    int target, moved_slot;
    cluster_route s;

    (void)req;
    memcpy(&s, rt->own.bytes, sizeof s);
    rt->not_before = 0;
    if (s.reading) {
        int rc = read_step(c, &s, res, call);
        memcpy(rt->own.bytes, &s, sizeof s);
        return rc;
    }
    if (res->r[0].rc == RLOCK_OK && !error_of(&res->r[0]))
        return RLOCK__ROUTE_DONE;
    if ((msg = redirect(&res->r[0], "MOVED ")) != NULL ||
        (msg = redirect(&res->r[0], "ASK ")) != NULL) {
        int ask = msg[0] == 'A';
        if ((target = redirect_target(k, msg, &moved_slot)) < 0)
            return RLOCK__ROUTE_DONE; /* not one we can read: as it is */
        snprintf(last, sizeof last, "%s", msg);
        /* "MOVED 3999 127.0.0.1:6381": the node is the last word. */
        rlock__obs_node(c->obs, RLOCK_EV_REDIRECT, 0,
                        strrchr(last, ' ') ? strrchr(last, ' ') + 1 : "", last);
        rlock__results_clear(res);
        /* A move needs two at most (ASK, then MOVED when it ends); more
         * mean the nodes do not agree yet (a SETSLOT given to one node
         * before the other): the next is followed after a pause, so that
         * the limit is not used up before they do. With RLOCK__X_BRIEF it
         * is not waited for, as TRYAGAIN is not (below): the background
         * retries on its own schedule, and a pause would hold up the
         * renewals of every slot. */
        if (++s.redirects > REDIRECTS_MAX ||
            (s.redirects > 2 && ((s.flags & RLOCK__X_BRIEF) ||
                                 tryagain_pause(&s.pause_ms, rtt, s.deadline,
                                                &rt->not_before) < 0))) {
            rlock__fail(
                call, RLOCK_EUNAVAILABLE,
                "slot %d of %s: still redirected after %d "
                "redirections in %lld ms (is it migrating, "
                "with its nodes not agreeing yet?); last: %.200s",
                s.slot, c->where, s.redirects - 1,
                (long long)((rlock__now_ns() - s.started) / RLOCK__NS_PER_MS),
                last);
            fail_one(res, call);
            return RLOCK__ROUTE_DONE;
        }
        if (ask) {
            s.asking = target;
        } else {
            s.asking = -1;
            s.refresh = 1;
            pthread_mutex_lock(&k->mu);
            k->map[moved_slot] = (short)target;
            pthread_mutex_unlock(&k->mu);
        }
    } else if ((msg = redirect(&res->r[0], "TRYAGAIN")) != NULL) {
        snprintf(last, sizeof last, "%s", msg);
        rlock__results_clear(res);
        s.tryagains++;
        if (s.flags & RLOCK__X_BRIEF) {
            rlock__fail(call, RLOCK_EUNAVAILABLE,
                        "slot %d of %s is migrating: %s answered %.120s",
                        s.slot, c->where, rlock__node_where(node), last);
            fail_one(res, call);
            return RLOCK__ROUTE_DONE;
        }
        if (tryagain_pause(&s.pause_ms, rtt, s.deadline, &rt->not_before) < 0) {
            rlock__fail(
                call, RLOCK_EUNAVAILABLE,
                "slot %d of %s is migrating: %s answered "
                "TRYAGAIN %d time%s in %lld ms, until the "
                "call's deadline (a request naming several of "
                "the lock's keys waits for the migration to "
                "end); last: %.120s",
                s.slot, c->where, rlock__node_where(node), s.tryagains,
                s.tryagains == 1 ? "" : "s",
                (long long)((rlock__now_ns() - s.started) / RLOCK__NS_PER_MS),
                last);
            fail_one(res, call);
            return RLOCK__ROUTE_DONE;
        }
    } else {
        /* A node that is gone: the next request reads the new map. */
        if (res->r[0].rc == RLOCK_ECONNECT)
            __atomic_store_n(&k->stale, 1, __ATOMIC_RELAXED);
        return RLOCK__ROUTE_DONE;
    }
    memcpy(rt->own.bytes, &s, sizeof s);
    return RLOCK__ROUTE_AGAIN;
}

static int open_cluster(rlock_client *c, const char *url,
                        const rlock_client_opts *opts, rlock__call *call)
{
    rlock_client_opts eff = *opts;
    cluster *k = calloc(1, sizeof *k);
    rlock__url tls;
    rlock__err e;
    const char *spec, *end;
    char *rest = NULL;
    int rc;

    if (!k)
        return rlock__fail(call, RLOCK_ENOMEM, "out of memory");
    c->bk = k;
    pthread_mutex_init(&k->mu, NULL);
    memset(k->map, 0xff, sizeof k->map);
    if ((rc = rlock__url_split_tls(url, &tls, &rest, &e)) != RLOCK_OK)
        return rlock__call_set(call, &e);
    rc = rlock__url_tls(&tls, &eff, call);
    if (rc == RLOCK_OK)
        rc = rlock__client_tls(c, &eff, call);
    rlock__url_free(&tls);
    if (rc != RLOCK_OK) {
        free(rest);
        return rc;
    }
    spec = rest + strlen("redis-cluster://");
    end = spec + strlen(spec);
    if (spec == end)
        rc = rlock__fail(call, RLOCK_EINVAL,
                         "cluster URL: redis-cluster://host:port,...");
    else if (strpbrk(spec, "/?@"))
        rc = rlock__fail(call, RLOCK_EINVAL,
                         "cluster URL: only host:port,... (no database, "
                         "parameters or credentials; credentials go in the "
                         "client options)");
    else if ((rc = rlock__url_list_parse(spec, end, k->seeds, SEEDS_MAX,
                                         &k->nseeds, "cluster", &e)) !=
             RLOCK_OK)
        rlock__call_set(call, &e);
    if (rc == RLOCK_OK)
        snprintf(c->where, sizeof c->where, "cluster %.*s",
                 (int)(end - spec) < 200 ? (int)(end - spec) : 200, spec);
    free(rest);
    if (rc != RLOCK_OK)
        return rc;
    if (opts->sync_replicas)
        return rlock__fail(call, RLOCK_EINVAL,
                           "sync_replicas is not supported with "
                           "redis-cluster:// yet");
    if ((opts->username && !(c->username = strdup(opts->username))) ||
        (opts->password && !(c->password = strdup(opts->password))))
        return rlock__fail(call, RLOCK_ENOMEM, "out of memory");
    rlock__node_cfg_of(c, &k->cfg);
    c->nnodes = 1;
    c->quorum = 1;
    k->acfg = k->cfg;
    k->acfg.scripts = NULL;
    k->acfg.nscripts = 0;
    k->acfg.obs = NULL;
    k->acfg.request_timeout_ms = opts->connect_timeout_ms;
    if (k->acfg.max_connections <= 0 || k->acfg.max_connections > 4)
        k->acfg.max_connections = 4;
    rlock__bounds_widen(&k->acfg.bounds);
    rlock__req_init(&k->slots, &cluster_slots);
    rlock__req_arg(&k->slots, "SLOTS", 5);
    if (rlock__req_finish(&k->slots) != RLOCK_OK)
        return rlock__fail(call, RLOCK_ENOMEM, "out of memory");
    /* A client on a loop reads the map with its first request, in steps:
     * rlock_async_open returns at once. */
    if (c->lazy)
        return RLOCK_OK;
    rc = refresh(c, call);
    if (rc == RLOCK_OK && k->nmasters == 0)
        rc = rlock__fail(call, RLOCK_EUNAVAILABLE,
                         "%s has no slots assigned (not a working cluster)",
                         c->where);
    return rc;
}

static void close_cluster(rlock_client *c)
{
    cluster *k = of(c);
    int i;

    if (!k)
        return;
    for (i = 0; i < k->nmasters; i++)
        rlock__node_free(k->masters[i].node);
    for (i = 0; i < MASTERS_MAX + SEEDS_MAX; i++)
        rlock__node_free(k->asks[i]);
    for (i = 0; i < k->nseeds; i++)
        rlock__url_free(&k->seeds[i]);
    rlock__req_free(&k->slots);
    pthread_mutex_destroy(&k->mu);
    free(k);
    c->bk = NULL;
}

static void after_fork_cluster(rlock_client *c)
{
    cluster *k = of(c);
    int i;

    pthread_mutex_init(&k->mu, NULL);
    for (i = 0; i < k->nmasters; i++)
        if (k->masters[i].node)
            rlock__node_after_fork(k->masters[i].node);
    for (i = 0; i < MASTERS_MAX + SEEDS_MAX; i++)
        if (k->asks[i])
            rlock__node_after_fork(k->asks[i]);
}

/* k->mu before the masters' nodes: the table they are in is k->mu's. */
static void fork_hold_cluster(rlock_client *c, int take)
{
    cluster *k = of(c);
    int i;

    if (take)
        pthread_mutex_lock(&k->mu);
    for (i = 0; i < k->nmasters; i++)
        if (k->masters[i].node)
            rlock__node_fork_hold(k->masters[i].node, take);
    for (i = 0; i < MASTERS_MAX + SEEDS_MAX; i++)
        if (k->asks[i])
            rlock__node_fork_hold(k->asks[i], take);
    if (!take)
        pthread_mutex_unlock(&k->mu);
}

static int ping_cluster(rlock_client *c, rlock_server_info *info,
                        rlock__call *call)
{
    cluster *k = of(c);
    rlock__node *n;
    int known, rc;

    /* A client opened lazily knows no master before its first request. */
    pthread_mutex_lock(&k->mu);
    known = k->nmasters > 0;
    pthread_mutex_unlock(&k->mu);
    if (!known && (rc = refresh(c, call)) != RLOCK_OK)
        return rc;
    if (!known && k->nmasters == 0)
        return rlock__fail(call, RLOCK_EUNAVAILABLE,
                           "%s has no slots assigned (not a working cluster)",
                           c->where);
    if (!(n = node_of(k, 0)))
        return rlock__fail(call, RLOCK_ENOMEM, "out of memory");
    return rlock__node_ping(n, c->opts.command_timeout_ms, info, call);
}

/* Any master will do, one after another: a message published on one
 * reaches the subscribers of all. */
static int sub_node_cluster(rlock_client *c, int i, int quick,
                            rlock__node **out, rlock__call *call)
{
    cluster *k = of(c);
    int n;

    (void)quick;
    *out = NULL;
    pthread_mutex_lock(&k->mu);
    n = k->nmasters;
    pthread_mutex_unlock(&k->mu);
    if (n == 0 && i == 0)
        return rlock__fail(call, RLOCK_ECONNECT, "no master of %s is known",
                           c->where);
    if (i >= n)
        return RLOCK_OK;
    if (!(*out = node_of(k, i)))
        return rlock__fail(call, RLOCK_ENOMEM, "out of memory");
    return RLOCK_OK;
}

/* The masters that serve slots, as the slot map says once read again:
 * a master the map no longer names (failed over, emptied) is left out,
 * and its index, like every index of the table, is never reused. */
static int servers_cluster(rlock_client *c, int *ids, int max, int *sent,
                           rlock__call *call)
{
    cluster *k = of(c);
    unsigned char serves[MASTERS_MAX] = {0};
    int slot, i, n = 0, rc;

    *sent = 1;
    if ((rc = refresh(c, call)) != RLOCK_OK)
        return rc;
    pthread_mutex_lock(&k->mu);
    for (slot = 0; slot < SLOTS; slot++)
        if (k->map[slot] >= 0)
            serves[k->map[slot]] = 1;
    for (i = 0; i < k->nmasters && n < max; i++)
        if (serves[i])
            ids[n++] = i;
    pthread_mutex_unlock(&k->mu);
    return n;
}

static int server_commands_cluster(rlock_client *c, int id, int ncmds,
                                   const rlock__cmd *cmds, redisReply **replies,
                                   const char **where, rlock__call *call)
{
    rlock__node *n = node_of(of(c), id);

    if (!n)
        return rlock__fail(call, RLOCK_ENOMEM, "out of memory");
    *where = rlock__node_where(n);
    return rlock__node_commands(
        n, ncmds, cmds, replies,
        rlock__call_until(call, c->opts.command_timeout_ms), call);
}

const rlock__backend rlock__backend_cluster = {
    "Cluster",
    "redis-cluster://",
    RLOCK__BK_ONE_COPY | RLOCK__BK_SLOTS,
    open_cluster,
    close_cluster,
    after_fork_cluster,
    fork_hold_cluster,
    route_cluster,
    routed_cluster,
    group_cluster,
    ping_cluster,
    sub_node_cluster,
    NULL,
    rlock__margin_one,
    rlock__label_none,
    rlock__failure_one,
    servers_cluster,
    server_commands_cluster,
};
