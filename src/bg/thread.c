/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The background thread: one per client, started the first time the
 * client holds a lock or waits for one. It owns the subscriber connection
 * and runs the lease timers and the undos, sleeping in poll(2) on the
 * subscriber socket and a self-pipe until the next step is due. Other
 * threads talk to it through the shared state under the client's mu and
 * wake it by writing a byte to the pipe.
 */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include "bg/bg.h"
#include "core/observe.h"
#include "util/clock.h"

static void *bg_main(void *arg)
{
    rlock_client *c = arg;
    struct rlock__bg *bg = c->bg;

    pthread_mutex_lock(&c->mu);
    bg->started = 1;
    pthread_cond_broadcast(&c->state_cv);
    while (!bg->stop) {
        int64_t next = rlock__after_ms(1000), wait_ns;
        struct pollfd fds[2];
        int nfds = 1;
        char buf[64];

        rlock__watchdog_step(c, &next);
        if (bg->stop)
            break;
        rlock__cleanup_step(c, &next);
        if (bg->stop)
            break;
        rlock__sub_step(c, &next);
        if (bg->stop)
            break;
        /* What the steps reported goes to a notifier: this thread never
         * runs the application's callbacks. */
        rlock__notify_events(c);

        fds[0].fd = bg->pipe[0];
        fds[0].events = POLLIN;
        fds[0].revents = 0;
        fds[1].events = rlock__sub_events(c, &fds[1].fd);
        fds[1].revents = 0;
        if (fds[1].events)
            nfds = 2;
        wait_ns = next - rlock__now_ns();
        if (wait_ns < 0)
            wait_ns = 0;
        bg->sleep_until = next;
        bg->sub_polled = nfds == 2;
        pthread_mutex_unlock(&c->mu);
        poll(fds, (nfds_t)nfds,
             (int)((wait_ns + RLOCK__NS_PER_MS - 1) / RLOCK__NS_PER_MS));
        if (fds[0].revents & POLLIN)
            while (read(bg->pipe[0], buf, sizeof buf) > 0)
                ;
        if (nfds == 2 && fds[1].revents)
            rlock__sub_io(c, fds[1].revents);
        pthread_mutex_lock(&c->mu);
        bg->sleep_until = 0;
        bg->sub_polled = 0;
    }
    rlock__sub_shutdown(c);
    rlock__cleanup_free(c);
    rlock__obs_drop(c->obs); /* the client closes: nobody to tell */
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

static int ensure(rlock_client *c, rlock__call *call)
{
    struct rlock__bg *bg = c->bg;
    sigset_t all, old;
    int rc;

    if (bg->running)
        return RLOCK_OK;
    if (pipe2(bg->pipe, O_NONBLOCK | O_CLOEXEC) != 0)
        return rlock__fail(call, RLOCK_ENOMEM, "cannot create a pipe");
    /* Signals are the application's business: the background thread
     * blocks them all, so they are delivered to the application's threads
     * (rlock(1) relies on this to forward SIGTERM to its command). */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    bg->stop = 0;
    bg->started = 0;
    rc = pthread_create(&bg->thread, NULL, bg_main, c);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        close(bg->pipe[0]);
        close(bg->pipe[1]);
        bg->pipe[0] = bg->pipe[1] = -1;
        return rlock__fail(call, RLOCK_ENOMEM,
                           "cannot start the background thread");
    }
    bg->running = 1;
    /* Return only once the thread runs our code (it cannot set the flag
     * before we wait: it needs mu first). This does not keep fork() out:
     * the wait releases mu, which is what fork()'s guard takes, so a
     * child may be forked while the thread has not started yet, as at
     * any other moment. The child has no such thread either way; its
     * first call on the client (rlock__api_enter) forgets it
     * (after_fork below). */
    while (!bg->started)
        pthread_cond_wait(&c->state_cv, &c->mu);
    return RLOCK_OK;
}

static void kick(rlock_client *c)
{
    if (c->bg->pipe[1] >= 0) {
        ssize_t n = write(c->bg->pipe[1], "", 1);
        (void)n; /* a full pipe already means "look again" */
    }
}

static void kick_before(rlock_client *c, int64_t due_ns)
{
    /* The thread is asleep until after due_ns, or busy (0), in which case
     * it may have looked at the timers already. Either way it must look
     * again; a wake-up it has planned before due_ns will do. */
    if (c->bg->sleep_until == 0 || due_ns < c->bg->sleep_until)
        kick(c);
}

static void stop(rlock_client *c)
{
    struct rlock__bg *bg = c->bg;

    pthread_mutex_lock(&c->mu);
    if (!bg->running) {
        pthread_mutex_unlock(&c->mu);
        return;
    }
    bg->stop = 1;
    kick(c);
    pthread_mutex_unlock(&c->mu);
    pthread_join(bg->thread, NULL);
    bg->running = 0;
    close(bg->pipe[0]);
    close(bg->pipe[1]);
    bg->pipe[0] = bg->pipe[1] = -1;
}

static void after_fork(rlock_client *c)
{
    struct rlock__bg *bg = c->bg;

    bg->running = 0;
    bg->stop = 0;
    if (bg->pipe[0] >= 0) {
        close(bg->pipe[0]);
        close(bg->pipe[1]);
        bg->pipe[0] = bg->pipe[1] = -1;
    }
}

const rlock__driver rlock__thread_driver = {
    "thread",           ensure, kick, kick_before, stop, after_fork,
    rlock__notify_step, NULL,
};
