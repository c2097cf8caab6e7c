/*
 * TLS against a real redis-server started with --tls-port, with
 * certificates made at test time by the openssl command: a CA, a server
 * certificate for 127.0.0.1 and localhost, a client certificate, and a
 * second CA that signed nothing of the server's. Verification is on by
 * default; a wrong CA, a wrong name and a server that does not speak TLS
 * are refused with their cause in the message; mutual TLS; options in the
 * URL or in rlock_client_opts; waiters woken over a TLS subscriber.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "harness/test.h"

typedef struct tls_env {
    char dir[256];
    char ca[300], other_ca[300], cert[300], key[300], ccert[300], ckey[300];
    int port; /* the server's TLS port */
    char port_s[16];
    rt_server *s;
} tls_env;

static void sh_in(const char *dir, const char *script)
{
    char cmd[4096];

    snprintf(cmd, sizeof cmd, "cd '%s' && %s", dir, script);
    if (system(cmd) != 0)
        rt_fail(__FILE__, __LINE__, "failed: %s", cmd);
}

/* Makes the certificates in a new directory and starts a server with a
 * TLS port (clients must show a certificate if auth_clients). */
static void tls_env_start(tls_env *e, int auth_clients)
{
    rt_server_opts so;
    static const char *key_opts =
        "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    char script[2048];

    snprintf(e->dir, sizeof e->dir, "/tmp/rlock-tls-XXXXXX");
    if (!mkdtemp(e->dir))
        rt_fail(__FILE__, __LINE__, "mkdtemp");
    snprintf(script, sizeof script,
             "openssl req -x509 %s -keyout ca.key -out ca.crt -days 2 "
             "-subj /CN=rlock-test-ca 2>/dev/null && "
             "openssl req -x509 %s -keyout other.key -out other.crt -days 2 "
             "-subj /CN=rlock-other-ca 2>/dev/null && "
             "openssl req %s -keyout server.key -out server.csr "
             "-subj /CN=localhost 2>/dev/null && "
             "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > ext && "
             "openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key "
             "-CAcreateserial -out server.crt -days 2 -extfile ext "
             "2>/dev/null && "
             "openssl req %s -keyout client.key -out client.csr "
             "-subj /CN=rlock-client 2>/dev/null && "
             "openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key "
             "-CAcreateserial -out client.crt -days 2 2>/dev/null",
             key_opts, key_opts, key_opts, key_opts);
    sh_in(e->dir, script);
    snprintf(e->ca, sizeof e->ca, "%s/ca.crt", e->dir);
    snprintf(e->other_ca, sizeof e->other_ca, "%s/other.crt", e->dir);
    snprintf(e->cert, sizeof e->cert, "%s/server.crt", e->dir);
    snprintf(e->key, sizeof e->key, "%s/server.key", e->dir);
    snprintf(e->ccert, sizeof e->ccert, "%s/client.crt", e->dir);
    snprintf(e->ckey, sizeof e->ckey, "%s/client.key", e->dir);
    e->port = rt_free_port();
    snprintf(e->port_s, sizeof e->port_s, "%d", e->port);
    memset(&so, 0, sizeof so);
    so.extra[0] = "--tls-port";
    so.extra[1] = e->port_s;
    so.extra[2] = "--tls-cert-file";
    so.extra[3] = e->cert;
    so.extra[4] = "--tls-key-file";
    so.extra[5] = e->key;
    so.extra[6] = "--tls-ca-cert-file";
    so.extra[7] = e->ca;
    so.extra[8] = "--tls-auth-clients";
    so.extra[9] = auth_clients ? "yes" : "no";
    e->s = rt_server_start(&so);
}

static void tls_env_stop(tls_env *e)
{
    char cmd[400];

    rt_server_stop(e->s);
    snprintf(cmd, sizeof cmd, "rm -rf %s", e->dir);
    (void)!system(cmd);
}

/* rediss://HOST:PORT?QUERY */
static const char *url(const tls_env *e, const char *host, const char *query)
{
    static char buf[1400];

    snprintf(buf, sizeof buf, "rediss://%s:%d?%s", host, e->port, query);
    return buf;
}

static void fails_with(const char *u, const rlock_client_opts *o, int code,
                       const char *says)
{
    int err = 0;

    if (rlock_client_open(u, o, &err) != NULL)
        rt_fail(__FILE__, __LINE__, "%s: opened", u);
    if (err != code || !strstr(rlock_client_errmsg(NULL), says))
        rt_fail(__FILE__, __LINE__, "%s: %s (%s), want %s with \"%s\"", u,
                rlock_strerror(err), rlock_client_errmsg(NULL),
                rlock_strerror(code), says);
}

static void works(rlock_client *c)
{
    rlock_mutex *m = rt_mutex(c, "tls", NULL);
    rlock_server_info info;
    rlock_status st;

    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    CHECK_RC(rlock_mutex_status(m, &st), RLOCK_OK);
    CHECK_INT(st.held, ==, 1);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    CHECK_RC(rlock_client_ping(c, &info), RLOCK_OK);
    rlock_mutex_free(m);
}

