/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The terminal of rlock top (term.h). No curses: the view needs a few
 * ANSI sequences (home, clear to the end of a line and of the screen,
 * the alternate screen, the cursor hidden, reverse video), which every
 * terminal emulator of the last thirty years knows, and a new library
 * dependency for them would weigh more than this file.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include "cli.h"
#include "term.h"

static int sig_pipe[2] = {-1, -1};
static struct termios saved;
static int keys_raw;   /* stdin is in raw mode (saved holds its settings) */
static int screen_alt; /* stdout shows the alternate screen */
static int opened;
static int exit_hooked;

static const int caught[] = {SIGINT,  SIGTERM, SIGHUP,
                             SIGTSTP, SIGCONT, SIGWINCH};

static void on_signal(int sig)
{
    int saved_errno = errno;
    unsigned char b = (unsigned char)sig;

    /* A full pipe already holds a wake-up: losing one is harmless. */
    if (write(sig_pipe[1], &b, 1) < 0) {
    }
    errno = saved_errno;
}

static void put(const char *s)
{
    size_t n = strlen(s);

    while (n > 0) {
        ssize_t w = write(STDOUT_FILENO, s, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        s += w;
        n -= (size_t)w;
    }
}

/* Raw keys and the alternate screen, as far as stdin and stdout are
 * terminals. */
static void take(void)
{
    if (isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &saved) == 0) {
        struct termios raw = saved;
        /* No line editing and no echo; ISIG stays, so that ^C and ^Z
         * still send their signals, which are caught. */
        raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
        raw.c_cc[VMIN] = 1;
        raw.c_cc[VTIME] = 0;
        if (tcsetattr(STDIN_FILENO, TCSAFLUSH, &raw) == 0)
            keys_raw = 1;
    }
    if (isatty(STDOUT_FILENO)) {
        put("\033[?1049h\033[?25l");
        screen_alt = 1;
    }
}

static void give_back(void)
{
    if (screen_alt) {
        put("\033[?25h\033[?1049l");
        screen_alt = 0;
    }
    if (keys_raw) {
        tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved);
        keys_raw = 0;
    }
}

void term_restore(void)
{
    if (opened)
        give_back();
}

int term_open(void)
{
    struct sigaction sa;
    size_t i;

    if (sig_pipe[0] < 0 && pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
        fprintf(stderr, "rlock top: pipe: %s\n", strerror(errno));
        return -1;
    }
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    for (i = 0; i < sizeof caught / sizeof caught[0]; i++)
        sigaction(caught[i], &sa, NULL);
    if (!exit_hooked) {
        /* exit() on an error path gives the terminal back too. */
        atexit(term_restore);
        exit_hooked = 1;
    }
    opened = 1;
    take();
    return 0;
}

void term_size(int *rows, int *cols)
{
    struct winsize ws;
    const char *l = getenv("LINES"), *c = getenv("COLUMNS");

    *rows = 24;
    *cols = 80;
    if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 &&
        ws.ws_row > 0 && ws.ws_col > 0) {
        *rows = ws.ws_row;
        *cols = ws.ws_col;
        return;
    }
    if (l && atoi(l) > 0)
        *rows = atoi(l);
    if (c && atoi(c) > 0)
        *cols = atoi(c);
}

/* ^Z: the terminal as it was, then stopped as the default action would;
 * when continued (fg), the view again. */
static void suspend(void)
{
    struct sigaction sa, old;

    give_back();
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTSTP, &sa, &old);
    raise(SIGTSTP);
    /* Here once continued. */
    sigaction(SIGTSTP, &old, NULL);
    take();
}

void term_die(int sig)
{
    struct sigaction sa;

    term_restore();
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, NULL);
    raise(sig);
    exit(128 + sig);
}

int term_wait(int64_t until_ms, int *key)
{
    for (;;) {
        struct pollfd p[2];
        int64_t left = until_ms ? until_ms - mono_ms() : 0;
        int n, timeout = left <= 0 ? 0 : left > 1000000 ? 1000000 : (int)left;
        unsigned char b;

        p[0].fd = sig_pipe[0];
        p[0].events = POLLIN;
        p[1].fd = keys_raw ? STDIN_FILENO : -1;
        p[1].events = POLLIN;
        n = poll(p, 2, timeout);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return TERM_TIMEOUT;
        if (p[0].revents & POLLIN) {
            while (read(sig_pipe[0], &b, 1) == 1) {
                if (b == SIGINT || b == SIGTERM || b == SIGHUP) {
                    *key = b;
                    return TERM_QUIT;
                }
                if (b == SIGTSTP) {
                    suspend();
                    return TERM_REDRAW;
                }
                /* SIGCONT (after a SIGSTOP, or a shell that reset the
                 * terminal) and SIGWINCH: draw again, in raw mode again. */
                if (b == SIGCONT && keys_raw) {
                    give_back();
                    take();
                }
                return TERM_REDRAW;
            }
        }
        if (p[1].revents) {
            unsigned char k;
            if ((p[1].revents & POLLIN) && read(STDIN_FILENO, &k, 1) == 1) {
                *key = k;
                return TERM_KEY;
            }
            /* End of input (or an error): keys are over, the view goes
             * on until a signal ends it. */
            tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved);
            keys_raw = 0;
        }
    }
}
