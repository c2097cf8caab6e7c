/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The keeper of COMMAND's process tree: see tree.h for the picture.
 *
 * The two processes speak in fixed-size messages, each written by one
 * write(2) of less than PIPE_BUF bytes, so each arrives whole.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "tree.h"

struct ctl_msg {
    char op; /* 'S' start, 'K' signal, 'T' stop, 'L' the lease's end */
    int sig;
    int64_t ms;
    int64_t until; /* 'S': the orphan's last moment (tree_clock_ms), or -1 */
    uint64_t token;
};

struct rep_msg {
    char op; /* 'P' started, 'C' COMMAND ended, 'E' tree empty, 'Z'
                COMMAND stopped by job control (status: the signal), 'X'
                the lease was ending: the keeper stops the tree */
    int status;
    pid_t pid;
};

int64_t tree_clock_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int write_all(int fd, const void *p, size_t len)
{
    ssize_t n;

    do
        n = write(fd, p, len);
    while (n < 0 && errno == EINTR);
    return n == (ssize_t)len ? 0 : -1;
}

/* One report to rlock run (padding zeroed: it crosses a pipe). */
static void send_rep(int fd, char op, int status, pid_t pid)
{
    struct rep_msg r;

    memset(&r, 0, sizeof r);
    r.op = op;
    r.status = status;
    r.pid = pid;
    write_all(fd, &r, sizeof r);
}

/* The parent of a process, from /proc/PID/stat ("pid (comm) state ppid
 * ..."; comm may hold spaces and parentheses, so the last ')' ends it). */
static pid_t parent_of(const char *pid)
{
    char path[64], buf[512], *close;
    FILE *f;
    size_t n;
    long ppid;

    snprintf(path, sizeof path, "/proc/%s/stat", pid);
    if (!(f = fopen(path, "re")))
        return -1;
    n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    close = strrchr(buf, ')');
    if (!close || sscanf(close + 1, " %*c %ld", &ppid) != 1)
        return -1;
    return (pid_t)ppid;
}

int tree_kill_descendants(pid_t root, int sig)
{
    struct proc {
        pid_t pid, ppid;
        int mine;
    } *ps = NULL;
    size_t n = 0, cap = 0, i;
    struct dirent *d;
    DIR *dir = opendir("/proc");
    int found = 0, grew;

    if (!dir)
        return -1;
    while ((d = readdir(dir)) != NULL) {
        pid_t ppid;
        if (d->d_name[0] < '1' || d->d_name[0] > '9')
            continue;
        if ((ppid = parent_of(d->d_name)) < 0)
            continue; /* gone meanwhile */
        if (n == cap) {
            struct proc *more = realloc(ps, (cap = cap ? cap * 2 : 256) *
                                                sizeof *ps);
            if (!more)
                break;
            ps = more;
        }
        ps[n].pid = (pid_t)atol(d->d_name);
        ps[n].ppid = ppid;
        ps[n++].mine = 0;
    }
    closedir(dir);
    /* Whatever has root, or one of root's descendants, as its parent;
     * passes until nothing more is found (a listing is not in tree
     * order). */
    do {
        grew = 0;
        for (i = 0; i < n; i++) {
            size_t j;
            if (ps[i].mine)
                continue;
            if (ps[i].ppid == root) {
                ps[i].mine = grew = 1;
                continue;
            }
            for (j = 0; j < n; j++)
                if (ps[j].mine && ps[j].pid == ps[i].ppid) {
                    ps[i].mine = grew = 1;
                    break;
                }
        }
    } while (grew);
    for (i = 0; i < n; i++)
        if (ps[i].mine && ps[i].pid != root) {
            kill(ps[i].pid, sig);
            found++;
        }
    free(ps);
    return found;
}

/* ---- the keeper --------------------------------------------------------- */

/* Every process of the tree: COMMAND's group (what the tree did not move
 * elsewhere) and every descendant of the keeper (what it did). */
static void signal_tree(pid_t group, int sig)
{
    if (group > 0)
        kill(-group, sig);
    tree_kill_descendants(getpid(), sig);
}

