/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Redis URLs: redis://, rediss://, unix:// with their query parameters
 * (url.c says the grammar). Pure parsing: nothing here touches the
 * network, and a password never appears in a message.
 */
#ifndef RLOCK_UTIL_URL_H
#define RLOCK_UTIL_URL_H

#include <stddef.h>

#include "util/err.h"

typedef struct rlock__url {
    char *host; /* NULL for unix sockets */
    int port;
    char *path; /* unix socket path, or NULL */
    char *user; /* NULL if none */
    char *password;
    int db;
    int db_given; /* by the path or db= (given twice is an error) */
    /* TLS from the URL (rediss://, or the query): -1 where it says
     * nothing; the strings NULL where not given. */
    int tls;
    int tls_insecure;
    char *tls_ca, *tls_cert, *tls_key, *tls_sni;
} rlock__url;

/* Parses url into *u (strings malloc'ed). RLOCK_OK, or RLOCK_EINVAL /
 * RLOCK_ENOMEM with the detail in *e (then *u holds nothing to free). */
int rlock__url_parse(const char *url, rlock__url *u, rlock__err *e);
/* Frees u's strings (the password is wiped first). */
void rlock__url_free(rlock__url *u);
/* Parses a query ("k=v&k=v", without the '?') into u: db, tls, cacert,
 * cert, key, sni, insecure. */
int rlock__url_query(const char *q, rlock__url *u, rlock__err *e);
/* Takes the TLS parameters (tls, insecure, cacert, cert, key, sni) out of
 * url's query into *tls (tls and tls_insecure -1 where not given) and
 * sets *rest (malloc'ed) to url without them, the other parameters kept
 * in order. On an error nothing is left to free. */
int rlock__url_split_tls(const char *url, rlock__url *tls, char **rest,
                         rlock__err *e);
/* Parses "host:port,host:port,..." in [p, end) into out[0..max), *n of
 * them; what names the URL kind in messages ("cluster"). Entries parsed
 * so far are in out[0..*n) also on an error. */
int rlock__url_list_parse(const char *p, const char *end, rlock__url *out,
                          int max, int *n, const char *what, rlock__err *e);
/* Writes "host:port" or "unix:<path>" into buf (never the password). */
void rlock__url_describe(const rlock__url *u, char *buf, size_t len);

#endif
