/* SPDX-License-Identifier: BSD-3-Clause */
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

#include "harness/aloop.h"
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

/* Makes the certificates in a new directory. */
static void tls_certs_make(tls_env *e)
{
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
}

/* A server with a TLS port (*port, its text in port_s, 16 bytes) beside
 * its plain one (the harness's); clients must show a certificate if
 * auth_clients. more: further "--name value" arguments, NULL-ended (at
 * most 4); monitor: a Sentinel monitoring that, as in rt_server_opts. */
static rt_server *tls_server(const tls_env *e, int auth_clients,
                             const char *const *more, const char *monitor,
                             int cluster, int *port, char *port_s)
{
    rt_server_opts so;
    int i, n = 0;

    *port = rt_free_port();
    snprintf(port_s, 16, "%d", *port);
    memset(&so, 0, sizeof so);
    so.extra[n++] = "--tls-port";
    so.extra[n++] = port_s;
    so.extra[n++] = "--tls-cert-file";
    so.extra[n++] = e->cert;
    so.extra[n++] = "--tls-key-file";
    so.extra[n++] = e->key;
    so.extra[n++] = "--tls-ca-cert-file";
    so.extra[n++] = e->ca;
    so.extra[n++] = "--tls-auth-clients";
    so.extra[n++] = auth_clients ? "yes" : "no";
    for (i = 0; more && more[i] && i < 4; i++)
        so.extra[n++] = more[i];
    if (cluster) {
        /* The bus would be on the TLS port + 10000, which may be taken
         * or beyond 65535: a free one of its own. */
        static char bus[16];
        snprintf(bus, sizeof bus, "%d", rt_free_port());
        so.extra[n++] = "--cluster-port";
        so.extra[n++] = bus;
    }
    so.sentinel_monitor = monitor;
    so.cluster_enabled = cluster;
    return rt_server_start(&so);
}

/* Makes the certificates and starts one TLS server. */
static void tls_env_start(tls_env *e, int auth_clients)
{
    tls_certs_make(e);
    e->s = tls_server(e, auth_clients, NULL, NULL, 0, &e->port, e->port_s);
}