static void stop_tree(pid_t group, int sig)
{
    signal_tree(group, sig);
    if (sig != SIGKILL && sig != SIGCONT)
        signal_tree(group, SIGCONT); /* a stopped process would not see it */
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

/* Starts COMMAND as the keeper's child, in a group of its own (and with
 * the terminal, if rlock run had it). */
static pid_t start_command(const struct tree *t, const struct tree_spec *sp,
                           uint64_t token)
{
    static char tv[40];
    size_t n = 0, i;
    char **env;
    pid_t keeper = getpid(), pid;

    while (sp->env[n])
        n++;
    if (!(env = calloc(n + 2, sizeof *env)))
        return -1;
    for (i = 0; i < n; i++)
        env[i] = sp->env[i];
    snprintf(tv, sizeof tv, "RLOCK_TOKEN=%llu", (unsigned long long)token);
    env[n] = tv;
    pid = fork();
    if (pid == 0) {
        int k;
        setpgid(0, 0);
        if (t->tty >= 0)
            tcsetpgrp(t->tty, getpid()); /* SIGTTOU is blocked */
        /* If the keeper dies, so does COMMAND; the rest of the tree then
         * falls to rlock run, a subreaper. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != keeper)
            _exit(EXIT_SOFTWARE);
        for (k = 0; k < sp->nsigs; k++)
            sigaction(sp->sigs[k], &sp->disp[k], NULL);
        signal(SIGPIPE, SIG_DFL);
        sigprocmask(SIG_SETMASK, sp->mask, NULL);
        execvpe(sp->argv[0], sp->argv, env);
        child_fail(sp->argv[0], errno);
    }
    if (pid > 0)
        setpgid(pid, pid); /* so that the group exists when we return */
    free(env);
    return pid;
}

/* Before the lease ends (in tree_clock_ms), the tree gets SIGTERM this
 * long before (the grace rlock run gave, at most) and SIGKILL this long
 * before, so that it is gone when the lock may be someone else's. */
#define LEASE_KILL_MARGIN_MS 50

static int64_t earlier(int64_t a, int64_t b)
{
    return a < 0 ? b : b < 0 ? a : a < b ? a : b;
}

static void keeper_main(struct tree *t, const struct tree_spec *sp)
{
    sigset_t chld;
    pid_t command = 0;
    int64_t kill_at = -1, orphan_grace_ms = 0, orphan_until = -1;
    int64_t lease_end = -1; /* as rlock run last said, or -1 */
    int64_t term_grace = 0; /* SIGTERM this long before lease_end */
    int sfd, started = 0, termed = 0;

    signal(SIGPIPE, SIG_IGN); /* rlock run gone: its pipe says so */
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD); /* blocked, as every signal rlock handles */
    sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sfd < 0)
        _exit(EXIT_OSERR);
    for (;;) {
        struct pollfd p[2] = {{t->ctl, POLLIN, 0}, {sfd, POLLIN, 0}};
        struct signalfd_siginfo si;
        int64_t due = kill_at, now;
        int timeout = -1;

        /* The lease's end, on the keeper's own clock: whatever state
         * rlock run is in (stopped, hung, unable to renew), no process of
         * the tree outlives it. */
        if (started && lease_end >= 0) {
            due = earlier(due, lease_end - LEASE_KILL_MARGIN_MS);
            if (!termed)
                due = earlier(due, lease_end - term_grace);
        }
        if (due >= 0) {
            now = tree_clock_ms();
            timeout = (int)(due > now ? due - now : 0);
        }
        if (poll(p, 2, timeout) < 0 && errno != EINTR)
            _exit(EXIT_OSERR);
        if (t->ctl >= 0 && p[0].revents) {
            struct ctl_msg m;
            ssize_t n = read(t->ctl, &m, sizeof m);
            if (n == (ssize_t)sizeof m && m.op == 'L') {
                /* The grace, and never more than a third of what is left
                 * now: a renewal comes when a third of the lease has
                 * passed, so a lease just handed over short (the rest of
                 * a waiter's place) is renewed before that. */
                lease_end = m.until;
                term_grace = (lease_end - tree_clock_ms()) / 3;
                if (term_grace > orphan_grace_ms || !started)
                    term_grace = orphan_grace_ms;
            } else if (n == (ssize_t)sizeof m && m.op == 'S' && !started) {
                orphan_grace_ms = m.ms;
                orphan_until = m.until;
                if (lease_end >= 0) {
                    term_grace = (lease_end - tree_clock_ms()) / 3;
                    if (term_grace > orphan_grace_ms)
                        term_grace = orphan_grace_ms;
                }
                command = start_command(t, sp, m.token);
                if (command < 0)
                    _exit(EXIT_OSERR);
                started = 1;
                send_rep(t->rep, 'P', 0, command);
            } else if (n == (ssize_t)sizeof m && m.op == 'K') {
                signal_tree(command, m.sig);
            } else if (n == (ssize_t)sizeof m && m.op == 'T') {
                stop_tree(command, m.sig);
                if (kill_at < 0 || tree_clock_ms() + m.ms < kill_at)
                    kill_at = tree_clock_ms() + m.ms;
            } else if (n == 0 || (n < 0 && errno != EINTR)) {
                /* rlock run is gone: the lock will not be renewed, and a
                 * fixed lease may have little left. */
                int64_t at = tree_clock_ms() + orphan_grace_ms;
                close(t->ctl);
                t->ctl = -1;
                if (!started)
                    _exit(0);
                stop_tree(command, SIGTERM);
                if (orphan_until >= 0 && orphan_until < at)
                    at = orphan_until;
                if (kill_at < 0 || at < kill_at)
                    kill_at = at;
            }
        }
        while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si)
            ;
        now = tree_clock_ms();
        if (started && lease_end >= 0 && !termed &&
            now >= lease_end - term_grace) {
            /* Nothing renewed the lease in time: the tree stops now, and
             * is killed just before the lease ends. */
            termed = 1;
            send_rep(t->rep, 'X', 0, 0);
            stop_tree(command, SIGTERM);
        }
        if (started && lease_end >= 0 && termed)
            kill_at = earlier(kill_at, lease_end - LEASE_KILL_MARGIN_MS);
        if (kill_at >= 0 && now >= kill_at) {
            /* Again every 100 ms while anything is left: what was being
             * forked as the last round ran is caught by the next. */
            stop_tree(command, SIGKILL);
            kill_at = tree_clock_ms() + 100;
        }
        for (;;) {
            int status;
            pid_t pid = waitpid(-1, &status, WNOHANG | WUNTRACED);
            if (pid > 0 && pid == command && WIFSTOPPED(status)) {
                /* ^Z at the terminal, or a read or write from the
                 * background: rlock run stops as a job would, so that the
                 * shell that started it gets its prompt back. */
                int sig = WSTOPSIG(status);
                if (sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU)
                    send_rep(t->rep, 'Z', sig, pid);
            } else if (pid > 0 && WIFSTOPPED(status)) {
                /* another process of the tree stopped: not ours to act on */
            } else if (pid > 0 && pid == command) {
                send_rep(t->rep, 'C', status, pid);
            } else if (pid < 0 && errno == ECHILD && started) {
                /* No child, so no descendant: orphans come to us. */
                if (t->tty >= 0)
                    tcsetpgrp(t->tty, t->tty_pgrp);
                send_rep(t->rep, 'E', 0, 0);
                _exit(0);
            } else if (pid <= 0) {
                break;
            }
        }
    }
}

