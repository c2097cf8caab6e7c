/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The event loop's driver: tasks (engine ops) advanced by readiness and
 * time, and the watch set and timer told to the loop when they change.
 * What a callback costs does not grow with the tasks in flight: a
 * readiness looks at the task whose connection it is, the timer at the
 * tasks whose time came (a heap), a ring at the sleeping ones.
 */
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/handles.h"
#include "loop/loop.h"
#include "loop/loop_impl.h"
#include "util/clock.h"

rlock__loop *rlock__loop_make(rlock_client *c, const rlock__loop_hooks *hooks,
                              const rlock__loop_side *side)
{
    rlock__loop *l = calloc(1, sizeof *l);

    if (!l || pipe2(l->ring, O_NONBLOCK | O_CLOEXEC) != 0) {
        free(l);
        return NULL;
    }
    l->c = c;
    l->hooks = *hooks;
    l->side = side;
    l->wring.fd = l->ring[1];
    return l;
}

void rlock__loop_begin(rlock__loop *l)
{
    l->hooks.watch(l->hooks.arg, l->ring[0], POLLIN);
}

static void forget_conn(rlock__loop *l, int fd);

void rlock__loop_forget(rlock__loop *l)
{
    int i;

    /* Unwatched before anything is closed. */
    for (i = 0; i < l->nset; i++) {
        l->hooks.watch(l->hooks.arg, l->set[i].fd, 0);
        forget_conn(l, l->set[i].fd);
        if (l->set[i].fd >= 0 && l->set[i].fd < l->capfd)
            l->fds[l->set[i].fd].now = 0;
    }
    l->nset = 0;
    l->nside = 0;
    l->forgotten = 1;
}

void rlock__loop_unmake(rlock__loop *l)
{
    l->hooks.watch(l->hooks.arg, l->ring[0], 0);
    if (l->timer_due)
        l->hooks.timer(l->hooks.arg, 0);
    close(l->ring[0]);
    close(l->ring[1]);
    free(l->set);
    free(l->fds);
    free(l->heap);
    free(l->woken);
    free(l->nudge);
    free(l->flushq);
    free(l);
}

int rlock__loop_tasks(const rlock__loop *l)
{
    return l->ntasks;
}

/* v, an array of *cap elements of size bytes, with room for need: grown
 * (doubled, from 16) if it must be; NULL if that is out of memory (v is
 * still the caller's). */
static void *grown(void *v, int *cap, int need, size_t size)
{
    void *bigger;
    int n = *cap ? *cap : 16;

    if (need <= *cap)
        return v;
    while (n < need)
        n *= 2;
    if (!(bigger = realloc(v, size * (size_t)n)))
        return NULL;
    *cap = n;
    return bigger;
}

static int grow_tasks(rlock__task ***v, int *cap, int need)
{
    rlock__task **p = grown(*v, cap, need, sizeof **v);

    if (p)
        *v = p;
    return p != NULL;
}

/* ---- where tasks wait: the list, and the sleepers' heap ----------------- */

static void list_add(rlock__loop *l, rlock__task *t)
{
    t->listed = 1;
    t->prev = NULL;
    t->next = l->tasks;
    if (l->tasks)
        l->tasks->prev = t;
    l->tasks = t;
}

static void list_del(rlock__loop *l, rlock__task *t)
{
    if (t->prev)
        t->prev->next = t->next;
    else
        l->tasks = t->next;
    if (t->next)
        t->next->prev = t->prev;
    t->next = t->prev = NULL;
    t->listed = 0;
}

static void heap_set(rlock__loop *l, int i, rlock__task *t)
{
    l->heap[i] = t;
    t->heap_i = i;
}

static void heap_up(rlock__loop *l, int i)
{
    rlock__task *t = l->heap[i];

    while (i > 0 && t->until < l->heap[(i - 1) / 2]->until) {
        heap_set(l, i, l->heap[(i - 1) / 2]);
        i = (i - 1) / 2;
    }
    heap_set(l, i, t);
}

