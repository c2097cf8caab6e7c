/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The client's background work on the loop: the second filling of
 * rlock__driver (bg/driver.h), beside thread.c's. The watchdog's renewals
 * and the undos run as tasks of the loop, like the application's calls;
 * the subscriber's connection is made in steps and read on readiness;
 * the sweep of the holds, the subscriber's sends and the notices are a
 * step due at a time the loop's timer keeps (kick and kick_before move
 * it). Loss notices call on_lost on the loop's own thread, at the end of
 * a pass, never inside one: the callback may start or end calls.
 *
 * The loop runs all of it on one thread, so nothing here waits: but for
 * what node.h says still blocks (looking up a host name), no step takes
 * longer than its work in memory.
 */
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/observe.h"
#include "loop/loop_impl.h"
#include "util/clock.h"

static rlock__loop *loop_of(rlock_client *c)
{
    return c->bg->drv;
}

/* The step is due by due_ns (it is looked at when the pass ends). */
static void due_by(rlock__loop *l, int64_t due_ns)
{
    if (l && (l->bg.at == 0 || due_ns < l->bg.at))
        l->bg.at = due_ns;
}

/* ---- the driver's hooks (mu held) --------------------------------------- */

static int ensure(rlock_client *c, rlock__call *call)
{
    /* The loop runs the steps whenever they are due: nothing to start.
     * (Not a step now: a hold just recorded has said when it is due, and
     * a step walks every hold, which at 100,000 holds must not follow
     * every acquisition.) */
    (void)c;
    (void)call;
    return RLOCK_OK;
}

static void kick(rlock_client *c)
{
    due_by(loop_of(c), rlock__now_ns());
}

static void kick_before(rlock_client *c, int64_t due_ns)
{
    due_by(loop_of(c), due_ns);
}

static void stop(rlock_client *c)
{
    /* The loop was detached before (rlock__loop_free): what is left is
     * the subscriber connection (unwatched already) and the undos. */
    pthread_mutex_lock(&c->mu);
    rlock__sub_shutdown(c);
    rlock__cleanup_free(c);
    rlock__obs_drop(c->obs);
    pthread_mutex_unlock(&c->mu);
}

static void after_fork(rlock_client *c)
{
    /* A loop is not the child's: its client is used no more there. */
    c->bg->drv = NULL;
}

static void notices(rlock_client *c, int64_t *next)
{
    /* Delivered when the pass ends (bg_deliver). */
    (void)next;
    if (rlock__notify_waiting(c))
        due_by(loop_of(c), rlock__now_ns());
}

static void unwatch(rlock_client *c, int fd)
{
    rlock__loop *l = loop_of(c);

    if (l)
        rlock__loop_unwatch(l, fd);
}

static const rlock__driver loop_driver = {
    "loop", ensure, kick, kick_before, stop, after_fork, notices, unwatch,
};

