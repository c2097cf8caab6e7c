/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The mutual-exclusion checker (see checker.h): workers, the fenced
 * resource they share, and the verdict on their history.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "checker.h"

#define MAX_WORKERS 64

enum { NOT_TRIED = -1, REFUSED = 0, ACCEPTED = 1 };
enum { OPEN = 0, DONE = 1, KILLED = 2 };

typedef struct hold_rec {
    int worker;
    int state;
    uint64_t token;
    int64_t start_ns, end_ns;
    int read, write;     /* NOT_TRIED, REFUSED or ACCEPTED */
    int unlock_rc;
    int lost;            /* unlock said RLOCK_ELOST, or on_lost fired */
    int lost_reports;    /* on_lost calls for this hold */
} hold_rec;

typedef struct op_rec {
    long hold;
    uint64_t token;
    char write;
    char accepted;
} op_rec;

typedef struct worker_rec {
    pid_t pid;
    int stall_req;       /* parent -> worker: stop after the next read */
    int stalled;         /* worker -> parent: stopped there */
    long current;        /* hold in progress, -1 if none */
    long stray_reports;  /* on_lost with no hold in progress */
    long failed_acquires;
    int finished;        /* all its holds done */
} worker_rec;

/* Everything the processes share, followed by the hold and op arrays. */
typedef struct shared {
    pthread_mutex_t mu; /* the resource's: process-shared, robust */
    long value;
    uint64_t max_token;
    int no_fence;
    long nops, max_ops;
    long nholds, max_holds;
    worker_rec w[MAX_WORKERS];
} shared;

struct rt_check {
    rt_check_opts o;
    shared *sh;
    hold_rec *holds;
    op_rec *ops;
    size_t map_len;
};