static void heap_down(rlock__loop *l, int i)
{
    rlock__task *t = l->heap[i];

    for (;;) {
        int k = 2 * i + 1;
        if (k >= l->nheap)
            break;
        if (k + 1 < l->nheap && l->heap[k + 1]->until < l->heap[k]->until)
            k++;
        if (t->until <= l->heap[k]->until)
            break;
        heap_set(l, i, l->heap[k]);
        i = k;
    }
    heap_set(l, i, t);
}

/* 0: out of memory. */
static int heap_push(rlock__loop *l, rlock__task *t)
{
    if (!grow_tasks(&l->heap, &l->capheap, l->nheap + 1))
        return 0;
    heap_set(l, l->nheap++, t);
    heap_up(l, t->heap_i);
    return 1;
}

static void heap_del(rlock__loop *l, rlock__task *t)
{
    int i = t->heap_i;
    rlock__task *last = l->heap[--l->nheap];

    t->heap_i = -1;
    if (i == l->nheap)
        return;
    heap_set(l, i, last);
    heap_up(l, i);
    heap_down(l, last->heap_i);
}

/* t waits: in the heap by until, or, out of memory, in the list that
 * every pass looks at. */
static void park(rlock__loop *l, rlock__task *t)
{
    if (!heap_push(l, t))
        list_add(l, t);
}

/* t no longer waits (it is stepped, or leaves). */
static void unpark(rlock__loop *l, rlock__task *t)
{
    if (t->heap_i >= 0)
        heap_del(l, t);
    else if (t->listed)
        list_del(l, t);
}

/* t leaves the loop (done or canceled). */
static void unlink_task(rlock__loop *l, rlock__task *t)
{
    unpark(l, t);
    l->ntasks--;
}

/* Whether every connection of t's round has what it waits for; a
 * connection that waits for replies to nothing is failed, as
 * rlock__net_run fails it. */
static void nudge(rlock__loop *l, int fd);

static int round_settled(rlock__task *t)
{
    int i, all = 1;

    for (i = 0; i < t->n; i++) {
        rlock__conn *c = t->io->conns[i];
        if (rlock__bexec_settled(&t->io->b, i, t->io->want[i]))
            continue;
        if (rlock__conn_events(c) == 0 && rlock__conn_ready(c) == 0) {
            /* (Replies ready that are not its own are other tasks' on a
             * shared connection: its own come after them.) */
            rlock__conn_fail(c, RLOCK_EINVAL,
                             "waiting for a reply to no command");
            continue;
        }
        if (rlock__conn_buffered(c)) {
            /* Bytes a TLS layer holds already: no readiness will come.
             * (Replies read now may be other tasks' on the connection:
             * they are looked at too.) */
            rlock__conn_io(c, 0);
            nudge(t->io->l, rlock__conn_fd(c));
            if (rlock__bexec_settled(&t->io->b, i, t->io->want[i]))
                continue;
        }
        all = 0;
    }
    return all;
}

static short events_in(const watched *v, int n, int fd)
{
    int i;

    for (i = 0; i < n; i++)
        if (v[i].fd == fd)
            return v[i].events;
    return 0;
}

/* fds has room for fd, and the watched set and the nudge list for every
 * descriptor that has a slot (so that watching or nudging one with a slot
 * never needs memory: a nudge lost to a failed allocation left its tasks
 * to their deadlines). */
static int fd_room(rlock__loop *l, int fd)
{
    struct rlock__fdslot *bigger;
    watched *set;
    int *nq;
    int n = l->capfd ? l->capfd : 64;

    if (fd < 0)
        return 0;
    if (fd < l->capfd)
        return 1;
    while (n <= fd)
        n *= 2;
    if (!(set = grown(l->set, &l->capset, n + 2, sizeof *set)))
        return 0;
    l->set = set;
    if (!(nq = grown(l->nudge, &l->capnudge, n, sizeof *nq)))
        return 0;
    l->nudge = nq;
    if (!(bigger = realloc(l->fds, sizeof *bigger * (size_t)n)))
        return 0;
    memset(bigger + l->capfd, 0, sizeof *bigger * (size_t)(n - l->capfd));
    l->fds = bigger;
    l->capfd = n;
    return 1;
}