static int bg_attach(rlock__loop *l)
{
    rlock_client *c = l->c;
    int rc = RLOCK_OK;

    pthread_mutex_lock(&c->mu);
    if (c->bg->running || c->bg->drv)
        rc = RLOCK_EINVAL; /* driven by its thread, or another loop */
    else {
        c->bg->driver = &loop_driver;
        c->bg->drv = l;
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* ---- the renewals and the undos, as tasks ------------------------------- */

static int renew_step(void *op, rlock__slot **slot)
{
    rlock__loop *l = op;
    int what;

    pthread_mutex_lock(&l->c->mu);
    what = rlock__renew_step(l->bg.renew, slot);
    pthread_mutex_unlock(&l->c->mu);
    return what;
}

static void renew_done(rlock__task *t)
{
    rlock__loop *l = t->arg;

    pthread_mutex_lock(&l->c->mu);
    rlock__renew_end(l->bg.renew);
    l->bg.renew = NULL;
    pthread_mutex_unlock(&l->c->mu);
    /* What it found (holds renewed, gone) is swept now. */
    due_by(l, rlock__now_ns());
}

static int clean_step(void *op, rlock__slot **slot)
{
    rlock__loop *l = op;
    int what;

    pthread_mutex_lock(&l->c->mu);
    what = rlock__cleanup_op_step(&l->bg.clean, slot);
    pthread_mutex_unlock(&l->c->mu);
    return what;
}

static void clean_done(rlock__task *t)
{
    rlock__loop *l = t->arg;

    l->bg.cleaning = 0;
    due_by(l, l->bg.clean_next);
}

static void task_init(rlock__loop *l, rlock__task *t, rlock__step_fn step,
                      void (*done)(rlock__task *))
{
    memset(t, 0, sizeof *t);
    t->owner = rlock__as_thread();
    t->step = step;
    t->op = l;
    t->done = done;
    t->arg = l;
}

/* ---- the subscriber's connection, made in steps ------------------------- */

/* The connection being made had its host's name resolved: the socket
 * takes the lookup's descriptor's number. */
static void sconn_renumbering(void *arg, rlock__conn *conn)
{
    rlock__loop_renumber(arg, rlock__conn_fd(conn));
}

/* Starts the connection to the subscriber's node of try l->bg.stry, or
 * gives up (mu held). 1: under way. */
static int sub_try(rlock__loop *l, int64_t *next)
{
    rlock_client *c = l->c;
    rlock__loop_bg *b = &l->bg;
    int rc;

    for (;;) {
        rlock__node *n = NULL;
        if ((rc = c->backend->sub_node(c, b->stry, 1, &n, &b->scall)) !=
            RLOCK_OK)
            break;
        if (!n) {
            rc = b->stry == 0
                     ? rlock__fail(&b->scall, RLOCK_ECONNECT, "no server of %s",
                                   c->where)
                     : (b->scall.code ? b->scall.code : RLOCK_ECONNECT);
            break;
        }
        b->stry++;
        if (rlock__node_connect_begin(n, &b->sconn, &b->swant, &b->scall) ==
            RLOCK_OK) {
            rlock__conn_on_renumber(b->sconn, sconn_renumbering, l);
            b->snode = n;
            b->suntil =
                rlock__call_until(&b->scall, c->opts.connect_timeout_ms);
            return 1;
        }
        rc = b->scall.code;
    }
    if (c->backend->sub_failed)
        c->backend->sub_failed(c, rc);
    c->bg->sub_connecting = 0;
    rlock__sub_unreached(c, rc, rlock__call_msg(&b->scall), next);
    return 0;
}

/* The connection being made settled or ran out of time (mu not held). */
static void sub_made(rlock__loop *l)
{
    rlock_client *c = l->c;
    rlock__loop_bg *b = &l->bg;
    rlock__conn *conn = b->sconn;
    int64_t next = 0;
    int rc;

    b->sconn = NULL;
    rlock__conn_on_renumber(conn, NULL, NULL);
    rlock__loop_unwatch(l, rlock__conn_fd(conn)); /* it may be closed */
    rc = rlock__node_connect_end(b->snode, conn, b->swant, &b->scall);
    pthread_mutex_lock(&c->mu);
    if (rc == RLOCK_OK) {
        c->bg->sub_connecting = 0;
        rlock__sub_attach(c, conn);
        rlock__sub_send(c);
    } else if (!sub_try(l, &next)) {
        due_by(l, next);
    }
    pthread_mutex_unlock(&c->mu);
}

/* ---- the step ----------------------------------------------------------- */

static void bg_step(rlock__loop *l)
{
    rlock_client *c = l->c;
    rlock__loop_bg *b = &l->bg;
    int64_t now = rlock__now_ns(), next = now + 1000 * RLOCK__NS_PER_MS;
    int renew = 0, clean = 0;

    b->at = 0;
    pthread_mutex_lock(&c->mu);
    rlock__watchdog_sweep(c, &next);
    if (!b->renew && (b->renew = rlock__renew_begin(c)) != NULL)
        renew = 1;
    if (!b->cleaning && c->bg->cleanups) {
        b->clean_next = now + 1000 * RLOCK__NS_PER_MS;
        rlock__cleanup_begin(c, &b->clean, &b->clean_next);
        b->cleaning = clean = 1;
    }
    switch (rlock__sub_need(c, &next, &b->scall)) {
    case RLOCK__SUB_CONNECT:
        c->bg->sub_connecting = 1;
        b->stry = 0;
        sub_try(l, &next);
        break;
    case RLOCK__SUB_SEND:
        rlock__sub_send(c);
        break;
    default:
        break;
    }
    rlock__watchdog_next(c, &next);
    pthread_mutex_unlock(&c->mu);
    due_by(l, next);
    if (renew) {
        task_init(l, &b->renew_task, renew_step, renew_done);
        rlock__loop_start(l, &b->renew_task);
    }
    if (clean) {
        task_init(l, &b->clean_task, clean_step, clean_done);
        rlock__loop_start(l, &b->clean_task);
    }
}

static void bg_pass(rlock__loop *l)
{
    rlock__loop_bg *b = &l->bg;

    if (b->sconn) {
        rlock__conn *conn = b->sconn;
        if (rlock__conn_buffered(conn))
            rlock__conn_io(conn, 0); /* bytes a TLS layer holds */
        if (rlock__conn_settled(conn, b->swant) ||
            rlock__conn_events(conn) == 0 || rlock__now_ns() >= b->suntil)
            sub_made(l);
    }
    if (b->at && rlock__now_ns() >= b->at)
        bg_step(l);
}

static void bg_deliver(rlock__loop *l)
{
    rlock_client *c = l->c;
    rlock_mutex *m;

    if (l->bg.delivering)
        return; /* a callback's own call: the outer pass delivers */
    l->bg.delivering = 1;
    pthread_mutex_lock(&c->mu);
    while (rlock__notify_take(c, &m))
        rlock__notify_call(c, m);
    pthread_mutex_unlock(&c->mu);
    l->bg.delivering = 0;
}

static int bg_ready(rlock__loop *l, int fd, short revents)
{
    rlock_client *c = l->c;
    int sfd;

    if (l->bg.sconn && rlock__conn_fd(l->bg.sconn) == fd) {
        rlock__conn_io(l->bg.sconn, revents);
        return 1;
    }
    if (rlock__sub_events(c, &sfd) == 0 || sfd != fd)
        return 0;
    rlock__sub_io(c, revents);
    /* A broken connection is made again by the step. */
    pthread_mutex_lock(&c->mu);
    if (!c->bg->sub_conn)
        due_by(l, rlock__now_ns());
    pthread_mutex_unlock(&c->mu);
    return 1;
}

static int bg_watch(rlock__loop *l, watched *fds, int64_t *due)
{
    rlock_client *c = l->c;
    int n = 0, fd;
    short ev;

    if (l->bg.at && (*due == 0 || l->bg.at < *due))
        *due = l->bg.at;
    if (l->bg.sconn) {
        if (*due == 0 || l->bg.suntil < *due)
            *due = l->bg.suntil;
        if ((ev = rlock__conn_events(l->bg.sconn)) != 0) {
            fds[n].fd = rlock__conn_fd(l->bg.sconn);
            fds[n++].events = ev;
        }
    }
    if ((ev = rlock__sub_events(c, &fd)) != 0) {
        fds[n].fd = fd;
        fds[n++].events = ev;
    }
    return n;
}

static void bg_detach(rlock__loop *l)
{
    rlock_client *c = l->c;

    if (l->bg.renew)
        rlock__loop_cancel(l, &l->bg.renew_task);
    if (l->bg.cleaning)
        rlock__loop_cancel(l, &l->bg.clean_task);
    if (l->bg.sconn) {
        rlock__loop_unwatch(l, rlock__conn_fd(l->bg.sconn));
        rlock__conn_close(l->bg.sconn);
        l->bg.sconn = NULL;
    }
    pthread_mutex_lock(&c->mu);
    c->bg->sub_connecting = 0;
    c->bg->drv = NULL;
    pthread_mutex_unlock(&c->mu);
}

static const rlock__loop_side bg_side = {bg_pass, bg_ready, bg_watch,
                                         bg_deliver};

rlock__loop *rlock__loop_new(rlock_client *c, const rlock__loop_hooks *hooks,
                             int *err)
{
    rlock__loop *l = rlock__loop_make(c, hooks, &bg_side);
    int rc = l ? bg_attach(l) : RLOCK_ENOMEM;

    if (rc != RLOCK_OK) {
        if (l)
            rlock__loop_unmake(l);
        if (err)
            *err = rc;
        return NULL;
    }
    rlock__loop_begin(l);
    if (err)
        *err = RLOCK_OK;
    return l;
}

void rlock__loop_free(rlock__loop *l)
{
    if (!l)
        return;
    rlock__loop_forget(l);
    bg_detach(l);
    rlock__call_end(&l->bg.scall);
    rlock__call_end(&l->bg.clean.call);
    rlock__loop_unmake(l);
}