static int64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void sleep_us(int64_t us)
{
    struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

void rt_check_opts_init(rt_check_opts *o)
{
    memset(o, 0, sizeof *o);
    o->name = "checker";
    o->workers = 4;
    o->iterations = 50;
    o->hold_us = 200;
    o->wait_ms = -1;
    o->deadline_ms = 60000;
    rlock_client_opts_init(&o->client);
}

/* ---- the resource ---------------------------------------------------- */

static void resource_lock(shared *sh)
{
    /* A worker killed inside leaves the mutex to be recovered: the
     * resource's state is only ever changed by single stores. */
    if (pthread_mutex_lock(&sh->mu) == EOWNERDEAD)
        pthread_mutex_consistent(&sh->mu);
}

/* One fenced operation: refused if token is lower than one seen before. */
static int resource_op(rt_check *chk, long hold, uint64_t token, int write,
                       long *value)
{
    shared *sh = chk->sh;
    int ok;

    resource_lock(sh);
    ok = sh->no_fence || token >= sh->max_token;
    if (ok) {
        if (token > sh->max_token)
            sh->max_token = token;
        if (write)
            sh->value = *value;
        else
            *value = sh->value;
    }
    if (sh->nops < sh->max_ops) {
        op_rec *op = &chk->ops[sh->nops++];
        op->hold = hold;
        op->token = token;
        op->write = (char)write;
        op->accepted = (char)ok;
    }
    pthread_mutex_unlock(&sh->mu);
    return ok ? ACCEPTED : REFUSED;
}

void rt_check_resource(rt_check *chk, long *counter, uint64_t *max_token)
{
    resource_lock(chk->sh);
    *counter = chk->sh->value;
    *max_token = chk->sh->max_token;
    pthread_mutex_unlock(&chk->sh->mu);
}

/* ---- workers --------------------------------------------------------- */

/* What on_lost needs to charge a report to its hold. Each hold uses a
 * mutex handle of its own, freed after the hold: rlock_mutex_free waits
 * for a callback under way, so a report can never reach the next hold. */
typedef struct hold_ctx {
    rt_check *chk;
    worker_rec *w;
    long hold; /* -1 until the lock is held */
} hold_ctx;

static void on_lost(rlock_mutex *m, void *arg)
{
    hold_ctx *x = arg;
    long hi = __atomic_load_n(&x->hold, __ATOMIC_SEQ_CST);

    (void)m;
    if (hi < 0) {
        __atomic_add_fetch(&x->w->stray_reports, 1, __ATOMIC_SEQ_CST);
        return;
    }
    __atomic_add_fetch(&x->chk->holds[hi].lost_reports, 1, __ATOMIC_SEQ_CST);
    __atomic_store_n(&x->chk->holds[hi].lost, 1, __ATOMIC_SEQ_CST);
}

static int acquire(const rt_check_opts *o, rlock_mutex *m)
{
    if (o->unsafe)
        return RLOCK_OK;
    if (o->wait_ms < 0)
        return rlock_mutex_lock(m);
    return rlock_mutex_timedlock(m, o->wait_ms);
}

/* Unlocks until the answer is definite: released, or lost. */
static int release(const rt_check_opts *o, rlock_mutex *m)
{
    int64_t until = now_ns() + (int64_t)10000 * 1000000;
    int rc;

    if (o->unsafe)
        return RLOCK_OK;
    for (;;) {
        rc = rlock_mutex_unlock(m);
        if ((rc != RLOCK_ETIMEDOUT && rc != RLOCK_EIO) || now_ns() > until)
            return rc;
        sleep_us(50000);
    }
}

static int worker_main(rt_check *chk, int id)
{
    const rt_check_opts *o = &chk->o;
    worker_rec *w = &chk->sh->w[id];
    rlock_client *c = NULL;
    rlock_mutex_opts mo;
    int64_t deadline = now_ns() + o->deadline_ms * 1000000;
    int done = 0, err = 0;

    /* A worker must not outlive a checker that failed or was killed. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() == 1)
        return 2;
    while (!c) {
        c = rlock_client_open(o->url, &o->client, &err);
        if (!c && now_ns() > deadline) {
            fprintf(stderr, "checker worker %d: %s: %s\n", id,
                    rlock_strerror(err), rlock_client_errmsg(NULL));
            return 2;
        }
        if (!c)
            sleep_us(50000);
    }
    rlock_mutex_opts_init(&mo);
    mo.lease_ms = o->lease_ms;
    mo.layout = o->layout;
    mo.on_lost = on_lost;
    while (done < o->iterations && now_ns() < deadline) {
        hold_ctx x = {chk, w, -1};
        long hi, value = 0;
        hold_rec *h;
        rlock_mutex *m;
        int rc;

        mo.on_lost_arg = &x;
        m = rlock_mutex_new(c, o->name, &mo, &err);
        if (!m) {
            fprintf(stderr, "checker worker %d: %s\n", id,
                    rlock_strerror(err));
            return 2;
        }
        rc = acquire(o, m);
        if (rc != RLOCK_OK) {
            w->failed_acquires++;
            rlock_mutex_free(m);
            sleep_us(10000);
            continue;
        }
        hi = __atomic_fetch_add(&chk->sh->nholds, 1, __ATOMIC_SEQ_CST);
        if (hi >= chk->sh->max_holds) {
            release(o, m);
            rlock_mutex_free(m);
            break;
        }
        h = &chk->holds[hi];
        h->worker = id;
        h->token = o->unsafe ? 0 : rlock_mutex_token(m);
        if (o->reverse_tokens)
            h->token = ((uint64_t)1 << 62) - h->token;
        h->read = h->write = NOT_TRIED;
        __atomic_store_n(&x.hold, hi, __ATOMIC_SEQ_CST);
        __atomic_store_n(&w->current, hi, __ATOMIC_SEQ_CST);
        __atomic_store_n(&h->start_ns, now_ns(), __ATOMIC_SEQ_CST);

        /* The deliberately non-atomic read-modify-write. */
        h->read = resource_op(chk, hi, h->token, 0, &value);
        if (__atomic_load_n(&w->stall_req, __ATOMIC_SEQ_CST)) {
            __atomic_store_n(&w->stalled, 1, __ATOMIC_SEQ_CST);
            while (__atomic_load_n(&w->stall_req, __ATOMIC_SEQ_CST))
                sleep_us(1000);
            __atomic_store_n(&w->stalled, 0, __ATOMIC_SEQ_CST);
        }
        if (o->hold_us > 0)
            sleep_us(o->hold_us);
        if (h->read == ACCEPTED) {
            value++;
            h->write = resource_op(chk, hi, h->token, 1, &value);
        }
        h->end_ns = now_ns();

        h->unlock_rc = release(o, m);
        if (h->unlock_rc == RLOCK_ELOST)
            __atomic_store_n(&h->lost, 1, __ATOMIC_SEQ_CST);
        rlock_mutex_free(m); /* after any report of this hold */
        __atomic_store_n(&w->current, -1, __ATOMIC_SEQ_CST);
        __atomic_store_n(&h->state, DONE, __ATOMIC_SEQ_CST);
        done++;
    }
    w->finished = done == o->iterations;
    rlock_client_close(c);
    return 0;
}

