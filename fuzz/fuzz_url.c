/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Fuzz target: Redis URLs.
 *
 * The input, as a string, goes to the library's rlock__url_parse and to
 * the tool's cli_pick_url (which hides the password for messages). Beyond
 * "no crash", it checks what the rest of the code relies on:
 *  - a parsed URL is either TCP (host, port 1..65535) or a unix socket (an
 *    absolute path that fits sockaddr_un), db >= 0, a password is never
 *    empty and a user never comes without one;
 *  - a failed parse leaves nothing allocated and says EINVAL or ENOMEM;
 *  - rlock__url_describe always NUL-terminates within the length it is
 *    given and writes nothing past it;
 *  - the canonical URL of what was parsed parses back to the same thing;
 *  - whenever the library found a password, the tool's shown URL has it
 *    replaced by "***".
 * The same input also goes to the parsers of the other URL kinds:
 *  - a host:port list (Sentinel's and Cluster's) gives 1 to max entries,
 *    each a TCP address as above, and frees what it parsed on failure;
 *  - what follows redis-sentinel:// gives sentinels and a master name
 *    without '/'; what follows redlock:// gives a drift in [0, 1) and a
 *    node timeout in [1, 60000]; both refuse with EINVAL or ENOMEM;
 *  - a key's cluster slot is in [0, 16383], and keys that share a hash tag
 *    share a slot (CRC16 checked against the reference "123456789").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "backend/backend.h"
#include "util/url.h"

#include "fuzz.h"

static void check_fields(const rlock__url *u)
{
    FUZZ_CHECK((u->host == NULL) != (u->path == NULL));
    if (u->host) {
        FUZZ_CHECK(u->host[0] != '\0');
        FUZZ_CHECK(u->port >= 1 && u->port <= 65535);
    } else {
        FUZZ_CHECK(u->path[0] == '/');
        FUZZ_CHECK(strlen(u->path) >= 2 && strlen(u->path) < 108);
    }
    FUZZ_CHECK(u->db >= 0);
    FUZZ_CHECK(!u->user || u->user[0] != '\0');
    FUZZ_CHECK(!u->user || u->password);
    FUZZ_CHECK(!u->password || u->password[0] != '\0');
}

static void check_describe(const rlock__url *u)
{
    static const size_t lens[] = {1, 2, 7, 64, 300};
    char buf[300 + 16];
    const char *name = u->host ? u->host : u->path;
    size_t i, k, full_len = strlen(name) + 32;
    char *full = malloc(full_len), port[16];

    for (i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        memset(buf, 0x5a, sizeof buf);
        rlock__url_describe(u, buf, lens[i]);
        FUZZ_CHECK(memchr(buf, '\0', lens[i]) != NULL);
        for (k = lens[i]; k < sizeof buf; k++)
            FUZZ_CHECK(buf[k] == 0x5a);
    }
    /* With room enough: "unix:PATH", "HOST:PORT" or "[HOST]:PORT". */
    FUZZ_CHECK(full != NULL);
    rlock__url_describe(u, full, full_len);
    if (u->path) {
        FUZZ_CHECK(strncmp(full, "unix:", 5) == 0);
        FUZZ_CHECK(strcmp(full + 5, u->path) == 0);
    } else {
        size_t hl = strlen(u->host), pl;
        size_t at = strchr(u->host, ':') ? 1 : 0; /* IPv6: brackets */
        snprintf(port, sizeof port, ":%d", u->port);
        pl = strlen(port);
        FUZZ_CHECK(at == 0 || (full[0] == '[' && full[1 + hl] == ']'));
        FUZZ_CHECK(strncmp(full + at, u->host, hl) == 0);
        FUZZ_CHECK(strcmp(full + at + hl + at, port) == 0);
        FUZZ_CHECK(strlen(full) == at + hl + at + pl);
    }
    free(full);
}

/* The URL without credentials, written the plainest way, must parse back
 * to the same host or path, port and db. */
static void check_round_trip(const rlock__url *u)
{
    const char *name = u->host ? u->host : u->path;
    size_t len = strlen(name) + 64;
    char *url = malloc(len);
    rlock__url v;
    rlock__err e;

    FUZZ_CHECK(url != NULL);
    if (u->path)
        snprintf(url, len, "unix://%s?db=%d", u->path, u->db);
    else if (strchr(u->host, ':') || u->host[0] == '[')
        snprintf(url, len, "redis://[%s]:%d/%d", u->host, u->port, u->db);
    else
        snprintf(url, len, "redis://%s:%d/%d", u->host, u->port, u->db);
    FUZZ_CHECK(rlock__url_parse(url, &v, &e) == RLOCK_OK);
    FUZZ_CHECK((v.host == NULL) == (u->host == NULL));
    FUZZ_CHECK(!u->host || strcmp(v.host, u->host) == 0);
    FUZZ_CHECK(!u->path || strcmp(v.path, u->path) == 0);
    FUZZ_CHECK(v.port == u->port && v.db == u->db);
    FUZZ_CHECK(v.user == NULL && v.password == NULL);
    rlock__url_free(&v);
    free(url);
}

/* rlock(1) prints the URL with "***" for the password: where the library
 * found one, the shown URL must be the input up to the colon before it at
 * most (an earlier secret, the value of a query parameter it does not
 * know, may be masked from its '=' on), then "***" (as much of all this
 * as fits). */
