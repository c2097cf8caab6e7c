/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The parent's side of a run: the proxy's policy (how long each chunk
 * waits, and which connection drops), the injector that carries out the
 * plan's faults at their times, and the monitor that reads every lock's
 * state from the server itself every 25 ms (rlock_mutex_status, through a
 * client of its own that goes around the proxy).
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include "../harness/proxy.h"
#include "../harness/server.h"
#include "explore.h"

/* Connections whose generators are kept apart (more share one slot). */
#define CONNS 1024

struct ex_run {
    const ex_plan *p;
    ex_log *l;
    rt_proxy *proxy;
    rt_server *server;
    char direct[256];
    int64_t t_start;
    atomic_int regime;
    atomic_int stop_faults, stop_monitor;
    atomic_llong held_at; /* the monitor last saw a lock held */
    pthread_t injector, monitor;
    ex_rng conn_rng[CONNS][2];
    long conn_no[CONNS];
    /* --monitor: the server's own log of commands (a debugging aid). */
    FILE *mon_out;
    pthread_t mon_thread;
    redisContext *mon_ctx;
    int64_t real_to_mono; /* ns to add to a real time for the monotonic */
};

/* Copies MONITOR's lines to the file, each led by its time on the
 * monotonic clock in ms from the run's start. */
static void *server_log_main(void *arg)
{
    ex_run *r = arg;
    redisReply *rep;

    while (redisGetReply(r->mon_ctx, (void **)&rep) == REDIS_OK && rep) {
        if (rep->type == REDIS_REPLY_STATUS && rep->str) {
            double real = atof(rep->str);
            int64_t mono = (int64_t)(real * 1e9) + r->real_to_mono;
            fprintf(r->mon_out, "%9.3f %s\n", (double)(mono - r->t_start) / 1e6,
                    rep->str);
        }
        freeReplyObject(rep);
    }
    return NULL;
}

void ex_run_server_log(ex_run *r, FILE *out)
{
    struct timespec rt, mt;
    redisReply *rep;

    r->mon_ctx = redisConnect("127.0.0.1", rt_server_port(r->server));
    if (!r->mon_ctx || r->mon_ctx->err)
        return;
    rep = redisCommand(r->mon_ctx, "MONITOR");
    if (rep)
        freeReplyObject(rep);
    clock_gettime(CLOCK_REALTIME, &rt);
    clock_gettime(CLOCK_MONOTONIC, &mt);
    r->real_to_mono = ((int64_t)mt.tv_sec * 1000000000 + mt.tv_nsec) -
                      ((int64_t)rt.tv_sec * 1000000000 + rt.tv_nsec);
    r->mon_out = out;
    pthread_create(&r->mon_thread, NULL, server_log_main, r);
}

/* ---- the proxy's policy ------------------------------------------------- */

static int64_t policy(void *arg, long conn_no, int dir, size_t len)
{
    ex_run *r = arg;
    const ex_plan *p = r->p;
    int d = dir == RT_PROXY_TO_SERVER ? 0 : 1, slot = (int)(conn_no % CONNS);
    ex_rng *g = &r->conn_rng[slot][d];

    (void)len;
    if (r->conn_no[slot] != conn_no + 1) {
        /* A new connection in this slot: its own generators. */
        r->conn_no[slot] = conn_no + 1;
        ex_rng_init(&r->conn_rng[slot][0], p->seed, 1000 + (uint64_t)conn_no,
                    0);
        ex_rng_init(&r->conn_rng[slot][1], p->seed, 1000 + (uint64_t)conn_no,
                    1);
    }
    switch (atomic_load(&r->regime)) {
    case R_JITTER:
        return ex_range(g, 0, 20);
    case R_SLOW:
        return ex_range(g, 0, p->slow_ms);
    case R_SKEW:
        return (conn_no % 2 ? p->slow_ms : 0) + ex_range(g, 0, 5);
    case R_REPLIES:
        return d == 1 ? ex_range(g, 0, p->slow_ms) : 0;
    case R_LOSSY:
        if (ex_range(g, 1, p->drop_in) == 1)
            return RT_PROXY_CUT;
        return ex_range(g, 0, 20);
    default:
        return 0;
    }
}