/* fd is no longer watched: its connection need not tell the loop when
 * it closes. */
static void forget_conn(rlock__loop *l, int fd)
{
    if (fd >= 0 && fd < l->capfd && l->fds[fd].conn) {
        rlock__conn_on_close(l->fds[fd].conn, NULL, NULL);
        rlock__conn_on_renumber(l->fds[fd].conn, NULL, NULL);
        l->fds[fd].conn = NULL;
    }
}

/* t's round waits on fd through link k (fd has a slot): k joins the
 * slot's list, at its end, unless it is on it already. */
static void fd_unlink(rlock__loop *l, struct rlock__fdlink *k)
{
    struct rlock__fdslot *s;

    if (k->fd < 0)
        return;
    s = &l->fds[k->fd];
    if (k->prev)
        k->prev->next = k->next;
    else
        s->head = k->next;
    if (k->next)
        k->next->prev = k->prev;
    else
        s->tail = k->prev;
    k->prev = k->next = NULL;
    k->fd = -1;
}

static void fd_link(rlock__loop *l, rlock__task *t, struct rlock__fdlink *k,
                    int fd)
{
    struct rlock__fdslot *s = &l->fds[fd];

    if (k->fd == fd)
        return;
    fd_unlink(l, k);
    k->t = t;
    k->fd = fd;
    k->next = NULL;
    k->prev = s->tail;
    if (s->tail)
        s->tail->next = k;
    else
        s->head = k;
    s->tail = k;
}

/* fd's tasks are looked at in this pass (or the next, which the timer
 * then asks for at once). Out of memory, they are looked at when their
 * time comes. */
static void nudge(rlock__loop *l, int fd)
{
    int *bigger;

    if (fd < 0 || fd >= l->capfd || !l->fds[fd].head || l->fds[fd].nudged)
        return;
    if (!(bigger =
              grown(l->nudge, &l->capnudge, l->nnudge + 1, sizeof *bigger)))
        return;
    l->nudge = bigger;
    l->nudge[l->nnudge++] = fd;
    l->fds[fd].nudged = 1;
}

/* The loop watches fd for ev (0: not at all), and is told if that
 * changed. Out of memory (no slot for fd, where a readiness would find
 * its tasks), fd is not watched: its round ends at its deadline. */
static void watch_fd(rlock__loop *l, int fd, short ev)
{
    short was;
    int k, slot = fd_room(l, fd);

    if (fd < 0)
        return;
    if (!slot)
        ev = 0;
    was = slot ? l->fds[fd].now : events_in(l->set, l->nset, fd);
    if (was == ev)
        return;
    if (was == 0) {
        watched *bigger =
            grown(l->set, &l->capset, l->nset + 1, sizeof *bigger);
        if (!bigger)
            return;
        l->set = bigger;
        l->set[l->nset].fd = fd;
        l->set[l->nset++].events = ev;
    } else {
        for (k = 0; k < l->nset; k++)
            if (l->set[k].fd == fd)
                break;
        if (k == l->nset)
            return; /* (cannot be: the slot and the set agree) */
        if (ev == 0)
            l->set[k] = l->set[--l->nset];
        else
            l->set[k].events = ev;
    }
    l->hooks.watch(l->hooks.arg, fd, ev);
    if (slot)
        l->fds[fd].now = ev;
    if (ev == 0)
        forget_conn(l, fd);
}

/* c, whose descriptor the loop watches, closes: unwatched first. */
static void conn_closing(void *arg, rlock__conn *c)
{
    rlock__loop *l = arg;
    int fd = rlock__conn_fd(c);

    if (fd >= 0 && fd < l->capfd && l->fds[fd].conn == c)
        rlock__loop_unwatch(l, fd);
}

/* c's descriptor's number is about to name another file (its host's
 * name was resolved: the socket takes the lookup's place). */