/* ---- fault hooks ----------------------------------------------------- */

pid_t rt_check_stall(rt_check *chk, int w, int64_t timeout_ms)
{
    worker_rec *wr = &chk->sh->w[w];
    int64_t until = now_ns() + timeout_ms * 1000000;

    __atomic_store_n(&wr->stall_req, 1, __ATOMIC_SEQ_CST);
    while (!__atomic_load_n(&wr->stalled, __ATOMIC_SEQ_CST)) {
        if (now_ns() > until)
            return -1;
        sleep_us(1000);
    }
    return wr->pid;
}

void rt_check_release(rt_check *chk, int w)
{
    __atomic_store_n(&chk->sh->w[w].stall_req, 0, __ATOMIC_SEQ_CST);
}

int rt_check_stall_next(rt_check *chk, int except, int64_t timeout_ms)
{
    int64_t until = now_ns() + timeout_ms * 1000000;
    int i, found = -1;

    for (i = 0; i < chk->o.workers; i++)
        if (i != except)
            __atomic_store_n(&chk->sh->w[i].stall_req, 1, __ATOMIC_SEQ_CST);
    while (found < 0 && now_ns() <= until) {
        for (i = 0; i < chk->o.workers && found < 0; i++)
            if (i != except &&
                __atomic_load_n(&chk->sh->w[i].stalled, __ATOMIC_SEQ_CST))
                found = i;
        if (found < 0)
            sleep_us(1000);
    }
    /* Only one holds the lock: the others cannot stall meanwhile. */
    for (i = 0; i < chk->o.workers; i++)
        if (i != except && i != found)
            rt_check_release(chk, i);
    return found;
}

int rt_check_current_lost(rt_check *chk, int w)
{
    long cur = __atomic_load_n(&chk->sh->w[w].current, __ATOMIC_SEQ_CST);

    return cur >= 0 && __atomic_load_n(&chk->holds[cur].lost, __ATOMIC_SEQ_CST);
}

int rt_check_wait_idle(rt_check *chk, int w, int64_t timeout_ms)
{
    int64_t until = now_ns() + timeout_ms * 1000000;

    while (__atomic_load_n(&chk->sh->w[w].current, __ATOMIC_SEQ_CST) >= 0) {
        if (now_ns() > until)
            return -1;
        sleep_us(1000);
    }
    return 0;
}

uint64_t rt_check_stalled_token(rt_check *chk, int w)
{
    long cur = __atomic_load_n(&chk->sh->w[w].current, __ATOMIC_SEQ_CST);

    if (!__atomic_load_n(&chk->sh->w[w].stalled, __ATOMIC_SEQ_CST) || cur < 0)
        return 0;
    return chk->holds[cur].token;
}

long rt_check_holds(rt_check *chk)
{
    long n = __atomic_load_n(&chk->sh->nholds, __ATOMIC_SEQ_CST);

    return n < chk->sh->max_holds ? n : chk->sh->max_holds;
}

int64_t rt_check_wait_newer_hold(rt_check *chk, uint64_t token,
                                 int64_t timeout_ms)
{
    int64_t until = now_ns() + timeout_ms * 1000000;

    for (;;) {
        long i, n = rt_check_holds(chk);
        for (i = 0; i < n; i++) {
            int64_t start =
                __atomic_load_n(&chk->holds[i].start_ns, __ATOMIC_SEQ_CST);
            if (start > 0 && chk->holds[i].token > token)
                return start / 1000000;
        }
        if (now_ns() > until)
            return -1;
        sleep_us(1000);
    }
}

/* ---- the verdict ----------------------------------------------------- */

static const hold_rec *sort_base;

static int by_start(const void *a, const void *b)
{
    int64_t x = sort_base[*(const long *)a].start_ns;
    int64_t y = sort_base[*(const long *)b].start_ns;

    return (x > y) - (x < y);
}

