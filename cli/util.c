/*
 * The tool's small shared pieces: durations, the Redis URL and its
 * password, error lines and exit codes.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int parse_duration(const char *s, int64_t *ms)
{
    char *end;
    double v, scale = 1000;

    if (!s || !*s || *s == '-' || *s == '+' || strchr(s, ' '))
        return -1;
    errno = 0;
    v = strtod(s, &end);
    if (errno || end == s || !isfinite(v) || v < 0)
        return -1;
    if (strcmp(end, "ms") == 0)
        scale = 1;
    else if (strcmp(end, "s") == 0 || *end == '\0')
        scale = 1000;
    else if (strcmp(end, "m") == 0)
        scale = 60 * 1000;
    else if (strcmp(end, "h") == 0)
        scale = 3600 * 1000;
    else
        return -1;
    v *= scale;
    if (v > (double)RLOCK_MS_MAX)
        return -1;
    *ms = (int64_t)(v + 0.5);
    return 0;
}

/* redis://user:secret@host -> redis://user:***@host */
static void hide_password(const char *url, char *out, size_t len)
{
    const char *scheme = strstr(url, "://"), *at, *colon;

    snprintf(out, len, "%s", url);
    if (!scheme)
        return;
    at = strrchr(scheme + 3, '@');
    if (!at)
        return;
    colon = memchr(scheme + 3, ':', (size_t)(at - (scheme + 3)));
    if (!colon)
        return;
    snprintf(out, len, "%.*s***%s", (int)(colon + 1 - url), url, at);
}

void cli_pick_url(struct cli *cli, const char *given)
{
    const char *u = given;

    cli->url_given = given != NULL;
    if (!u)
        u = getenv("RLOCK_URL");
    if (!u || !*u)
        u = getenv("REDIS_URL");
    if (!u || !*u)
        u = "redis://127.0.0.1:6379";
    cli->url = u;
    hide_password(u, cli->url_shown, sizeof cli->url_shown);
}

int exit_code_for(int rc)
{
    switch (rc) {
    case RLOCK_OK: return 0;
    case RLOCK_EINVAL: return EXIT_USAGE;
    case RLOCK_ECONNECT:
    case RLOCK_EIO: return EXIT_UNAVAILABLE;
    case RLOCK_EAUTH: return EXIT_NOPERM;
    case RLOCK_EREDIS:
    case RLOCK_EPROTO: return EXIT_PROTOCOL;
    case RLOCK_ELOST: return EXIT_LOST;
    default: return EXIT_SOFTWARE;
    }
}

void cli_error(struct cli *cli, rlock_client *c, const char *what, int rc)
{
    const char *detail = rlock_client_errmsg(c);

    fprintf(stderr, "%s: %s: %s (%s)%s%s\n", cli->prog, cli->url_shown, what,
            rlock_strerror(rc), *detail ? ": " : "", detail);
}

rlock_client *cli_open(struct cli *cli, int *exit_code)
{
    const char *wl = getenv("RLOCK_WATCHDOG_LEASE");
    rlock_client_opts o;
    rlock_client *c;
    int err = 0;

    rlock_client_opts_init(&o);
    if (wl && *wl &&
        (parse_duration(wl, &o.watchdog_lease_ms) != 0 ||
         o.watchdog_lease_ms < 30)) {
        fprintf(stderr, "%s: RLOCK_WATCHDOG_LEASE: bad duration '%s' "
                        "(at least 30ms)\n",
                cli->prog, wl);
        *exit_code = EXIT_USAGE;
        return NULL;
    }
    c = rlock_client_open(cli->url, &o, &err);

    if (!c) {
        cli_error(cli, NULL, "cannot open", err);
        *exit_code = exit_code_for(err);
    }
    return c;
}