static void conn_renumbering(void *arg, rlock__conn *c)
{
    rlock__loop_renumber(arg, rlock__conn_fd(c));
}

void rlock__loop_renumber(rlock__loop *l, int fd)
{
    int k;

    /* The loop's registration is of the old file: it goes now, the
     * tasks that wait on the number stay, and the pass that follows
     * (nudged) watches the number again for what they wait for. */
    if (fd < 0 || fd >= l->capfd || l->fds[fd].now == 0)
        return;
    for (k = 0; k < l->nset; k++)
        if (l->set[k].fd == fd) {
            l->hooks.watch(l->hooks.arg, fd, 0);
            l->set[k] = l->set[--l->nset];
            break;
        }
    l->fds[fd].now = 0;
    nudge(l, fd);
}

/* fd, connection c's, watched for ev; c tells the loop before it
 * closes, and before its descriptor's number names another file. */
static void watch_conn(rlock__loop *l, int fd, rlock__conn *c, short ev)
{
    watch_fd(l, fd, ev);
    if (fd >= 0 && fd < l->capfd && l->fds[fd].now != 0 &&
        l->fds[fd].conn != c) {
        l->fds[fd].conn = c;
        rlock__conn_on_close(c, conn_closing, l);
        rlock__conn_on_renumber(c, conn_renumbering, l);
    }
}

static void round_leave(rlock__loop *l, rlock__task *t, int i);

/* What t's round waits for on each of its connections, watched: each
 * connection for what it waits for while some task's round waits on
 * it. */
static void watch_task(rlock__loop *l, rlock__task *t)
{
    int i;

    for (i = 0; i < t->n; i++) {
        rlock__conn *c = t->io->conns[i];
        struct rlock__fdlink *k = &t->io->links[i];
        int fd;
        if (!c)
            continue;
        fd = rlock__conn_fd(c);
        if (!fd_room(l, fd)) {
            /* Out of memory: no slot where a readiness would find t. Its
             * part of the connection is given up now (its error), and t
             * is listed for the next pass, at once, rather than left to
             * learn of it at its deadline. */
            watch_fd(l, fd, 0);
            if (!rlock__bexec_settled(&t->io->b, i, t->io->want[i])) {
                /* (Let go of first, as a cancel does: giving up may give
                 * the connection back, which may close it.) */
                round_leave(l, t, i);
                rlock__bexec_fail(&t->io->b, i, RLOCK_ENOMEM,
                                  "out of memory (the loop could not "
                                  "watch the connection)");
                if (!t->listed) {
                    unpark(l, t);
                    list_add(l, t);
                }
                l->relook = 1;
            }
            continue;
        }
        if (rlock__bexec_settled(&t->io->b, i, t->io->want[i]))
            fd_unlink(l, k);
        else
            fd_link(l, t, k, fd);
        /* (One with requests to write at the end of the pass is watched
         * then, for what is left after the write: most often the
         * replies alone, as between requests, which changes nothing.) */
        if (!l->fds[fd].flush)
            watch_conn(l, fd, c, l->fds[fd].head ? rlock__conn_events(c) : 0);
    }
}

void rlock__loop_unwatch(rlock__loop *l, int fd)
{
    int k;

    if (fd >= 0 && fd < l->capfd) {
        /* (A connection closes when its last task leaves it: none is
         * left here but by a fault, and none is left dangling.) */
        while (l->fds[fd].head)
            fd_unlink(l, l->fds[fd].head);
        forget_conn(l, fd);
        if (l->fds[fd].now == 0)
            return; /* not watched */
        l->fds[fd].now = 0;
    }
    for (k = 0; k < l->nset; k++)
        if (l->set[k].fd == fd) {
            l->hooks.watch(l->hooks.arg, fd, 0);
            l->set[k] = l->set[--l->nset];
            return;
        }
}

/* t's round lets go of conns[i]: no longer watched for t (nor at all, if
 * no other task waits on it), before its leg hands it back, which may
 * close it (a loop must stop watching a descriptor before it is closed:
 * epoll forgets a closed one, libuv forbids it, and its number may come
 * back at once for another connection that a watch set compared by
 * number would then never register). round_over: the whole round is
 * over, and rlock__bexec_after hands them back. */
