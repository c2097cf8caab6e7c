/*
 * rlock run: flock(1) for a fleet.
 *
 * The hold belongs to the thread that took it (an rlock owner is a client
 * and a thread), so one "holder" thread takes the lock, reports, and later
 * releases it when told; the main thread handles signals through a
 * signalfd and runs COMMAND. Every signal the tool cares about is blocked
 * before any thread starts, so they all arrive at the signalfd.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define KILL_GRACE_MS 5000

extern char **environ;

struct holder {
    rlock_mutex *m;
    int nonblock;
    int64_t wait_ms; /* < 0: forever */
    int rc;          /* result of the acquire */
    int gave_up;     /* rc is a conflict: held, or not obtained in time */
    char errmsg[512]; /* its detail: error details are kept per thread */
    int unlock_rc;
    uint64_t token;
    int done_pipe[2];    /* holder -> main: acquired or failed */
    int release_pipe[2]; /* main -> holder: release now */
};

static void *holder_main(void *p)
{
    struct holder *h = p;
    char b;

    if (h->nonblock)
        h->rc = rlock_mutex_trylock(h->m);
    else if (h->wait_ms < 0)
        h->rc = rlock_mutex_lock(h->m);
    else
        h->rc = rlock_mutex_timedlock(h->m, h->wait_ms);
    /* Only a busy lock or a wait that ran out is a conflict (exit 1, as
     * flock); a server that did not answer is RLOCK_ENOREPLY (exit 69). */
    h->gave_up = h->rc == RLOCK_EBUSY || h->rc == RLOCK_ETIMEDOUT;
    h->token = h->rc == RLOCK_OK ? rlock_mutex_token(h->m) : 0;
    snprintf(h->errmsg, sizeof h->errmsg, "%s",
             rlock_client_errmsg(rlock_mutex_client(h->m)));
    if (write(h->done_pipe[1], "d", 1) < 0) {
        /* main is gone; nothing to tell */
    }
    if (h->rc != RLOCK_OK)
        return NULL;
    while (read(h->release_pipe[0], &b, 1) < 0 && errno == EINTR)
        ;
    h->unlock_rc = rlock_mutex_unlock(h->m);
    return NULL;
}

static int lost_pipe[2] = {-1, -1};

static void on_lost(rlock_mutex *m, void *arg)
{
    (void)m;
    (void)arg;
    if (write(lost_pipe[1], "l", 1) < 0) {
        /* the pipe is full: the main thread knows already */
    }
}

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int need_arg(int i, int argc, const char *opt)
{
    if (i + 1 >= argc) {
        fprintf(stderr, "rlock run: %s needs a value\n", opt);
        return -1;
    }
    return 0;
}

/* The environment for COMMAND, built before fork(): between fork and exec
 * a child of a threaded process may only call async-signal-safe code. */
static char **command_env(const char *name, uint64_t token)
{
    static char nv[RLOCK_NAME_MAX + 16], tv[40];
    size_t n = 0, i, k = 0;
    char **env;

    while (environ[n])
        n++;
    env = calloc(n + 3, sizeof *env);
    if (!env)
        return NULL;
    snprintf(nv, sizeof nv, "RLOCK_NAME=%s", name);
    snprintf(tv, sizeof tv, "RLOCK_TOKEN=%llu", (unsigned long long)token);
    for (i = 0; i < n; i++)
        if (strncmp(environ[i], "RLOCK_NAME=", 11) != 0 &&
            strncmp(environ[i], "RLOCK_TOKEN=", 12) != 0)
            env[k++] = environ[i];
    env[k++] = nv;
    env[k++] = tv;
    env[k] = NULL;
    return env;
}

static void child_fail(const char *cmd, int err)
{
    const char *why = strerror(err);

    /* write(2) only: async-signal-safe. */
    if (write(2, "rlock run: cannot run ", 22) < 0 ||
        write(2, cmd, strlen(cmd)) < 0 || write(2, ": ", 2) < 0 ||
        write(2, why, strlen(why)) < 0 || write(2, "\n", 1) < 0) {
        /* nothing more to do */
    }
    _exit(err == ENOENT ? EXIT_NOT_FOUND : EXIT_CANNOT_EXEC);
}

static void release(struct holder *h, pthread_t th)
{
    if (write(h->release_pipe[1], "r", 1) < 0) {
        /* the holder reads EOF when we exit */
    }
    pthread_join(th, NULL);
}

