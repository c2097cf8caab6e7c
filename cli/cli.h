/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * rlock(1): shared declarations of the tool. The tool uses only the public
 * rlock API, as curl's tool uses only libcurl's.
 */
#ifndef RLOCK_CLI_H
#define RLOCK_CLI_H

#include <stdint.h>
#include <stdio.h>

#include <rlock/rlock.h>

/* Exit codes (documented in the README and rlock(1)). */
#define EXIT_CONFLICT_DEFAULT 1 /* lock not obtained (flock(1)'s) */
#define EXIT_USAGE 64           /* EX_USAGE: bad arguments or URL */
#define EXIT_DATAERR 65         /* EX_DATAERR: the key is not a lock */
#define EXIT_UNAVAILABLE 69     /* EX_UNAVAILABLE: Redis unreachable */
#define EXIT_SOFTWARE 70        /* EX_SOFTWARE: internal error */
#define EXIT_OSERR 71           /* EX_OSERR: fork, pipe, ... failed */
#define EXIT_PROTOCOL 76        /* EX_PROTOCOL: Redis error reply */
#define EXIT_NOPERM 77          /* EX_NOPERM: authentication refused */
#define EXIT_LOST 79            /* the lock was lost while COMMAND ran */
#define EXIT_CANNOT_EXEC 126    /* COMMAND found but not executable */
#define EXIT_NOT_FOUND 127      /* COMMAND not found */

/* rlock run --kill-after: from SIGTERM to SIGKILL. */
#define KILL_AFTER_DEFAULT_MS 5000
/* COMMAND starts only with at least this much lease left. */
#define START_LEASE_MIN_MS 100

/* The longest URL taken, with its NUL (from --redis or the environment):
 * a longer one is a usage error, never cut short. */
#define CLI_URL_MAX 4096

struct cli {
    const char *prog;
    const char *url; /* as given (never printed: see url_shown) */
    /* The URL with its password hidden ("***" may be longer than it). */
    char url_shown[CLI_URL_MAX + 3];
    char url_bare[CLI_URL_MAX]; /* without its password (RLOCK_URL) */
    int url_given;         /* --redis was given */
    /* TLS, as redis-cli's flags (rlock_client_opts' tls fields). */
    int tls, tls_insecure;
    const char *tls_ca, *tls_cert, *tls_key, *tls_sni;
    /* Credentials that override the URL's: --user, and the password from
     * --password-file or $RLOCK_PASSWORD (NULL: the URL's). */
    const char *user, *password;
    int command_timeout_ms; /* the client's, once cli_open has opened it */
    int verbose;            /* -v: the client's events on stderr (cli_open) */
};

/* Parses "250ms", "30s", "5m", "1h" or plain seconds ("2.5") into ms:
 * digits, an optional fraction, an optional unit. Returns 0, or -1 for
 * anything else (signs, spaces, exponents, hex, huge values). */
int parse_duration(const char *s, int64_t *ms);

/* Parses a decimal integer in [lo, hi] (option values such as -E 3 or
 * --workers 8). Returns 0, or -1 for anything else. */
int parse_number(const char *s, long lo, long hi, long *out);

/* Options of the form "-x VALUE", "--name VALUE" and "--name=VALUE"
 * (short_name may be NULL). If argv[*i] is that option: sets *value,
 * advances *i past it and returns 1; 0 if it is another argument; -1 (with
 * a line on stderr naming cmd) if the value is missing or empty. */
int cli_opt(int argc, char **argv, int *i, const char *cmd,
            const char *short_name, const char *long_name,
            const char **value);
/* The name of the option cli_opt last matched, as spelled ("-w" or
 * "--wait"), for messages about its value. */
extern const char *cli_last_opt;

/* A flag "-x" or "--name": 1 (i advanced), 0 if not it, -1 (said) if
 * given as "--name=VALUE". */
int cli_flag(char **argv, int *i, const char *cmd, const char *short_name,
             const char *long_name);

/* Picks the URL (--redis, $RLOCK_URL, $REDIS_URL, default) and fills
 * url_shown and url_bare. 0, or -1 (said on stderr) if the URL is
 * CLI_URL_MAX bytes or longer. */
