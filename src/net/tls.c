/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The TLS transport, on OpenSSL: fills the same table as plain sockets, so
 * the connection's state machine drives a TLS handshake and TLS records
 * exactly as it drives plain bytes (non-blocking, by readiness, under the
 * caller's deadline).
 *
 * Why a BIO of our own: OpenSSL's socket BIO writes with write(2), which
 * raises SIGPIPE when the server has gone; ours sends with MSG_NOSIGNAL,
 * as the plain transport does.
 *
 * What is verified, unless the caller opted out (insecure): the chain
 * against the system's CAs or the given CA file, and the host name (or
 * IP address) the caller connected to, or the SNI name it gave, against
 * the certificate. Failures name their cause: a certificate that is not
 * trusted, a name that does not match, a server that does not speak TLS.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <rlock/rlock.h>

#include "net/tls.h"
#include "net/transport.h"

struct rlock__tls_ctx {
    SSL_CTX *ctx;
    int insecure;
};

/* ---- a socket BIO that never raises SIGPIPE ----------------------------- */

static BIO_METHOD *bio_method;
static pthread_once_t bio_once = PTHREAD_ONCE_INIT;

static int bio_fd(BIO *b)
{
    return (int)(intptr_t)BIO_get_data(b);
}

static int bio_write(BIO *b, const char *buf, int len)
{
    ssize_t n;

    BIO_clear_retry_flags(b);
    do
        n = send(bio_fd(b), buf, (size_t)len, MSG_NOSIGNAL | MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        BIO_set_retry_write(b);
    return (int)n;
}

static int bio_read(BIO *b, char *buf, int len)
{
    ssize_t n;

    BIO_clear_retry_flags(b);
    do
        n = recv(bio_fd(b), buf, (size_t)len, MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        BIO_set_retry_read(b);
    return (int)n;
}

static long bio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    (void)b;
    (void)num;
    (void)ptr;
    return cmd == BIO_CTRL_FLUSH ? 1 : 0;
}

static int bio_create(BIO *b)
{
    BIO_set_init(b, 1);
    return 1;
}

static int bio_destroy(BIO *b)
{
    (void)b;
    return 1;
}

static void bio_method_init(void)
{
    BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK,
                                 "rlock socket");

    if (!m)
        return;
    BIO_meth_set_write(m, bio_write);
    BIO_meth_set_read(m, bio_read);
    BIO_meth_set_ctrl(m, bio_ctrl);
    BIO_meth_set_create(m, bio_create);
    BIO_meth_set_destroy(m, bio_destroy);
    bio_method = m;
}

/* ---- the context -------------------------------------------------------- */

static void openssl_detail(char *buf, size_t len)
{
    unsigned long e = ERR_get_error();

    if (e == 0)
        snprintf(buf, len, "no detail from OpenSSL");
    else
        ERR_error_string_n(e, buf, len);
    ERR_clear_error();
}

int rlock__tls_ctx_new(const rlock__tls_opts *o, rlock__tls_ctx **out,
                       rlock__neterr *err)
{
    rlock__tls_ctx *t = calloc(1, sizeof *t);
    char detail[200];

    err->code = 0;
    if (!t || !(t->ctx = SSL_CTX_new(TLS_client_method()))) {
        free(t);
        err->code = RLOCK_ENOMEM;
        snprintf(err->msg, sizeof err->msg, "cannot create a TLS context");
        return err->code;
    }
    SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION);
    SSL_CTX_set_mode(t->ctx, SSL_MODE_ENABLE_PARTIAL_WRITE |
                                 SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    t->insecure = o->insecure;
    if (o->insecure) {
        SSL_CTX_set_verify(t->ctx, SSL_VERIFY_NONE, NULL);
    } else {
        SSL_CTX_set_verify(t->ctx, SSL_VERIFY_PEER, NULL);
        if (o->ca_file) {
            if (SSL_CTX_load_verify_locations(t->ctx, o->ca_file, NULL) != 1) {
                openssl_detail(detail, sizeof detail);
                err->code = RLOCK_EINVAL;
                snprintf(err->msg, sizeof err->msg,
                         "TLS: cannot load CA file %s: %s", o->ca_file, detail);
            }
        } else if (SSL_CTX_set_default_verify_paths(t->ctx) != 1) {
            openssl_detail(detail, sizeof detail);
            err->code = RLOCK_EINVAL;
            snprintf(err->msg, sizeof err->msg,
                     "TLS: cannot load the system's CAs: %s", detail);
        }
    }
    if (err->code == 0 && (o->cert_file || o->key_file)) {
        if (!o->cert_file || !o->key_file) {
            err->code = RLOCK_EINVAL;
            snprintf(err->msg, sizeof err->msg,
                     "TLS: a client certificate needs both cert and key");
        } else if (SSL_CTX_use_certificate_chain_file(t->ctx, o->cert_file) !=
                   1) {
            openssl_detail(detail, sizeof detail);
            err->code = RLOCK_EINVAL;
            snprintf(err->msg, sizeof err->msg,
                     "TLS: cannot load certificate %s: %s", o->cert_file,
                     detail);
        } else if (SSL_CTX_use_PrivateKey_file(t->ctx, o->key_file,
                                               SSL_FILETYPE_PEM) != 1 ||
                   SSL_CTX_check_private_key(t->ctx) != 1) {
            openssl_detail(detail, sizeof detail);
            err->code = RLOCK_EINVAL;
            snprintf(err->msg, sizeof err->msg, "TLS: cannot use key %s: %s",
                     o->key_file, detail);
        }
    }
    if (err->code != 0) {
        rlock__tls_ctx_free(t);
        return err->code;
    }
    *out = t;
    return RLOCK_OK;
}

