/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The tool's small shared pieces: durations, the Redis URL and its
 * password, error lines and exit codes.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

int parse_duration(const char *s, int64_t *ms)
{
    const char *p = s;
    char *end;
    double v, scale;

    /* Digits, an optional fraction, an optional unit: nothing that strtod
     * would also take (signs, spaces, hex, exponents, inf, nan). */
    if (!s || !isdigit((unsigned char)*p))
        return -1;
    while (isdigit((unsigned char)*p))
        p++;
    if (*p == '.') {
        p++;
        if (!isdigit((unsigned char)*p))
            return -1;
        while (isdigit((unsigned char)*p))
            p++;
    }
    if (strcmp(p, "ms") == 0)
        scale = 1;
    else if (strcmp(p, "s") == 0 || *p == '\0')
        scale = 1000;
    else if (strcmp(p, "m") == 0)
        scale = 60 * 1000;
    else if (strcmp(p, "h") == 0)
        scale = 3600 * 1000;
    else
        return -1;
    errno = 0;
    v = strtod(s, &end);
    if (errno || end != p || !isfinite(v))
        return -1;
    v *= scale;
    if (v > (double)RLOCK_MS_MAX)
        return -1;
    *ms = (int64_t)(v + 0.5);
    return 0;
}

int parse_number(const char *s, long lo, long hi, long *out)
{
    char *end;
    long v;

    /* strtol would skip leading spaces and take a '+'. */
    if (!s || !(isdigit((unsigned char)s[0]) ||
                (s[0] == '-' && isdigit((unsigned char)s[1]))))
        return -1;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

const char *cli_last_opt = "";

int cli_opt(int argc, char **argv, int *i, const char *cmd,
            const char *short_name, const char *long_name,
            const char **value)
{
    const char *a = argv[*i];
    size_t n = strlen(long_name);

    if (short_name && strcmp(a, short_name) == 0) {
        cli_last_opt = short_name;
        *value = *i + 1 < argc ? argv[*i + 1] : NULL;
        *i += 2;
    } else if (strncmp(a, long_name, n) == 0 && a[n] == '=') {
        cli_last_opt = long_name;
        *value = a + n + 1;
        *i += 1;
    } else if (strcmp(a, long_name) == 0) {
        cli_last_opt = long_name;
        *value = *i + 1 < argc ? argv[*i + 1] : NULL;
        *i += 2;
    } else {
        return 0;
    }
    if (!*value || !**value) {
        fprintf(stderr, "%s: %s needs a value\n", cmd, cli_last_opt);
        return -1;
    }
    return 1;
}

int cli_flag(char **argv, int *i, const char *cmd, const char *short_name,
             const char *long_name)
{
    const char *a = argv[*i];
    size_t n = strlen(long_name);

    if ((short_name && strcmp(a, short_name) == 0) ||
        strcmp(a, long_name) == 0) {
        *i += 1;
        return 1;
    }
    if (strncmp(a, long_name, n) == 0 && a[n] == '=') {
        fprintf(stderr, "%s: %s takes no value\n", cmd, long_name);
        return -1;
    }
    return 0;
}

int url_password_span(const char *url, size_t *from, size_t *to)
{
    const char *scheme = strstr(url, "://"), *at, *colon;

    if (!scheme)
        return 0;
    at = strrchr(scheme + 3, '@');
    if (!at)
        return 0;
    colon = memchr(scheme + 3, ':', (size_t)(at - (scheme + 3)));
    if (!colon) {
        /* "redis://secret@host" (Lettuce's form, which rlock refuses):
         * what stands before the '@' may well be a password. */
        if (at == scheme + 3)
            return 0;
        *from = (size_t)(scheme + 3 - url);
        *to = (size_t)(at - url);
        return 2;
    }
    *from = (size_t)(colon + 1 - url);
    *to = (size_t)(at - url);
    return 1;
}

int url_query_secret(const char *url, size_t start, size_t *from, size_t *to)
{
    static const char *const known[] = {"db",       "tls",   "cacert",
                                        "cert",     "key",   "sni",
                                        "insecure", "drift", "node_timeout_ms"};
    const char *q = strchr(url, '?'), *p;

    if (!q)
        return 0;
    for (p = q + 1; *p;) {
        size_t len = strcspn(p, "&"), klen = strcspn(p, "=&"), i;
        int ok = 0;
        for (i = 0; i < sizeof known / sizeof known[0]; i++)
            if (klen == strlen(known[i]) && memcmp(p, known[i], klen) == 0)
                ok = 1;
        if (!ok && klen < len && (size_t)(p + klen + 1 - url) >= start) {
            *from = (size_t)(p + klen + 1 - url);
            *to = (size_t)(p + len - url);
            return 1;
        }
        p += len + (p[len] ? 1 : 0);
    }
    return 0;
}

/* redis://user:secret@host -> redis://user:<mask>@host; with mask NULL,
 * redis://user@host (and redis://:secret@host -> redis://host). A
 * userinfo without a colon, redis://secret@host, is masked whole
 * (redis://<mask>@host; with mask NULL, redis://host). With mask, the
 * value of a query parameter rlock does not know (password=...) is masked
 * too. */
static void hide_password(const char *url, char *out, size_t len,
                          const char *mask)
{
    size_t from, to, start = 0;
    int kind = url_password_span(url, &from, &to);

    snprintf(out, len, "%s", url);
    if (kind == 2 && mask)
        snprintf(out, len, "%.*s%s%s", (int)from, url, mask, url + to);
    else if (kind == 2)
        snprintf(out, len, "%.*s%s", (int)from, url, url + to + 1);
    else if (kind && mask)
        snprintf(out, len, "%.*s%s%s", (int)from, url, mask, url + to);
    else if (kind && url[from - 2] == '/') /* no user: "scheme://:secret@" */
        snprintf(out, len, "%.*s%s", (int)(from - 1), url, url + to + 1);
    else if (kind)
        snprintf(out, len, "%.*s%s", (int)(from - 1), url, url + to);
    while (mask && url_query_secret(out, start, &from, &to)) {
        char rest[CLI_URL_MAX];
        snprintf(rest, sizeof rest, "%s", out + to);
        snprintf(out + from, len - from, "%s%s", mask, rest);
        start = from + strlen(mask);
    }
}

void url_strip_password(const char *url, char *out, size_t len)
{
    hide_password(url, out, len, NULL);
}

int cli_pick_url(struct cli *cli, const char *given)
{
    const char *u = given, *from = "--redis";

    cli->url_given = given != NULL;
    if (!u) {
        u = getenv("RLOCK_URL");
        from = "RLOCK_URL";
    }
    if (!u || !*u) {
        u = getenv("REDIS_URL");
        from = "REDIS_URL";
    }
    if (!u || !*u)
        u = "redis://127.0.0.1:6379";
    /* The buffers below hold any URL this short whole: a longer one would
     * be cut, and name (or reach COMMAND as) another server. */
    if (strlen(u) >= CLI_URL_MAX) {
        fprintf(stderr, "%s: %s: the URL is longer than %d bytes\n", cli->prog,
                from, CLI_URL_MAX - 1);
        return -1;
    }
    cli->url = u;
    hide_password(u, cli->url_shown, sizeof cli->url_shown, "***");
    hide_password(u, cli->url_bare, sizeof cli->url_bare, NULL);
    return 0;
}

int64_t mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t cli_watchdog_lease_ms(void)
{
    const char *wl = getenv("RLOCK_WATCHDOG_LEASE");
    int64_t ms;

    if (wl && *wl && parse_duration(wl, &ms) == 0 && ms >= 30)
        return ms;
    return 30000;
}

int parse_layout(const char *s, int *layout)
{
    if (strcmp(s, "native") == 0)
        *layout = RLOCK_LAYOUT_NATIVE;
    else if (strcmp(s, "token") == 0)
        *layout = RLOCK_LAYOUT_TOKEN;
    else if (strcmp(s, "redisson") == 0)
        *layout = RLOCK_LAYOUT_REDISSON;
    else
        return -1;
    return 0;
}

int exit_code_for(int rc)
{
    switch (rc) {
    case RLOCK_OK:
    case RLOCK_ENOTIFY: return 0; /* released; only the waiters untold */
    case RLOCK_EINVAL: return EXIT_USAGE;
    case RLOCK_ECONNECT:
    case RLOCK_ETIMEDOUT:
    case RLOCK_EIO:
    case RLOCK_ENOREPLY:
    case RLOCK_EUNAVAILABLE:
    case RLOCK_EREPLICAS:
    case RLOCK_EQUORUM: return EXIT_UNAVAILABLE;
    case RLOCK_EAUTH:
    case RLOCK_EPERM: return EXIT_NOPERM;
    case RLOCK_EREDIS:
    case RLOCK_EPROTO: return EXIT_PROTOCOL;
    case RLOCK_ELOST: return EXIT_LOST;
    case RLOCK_ENOTLOCK: return EXIT_DATAERR;
    default: return EXIT_SOFTWARE;
    }
}

void cli_error_detail(struct cli *cli, const char *what, int rc,
                      const char *detail)
{
    char w[4 * RLOCK_NAME_MAX + 1], d[2048];

    /* The name and the detail may carry bytes from Redis or from the
     * command line: escaped as status's output is. One fprintf: one line,
     * even beside COMMAND's own output. */
    fprintf(stderr, "%s: %s: %s (%s)%s%s\n", cli->prog, cli->url_shown,
            safe_text(what, w, sizeof w), rlock_strerror(rc),
            *detail ? ": " : "", safe_text(detail, d, sizeof d));
}

void cli_error(struct cli *cli, rlock_client *c, const char *what, int rc)
{
    cli_error_detail(cli, what, rc, rlock_client_errmsg(c));
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
    o.tls = cli->tls;
    o.tls_insecure = cli->tls_insecure;
    o.tls_ca_file = cli->tls_ca;
    o.tls_cert_file = cli->tls_cert;
    o.tls_key_file = cli->tls_key;
    o.tls_sni = cli->tls_sni;
    o.username = cli->user;
    o.password = cli->password;
    cli->command_timeout_ms = o.command_timeout_ms;
    c = rlock_client_open(cli->url, &o, &err);

    if (c)
        cli_watch_events(cli, c);
    if (!c) {
        cli_error(cli, NULL, "cannot open", err);
        *exit_code = exit_code_for(err);
    } else if (strncmp(cli->url, "redlock://", 10) == 0) {
        /* A majority of an even number survives no more failures than a
         * majority of one node fewer: say so, it is rarely meant. */
        size_t n = 1;
        const char *p;
        for (p = cli->url + 10; *p && *p != '?'; p++)
            n += *p == ',';
        if (n % 2 == 0)
            fprintf(stderr,
                    "%s: warning: %zu Redlock nodes need %zu for a majority "
                    "and survive the loss of %zu, as %zu would\n",
                    cli->prog, n, n / 2 + 1, n / 2 - 1, n - 1);
    }
    return c;
}
