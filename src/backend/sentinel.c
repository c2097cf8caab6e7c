/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Redis Sentinel (redis-sentinel://host:port[,host:port...]/master-name
 * [?db=N]): the master is found by asking the sentinels, and found again
 * when it may have changed.
 *
 * Every new connection goes to the master as the sentinels last named it,
 * and is checked with ROLE in its handshake: a server that is no longer
 * the master (the sentinels have not noticed yet, or a stale sentinel
 * answered) is not used. The address is asked for again:
 *  - after a connection was lost or refused, after a reply said the
 *    server is a replica (READONLY, MASTERDOWN), and after a request the
 *    master never answered (an attempt, a keep-alive, a renewal, an
 *    undo): a failover closes the old master's client connections when
 *    Sentinel demotes it, but a master that stalled (SIGSTOP, a hung
 *    host) closes nothing and answers nothing, and is replaced all the
 *    same;
 *  - before a request to a master the client has not heard from for half
 *    of the sentinels' down-after-milliseconds (read with the address):
 *    no failover can have ended sooner after the master last answered, so
 *    a client that was idle meanwhile does not spend its first call's
 *    whole deadline on a pooled connection to a master that stalled and
 *    was replaced. (A client that talks to the master more often never
 *    asks; one that is idle for longer asks once per call, one round trip
 *    to a sentinel. Sentinels that do not answer then do not stop the
 *    request: it goes where the master was.)
 * The sentinels are asked one after another, each by the connect
 * timeout, over pooled connections of their own: within a request's
 * routing as exchanges of the route (a loop waits for them as for any
 * server), and blocking elsewhere (open, ping, the thread's subscriber).
 * When the address changes, the client's moves count goes up: the
 * subscriber connection, still open to the old master if that one only
 * stalled, is replaced and every channel subscribed again on the new
 * master, and waits whose attempts the old master did not answer go on
 * there as fresh waits (engine/wait.c, RLOCK__BK_FAILOVER). Holds then
 * live on the new master: the watchdog's next renewal finds each key there
 * or not, and a hold whose key did not reach the new master is reported
 * lost (on_lost).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "util/clock.h"

#define SENTINELS_MAX 16
/* Sentinel's default down-after-milliseconds, for sentinels that do not
 * say theirs (an ACL that allows get-master-addr-by-name only). */
#define DOWN_AFTER_DEFAULT_MS 30000
/* More than a day is not a setting but a broken answer. */
#define DOWN_AFTER_MAX_MS (24 * 3600 * 1000LL)

typedef struct sentinel {
    rlock__url sentinels[SENTINELS_MAX];
    int nsentinels;
    char *master_name;
    rlock__node_cfg cfg;
    rlock__node *node;   /* the master, where the sentinels last said */
    /* The sentinels, asked over connections of their own (pooled: TLS
     * alone, no AUTH or SELECT), and the question they are asked,
     * SENTINEL get-master-addr-by-name and SENTINEL MASTER in one
     * pipeline, built once and shared by every request that asks. */
    rlock__node_cfg scfg;
    rlock__node *snodes[SENTINELS_MAX];
    rlock__req ask;
    pthread_mutex_t mu;  /* guards what follows and the node's moves */
    int stale;           /* ask the sentinels before the next request */
    int64_t asked_at;    /* when they last named the master, or were asked
                            in vain for want of news from it */
    int64_t quiet_ns;    /* not heard from for longer: ask them first */
    char master_at[300]; /* "host:port" the sentinels named last ("" at
                            first) */
} sentinel;

static sentinel *of(const rlock_client *c)
{
    return c->bk;
}

int rlock__sentinel_parse(const char *spec, rlock__url *sentinels, int max,
                          int *n, char **master_name, int *db, rlock__err *e)
{
    const char *slash = strchr(spec, '/'), *q, *name, *name_end;

    *n = 0;
    *master_name = NULL;
    *db = 0;
    if (!slash || slash == spec)
        return rlock__err_set(e, RLOCK_EINVAL,
                              "sentinel URL: redis-sentinel://host:port,.../"
                              "master-name");
    name = slash + 1;
    q = strchr(name, '?');
    name_end = q ? q : name + strlen(name);
    if (name_end == name || memchr(name, '/', (size_t)(name_end - name)))
        return rlock__err_set(e, RLOCK_EINVAL,
                              "sentinel URL: missing master name after '/'");
    if (q) {
        char *end;
        long v;
        if (strncmp(q + 1, "db=", 3) != 0 || !q[4] || q[4] == '-' ||
            q[4] == '+')
            return rlock__err_set(e, RLOCK_EINVAL,
                                  "sentinel URL: the only parameter is db=N");
        v = strtol(q + 4, &end, 10);
        if (*end || v < 0 || v > 1000000)
            return rlock__err_set(e, RLOCK_EINVAL,
                                  "sentinel URL: db must be a number from 0");
        *db = (int)v;
    }
    *master_name = strndup(name, (size_t)(name_end - name));
    if (!*master_name)
        return rlock__err_set(e, RLOCK_ENOMEM, "out of memory");
    return rlock__url_list_parse(spec, slash, sentinels, max, n, "sentinel", e);
}

/* The sentinel's down-after-milliseconds for the master, from its answer
 * to SENTINEL MASTER (field names and values in turn); 0 if it does not
 * say. */
static int64_t down_after_ms(const redisReply *r)
{
    size_t i;

    if (r->type != REDIS_REPLY_ARRAY)
        return 0;
    for (i = 0; i + 1 < r->elements; i += 2) {
        const redisReply *k = r->element[i], *v = r->element[i + 1];
        if (k->type == REDIS_REPLY_STRING && v->type == REDIS_REPLY_STRING &&
            strcmp(k->str, "down-after-milliseconds") == 0)
            return strtoll(v->str, NULL, 10);
    }
    return 0;
}

/* The sentinels named host:port as the master (s->mu held): another one
 * than before is a failover, counted and reported. */
static void named(rlock_client *c, sentinel *s, const char *host, int port)
{
    char at[300], detail[700];

    snprintf(at, sizeof at, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host,
             port);
    if (strcmp(at, s->master_at) == 0)
        return;
    if (s->master_at[0]) {
        snprintf(detail, sizeof detail,
                 "the sentinels name %s as master '%s', after %s", at,
                 s->master_name, s->master_at);
        rlock__obs_node(c->obs, RLOCK_EV_FAILOVER, 0, at, detail);
    }
    snprintf(s->master_at, sizeof s->master_at, "%s", at);
}

/* SENTINEL get-master-addr-by-name, then SENTINEL MASTER (for its
 * down-after-milliseconds), as one pipeline of 3-argument commands. */
static const rlock__script sentinel_ask = {"sentinel query", NULL, 0, NULL,
                                           "SENTINEL",       3};

/* What sentinel i answered (r, its result of s->ask): RLOCK_OK if it
 * named the master, whose node is pointed there (a move counts in
 * c->moves); else the failure, its cause appended to errs (of errs_max
 * bytes, *len used: "; where: why"), and *known set if the sentinel
 * answered that it does not know the master. */
static int took(rlock_client *c, int i, const rlock__result *r, int *known,
                char *errs, size_t errs_max, size_t *len)
{
    sentinel *s = of(c);
    const redisReply *a =
        r->rc == RLOCK_OK && r->nreplies == 2 ? r->replies[0] : NULL;
    const char *why;
    int rc;

    if (a && a->type == REDIS_REPLY_ARRAY && a->elements == 2 &&
        a->element[0]->type == REDIS_REPLY_STRING &&
        a->element[1]->type == REDIS_REPLY_STRING && a->element[0]->len < 256) {
        int port = atoi(a->element[1]->str), moved;
        int64_t down_ms = down_after_ms(r->replies[1]);
        if (down_ms <= 0 || down_ms > DOWN_AFTER_MAX_MS)
            down_ms = DOWN_AFTER_DEFAULT_MS;
        pthread_mutex_lock(&s->mu);
        moved = !rlock__node_is(s->node, a->element[0]->str, port);
        rc = moved ? rlock__node_move(s->node, a->element[0]->str, port)
                   : RLOCK_OK;
        if (moved && rc == RLOCK_OK)
            __atomic_add_fetch(&c->moves, 1, __ATOMIC_RELEASE);
        if (rc == RLOCK_OK)
            named(c, s, a->element[0]->str, port);
        s->stale = 0;
        s->asked_at = rlock__now_ns();
        s->quiet_ns = down_ms * RLOCK__NS_PER_MS / 2;
        pthread_mutex_unlock(&s->mu);
        return rc;
    }
    if (a && a->type == REDIS_REPLY_NIL)
        *known = 1;
    if (r->rc != RLOCK_OK)
        why = r->err.msg;
    else if (!a)
        why = "unexpected answer";
    else if (a->type == REDIS_REPLY_NIL)
        why = "does not know this master";
    else if (a->type == REDIS_REPLY_ERROR)
        why = a->str;
    else
        why = "unexpected answer";
    /* A failed exchange's detail names the sentinel already. */
    if (*len < errs_max)
        *len += (size_t)snprintf(
            errs + *len, errs_max - *len, "; %s%s%s",
            r->rc != RLOCK_OK ? "" : rlock__node_where(s->snodes[i]),
            r->rc != RLOCK_OK ? "" : ": ", why);
    return r->rc != RLOCK_OK ? r->rc : RLOCK_EUNAVAILABLE;
}

/* The failure of asking every sentinel in vain, errs the causes. */
static int none_named(rlock_client *c, int known, const char *errs,
                      rlock__call *call)
{
    return rlock__fail(call, known ? RLOCK_EUNAVAILABLE : RLOCK_ECONNECT,
                       "no sentinel named the master '%s'%s",
                       of(c)->master_name, errs);
}

/* Asks the sentinels, in the order given, where the master is, and
 * points the node there, blocking: each sentinel is given the connect
 * timeout for its exchange, within the call's deadline. The same round
 * trip asks how long the sentinels wait before they call a silent master
 * down. (A routed request asks them in steps instead: route_sentinel.) */
static int resolve(rlock_client *c, rlock__call *call)
{
    sentinel *s = of(c);
    char errs[400] = "";
    size_t len = 0;
    int i, known = 0;

    for (i = 0; i < s->nsentinels; i++) {
        rlock__results res;
        int rc =
            rlock__nodes_exec(&s->snodes[i], 1, &s->ask, 0,
                              rlock__ask_until(c, call->deadline_ns), &res);
        if (rc != RLOCK_OK)
            return rlock__fail(call, rc, "out of memory");
        rc = took(c, i, &res.r[0], &known, errs, sizeof errs, &len);
        rlock__results_free(&res);
        if (rc == RLOCK_OK)
            return RLOCK_OK;
        if (rc == RLOCK_ENOMEM)
            return rlock__fail(call, rc, "out of memory");
    }
    return none_named(c, known, errs, call);
}

/* After a request failed with rc: if the master may have changed, ask the
 * sentinels before the next one. */
static void suspect(rlock_client *c, int rc)
{
    sentinel *s = of(c);

    if (rc != RLOCK_EIO && rc != RLOCK_ENOREPLY && rc != RLOCK_ECONNECT &&
        rc != RLOCK_EUNAVAILABLE)
        return;
    pthread_mutex_lock(&s->mu);
    s->stale = 1;
    pthread_mutex_unlock(&s->mu);
    /* A replica's connections are of no use: do not hand them out. */
    if (rc == RLOCK_EUNAVAILABLE)
        rlock__node_drain(s->node);
}

/* Whether the sentinels are asked before a request: ASK_MUST if a
 * request made the master suspect (the request needs their answer);
 * ASK_MAY if the master has been quiet for so long that they may have
 * replaced it meanwhile. The second is a precaution, not a need: it gets
 * half of what is left of the call, and if no sentinel answers, the
 * request goes where the master was (and the sentinels are not asked so
 * again for a while), so that a client whose sentinels are down, or out
 * of reach, still reaches a master that is up. */
enum { ASK_NOT, ASK_MAY, ASK_MUST };

static int ask_first(rlock_client *c)
{
    sentinel *s = of(c);
    int64_t heard = rlock__node_heard(s->node), now = rlock__now_ns();
    int stale, quiet;

    pthread_mutex_lock(&s->mu);
    if (heard < s->asked_at)
        heard = s->asked_at;
    stale = s->stale;
    quiet = now - heard > s->quiet_ns;
    pthread_mutex_unlock(&s->mu);
    return stale ? ASK_MUST : quiet ? ASK_MAY : ASK_NOT;
}

/* The end of a precaution's asking: half of what is left of the call. */
static int64_t half_left(const rlock__call *call)
{
    int64_t now = rlock__now_ns();

    return call->deadline_ns ? now + (call->deadline_ns - now) / 2 : 0;
}

/* The sentinels were asked as a precaution, in vain. */
static void asked_in_vain(sentinel *s)
{
    pthread_mutex_lock(&s->mu);
    s->asked_at = rlock__now_ns();
    pthread_mutex_unlock(&s->mu);
}

/* ask_first, blocking: the sentinels asked now if they are to be. */
static int fresh_address(rlock_client *c, rlock__call *call)
{
    rlock__call half = {0};

    switch (ask_first(c)) {
    case ASK_MUST:
        return resolve(c, call);
    case ASK_MAY:
        rlock__call_init(&half, half_left(call));
        if (resolve(c, &half) != RLOCK_OK)
            asked_in_vain(of(c));
        rlock__call_end(&half);
        return RLOCK_OK;
    default:
        return RLOCK_OK;
    }
}

/* A failure to reach the master before anything was sent: the sentinels
 * may know better now. */
static int unreached_rc(int rc)
{
    return rc == RLOCK_ECONNECT || rc == RLOCK_ENOREPLY || rc == RLOCK_EIO ||
           rc == RLOCK_EUNAVAILABLE;
}

static int unreached(const rlock__result *r)
{
    return !r->sent && unreached_rc(r->rc);
}

/* What a request's route keeps between its exchanges (rlock__route's
 * own). */
typedef struct sentinel_route {
    int asking;    /* the sentinel being asked, plus 1 (0: none) */
    int must;      /* the request needs their answer (ASK_MUST) */
    int known;     /* a sentinel answered that it does not know the master */
    int tries;     /* exchanges with the master */
    int asked;     /* they were asked since the master's last exchange:
                      not again before the next (another thread's
                      suspicion meanwhile is the next call's to act on) */
    int64_t until; /* the asking's end (0: each sentinel its own) */
    size_t errlen; /* call->err.msg's length before the asking */
} sentinel_route;

_Static_assert(sizeof(sentinel_route) <= sizeof(((rlock__route *)0)->own.bytes),
               "a sentinel route fits in rlock__route's own");

/* A request goes where the sentinels said last, after asking them one
 * after another (each an exchange of the route: a loop is not held up by
 * a sentinel that is slow to answer) if ask_first says so; if the master
 * could not be reached there, once more after asking them again. */
static int route_sentinel(rlock_client *c, const rlock__req *req, int flags,
                          rlock__route *rt, rlock__results *res,
                          rlock__call *call)
{
    sentinel *s = of(c);
    int64_t ms = c->opts.command_timeout_ms;
    sentinel_route sr;

    (void)res;
    memcpy(&sr, rt->own.bytes, sizeof sr);
    if (!sr.asking && !sr.asked) {
        int ask = ask_first(c);
        if (ask != ASK_NOT) {
            sr.asking = 1;
            sr.must = ask == ASK_MUST;
            sr.known = 0;
            sr.until = sr.must ? call->deadline_ns : half_left(call);
            sr.errlen = strlen(rlock__call_msg(call));
        }
    }
    if (sr.asking) {
        rt->req = &s->ask;
        rt->nodes[0] = s->snodes[sr.asking - 1];
        rt->flags = flags & RLOCK__X_NOWAIT;
        rt->deadline_ns = rlock__ask_until(c, sr.until);
    } else {
        if (req->replicas > 0)
            ms += c->opts.sync_timeout_ms;
        rt->req = NULL;
        rt->nodes[0] = s->node;
        rt->flags = flags;
        rt->deadline_ns = rlock__call_until(call, (int)ms);
    }
    rt->n = 1;
    memcpy(rt->own.bytes, &sr, sizeof sr);
    return RLOCK_OK;
}

/* The end of a sentinel's exchange: the master's exchange next, or the
 * next sentinel's, or the request's failure when none named the master
 * and the request needs them to. The causes of the sentinels that did
 * not name it are gathered at the end of call->err.msg meanwhile. */
static int asked(rlock_client *c, sentinel_route *sr, rlock__results *res,
                 rlock__call *call)
{
    sentinel *s = of(c);
    size_t len = strlen(rlock__call_msg(call));
    char spare[1] = "", *buf = rlock__call_buf(call);
    size_t cap = RLOCK__ERR_MAX;
    int rc;

    if (len < sr->errlen) /* someone else wrote there meanwhile */
        len = sr->errlen;
    if (!buf) { /* out of memory: the causes are lost, not the answer */
        buf = spare;
        cap = sizeof spare;
        len = 0;
    }
    rc = took(c, sr->asking - 1, &res->r[0], &sr->known, buf, cap, &len);
    rlock__results_clear(res);
    if (rc == RLOCK_OK || (rc != RLOCK_ENOMEM && !sr->must &&
                           (sr->asking == s->nsentinels ||
                            (sr->until && rlock__now_ns() >= sr->until)))) {
        /* Named, or a precaution that ends in vain: the master's turn. */
        if (rc != RLOCK_OK)
            asked_in_vain(s);
        rlock__call_cut(call, sr->errlen);
        sr->asking = 0;
        sr->asked = 1;
        return RLOCK__ROUTE_AGAIN;
    }
    if (rc != RLOCK_ENOMEM && sr->asking < s->nsentinels &&
        (!sr->until || rlock__now_ns() < sr->until)) {
        sr->asking++;
        return RLOCK__ROUTE_AGAIN;
    }
    if (rc == RLOCK_ENOMEM) {
        rlock__fail(call, rc, "out of memory");
    } else {
        char errs[400];
        snprintf(errs, sizeof errs, "%s", rlock__call_msg(call) + sr->errlen);
        none_named(c, sr->known, errs, call);
    }
    rlock__results_init(res, 1);
    res->r[0].rc = call->code;
    rlock__call_get(call, &res->r[0].err);
    return RLOCK__ROUTE_DONE;
}

static int routed_sentinel(rlock_client *c, const rlock__req *req,
                           rlock__route *rt, rlock__results *res,
                           rlock__call *call)
{
    sentinel_route sr;
    int rc;

    (void)req;
    memcpy(&sr, rt->own.bytes, sizeof sr);
    if (sr.asking) {
        rc = asked(c, &sr, res, call);
        memcpy(rt->own.bytes, &sr, sizeof sr);
        return rc;
    }
    sr.tries++;
    sr.asked = 0;
    memcpy(rt->own.bytes, &sr, sizeof sr);
    if (res->r[0].rc == RLOCK_OK)
        return RLOCK__ROUTE_DONE;
    suspect(c, res->r[0].rc);
    if (sr.tries >= 2 || !unreached(&res->r[0]))
        return RLOCK__ROUTE_DONE;
    /* With the call's time used up (waiting for one of the master's
     * connections, say), asking the sentinels could only fail for want of
     * time, and its message would hide the cause: the failure stands as
     * it is, and the next call asks them (suspect). */
    if (call->deadline_ns && rlock__now_ns() >= call->deadline_ns)
        return RLOCK__ROUTE_DONE;
    rlock__results_clear(res);
    return RLOCK__ROUTE_AGAIN;
}

/* The sentinels' nodes and the question they are asked (nothing is
 * reached yet). Their connections carry TLS as the master's do, and
 * nothing else: no AUTH (the credentials are the master's), no SELECT,
 * no ROLE; their answers (SENTINEL MASTER's fields) are the library's
 * own question, not refused by bounds set tight for the lock replies. */
static int open_sentinels(rlock_client *c, sentinel *s, rlock__call *call)
{
    int i;

    rlock__node_cfg_of(c, &s->scfg);
    s->scfg.username = NULL;
    s->scfg.password = NULL;
    s->scfg.scripts = NULL;
    s->scfg.nscripts = 0;
    s->scfg.obs = NULL;
    s->scfg.request_timeout_ms = c->opts.connect_timeout_ms;
    /* A question now and then: a few connections each at most (a silent
     * sentinel's unanswered ones are retired by the pool's rules). */
    if (s->scfg.max_connections <= 0 || s->scfg.max_connections > 4)
        s->scfg.max_connections = 4;
    rlock__bounds_widen(&s->scfg.bounds);
    for (i = 0; i < s->nsentinels; i++) {
        char where[300];
        rlock__url_describe(&s->sentinels[i], where, sizeof where);
        if (rlock__node_new(&s->scfg, s->sentinels[i].host,
                            s->sentinels[i].port, NULL, where,
                            &s->snodes[i]) != RLOCK_OK)
            return rlock__fail(call, RLOCK_ENOMEM, "out of memory");
    }
    rlock__req_init(&s->ask, &sentinel_ask);
    rlock__req_command(&s->ask, "get-master-addr-by-name", 23);
    rlock__req_args(&s->ask, s->master_name);
    rlock__req_command(&s->ask, "MASTER", 6);
    rlock__req_args(&s->ask, s->master_name);
    if (rlock__req_finish(&s->ask) != RLOCK_OK)
        return rlock__fail(call, RLOCK_ENOMEM, "out of memory");
    return RLOCK_OK;
}

static int open_sentinel(rlock_client *c, const char *url,
                         const rlock_client_opts *opts, rlock__call *call)
{
    rlock_client_opts eff = *opts;
    int sent = 0;
    rlock__err e;
    rlock__url tls;
    sentinel *s = calloc(1, sizeof *s);
    char *rest = NULL;
    const char *name;
    int rc;

    if (!s)
        return rlock__fail(call, RLOCK_ENOMEM, "out of memory");
    c->bk = s;
    pthread_mutex_init(&s->mu, NULL);
    s->stale = 1;
    /* The TLS parameters of the query apply to every connection
     * (sentinels and masters); the rest is the sentinel URL's. */
    if ((rc = rlock__url_split_tls(url, &tls, &rest, &e)) != RLOCK_OK)
        return rlock__call_set(call, &e);
    rc = rlock__url_tls(&tls, &eff, call);
    if (rc == RLOCK_OK)
        rc = rlock__client_tls(c, &eff, call);
    rlock__url_free(&tls);
    if (rc == RLOCK_OK &&
        (rc = rlock__sentinel_parse(
             rest + strlen("redis-sentinel://"), s->sentinels, SENTINELS_MAX,
             &s->nsentinels, &s->master_name, &s->cfg.db, &e)) != RLOCK_OK)
        rlock__call_set(call, &e);
    free(rest);
    if (rc != RLOCK_OK)
        return rc;
    if ((opts->username && !(c->username = strdup(opts->username))) ||
        (opts->password && !(c->password = strdup(opts->password))))
        return rlock__fail(call, RLOCK_ENOMEM, "out of memory");
    name = s->master_name;
    snprintf(c->where, sizeof c->where, "master '%.200s' (via sentinels)",
             name);
    {
        int db = s->cfg.db;
        rlock__node_cfg_of(c, &s->cfg);
        s->cfg.db = db;
    }
    s->cfg.require_master = 1;
    /* Where the master is comes from the sentinels (resolve); until then
     * the node has a name only. */
    if (rlock__node_new(&s->cfg, "0.0.0.0", 0, NULL, c->where, &s->node) !=
        RLOCK_OK)
        return rlock__fail(call, RLOCK_ENOMEM, "out of memory");
    c->nnodes = 1;
    c->quorum = 1;
    if ((rc = open_sentinels(c, s, call)) != RLOCK_OK)
        return rc;
    /* A client on a loop asks the sentinels with its first request, in
     * steps: rlock_async_open returns at once. */
    if (c->lazy)
        return RLOCK_OK;
    /* Find and reach the master now: a wrong URL fails here. Each
     * sentinel asked, then the master, within the connect timeout. */
    if ((rc = resolve(c, call)) != RLOCK_OK)
        return rc;
    rc = rlock__node_connect_now(
        s->node, rlock__call_until(call, opts->connect_timeout_ms), call,
        &sent);
    if (rc != RLOCK_OK && !sent && unreached_rc(rc)) {
        /* The sentinels may not have noticed a failover yet: once more. */
        suspect(c, rc);
        if ((rc = resolve(c, call)) != RLOCK_OK)
            return rc;
        rc = rlock__node_connect_now(
            s->node, rlock__call_until(call, opts->connect_timeout_ms), call,
            NULL);
    }
    return rc;
}

static void close_sentinel(rlock_client *c)
{
    sentinel *s = of(c);
    int i;

    if (!s)
        return;
    rlock__node_free(s->node);
    for (i = 0; i < s->nsentinels; i++) {
        rlock__node_free(s->snodes[i]);
        rlock__url_free(&s->sentinels[i]);
    }
    rlock__req_free(&s->ask);
    free(s->master_name);
    pthread_mutex_destroy(&s->mu);
    free(s);
    c->bk = NULL;
}

static void after_fork_sentinel(rlock_client *c)
{
    sentinel *s = of(c);

    int i;

    pthread_mutex_init(&s->mu, NULL);
    rlock__node_after_fork(s->node);
    for (i = 0; i < s->nsentinels; i++)
        rlock__node_after_fork(s->snodes[i]);
}

/* s->mu before the nodes': took moves the node under s->mu. */
static void fork_hold_sentinel(rlock_client *c, int take)
{
    sentinel *s = of(c);
    int i;

    if (take) {
        pthread_mutex_lock(&s->mu);
        rlock__node_fork_hold(s->node, 1);
        for (i = 0; i < s->nsentinels; i++)
            rlock__node_fork_hold(s->snodes[i], 1);
    } else {
        for (i = s->nsentinels - 1; i >= 0; i--)
            rlock__node_fork_hold(s->snodes[i], 0);
        rlock__node_fork_hold(s->node, 0);
        pthread_mutex_unlock(&s->mu);
    }
}

static int ping_sentinel(rlock_client *c, rlock_server_info *info,
                         rlock__call *call)
{
    int rc = fresh_address(c, call);

    if (rc == RLOCK_OK)
        rc = rlock__node_ping(of(c)->node, c->opts.command_timeout_ms, info,
                              call);
    if (rc != RLOCK_OK)
        suspect(c, rc);
    return rc;
}

/* The master, as the sentinels say (asked first if it is suspect, but
 * on a loop, quick: where they said last, once they said). */
static int sub_node_sentinel(rlock_client *c, int i, int quick,
                             rlock__node **out, rlock__call *call)
{
    sentinel *s = of(c);
    int rc = RLOCK_OK, named_yet;

    *out = NULL;
    if (i != 0)
        return RLOCK_OK;
    if (quick) {
        pthread_mutex_lock(&s->mu);
        named_yet = s->master_at[0] != '\0';
        pthread_mutex_unlock(&s->mu);
        if (!named_yet)
            return rlock__fail(call, RLOCK_ECONNECT,
                               "the sentinels have not named the master '%s' "
                               "yet",
                               s->master_name);
    } else if ((rc = fresh_address(c, call)) != RLOCK_OK) {
        return rc;
    }
    *out = s->node;
    return RLOCK_OK;
}

/* The master, as the sentinels say: a failure may mean a failover, and
 * the next step asks them again. */
static int server_commands_sentinel(rlock_client *c, int id, int ncmds,
                                    const rlock__cmd *cmds,
                                    redisReply **replies, const char **where,
                                    rlock__call *call)
{
    int rc = fresh_address(c, call);

    (void)id;
    *where = rlock__node_where(of(c)->node);
    if (rc == RLOCK_OK)
        rc = rlock__node_commands(
            of(c)->node, ncmds, cmds, replies,
            rlock__call_until(call, c->opts.command_timeout_ms), call);
    if (rc != RLOCK_OK)
        suspect(c, rc);
    return rc;
}

const rlock__backend rlock__backend_sentinel = {
    "Sentinel",
    "redis-sentinel://",
    RLOCK__BK_ONE_COPY | RLOCK__BK_WAIT | RLOCK__BK_FAILOVER,
    open_sentinel,
    close_sentinel,
    after_fork_sentinel,
    fork_hold_sentinel,
    route_sentinel,
    routed_sentinel,
    rlock__group_all,
    ping_sentinel,
    sub_node_sentinel,
    suspect,
    rlock__margin_one,
    rlock__label_none,
    rlock__failure_one,
    rlock__servers_one,
    server_commands_sentinel,
};