/* ---- rlock run's side --------------------------------------------------- */

/* The terminal among 0, 1, 2 whose foreground is our group: then COMMAND
 * gets it, as a shell gives it to a job, so that it may read from it. */
static void find_tty(struct tree *t)
{
    int fd;

    t->tty = -1;
    for (fd = 0; fd <= 2; fd++)
        if (isatty(fd) && tcgetpgrp(fd) == getpgrp()) {
            t->tty = fd;
            t->tty_pgrp = getpgrp();
            return;
        }
}

int tree_fork(struct tree *t, const struct tree_spec *spec)
{
    int ctl[2], rep[2];

    memset(t, 0, sizeof *t);
    t->ctl = t->rep = -1;
    find_tty(t);
    if (pipe2(ctl, O_CLOEXEC) != 0)
        return -1;
    if (pipe2(rep, O_CLOEXEC) != 0) {
        close(ctl[0]);
        close(ctl[1]);
        return -1;
    }
    /* Orphans of the tree come to us if the keeper dies. */
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    t->keeper = fork();
    if (t->keeper == 0) {
        /* Out of our process group, which a job-control kill or timeout(1)
         * signals as a whole: the keeper must outlive us to stop the tree
         * (tree.h). It never reads the terminal, and it hands the terminal
         * back with SIGTTOU blocked, as every signal we handle is. */
        setpgid(0, 0);
        close(ctl[1]);
        close(rep[0]);
        t->ctl = ctl[0];
        t->rep = rep[1];
        keeper_main(t, spec);
        _exit(EXIT_SOFTWARE);
    }
    close(ctl[0]);
    close(rep[1]);
    if (t->keeper > 0)
        setpgid(t->keeper, t->keeper); /* done, whichever of us runs first */
    if (t->keeper < 0) {
        close(ctl[1]);
        close(rep[0]);
        t->keeper = 0;
        return -1;
    }
    t->ctl = ctl[1];
    t->rep = rep[0];
    return 0;
}

