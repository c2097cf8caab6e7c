/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The client's background thread: one per client, started the first time
 * the client holds a lock or waits for one. It owns the subscriber
 * connection (subscriber.c) and the lease timers (watchdog.c), and sleeps
 * in poll(2) on the subscriber socket and a self-pipe until the next timer
 * is due. Other threads talk to it through the shared state under
 * client->mu and wake it by writing a byte to the pipe.
 */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include "internal.h"

static void *bg_main(void *arg)
{
    rlock_client *c = arg;

    rlock__busy_begin();
    pthread_mutex_lock(&c->mu);
    c->bg_started = 1;
    pthread_cond_broadcast(&c->callback_cv);
    while (!c->bg_stop) {
        int64_t next = rlock__now_ns() + 1000 * RLOCK__NS_PER_MS, wait_ns;
        struct pollfd fds[2];
        int nfds = 1;
        char buf[64];

        rlock__watchdog_step(c, &next);
        if (c->bg_stop)
            break;
        rlock__bound_background(c);
        rlock__cleanup_step(c, &next);
        if (c->bg_stop)
            break;
        rlock__bound_background(c);
        rlock__sub_step(c, &next);
        if (c->bg_stop)
            break;

        fds[0].fd = c->bg_pipe[0];
        fds[0].events = POLLIN;
        fds[0].revents = 0;
        fds[1].events = rlock__sub_events(c, &fds[1].fd);
        fds[1].revents = 0;
        if (fds[1].events)
            nfds = 2;
        wait_ns = next - rlock__now_ns();
        if (wait_ns < 0)
            wait_ns = 0;
        c->bg_sleep_until = next;
        pthread_mutex_unlock(&c->mu);
        rlock__busy_end();
        poll(fds, (nfds_t)nfds,
             (int)((wait_ns + RLOCK__NS_PER_MS - 1) / RLOCK__NS_PER_MS));
        rlock__busy_begin();
        if (fds[0].revents & POLLIN)
            while (read(c->bg_pipe[0], buf, sizeof buf) > 0)
                ;
        if (nfds == 2 && fds[1].revents)
            rlock__sub_read(c, fds[1].revents);
        pthread_mutex_lock(&c->mu);
        c->bg_sleep_until = 0;
    }
    rlock__sub_shutdown(c);
    rlock__cleanup_discard(c);
    pthread_mutex_unlock(&c->mu);
    rlock__busy_end();
    return NULL;
}

int rlock__bg_ensure(rlock_client *c)
{
    sigset_t all, old;
    int rc;

    if (c->bg_running)
        return RLOCK_OK;
    if (pipe2(c->bg_pipe, O_NONBLOCK | O_CLOEXEC) != 0)
        return rlock__fail(c, RLOCK_ENOMEM, "cannot create a pipe");
    /* Signals are the application's business: the background thread
     * blocks them all, so they are delivered to the application's threads
     * (rlock(1) relies on this to forward SIGTERM to its command). */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    c->bg_stop = 0;
    c->bg_started = 0;
    rc = pthread_create(&c->bg_thread, NULL, bg_main, c);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        close(c->bg_pipe[0]);
        close(c->bg_pipe[1]);
        c->bg_pipe[0] = c->bg_pipe[1] = -1;
        return rlock__fail(c, RLOCK_ENOMEM,
                           "cannot start the background thread");
    }
    c->bg_running = 1;
    /* Return only once the thread runs our code: a fork() right after this
     * must not catch the thread half-created. (It cannot set the flag
     * before we wait: it needs mu first.) */
    while (!c->bg_started)
        pthread_cond_wait(&c->callback_cv, &c->mu);
    return RLOCK_OK;
}

void rlock__bg_kick(rlock_client *c)
{
    if (c->bg_pipe[1] >= 0) {
        ssize_t n = write(c->bg_pipe[1], "", 1);
        (void)n; /* a full pipe already means "look again" */
    }
}

void rlock__bg_kick_before(rlock_client *c, int64_t due_ns)
{
    /* The thread is asleep until after due_ns, or busy (0), in which case
     * it may have looked at the timers already. Either way it must look
     * again; a wake-up it has planned before due_ns will do. */
    if (c->bg_sleep_until == 0 || due_ns < c->bg_sleep_until)
        rlock__bg_kick(c);
}

void rlock__bg_stop(rlock_client *c)
{
    pthread_mutex_lock(&c->mu);
    if (!c->bg_running) {
        pthread_mutex_unlock(&c->mu);
        return;
    }
    c->bg_stop = 1;
    rlock__bg_kick(c);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->bg_thread, NULL);
    c->bg_running = 0;
    close(c->bg_pipe[0]);
    close(c->bg_pipe[1]);
    c->bg_pipe[0] = c->bg_pipe[1] = -1;
}