static void round_leave(rlock__loop *l, rlock__task *t, int i)
{
    int fd;

    if (!t->io->conns[i])
        return;
    fd = rlock__conn_fd(t->io->conns[i]);
    fd_unlink(l, &t->io->links[i]);
    if (fd >= 0 && fd < l->capfd && l->fds[fd].head) {
        /* Other tasks wait on it: theirs may be the next replies in line
         * now. */
        nudge(l, fd);
    } else if (!(fd >= 0 && fd < l->capfd &&
                 l->fds[fd].conn == t->io->conns[i] &&
                 l->fds[fd].now == POLLIN)) {
        rlock__loop_unwatch(l, fd); /* (else kept watched for the next
                                       request) */
    }
    t->io->conns[i] = NULL; /* (the leg's, which may give it back now) */
}

static void round_over(rlock__loop *l, rlock__task *t)
{
    int i;

    for (i = 0; i < t->n; i++)
        round_leave(l, t, i);
    rlock__bexec_after(&t->io->b);
    /* Nothing of the round is the task's any more. */
    t->state = T_STEP;
    t->n = 0;
}

/* A leg of t's that waited for a pooled connection was served (under
 * the node's mutex, within some task's round): its pause ends now. The
 * pass that is running, or the next, which the timer then asks for at
 * once, takes it on. */
static void served(void *arg)
{
    rlock__task *t = arg;

    if (t->state != T_PAUSE)
        return;
    t->until = 1;
    if (t->heap_i >= 0)
        heap_up(t->io->l, t->heap_i); /* sooner: up the heap */
}

/* The request is over (or never went): its room goes. */
static void io_over(rlock__task *t)
{
    free(t->io);
    t->io = NULL;
    t->n = 0;
}

/* What t's round queued on its connections is written at the end of the
 * pass where a socket takes it (flush_due), once for every request that
 * the pass queued on a connection: a shared connection's requests go out
 * in one write, as an async Redis client's do, and the loop then watches
 * for the replies alone. A connection without a slot (out of memory) is
 * written now. */
static void flush_later(rlock__loop *l, rlock__task *t)
{
    int i, *bigger;

    for (i = 0; i < t->n; i++) {
        rlock__conn *c = t->io->conns[i];
        int fd;
        if (!c || !(rlock__conn_events(c) & POLLOUT))
            continue;
        fd = rlock__conn_fd(c);
        if (!fd_room(l, fd) ||
            !(bigger = grown(l->flushq, &l->capflush, l->nflush + 1,
                             sizeof *bigger))) {
            rlock__conn_flush(c);
            continue;
        }
        l->flushq = bigger;
        if (l->fds[fd].flush)
            continue;
        l->fds[fd].flush = 1;
        l->flushq[l->nflush++] = fd;
    }
}

/* Writes what the pass queued (flush_later). A connection whose tasks
 * are gone meanwhile is left to whoever has it next; one that broke has
 * its tasks looked at. */
static void flush_due(rlock__loop *l)
{
    while (l->nflush > 0) {
        int fd = l->flushq[--l->nflush];
        struct rlock__fdlink *k = l->fds[fd].head;
        rlock__conn *c;
        l->fds[fd].flush = 0;
        if (!k)
            continue;
        c = k->t->io->conns[k - k->t->io->links];
        rlock__conn_flush(c);
        if (rlock__conn_error(c)->code != 0)
            nudge(l, fd);
        watch_conn(l, fd, c, rlock__conn_events(c));
    }
}

/* The next round of t's request (T_ROUND or T_PAUSE), or 0: the request
 * is over and the op is stepped. */
static int next_round(rlock__loop *l, rlock__task *t)
{
    for (;;) {
        if (!rlock__bexec_round(&t->io->b, t->io->conns, t->io->want, &t->n,
                                &t->until)) {
            io_over(t);
            return 0;
        }
        if (t->n == 0) {
            t->state = T_PAUSE;
            park(l, t);
            return 1;
        }
        if (!round_settled(t)) {
            t->state = T_ROUND;
            park(l, t);
            flush_later(l, t);
            watch_task(l, t);
            return 1;
        }
        round_over(l, t);
    }
}