static int send_ctl(struct tree *t, char op, int sig, int64_t ms, int64_t until,
                    uint64_t token)
{
    struct ctl_msg m;

    if (t->ctl < 0)
        return -1;
    memset(&m, 0, sizeof m);
    m.op = op;
    m.sig = sig;
    m.ms = ms;
    m.until = until;
    m.token = token;
    return write_all(t->ctl, &m, sizeof m);
}

int tree_start(struct tree *t, uint64_t token, int64_t orphan_grace_ms,
               int64_t orphan_until)
{
    return send_ctl(t, 'S', 0, orphan_grace_ms, orphan_until, token);
}

int tree_signal(struct tree *t, int sig)
{
    return send_ctl(t, 'K', sig, 0, -1, 0);
}

int tree_stop(struct tree *t, int sig, int64_t grace_ms)
{
    return send_ctl(t, 'T', sig, grace_ms, -1, 0);
}

int tree_lease(struct tree *t, int64_t end)
{
    return send_ctl(t, 'L', 0, 0, end, 0);
}

int tree_read(struct tree *t, int *status)
{
    struct rep_msg r;
    ssize_t n;

    do
        n = read(t->rep, &r, sizeof r);
    while (n < 0 && errno == EINTR);
    if (n != (ssize_t)sizeof r) {
        if (t->keeper > 0 && waitpid(t->keeper, NULL, 0) == t->keeper)
            t->keeper = 0;
        return TREE_GONE;
    }
    switch (r.op) {
    case 'P':
        t->command = r.pid;
        return TREE_STARTED;
    case 'C':
        *status = r.status;
        return TREE_COMMAND_ENDED;
    case 'Z':
        *status = r.status;
        return TREE_COMMAND_STOPPED;
    case 'X':
        return TREE_LEASE_ENDING;
    case 'E':
        if (t->keeper > 0 && waitpid(t->keeper, NULL, 0) == t->keeper)
            t->keeper = 0;
        t->tty = -1; /* given back by the keeper */
        return TREE_EMPTY;
    default:
        return TREE_NONE;
    }
}

void tree_reap_orphans(struct tree *t)
{
    for (;;) {
        struct timespec pause = {0, 10 * 1000 * 1000};
        pid_t pid;

        if (t->command > 0)
            kill(-t->command, SIGKILL);
        tree_kill_descendants(getpid(), SIGKILL);
        while ((pid = waitpid(-1, NULL, WNOHANG)) > 0)
            if (pid == t->keeper)
                t->keeper = 0;
        if (pid < 0 && errno == ECHILD)
            return;
        nanosleep(&pause, NULL);
    }
}

void tree_close(struct tree *t)
{
    if (t->ctl >= 0) {
        close(t->ctl);
        t->ctl = -1;
    }
    if (t->keeper > 0) {
        while (waitpid(t->keeper, NULL, 0) < 0 && errno == EINTR)
            ;
        t->keeper = 0;
    }
    if (t->rep >= 0) {
        close(t->rep);
        t->rep = -1;
    }
    if (t->tty >= 0 && t->command > 0) {
        /* Handed to COMMAND and not given back (the keeper was killed). */
        tcsetpgrp(t->tty, t->tty_pgrp); /* SIGTTOU is blocked */
    }
    t->tty = -1;
}
