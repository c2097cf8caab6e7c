/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * rlock run: flock(1) for a fleet.
 *
 * The hold belongs to an rlock_owner, so that any thread may act on it: a
 * "holder" thread takes the lock (a wait may block), reports, and later
 * releases it when told; the main thread asks how much lease is left and
 * tells the keeper, which holds the tree to that end on its own clock,
 * whatever becomes of rlock run. The main thread takes in every signal
 * through a signalfd (they are blocked before any thread or child exists)
 * and talks to the keeper (tree.c), the process that parents COMMAND's
 * whole tree: signals are passed on to the tree, a stop signal or a lost
 * lock stops it (SIGKILL after --kill-after), and the lock is released
 * only once no process of the tree is left.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "tree.h"


extern char **environ;

struct holder {
    rlock_mutex *m;
    rlock_owner *o;   /* the hold's owner */
    int nonblock;
    int64_t wait_ms; /* < 0: forever */
    int rc;          /* result of the acquire */
    int gave_up;     /* rc is a conflict: held, or not obtained in time */
    char errmsg[512]; /* its detail: error details are kept per thread */
    int unlock_rc;
    uint64_t token;
    int64_t began, ended; /* the acquire call, in tree_clock_ms */
    int done_pipe[2];    /* holder -> main: acquired or failed */
    int release_pipe[2]; /* main -> holder: release now */
    /* rc, gave_up, errmsg, token, began and ended are written: set (with
     * release) before the byte on done_pipe, read (with acquire) by main
     * after it, since a pipe orders no memory between threads. */
    int reported;
};

/* The holder's report, once done_pipe said it came. */
static void holder_reported(struct holder *h)
{
    while (!__atomic_load_n(&h->reported, __ATOMIC_ACQUIRE))
        sched_yield();
}

