/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Redis URLs.
 *
 *   redis://[user[:password]@]host[:port][/db][?PARAMS]
 *   rediss://...   the same over TLS
 *   unix://[user[:password]@]/path/to/socket[?PARAMS]
 *
 * PARAMS, joined by '&': db=N, and for TLS tls=0|1, cacert=FILE,
 * cert=FILE, key=FILE, sni=NAME, insecure=0|1 (values percent-decoded).
 * Any of cacert, cert, key, sni and insecure means TLS (tls=0 beside one
 * is an error). The TLS parameters are also taken from the query of the URLs of
 * several nodes (redis-sentinel://, redis-cluster://, redlock://), where they
 * apply to every connection (rlock__url_split_tls).
 *
 * A malformed URL is refused with a message that says which part is wrong,
 * before anything touches the network. The password never appears in a
 * message (rlock__url_describe leaves it out).
 */
#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/url.h"

static int hexval(int ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

/* Copies [s, s+len) percent-decoded into a new string; NULL on error. */
static char *decode(const char *s, size_t len, int *why)
{
    char *out = malloc(len + 1);
    size_t i, o = 0;

    if (!out) {
        *why = RLOCK_ENOMEM;
        return NULL;
    }
    for (i = 0; i < len; i++) {
        if (s[i] == '%') {
            if (i + 2 >= len || hexval(s[i + 1]) < 0 || hexval(s[i + 2]) < 0) {
                free(out);
                *why = RLOCK_EINVAL;
                return NULL;
            }
            out[o] = (char)(hexval(s[i + 1]) * 16 + hexval(s[i + 2]));
            if (out[o] == '\0') {
                free(out);
                *why = RLOCK_EINVAL;
                return NULL;
            }
            o++;
            i += 2;
        } else {
            out[o++] = s[i];
        }
    }
    out[o] = '\0';
    return out;
}

/* Parses a decimal number in [lo, hi] from exactly [s, s+len). */
static int parse_int(const char *s, size_t len, long lo, long hi, int *out)
{
    long v = 0;
    size_t i;

    if (len == 0 || len > 10)
        return -1;
    for (i = 0; i < len; i++) {
        if (!isdigit((unsigned char)s[i]))
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    if (v < lo || v > hi)
        return -1;
    *out = (int)v;
    return 0;
}

static int bad(rlock__err *e, const char *what)
{
    return rlock__err_set(e, RLOCK_EINVAL, "malformed Redis URL: %s", what);
}

/* user[:password] in [s, s+len) */
static int parse_userinfo(const char *s, size_t len, rlock__url *u,
                          rlock__err *e)
{
    const char *colon = memchr(s, ':', len);
    int why = RLOCK_OK;

    /* (Lettuce writes a password alone before the '@': it is not said
     * back, whatever it is.) */
    if (!colon)
        return bad(e, "a user name needs a password (user:password@; a "
                      "password alone is :password@)");
    if (colon > s) {
        u->user = decode(s, (size_t)(colon - s), &why);
        if (!u->user)
            return why == RLOCK_ENOMEM
                       ? rlock__err_set(e, why, "out of memory")
                       : bad(e, "bad %-escape in the user name");
    }
    u->password = decode(colon + 1, len - (size_t)(colon + 1 - s), &why);
    if (!u->password)
        return why == RLOCK_ENOMEM ? rlock__err_set(e, why, "out of memory")
                                   : bad(e, "bad %-escape in the password");
    if (u->password[0] == '\0')
        return bad(e, "empty password");
    return RLOCK_OK;
}

/* One "key=value" of a query: what to set, or an error. */
static int query_param(const char *k, size_t klen, const char *v, size_t vlen,
                       rlock__url *u, rlock__err *e)
{
    char **str = NULL;
    int why = RLOCK_OK;

#define KEY_IS(word) (klen == strlen(word) && memcmp(k, word, klen) == 0)
    if (KEY_IS("db")) {
        /* Given twice (/3?db=4, db=3&db=4): which was meant is unknown. */
        if (u->db_given)
            return bad(e, "the database is given twice (/N and db=, or db= "
                          "twice)");
        u->db_given = 1;
        return parse_int(v, vlen, 0, INT_MAX, &u->db) == 0
                   ? RLOCK_OK
                   : bad(e, "db must be a non-negative number");
    }
    if (KEY_IS("tls") || KEY_IS("insecure")) {
        int *flag = KEY_IS("tls") ? &u->tls : &u->tls_insecure;
        if (vlen != 1 || (v[0] != '0' && v[0] != '1'))
            return bad(e, "tls= and insecure= take 0 or 1");
        *flag = v[0] - '0';
        return RLOCK_OK;
    }
    if (KEY_IS("cacert"))
        str = &u->tls_ca;
    else if (KEY_IS("cert"))
        str = &u->tls_cert;
    else if (KEY_IS("key"))
        str = &u->tls_key;
    else if (KEY_IS("sni"))
        str = &u->tls_sni;
#undef KEY_IS
    if (!str)
        return rlock__err_set(e, RLOCK_EINVAL,
                              "malformed Redis URL: unknown parameter \"%.*s\" "
                              "(db, tls, cacert, cert, key, sni, insecure)",
                              (int)(klen < 40 ? klen : 40), k);
    if (*str)
        return bad(e, "a parameter is given twice");
    free(*str);
    *str = decode(v, vlen, &why);
    if (!*str)
        return why == RLOCK_ENOMEM ? rlock__err_set(e, why, "out of memory")
                                   : bad(e, "bad %-escape in a parameter");
    if (!**str)
        return bad(e, "empty parameter value");
    return RLOCK_OK;
}

int rlock__url_query(const char *q, rlock__url *u, rlock__err *e)
{
    while (*q) {
        const char *amp = strchr(q, '&');
        size_t len = amp ? (size_t)(amp - q) : strlen(q);
        const char *eq = memchr(q, '=', len);
        int rc;

        if (!eq)
            return bad(e, "a parameter needs a value (key=value)");
        rc = query_param(q, (size_t)(eq - q), eq + 1,
                         len - (size_t)(eq + 1 - q), u, e);
        if (rc != RLOCK_OK)
            return rc;
        q += len + (amp ? 1 : 0);
    }
    return RLOCK_OK;
}

/* Whether a query key is one of the TLS parameters. */
static int is_tls_key(const char *k, size_t klen)
{
    static const char *const keys[] = {"tls",  "insecure", "cacert",
                                       "cert", "key",      "sni"};
    size_t i;

    for (i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (klen == strlen(keys[i]) && memcmp(k, keys[i], klen) == 0)
            return 1;
    return 0;
}

/* A TLS parameter asks for TLS: a CA file with a plain-text connection
 * would be a silent downgrade. */
static int imply_tls(rlock__url *u, rlock__err *e)
{
    if (!u->tls_ca && !u->tls_cert && !u->tls_key && !u->tls_sni &&
        u->tls_insecure < 0)
        return RLOCK_OK;
    if (u->tls == 0)
        return bad(e, "tls=0 contradicts cacert=, cert=, key=, sni= or "
                      "insecure=");
    u->tls = 1;
    return RLOCK_OK;
}

int rlock__url_split_tls(const char *url, rlock__url *tls, char **rest,
                         rlock__err *e)
{
    const char *q = strchr(url, '?');
    size_t len = q ? (size_t)(q - url) : strlen(url);
    char *out = malloc(strlen(url) + 1);
    int rc = RLOCK_OK, sep = '?';

    memset(tls, 0, sizeof *tls);
    tls->tls = -1;
    tls->tls_insecure = -1;
    *rest = NULL;
    if (!out)
        return rlock__err_set(e, RLOCK_ENOMEM, "out of memory");
    memcpy(out, url, len);
    out[len] = '\0';
    /* Each parameter goes either to tls or, unchanged and in order, to
     * the URL the backend parses (which refuses what it does not know). */
    for (q = q ? q + 1 : NULL; q && *q && rc == RLOCK_OK;) {
        const char *amp = strchr(q, '&');
        size_t plen = amp ? (size_t)(amp - q) : strlen(q);
        const char *eq = memchr(q, '=', plen);

        if (eq && is_tls_key(q, (size_t)(eq - q))) {
            rc = query_param(q, (size_t)(eq - q), eq + 1,
                             plen - (size_t)(eq + 1 - q), tls, e);
        } else {
            out[len++] = (char)sep;
            memcpy(out + len, q, plen);
            len += plen;
            out[len] = '\0';
            sep = '&';
        }
        q += plen + (amp ? 1 : 0);
    }
    if (rc == RLOCK_OK)
        rc = imply_tls(tls, e);
    if (rc != RLOCK_OK) {
        free(out);
        rlock__url_free(tls);
        return rc;
    }
    *rest = out;
    return RLOCK_OK;
}

static int parse_tcp(const char *s, rlock__url *u, rlock__err *e)
{
    const char *query = strchr(s, '?');
    const char *stop = query ? query : s + strlen(s);
    const char *slash = memchr(s, '/', (size_t)(stop - s));
    const char *end = slash ? slash : stop;
    const char *at = NULL, *p, *q, *host, *host_end, *port = NULL;
    int rc;

    if (strchr(s, '#'))
        return bad(e, "fragments (#) are not part of a Redis URL");
    for (p = s; p < end; p++)
        if (*p == '@')
            at = p;
    if (at) {
        if ((rc = parse_userinfo(s, (size_t)(at - s), u, e)) != RLOCK_OK)
            return rc;
        host = at + 1;
    } else {
        host = s;
    }
    if (*host == '[') {
        host_end = memchr(host, ']', (size_t)(end - host));
        if (!host_end)
            return bad(e, "missing ']' after an IPv6 address");
        host++;
        p = host_end + 1;
    } else {
        host_end = memchr(host, ':', (size_t)(end - host));
        if (!host_end)
            host_end = end;
        p = host_end;
    }
    if (host_end == host)
        return bad(e, "missing host");
    for (q = host; q < host_end; q++)
        if ((unsigned char)*q <= ' ' || *q == 0x7f)
            return bad(e, "space or control character in the host");
    if (p < end) {
        if (*p != ':')
            return bad(e, "junk after the host");
        port = p + 1;
        if (parse_int(port, (size_t)(end - port), 1, 65535, &u->port) != 0)
            return bad(e, "port must be a number from 1 to 65535");
    } else {
        u->port = 6379;
    }
    u->host = strndup(host, (size_t)(host_end - host));
    if (!u->host)
        return rlock__err_set(e, RLOCK_ENOMEM, "out of memory");
    if (slash && slash + 1 < stop &&
        parse_int(slash + 1, (size_t)(stop - slash - 1), 0, INT_MAX, &u->db) !=
            0)
        return bad(e, "database must be a non-negative number (/N)");
    u->db_given = slash && slash + 1 < stop;
    return query ? rlock__url_query(query + 1, u, e) : RLOCK_OK;
}

static int parse_unix(const char *s, rlock__url *u, rlock__err *e)
{
    const char *path = s, *query;
    size_t path_len;
    int rc;

    if (*s != '/') {
        const char *at = strchr(s, '@');
        if (!at || at[1] != '/')
            return bad(e, "unix:// needs an absolute socket path");
        if ((rc = parse_userinfo(s, (size_t)(at - s), u, e)) != RLOCK_OK)
            return rc;
        path = at + 1;
    }
    query = strchr(path, '?');
    path_len = query ? (size_t)(query - path) : strlen(path);
    if (path_len < 2)
        return bad(e, "missing socket path");
    if (path_len >= 108)
        return bad(e, "socket path longer than 107 bytes");
    if (query && (rc = rlock__url_query(query + 1, u, e)) != RLOCK_OK)
        return rc;
    u->path = strndup(path, path_len);
    if (!u->path)
        return rlock__err_set(e, RLOCK_ENOMEM, "out of memory");
    return RLOCK_OK;
}

int rlock__url_parse(const char *url, rlock__url *u, rlock__err *e)
{
    int rc;

    memset(u, 0, sizeof *u);
    u->tls = -1;
    u->tls_insecure = -1;
    if (!url)
        return bad(e, "NULL");
    if (strncmp(url, "redis://", 8) == 0)
        rc = parse_tcp(url + 8, u, e);
    else if (strncmp(url, "unix://", 7) == 0)
        rc = parse_unix(url + 7, u, e);
    else if (strncmp(url, "rediss://", 9) == 0) {
        rc = parse_tcp(url + 9, u, e);
        if (rc == RLOCK_OK && u->tls == 0)
            rc = bad(e, "rediss:// is TLS: tls=0 contradicts it");
        u->tls = 1;
    } else
        rc = bad(e, "must start with redis://, unix://, redis-sentinel://, "
                    "redis-cluster:// or redlock://");
    if (rc == RLOCK_OK)
        rc = imply_tls(u, e);
    if (rc != RLOCK_OK)
        rlock__url_free(u);
    return rc;
}

void rlock__url_free(rlock__url *u)
{
    free(u->host);
    free(u->path);
    free(u->user);
    free(u->tls_ca);
    free(u->tls_cert);
    free(u->tls_key);
    free(u->tls_sni);
    if (u->password) {
        memset(u->password, 0, strlen(u->password));
        free(u->password);
    }
    memset(u, 0, sizeof *u);
}

void rlock__url_describe(const rlock__url *u, char *buf, size_t len)
{
    if (u->path)
        snprintf(buf, len, "unix:%s", u->path);
    else if (strchr(u->host, ':'))
        snprintf(buf, len, "[%s]:%d", u->host, u->port);
    else
        snprintf(buf, len, "%s:%d", u->host, u->port);
}

int rlock__url_list_parse(const char *p, const char *end, rlock__url *out,
                          int max, int *n, const char *what, rlock__err *e)
{
    char buf[300];
    int rc;

    *n = 0;
    for (;;) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        size_t len = comma ? (size_t)(comma - p) : (size_t)(end - p);

        if (len == 0)
            return rlock__err_set(e, RLOCK_EINVAL,
                                  "%s URL: empty host:port in the list", what);
        if (*n == max)
            return rlock__err_set(e, RLOCK_EINVAL, "%s URL: at most %d hosts",
                                  what, max);
        if (len > 250 || memchr(p, '@', len) || memchr(p, '/', len))
            return rlock__err_set(e, RLOCK_EINVAL,
                                  "%s URL: host %d must be host:port "
                                  "(credentials go in the client options)",
                                  what, *n + 1);
        snprintf(buf, sizeof buf, "redis://%.*s", (int)len, p);
        if ((rc = rlock__url_parse(buf, &out[*n], e)) != RLOCK_OK)
            return rc;
        ++*n;
        if (!comma)
            return RLOCK_OK;
        p = comma + 1;
    }
}