int cli_pick_url(struct cli *cli, const char *given);

/* Where the password of a URL is: [*from, *to) between "user:" and '@'
 * (1), or the whole of a userinfo without a colon, which may be a password
 * alone ("redis://secret@host", 2); 0 if it has none. */
int url_password_span(const char *url, size_t *from, size_t *to);
/* The value of the first query parameter of url rlock does not know (a
 * secret put in the wrong place, password=...) that starts at or after
 * start: [*from, *to). 1 if there is one. */
int url_query_secret(const char *url, size_t start, size_t *from, size_t *to);

/* The URL without its password ("redis://u:pw@h" -> "redis://u@h",
 * "redis://:pw@h" -> "redis://h"), or unchanged if it has none; len >
 * strlen(url) always suffices. */
void url_strip_password(const char *url, char *out, size_t len);

/* The monotonic clock in milliseconds. */
int64_t mono_ms(void);

/* The renewal lease: $RLOCK_WATCHDOG_LEASE if valid, else 30 s. */
int64_t cli_watchdog_lease_ms(void);

/* Opens a client or prints one line naming the URL and the cause, and
 * returns NULL with *exit_code set. */
rlock_client *cli_open(struct cli *cli, int *exit_code);

/* With -v (cli->verbose), prints c's events on stderr as they happen,
 * one line each (events.c); cli_open calls it. */
void cli_watch_events(struct cli *cli, rlock_client *c);

/* Parses a --layout value ("native", "redisson" or "token") into *layout;
 * 0 or -1. */
int parse_layout(const char *s, int *layout);

/* Maps an rlock error code to the tool's exit code. */
int exit_code_for(int rc);

/* Length of the valid UTF-8 sequence at s (1 to 4 bytes), or 0; s is
 * NUL-terminated, or has rem bytes. */
size_t utf8_seq(const unsigned char *s);
size_t utf8_seq_len(const unsigned char *s, size_t rem);

/* Writes text from Redis or the command line for a terminal: control
 * bytes and bytes that are not UTF-8 as \xNN, a backslash as \\. */
void put_safe(FILE *out, const char *str);
/* The same for len bytes that may hold any byte (a NUL as \x00). */
void put_safe_len(FILE *out, const char *str, size_t len);
/* The columns put_safe_len's output of str takes (a character one). */
size_t safe_width(const char *str, size_t len);
/* put_safe_len's output into buf (buflen bytes), cut between characters
 * to at most cols columns, ending in "..." when cut. Returns buf. */
const char *safe_cols(const char *str, size_t len, size_t cols, char *buf,
                      size_t buflen);
/* A JSON string, always valid UTF-8 whatever the bytes: controls as
 * \u00NN, a byte that is not UTF-8 as the text \\xNN (as put_safe shows
 * it). */
void json_string(FILE *out, const char *str);
void json_string_len(FILE *out, const char *str, size_t len);

/* The same escaping into buf (len bytes, NUL-terminated; what does not fit
 * is cut between characters and ends in "..."). Returns buf, for printf.
 * 4 * strlen(str) + 1 bytes always suffice. */
const char *safe_text(const char *str, char *buf, size_t len);

/* Prints "rlock: <URL>: <what> (<strerror>): <detail>", what and detail
 * escaped as put_safe does; detail is c's message (cli_error), or given. */
void cli_error(struct cli *cli, rlock_client *c, const char *what, int rc);
void cli_error_detail(struct cli *cli, const char *what, int rc,
                      const char *detail);

int cmd_run(struct cli *cli, int argc, char **argv);
int cmd_status(struct cli *cli, int argc, char **argv);
int cmd_unlock(struct cli *cli, int argc, char **argv);
int cmd_ping(struct cli *cli, int argc, char **argv);
int cmd_list(struct cli *cli, int argc, char **argv);
int cmd_top(struct cli *cli, int argc, char **argv);
int cmd_demo(struct cli *cli, int argc, char **argv);

/* Usage texts (help.c); they match rlock(1). */
void usage_main(FILE *out);
int usage_for(const char *cmd, FILE *out); /* 0, or -1 if unknown */

#endif
