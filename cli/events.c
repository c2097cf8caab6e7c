/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * -v: the client's events (rlock_client_set_event_cb), one line each on
 * stderr as they happen, the lock's name escaped as status prints it.
 */
#include <stdio.h>

#include "cli.h"

static const char *const type_names[] = {
    [RLOCK_EV_ACQUIRED] = "acquired",
    [RLOCK_EV_RELEASED] = "released",
    [RLOCK_EV_RENEWED] = "renewed",
    [RLOCK_EV_LOST] = "lost",
    [RLOCK_EV_WAITING] = "waiting",
    [RLOCK_EV_WAIT_TIMEOUT] = "wait-timeout",
    [RLOCK_EV_EXTENDED] = "extended",
    [RLOCK_EV_UNDO] = "undo",
    [RLOCK_EV_CONN_ERROR] = "connection-error",
    [RLOCK_EV_RECONNECT] = "reconnect",
    [RLOCK_EV_FAILOVER] = "failover",
    [RLOCK_EV_REDIRECT] = "redirect",
};

static const char *const causes[] = {"", "expired", "gone", "capped"};

/* The callback: runs on the thread of the call that caused the event, or
 * on a thread of the client's own; a line is written whole (stdio locks
 * the stream for each call, and flockfile holds it for the line). */
static void print_event(const rlock_event *ev, void *arg)
{
    const struct cli *cli = arg;
    const char *type =
        ev->type > 0 &&
                (size_t)ev->type < sizeof type_names / sizeof type_names[0]
            ? type_names[ev->type]
            : "event";
    size_t k;

    flockfile(stderr);
    fprintf(stderr, "%s: %s", cli->prog, type);
    if (ev->name) {
        /* Bytes after a NUL in the name are shown as \x00 too. */
        for (k = 0; k < ev->name_len && ev->name[k]; k++)
            ;
        fputs(" \"", stderr);
        put_safe(stderr, ev->name);
        if (k < ev->name_len)
            fputs("\\x00...", stderr);
        fputc('"', stderr);
    }
    if (ev->node && ev->node[0]) {
        fputs(" node=", stderr);
        put_safe(stderr, ev->node);
    }
    if (ev->type == RLOCK_EV_ACQUIRED)
        fprintf(stderr, " token=%llu count=%lld wait=%.3fms attempts=%lld%s",
                (unsigned long long)ev->token, (long long)ev->count,
                (double)ev->wait_us / 1000.0, (long long)ev->attempts,
                ev->flags & RLOCK_EVF_HANDED_OVER ? " handed-over" : "");
    if (ev->type == RLOCK_EV_RELEASED)
        fprintf(stderr, " count=%lld held=%.3fms", (long long)ev->count,
                (double)ev->hold_us / 1000.0);
    if (ev->type == RLOCK_EV_RENEWED || ev->type == RLOCK_EV_EXTENDED)
        fprintf(stderr, " lease=%lldms", (long long)ev->lease_ms);
    if (ev->type == RLOCK_EV_WAIT_TIMEOUT)
        fprintf(stderr, " waited=%.3fms attempts=%lld",
                (double)ev->wait_us / 1000.0, (long long)ev->attempts);
    if (ev->type == RLOCK_EV_LOST && ev->cause > 0 && ev->cause < 4)
        fprintf(stderr, " cause=%s held=%.3fms", causes[ev->cause],
                (double)ev->hold_us / 1000.0);
    if (ev->code)
        fprintf(stderr, " (%s)", rlock_strerror(ev->code));
    if (ev->detail && ev->detail[0]) {
        fputs(": ", stderr);
        put_safe(stderr, ev->detail);
    }
    fputc('\n', stderr);
    funlockfile(stderr);
}

void cli_watch_events(struct cli *cli, rlock_client *c)
{
    if (cli->verbose)
        rlock_client_set_event_cb(c, print_event, cli);
}