static void say(const char *what, const hold_rec *a, const hold_rec *b)
{
    fprintf(stderr,
            "checker: %s: worker %d token %llu [%lld, %lld] and worker %d "
            "token %llu [%lld, %lld] (us)\n",
            what, a->worker, (unsigned long long)a->token,
            (long long)(a->start_ns / 1000), (long long)(a->end_ns / 1000),
            b->worker, (unsigned long long)b->token,
            (long long)(b->start_ns / 1000), (long long)(b->end_ns / 1000));
}

static void verify(rt_check *chk, rt_check_result *r)
{
    shared *sh = chk->sh;
    long n = rt_check_holds(chk), i, k = 0, max_hold = -1, *idx;
    uint64_t max_seen = 0;
    int64_t max_end = 0;
    long max_end_at = -1;

    /* The resource's log, re-checked on its own: a check inside the
     * resource can have bugs too (and --no-fence turns it off). */
    r->counter = sh->value;
    for (i = 0; i < sh->nops; i++) {
        const op_rec *op = &chk->ops[i];
        if (!op->accepted) {
            r->stale_rejected++;
            continue;
        }
        if (op->write)
            r->accepted_writes++;
        if (op->token < max_seen && op->write) {
            if (r->stale_accepted++ < 5)
                fprintf(stderr, "checker: stale write accepted: token %llu "
                                "after %llu\n",
                        (unsigned long long)op->token,
                        (unsigned long long)max_seen);
        } else if (op->token < max_seen ||
                   (op->token == max_seen && op->hold != max_hold &&
                    max_hold >= 0)) {
            /* Another hold's token, not above all earlier holds'. */
            if (r->token_order++ < 5)
                fprintf(stderr, "checker: token %llu accepted after %llu\n",
                        (unsigned long long)op->token,
                        (unsigned long long)max_seen);
        }
        if (op->token > max_seen || max_hold < 0) {
            max_seen = op->token;
            max_hold = op->hold;
        }
    }
    r->counter_mismatch = labs(r->counter - r->accepted_writes);

    idx = calloc((size_t)(n > 0 ? n : 1), sizeof *idx);
    if (!idx)
        abort();
    for (i = 0; i < n; i++) {
        hold_rec *h = &chk->holds[i];
        if (h->start_ns == 0)
            continue; /* claimed by a worker killed before it began */
        r->holds++;
        if (h->state == OPEN) {
            r->killed++;
            continue;
        }
        if (h->lost_reports > 1)
            r->stray_reports += h->lost_reports - 1;
        r->lost_reports += h->lost_reports;
        if (h->lost) {
            r->lost++;
        } else if (h->read == REFUSED || h->write == REFUSED) {
            r->unreported++;
            fprintf(stderr, "checker: worker %d token %llu was refused by "
                            "the resource but never told it lost the lock\n",
                    h->worker, (unsigned long long)h->token);
        } else {
            if (h->unlock_rc == RLOCK_OK)
                r->clean++;
            idx[k++] = i;
        }
    }
    /* Unreported holds, in the order they began: no overlap, and tokens
     * that grow. */
    sort_base = chk->holds;
    qsort(idx, (size_t)k, sizeof *idx, by_start);
    for (i = 0; i < k; i++) {
        const hold_rec *h = &chk->holds[idx[i]];
        if (max_end_at >= 0 && h->start_ns <= max_end) {
            if (r->overlaps++ < 5)
                say("overlap", &chk->holds[max_end_at], h);
        } else if (max_end_at >= 0 &&
                   (h->start_ns - max_end) / 1000000 > r->longest_handover_ms) {
            r->longest_handover_ms = (h->start_ns - max_end) / 1000000;
        }
        if (i > 0 && h->token <= chk->holds[idx[i - 1]].token) {
            if (r->token_order++ < 5)
                say("token not increasing", &chk->holds[idx[i - 1]], h);
        }
        if (h->end_ns > max_end) {
            max_end = h->end_ns;
            max_end_at = idx[i];
        }
    }
    free(idx);
    for (i = 0; i < chk->o.workers; i++) {
        r->stray_reports += sh->w[i].stray_reports;
        r->failed_acquires += sh->w[i].failed_acquires;
    }
}

static int violations(const rt_check_result *r)
{
    return r->counter_mismatch || r->overlaps || r->token_order ||
           r->stale_accepted || r->unreported || r->stray_reports ||
           r->incomplete;
}