static void *holder_main(void *p)
{
    struct holder *h = p;
    char b;

    h->began = tree_clock_ms();
    if (h->nonblock)
        h->rc = rlock_mutex_trylock_as(h->m, h->o);
    else if (h->wait_ms < 0)
        h->rc = rlock_mutex_lock_as(h->m, h->o);
    else
        h->rc = rlock_mutex_timedlock_as(h->m, h->o, h->wait_ms);
    h->ended = tree_clock_ms();
    /* Only a busy lock or a wait that ran out is a conflict (exit 1, as
     * flock); a server that did not answer is RLOCK_ENOREPLY (exit 69). */
    h->gave_up = h->rc == RLOCK_EBUSY || h->rc == RLOCK_ETIMEDOUT;
    /* COMMAND is promised its fencing token: a lock nobody contended
     * draws it now (one round trip). Without it COMMAND does not run, and
     * the lock goes back. */
    if (h->rc == RLOCK_OK)
        h->rc = rlock_mutex_fence_as(h->m, h->o, &h->token);
    snprintf(h->errmsg, sizeof h->errmsg, "%s", rlock_owner_errmsg(h->o));
    if (h->rc != RLOCK_OK && !h->gave_up && h->rc != RLOCK_ELOST)
        rlock_mutex_unlock_as(h->m, h->o); /* a no-op (ENOTOWNER) if
                                              nothing is held */
    __atomic_store_n(&h->reported, 1, __ATOMIC_RELEASE);
    if (write(h->done_pipe[1], "d", 1) < 0) {
        /* main is gone; nothing to tell */
    }
    if (h->rc != RLOCK_OK)
        return NULL;
    while (read(h->release_pipe[0], &b, 1) < 0 && errno == EINTR)
        ;
    h->unlock_rc = rlock_mutex_unlock_as(h->m, h->o);
    if (h->unlock_rc != RLOCK_OK)
        snprintf(h->errmsg, sizeof h->errmsg, "%s", rlock_owner_errmsg(h->o));
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

/* "NAME=" + value, allocated; with strip, the value is a URL whose
 * password is left out. */
static char *env_entry(const char *name, const char *value, int strip)
{
    size_t n = strlen(name), len = n + strlen(value) + 2;
    char *e = malloc(len);

    if (!e)
        return NULL;
    snprintf(e, len, "%s=", name);
    if (strip)
        url_strip_password(value, e + n + 1, len - n - 1);
    else
        snprintf(e + n + 1, len - n - 1, "%s", value);
    return e;
}

/* COMMAND's environment: ours, with RLOCK_NAME and RLOCK_URL (without its
 * password) set, REDIS_URL (a URL rlock may have used, or the job's own)
 * without its password, and no RLOCK_PASSWORD; the keeper adds
 * RLOCK_TOKEN. Built before any fork, while the process has one thread;
 * own[] gets the strings made here, for the caller to free (with env)
 * once the keeper has its copy. */
static char **command_env(const char *name, const char *url_bare, char *own[3])
{
    static const char *const drop[] = {
        "RLOCK_NAME=", "RLOCK_TOKEN=", "RLOCK_URL=", "RLOCK_PASSWORD=",
        "REDIS_URL="};
    const char *redis_url = getenv("REDIS_URL");
    size_t n = 0, i, k = 0, d;
    char **env;

    own[0] = env_entry("RLOCK_NAME", name, 0);
    own[1] = env_entry("RLOCK_URL", url_bare, 0);
    own[2] = redis_url ? env_entry("REDIS_URL", redis_url, 1) : NULL;
    while (environ[n])
        n++;
    env = calloc(n + 4, sizeof *env);
    if (!env || !own[0] || !own[1] || (redis_url && !own[2])) {
        free(env);
        return NULL;
    }
    for (i = 0; i < n; i++) {
        for (d = 0; d < sizeof drop / sizeof drop[0]; d++)
            if (strncmp(environ[i], drop[d], strlen(drop[d])) == 0)
                break;
        if (d == sizeof drop / sizeof drop[0])
            env[k++] = environ[i];
    }
    for (i = 0; i < 3; i++)
        if (own[i])
            env[k++] = own[i];
    env[k] = NULL;
    return env;
}

static void release(struct holder *h, pthread_t th)
{
    if (write(h->release_pipe[1], "r", 1) < 0) {
        /* the holder reads EOF when we exit */
    }
    pthread_join(th, NULL);
}

/* The signals rlock run takes in through its signalfd: every catchable
 * one but SIGPIPE, which is ignored (a closed stderr is no reason to
 * abandon COMMAND). That includes the signals a fault raises: sent by
 * another process (kill -ABRT) they are passed on as the others are, and
 * must not end rlock run while COMMAND runs. Blocking them stops no real
 * fault: the kernel unblocks the signal of a fault it raises (and makes
 * it fatal), and abort(3) unblocks SIGABRT, so a broken rlock run still
 * dies, and the keeper then stops the tree. */
static void handled_signals(sigset_t *set)
{
    int sig;

    sigemptyset(set);
    for (sig = 1; sig < NSIG; sig++) {
        if (sig > SIGSYS && sig < SIGRTMIN)
            continue; /* glibc's own */
        if (sig != SIGPIPE && sig != SIGKILL && sig != SIGSTOP)
            sigaddset(set, sig);
    }
}

/* The ones that ask rlock run to stop (the tree is stopped, then the lock
 * released); every other one is passed on to the tree as it is. */
static int is_stop_signal(int sig)
{
    return sig == SIGINT || sig == SIGTERM || sig == SIGHUP;
}

/* The last moment at which the tree of a fixed lease (nothing renews it)
 * may still live if rlock run dies, in tree_clock_ms. The library counts
 * the lease from before its last request left: after the call began, and
 * at most one command timeout before it returned (each attempt has that
 * deadline). A tenth of the lease is kept back for the kill to take effect
 * and the tree to be reaped. */
static int64_t fixed_lease_end(const struct holder *h, int64_t lease_ms,
                               int command_timeout_ms)
{
    int64_t sent = h->ended - command_timeout_ms;

    if (sent < h->began)
        sent = h->began;
    return sent + lease_ms - lease_ms / 10;
}

/* How often rlock run asks how much lease is left and tells the keeper:
 * a tenth of the lease, and at least this often. */
#define LEASE_LOOK_MAX_MS 200

/* Tells the keeper where the lease ends now, if that moved; returns the
 * end said (tree_clock_ms), or last if nothing was said (the hold lost or
 * gone: the keeper keeps the end it has). *left_ms: what was left. */
static int64_t tell_lease(struct tree *t, const struct holder *h, int64_t last,
                          int64_t *left_ms)
{
    int64_t left = 0, end;

    if (rlock_mutex_lease_left_as(h->m, h->o, &left) != RLOCK_OK)
        return last;
    *left_ms = left;
    end = tree_clock_ms() + left;
    if (last >= 0 && end <= last + 5)
        return last;
    tree_lease(t, end);
    return end;
}

/* A job-control stop of COMMAND (^Z at the terminal, or a background read
 * or write of it): rlock run stops too, with the same signal, so that the
 * shell sees its job stopped and gives its prompt back. When the shell
 * lets it go on (fg, bg), COMMAND goes on too, with the terminal if rlock
 * run has it. Meanwhile nothing renews the lease: the keeper ends the
 * tree when it runs out (rlock(1) says so). */
static void stop_as_a_job(struct tree *t, int sig)
{
    sigset_t one;

    sigemptyset(&one);
    sigaddset(&one, sig);
    signal(sig, SIG_DFL);
    pthread_sigmask(SIG_UNBLOCK, &one, NULL);
    raise(sig); /* stops the whole process until SIGCONT */
    pthread_sigmask(SIG_BLOCK, &one, NULL);
    if (t->tty >= 0 && t->command > 0 && tcgetpgrp(t->tty) == getpgrp())
        tcsetpgrp(t->tty, t->command); /* fg: the terminal is COMMAND's */
    tree_signal(t, SIGCONT);
}

int cmd_run(struct cli *cli, int argc, char **argv)
{
    static int given_sigs[NSIG];
    static struct sigaction given[NSIG];
    /* The lock's name and COMMAND as messages show them: escaped, as
     * status shows what it reads from Redis. */
    static char sname[4 * RLOCK_NAME_MAX + 1], scmd[1024];
    struct holder h;
    struct tree tree;
    struct tree_spec spec;
    rlock_mutex_opts mo;
    rlock_client *c;
    sigset_t sigs, old;
    pthread_t th;
    const char *name = NULL, *wait_s = NULL, *v;
    char **cmd = NULL, **env, *own_env[3];
    int64_t lease_ms = 0, kill_after_ms = KILL_AFTER_DEFAULT_MS;
    int64_t grace_ms, renew_lease_ms, orphan_until, said_end = -1, left_ms;
    int i, r, sfd, conflict = EXIT_CONFLICT_DEFAULT, kill_on_lost = 1;
    int layout = RLOCK_LAYOUT_NATIVE, quiet = 0, nsigs = 0;
    int code = 0, lost = 0, status = 0, err, ended = 0;
    int keeper_gone = 0;

    memset(&h, 0, sizeof h);
    h.wait_ms = -1;
    for (i = 1; i < argc;) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) {
            cmd = argv + i + 1;
            break;
        }
        if ((r = cli_opt(argc, argv, &i, "rlock run", "-w", "--wait",
                         &v)) != 0) {
            if (r < 0)
                return EXIT_USAGE;
            wait_s = v;
            if (parse_duration(wait_s, &h.wait_ms) != 0) {
                fprintf(stderr, "rlock run: bad duration '%s' for %s\n",
                        wait_s, cli_last_opt);
                return EXIT_USAGE;
            }
        } else if ((r = cli_opt(argc, argv, &i, "rlock run", "-l",
                                "--lease", &v)) != 0) {
            if (r < 0)
                return EXIT_USAGE;
            if (parse_duration(v, &lease_ms) != 0 || lease_ms <= 0) {
                fprintf(stderr, "rlock run: bad duration '%s' for %s\n", v,
                        cli_last_opt);
                return EXIT_USAGE;
            }
        } else if ((r = cli_opt(argc, argv, &i, "rlock run", NULL,
                                "--kill-after", &v)) != 0) {
            if (r < 0)
                return EXIT_USAGE;
            if (parse_duration(v, &kill_after_ms) != 0) {
                fprintf(stderr, "rlock run: bad duration '%s' for %s\n", v,
                        cli_last_opt);
                return EXIT_USAGE;
            }
        } else if ((r = cli_opt(argc, argv, &i, "rlock run", "-E",
                                "--conflict-exit-code", &v)) != 0) {
            long n;
            if (r < 0)
                return EXIT_USAGE;
            if (parse_number(v, 0, 255, &n) != 0) {
                fprintf(stderr, "rlock run: %s takes a number from 0 to 255\n",
                        cli_last_opt);
                return EXIT_USAGE;
            }
            conflict = (int)n;
        } else if ((r = cli_opt(argc, argv, &i, "rlock run", NULL,
                                "--layout", &v)) != 0) {
            if (r < 0)
                return EXIT_USAGE;
            if (parse_layout(v, &layout) != 0) {
                fprintf(stderr, "rlock run: --layout takes native, "
                                "redisson or token\n");
                return EXIT_USAGE;
            }
        } else if ((r = cli_opt(argc, argv, &i, "rlock run", NULL,
                                "--on-lost", &v)) != 0) {
            if (r < 0)
                return EXIT_USAGE;
            if (strcmp(v, "kill") == 0)
                kill_on_lost = 1;
            else if (strcmp(v, "ignore") == 0)
                kill_on_lost = 0;
            else {
                fprintf(stderr, "rlock run: --on-lost takes kill or ignore\n");
                return EXIT_USAGE;
            }
        } else if ((r = cli_flag(argv, &i, "rlock run", "-n",
                                 "--nonblock")) != 0) {
            if (r < 0)
                return EXIT_USAGE;
            h.nonblock = 1;
        } else if ((r = cli_flag(argv, &i, "rlock run", "-q", "--quiet")) !=
                   0) {
            if (r < 0)
                return EXIT_USAGE;
            quiet = 1;
        } else if ((r = cli_flag(argv, &i, "rlock run", "-v", "--verbose")) !=
                   0) {
            if (r < 0)
                return EXIT_USAGE;
            cli->verbose = 1;
        } else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "rlock run: unknown option %s\n", a);
            return EXIT_USAGE;
        } else if (!name) {
            name = a;
            i++;
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
    safe_text(name, sname, sizeof sname);
    safe_text(cmd[0], scmd, sizeof scmd);
    /* The lease the renewals keep: if rlock run dies, the keeper stops
     * the tree within a third of it, long before it could end (a fixed
     * lease also bounds it by what is left: fixed_lease_end). */
    renew_lease_ms = lease_ms > 0 ? lease_ms : cli_watchdog_lease_ms();
    grace_ms = renew_lease_ms / 3 < kill_after_ms ? renew_lease_ms / 3
                                                  : kill_after_ms;

    /* Before any thread or child exists: every signal we handle now
     * reaches only the signalfd. A signal whose disposition is "ignore"
     * (as a shell sets it for background jobs) would be discarded before
     * reaching it, so take the default disposition for ourselves, and give
     * COMMAND back what we were given. */
    handled_signals(&sigs);
    for (i = 1; i < NSIG; i++) {
        struct sigaction dfl;
        if (!sigismember(&sigs, i) || i == SIGCHLD)
            continue;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        if (sigaction(i, &dfl, &given[nsigs]) == 0)
            given_sigs[nsigs++] = i;
    }
    sigprocmask(SIG_BLOCK, &sigs, &old);
    signal(SIGPIPE, SIG_IGN);
    env = command_env(name, cli->url_bare, own_env);
    spec.argv = cmd;
    spec.env = env;
    spec.mask = &old;
    spec.sigs = given_sigs;
    spec.disp = given;
    spec.nsigs = nsigs;
    r = env ? tree_fork(&tree, &spec) : -1;
    free(env); /* the keeper has its copy; of the strings, these are ours */
    for (i = 0; i < 3; i++)
        free(own_env[i]);
    if (r != 0) {
        fprintf(stderr, "rlock run: cannot start: %s\n", strerror(errno));
        return EXIT_OSERR;
    }
    sfd = signalfd(-1, &sigs, SFD_CLOEXEC);
    if (sfd < 0 || pipe2(lost_pipe, O_CLOEXEC | O_NONBLOCK) != 0 ||
        pipe2(h.done_pipe, O_CLOEXEC) != 0 ||
        pipe2(h.release_pipe, O_CLOEXEC) != 0) {
        fprintf(stderr, "rlock run: %s\n", strerror(errno));
        tree_close(&tree);
        return EXIT_OSERR;
    }
    if (!(c = cli_open(cli, &code))) {
        tree_close(&tree);
        return code;
    }
    rlock_mutex_opts_init(&mo);
    mo.lease_ms = lease_ms;
    mo.on_lost = on_lost;
    mo.layout = layout;
    h.m = rlock_mutex_new(c, name, &mo, &err);
    if (h.m && !(h.o = rlock_owner_new(&err))) {
        rlock_mutex_free(h.m);
        rlock_owner_free(h.o);
        h.m = NULL;
    }
    if (!h.m) {
        cli_error(cli, c, name, err);
        rlock_client_close(c);
        tree_close(&tree);
        return exit_code_for(err);
    }
    if (pthread_create(&th, NULL, holder_main, &h) != 0) {
        fprintf(stderr, "rlock run: cannot start a thread\n");
        tree_close(&tree);
        return EXIT_OSERR;
    }

    /* Wait for the lock, or for a signal that says give up. */
    for (;;) {
        struct pollfd p[2] = {{h.done_pipe[0], POLLIN, 0}, {sfd, POLLIN, 0}};
        struct signalfd_siginfo si;
        if (poll(p, 2, -1) < 0)
            continue; /* EINTR; nothing else is expected of two pipes */
        if (p[0].revents) {
            holder_reported(&h);
            break;
        }
        if (p[1].revents && read(sfd, &si, sizeof si) == sizeof si &&
            is_stop_signal((int)si.ssi_signo)) {
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
            holder_reported(&h);
            if (h.rc == RLOCK_OK)
                release(&h, th);
            else
                pthread_join(th, NULL);
            fprintf(stderr,
                    "rlock run: %s: interrupted by %s before the "
                    "command started\n",
                    sname, strsignal((int)si.ssi_signo));
            rlock_mutex_free(h.m);
            rlock_owner_free(h.o);
            rlock_client_close(c);
            tree_close(&tree);
            return 128 + (int)si.ssi_signo;
        }
        /* Any other signal before COMMAND exists: nothing to pass it to. */
    }
    if (h.rc != RLOCK_OK) {
        pthread_join(th, NULL);
        if (h.gave_up) {
            if (quiet)
                ; /* -q: a conflict is said by the exit status alone */
            else if (h.nonblock)
                fprintf(stderr, "rlock run: %s is held by another owner\n",
                        sname);
            else
                fprintf(stderr, "rlock run: %s not obtained within %s\n", sname,
                        wait_s);
            code = conflict;
        } else if (h.rc == RLOCK_ELOST) {
            /* Taken, then lost before the call returned it or before its
             * token came: the lease ran out (--lease 1ms, a slow round
             * trip) or the lock was taken from it, before COMMAND could
             * start, as below. */
            fprintf(stderr,
                    "rlock run: lock %s: its lease ended too soon to start "
                    "%s (%s); not started\n",
                    sname, scmd, h.errmsg);
            code = EXIT_LOST;
        } else {
            cli_error_detail(cli, name, h.rc, h.errmsg);
            code = exit_code_for(h.rc);
        }
        rlock_mutex_free(h.m);
        rlock_owner_free(h.o);
        rlock_client_close(c);
        tree_close(&tree);
        return code;
    }

    /* COMMAND never starts with a lease that has run out, or would before
     * it could do anything (--lease 1ms): the keeper would stop it at
     * once. */
    left_ms = 0;
    if (rlock_mutex_lease_left_as(h.m, h.o, &left_ms) != RLOCK_OK ||
        left_ms < START_LEASE_MIN_MS) {
        fprintf(stderr,
                "rlock run: lock %s: its lease (%lld ms left) ends too soon "
                "to start %s; not started\n",
                sname, (long long)left_ms, scmd);
        tree_close(&tree);
        release(&h, th);
        rlock_mutex_free(h.m);
        rlock_owner_free(h.o);
        rlock_client_close(c);
        return EXIT_LOST;
    }
    orphan_until = -1;
    if (lease_ms > 0)
        orphan_until = fixed_lease_end(&h, lease_ms, cli->command_timeout_ms);
    /* With --on-lost ignore the caller wants COMMAND to go on without the
     * lock: the keeper is not told where the lease ends. */
    if (kill_on_lost)
        said_end = tell_lease(&tree, &h, -1, &left_ms);
    if (tree_start(&tree, h.token, grace_ms, orphan_until) != 0) {
        fprintf(stderr, "rlock run: cannot start %s: the keeper is gone\n",
                scmd);
        keeper_gone = 1;
    }

    /* COMMAND runs. Pass signals on; watch for the end of the whole tree
     * and for a loss. */
    while (!keeper_gone) {
        struct pollfd p[3] = {{sfd, POLLIN, 0},
                              {lost_pipe[0], POLLIN, 0},
                              {tree.rep, POLLIN, 0}};
        /* A tenth of what is left (a lease handed over short is renewed
         * soon), at most LEASE_LOOK_MAX_MS. */
        int look = (int)(left_ms / 10 < LEASE_LOOK_MAX_MS ? left_ms / 10
                                                          : LEASE_LOOK_MAX_MS);
        if (poll(p, 3, look > 5 ? look : 5) < 0 && errno != EINTR)
            break;
        /* After each renewal, the keeper hears where the lease ends. */
        if (!lost && kill_on_lost)
            said_end = tell_lease(&tree, &h, said_end, &left_ms);
        if (p[0].revents) {
            struct signalfd_siginfo si;
            if (read(sfd, &si, sizeof si) == sizeof si &&
                si.ssi_signo != SIGCHLD) {
                int sig = (int)si.ssi_signo;
                if (is_stop_signal(sig)) {
                    /* The whole tree, then SIGKILL for what is left after
                     * --kill-after; the lock is released when none is. */
                    tree_stop(&tree, sig, kill_after_ms);
                } else if (sig != SIGTTIN && sig != SIGTTOU) {
                    tree_signal(&tree, sig);
                }
            }
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
                        sname, kill_on_lost ? "; stopping the command" : "");
                if (kill_on_lost) {
                    tree_stop(&tree, SIGTERM, kill_after_ms);
                }
            }
        }
        if (p[2].revents) {
            int st = 0;
            switch (tree_read(&tree, &st)) {
            case TREE_COMMAND_ENDED:
                status = st;
                ended = 1;
                break;
            case TREE_COMMAND_STOPPED:
                stop_as_a_job(&tree, st);
                break;
            case TREE_LEASE_ENDING:
                if (!lost) {
                    lost = 1;
                    fprintf(stderr,
                            "rlock run: the lease of lock %s was ending with "
                            "no renewal (a fixed lease, rlock run stopped, "
                            "or Redis out of reach); stopping the command\n",
                            sname);
                }
                break;
            case TREE_EMPTY:
                goto tree_done;
            case TREE_GONE:
                keeper_gone = 1;
                break;
            default:
                break;
            }
        }
    }
    if (keeper_gone) {
        /* The keeper was killed: COMMAND had SIGKILL from the kernel, and
         * the rest of the tree is ours now. None may outlive the lock. */
        fprintf(stderr,
                "rlock run: the process watching %s was killed; "
                "stopping what is left of it\n",
                scmd);
        tree_reap_orphans(&tree);
        if (!ended)
            status = EXIT_SOFTWARE << 8;
    }
tree_done:
    tree_close(&tree);
    release(&h, th);
    if (h.unlock_rc == RLOCK_ELOST && !lost) {
        lost = 1;
        fprintf(stderr,
                "rlock run: lock %s was lost while the command ran "
                "(found at release)\n",
                sname);
    } else if (h.unlock_rc != RLOCK_OK && h.unlock_rc != RLOCK_ELOST) {
        /* RLOCK_ENOTIFY too: released, the waiters not told (an ACL
         * without PUBLISH); said, and the exit status stays COMMAND's. */
        cli_error_detail(cli, "release", h.unlock_rc, h.errmsg);
    }
    rlock_mutex_free(h.m);
    rlock_owner_free(h.o);
    rlock_client_close(c);
    if (lost && kill_on_lost)
        return EXIT_LOST;
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return WEXITSTATUS(status);
}