/* ---- faults ------------------------------------------------------------- */

static void note_fault(ex_run *r, int kind, int target, int64_t t0, int64_t t1)
{
    ex_event e;

    memset(&e, 0, sizeof e);
    e.kind = EV_FAULT;
    e.worker = -1;
    e.a = kind;
    e.b = target;
    e.t0 = t0;
    e.t1 = t1;
    ex_log_add(r->l, &e);
}

static void sleep_ns(int64_t ns)
{
    struct timespec ts;

    if (ns <= 0)
        return;
    ts.tv_sec = ns / 1000000000;
    ts.tv_nsec = (long)(ns % 1000000000);
    nanosleep(&ts, NULL);
}

/* A command to the server on a connection of its own, answered within
 * 300 ms or not at all (the server may be paused). */
static void server_cmd(ex_run *r, const char *cmd)
{
    struct timeval tv = {0, 300000};
    redisContext *c =
        redisConnectWithTimeout("127.0.0.1", rt_server_port(r->server), tv);
    redisReply *rep;

    if (!c || c->err) {
        if (c)
            redisFree(c);
        return;
    }
    redisSetTimeout(c, tv);
    rep = redisCommand(c, cmd);
    if (rep)
        freeReplyObject(rep);
    redisFree(c);
}

/* An operator takes a lock from whoever holds it, through the public API
 * on a client of its own that goes around the proxy. It looks for the
 * order that tests the most: one lock of a process that holds another,
 * whose loss (and a callback that stalls on it) must hold up nothing of
 * the other's; failing that within a second, any lock held (from name
 * first on); failing that, none. It runs on a thread of its own, so that
 * the injector keeps the plan's other times, and logs what it took: from
 * the start of the forced release, which is when the lock may go, not of
 * the look for one (up to a second before). */
typedef struct forcer {
    ex_run *r;
    int first;
    int64_t t0;
    pthread_t th;
} forcer;

static void *force_main(void *arg)
{
    forcer *f = arg;
    const ex_plan *p = f->r->p;
    rlock_client_opts co;
    rlock_client *c;
    rlock_mutex *m[EX_NAMES_MAX] = {NULL};
    int64_t until = ex_now_ns() + 1000 * 1000000LL;
    int k, j, o, err, pick = -1;

    rlock_client_opts_init(&co);
    co.command_timeout_ms = 300;
    co.connect_timeout_ms = 300;
    if (!(c = rlock_client_open(f->r->direct, &co, &err)))
        goto done;
    for (k = 0; k < p->names; k++) {
        rlock_mutex_opts mo;
        char key[32];
        rlock_mutex_opts_init(&mo);
        mo.layout = p->layout;
        snprintf(key, sizeof key, "ex%d", k);
        if (!(m[k] = rlock_mutex_new(c, key, &mo, &err)))
            goto done;
    }
    while (!atomic_load(&f->r->stop_faults)) {
        rlock_status st[EX_NAMES_MAX];
        int held[EX_NAMES_MAX], shared = -1, any = -1;
        for (k = 0; k < p->names; k++)
            held[k] =
                rlock_mutex_status(m[k], &st[k]) == RLOCK_OK && st[k].held;
        for (j = 0; j < p->names; j++) {
            k = (f->first + j) % p->names;
            if (!held[k])
                continue;
            if (any < 0)
                any = k;
            for (o = 0; o < p->names && shared < 0; o++)
                if (o != k && held[o] && st[k].holder_pid != 0 &&
                    st[o].holder_pid == st[k].holder_pid)
                    shared = k;
        }
        pick = shared >= 0 ? shared : ex_now_ns() >= until ? any : -1;
        if (pick >= 0 || ex_now_ns() >= until)
            break;
        sleep_ns(25 * 1000000LL);
    }
    if (pick >= 0) {
        f->t0 = ex_now_ns();
        (void)rlock_mutex_force_unlock(m[pick], NULL);
    }
done:
    for (k = 0; k < p->names; k++)
        rlock_mutex_free(m[k]);
    rlock_client_close(c);
    note_fault(f->r, F_FORCE_UNLOCK, pick, f->t0, ex_now_ns());
    return NULL;
}

