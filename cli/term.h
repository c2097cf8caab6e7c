/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The terminal of a live view (rlock top), in plain ANSI: keys read one
 * at a time without echo, the view drawn on the alternate screen, and
 * the terminal given back as it was on every way out: a key that quits,
 * exit(), SIGINT, SIGTERM, SIGHUP, and ^Z (SIGTSTP), after which SIGCONT
 * takes it again. Signals reach the loop through a pipe, so nothing but
 * write(2) runs in a handler.
 */
#ifndef RLOCK_CLI_TERM_H
#define RLOCK_CLI_TERM_H

#include <stdint.h>

/* What term_wait saw. */
enum term_event {
    TERM_TIMEOUT, /* the time passed */
    TERM_KEY,     /* a key (in *key) */
    TERM_REDRAW,  /* the size changed, or the view came back after ^Z */
    TERM_QUIT     /* SIGINT, SIGTERM or SIGHUP (in *key): give up */
};

/* Takes the terminal: raw keys if stdin is one, the alternate screen and
 * no cursor if stdout is one; the signals above are caught. 0, or -1
 * (said). */
int term_open(void);
/* Gives the terminal back (keys, screen, cursor), at most once per
 * term_open; safe to call again and at exit. */
void term_restore(void);
/* The terminal's size (stdout's, else $LINES and $COLUMNS, else 24 by
 * 80). */
void term_size(int *rows, int *cols);
/* Waits for a key or a signal until until_ms (monotonic; 0: do not wait
 * at all), handling ^Z on the way. */
int term_wait(int64_t until_ms, int *key);
/* After TERM_QUIT: dies of the signal that asked, as if not caught. */
void term_die(int sig);

#endif
