/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * TLS settings shared by a client's connections (an OpenSSL SSL_CTX with
 * the CA, the client certificate and the verification policy), built once
 * per client and used by rlock__conn_open for every connection.
 */
#ifndef RLOCK_NET_TLS_H
#define RLOCK_NET_TLS_H

#include "net/conn.h"

typedef struct rlock__tls_opts {
    const char *ca_file;   /* PEM CAs to trust; NULL: the system's */
    const char *cert_file; /* PEM client certificate (mutual TLS) */
    const char *key_file;  /* its PEM private key */
    int insecure;          /* 1: verify neither chain nor host name */
} rlock__tls_opts;

/* Builds the context: RLOCK_OK and *out, or RLOCK_EINVAL (a file that
 * cannot be read, a key that does not match the certificate: the message
 * says which) or RLOCK_ENOMEM, with the text in *err. */
int rlock__tls_ctx_new(const rlock__tls_opts *o, rlock__tls_ctx **out,
                       rlock__neterr *err);
void rlock__tls_ctx_free(rlock__tls_ctx *t);

/* Sets up TLS on c's connected socket (tls.c): the transport and its
 * state. server_name: what the certificate must name (host name or
 * address) and what SNI sends, unless the context says otherwise. */
int rlock__tls_attach(rlock__conn *c, const rlock__tls_ctx *ctx,
                      const char *server_name, rlock__neterr *err);

#endif