static void check_shown(const char *s, int has_password)
{
    struct cli cli;
    size_t cap, keep, k;
    const char *p0;
    static const char stars[] = "***";

    memset(&cli, 0, sizeof cli);
    cli.prog = "fuzz_url";
    /* A URL too long for the buffers is refused whole, never cut. */
    if (strlen(s) >= CLI_URL_MAX) {
        FUZZ_CHECK(cli_pick_url(&cli, s) != 0 && cli.url == NULL);
        return;
    }
    FUZZ_CHECK(cli_pick_url(&cli, s) == 0);
    cap = sizeof cli.url_shown - 1;
    FUZZ_CHECK(cli.url == s);
    FUZZ_CHECK(memchr(cli.url_shown, '\0', sizeof cli.url_shown) != NULL);
    if (!has_password)
        return;
    p0 = strstr(s, "://");
    FUZZ_CHECK(p0 != NULL && strchr(p0 + 3, ':') != NULL);
    keep = (size_t)(strchr(p0 + 3, ':') - s) + 1;
    /* The masking starts where the shown URL first differs from the
     * input: there, and no later than keep, come the stars. */
    for (k = 0; k < keep && k < cap && cli.url_shown[k] == s[k]; k++)
        ;
    /* A masked value that itself starts with '*' matches the stars for a
     * while, or for all three (the shown URL may end right after them):
     * where the two differ before keep, the mask starts before the stars
     * they share. */
    if (k < keep && k < cap)
        while (k > 0 && cli.url_shown[k - 1] == '*' && s[k - 1] == '*')
            k--;
    if (k < keep && k < cap && cli.url_shown[k] == '*')
        FUZZ_CHECK(k > 0 && s[k - 1] == '=');
    else
        FUZZ_CHECK(k == keep || k == cap);
    keep = k;
    for (k = 0; k < 3 && keep + k < cap; k++)
        FUZZ_CHECK(cli.url_shown[keep + k] == stars[k]);
}

static void check_list(const char *s)
{
    rlock__url list[4];
    rlock__err e;
    int n = -1, i,
        rc = rlock__url_list_parse(s, s + strlen(s), list, 4, &n, "fuzz", &e);

    FUZZ_CHECK(n >= 0 && n <= 4);
    if (rc == RLOCK_OK)
        FUZZ_CHECK(n >= 1);
    else
        FUZZ_CHECK(rc == RLOCK_EINVAL || rc == RLOCK_ENOMEM);
    for (i = 0; i < n; i++) {
        FUZZ_CHECK(list[i].host != NULL);
        check_fields(&list[i]);
        rlock__url_free(&list[i]);
    }
}

static void check_deployments(const char *s)
{
    rlock__url list[16];
    char *master = NULL;
    const char *end = NULL;
    double drift = -1;
    int rc, i, n = -1, db = -1, node_timeout = -1;
    rlock__err e;

    rc = rlock__sentinel_parse(s, list, 16, &n, &master, &db, &e);
    FUZZ_CHECK(n >= 0 && n <= 16);
    if (rc == RLOCK_OK) {
        FUZZ_CHECK(n >= 1 && master && master[0] && !strchr(master, '/'));
        FUZZ_CHECK(db >= 0);
    } else {
        FUZZ_CHECK(rc == RLOCK_EINVAL || rc == RLOCK_ENOMEM);
        FUZZ_CHECK(memchr(e.msg, '\0', sizeof e.msg) != NULL);
    }
    for (i = 0; i < n; i++) {
        check_fields(&list[i]);
        rlock__url_free(&list[i]);
    }
    free(master);
    rc = rlock__redlock_parse(s, &drift, &node_timeout, &end, &e);
    if (rc == RLOCK_OK) {
        FUZZ_CHECK(drift >= 0 && drift < 1);
        FUZZ_CHECK(node_timeout >= 1 && node_timeout <= 60000);
        FUZZ_CHECK(end > s && end <= s + strlen(s));
    } else {
        FUZZ_CHECK(rc == RLOCK_EINVAL || rc == RLOCK_ENOMEM);
    }
}

static void check_slot(const char *s)
{
    size_t len = strlen(s);
    char *a = malloc(len + 4), *b = malloc(len + 4);
    int slot = rlock__key_slot(s, len);

    FUZZ_CHECK(a && b);
    FUZZ_CHECK(slot >= 0 && slot < 16384);
    FUZZ_CHECK(rlock__key_slot("123456789", 9) == 0x31C3 % 16384);
    /* "{tag}x" and "{tag}y" share a slot when tag has no '}'. */
    if (len > 0 && !memchr(s, '}', len)) {
        snprintf(a, len + 4, "{%s}x", s);
        snprintf(b, len + 4, "{%s}y", s);
        FUZZ_CHECK(rlock__key_slot(a, len + 3) == rlock__key_slot(b, len + 3));
        FUZZ_CHECK(rlock__key_slot(a, len + 3) == rlock__key_slot(s, len) ||
                   memchr(s, '{', len));
    }
    free(a);
    free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = fuzz_cstr(data, size);
    rlock__url u;
    rlock__err e;
    int rc = rlock__url_parse(s, &u, &e);

    if (rc == RLOCK_OK) {
        check_fields(&u);
        check_describe(&u);
        check_round_trip(&u);
    } else {
        FUZZ_CHECK(rc == RLOCK_EINVAL || rc == RLOCK_ENOMEM);
        FUZZ_CHECK(!u.host && !u.path && !u.user && !u.password);
    }
    /* An empty URL would make cli_pick_url read the environment. */
    if (s[0] != '\0')
        check_shown(s, rc == RLOCK_OK && u.password != NULL);
    if (rc == RLOCK_OK)
        rlock__url_free(&u);
    check_list(s);
    check_deployments(s);
    check_slot(s);
    free(s);
    return 0;
}