/* What a fault with a length undoes when it ends. */
typedef struct active {
    int kind, a;
    int64_t t0, end;
} active;

static void undo(ex_run *r, active *f)
{
    switch (f->kind) {
    case F_STALL:
        rt_proxy_blackhole(r->proxy, 0);
        break;
    case F_PAUSE_SERVER:
        rt_server_resume(r->server);
        break;
    case F_PAUSE_WORKER:
        kill(r->l->pid[f->a], SIGCONT);
        break;
    case F_CLIENT_PAUSE:
        server_cmd(r, "CLIENT UNPAUSE");
        break;
    default:
        break;
    }
    note_fault(r, f->kind, f->a, f->t0, ex_now_ns());
}

static void *injector_main(void *arg)
{
    ex_run *r = arg;
    const ex_plan *p = r->p;
    active act[EX_FAULTS_MAX];
    forcer force[EX_FAULTS_MAX];
    int nact = 0, next = 0, nforce = 0, i;

    while (!atomic_load(&r->stop_faults)) {
        int64_t now = ex_now_ns(), due = now + 20 * 1000000LL;

        /* Faults whose time is over end first. */
        for (i = 0; i < nact;) {
            if (act[i].end <= now) {
                undo(r, &act[i]);
                act[i] = act[--nact];
            } else {
                if (act[i].end < due)
                    due = act[i].end;
                i++;
            }
        }
        while (next < p->nfaults &&
               r->t_start + p->faults[next].at_ms * 1000000LL <= now) {
            const ex_fault *f = &p->faults[next++];
            active a;
            a.kind = f->kind;
            a.a = f->a;
            a.t0 = ex_now_ns();
            a.end = a.t0 + f->len_ms * 1000000LL;
            switch (f->kind) {
            case F_REGIME:
                atomic_store(&r->regime, f->a);
                note_fault(r, f->kind, f->a, a.t0, a.t0);
                continue;
            case F_STALL:
                rt_proxy_blackhole(r->proxy, f->a);
                break;
            case F_CUT:
                rt_proxy_cut_all(r->proxy);
                note_fault(r, f->kind, 0, a.t0, a.t0);
                continue;
            case F_PAUSE_SERVER:
                rt_server_pause(r->server);
                break;
            case F_RESTART:
                rt_server_restart(r->server);
                note_fault(r, f->kind, 0, a.t0, ex_now_ns());
                continue;
            case F_KILL_PUBSUB:
                server_cmd(r, "CLIENT KILL TYPE pubsub");
                note_fault(r, f->kind, 0, a.t0, ex_now_ns());
                continue;
            case F_PAUSE_WORKER:
                if (atomic_load(&r->l->done[f->a]))
                    continue;
                kill(r->l->pid[f->a], SIGSTOP);
                break;
            case F_KILL_WORKER:
                kill(r->l->pid[f->a], SIGKILL);
                note_fault(r, f->kind, f->a, a.t0, a.t0);
                continue;
            case F_FORCE_UNLOCK:
                if (nforce < EX_FAULTS_MAX) {
                    forcer *fo = &force[nforce];
                    fo->r = r;
                    fo->first = f->a;
                    fo->t0 = a.t0;
                    if (pthread_create(&fo->th, NULL, force_main, fo) == 0)
                        nforce++;
                }
                continue;
            case F_CLIENT_PAUSE: {
                char cmd[64];
                snprintf(cmd, sizeof cmd, "CLIENT PAUSE %lld ALL",
                         (long long)f->len_ms);
                server_cmd(r, cmd);
                break;
            }
            default:
                continue;
            }
            act[nact++] = a;
        }
        if (next < p->nfaults &&
            r->t_start + p->faults[next].at_ms * 1000000LL < due)
            due = r->t_start + p->faults[next].at_ms * 1000000LL;
        sleep_ns(due - ex_now_ns());
    }
    for (i = 0; i < nact; i++)
        undo(r, &act[i]);
    for (i = 0; i < nforce; i++)
        pthread_join(force[i].th, NULL);
    atomic_store(&r->regime, R_CALM);
    return NULL;
}