static void rewatch(rlock__loop *l);

/* Steps t (in neither the heap nor the list) until it waits for
 * something (then parked) or is done (then unlinked and told). */
static void advance(rlock__loop *l, rlock__task *t)
{
    rlock_client *c = l->c;
    int i;

    for (;;) {
        rlock__slot *slot;
        int what = t->step(t->op, &slot);

        if (what == RLOCK__STEP_DONE) {
            t->state = T_STEP;
            unlink_task(l, t);
            t->done(t);
            return;
        }
        if (what == RLOCK__STEP_SEND) {
            t->slot = slot;
            if (!t->io && !(t->io = malloc(sizeof *t->io))) {
                rlock__results_none(&slot->res);
                slot->rc =
                    rlock__fail(slot->call, RLOCK_ENOMEM, "out of memory");
                continue;
            }
            t->io->l = l;
            for (i = 0; i < RLOCK__NODES_MAX; i++)
                t->io->links[i].fd = -1;
            if (!rlock__slot_start(slot, c, &t->io->b)) {
                io_over(t);
                continue;
            }
            rlock__bexec_on_served(&t->io->b, served, t);
            if (next_round(l, t))
                return;
            continue;
        }
        if (what == RLOCK__STEP_SLEEP && t->wait) {
            int sleeps;
            /* The waiter's ring is the loop's while it sleeps: the
             * subscriber lists it there and writes the pipe when it
             * wakes the waiter. */
            pthread_mutex_lock(&c->mu);
            sleeps = !t->wait->w.woken && rlock__now_ns() < t->wait->until;
            if (sleeps) {
                t->wait->w.ring = &l->wring;
                t->wait->w.task = t;
            }
            pthread_mutex_unlock(&c->mu);
            if (!sleeps)
                continue;
            t->state = T_SLEEP;
            t->until = t->wait->until;
            park(l, t);
            return;
        }
        /* A quiet wait: looked at again shortly, or failed by the step
         * at the call's deadline. */
        t->state = T_QUIET;
        t->until = rlock__now_ns() + QUIET_LOOK_NS;
        park(l, t);
        return;
    }
}

void rlock__loop_cancel(rlock__loop *l, rlock__task *t)
{
    int i;

    unlink_task(l, t);
    if (t->state == T_ROUND || t->state == T_PAUSE) {
        /* Legs waiting for a pooled connection leave the queue first: the
         * round's end must not hand them one only to fail it. */
        rlock__bexec_unpool(&t->io->b);
        /* A leg that gives up may give its connection back at once (the
         * last on a shared one): the loop lets go of it first. */
        for (i = 0; i < t->n; i++)
            if (t->io->conns[i] &&
                !rlock__bexec_settled(&t->io->b, i, t->io->want[i])) {
                round_leave(l, t, i);
                rlock__bexec_fail(&t->io->b, i, RLOCK_ECANCELED,
                                  "the call was canceled");
            }
        round_over(l, t);
        if (!rlock__bexec_abort(&t->io->b)) {
            rlock__results_init(&t->slot->res, 0);
            t->slot->rc = rlock__fail(t->slot->call, RLOCK_ECANCELED,
                                      "the call was canceled");
        }
        io_over(t);
    } else if (t->state == T_SLEEP) {
        pthread_mutex_lock(&l->c->mu);
        rlock__waiter_unring(&t->wait->w);
        pthread_mutex_unlock(&l->c->mu);
    }
    /* The op to its end: every request it asks for fails unsent, and its
     * sleeps are over (a wait's deadline has passed for it). */
    for (;;) {
        rlock__slot *slot;
        int what;

        if (t->call)
            t->call->deadline_ns = 1;
        if (t->wait)
            rlock__wait_op_expire(t->wait);
        what = t->step(t->op, &slot);
        if (what == RLOCK__STEP_DONE)
            break;
        if (what == RLOCK__STEP_SEND) {
            rlock__results_none(&slot->res);
            slot->rc = rlock__fail(slot->call, RLOCK_ECANCELED,
                                   "the call was canceled");
        }
    }
    t->state = T_STEP;
    t->done(t);
    /* What the op left for the background (an undo of the canceled
     * attempt kicks it) or a leg served meanwhile is due now: the timer
     * is told (unless the loop is being freed). */
    if (!l->forgotten)
        rewatch(l);
}