static void tls_env_stop(tls_env *e)
{
    char cmd[400];

    if (e->s)
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
    int rc = rlock_mutex_lock(m);

    if (rc != RLOCK_OK)
        rt_fail(__FILE__, __LINE__, "lock: %s (%s)", rlock_strerror(rc),
                rlock_client_errmsg(c));
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
    /* A CA file in a redis:// URL means TLS too. */
    snprintf(q, sizeof q, "redis://127.0.0.1:%d?cacert=%s", e.port, e.ca);
    c = rt_client(q, NULL);
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

/* A URL can only add TLS: what the options ask for stays, and a URL that
 * says otherwise is refused before anything is sent (whoever can set a
 * program's RLOCK_URL must not turn TLS off or bring a CA of their own). */
TEST(a_url_can_only_add_tls)
{
    tls_env e;
    char q[1200];
    rlock_client_opts o;
    rlock_client *c;
    int err;

    tls_env_start(&e, 0);
    rlock_client_opts_init(&o);
    o.tls = 1;
    o.tls_ca_file = e.ca;
    /* tls=0 over the options' tls: refused, not a plain connection. */
    snprintf(q, sizeof q, "redis://127.0.0.1:%d?tls=0", rt_server_port(e.s));
    CHECK(rlock_client_open(q, &o, &err) == NULL);
    CHECK_RC(err, RLOCK_EINVAL);
    CHECK(strstr(rlock_client_errmsg(NULL), "tls=0") != NULL);
    /* Another CA, or verification off, over the options' CA. */
    snprintf(q, sizeof q, "redis://127.0.0.1:%d?cacert=%s", e.port,
             e.other_ca);
    CHECK(rlock_client_open(q, &o, &err) == NULL);
    CHECK_RC(err, RLOCK_EINVAL);
    snprintf(q, sizeof q, "redis://127.0.0.1:%d?insecure=1", e.port);
    CHECK(rlock_client_open(q, &o, &err) == NULL);
    CHECK_RC(err, RLOCK_EINVAL);
    snprintf(q, sizeof q, "redlock://127.0.0.1:%d?tls=0", e.port);
    CHECK(rlock_client_open(q, &o, &err) == NULL);
    CHECK_RC(err, RLOCK_EINVAL);
    /* Saying the same again, or adding what the options left open, is
     * fine. */
    snprintf(q, sizeof q, "redis://127.0.0.1:%d?tls=1&cacert=%s&sni=localhost",
             e.port, e.ca);
    c = rt_client(q, &o);
    works(c);
    rlock_client_close(c);
    /* A TLS connection without a name to verify is refused, whatever
     * asks for it (the URL check aside). */
    rlock_client_opts_init(&o);
    o.tls = 1;
    o.tls_ca_file = e.ca;
    CHECK(rlock_client_open("unix:///tmp/rlock-no-such.sock", &o, &err) ==
          NULL);
    CHECK_RC(err, RLOCK_EINVAL);
    CHECK(strstr(rlock_client_errmsg(NULL), "sni=") != NULL);
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

/* Redlock over TLS: the parameters in the URL's query (beside Redlock's
 * own) apply to every node; a node list over TLS refuses an untrusted CA
 * and a plain-text client. */
TEST(redlock_over_tls)
{
    tls_env e;
    rt_server *s[3];
    int port[3];
    char port_s[3][16], nodes[200], u[1400];
    rlock_client_opts o;
    rlock_client *c;
    int i;

    memset(&e, 0, sizeof e);
    tls_certs_make(&e);
    for (i = 0; i < 3; i++)
        s[i] = tls_server(&e, 0, NULL, NULL, 0, &port[i], port_s[i]);
    snprintf(nodes, sizeof nodes, "127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d",
             port[0], port[1], port[2]);
    snprintf(u, sizeof u, "redlock://%s?drift=0.02&cacert=%s", nodes, e.ca);
    c = rt_client(u, NULL);
    {
        rlock_mutex *m = rt_mutex(c, "tls-redlock", NULL);
        CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
        /* Every node has it, reached over TLS only. */
        for (i = 0; i < 3; i++)
            CHECK_INT(rt_cmd_int(s[i], "EXISTS {rlock:tls-redlock}"), ==, 1);
        CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
        rlock_mutex_free(m);
    }
    rlock_client_close(c);
    /* The same through the options. */
    rlock_client_opts_init(&o);
    o.tls = 1;
    o.tls_ca_file = e.ca;
    snprintf(u, sizeof u, "redlock://%s", nodes);
    c = rt_client(u, &o);
    rlock_client_close(c);

    rlock_client_opts_init(&o);
    o.connect_timeout_ms = 1000;
    snprintf(u, sizeof u, "redlock://%s?cacert=%s", nodes, e.other_ca);
    fails_with(u, &o, RLOCK_EQUORUM, "not trusted");
    snprintf(u, sizeof u, "redlock://%s?cacert=%s&bogus=1", nodes, e.ca);
    fails_with(u, &o, RLOCK_EINVAL, "bogus");
    for (i = 0; i < 3; i++)
        rt_server_stop(s[i]);
    tls_env_stop(&e);
}

/* A cluster whose bus and clients speak TLS (one node with every slot):
 * the node addresses CLUSTER SLOTS gives over TLS are its TLS ports, and
 * the seed's TLS parameters apply to the nodes found. */
TEST(cluster_over_tls)
{
    static const char *const more[] = {"--tls-cluster", "yes", NULL};
    tls_env e;
    rt_server *s;
    int port;
    char port_s[16], u[1400];
    rlock_client *c;

    memset(&e, 0, sizeof e);
    tls_certs_make(&e);
    s = tls_server(&e, 0, more, NULL, 1, &port, port_s);
    freeReplyObject(rt_cmd(s, "CLUSTER ADDSLOTSRANGE 0 16383"));
    RT_WAIT_UNTIL(rt_cluster_ok(s), 20000);
    snprintf(u, sizeof u, "redis-cluster://127.0.0.1:%d?cacert=%s", port,
             e.ca);
    c = rt_client(u, NULL);
    works(c);
    rlock_client_close(c);
    {
        rlock_client_opts o;
        rlock_client_opts_init(&o);
        o.connect_timeout_ms = 1000;
        snprintf(u, sizeof u, "redis-cluster://127.0.0.1:%d?cacert=%s", port,
                 e.other_ca);
        fails_with(u, &o, RLOCK_ECONNECT, "not trusted");
    }
    rt_server_stop(s);
    tls_env_stop(&e);
}

/* Sentinel over TLS: the sentinel is asked over TLS, watches the master
 * over TLS (tls-replication), and names the master's TLS port, which is
 * reached over TLS too. */
TEST(sentinel_over_tls)
{
    static const char *const more[] = {"--tls-replication", "yes", NULL};
    tls_env e;
    rt_server *m, *sent;
    int mport, sport;
    char mport_s[16], sport_s[16], monitor[64], u[1400];
    rlock_client *c;

    memset(&e, 0, sizeof e);
    tls_certs_make(&e);
    m = tls_server(&e, 0, NULL, NULL, 0, &mport, mport_s);
    snprintf(monitor, sizeof monitor, "tlsmaster 127.0.0.1 %d 1", mport);
    sent = tls_server(&e, 0, more, monitor, 0, &sport, sport_s);
    snprintf(u, sizeof u,
             "redis-sentinel://127.0.0.1:%d/tlsmaster?db=0&cacert=%s", sport,
             e.ca);
    c = rt_client(u, NULL);
    {
        rlock_mutex *mu = rt_mutex(c, "tls-sentinel", NULL);
        CHECK_RC(rlock_mutex_lock(mu), RLOCK_OK);
        CHECK_INT(rt_cmd_int(m, "EXISTS {rlock:tls-sentinel}"), ==, 1);
        CHECK_RC(rlock_mutex_unlock(mu), RLOCK_OK);
        rlock_mutex_free(mu);
    }
    works(c);
    rlock_client_close(c);
    {
        rlock_client_opts o;
        rlock_client_opts_init(&o);
        o.connect_timeout_ms = 1000;
        snprintf(u, sizeof u, "redis-sentinel://127.0.0.1:%d/tlsmaster", sport);
        CHECK(rlock_client_open(u, &o, NULL) == NULL);
    }
    rt_server_stop(sent);
    rt_server_stop(m);
    tls_env_stop(&e);
}

/* The event-loop API over TLS: handshakes made in steps on the loop (a
 * new connection's handshake never blocks it), waits woken over TLS. */
TEST(async_over_tls)
{
    tls_env e;
    char q[1200];

    tls_env_start(&e, 0);
    snprintf(q, sizeof q, "cacert=%s", e.ca);
    rt_async_deployment("tls", url(&e, "127.0.0.1", q), NULL, 1000, NULL, NULL);
    tls_env_stop(&e);
}