void rlock__tls_ctx_free(rlock__tls_ctx *t)
{
    if (!t)
        return;
    SSL_CTX_free(t->ctx);
    free(t);
}

/* ---- the transport ------------------------------------------------------ */

static SSL *ssl_of(const rlock__conn *c)
{
    return rlock__conn_tdata(c);
}

/* Why a handshake or a record failed, in words. */
static void describe(SSL *ssl, int ret, int sslerr, rlock__neterr *err)
{
    long v = SSL_get_verify_result(ssl);
    char detail[200];

    err->code = RLOCK_ECONNECT;
    if (v == X509_V_ERR_HOSTNAME_MISMATCH ||
        v == X509_V_ERR_IP_ADDRESS_MISMATCH) {
        snprintf(err->msg, sizeof err->msg,
                 "TLS: host name mismatch: the server's certificate does "
                 "not name the host connected to (%s)",
                 X509_verify_cert_error_string(v));
        return;
    }
    if (v != X509_V_OK) {
        snprintf(err->msg, sizeof err->msg,
                 "TLS: the server's certificate is not trusted: %s",
                 X509_verify_cert_error_string(v));
        return;
    }
    if (sslerr == SSL_ERROR_SYSCALL && ERR_peek_error() == 0) {
        snprintf(err->msg, sizeof err->msg,
                 "TLS handshake failed: the server closed the connection%s",
                 ret == 0 ? " (does it speak TLS?)" : "");
        return;
    }
    openssl_detail(detail, sizeof detail);
    snprintf(err->msg, sizeof err->msg,
             "TLS handshake failed (does the server speak TLS?): %s", detail);
}

static int tls_handshake(rlock__conn *c, rlock__neterr *err)
{
    SSL *ssl = ssl_of(c);
    int ret, e;

    ERR_clear_error();
    ret = SSL_connect(ssl);
    if (ret == 1)
        return 0;
    e = SSL_get_error(ssl, ret);
    if (e == SSL_ERROR_WANT_READ)
        return RLOCK__IO_WANT_READ;
    if (e == SSL_ERROR_WANT_WRITE)
        return RLOCK__IO_WANT_WRITE;
    describe(ssl, ret, e, err);
    return RLOCK__IO_ERROR;
}

static ssize_t record_error(SSL *ssl, int ret, rlock__neterr *err)
{
    int e = SSL_get_error(ssl, ret);
    char detail[200];

    switch (e) {
    case SSL_ERROR_WANT_READ:
        return RLOCK__IO_WANT_READ;
    case SSL_ERROR_WANT_WRITE:
        return RLOCK__IO_WANT_WRITE;
    case SSL_ERROR_ZERO_RETURN:
        return 0;
    case SSL_ERROR_SYSCALL:
        if (ERR_peek_error() == 0 && errno == 0)
            return 0; /* the peer closed without close_notify */
        err->code = RLOCK_EIO;
        snprintf(err->msg, sizeof err->msg, "TLS: %s",
                 errno ? strerror(errno) : "connection lost");
        ERR_clear_error();
        return RLOCK__IO_ERROR;
    default:
        openssl_detail(detail, sizeof detail);
        err->code = RLOCK_EIO;
        snprintf(err->msg, sizeof err->msg, "TLS: %s", detail);
        return RLOCK__IO_ERROR;
    }
}

