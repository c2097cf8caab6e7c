/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Two processes contending for one lock.
 *
 *   contend [URL] [ROUNDS]
 *
 * Each process takes the lock "example:contend" ROUNDS times (default 5),
 * holds it for 100 ms, and says what happens: who waited, for how long,
 * and which fencing token each hold carried.
 */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <rlock/rlock.h>

static long long now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int worker(const char *url, int id, int rounds)
{
    int err, i;
    rlock_client *c = rlock_client_open(url, NULL, &err);
    rlock_mutex *m;

    if (!c) {
        fprintf(stderr, "worker %d: %s: %s\n", id, rlock_strerror(err),
                rlock_client_errmsg(NULL));
        return 1;
    }
    m = rlock_mutex_new(c, "example:contend", NULL, &err);
    if (!m) {
        fprintf(stderr, "worker %d: %s\n", id, rlock_strerror(err));
        return 1;
    }
    for (i = 0; i < rounds; i++) {
        long long t0 = now_ms();
        int rc = rlock_mutex_lock(m);
        if (rc != RLOCK_OK) {
            fprintf(stderr, "worker %d: lock: %s: %s\n", id,
                    rlock_strerror(rc), rlock_client_errmsg(c));
            return 1;
        }
        printf("worker %d (pid %d): holds the lock, token %llu, waited %lld ms\n",
               id, (int)getpid(), (unsigned long long)rlock_mutex_token(m),
               now_ms() - t0);
        fflush(stdout);
        usleep(100 * 1000);
        printf("worker %d (pid %d): releases it\n", id, (int)getpid());
        fflush(stdout);
        rc = rlock_mutex_unlock(m);
        if (rc != RLOCK_OK) {
            fprintf(stderr, "worker %d: unlock: %s\n", id, rlock_strerror(rc));
            return 1;
        }
        usleep(1000);
    }
    rlock_mutex_free(m);
    rlock_client_close(c);
    return 0;
}

int main(int argc, char **argv)
{
    const char *url = argc > 1 ? argv[1] : "redis://127.0.0.1:6379";
    int rounds = argc > 2 ? atoi(argv[2]) : 5, i, failed = 0;
    pid_t pids[2];

    printf("rlock %s: two processes contend for \"example:contend\" on %s\n",
           rlock_version(), url);
    fflush(stdout);
    for (i = 0; i < 2; i++) {
        pids[i] = fork();
        if (pids[i] == 0)
            _exit(worker(url, i + 1, rounds));
    }
    for (i = 0; i < 2; i++) {
        int status;
        waitpid(pids[i], &status, 0);
        failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    }
    printf(failed ? "a worker failed\n"
                  : "done: the holds never overlapped and tokens only grew\n");
    return failed;
}
