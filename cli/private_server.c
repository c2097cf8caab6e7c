/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A private redis-server for a tool run; see private_server.h.
 */
#include <fcntl.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <rlock/rlock.h>

#include "private_server.h"

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

pid_t private_server_start(const char *dir, const sigset_t *mask, char *url,
                           size_t url_len)
{
    char log[300], sock[300];
    double until = now_s() + 10;
    pid_t pid;

    snprintf(log, sizeof log, "%s/redis.log", dir);
    snprintf(sock, sizeof sock, "%s/redis.sock", dir);
    snprintf(url, url_len, "unix://%s", sock);
    pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        /* Never outlives the tool, however the tool ends. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (mask) /* a blocked mask would survive exec */
            sigprocmask(SIG_SETMASK, mask, NULL);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        /* Redis, or Valkey where that is what the machine has. */
        execlp("redis-server", "redis-server", "--port", "0", "--unixsocket",
               sock, "--unixsocketperm", "700", "--dir", dir, "--save", "",
               "--appendonly", "no", (char *)NULL);
        execlp("valkey-server", "valkey-server", "--port", "0",
               "--unixsocket", sock, "--unixsocketperm", "700", "--dir", dir,
               "--save", "", "--appendonly", "no", (char *)NULL);
        _exit(127);
    }
    if (pid < 0) {
        perror("fork");
        return -1;
    }
    for (;;) {
        struct stat st;
        rlock_client *c;
        int err;

        if (stat(sock, &st) == 0 &&
            (c = rlock_client_open(url, NULL, &err)) != NULL) {
            rlock_client_close(c);
            return pid;
        }
        if (now_s() > until || waitpid(pid, NULL, WNOHANG) == pid) {
            fprintf(stderr,
                    "could not start redis-server or valkey-server (is one "
                    "installed? "
                    "see %s)\n",
                    log);
            private_server_stop(pid, dir);
            return -1;
        }
        usleep(20000);
    }
}

void private_server_stop(pid_t pid, const char *dir)
{
    static const char *files[] = {"redis.sock", "redis.log", "dump.rdb"};
    char path[300];
    size_t i;

    if (pid > 0) {
        kill(pid, SIGTERM);
        waitpid(pid, NULL, 0);
    }
    for (i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        unlink(path);
    }
}