static ssize_t tls_read(rlock__conn *c, void *buf, size_t len,
                        rlock__neterr *err)
{
    SSL *ssl = ssl_of(c);
    int ret;

    ERR_clear_error();
    errno = 0;
    ret = SSL_read(ssl, buf, len > INT32_MAX ? INT32_MAX : (int)len);
    if (ret > 0)
        return ret;
    return record_error(ssl, ret, err);
}

static ssize_t tls_write(rlock__conn *c, const void *buf, size_t len,
                         rlock__neterr *err)
{
    SSL *ssl = ssl_of(c);
    int ret;

    ERR_clear_error();
    errno = 0;
    ret = SSL_write(ssl, buf, len > INT32_MAX ? INT32_MAX : (int)len);
    if (ret > 0)
        return ret;
    ret = (int)record_error(ssl, ret, err);
    if (ret == 0) { /* a write cannot meet an orderly end of stream */
        err->code = RLOCK_EIO;
        snprintf(err->msg, sizeof err->msg, "TLS: connection closed");
        return RLOCK__IO_ERROR;
    }
    return ret;
}

static int tls_buffered(const rlock__conn *c)
{
    return SSL_pending(ssl_of(c)) > 0;
}

static void tls_release(rlock__conn *c)
{
    SSL_free(ssl_of(c)); /* frees the BIO too */
}

static const rlock__transport tls_transport = {
    "tls",        tls_handshake, tls_read, tls_write,
    tls_buffered, tls_release,   NULL};

static int is_address(const char *name)
{
    unsigned char buf[sizeof(struct in6_addr)];

    return inet_pton(AF_INET, name, buf) == 1 ||
           inet_pton(AF_INET6, name, buf) == 1;
}

int rlock__tls_attach(rlock__conn *c, const rlock__tls_ctx *ctx,
                      const char *server_name, rlock__neterr *err)
{
    SSL *ssl;
    BIO *bio;

    pthread_once(&bio_once, bio_method_init);
    if (!bio_method || !(ssl = SSL_new(ctx->ctx))) {
        err->code = RLOCK_ENOMEM;
        snprintf(err->msg, sizeof err->msg, "cannot create a TLS session");
        return err->code;
    }
    bio = BIO_new(bio_method);
    if (!bio) {
        SSL_free(ssl);
        err->code = RLOCK_ENOMEM;
        snprintf(err->msg, sizeof err->msg, "cannot create a TLS session");
        return err->code;
    }
    BIO_set_data(bio, (void *)(intptr_t)rlock__conn_sock(c));
    SSL_set_bio(ssl, bio, bio);
    if (server_name[0] && !is_address(server_name))
        SSL_set_tlsext_host_name(ssl, server_name);
    /* Verifying a chain without a name would take any certificate the
     * CAs ever signed, for any name: a connection with no name to check
     * (a unix socket without sni=) is refused unless verification is
     * off. */
    if (!ctx->insecure && !server_name[0]) {
        SSL_free(ssl);
        err->code = RLOCK_EINVAL;
        snprintf(err->msg, sizeof err->msg,
                 "TLS: no server name to verify the certificate against "
                 "(give sni=NAME, or insecure=1 to skip verification)");
        return err->code;
    }
    if (!ctx->insecure) {
        X509_VERIFY_PARAM *p = SSL_get0_param(ssl);
        int ok = is_address(server_name)
                     ? X509_VERIFY_PARAM_set1_ip_asc(p, server_name)
                     : X509_VERIFY_PARAM_set1_host(p, server_name, 0);
        if (ok != 1) {
            SSL_free(ssl);
            err->code = RLOCK_EINVAL;
            snprintf(err->msg, sizeof err->msg,
                     "TLS: cannot verify against the name %s", server_name);
            return err->code;
        }
    }
    rlock__conn_set_transport(c, &tls_transport, ssl);
    return RLOCK_OK;
}
