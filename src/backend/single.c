/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * One Redis server: redis://, rediss:// and unix:// URLs (util/url.h).
 * Every request goes to its one node; the URL's credentials and TLS
 * parameters apply, the options' credentials over them.
 */
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "util/clock.h"

typedef struct single {
    rlock__url url;
    rlock__node_cfg cfg;
    rlock__node *node;
} single;

static single *of(const rlock_client *c)
{
    return c->bk;
}

static int open_single(rlock_client *c, const char *url,
                       const rlock_client_opts *opts, rlock__call *call)
{
    rlock_client_opts eff = *opts;
    single *s = calloc(1, sizeof *s);
    rlock__err e;
    int rc;

    if (!s)
        return rlock__fail(call, RLOCK_ENOMEM, "out of memory");
    c->bk = s;
    if ((rc = rlock__url_parse(url, &s->url, &e)) != RLOCK_OK)
        return rlock__call_set(call, &e);
    if ((rc = rlock__url_tls(&s->url, &eff, call)) != RLOCK_OK)
        return rc;
    /* Over a unix socket there is no host name to check the server's
     * certificate against: sni= names it, or insecure=1 says not to. */
    if (s->url.path && eff.tls && !eff.tls_sni && !eff.tls_insecure)
        return rlock__fail(call, RLOCK_EINVAL,
                           "TLS over a unix:// URL needs the server's name "
                           "to verify (sni=NAME, or the tls_sni option), or "
                           "insecure=1 to skip verification");
    if ((rc = rlock__client_tls(c, &eff, call)) != RLOCK_OK)
        return rc;
    /* Each of the options' credentials overrides the URL's: a password
     * in the options with a user in the URL is that user's. */
    if (opts->username || s->url.user)
        c->username = strdup(opts->username ? opts->username : s->url.user);
    if (opts->password || s->url.password)
        c->password = strdup(opts->password ? opts->password : s->url.password);
    if (((opts->username || s->url.user) && !c->username) ||
        ((opts->password || s->url.password) && !c->password))
        return rlock__fail(call, RLOCK_ENOMEM, "out of memory");
    rlock__url_describe(&s->url, c->where, sizeof c->where);
    rlock__node_cfg_of(c, &s->cfg);
    s->cfg.db = s->url.db;
    if (rlock__node_new(&s->cfg, s->url.host, s->url.port, s->url.path,
                        c->where, &s->node) != RLOCK_OK)
        return rlock__fail(call, RLOCK_ENOMEM, "out of memory");
    c->nnodes = 1;
    c->quorum = 1;
    /* Connect now, so a wrong URL or password fails here, by the connect
     * timeout alone (but for an event loop's client). */
    if (c->lazy)
        return RLOCK_OK;
    return rlock__node_connect_now(
        s->node, rlock__after_ms(opts->connect_timeout_ms), call, NULL);
}

static void close_single(rlock_client *c)
{
    single *s = of(c);

    if (!s)
        return;
    rlock__node_free(s->node);
    rlock__url_free(&s->url);
    free(s);
    c->bk = NULL;
}

static void after_fork_single(rlock_client *c)
{
    rlock__node_after_fork(of(c)->node);
}

static void fork_hold_single(rlock_client *c, int take)
{
    rlock__node_fork_hold(of(c)->node, take);
}

static int route_single(rlock_client *c, const rlock__req *req, int flags,
                        rlock__route *rt, rlock__results *res,
                        rlock__call *call)
{
    int64_t ms = c->opts.command_timeout_ms;

    (void)res;
    /* With a WAIT behind the script, its reply may come sync_timeout_ms
     * later. */
    if (req->replicas > 0)
        ms += c->opts.sync_timeout_ms;
    rt->nodes[0] = of(c)->node;
    rt->n = 1;
    rt->flags = flags;
    rt->deadline_ns = rlock__call_until(call, (int)ms);
    return RLOCK_OK;
}

static int ping_single(rlock_client *c, rlock_server_info *info,
                       rlock__call *call)
{
    return rlock__node_ping(of(c)->node, c->opts.command_timeout_ms, info,
                            call);
}

static int sub_node_single(rlock_client *c, int i, int quick, rlock__node **out,
                           rlock__call *call)
{
    (void)quick;
    (void)call;
    *out = i == 0 ? of(c)->node : NULL;
    return RLOCK_OK;
}

static int server_commands_single(rlock_client *c, int id, int ncmds,
                                  const rlock__cmd *cmds, redisReply **replies,
                                  const char **where, rlock__call *call)
{
    (void)id;
    *where = rlock__node_where(of(c)->node);
    return rlock__node_commands(
        of(c)->node, ncmds, cmds, replies,
        rlock__call_until(call, c->opts.command_timeout_ms), call);
}

const rlock__backend rlock__backend_single = {
    "single server",
    NULL,
    RLOCK__BK_ONE_COPY | RLOCK__BK_WAIT,
    open_single,
    close_single,
    after_fork_single,
    fork_hold_single,
    route_single,
    rlock__routed_once,
    rlock__group_all,
    ping_single,
    sub_node_single,
    NULL,
    rlock__margin_one,
    rlock__label_none,
    rlock__failure_one,
    rlock__servers_one,
    server_commands_single,
};
