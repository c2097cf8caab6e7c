/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A libevent HTTP server that serializes a critical section per key with
 * rlock, across every process that serves the same keys, without ever
 * blocking its event loop.
 *
 *   evhttp_lock URL PORT [WORK_MS]
 *
 * GET /work/KEY takes the lock "evhttp:KEY" (waiting up to 5 s, woken by
 * pub/sub when the holder lets go), does WORK_MS (default 50) of work in
 * the critical section (a timer here, where a real server would call a
 * backend), releases the lock and answers
 *
 *     KEY TOKEN START_US END_US
 *
 * with the hold's fencing token and when the critical section began and
 * ended (CLOCK_MONOTONIC, comparable between processes of one machine).
 * Requests for other keys go on meanwhile. 503 if the lock could not be
 * had in time. The server stops on SIGINT or SIGTERM, or on GET /quit.
 */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>

#include <rlock/adapters/libevent.h>

static struct event_base *base;
static rlock_async *client;
static int work_ms = 50;

/* One request in its critical section. */
typedef struct job {
    struct evhttp_request *req;
    rlock_async_mutex *m;
    char key[128];
    uint64_t token;
    long long start_us;
    struct event *work;
} job;

static long long now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void job_free(job *j)
{
    if (j->work)
        event_free(j->work);
    rlock_async_mutex_free(j->m);
    free(j);
}

static void unlocked(rlock_async_mutex *m, int status, void *arg)
{
    job *j = arg;

    (void)m;
    if (status != RLOCK_OK)
        fprintf(stderr, "evhttp_lock: unlock %s: %s\n", j->key,
                rlock_async_errmsg(m));
    job_free(j);
}

/* The critical section's work is done: answer, then let go. */
static void work_done(evutil_socket_t fd, short what, void *arg)
{
    job *j = arg;
    struct evbuffer *body = evbuffer_new();

    (void)fd;
    (void)what;
    evbuffer_add_printf(body, "%s %llu %lld %lld\n", j->key,
                        (unsigned long long)j->token, j->start_us, now_us());
    evhttp_send_reply(j->req, 200, "OK", body);
    evbuffer_free(body);
    if (rlock_async_unlock(j->m, unlocked, j) != RLOCK_OK)
        job_free(j);
}

static void locked(rlock_async_mutex *m, int status, uint64_t token, void *arg)
{
    job *j = arg;
    struct timeval tv;

    if (status != RLOCK_OK) {
        struct evbuffer *body = evbuffer_new();
        evbuffer_add_printf(body, "%s: %s\n", rlock_strerror(status),
                            rlock_async_errmsg(m));
        evhttp_send_reply(j->req, 503, "Busy", body);
        evbuffer_free(body);
        job_free(j);
        return;
    }
    j->token = token;
    j->start_us = now_us();
    tv.tv_sec = work_ms / 1000;
    tv.tv_usec = (work_ms % 1000) * 1000;
    j->work = evtimer_new(base, work_done, j);
    evtimer_add(j->work, &tv);
}

static void on_request(struct evhttp_request *req, void *arg)
{
    const char *uri = evhttp_request_get_uri(req);
    char name[160];
    job *j;
    int err;

    (void)arg;
    if (strcmp(uri, "/quit") == 0) {
        evhttp_send_reply(req, 200, "OK", NULL);
        event_base_loopexit(base, NULL);
        return;
    }
    if (strncmp(uri, "/work/", 6) != 0 || strlen(uri + 6) == 0 ||
        strlen(uri + 6) >= sizeof j->key) {
        evhttp_send_error(req, 404, "GET /work/KEY");
        return;
    }
    if (!(j = calloc(1, sizeof *j))) {
        evhttp_send_error(req, 500, "out of memory");
        return;
    }
    j->req = req;
    snprintf(j->key, sizeof j->key, "%s", uri + 6);
    snprintf(name, sizeof name, "evhttp:%s", j->key);
    /* A handle per request: the handle owns the hold. */
    if (!(j->m = rlock_async_mutex_new(client, name, NULL, &err)) ||
        rlock_async_lock(j->m, 5000, locked, j) != RLOCK_OK) {
        evhttp_send_error(req, 500, rlock_async_errmsg(j->m));
        job_free(j);
    }
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    (void)sig;
    (void)what;
    (void)arg;
    event_base_loopexit(base, NULL);
}

int main(int argc, char **argv)
{
    struct evhttp *http;
    struct event *sigint, *sigterm;
    int err, port;

    if (argc < 3) {
        fprintf(stderr, "usage: evhttp_lock URL PORT [WORK_MS]\n");
        return 2;
    }
    port = atoi(argv[2]);
    if (argc > 3)
        work_ms = atoi(argv[3]);
    base = event_base_new();
    if (!(client = rlock_async_open(argv[1], NULL, &err))) {
        fprintf(stderr, "evhttp_lock: %s: %s\n", rlock_strerror(err),
                rlock_async_errmsg(NULL));
        return 1;
    }
    if (rlock_libevent_attach(client, base) != RLOCK_OK) {
        fprintf(stderr, "evhttp_lock: %s\n", rlock_async_errmsg(NULL));
        return 1;
    }
    http = evhttp_new(base);
    if (evhttp_bind_socket(http, "127.0.0.1", (unsigned short)port) != 0) {
        fprintf(stderr, "evhttp_lock: cannot listen on port %d\n", port);
        return 1;
    }
    evhttp_set_gencb(http, on_request, NULL);
    sigint = evsignal_new(base, SIGINT, on_signal, NULL);
    sigterm = evsignal_new(base, SIGTERM, on_signal, NULL);
    evsignal_add(sigint, NULL);
    evsignal_add(sigterm, NULL);
    printf("evhttp_lock: listening on 127.0.0.1:%d\n", port);
    fflush(stdout);
    event_base_dispatch(base);
    /* Holds still taken are not released: their leases run out. */
    rlock_async_close(client);
    evhttp_free(http);
    event_free(sigint);
    event_free(sigterm);
    event_base_free(base);
    return 0;
}