TEST(tls_is_verified_and_refusals_name_their_cause)
{
    tls_env e;
    char q[1200];
    rlock_client *c;
    rlock_client_opts o;

    tls_env_start(&e, 0);
    /* Verified against the CA, by address and by name. */
    snprintf(q, sizeof q, "cacert=%s", e.ca);
    c = rt_client(url(&e, "127.0.0.1", q), NULL);
    works(c);
    rlock_client_close(c);
    c = rt_client(url(&e, "localhost", q), NULL);
    works(c);
    rlock_client_close(c);
    /* The same through the options. */
    rlock_client_opts_init(&o);
    o.tls = 1;
    o.tls_ca_file = e.ca;
    snprintf(q, sizeof q, "redis://127.0.0.1:%d", e.port);
    c = rt_client(q, &o);
    works(c);
    rlock_client_close(c);

    /* A CA that did not sign the server's certificate. */
    snprintf(q, sizeof q, "cacert=%s", e.other_ca);
    fails_with(url(&e, "127.0.0.1", q), NULL, RLOCK_ECONNECT, "not trusted");
    /* The system's CAs know nothing of the test CA either. */
    fails_with(url(&e, "127.0.0.1", "tls=1"), NULL, RLOCK_ECONNECT,
               "not trusted");
    /* A name the certificate does not have. */
    snprintf(q, sizeof q, "cacert=%s&sni=wrong.example", e.ca);
    fails_with(url(&e, "127.0.0.1", q), NULL, RLOCK_ECONNECT,
               "host name mismatch");
    /* No verification, when asked for (tests only). */
    c = rt_client(url(&e, "127.0.0.1", "insecure=1"), NULL);
    works(c);
    rlock_client_close(c);
    /* A server that does not speak TLS: its plain port. */
    rlock_client_opts_init(&o);
    o.connect_timeout_ms = 1000;
    snprintf(q, sizeof q, "rediss://127.0.0.1:%d?cacert=%s",
             rt_server_port(e.s), e.ca);
    {
        int err = 0;
        CHECK(rlock_client_open(q, &o, &err) == NULL);
        if ((err != RLOCK_ECONNECT && err != RLOCK_ENOREPLY) ||
            !strstr(rlock_client_errmsg(NULL), "TLS"))
            rt_fail(__FILE__, __LINE__, "plain server: %s (%s)",
                    rlock_strerror(err), rlock_client_errmsg(NULL));
    }
    tls_env_stop(&e);
}

TEST(mutual_tls_needs_the_client_certificate)
{
    tls_env e;
    char q[1200];
    rlock_client *c;

    tls_env_start(&e, 1);
    snprintf(q, sizeof q, "cacert=%s", e.ca);
    {
        int err = 0;
        rlock_client_opts o;
        rlock_client_opts_init(&o);
        o.connect_timeout_ms = 1000;
        CHECK(rlock_client_open(url(&e, "127.0.0.1", q), &o, &err) == NULL);
        CHECK(err == RLOCK_ECONNECT || err == RLOCK_EIO);
    }
    snprintf(q, sizeof q, "cacert=%s&cert=%s&key=%s", e.ca, e.ccert, e.ckey);
    c = rt_client(url(&e, "127.0.0.1", q), NULL);
    works(c);
    rlock_client_close(c);
    tls_env_stop(&e);
}

static int64_t woken_at;

static void *wait_for(void *arg)
{
    rlock_mutex *m = arg;

    if (rlock_mutex_timedlock(m, 10000) == RLOCK_OK) {
        woken_at = rt_now_ms();
        rlock_mutex_unlock(m);
    }
    return NULL;
}

/* The subscriber connection is TLS too: a release wakes the waiter at
 * once, long before its fallback timer (a third of waiter_ttl_ms). */
TEST(waiters_are_woken_over_tls)
{
    tls_env e;
    char q[1200];
    rlock_client *a, *b;
    rlock_mutex *ma, *mb;
    pthread_t th;
    int64_t released_at;

    tls_env_start(&e, 0);
    snprintf(q, sizeof q, "cacert=%s", e.ca);
    a = rt_client(url(&e, "127.0.0.1", q), NULL);
    b = rt_client(url(&e, "127.0.0.1", q), NULL);
    ma = rt_mutex(a, "tls-wake", NULL);
    mb = rt_mutex(b, "tls-wake", NULL);
    CHECK_RC(rlock_mutex_lock(ma), RLOCK_OK);
    woken_at = 0;
    CHECK(pthread_create(&th, NULL, wait_for, mb) == 0);
    rt_sleep_ms(300); /* the waiter queues and subscribes */
    released_at = rt_now_ms();
    CHECK_RC(rlock_mutex_unlock(ma), RLOCK_OK);
    pthread_join(th, NULL);
    CHECK(woken_at != 0);
    CHECK_INT(woken_at - released_at, <, 1000);
    rlock_mutex_free(ma);
    rlock_mutex_free(mb);
    rlock_client_close(a);
    rlock_client_close(b);
    tls_env_stop(&e);
}