void rlock__loop_start(rlock__loop *l, rlock__task *t)
{
    t->state = T_STEP;
    t->heap_i = -1;
    t->io = NULL;
    t->n = 0;
    t->listed = 0;
    t->next = t->prev = NULL;
    l->ntasks++;
    advance(l, t);
    rewatch(l);
}

/* Tells the loop what changed in the side's watches, and when the timer
 * is due: the first task of the heap, the list's, the side's. */
static void rewatch(rlock__loop *l)
{
    rlock__task *t;
    watched now[2];
    int64_t due = 0;
    int i, k, n;

    flush_due(l);
    if (l->nheap > 0)
        due = l->heap[0]->until > 0 ? l->heap[0]->until : 1;
    if (l->rung || l->nnudge > 0 || l->relook)
        due = 1; /* woken sleepers, nudged tasks, or a listed task failed
                    out of memory, left for the next pass */
    for (t = l->tasks; t; t = t->next)
        if (t->until && (due == 0 || t->until < due))
            due = t->until;
    n = l->side->watch(l, now, &due);
    /* What the side no longer watches, unless a task's connection has
     * the number now (the side's was closed, and unwatched then). */
    for (i = 0; i < l->nside; i++) {
        int fd = l->side_set[i].fd;
        for (k = 0; k < n && now[k].fd != fd; k++)
            ;
        if (k == n && !(fd >= 0 && fd < l->capfd && l->fds[fd].head))
            watch_fd(l, fd, 0);
    }
    for (k = 0; k < n; k++) {
        watch_fd(l, now[k].fd, now[k].events);
        l->side_set[k] = now[k];
    }
    l->nside = n;
    if (due != l->timer_due) {
        l->timer_due = due;
        l->hooks.timer(l->hooks.arg, due);
    }
}

/* Whether sleeping t's waiter was woken. (Read without mu: it is written
 * on this thread, or by a thread that then writes the ring, which makes
 * another pass.) */
static int woken(const rlock__task *t)
{
    return __atomic_load_n(&t->wait->w.woken, __ATOMIC_ACQUIRE);
}

/* Sleeping t (unparked) was woken or its time came: it goes on; or,
 * woken by nothing after all, it sleeps again. */
static void wake(rlock__loop *l, rlock__task *t, int64_t now)
{
    rlock_client *c = l->c;
    int up;

    pthread_mutex_lock(&c->mu);
    up = t->wait->w.woken || now >= t->until;
    if (up)
        rlock__waiter_unring(&t->wait->w);
    pthread_mutex_unlock(&c->mu);
    if (up) {
        advance(l, t);
        return;
    }
    park(l, t);
}

/* Looks at waiting t: if its round settled, its time came or its waiter
 * was woken, it goes on (unparked, stepped until it waits again);
 * otherwise what its round waits for is watched. */
static void look(rlock__loop *l, rlock__task *t, int64_t now)
{
    l->looks++;
    switch (t->state) {
    case T_ROUND:
        if (!round_settled(t) && now < t->until) {
            watch_task(l, t);
            return;
        }
        break;
    case T_PAUSE:
        if (now < t->until)
            return;
        break;
    case T_SLEEP:
        if (!woken(t) && now < t->until)
            return;
        unpark(l, t);
        wake(l, t, now);
        return;
    case T_QUIET:
        if (now < t->until)
            return;
        unpark(l, t);
        advance(l, t);
        return;
    default:
        return;
    }
    unpark(l, t);
    round_over(l, t);
    if (!next_round(l, t))
        advance(l, t);
}