/* ---- the monitor -------------------------------------------------------- */

static void *monitor_main(void *arg)
{
    ex_run *r = arg;
    const ex_plan *p = r->p;
    rlock_client_opts co;
    rlock_client *c = NULL;
    rlock_mutex *m[EX_NAMES_MAX] = {NULL};
    int i, err;

    rlock_client_opts_init(&co);
    co.command_timeout_ms = 200;
    co.connect_timeout_ms = 200;
    while (!atomic_load(&r->stop_monitor)) {
        if (!c) {
            rlock_mutex_opts mo;
            if (!(c = rlock_client_open(r->direct, &co, &err))) {
                sleep_ns(25 * 1000000LL);
                continue;
            }
            rlock_mutex_opts_init(&mo);
            mo.layout = p->layout;
            for (i = 0; i < p->names; i++) {
                char key[32];
                snprintf(key, sizeof key, "ex%d", i);
                m[i] = rlock_mutex_new(c, key, &mo, &err);
            }
        }
        for (i = 0; i < p->names; i++) {
            rlock_status st;
            ex_event e;
            memset(&e, 0, sizeof e);
            e.kind = EV_STATUS;
            e.worker = -1;
            e.name = i;
            e.t0 = ex_now_ns();
            e.rc = m[i] ? rlock_mutex_status(m[i], &st) : RLOCK_ENOMEM;
            e.t1 = ex_now_ns();
            if (e.rc == RLOCK_OK) {
                if (st.held)
                    atomic_store(&r->held_at, (long long)e.t1);
                e.a = st.held;
                e.b = st.holder_pid;
                e.token = (uint64_t)st.lease_ms;
            }
            ex_log_add(r->l, &e);
        }
        sleep_ns(25 * 1000000LL);
    }
    for (i = 0; i < p->names; i++)
        rlock_mutex_free(m[i]);
    rlock_client_close(c);
    return NULL;
}

ex_run *ex_run_start(const ex_plan *p, ex_log *l, void *proxy, void *server,
                     const char *direct_url)
{
    ex_run *r = calloc(1, sizeof *r);

    if (!r)
        return NULL;
    r->p = p;
    r->l = l;
    r->proxy = proxy;
    r->server = server;
    snprintf(r->direct, sizeof r->direct, "%s", direct_url);
    r->t_start = ex_now_ns();
    atomic_init(&r->regime, R_CALM);
    rt_proxy_set_policy(r->proxy, policy, r);
    pthread_create(&r->injector, NULL, injector_main, r);
    pthread_create(&r->monitor, NULL, monitor_main, r);
    return r;
}

void ex_run_end_faults(ex_run *r)
{
    atomic_store(&r->stop_faults, 1);
    pthread_join(r->injector, NULL);
}

int64_t ex_run_held_at(ex_run *r)
{
    return (int64_t)atomic_load(&r->held_at);
}

void ex_run_stop(ex_run *r)
{
    atomic_store(&r->stop_monitor, 1);
    pthread_join(r->monitor, NULL);
    if (r->mon_out) {
        shutdown(r->mon_ctx->fd, SHUT_RDWR);
        pthread_join(r->mon_thread, NULL);
        redisFree(r->mon_ctx);
    }
    rt_proxy_set_policy(r->proxy, NULL, NULL);
    free(r);
}