void rt_check_print(FILE *f, const rt_check_result *r)
{
    fprintf(f,
            "checker: holds %ld (clean %ld, lost %ld, killed %ld), failed "
            "acquisitions %ld, counter %ld / accepted writes %ld, stale "
            "refused %ld, longest hand-over %lld ms | overlaps %ld, token "
            "order %ld, stale accepted %ld, unreported losses %ld, stray "
            "reports %ld, counter mismatch %ld, incomplete %ld -> %s\n",
            r->holds, r->clean, r->lost, r->killed, r->failed_acquires,
            r->counter, r->accepted_writes, r->stale_rejected,
            (long long)r->longest_handover_ms, r->overlaps, r->token_order,
            r->stale_accepted, r->unreported, r->stray_reports,
            r->counter_mismatch, r->incomplete,
            violations(r) ? "VIOLATION" : "OK");
    fflush(f);
}

/* ---- the run --------------------------------------------------------- */

static int setup(rt_check *chk, const rt_check_opts *o)
{
    pthread_mutexattr_t ma;
    size_t holds = (size_t)o->workers * (size_t)o->iterations;
    char *base;

    memset(chk, 0, sizeof *chk);
    chk->o = *o;
    chk->map_len = sizeof(shared) + holds * sizeof(hold_rec) +
                   2 * holds * sizeof(op_rec);
    base = mmap(NULL, chk->map_len, PROT_READ | PROT_WRITE,
                MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED)
        return -1;
    chk->sh = (shared *)(void *)base;
    chk->holds = (hold_rec *)(void *)(base + sizeof(shared));
    chk->ops = (op_rec *)(void *)(base + sizeof(shared) +
                                  holds * sizeof(hold_rec));
    chk->sh->max_holds = (long)holds;
    chk->sh->max_ops = 2 * (long)holds;
    chk->sh->no_fence = o->no_fence;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&chk->sh->mu, &ma);
    pthread_mutexattr_destroy(&ma);
    return 0;
}

int rt_check_run(const rt_check_opts *o, rt_check_result *res)
{
    rt_check chk;
    rt_check_result r;
    int64_t give_up;
    int i, live;
    char reaped[MAX_WORKERS] = {0};

    memset(&r, 0, sizeof r);
    if (o->workers < 1 || o->workers > MAX_WORKERS || o->iterations < 1 ||
        !o->url || setup(&chk, o) != 0) {
        fprintf(stderr, "checker: bad options\n");
        return 1;
    }
    for (i = 0; i < o->workers; i++) {
        pid_t pid;

        chk.sh->w[i].current = -1;
        pid = fork();
        if (pid == 0)
            _exit(worker_main(&chk, i));
        if (pid < 0) {
            /* Stop the ones started; the run cannot be judged. */
            fprintf(stderr, "checker: fork: %s\n", strerror(errno));
            while (--i >= 0) {
                kill(chk.sh->w[i].pid, SIGKILL);
                waitpid(chk.sh->w[i].pid, NULL, 0);
            }
            munmap(chk.sh, chk.map_len);
            return 1;
        }
        chk.sh->w[i].pid = pid;
    }
    if (o->during)
        o->during(&chk, o->arg);
    /* Bounded: the workers' own deadline, and a grace period after it. */
    give_up = now_ns() + (o->deadline_ms + 30000) * 1000000;
    for (live = o->workers; live > 0;) {
        int st;
        pid_t pid = waitpid(-1, &st, WNOHANG);
        if (pid < 0 && errno == ECHILD)
            break; /* none left, whatever the count says */
        if (pid <= 0) {
            if (now_ns() > give_up) {
                for (i = 0; i < o->workers; i++)
                    if (!reaped[i])
                        kill(chk.sh->w[i].pid, SIGKILL);
                give_up = INT64_MAX;
            }
            sleep_us(5000);
            continue;
        }
        for (i = 0; i < o->workers; i++) {
            worker_rec *w = &chk.sh->w[i];
            if (w->pid != pid)
                continue;
            reaped[i] = 1;
            live--;
            if (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL &&
                give_up != INT64_MAX)
                break; /* killed on purpose: its open hold is "killed" */
            if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || !w->finished) {
                r.incomplete++;
                fprintf(stderr, "checker: worker %d did not finish (%s %d)\n",
                        i, WIFEXITED(st) ? "exit" : "signal",
                        WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
            }
        }
    }
    verify(&chk, &r);
    munmap(chk.sh, chk.map_len);
    if (res)
        *res = r;
    return violations(&r) ? 1 : 0;
}