/* The tasks whose rounds wait on fd, first to last: each whose replies
 * are there goes on (the first is looked at again after each, since one
 * that took its replies, or a callback's cancel, changes what is next in
 * line and who is on the list); then fd is watched for what those left
 * wait for. */
static void serve_fd(rlock__loop *l, int fd, int64_t now)
{
    struct rlock__fdlink *k;

    for (;;) {
        for (k = l->fds[fd].head; k; k = k->next)
            if (k->t->state == T_ROUND && round_settled(k->t))
                break;
        if (!k)
            break;
        look(l, k->t, now);
    }
    if ((k = l->fds[fd].head) != NULL)
        watch_fd(l, fd,
                 rlock__conn_events(k->t->io->conns[k - k->t->io->links]));
}

/* The nudged descriptors' tasks (those looked at may nudge more). */
static void serve_nudged(rlock__loop *l, int64_t now)
{
    while (l->nnudge > 0) {
        int fd = l->nudge[--l->nnudge];
        l->fds[fd].nudged = 0;
        serve_fd(l, fd, now);
    }
}

/* One pass: the tasks a readiness was for (nudged), those of the list,
 * the sleepers a ring woke, the tasks whose time came, and the tasks
 * that these let go on. */
static void pass(rlock__loop *l)
{
    rlock__task *t, *next;
    int64_t now = rlock__now_ns();

    l->passes++;
    l->relook = 0;
    l->side->pass(l);
    serve_nudged(l, now);
    /* (Empty but out of memory.) */
    for (t = l->tasks; t; t = next) {
        next = t->next;
        look(l, t, now);
    }
    /* The sleepers a ring woke: those its list names, taken at once
     * (those woken meanwhile are listed again, and rung again). */
    if (l->rung) {
        rlock__waiter *w;
        int i, n = 0;
        l->rung = 0;
        pthread_mutex_lock(&l->c->mu);
        while ((w = l->wring.woken) != NULL) {
            if (!grow_tasks(&l->woken, &l->capwoken, n + 1)) {
                l->rung = 1; /* out of memory: the rest next pass */
                break;
            }
            l->wring.woken = w->next_woken;
            if (l->wring.woken)
                l->wring.woken->prev_woken = NULL;
            w->listed = 0;
            l->woken[n++] = w->task;
        }
        pthread_mutex_unlock(&l->c->mu);
        l->ring_looks += n;
        for (i = 0; i < n; i++)
            if (l->woken[i]->heap_i >= 0 && l->woken[i]->state == T_SLEEP)
                look(l, l->woken[i], now);
    }
    /* Those whose time came. Each goes on (its time came: look() takes
     * it off the heap); one it parks again with a time already past is
     * looked at again, as its op's deadline decides. */
    while (l->nheap > 0 && l->heap[0]->until <= now) {
        t = l->heap[0];
        look(l, t, now);
    }
    serve_nudged(l, now);
    l->side->deliver(l);
    rewatch(l);
}

void rlock__loop_ready(rlock__loop *l, int fd, short revents)
{
    struct rlock__fdlink *k;

    if (fd == l->ring[0]) {
        char buf[64];
        while (read(fd, buf, sizeof buf) > 0)
            ;
        l->rung = 1;
    } else if (!l->side->ready(l, fd, revents) && fd >= 0 && fd < l->capfd &&
               (k = l->fds[fd].head) != NULL) {
        /* The connection is stepped once, whichever of its tasks it is
         * for. */
        rlock__conn_io(k->t->io->conns[k - k->t->io->links], revents);
        nudge(l, fd);
    } else if (fd >= 0 && fd < l->capfd && l->fds[fd].conn) {
        /* A pooled connection with no round on it (what came is read
         * when it is taken, or by the pool's look at what it owes): no
         * longer watched. */
        rlock__loop_unwatch(l, fd);
    }
    pass(l);
}

void rlock__loop_timeout(rlock__loop *l)
{
    l->timer_due = 0;
    pass(l);
}