int cmd_run(struct cli *cli, int argc, char **argv)
{
    static const int forwarded[3] = {SIGINT, SIGTERM, SIGHUP};
    struct sigaction given[3];
    struct holder h;
    rlock_mutex_opts mo;
    rlock_client *c;
    sigset_t sigs, old;
    pthread_t th;
    const char *name = NULL, *wait_s = NULL;
    char **cmd = NULL, **env;
    int64_t lease_ms = 0, kill_at = -1;
    int i, sfd, conflict = EXIT_CONFLICT_DEFAULT, kill_on_lost = 1;
    int layout = RLOCK_LAYOUT_NATIVE;
    int code = 0, lost = 0, status = 0, err;
    pid_t child;

    memset(&h, 0, sizeof h);
    h.wait_ms = -1;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) {
            cmd = argv + i + 1;
            break;
        } else if (strcmp(a, "-w") == 0 || strcmp(a, "--wait") == 0) {
            if (need_arg(i, argc, a))
                return EXIT_USAGE;
            wait_s = argv[++i];
            if (parse_duration(wait_s, &h.wait_ms) != 0) {
                fprintf(stderr, "rlock run: bad duration '%s' for %s\n",
                        wait_s, a);
                return EXIT_USAGE;
            }
        } else if (strcmp(a, "-n") == 0 || strcmp(a, "--nonblock") == 0) {
            h.nonblock = 1;
        } else if (strcmp(a, "-l") == 0 || strcmp(a, "--lease") == 0) {
            if (need_arg(i, argc, a))
                return EXIT_USAGE;
            if (parse_duration(argv[++i], &lease_ms) != 0 || lease_ms <= 0) {
                fprintf(stderr, "rlock run: bad duration '%s' for %s\n",
                        argv[i], a);
                return EXIT_USAGE;
            }
        } else if (strcmp(a, "-E") == 0 ||
                   strcmp(a, "--conflict-exit-code") == 0) {
            long v;
            if (need_arg(i, argc, a))
                return EXIT_USAGE;
            if (parse_number(argv[++i], 0, 255, &v) != 0) {
                fprintf(stderr, "rlock run: %s takes a number from 0 to 255\n",
                        a);
                return EXIT_USAGE;
            }
            conflict = (int)v;
        } else if (strcmp(a, "--layout") == 0) {
            if (need_arg(i, argc, a))
                return EXIT_USAGE;
            if (parse_layout(argv[++i], &layout) != 0) {
                fprintf(stderr, "rlock run: --layout takes native, "
                                "redisson or token\n");
                return EXIT_USAGE;
            }
        } else if (strcmp(a, "--on-lost") == 0) {
            if (need_arg(i, argc, a))
                return EXIT_USAGE;
            i++;
            if (strcmp(argv[i], "kill") == 0)
                kill_on_lost = 1;
            else if (strcmp(argv[i], "ignore") == 0)
                kill_on_lost = 0;
            else {
                fprintf(stderr, "rlock run: --on-lost takes kill or ignore\n");
                return EXIT_USAGE;
            }
        } else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "rlock run: unknown option %s\n", a);
            return EXIT_USAGE;
        } else if (!name) {
            name = a;
        } else {
            fprintf(stderr, "rlock run: put -- before the command (rlock run "
                            "NAME -- COMMAND)\n");
            return EXIT_USAGE;
        }
    }
    if (!name || !cmd || !cmd[0]) {
        fprintf(stderr, "usage: rlock run [options] NAME -- COMMAND [ARG...]\n");
        return EXIT_USAGE;
    }
    if (h.nonblock && wait_s) {
        fprintf(stderr, "rlock run: -n and -w exclude each other\n");
        return EXIT_USAGE;
    }
    if (!*name || strlen(name) > RLOCK_NAME_MAX) {
        fprintf(stderr, "rlock run: lock names are 1 to %d bytes\n",
                RLOCK_NAME_MAX);
        return EXIT_USAGE;
    }

    /* Before any thread exists: these signals now reach only the fd. A
     * signal whose disposition is "ignore" (as a shell sets it for
     * background jobs) is discarded before it could reach the fd, so take
     * the default disposition for ourselves, and give COMMAND back what we
     * were given. */
    for (i = 0; i < 3; i++) {
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        sigaction(forwarded[i], &dfl, &given[i]);
    }
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGHUP);
    sigaddset(&sigs, SIGCHLD);
    sigprocmask(SIG_BLOCK, &sigs, &old);
    signal(SIGPIPE, SIG_IGN);
    sfd = signalfd(-1, &sigs, SFD_CLOEXEC);
    if (sfd < 0 || pipe2(lost_pipe, O_CLOEXEC | O_NONBLOCK) != 0 ||
        pipe2(h.done_pipe, O_CLOEXEC) != 0 ||
        pipe2(h.release_pipe, O_CLOEXEC) != 0) {
        fprintf(stderr, "rlock run: %s\n", strerror(errno));
        return EXIT_OSERR;
    }
    if (!(c = cli_open(cli, &code)))
        return code;
    rlock_mutex_opts_init(&mo);
    mo.lease_ms = lease_ms;
    mo.on_lost = on_lost;
    mo.layout = layout;
    h.m = rlock_mutex_new(c, name, &mo, &err);
    if (!h.m) {
        cli_error(cli, c, name, err);
        rlock_client_close(c);
        return exit_code_for(err);
    }
    if (pthread_create(&th, NULL, holder_main, &h) != 0) {
        fprintf(stderr, "rlock run: cannot start a thread\n");
        return EXIT_OSERR;
    }

    /* Wait for the lock, or for a signal that says give up. */
    for (;;) {
        struct pollfd p[2] = {{h.done_pipe[0], POLLIN, 0}, {sfd, POLLIN, 0}};
        struct signalfd_siginfo si;
        if (poll(p, 2, -1) < 0)
            continue; /* EINTR; nothing else is expected of two pipes */
        if (p[0].revents)
            break;
        if (p[1].revents && read(sfd, &si, sizeof si) == sizeof si &&
            si.ssi_signo != SIGCHLD) {
            /* Interrupted before COMMAND started: stop waiting, and
             * release the lock if it was obtained meanwhile. */
            struct pollfd d = {h.done_pipe[0], POLLIN, 0};
            char b;
            /* The holder may not be waiting yet (a wait that starts after
             * a cancel is not cancelled): cancel until it reports. */
            do
                rlock_client_cancel_waits(c);
            while (poll(&d, 1, 50) <= 0);
            while (read(h.done_pipe[0], &b, 1) < 0 && errno == EINTR)
                ;
            if (h.rc == RLOCK_OK)
                release(&h, th);
            else
                pthread_join(th, NULL);
            fprintf(stderr, "rlock run: %s: interrupted by %s before the "
                            "command started\n",
                    name, strsignal((int)si.ssi_signo));
            rlock_mutex_free(h.m);
            rlock_client_close(c);
            return 128 + (int)si.ssi_signo;
        }
    }
    if (h.rc != RLOCK_OK) {
        pthread_join(th, NULL);
        if (h.gave_up) {
            if (h.nonblock)
                fprintf(stderr, "rlock run: %s is held by another owner\n",
                        name);
            else
                fprintf(stderr, "rlock run: %s not obtained within %s\n",
                        name, wait_s);
            code = conflict;
        } else {
            fprintf(stderr, "%s: %s: %s (%s)%s%s\n", cli->prog,
                    cli->url_shown, name, rlock_strerror(h.rc),
                    h.errmsg[0] ? ": " : "", h.errmsg);
            code = exit_code_for(h.rc);
        }
        rlock_mutex_free(h.m);
        rlock_client_close(c);
        return code;
    }

    env = command_env(name, h.token);
    child = env ? fork() : -1;
    if (child == 0) {
        for (i = 0; i < 3; i++)
            sigaction(forwarded[i], &given[i], NULL);
        sigprocmask(SIG_SETMASK, &old, NULL);
        signal(SIGPIPE, SIG_DFL);
        execvpe(cmd[0], cmd, env);
        child_fail(cmd[0], errno);
    }
    if (child < 0) {
        fprintf(stderr, "rlock run: cannot start %s: %s\n", cmd[0],
                strerror(errno));
        release(&h, th);
        rlock_mutex_free(h.m);
        rlock_client_close(c);
        return EXIT_OSERR;
    }

    /* COMMAND runs. Pass signals on; watch for its end and for a loss. */
    for (;;) {
        struct pollfd p[2] = {{sfd, POLLIN, 0}, {lost_pipe[0], POLLIN, 0}};
        int timeout = -1, done = 0;

        if (kill_at >= 0)
            timeout = (int)(kill_at > now_ms() ? kill_at - now_ms() : 0);
        if (poll(p, 2, timeout) < 0 && errno != EINTR)
            break;
        if (p[0].revents) {
            struct signalfd_siginfo si;
            if (read(sfd, &si, sizeof si) == sizeof si &&
                si.ssi_signo != SIGCHLD && si.ssi_code != SI_KERNEL) {
                /* Sent by a process (kill, a supervisor). A terminal's
                 * ^C (SI_KERNEL) already reached COMMAND: it is in our
                 * process group. */
                kill(child, (int)si.ssi_signo);
            }
            while (waitpid(child, &status, WNOHANG) == child)
                done = 1;
        }
        if (p[1].revents) {
            char b[16];
            while (read(lost_pipe[0], b, sizeof b) > 0)
                ;
            if (!lost) {
                lost = 1;
                fprintf(stderr,
                        "rlock run: lock %s was lost while the command ran "
                        "(expired, deleted or taken)%s\n",
                        name,
                        kill_on_lost ? "; stopping the command" : "");
                if (kill_on_lost) {
                    kill(child, SIGTERM);
                    kill_at = now_ms() + KILL_GRACE_MS;
                }
            }
        }
        if (kill_at >= 0 && now_ms() >= kill_at) {
            kill(child, SIGKILL);
            kill_at = -1;
        }
        if (done)
            break;
    }

    release(&h, th);
    if (h.unlock_rc == RLOCK_ELOST && !lost) {
        lost = 1;
        fprintf(stderr, "rlock run: lock %s was lost while the command ran "
                        "(found at release)\n",
                name);
    } else if (h.unlock_rc != RLOCK_OK && h.unlock_rc != RLOCK_ELOST) {
        cli_error(cli, c, "release", h.unlock_rc);
    }
    rlock_mutex_free(h.m);
    rlock_client_close(c);
    free(env); /* its strings belong to environ and to command_env */
    if (lost && kill_on_lost)
        return EXIT_LOST;
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return WEXITSTATUS(status);
}
