/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Fault scenario 8: a bad-input table for every public function.
 *
 * Each row of the table makes one call with one bad argument - or one call
 * the contract explicitly allows, such as rlock_mutex_free(NULL) - and says
 * what must come back: the return code (or NULL, or a handle), and a piece
 * of the detail message where the API gives one. The rows run against a
 * real server, and after each row the runner reads INFO commandstats and
 * the connection count: a bad argument is refused before anything is sent,
 * and no connection is even opened. URLs and options that a slip in the
 * checks would let through point at that server, so the slip shows. At the
 * end the runner checks that no key changed and that the lock the test
 * holds (which the non-owner rows try to release) is still held.
 *
 * The table runs to the end and lists every row that failed, so that one
 * run shows every defect. A second test checks that every RLOCK_API
 * function of the header has rows; tests/install/api_coverage.sh checks
 * that api_functions[] below is exactly the header's list.
 */
#include <limits.h>
#include <string.h>
#include <sys/mman.h>

#include "harness/test.h"

/* What a call returned, when it is not an rlock error code. */
#define RT_HANDLE 1000LL    /* a client or mutex handle (already freed) */
#define RT_NULL 1001LL      /* NULL, where err was NULL so no code exists */
#define RT_FN_CALLED 1002LL /* rlock_with called fn although it must not */
#define RT_MISMATCH 1003LL  /* a returned value differs from the contract */
#define RT_DIED 1004LL      /* a forked child died */

/* Where the detail message of a row is read. */
enum msg_from {
    MSG_NONE,     /* the call gives no message */
    MSG_OPEN,     /* rlock_client_errmsg(NULL) */
    MSG_C,        /* rlock_client_errmsg(c) */
    MSG_C2,       /* rlock_client_errmsg(c2) */
    MSG_RETURNED, /* a string the call returned, or captured elsewhere */
    MSG_OWNER,    /* rlock_owner_errmsg(owner) */
};

/* A row either must send nothing (the default) or may talk to Redis (a
 * call the contract allows that opens a connection). */
#define SENDS_NOTHING 0
#define MAY_SEND 1

struct bi;

struct row {
    const char *fn;   /* the public function the row is about */
    const char *what; /* the bad argument, in words */
    long long (*call)(struct bi *t);
    long long want;
    const char *msg; /* substring of the detail message, or NULL */
    int from;        /* enum msg_from */
    int64_t n;       /* a number for the call (wait, lease, option value) */
    const char *s;   /* a string for the call (URL, option field, name) */
    int may_send;
    size_t declared; /* sizeof(&fn): fn must be a declared function */
};

/* The fixtures every row may use. */
struct bi {
    rt_server *s;
    rlock_client *c;     /* the client most rows use */
    rlock_client *c2;    /* another client: another owner */
    rlock_client *quiet; /* where the runner parks the last error */
    rlock_mutex *m;      /* "bi-free": nobody holds it */
    rlock_mutex *held;   /* "bi-held": held by the main thread through c */
    rlock_mutex *other;  /* "bi-held" through c2 */
    rlock_owner *owner;  /* an owner that holds nothing */
    const struct row *row;
    const char *ret; /* MSG_RETURNED */
    char buf[512];   /* an expanded URL, or a message read elsewhere */
    int fn_calls;    /* calls of with_fn */
    char over[RLOCK_NAME_MAX + 2]; /* RLOCK_NAME_MAX + 1 bytes */
    char max[RLOCK_NAME_MAX + 1];  /* exactly RLOCK_NAME_MAX bytes */
    char *huge;                    /* 1 MiB */
};

/* clang-format off */
/* The name in ROW() must be a declared function (sizeof(&fn) does not
 * compile otherwise), so a typo cannot hide one from the coverage check. */
#define ROW(fn, what, call, want, msg, from)                                   \
    {#fn, what, call, want, msg, from, 0, NULL, SENDS_NOTHING, sizeof(&fn)}
#define ROWN(fn, what, call, want, msg, from, n)                               \
    {#fn, what, call, want, msg, from, n, NULL, SENDS_NOTHING, sizeof(&fn)}
#define ROWS(fn, what, call, want, msg, from, s)                               \
    {#fn, what, call, want, msg, from, 0, s, SENDS_NOTHING, sizeof(&fn)}
#define ROWNS(fn, what, call, want, msg, from, n, s)                           \
    {#fn, what, call, want, msg, from, n, s, SENDS_NOTHING, sizeof(&fn)}
/* Calls the contract allows that talk to Redis. */
#define ROW_SENDS(fn, what, call, want, n, s)                                  \
    {#fn, what, call, want, NULL, MSG_NONE, n, s, MAY_SEND, sizeof(&fn)}
/* clang-format on */

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */
/* ------------------------------------------------------------------------ */

/* A pointer result as a row result: the handle is freed at once. err is
 * read here, after the call (an argument next to the call could be read
 * before it). */
static long long client_result(rlock_client *c, const int *err)
{
    if (c) {
        rlock_client_close(c);
        return RT_HANDLE;
    }
    return *err;
}

static long long mutex_result(rlock_mutex *m, const int *err)
{
    if (m) {
        rlock_mutex_free(m);
        return RT_HANDLE;
    }
    return *err;
}

/* "$PORT" and "$SOCK" in a URL become the test server's. */
static const char *expand(struct bi *t, const char *url)
{
    char *o = t->buf, *end = t->buf + sizeof t->buf - 1;
    char port[16];

    if (!url)
        return NULL;
    snprintf(port, sizeof port, "%d", rt_server_port(t->s));
    while (*url && o < end) {
        const char *add = NULL;
        if (strncmp(url, "$PORT", 5) == 0)
            add = port;
        else if (strncmp(url, "$SOCK", 5) == 0)
            add = rt_server_socket(t->s);
        if (add) {
            size_t n = strlen(add);
            if (n > (size_t)(end - o))
                n = (size_t)(end - o);
            memcpy(o, add, n);
            o += n;
            url += 5;
        } else {
            *o++ = *url++;
        }
    }
    *o = '\0';
    return t->buf;
}

/* The detail message of the calling thread, whichever client it is on
 * (at most one of these is not ""). */
static const char *any_errmsg(struct bi *t)
{
    const char *m = rlock_client_errmsg(NULL);

    if (!*m)
        m = rlock_client_errmsg(t->c);
    if (!*m)
        m = rlock_client_errmsg(t->c2);
    return m;
}

/* Runs fn on a thread of its own: another owner than the main thread. Its
 * message is read on that thread (messages are per thread). */
struct elsewhere {
    struct bi *t;
    long long (*fn)(struct bi *t);
    long long rc;
};

static void *elsewhere_main(void *p)
{
    struct elsewhere *e = p;

    e->rc = e->fn(e->t);
    snprintf(e->t->buf, sizeof e->t->buf, "%s", any_errmsg(e->t));
    return NULL;
}

static long long on_thread(struct bi *t, long long (*fn)(struct bi *t))
{
    struct elsewhere e = {t, fn, 0};
    pthread_t th;

    if (pthread_create(&th, NULL, elsewhere_main, &e) != 0)
        rt_fail(__FILE__, __LINE__, "pthread_create failed");
    pthread_join(th, NULL);
    t->ret = t->buf;
    return e.rc;
}

/* Runs fn in a forked child: a child never owns its parent's holds. */
struct child_out {
    long long rc;
    char msg[512];
};

static struct child_out *child_out;
static struct bi *child_t;
static long long (*child_fn)(struct bi *t);

static int child_main(void *arg)
{
    (void)arg;
    child_out->rc = child_fn(child_t);
    snprintf(child_out->msg, sizeof child_out->msg, "%s", any_errmsg(child_t));
    return 0;
}

static long long in_child(struct bi *t, long long (*fn)(struct bi *t))
{
    child_t = t;
    child_fn = fn;
    memset(child_out, 0, sizeof *child_out);
    if (rt_wait(rt_fork(child_main, NULL)) != 0)
        return RT_DIED;
    snprintf(t->buf, sizeof t->buf, "%s", child_out->msg);
    t->ret = t->buf;
    return child_out->rc;
}

static int with_fn(void *arg, uint64_t token)
{
    struct bi *t = arg;

    (void)token;
    t->fn_calls++;
    return 7;
}

/* ------------------------------------------------------------------------ */
/* The calls                                                                */
/* ------------------------------------------------------------------------ */

/* rlock_strerror, rlock_version */

static long long strerror_n(struct bi *t)
{
    t->ret = rlock_strerror((int)t->row->n);
    return t->ret ? 0 : RT_NULL;
}

static long long version(struct bi *t)
{
    t->ret = rlock_version();
    return t->ret && strcmp(t->ret, RLOCK_VERSION_STRING) == 0 ? 0
                                                               : RT_MISMATCH;
}

/* rlock_client_opts_init, rlock_mutex_opts_init: o != NULL is the
 * contract, so NULL is not called. What they must withstand is an
 * uninitialised struct: every field gets its default. */

static long long client_opts_init_garbage(struct bi *t)
{
    rlock_client_opts o;

    (void)t;
    memset(&o, 0x55, sizeof o);
    rlock_client_opts_init(&o);
    return o.connect_timeout_ms == 2000 && o.command_timeout_ms == 2000 &&
                   o.watchdog_lease_ms == 30000 && o.waiter_ttl_ms == 5000 &&
                   o.use_pubsub == 1 && o.backoff_min_ms == 5 &&
                   o.backoff_max_ms == 100 && o.max_connections == 64 &&
                   o.key_prefix && strcmp(o.key_prefix, "rlock") == 0 &&
                   !o.username && !o.password && o.sync_replicas == 0 &&
                   o.sync_timeout_ms == 1000
               ? 0
               : RT_MISMATCH;
}

static long long mutex_opts_init_garbage(struct bi *t)
{
    rlock_mutex_opts o;

    (void)t;
    memset(&o, 0x55, sizeof o);
    rlock_mutex_opts_init(&o);
    return o.lease_ms == 0 && o.max_renewals == 0 && !o.on_lost &&
                   !o.on_lost_arg && o.sync_replicas == 0
               ? 0
               : RT_MISMATCH;
}

/* rlock_client_open */

static long long open_url(struct bi *t)
{
    int err = 12345;
    rlock_client *c = rlock_client_open(expand(t, t->row->s), NULL, &err);

    return client_result(c, &err);
}

static long long open_url_err_null(struct bi *t)
{
    rlock_client *c = rlock_client_open(expand(t, t->row->s), NULL, NULL);

    return c ? client_result(c, NULL) : RT_NULL;
}

/* A bad URL whose password must not appear in the message. */
static long long open_url_hides_password(struct bi *t)
{
    int err = 0;
    rlock_client *c = rlock_client_open(
        expand(t, "redis://u:Pa55word@127.0.0.1:$PORT/x"), NULL, &err);

    if (!c && strstr(rlock_client_errmsg(NULL), "Pa55word"))
        return RT_MISMATCH;
    return client_result(c, &err);
}

static void set_int_field(rlock_client_opts *o, const char *field, int64_t v)
{
    if (strcmp(field, "connect_timeout_ms") == 0)
        o->connect_timeout_ms = (int)v;
    else if (strcmp(field, "command_timeout_ms") == 0)
        o->command_timeout_ms = (int)v;
    else if (strcmp(field, "watchdog_lease_ms") == 0)
        o->watchdog_lease_ms = v;
    else if (strcmp(field, "waiter_ttl_ms") == 0)
        o->waiter_ttl_ms = v;
    else if (strcmp(field, "backoff_min_ms") == 0)
        o->backoff_min_ms = (int)v;
    else if (strcmp(field, "backoff_max_ms") == 0)
        o->backoff_max_ms = (int)v;
    else if (strcmp(field, "max_connections") == 0)
        o->max_connections = (int)v;
    else if (strcmp(field, "sync_replicas") == 0)
        o->sync_replicas = (int)v;
    else if (strcmp(field, "sync_timeout_ms") == 0)
        o->sync_timeout_ms = (int)v;
    else if (strcmp(field, "backoff_min_ms=backoff_max_ms") == 0)
        o->backoff_min_ms = o->backoff_max_ms = (int)v;
    else
        rt_fail(__FILE__, __LINE__, "no option field %s", field);
}

/* Opens on the test server with one option field set to n: an option
 * that slipped through would connect, and the runner would see it. */
static long long open_field(struct bi *t)
{
    rlock_client_opts o;
    int err = 12345;

    rlock_client_opts_init(&o);
    set_int_field(&o, t->row->s, t->row->n);
    return client_result(rlock_client_open(rt_server_url(t->s), &o, &err),
                         &err);
}

/* A 1 ms timeout is a valid setting, not bad input: the open either
 * fits in it or times out (RLOCK_ENOREPLY) on a loaded machine or under
 * a sanitizer; either way it was not refused, which is what the row is
 * about. */
static long long open_tiny_timeout(struct bi *t)
{
    rlock_client_opts o;
    int err = 12345;
    long long rc;

    rlock_client_opts_init(&o);
    set_int_field(&o, t->row->s, t->row->n);
    rc = client_result(rlock_client_open(rt_server_url(t->s), &o, &err), &err);
    return rc == RLOCK_ENOREPLY ? RT_HANDLE : rc;
}

static long long open_prefix(struct bi *t)
{
    rlock_client_opts o;
    int err = 12345;

    rlock_client_opts_init(&o);
    o.key_prefix = t->row->s;
    return client_result(rlock_client_open(rt_server_url(t->s), &o, &err),
                         &err);
}

static long long open_prefix_65(struct bi *t)
{
    rlock_client_opts o;
    char p[66];
    int err = 12345;

    memset(p, 'p', 65);
    p[65] = '\0';
    rlock_client_opts_init(&o);
    o.key_prefix = p;
    (void)t;
    return client_result(rlock_client_open(rt_server_url(t->s), &o, &err),
                         &err);
}

static long long open_prefix_64(struct bi *t)
{
    rlock_client_opts o;
    char p[65];
    int err = 12345;

    memset(p, 'p', 64);
    p[64] = '\0';
    rlock_client_opts_init(&o);
    o.key_prefix = p;
    return client_result(rlock_client_open(rt_server_url(t->s), &o, &err),
                         &err);
}

static long long open_username_only(struct bi *t)
{
    rlock_client_opts o;
    int err = 12345;

    rlock_client_opts_init(&o);
    o.username = "someone";
    return client_result(rlock_client_open(rt_server_url(t->s), &o, &err),
                         &err);
}

/* rlock_client_opts o = {0}: fields never initialised. */
static long long open_zeroed_opts(struct bi *t)
{
    rlock_client_opts o;
    int err = 12345;

    memset(&o, 0, sizeof o);
    return client_result(rlock_client_open(rt_server_url(t->s), &o, &err),
                         &err);
}

/* A bad option and a bad URL: refused, whichever is reported. */
static long long open_bad_opts_and_url(struct bi *t)
{
    rlock_client_opts o;
    int err = 12345;

    (void)t;
    rlock_client_opts_init(&o);
    o.command_timeout_ms = -1;
    return client_result(rlock_client_open("http://x", &o, &err), &err);
}

static long long open_bad_opts_err_null(struct bi *t)
{
    rlock_client_opts o;
    rlock_client *c;

    rlock_client_opts_init(&o);
    o.waiter_ttl_ms = 0;
    c = rlock_client_open(rt_server_url(t->s), &o, NULL);
    return c ? client_result(c, NULL) : RT_NULL;
}

/* rlock_client_close, rlock_client_errmsg, rlock_client_cancel_waits */

static long long close_null(struct bi *t)
{
    (void)t;
    rlock_client_close(NULL);
    return 0;
}

static long long errmsg_null_is_empty(struct bi *t)
{
    t->ret = rlock_client_errmsg(NULL);
    return t->ret && *t->ret == '\0' ? 0 : RT_MISMATCH;
}

/* An error on c2 is not c's error. */
static long long errmsg_of_another_client(struct bi *t)
{
    int err;

    CHECK(rlock_mutex_new(t->c2, "", NULL, &err) == NULL);
    t->ret = rlock_client_errmsg(t->c);
    return t->ret && *t->ret == '\0' ? 0 : RT_MISMATCH;
}

static long long errmsg_c(struct bi *t)
{
    t->ret = rlock_client_errmsg(t->c);
    return t->ret ? 0 : RT_MISMATCH;
}

/* An error on c on this thread is not another thread's error. */
static long long errmsg_on_another_thread(struct bi *t)
{
    int err;

    CHECK(rlock_mutex_new(t->c, "", NULL, &err) == NULL);
    on_thread(t, errmsg_c);
    return t->buf[0] == '\0' ? 0 : RT_MISMATCH;
}

static long long cancel_null(struct bi *t)
{
    (void)t;
    rlock_client_cancel_waits(NULL);
    return 0;
}

static long long cancel_nobody_waiting(struct bi *t)
{
    rlock_client_cancel_waits(t->c);
    return 0;
}

/* rlock_client_ping */

static long long ping_null_client(struct bi *t)
{
    rlock_server_info info;

    (void)t;
    return rlock_client_ping(NULL, &info);
}

static long long ping_null_info(struct bi *t)
{
    return rlock_client_ping(t->c, NULL);
}

static long long ping_null_both(struct bi *t)
{
    (void)t;
    return rlock_client_ping(NULL, NULL);
}

/* rlock_mutex_new, rlock_mutex_new_len */

/* rlock_client_set_event_cb, _set_log_cb, _stats, _metrics_text */

static void ignore_event(const rlock_event *ev, void *arg)
{
    (void)ev;
    (void)arg;
}

static void ignore_log(int level, const char *msg, void *arg)
{
    (void)level;
    (void)msg;
    (void)arg;
}

static long long event_cb_null_client(struct bi *t)
{
    (void)t;
    return rlock_client_set_event_cb(NULL, ignore_event, NULL);
}

static long long event_cb_set_and_clear(struct bi *t)
{
    int rc = rlock_client_set_event_cb(t->c, ignore_event, t);

    return rc != RLOCK_OK ? rc : rlock_client_set_event_cb(t->c, NULL, NULL);
}

static long long log_cb_null_client(struct bi *t)
{
    (void)t;
    return rlock_client_set_log_cb(NULL, RLOCK_LOG_DEBUG, ignore_log, NULL);
}

static long long log_cb_level(struct bi *t)
{
    return rlock_client_set_log_cb(t->c, (int)t->row->n, ignore_log, NULL);
}

static long long log_cb_clear_any_level(struct bi *t)
{
    return rlock_client_set_log_cb(t->c, (int)t->row->n, NULL, NULL);
}

static long long stats_null_client(struct bi *t)
{
    rlock_stats st = RLOCK_STATS_INIT;

    (void)t;
    return rlock_client_stats(NULL, &st);
}

static long long stats_null_stats(struct bi *t)
{
    return rlock_client_stats(t->c, NULL);
}

static long long stats_size(struct bi *t)
{
    rlock_stats st;

    memset(&st, 0, sizeof st);
    st.size = (size_t)t->row->n;
    if (t->row->n > (int64_t)sizeof st)
        return RT_MISMATCH; /* a row would write past st */
    return rlock_client_stats(t->c, &st);
}

static long long stats_huge_size(struct bi *t)
{
    rlock_stats st;

    memset(&st, 0, sizeof st);
    st.size = (size_t)1 << 20; /* never set: refused, nothing written */
    return rlock_client_stats(t->c, &st);
}

static long long stats_ok(struct bi *t)
{
    rlock_stats st = RLOCK_STATS_INIT;
    int rc = rlock_client_stats(t->c, &st);

    return rc != RLOCK_OK ? rc : st.size == sizeof st ? 0 : RT_MISMATCH;
}

static long long metrics_null_client(struct bi *t)
{
    char buf[16];

    (void)t;
    return rlock_client_metrics_text(NULL, buf, sizeof buf);
}

static long long metrics_null_buf(struct bi *t)
{
    return rlock_client_metrics_text(t->c, NULL, 10);
}

static long long metrics_length_only(struct bi *t)
{
    return rlock_client_metrics_text(t->c, NULL, 0) > 0 ? 0 : RT_MISMATCH;
}

static long long metrics_one_byte(struct bi *t)
{
    char buf[2] = {'x', 'y'};
    long n = rlock_client_metrics_text(t->c, buf, 1);

    return n > 0 && buf[0] == '\0' && buf[1] == 'y' ? 0 : RT_MISMATCH;
}


static long long new_null_client(struct bi *t)
{
    int err = 12345;

    (void)t;
    return mutex_result(rlock_mutex_new(NULL, "x", NULL, &err), &err);
}

static long long new_null_both(struct bi *t)
{
    int err = 12345;

    (void)t;
    return mutex_result(rlock_mutex_new(NULL, NULL, NULL, &err), &err);
}

/* The name from row->s; "{over}", "{max}" and "{huge}" are long names. */
static const char *row_name(struct bi *t)
{
    const char *s = t->row->s;

    if (s && strcmp(s, "{over}") == 0)
        return t->over;
    if (s && strcmp(s, "{max}") == 0)
        return t->max;
    if (s && strcmp(s, "{huge}") == 0)
        return t->huge;
    return s;
}

static long long new_name(struct bi *t)
{
    int err = 12345;

    return mutex_result(rlock_mutex_new(t->c, row_name(t), NULL, &err), &err);
}

static long long new_name_err_null(struct bi *t)
{
    rlock_mutex *m = rlock_mutex_new(t->c, row_name(t), NULL, NULL);

    return m ? mutex_result(m, NULL) : RT_NULL;
}

static long long new_lease(struct bi *t)
{
    rlock_mutex_opts o;
    int err = 12345;

    rlock_mutex_opts_init(&o);
    o.lease_ms = t->row->n;
    return mutex_result(rlock_mutex_new(t->c, "x", &o, &err), &err);
}

static long long new_sync(struct bi *t)
{
    rlock_mutex_opts o;
    int err = 12345;

    rlock_mutex_opts_init(&o);
    o.sync_replicas = (int)t->row->n;
    return mutex_result(rlock_mutex_new(t->c, "x", &o, &err), &err);
}

static long long new_layout(struct bi *t)
{
    rlock_mutex_opts o;
    int err = 12345;

    rlock_mutex_opts_init(&o);
    o.layout = (int)t->row->n;
    return mutex_result(rlock_mutex_new(t->c, "x", &o, &err), &err);
}

/* Fields without a bound take any value: the largest. */
static long long new_extreme_fields(struct bi *t)
{
    rlock_mutex_opts o;
    int err = 12345;

    rlock_mutex_opts_init(&o);
    o.max_renewals = UINT32_MAX;
    o.on_lost_arg = t; /* an argument without a callback is harmless */
    return mutex_result(rlock_mutex_new(t->c, "x", &o, &err), &err);
}

/* rlock_mutex_opts o = {0} is the defaults. */
static long long new_zeroed_opts(struct bi *t)
{
    rlock_mutex_opts o;
    int err = 12345;

    memset(&o, 0, sizeof o);
    return mutex_result(rlock_mutex_new(t->c, "x", &o, &err), &err);
}

static long long new_len_null_client(struct bi *t)
{
    int err = 12345;

    (void)t;
    return mutex_result(rlock_mutex_new_len(NULL, "x", 1, NULL, &err), &err);
}

static long long new_len_null_name(struct bi *t)
{
    int err = 12345;

    return mutex_result(
        rlock_mutex_new_len(t->c, NULL, (size_t)t->row->n, NULL, &err), &err);
}

/* Length n of the name in row->s ("{over}", "{max}", ...): a length past
 * the name must never be read, the checks come first. */
static long long new_len_n(struct bi *t)
{
    int err = 12345;

    return mutex_result(
        rlock_mutex_new_len(t->c, row_name(t), (size_t)t->row->n, NULL, &err),
        &err);
}

static long long new_len_size_max(struct bi *t)
{
    int err = 12345;

    return mutex_result(rlock_mutex_new_len(t->c, "x", SIZE_MAX, NULL, &err),
                        &err);
}

static long long new_len_nul_bytes(struct bi *t)
{
    int err = 12345;

    return mutex_result(rlock_mutex_new_len(t->c, "a\0b", 3, NULL, &err), &err);
}

static long long new_len_lease(struct bi *t)
{
    rlock_mutex_opts o;
    int err = 12345;

    rlock_mutex_opts_init(&o);
    o.lease_ms = t->row->n;
    return mutex_result(rlock_mutex_new_len(t->c, "x", 1, &o, &err), &err);
}

static long long new_len_err_null(struct bi *t)
{
    rlock_mutex *m = rlock_mutex_new_len(t->c, "x", 0, NULL, NULL);

    return m ? mutex_result(m, NULL) : RT_NULL;
}

/* rlock_mutex_free, rlock_mutex_client */

static long long free_null(struct bi *t)
{
    (void)t;
    rlock_mutex_free(NULL);
    return 0;
}

static long long client_of_null(struct bi *t)
{
    (void)t;
    return rlock_mutex_client(NULL) ? RT_HANDLE : RT_NULL;
}

static long long client_of_m(struct bi *t)
{
    return rlock_mutex_client(t->m) == t->c ? 0 : RT_MISMATCH;
}

/* rlock_mutex_lock, trylock, timedlock */

static long long lock_null(struct bi *t)
{
    (void)t;
    return rlock_mutex_lock(NULL);
}

static long long trylock_null(struct bi *t)
{
    (void)t;
    return rlock_mutex_trylock(NULL);
}

static long long timedlock_null(struct bi *t)
{
    return rlock_mutex_timedlock(NULL, t->row->n);
}

static long long timedlock_n(struct bi *t)
{
    return rlock_mutex_timedlock(t->m, t->row->n);
}

/* On the lock the test holds: a bad wait is refused before re-entry. */
static long long timedlock_held_n(struct bi *t)
{
    return rlock_mutex_timedlock(t->held, t->row->n);
}

/* rlock_mutex_unlock */

static long long unlock_null(struct bi *t)
{
    (void)t;
    return rlock_mutex_unlock(NULL);
}

static long long unlock_free(struct bi *t)
{
    return rlock_mutex_unlock(t->m);
}

static long long unlock_held(struct bi *t)
{
    return rlock_mutex_unlock(t->held);
}

static long long unlock_held_on_thread(struct bi *t)
{
    return on_thread(t, unlock_held);
}

static long long unlock_held_in_child(struct bi *t)
{
    return in_child(t, unlock_held);
}

static long long unlock_other_client(struct bi *t)
{
    return rlock_mutex_unlock(t->other);
}

/* rlock_mutex_extend */

static long long extend_null(struct bi *t)
{
    return rlock_mutex_extend(NULL, t->row->n);
}

static long long extend_held_n(struct bi *t)
{
    return rlock_mutex_extend(t->held, t->row->n);
}

static long long extend_free_n(struct bi *t)
{
    return rlock_mutex_extend(t->m, t->row->n);
}

static long long extend_held_1000(struct bi *t)
{
    return rlock_mutex_extend(t->held, 1000);
}

static long long extend_held_on_thread(struct bi *t)
{
    return on_thread(t, extend_held_1000);
}

static long long extend_held_in_child(struct bi *t)
{
    return in_child(t, extend_held_1000);
}

static long long extend_other_client(struct bi *t)
{
    return rlock_mutex_extend(t->other, 1000);
}

/* rlock_mutex_token: 0 means "no hold" */

static long long token_null(struct bi *t)
{
    (void)t;
    return (long long)rlock_mutex_token(NULL);
}

static long long token_free(struct bi *t)
{
    return (long long)rlock_mutex_token(t->m);
}

static long long token_held(struct bi *t)
{
    return (long long)rlock_mutex_token(t->held);
}

static long long token_held_on_thread(struct bi *t)
{
    return on_thread(t, token_held);
}

static long long token_held_in_child(struct bi *t)
{
    return in_child(t, token_held);
}

static long long token_other_client(struct bi *t)
{
    return (long long)rlock_mutex_token(t->other);
}

/* rlock_mutex_lease_left: the code, and *left_ms is 0 on every error */

static int64_t left_seen; /* what the last call left in *left_ms */

static long long left_checked(int rc)
{
    return rc != RLOCK_OK && left_seen != 0 ? RT_MISMATCH : rc;
}

static long long left_null(struct bi *t)
{
    (void)t;
    left_seen = 7;
    return left_checked(rlock_mutex_lease_left(NULL, &left_seen));
}

static long long left_null_out(struct bi *t)
{
    return rlock_mutex_lease_left(t->held, NULL);
}

static long long left_free(struct bi *t)
{
    left_seen = 7;
    return left_checked(rlock_mutex_lease_left(t->m, &left_seen));
}

static long long left_held(struct bi *t)
{
    left_seen = 7;
    return left_checked(rlock_mutex_lease_left(t->held, &left_seen));
}

static long long left_held_on_thread(struct bi *t)
{
    return on_thread(t, left_held);
}

static long long left_held_in_child(struct bi *t)
{
    return in_child(t, left_held);
}

static long long left_other_client(struct bi *t)
{
    left_seen = 7;
    return left_checked(rlock_mutex_lease_left(t->other, &left_seen));
}

static long long left_as_null_owner(struct bi *t)
{
    left_seen = 7;
    return left_checked(rlock_mutex_lease_left_as(t->held, NULL, &left_seen));
}

static long long left_as_null_out(struct bi *t)
{
    return rlock_mutex_lease_left_as(t->held, t->owner, NULL);
}

static long long left_as_held(struct bi *t)
{
    left_seen = 7;
    return left_checked(
        rlock_mutex_lease_left_as(t->held, t->owner, &left_seen));
}

/* rlock_mutex_fence: the code, and *token is 0 on every error */

static uint64_t fenced; /* what the last fence call left in *token */

static long long fence_checked(int rc)
{
    return rc != RLOCK_OK && fenced != 0 ? RT_MISMATCH : rc;
}

static long long fence_null(struct bi *t)
{
    (void)t;
    fenced = 7;
    return fence_checked(rlock_mutex_fence(NULL, &fenced));
}

static long long fence_null_token(struct bi *t)
{
    return rlock_mutex_fence(t->held, NULL);
}

static long long fence_free(struct bi *t)
{
    fenced = 7;
    return fence_checked(rlock_mutex_fence(t->m, &fenced));
}

static long long fence_held(struct bi *t)
{
    fenced = 7;
    return fence_checked(rlock_mutex_fence(t->held, &fenced));
}

static long long fence_held_on_thread(struct bi *t)
{
    return on_thread(t, fence_held);
}

static long long fence_held_in_child(struct bi *t)
{
    return in_child(t, fence_held);
}

static long long fence_other_client(struct bi *t)
{
    fenced = 7;
    return fence_checked(rlock_mutex_fence(t->other, &fenced));
}

/* rlock_with: fn must not be called when the arguments are bad */

static long long with_result(struct bi *t, int rc)
{
    return t->fn_calls ? RT_FN_CALLED : rc;
}

static long long with_null_mutex(struct bi *t)
{
    t->fn_calls = 0;
    return with_result(t, rlock_with(NULL, 0, with_fn, t));
}

static long long with_null_fn(struct bi *t)
{
    return rlock_with(t->m, t->row->n, NULL, t);
}

static long long with_null_both(struct bi *t)
{
    (void)t;
    return rlock_with(NULL, 0, NULL, NULL);
}

static long long with_wait_n(struct bi *t)
{
    t->fn_calls = 0;
    return with_result(t, rlock_with(t->m, t->row->n, with_fn, t));
}

/* rlock_owner_* and the _as calls: another owner than the thread that
 * holds "bi-held" */

static long long owner_new_err_null(struct bi *t)
{
    rlock_owner *o = rlock_owner_new(NULL);

    (void)t;
    if (!o)
        return RT_NULL;
    rlock_owner_free(o);
    return RT_HANDLE;
}

static long long owner_free_null(struct bi *t)
{
    (void)t;
    rlock_owner_free(NULL);
    return 0;
}

static long long owner_errmsg_null(struct bi *t)
{
    t->ret = rlock_owner_errmsg(NULL);
    return t->ret && !*t->ret ? 0 : RT_MISMATCH;
}

static long long lock_as_null_mutex(struct bi *t)
{
    return rlock_mutex_lock_as(NULL, t->owner);
}

static long long lock_as_null_owner(struct bi *t)
{
    return rlock_mutex_lock_as(t->m, NULL);
}

static long long trylock_as_null_mutex(struct bi *t)
{
    return rlock_mutex_trylock_as(NULL, t->owner);
}

static long long trylock_as_null_owner(struct bi *t)
{
    return rlock_mutex_trylock_as(t->m, NULL);
}

static long long timedlock_as_null_owner(struct bi *t)
{
    return rlock_mutex_timedlock_as(t->m, NULL, t->row->n);
}

static long long timedlock_as_n(struct bi *t)
{
    return rlock_mutex_timedlock_as(t->m, t->owner, t->row->n);
}

static long long unlock_as_null_owner(struct bi *t)
{
    return rlock_mutex_unlock_as(t->held, NULL);
}

static long long unlock_as_held(struct bi *t)
{
    return rlock_mutex_unlock_as(t->held, t->owner);
}

static long long extend_as_null_mutex(struct bi *t)
{
    return rlock_mutex_extend_as(NULL, t->owner, 1000);
}

static long long extend_as_held_n(struct bi *t)
{
    return rlock_mutex_extend_as(t->held, t->owner, t->row->n);
}

static long long token_as_null_owner(struct bi *t)
{
    return (long long)rlock_mutex_token_as(t->held, NULL);
}

static long long token_as_held(struct bi *t)
{
    return (long long)rlock_mutex_token_as(t->held, t->owner);
}

static long long fence_as_null_owner(struct bi *t)
{
    fenced = 7;
    return fence_checked(rlock_mutex_fence_as(t->held, NULL, &fenced));
}

static long long fence_as_null_token(struct bi *t)
{
    return rlock_mutex_fence_as(t->held, t->owner, NULL);
}

static long long fence_as_held(struct bi *t)
{
    fenced = 7;
    return fence_checked(rlock_mutex_fence_as(t->held, t->owner, &fenced));
}

static long long with_as_null_owner(struct bi *t)
{
    t->fn_calls = 0;
    return with_result(t, rlock_with_as(t->m, NULL, 0, with_fn, t));
}

static long long with_as_null_fn(struct bi *t)
{
    return rlock_with_as(t->m, t->owner, 0, NULL, t);
}

static long long with_as_wait_n(struct bi *t)
{
    t->fn_calls = 0;
    return with_result(t, rlock_with_as(t->m, t->owner, t->row->n, with_fn, t));
}

/* rlock_mutex_status */

static long long status_null_mutex(struct bi *t)
{
    rlock_status st;

    (void)t;
    return rlock_mutex_status(NULL, &st);
}

static long long status_null_st(struct bi *t)
{
    return rlock_mutex_status(t->held, NULL);
}

static long long status_null_both(struct bi *t)
{
    (void)t;
    return rlock_mutex_status(NULL, NULL);
}

/* rlock_mutex_force_unlock */

static long long force_null_mutex(struct bi *t)
{
    rlock_status st;

    (void)t;
    return rlock_mutex_force_unlock(NULL, &st);
}

static long long force_null_both(struct bi *t)
{
    (void)t;
    return rlock_mutex_force_unlock(NULL, NULL);
}

/* removed may be NULL; on a free lock nothing is removed. */
static long long force_free_removed_null(struct bi *t)
{
    return rlock_mutex_force_unlock(t->m, NULL);
}

/* rlock_mutex_force_unlock_ex */

static long long force_ex_null_mutex(struct bi *t)
{
    rlock_status st;

    (void)t;
    return rlock_mutex_force_unlock_ex(NULL, 0, &st);
}

static long long force_ex_flags_n(struct bi *t)
{
    rlock_status st;

    return rlock_mutex_force_unlock_ex(t->held, (unsigned)t->row->n, &st);
}

static long long force_ex_free_removed_null(struct bi *t)
{
    return rlock_mutex_force_unlock_ex(t->m, RLOCK_FORCE_NO_EXPIRY, NULL);
}

/* rlock_scan_new, rlock_scan_next, rlock_scan_info, rlock_scan_free */

static void scan_key(void *arg, const char *key, size_t len)
{
    (void)arg;
    (void)key;
    (void)len;
}

static long long scan_new_null_client(struct bi *t)
{
    int err = 0;

    (void)t;
    if (rlock_scan_new(NULL, NULL, NULL, &err))
        return RT_MISMATCH;
    return err;
}

/* A walk with the row's string as its match (n = 0) or type (n = 1). */
static long long scan_new_arg(struct bi *t)
{
    const char *s = row_name(t);
    int err = 0;
    rlock_scan *sc;

    sc = t->row->n ? rlock_scan_new(t->c, NULL, s, &err)
                   : rlock_scan_new(t->c, s, NULL, &err);
    if (sc) {
        rlock_scan_free(sc);
        return RT_HANDLE;
    }
    return err;
}

static long long scan_new_err_null(struct bi *t)
{
    (void)t;
    return rlock_scan_new(NULL, NULL, NULL, NULL) ? RT_MISMATCH : RT_NULL;
}

static long long scan_next_null(struct bi *t)
{
    (void)t;
    return rlock_scan_next(NULL, 10, scan_key, NULL);
}

/* A step of a new walk with count n; with s set, fn NULL. */
static long long scan_next_count(struct bi *t)
{
    int err;
    long long rc;
    rlock_scan *sc = rlock_scan_new(t->c, NULL, NULL, &err);

    if (!sc)
        return err;
    rc = rlock_scan_next(sc, (int)t->row->n, t->row->s ? NULL : scan_key, NULL);
    rlock_scan_free(sc);
    return rc;
}

static long long scan_info_null(struct bi *t)
{
    (void)t;
    return rlock_scan_info(NULL, RLOCK_SCAN_STEPS) == -1 ? 0 : RT_MISMATCH;
}

static long long scan_info_unknown(struct bi *t)
{
    int err;
    long long rc;
    rlock_scan *sc = rlock_scan_new(t->c, NULL, NULL, &err);

    if (!sc)
        return err;
    rc = rlock_scan_info(sc, 99) == -1 && rlock_scan_info(sc, 0) == -1
             ? 0
             : RT_MISMATCH;
    rlock_scan_free(sc);
    return rc;
}

static long long scan_free_null(struct bi *t)
{
    (void)t;
    rlock_scan_free(NULL);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* The table                                                                */
/* ------------------------------------------------------------------------ */

#define OVER "{over}" /* RLOCK_NAME_MAX + 1 bytes */
#define MS_OVER (RLOCK_MS_MAX + 1)

static const struct row rows[] = {
    /* rlock_strerror: numbers rlock never returns. */
    ROWN(rlock_strerror, "1 (positive)", strerror_n, 0, "unknown error code",
         MSG_RETURNED, 1),
    ROWN(rlock_strerror, "-20 (one past the last code)", strerror_n, 0,
         "unknown error code", MSG_RETURNED, -20),
    ROWN(rlock_strerror, "-999", strerror_n, 0, "unknown error code",
         MSG_RETURNED, -999),
    ROWN(rlock_strerror, "INT_MIN", strerror_n, 0, "unknown error code",
         MSG_RETURNED, INT_MIN),
    ROWN(rlock_strerror, "INT_MAX", strerror_n, 0, "unknown error code",
         MSG_RETURNED, INT_MAX),
    ROWN(rlock_strerror, "RLOCK_OK is not an error", strerror_n, 0, "no error",
         MSG_RETURNED, RLOCK_OK),

    /* rlock_version takes nothing: it must match the header. */
    ROW(rlock_version, "(no arguments) matches RLOCK_VERSION_STRING", version,
        0, NULL, MSG_NONE),

    ROW(rlock_client_opts_init,
        "uninitialised struct gets every default "
        "(NULL is outside the contract: o != NULL)",
        client_opts_init_garbage, 0, NULL, MSG_NONE),

    /* rlock_client_open: URLs. "$PORT"/"$SOCK" are the test server's, so
     * a URL accepted by mistake would connect and be seen. */
    ROWS(rlock_client_open, "url NULL", open_url, RLOCK_EINVAL, "URL: NULL",
         MSG_OPEN, NULL),
    ROWS(rlock_client_open, "url empty", open_url, RLOCK_EINVAL,
         "must start with redis://, unix://, redis-sentinel://, redis-cluster:// or redlock://", MSG_OPEN, ""),
    ROWS(rlock_client_open, "url http://", open_url, RLOCK_EINVAL,
         "must start with redis://, unix://, redis-sentinel://, redis-cluster:// or redlock://", MSG_OPEN,
         "http://127.0.0.1:$PORT"),
    ROWS(rlock_client_open, "url without scheme", open_url, RLOCK_EINVAL,
         "must start with redis://, unix://, redis-sentinel://, redis-cluster:// or redlock://", MSG_OPEN, "127.0.0.1:$PORT"),
    ROWS(rlock_client_open, "url redis:/ (one slash)", open_url, RLOCK_EINVAL,
         "must start with redis://, unix://, redis-sentinel://, redis-cluster:// or redlock://", MSG_OPEN,
         "redis:/127.0.0.1:$PORT"),
    ROWS(rlock_client_open, "url rediss:// with tls=0", open_url,
         RLOCK_EINVAL, "rediss:// is TLS", MSG_OPEN,
         "rediss://127.0.0.1:$PORT?tls=0"),
    ROWS(rlock_client_open, "url tls=0 beside a CA file", open_url,
         RLOCK_EINVAL, "tls=0 contradicts", MSG_OPEN,
         "redis://127.0.0.1:$PORT?tls=0&cacert=/nonexistent/ca.pem"),
    ROWS(rlock_client_open, "url redlock TLS CA file missing", open_url,
         RLOCK_EINVAL, "cannot load CA file", MSG_OPEN,
         "redlock://127.0.0.1:$PORT?cacert=/nonexistent/ca.pem"),
    ROWS(rlock_client_open, "url TLS flag not 0 or 1", open_url, RLOCK_EINVAL,
         "take 0 or 1", MSG_OPEN, "redis://127.0.0.1:$PORT?insecure=2"),
    ROWS(rlock_client_open, "url TLS CA file missing", open_url, RLOCK_EINVAL,
         "cannot load CA file", MSG_OPEN,
         "rediss://127.0.0.1:$PORT?cacert=/nonexistent/ca.pem"),
    ROWS(rlock_client_open, "url TLS cert without key", open_url,
         RLOCK_EINVAL, "needs both cert and key", MSG_OPEN,
         "rediss://127.0.0.1:$PORT?insecure=1&cert=/nonexistent.pem"),
    ROWS(rlock_client_open, "url redis:// without host", open_url, RLOCK_EINVAL,
         "URL: missing host", MSG_OPEN, "redis://"),
    ROWS(rlock_client_open, "url with port but no host", open_url, RLOCK_EINVAL,
         "URL: missing host", MSG_OPEN, "redis://:$PORT"),
    ROWS(rlock_client_open, "url with empty IPv6 host", open_url, RLOCK_EINVAL,
         "URL: missing host", MSG_OPEN, "redis://[]:$PORT"),
    ROWS(rlock_client_open, "url IPv6 without ']'", open_url, RLOCK_EINVAL,
         "URL: missing ']'", MSG_OPEN, "redis://[::1:$PORT"),
    ROWS(rlock_client_open, "url junk after IPv6 host", open_url, RLOCK_EINVAL,
         "URL: junk after the host", MSG_OPEN, "redis://[::1]x$PORT"),
    ROWS(rlock_client_open, "url port 0", open_url, RLOCK_EINVAL, "URL: port",
         MSG_OPEN, "redis://127.0.0.1:0"),
    ROWS(rlock_client_open, "url port 65536", open_url, RLOCK_EINVAL,
         "URL: port", MSG_OPEN, "redis://127.0.0.1:65536"),
    ROWS(rlock_client_open, "url port -1", open_url, RLOCK_EINVAL, "URL: port",
         MSG_OPEN, "redis://127.0.0.1:-1"),
    ROWS(rlock_client_open, "url port +N", open_url, RLOCK_EINVAL, "URL: port",
         MSG_OPEN, "redis://127.0.0.1:+$PORT"),
    ROWS(rlock_client_open, "url empty port", open_url, RLOCK_EINVAL,
         "URL: port", MSG_OPEN, "redis://127.0.0.1:"),
    ROWS(rlock_client_open, "url port with letters", open_url, RLOCK_EINVAL,
         "URL: port", MSG_OPEN, "redis://127.0.0.1:$PORTab"),
    ROWS(rlock_client_open, "url port of 11 digits", open_url, RLOCK_EINVAL,
         "URL: port", MSG_OPEN, "redis://127.0.0.1:0000000$PORT"),
    ROWS(rlock_client_open, "url db not a number", open_url, RLOCK_EINVAL,
         "URL: database", MSG_OPEN, "redis://127.0.0.1:$PORT/db"),
    ROWS(rlock_client_open, "url db -1", open_url, RLOCK_EINVAL,
         "URL: database", MSG_OPEN, "redis://127.0.0.1:$PORT/-1"),
    ROWS(rlock_client_open, "url db 1x", open_url, RLOCK_EINVAL,
         "URL: database", MSG_OPEN, "redis://127.0.0.1:$PORT/1x"),
    ROWS(rlock_client_open, "url db INT_MAX + 1", open_url, RLOCK_EINVAL,
         "URL: database", MSG_OPEN, "redis://127.0.0.1:$PORT/2147483648"),
    ROWS(rlock_client_open, "url db of 11 digits", open_url, RLOCK_EINVAL,
         "URL: database", MSG_OPEN, "redis://127.0.0.1:$PORT/00000000001"),
    ROWS(rlock_client_open, "url two path segments", open_url, RLOCK_EINVAL,
         "URL: database", MSG_OPEN, "redis://127.0.0.1:$PORT/0/1"),
    ROWS(rlock_client_open, "url unknown query parameter", open_url,
         RLOCK_EINVAL, "URL: unknown parameter", MSG_OPEN,
         "redis://127.0.0.1:$PORT?timeout=1"),
    ROWS(rlock_client_open, "url fragment", open_url, RLOCK_EINVAL,
         "URL: fragments", MSG_OPEN, "redis://127.0.0.1:$PORT/0#x"),
    ROWS(rlock_client_open, "url user without password", open_url, RLOCK_EINVAL,
         "URL: a user name needs a password", MSG_OPEN,
         "redis://user@127.0.0.1:$PORT"),
    ROWS(rlock_client_open, "url empty password", open_url, RLOCK_EINVAL,
         "URL: empty password", MSG_OPEN, "redis://user:@127.0.0.1:$PORT"),
    ROWS(rlock_client_open, "url empty user and password", open_url,
         RLOCK_EINVAL, "URL: empty password", MSG_OPEN,
         "redis://:@127.0.0.1:$PORT"),
    ROWS(rlock_client_open, "url bad %-escape in password", open_url,
         RLOCK_EINVAL, "URL: bad %-escape in the password", MSG_OPEN,
         "redis://u:p%zz@127.0.0.1:$PORT"),
    ROWS(rlock_client_open, "url truncated %-escape in password", open_url,
         RLOCK_EINVAL, "URL: bad %-escape in the password", MSG_OPEN,
         "redis://u:p%4@127.0.0.1:$PORT"),
    ROWS(rlock_client_open, "url %00 in password", open_url, RLOCK_EINVAL,
         "URL: bad %-escape in the password", MSG_OPEN,
         "redis://u:p%00q@127.0.0.1:$PORT"),
    ROWS(rlock_client_open, "url bad %-escape in user", open_url, RLOCK_EINVAL,
         "URL: bad %-escape in the user name", MSG_OPEN,
         "redis://u%g1:p@127.0.0.1:$PORT"),
    ROWS(rlock_client_open, "url host with a space", open_url, RLOCK_EINVAL,
         "URL: space or control character in the host", MSG_OPEN,
         "redis://127.0.0.1 :$PORT"),
    ROWS(rlock_client_open, "url host with a newline", open_url, RLOCK_EINVAL,
         "URL: space or control character in the host", MSG_OPEN,
         "redis://127.0.0.1\n:$PORT"),
    ROWS(rlock_client_open, "url unix:// without path", open_url, RLOCK_EINVAL,
         "URL: unix:// needs an absolute socket path", MSG_OPEN, "unix://"),
    ROWS(rlock_client_open, "url unix:// relative path", open_url, RLOCK_EINVAL,
         "URL: unix:// needs an absolute socket path", MSG_OPEN,
         "unix://relative/redis.sock"),
    ROWS(rlock_client_open, "url unix:/// (root only)", open_url, RLOCK_EINVAL,
         "URL: missing socket path", MSG_OPEN, "unix:///"),
    ROWS(
        rlock_client_open, "url unix path of 108 bytes", open_url, RLOCK_EINVAL,
        "URL: socket path longer than 107 bytes", MSG_OPEN,
        "unix:///tmp/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"),
    ROWS(rlock_client_open, "url unix unknown query", open_url, RLOCK_EINVAL,
         "URL: unknown parameter", MSG_OPEN,
         "unix://$SOCK?foo=1"),
    ROWS(rlock_client_open, "url unix db not a number", open_url, RLOCK_EINVAL,
         "URL: db must be a non-negative number", MSG_OPEN,
         "unix://$SOCK?db=x"),
    ROWS(rlock_client_open, "url unix empty db", open_url, RLOCK_EINVAL,
         "URL: db must be a non-negative number", MSG_OPEN, "unix://$SOCK?db="),
    ROWS(rlock_client_open, "url unix db -1", open_url, RLOCK_EINVAL,
         "URL: db must be a non-negative number", MSG_OPEN,
         "unix://$SOCK?db=-1"),
    ROWS(rlock_client_open, "url unix db and another parameter", open_url,
         RLOCK_EINVAL, "URL: unknown parameter", MSG_OPEN,
         "unix://$SOCK?db=0&x=1"),
    ROWS(rlock_client_open, "url unix user without password", open_url,
         RLOCK_EINVAL, "URL: a user name needs a password", MSG_OPEN,
         "unix://user@$SOCK"),
    ROWS(rlock_client_open, "url unix empty password", open_url, RLOCK_EINVAL,
         "URL: empty password", MSG_OPEN, "unix://:@$SOCK"),
    ROWS(rlock_client_open, "bad url with err = NULL", open_url_err_null,
         RT_NULL, "URL: port", MSG_OPEN, "redis://127.0.0.1:0"),
    ROWS(rlock_client_open, "url NULL with err = NULL", open_url_err_null,
         RT_NULL, "URL: NULL", MSG_OPEN, NULL),
    ROW(rlock_client_open, "bad url with a password: password not shown",
        open_url_hides_password, RLOCK_EINVAL, "URL: database", MSG_OPEN),

    /* rlock_client_open: each bound of rlock_client_opts. */
    ROWNS(rlock_client_open, "connect_timeout_ms 0", open_field, RLOCK_EINVAL,
          "connect_timeout_ms", MSG_OPEN, 0, "connect_timeout_ms"),
    ROWNS(rlock_client_open, "connect_timeout_ms -1", open_field, RLOCK_EINVAL,
          "connect_timeout_ms", MSG_OPEN, -1, "connect_timeout_ms"),
    ROWNS(rlock_client_open, "connect_timeout_ms INT_MIN", open_field,
          RLOCK_EINVAL, "connect_timeout_ms", MSG_OPEN, INT_MIN,
          "connect_timeout_ms"),
    ROWNS(rlock_client_open, "command_timeout_ms 0", open_field, RLOCK_EINVAL,
          "command_timeout_ms", MSG_OPEN, 0, "command_timeout_ms"),
    ROWNS(rlock_client_open, "command_timeout_ms -1", open_field, RLOCK_EINVAL,
          "command_timeout_ms", MSG_OPEN, -1, "command_timeout_ms"),
    ROWNS(rlock_client_open, "command_timeout_ms INT_MIN", open_field,
          RLOCK_EINVAL, "command_timeout_ms", MSG_OPEN, INT_MIN,
          "command_timeout_ms"),
    ROWNS(rlock_client_open, "watchdog_lease_ms 29", open_field, RLOCK_EINVAL,
          "watchdog_lease_ms", MSG_OPEN, 29, "watchdog_lease_ms"),
    ROWNS(rlock_client_open, "watchdog_lease_ms 0", open_field, RLOCK_EINVAL,
          "watchdog_lease_ms", MSG_OPEN, 0, "watchdog_lease_ms"),
    ROWNS(rlock_client_open, "watchdog_lease_ms -1", open_field, RLOCK_EINVAL,
          "watchdog_lease_ms", MSG_OPEN, -1, "watchdog_lease_ms"),
    ROWNS(rlock_client_open, "watchdog_lease_ms INT64_MIN", open_field,
          RLOCK_EINVAL, "watchdog_lease_ms", MSG_OPEN, INT64_MIN,
          "watchdog_lease_ms"),
    ROWNS(rlock_client_open, "watchdog_lease_ms RLOCK_MS_MAX + 1", open_field,
          RLOCK_EINVAL, "watchdog_lease_ms", MSG_OPEN, MS_OVER,
          "watchdog_lease_ms"),
    ROWNS(rlock_client_open, "watchdog_lease_ms INT64_MAX", open_field,
          RLOCK_EINVAL, "watchdog_lease_ms", MSG_OPEN, INT64_MAX,
          "watchdog_lease_ms"),
    ROWNS(rlock_client_open, "waiter_ttl_ms 29", open_field, RLOCK_EINVAL,
          "waiter_ttl_ms", MSG_OPEN, 29, "waiter_ttl_ms"),
    ROWNS(rlock_client_open, "waiter_ttl_ms 0", open_field, RLOCK_EINVAL,
          "waiter_ttl_ms", MSG_OPEN, 0, "waiter_ttl_ms"),
    ROWNS(rlock_client_open, "waiter_ttl_ms INT64_MIN", open_field,
          RLOCK_EINVAL, "waiter_ttl_ms", MSG_OPEN, INT64_MIN, "waiter_ttl_ms"),
    ROWNS(rlock_client_open, "waiter_ttl_ms RLOCK_MS_MAX + 1", open_field,
          RLOCK_EINVAL, "waiter_ttl_ms", MSG_OPEN, MS_OVER, "waiter_ttl_ms"),
    ROWNS(rlock_client_open, "waiter_ttl_ms INT64_MAX", open_field,
          RLOCK_EINVAL, "waiter_ttl_ms", MSG_OPEN, INT64_MAX, "waiter_ttl_ms"),
    ROWNS(rlock_client_open, "sync_replicas -1", open_field, RLOCK_EINVAL,
          "sync_replicas", MSG_OPEN, -1, "sync_replicas"),
    ROWNS(rlock_client_open, "sync_replicas 65", open_field, RLOCK_EINVAL,
          "sync_replicas", MSG_OPEN, 65, "sync_replicas"),
    ROWNS(rlock_client_open, "sync_replicas INT_MAX", open_field, RLOCK_EINVAL,
          "sync_replicas", MSG_OPEN, INT_MAX, "sync_replicas"),
    ROWNS(rlock_client_open, "sync_timeout_ms 0", open_field, RLOCK_EINVAL,
          "sync_timeout_ms", MSG_OPEN, 0, "sync_timeout_ms"),
    ROWNS(rlock_client_open, "sync_timeout_ms -1", open_field, RLOCK_EINVAL,
          "sync_timeout_ms", MSG_OPEN, -1, "sync_timeout_ms"),
    ROWNS(rlock_client_open, "backoff_min_ms 0", open_field, RLOCK_EINVAL,
          "backoff_min_ms", MSG_OPEN, 0, "backoff_min_ms"),
    ROWNS(rlock_client_open, "backoff_min_ms -1", open_field, RLOCK_EINVAL,
          "backoff_min_ms", MSG_OPEN, -1, "backoff_min_ms"),
    ROWNS(rlock_client_open, "backoff_min_ms INT_MIN", open_field, RLOCK_EINVAL,
          "backoff_min_ms", MSG_OPEN, INT_MIN, "backoff_min_ms"),
    ROWNS(rlock_client_open, "backoff_min_ms above backoff_max_ms (101)",
          open_field, RLOCK_EINVAL, "backoff_min_ms <= backoff_max_ms",
          MSG_OPEN, 101, "backoff_min_ms"),
    ROWNS(rlock_client_open, "backoff_max_ms below backoff_min_ms (4)",
          open_field, RLOCK_EINVAL, "backoff_min_ms <= backoff_max_ms",
          MSG_OPEN, 4, "backoff_max_ms"),
    ROWNS(rlock_client_open, "backoff_max_ms 0", open_field, RLOCK_EINVAL,
          "backoff_max_ms", MSG_OPEN, 0, "backoff_max_ms"),
    ROWNS(rlock_client_open, "backoff_max_ms INT_MIN", open_field, RLOCK_EINVAL,
          "backoff_max_ms", MSG_OPEN, INT_MIN, "backoff_max_ms"),
    ROWNS(rlock_client_open, "backoff_min_ms = backoff_max_ms = 0", open_field,
          RLOCK_EINVAL, "backoff_min_ms", MSG_OPEN, 0,
          "backoff_min_ms=backoff_max_ms"),
    ROWNS(rlock_client_open, "max_connections 0", open_field, RLOCK_EINVAL,
          "max_connections", MSG_OPEN, 0, "max_connections"),
    ROWNS(rlock_client_open, "max_connections -1", open_field, RLOCK_EINVAL,
          "max_connections", MSG_OPEN, -1, "max_connections"),
    ROWNS(rlock_client_open, "max_connections INT_MIN", open_field,
          RLOCK_EINVAL, "max_connections", MSG_OPEN, INT_MIN,
          "max_connections"),
    ROWNS(rlock_client_open, "max_connections 1025 (src/client.c's bound)",
          open_field, RLOCK_EINVAL, "max_connections", MSG_OPEN, 1025,
          "max_connections"),
    ROWNS(rlock_client_open, "max_connections INT_MAX", open_field,
          RLOCK_EINVAL, "max_connections", MSG_OPEN, INT_MAX,
          "max_connections"),
    ROWS(rlock_client_open, "key_prefix with '{'", open_prefix, RLOCK_EINVAL,
         "key_prefix", MSG_OPEN, "a{b"),
    ROWS(rlock_client_open, "key_prefix with '}'", open_prefix, RLOCK_EINVAL,
         "key_prefix", MSG_OPEN, "a}b"),
    ROWS(rlock_client_open, "key_prefix \"{}\"", open_prefix, RLOCK_EINVAL,
         "key_prefix", MSG_OPEN, "{}"),
    ROWS(rlock_client_open, "key_prefix NULL", open_prefix, RLOCK_EINVAL,
         "key_prefix", MSG_OPEN, NULL),
    ROWS(rlock_client_open, "key_prefix empty", open_prefix, RLOCK_EINVAL,
         "key_prefix", MSG_OPEN, ""),
    ROW(rlock_client_open, "key_prefix of 65 bytes (src/client.c's bound)",
        open_prefix_65, RLOCK_EINVAL, "key_prefix", MSG_OPEN),
    ROW(rlock_client_open, "username without password", open_username_only,
        RLOCK_EINVAL, "username given without password", MSG_OPEN),
    ROW(rlock_client_open, "opts zeroed instead of initialised",
        open_zeroed_opts, RLOCK_EINVAL, "connect_timeout_ms", MSG_OPEN),
    ROW(rlock_client_open, "bad option and bad url", open_bad_opts_and_url,
        RLOCK_EINVAL, NULL, MSG_NONE),
    ROW(rlock_client_open, "bad option with err = NULL", open_bad_opts_err_null,
        RT_NULL, "waiter_ttl_ms", MSG_OPEN),
    /* The bounds themselves are accepted (these connect). */
    ROW_SENDS(rlock_client_open, "watchdog_lease_ms 30 (the bound)", open_field,
              RT_HANDLE, 30, "watchdog_lease_ms"),
    ROW_SENDS(rlock_client_open, "watchdog_lease_ms RLOCK_MS_MAX", open_field,
              RT_HANDLE, RLOCK_MS_MAX, "watchdog_lease_ms"),
    ROW_SENDS(rlock_client_open, "waiter_ttl_ms 30 (the bound)", open_field,
              RT_HANDLE, 30, "waiter_ttl_ms"),
    ROW_SENDS(rlock_client_open, "backoff_min_ms = backoff_max_ms = 1",
              open_field, RT_HANDLE, 1, "backoff_min_ms=backoff_max_ms"),
    ROW_SENDS(rlock_client_open, "max_connections 1", open_field, RT_HANDLE, 1,
              "max_connections"),
    ROW_SENDS(rlock_client_open, "connect timeout 1 ms (a handle, or no reply in time)",
              open_tiny_timeout, RT_HANDLE, 1, "connect_timeout_ms"),
    ROW_SENDS(rlock_client_open, "key_prefix of 64 bytes", open_prefix_64,
              RT_HANDLE, 0, NULL),
    ROW_SENDS(rlock_client_open, "opts NULL and err NULL (allowed)",
              open_url_err_null, RT_HANDLE, 0, "redis://127.0.0.1:$PORT"),

    ROW(rlock_client_close, "NULL is a no-op", close_null, 0, NULL, MSG_NONE),

    ROW(rlock_client_errmsg,
        "NULL when the last error was another "
        "client's: \"\", never NULL",
        errmsg_null_is_empty, 0, NULL, MSG_NONE),
    ROW(rlock_client_errmsg, "c after an error on another client: \"\"",
        errmsg_of_another_client, 0, NULL, MSG_NONE),
    ROW(rlock_client_errmsg, "c on a thread where c had no error: \"\"",
        errmsg_on_another_thread, 0, NULL, MSG_NONE),

    ROW(rlock_client_cancel_waits, "NULL: no-op", cancel_null, 0, NULL,
        MSG_NONE),
    ROW(rlock_client_cancel_waits, "nobody waiting: sends nothing",
        cancel_nobody_waiting, 0, NULL, MSG_NONE),

    ROW(rlock_client_ping, "client NULL", ping_null_client, RLOCK_EINVAL,
        "must not be NULL", MSG_OPEN),
    ROW(rlock_client_ping, "info NULL", ping_null_info, RLOCK_EINVAL,
        "must not be NULL", MSG_C),
    ROW(rlock_client_ping, "client and info NULL", ping_null_both, RLOCK_EINVAL,
        "must not be NULL", MSG_OPEN),

    ROW(rlock_client_set_event_cb, "client NULL", event_cb_null_client,
        RLOCK_EINVAL, "client is NULL", MSG_OPEN),
    ROW(rlock_client_set_event_cb, "set, then cleared with NULL",
        event_cb_set_and_clear, 0, NULL, MSG_NONE),
    ROW(rlock_client_set_log_cb, "client NULL", log_cb_null_client,
        RLOCK_EINVAL, "client is NULL", MSG_OPEN),
    ROWN(rlock_client_set_log_cb, "min_level 0", log_cb_level, RLOCK_EINVAL,
         "min_level must be", MSG_C, 0),
    ROWN(rlock_client_set_log_cb, "min_level above RLOCK_LOG_ERROR",
         log_cb_level, RLOCK_EINVAL, "min_level must be", MSG_C, 5),
    ROWN(rlock_client_set_log_cb, "min_level INT_MIN", log_cb_level,
         RLOCK_EINVAL, "min_level must be", MSG_C, INT_MIN),
    ROWN(rlock_client_set_log_cb, "cb NULL clears whatever min_level",
         log_cb_clear_any_level, 0, NULL, MSG_NONE, -7),
    ROW(rlock_client_stats, "client NULL", stats_null_client, RLOCK_EINVAL,
        "must not be NULL", MSG_OPEN),
    ROW(rlock_client_stats, "stats NULL", stats_null_stats, RLOCK_EINVAL,
        "must not be NULL", MSG_C),
    ROWN(rlock_client_stats, "size not set (0)", stats_size, RLOCK_EINVAL,
         "size must be set", MSG_C, 0),
    ROWN(rlock_client_stats, "size smaller than the first version's",
         stats_size, RLOCK_EINVAL, "size must be set", MSG_C, 8),
    ROW(rlock_client_stats, "size of 1 MiB, never set", stats_huge_size,
        RLOCK_EINVAL, "size must be set", MSG_C),
    ROW(rlock_client_stats, "RLOCK_STATS_INIT: filled, sends nothing", stats_ok,
        0, NULL, MSG_NONE),
    ROW(rlock_client_metrics_text, "client NULL", metrics_null_client,
        RLOCK_EINVAL, "client is NULL", MSG_OPEN),
    ROW(rlock_client_metrics_text, "buf NULL with len 10", metrics_null_buf,
        RLOCK_EINVAL, "buf is NULL", MSG_C),
    ROW(rlock_client_metrics_text, "buf NULL, len 0: the length",
        metrics_length_only, 0, NULL, MSG_NONE),
    ROW(rlock_client_metrics_text, "len 1: only the NUL", metrics_one_byte, 0,
        NULL, MSG_NONE),

    ROW(rlock_mutex_opts_init,
        "uninitialised struct gets every default "
        "(NULL is outside the contract: o != NULL)",
        mutex_opts_init_garbage, 0, NULL, MSG_NONE),

    /* rlock_mutex_new */
    ROW(rlock_mutex_new, "client NULL", new_null_client, RLOCK_EINVAL,
        "client is NULL", MSG_OPEN),
    ROW(rlock_mutex_new, "client and name NULL", new_null_both, RLOCK_EINVAL,
        "NULL", MSG_OPEN),
    ROWS(rlock_mutex_new, "name NULL", new_name, RLOCK_EINVAL, "name is NULL",
         MSG_C, NULL),
    ROWS(rlock_mutex_new, "name empty", new_name, RLOCK_EINVAL,
         "1 to 1024 bytes (got 0)", MSG_C, ""),
    ROWS(rlock_mutex_new, "name of RLOCK_NAME_MAX + 1 bytes", new_name,
         RLOCK_EINVAL, "1 to 1024 bytes (got 1025)", MSG_C, OVER),
    ROWS(rlock_mutex_new, "name of 1 MiB", new_name, RLOCK_EINVAL,
         "1 to 1024 bytes", MSG_C, "{huge}"),
    ROWS(rlock_mutex_new, "bad name with err = NULL", new_name_err_null,
         RT_NULL, "1 to 1024 bytes", MSG_C, ""),
    ROWN(rlock_mutex_new, "sync_replicas -2", new_sync, RLOCK_EINVAL,
         "sync_replicas", MSG_C, -2),
    ROWN(rlock_mutex_new, "sync_replicas 65", new_sync, RLOCK_EINVAL,
         "sync_replicas", MSG_C, 65),
    ROWN(rlock_mutex_new, "sync_replicas INT_MIN", new_sync, RLOCK_EINVAL,
         "sync_replicas", MSG_C, INT_MIN),
    ROWN(rlock_mutex_new, "sync_replicas RLOCK_SYNC_OFF", new_sync, RT_HANDLE,
         NULL, MSG_NONE, RLOCK_SYNC_OFF),
    ROWN(rlock_mutex_new, "sync_replicas 64", new_sync, RT_HANDLE, NULL,
         MSG_NONE, 64),
    ROWN(rlock_mutex_new, "layout -1", new_layout, RLOCK_EINVAL,
         "layout must be RLOCK_LAYOUT_NATIVE, RLOCK_LAYOUT_TOKEN or "
         "RLOCK_LAYOUT_REDISSON",
         MSG_C, -1),
    ROWN(rlock_mutex_new, "layout 3", new_layout, RLOCK_EINVAL, "layout",
         MSG_C, 3),
    ROWN(rlock_mutex_new, "layout INT_MAX", new_layout, RLOCK_EINVAL, "layout",
         MSG_C, INT_MAX),
    ROWN(rlock_mutex_new, "layout RLOCK_LAYOUT_TOKEN", new_layout, RT_HANDLE,
         NULL, MSG_NONE, RLOCK_LAYOUT_TOKEN),
    ROWN(rlock_mutex_new, "layout RLOCK_LAYOUT_REDISSON", new_layout,
         RT_HANDLE, NULL, MSG_NONE, RLOCK_LAYOUT_REDISSON),
    ROWN(rlock_mutex_new, "lease_ms -1", new_lease, RLOCK_EINVAL, "lease_ms",
         MSG_C, -1),
    ROWN(rlock_mutex_new, "lease_ms INT64_MIN", new_lease, RLOCK_EINVAL,
         "lease_ms", MSG_C, INT64_MIN),
    ROWN(rlock_mutex_new, "lease_ms RLOCK_MS_MAX + 1", new_lease, RLOCK_EINVAL,
         "lease_ms", MSG_C, MS_OVER),
    ROWN(rlock_mutex_new, "lease_ms INT64_MAX", new_lease, RLOCK_EINVAL,
         "lease_ms", MSG_C, INT64_MAX),
    /* What the contract allows, sending nothing. */
    ROWS(rlock_mutex_new, "name of exactly RLOCK_NAME_MAX bytes", new_name,
         RT_HANDLE, NULL, MSG_NONE, "{max}"),
    ROWS(rlock_mutex_new, "opts NULL and err NULL", new_name_err_null,
         RT_HANDLE, NULL, MSG_NONE, "x"),
    ROWN(rlock_mutex_new, "lease_ms 1", new_lease, RT_HANDLE, NULL, MSG_NONE,
         1),
    ROWN(rlock_mutex_new, "lease_ms RLOCK_MS_MAX", new_lease, RT_HANDLE, NULL,
         MSG_NONE, RLOCK_MS_MAX),
    ROW(rlock_mutex_new,
        "max_renewals UINT32_MAX, on_lost_arg without "
        "on_lost",
        new_extreme_fields, RT_HANDLE, NULL, MSG_NONE),
    ROW(rlock_mutex_new, "opts zeroed (= the defaults)", new_zeroed_opts,
        RT_HANDLE, NULL, MSG_NONE),

    /* rlock_mutex_new_len */
    ROW(rlock_mutex_new_len, "client NULL", new_len_null_client, RLOCK_EINVAL,
        "client is NULL", MSG_OPEN),
    ROWN(rlock_mutex_new_len, "name NULL, length 5", new_len_null_name,
         RLOCK_EINVAL, "name is NULL", MSG_C, 5),
    ROWN(rlock_mutex_new_len, "name NULL, length 0", new_len_null_name,
         RLOCK_EINVAL, "name is NULL", MSG_C, 0),
    ROWNS(rlock_mutex_new_len, "length 0", new_len_n, RLOCK_EINVAL,
          "1 to 1024 bytes (got 0)", MSG_C, 0, "x"),
    ROWNS(rlock_mutex_new_len, "length RLOCK_NAME_MAX + 1", new_len_n,
          RLOCK_EINVAL, "1 to 1024 bytes (got 1025)", MSG_C, RLOCK_NAME_MAX + 1,
          OVER),
    ROW(rlock_mutex_new_len, "length SIZE_MAX (must not be read)",
        new_len_size_max, RLOCK_EINVAL, "1 to 1024 bytes", MSG_C),
    ROW(rlock_mutex_new_len, "bad length with err = NULL", new_len_err_null,
        RT_NULL, "1 to 1024 bytes (got 0)", MSG_C),
    ROWN(rlock_mutex_new_len, "lease_ms -1", new_len_lease, RLOCK_EINVAL,
         "lease_ms", MSG_C, -1),
    ROWN(rlock_mutex_new_len, "lease_ms RLOCK_MS_MAX + 1", new_len_lease,
         RLOCK_EINVAL, "lease_ms", MSG_C, MS_OVER),
    ROWN(rlock_mutex_new_len, "lease_ms INT64_MIN", new_len_lease, RLOCK_EINVAL,
         "lease_ms", MSG_C, INT64_MIN),
    ROWNS(rlock_mutex_new_len, "length RLOCK_NAME_MAX exactly", new_len_n,
          RT_HANDLE, NULL, MSG_NONE, RLOCK_NAME_MAX, "{max}"),
    ROW(rlock_mutex_new_len, "NUL bytes in the name (allowed)",
        new_len_nul_bytes, RT_HANDLE, NULL, MSG_NONE),

    ROW(rlock_mutex_free, "NULL is a no-op", free_null, 0, NULL, MSG_NONE),

    ROW(rlock_mutex_client, "NULL: NULL", client_of_null, RT_NULL, NULL,
        MSG_NONE),
    ROW(rlock_mutex_client, "a mutex: its client", client_of_m, 0, NULL,
        MSG_NONE),

    ROW(rlock_owner_new, "err NULL is allowed", owner_new_err_null, RT_HANDLE,
        NULL, MSG_NONE),
    ROW(rlock_owner_free, "NULL is a no-op", owner_free_null, 0, NULL,
        MSG_NONE),
    ROW(rlock_owner_errmsg, "NULL: \"\"", owner_errmsg_null, 0, NULL,
        MSG_NONE),
    ROW(rlock_mutex_lock_as, "mutex NULL", lock_as_null_mutex, RLOCK_EINVAL,
        "mutex is NULL", MSG_OWNER),
    ROW(rlock_mutex_lock_as, "owner NULL", lock_as_null_owner, RLOCK_EINVAL,
        "owner is NULL", MSG_C),
    ROW(rlock_mutex_trylock_as, "mutex NULL", trylock_as_null_mutex,
        RLOCK_EINVAL, "mutex is NULL", MSG_OPEN),
    ROW(rlock_mutex_trylock_as, "owner NULL", trylock_as_null_owner,
        RLOCK_EINVAL, "owner is NULL", MSG_C),
    ROWN(rlock_mutex_timedlock_as, "owner NULL", timedlock_as_null_owner,
         RLOCK_EINVAL, "owner is NULL", MSG_C, 10),
    ROWN(rlock_mutex_timedlock_as, "wait_ms -1", timedlock_as_n, RLOCK_EINVAL,
         "wait_ms", MSG_OWNER, -1),
    ROWN(rlock_mutex_timedlock_as, "wait_ms RLOCK_MS_MAX + 1", timedlock_as_n,
         RLOCK_EINVAL, "wait_ms", MSG_C, MS_OVER),
    ROW(rlock_mutex_unlock_as, "owner NULL", unlock_as_null_owner,
        RLOCK_EINVAL, "owner is NULL", MSG_C),
    ROW(rlock_mutex_unlock_as, "an owner that is not the holding thread",
        unlock_as_held, RLOCK_ENOTOWNER, "this owner holds no lock",
        MSG_OWNER),
    ROW(rlock_mutex_extend_as, "mutex NULL", extend_as_null_mutex,
        RLOCK_EINVAL, "mutex is NULL", MSG_OWNER),
    ROWN(rlock_mutex_extend_as, "lease_ms 0", extend_as_held_n, RLOCK_EINVAL,
         "lease_ms", MSG_OWNER, 0),
    ROWN(rlock_mutex_extend_as, "an owner that is not the holding thread",
         extend_as_held_n, RLOCK_ENOTOWNER, "holds no lock", MSG_C, 1000),
    ROW(rlock_mutex_token_as, "owner NULL: 0", token_as_null_owner, 0, NULL,
        MSG_NONE),
    ROW(rlock_mutex_token_as, "an owner that is not the holding thread: 0",
        token_as_held, 0, NULL, MSG_NONE),
    ROW(rlock_mutex_lease_left_as, "owner NULL", left_as_null_owner,
        RLOCK_EINVAL, "owner is NULL", MSG_C),
    ROW(rlock_mutex_lease_left_as, "left_ms NULL", left_as_null_out,
        RLOCK_EINVAL, "left_ms is NULL", MSG_C),
    ROW(rlock_mutex_lease_left_as, "an owner that is not the holding thread",
        left_as_held, RLOCK_ENOTOWNER, "this owner holds no lock", MSG_OWNER),
    ROW(rlock_mutex_fence_as, "owner NULL", fence_as_null_owner,
        RLOCK_EINVAL, "owner is NULL", MSG_C),
    ROW(rlock_mutex_fence_as, "token NULL", fence_as_null_token, RLOCK_EINVAL,
        "token is NULL", MSG_OWNER),
    ROW(rlock_mutex_fence_as, "an owner that is not the holding thread",
        fence_as_held, RLOCK_ENOTOWNER, "this owner holds no lock",
        MSG_OWNER),
    ROW(rlock_with_as, "owner NULL", with_as_null_owner, RLOCK_EINVAL,
        "must not be NULL", MSG_C),
    ROW(rlock_with_as, "fn NULL", with_as_null_fn, RLOCK_EINVAL,
        "must not be NULL", MSG_OWNER),
    ROWN(rlock_with_as, "wait_ms -2", with_as_wait_n, RLOCK_EINVAL, "wait_ms",
         MSG_OWNER, -2),

    ROW(rlock_mutex_lock, "mutex NULL", lock_null, RLOCK_EINVAL,
        "mutex is NULL", MSG_OPEN),
    ROW(rlock_mutex_trylock, "mutex NULL", trylock_null, RLOCK_EINVAL,
        "mutex is NULL", MSG_OPEN),

    /* rlock_mutex_timedlock */
    ROWN(rlock_mutex_timedlock, "mutex NULL", timedlock_null, RLOCK_EINVAL,
         "mutex is NULL", MSG_OPEN, 10),
    ROWN(rlock_mutex_timedlock, "mutex NULL and wait_ms -1", timedlock_null,
         RLOCK_EINVAL, "NULL", MSG_OPEN, -1),
    ROWN(rlock_mutex_timedlock,
         "wait_ms -1 (RLOCK_WAIT_FOREVER is for "
         "rlock_with)",
         timedlock_n, RLOCK_EINVAL, "wait_ms", MSG_C, -1),
    ROWN(rlock_mutex_timedlock, "wait_ms -2", timedlock_n, RLOCK_EINVAL,
         "wait_ms", MSG_C, -2),
    ROWN(rlock_mutex_timedlock, "wait_ms INT64_MIN", timedlock_n, RLOCK_EINVAL,
         "wait_ms", MSG_C, INT64_MIN),
    ROWN(rlock_mutex_timedlock, "wait_ms RLOCK_MS_MAX + 1", timedlock_n,
         RLOCK_EINVAL, "wait_ms", MSG_C, MS_OVER),
    ROWN(rlock_mutex_timedlock, "wait_ms INT64_MAX", timedlock_n, RLOCK_EINVAL,
         "wait_ms", MSG_C, INT64_MAX),
    ROWN(rlock_mutex_timedlock, "wait_ms -1 on a lock the thread holds",
         timedlock_held_n, RLOCK_EINVAL, "wait_ms", MSG_C, -1),
    ROWN(rlock_mutex_timedlock,
         "wait_ms RLOCK_MS_MAX + 1 on a lock the "
         "thread holds",
         timedlock_held_n, RLOCK_EINVAL, "wait_ms", MSG_C, MS_OVER),

    /* rlock_mutex_unlock: nothing but a NULL is invalid; everyone but the
     * owner gets RLOCK_ENOTOWNER, answered without asking Redis. */
    ROW(rlock_mutex_unlock, "mutex NULL", unlock_null, RLOCK_EINVAL,
        "mutex is NULL", MSG_OPEN),
    ROW(rlock_mutex_unlock, "a lock nobody holds", unlock_free, RLOCK_ENOTOWNER,
        "holds no lock", MSG_C),
    ROW(rlock_mutex_unlock, "another thread of the owning client",
        unlock_held_on_thread, RLOCK_ENOTOWNER, "holds no lock", MSG_RETURNED),
    ROW(rlock_mutex_unlock, "a forked child of the owner", unlock_held_in_child,
        RLOCK_ENOTOWNER, "holds no lock", MSG_RETURNED),
    ROW(rlock_mutex_unlock, "another client, same name", unlock_other_client,
        RLOCK_ENOTOWNER, "holds no lock", MSG_C2),

    /* rlock_mutex_extend: the lease is checked before the owner. */
    ROWN(rlock_mutex_extend, "mutex NULL", extend_null, RLOCK_EINVAL,
         "mutex is NULL", MSG_OPEN, 1000),
    ROWN(rlock_mutex_extend, "mutex NULL and lease_ms 0", extend_null,
         RLOCK_EINVAL, "NULL", MSG_OPEN, 0),
    ROWN(rlock_mutex_extend, "lease_ms 0", extend_held_n, RLOCK_EINVAL,
         "lease_ms", MSG_C, 0),
    ROWN(rlock_mutex_extend, "lease_ms -1", extend_held_n, RLOCK_EINVAL,
         "lease_ms", MSG_C, -1),
    ROWN(rlock_mutex_extend, "lease_ms INT64_MIN", extend_held_n, RLOCK_EINVAL,
         "lease_ms", MSG_C, INT64_MIN),
    ROWN(rlock_mutex_extend, "lease_ms RLOCK_MS_MAX + 1", extend_held_n,
         RLOCK_EINVAL, "lease_ms", MSG_C, MS_OVER),
    ROWN(rlock_mutex_extend, "lease_ms INT64_MAX", extend_held_n, RLOCK_EINVAL,
         "lease_ms", MSG_C, INT64_MAX),
    ROWN(rlock_mutex_extend, "lease_ms 0 on a lock nobody holds", extend_free_n,
         RLOCK_EINVAL, "lease_ms", MSG_C, 0),
    ROWN(rlock_mutex_extend, "a lock nobody holds", extend_free_n,
         RLOCK_ENOTOWNER, "holds no lock", MSG_C, 1000),
    ROW(rlock_mutex_extend, "another thread of the owning client",
        extend_held_on_thread, RLOCK_ENOTOWNER, "holds no lock", MSG_RETURNED),
    ROW(rlock_mutex_extend, "a forked child of the owner", extend_held_in_child,
        RLOCK_ENOTOWNER, "holds no lock", MSG_RETURNED),
    ROW(rlock_mutex_extend, "another client, same name", extend_other_client,
        RLOCK_ENOTOWNER, "holds no lock", MSG_C2),

    /* rlock_mutex_fence: RLOCK_ENOTOWNER for everyone but the owner,
     * sending nothing; *token 0. */
    ROW(rlock_mutex_fence, "mutex NULL", fence_null, RLOCK_EINVAL,
        "mutex is NULL", MSG_OPEN),
    ROW(rlock_mutex_fence, "token NULL", fence_null_token, RLOCK_EINVAL,
        "token is NULL", MSG_C),
    ROW(rlock_mutex_fence, "a lock nobody holds", fence_free, RLOCK_ENOTOWNER,
        "holds no lock", MSG_C),
    ROW(rlock_mutex_fence, "another thread of the owning client",
        fence_held_on_thread, RLOCK_ENOTOWNER, "holds no lock", MSG_RETURNED),
    ROW(rlock_mutex_fence, "a forked child of the owner", fence_held_in_child,
        RLOCK_ENOTOWNER, "holds no lock", MSG_RETURNED),
    ROW(rlock_mutex_fence, "another client, same name", fence_other_client,
        RLOCK_ENOTOWNER, "holds no lock", MSG_C2),

    /* rlock_mutex_lease_left: RLOCK_ENOTOWNER for everyone but the owner,
     * sending nothing; *left_ms 0. */
    ROW(rlock_mutex_lease_left, "mutex NULL", left_null, RLOCK_EINVAL,
        "mutex is NULL", MSG_OPEN),
    ROW(rlock_mutex_lease_left, "left_ms NULL", left_null_out, RLOCK_EINVAL,
        "left_ms is NULL", MSG_C),
    ROW(rlock_mutex_lease_left, "a lock nobody holds", left_free,
        RLOCK_ENOTOWNER, "holds no lock", MSG_C),
    ROW(rlock_mutex_lease_left, "another thread of the owning client",
        left_held_on_thread, RLOCK_ENOTOWNER, "holds no lock", MSG_RETURNED),
    ROW(rlock_mutex_lease_left, "a forked child of the owner",
        left_held_in_child, RLOCK_ENOTOWNER, "holds no lock", MSG_RETURNED),
    ROW(rlock_mutex_lease_left, "another client, same name",
        left_other_client, RLOCK_ENOTOWNER, "holds no lock", MSG_C2),

    /* rlock_mutex_token: 0 for everyone but the owner. */
    ROW(rlock_mutex_token, "mutex NULL: 0", token_null, 0, NULL, MSG_NONE),
    ROW(rlock_mutex_token, "a lock nobody holds: 0", token_free, 0, NULL,
        MSG_NONE),
    ROW(rlock_mutex_token, "another thread of the owning client: 0",
        token_held_on_thread, 0, NULL, MSG_NONE),
    ROW(rlock_mutex_token, "a forked child of the owner: 0",
        token_held_in_child, 0, NULL, MSG_NONE),
    ROW(rlock_mutex_token, "another client, same name: 0", token_other_client,
        0, NULL, MSG_NONE),

    /* rlock_with: RLOCK_EINVAL, and fn is not called. */
    ROW(rlock_with, "mutex NULL", with_null_mutex, RLOCK_EINVAL,
        "must not be NULL", MSG_OPEN),
    ROWN(rlock_with, "fn NULL", with_null_fn, RLOCK_EINVAL, "must not be NULL",
         MSG_C, 0),
    ROWN(rlock_with, "fn NULL, waiting forever", with_null_fn, RLOCK_EINVAL,
         "must not be NULL", MSG_C, RLOCK_WAIT_FOREVER),
    ROWN(rlock_with, "fn NULL and wait_ms -7", with_null_fn, RLOCK_EINVAL,
         "must not be NULL", MSG_C, -7),
    ROW(rlock_with, "mutex and fn NULL", with_null_both, RLOCK_EINVAL,
        "must not be NULL", MSG_OPEN),
    ROWN(rlock_with, "wait_ms -2", with_wait_n, RLOCK_EINVAL, "wait_ms", MSG_C,
         -2),
    ROWN(rlock_with, "wait_ms INT64_MIN", with_wait_n, RLOCK_EINVAL, "wait_ms",
         MSG_C, INT64_MIN),
    ROWN(rlock_with, "wait_ms RLOCK_MS_MAX + 1", with_wait_n, RLOCK_EINVAL,
         "wait_ms", MSG_C, MS_OVER),
    ROWN(rlock_with, "wait_ms INT64_MAX", with_wait_n, RLOCK_EINVAL, "wait_ms",
         MSG_C, INT64_MAX),

    ROW(rlock_mutex_status, "mutex NULL", status_null_mutex, RLOCK_EINVAL,
        "must not be NULL", MSG_OPEN),
    ROW(rlock_mutex_status, "status NULL", status_null_st, RLOCK_EINVAL,
        "must not be NULL", MSG_C),
    ROW(rlock_mutex_status, "mutex and status NULL", status_null_both,
        RLOCK_EINVAL, "must not be NULL", MSG_OPEN),

    ROW(rlock_mutex_force_unlock, "mutex NULL", force_null_mutex, RLOCK_EINVAL,
        "mutex is NULL", MSG_OPEN),
    ROW(rlock_mutex_force_unlock, "mutex and removed NULL", force_null_both,
        RLOCK_EINVAL, "mutex is NULL", MSG_OPEN),
    ROW_SENDS(rlock_mutex_force_unlock, "removed NULL (allowed), lock free",
              force_free_removed_null, RLOCK_OK, 0, NULL),

    ROW(rlock_mutex_force_unlock_ex, "mutex NULL", force_ex_null_mutex,
        RLOCK_EINVAL, "mutex is NULL", MSG_OPEN),
    ROWN(rlock_mutex_force_unlock_ex, "flags 2", force_ex_flags_n, RLOCK_EINVAL,
         "flags must be", MSG_C, 2),
    ROWN(rlock_mutex_force_unlock_ex, "flags ~0", force_ex_flags_n, RLOCK_EINVAL,
         "flags must be", MSG_C, (int64_t)~0u),
    ROW_SENDS(rlock_mutex_force_unlock_ex,
              "removed NULL (allowed), lock free", force_ex_free_removed_null,
              RLOCK_OK, 0, NULL),

    ROW(rlock_scan_new, "client NULL", scan_new_null_client, RLOCK_EINVAL,
        "client is NULL", MSG_OPEN),
    ROW(rlock_scan_new, "client NULL and err NULL", scan_new_err_null, RT_NULL,
        "client is NULL", MSG_OPEN),
    ROWNS(rlock_scan_new, "match of 1 MiB", scan_new_arg, RLOCK_EINVAL,
          "at most 4096 bytes", MSG_C, 0, "{huge}"),
    ROWNS(rlock_scan_new, "type of 1 MiB", scan_new_arg, RLOCK_EINVAL,
          "at most 4096 bytes", MSG_C, 1, "{huge}"),
    ROWNS(rlock_scan_new, "type empty", scan_new_arg, RLOCK_EINVAL,
          "type not empty", MSG_C, 1, ""),
    /* A single server's walk sends nothing until its first step. */
    ROWNS(rlock_scan_new, "match empty (every key)", scan_new_arg, RT_HANDLE,
          NULL, MSG_NONE, 0, ""),
    ROW(rlock_scan_next, "walk NULL", scan_next_null, RLOCK_EINVAL,
        "must not be NULL", MSG_OPEN),
    ROWNS(rlock_scan_next, "fn NULL", scan_next_count, RLOCK_EINVAL,
          "must not be NULL", MSG_C, 10, "fn NULL"),
    ROWN(rlock_scan_next, "count 0", scan_next_count, RLOCK_EINVAL,
         "count 1 to 100000", MSG_C, 0),
    ROWN(rlock_scan_next, "count -1", scan_next_count, RLOCK_EINVAL,
         "count 1 to 100000", MSG_C, -1),
    ROWN(rlock_scan_next, "count 100001", scan_next_count, RLOCK_EINVAL,
         "count 1 to 100000", MSG_C, 100001),
    ROW(rlock_scan_info, "walk NULL: -1", scan_info_null, 0, NULL, MSG_NONE),
    ROW(rlock_scan_info, "unknown figure: -1", scan_info_unknown, 0, NULL,
        MSG_NONE),
    ROW(rlock_scan_free, "NULL is a no-op", scan_free_null, 0, NULL, MSG_NONE),
};

#define NROWS (sizeof rows / sizeof rows[0])

/* The header's RLOCK_API functions, in its order. Every one needs rows;
 * tests/install/api_coverage.sh checks this list against the header. */
static const char *const api_functions[] = {
    "rlock_strerror",
    "rlock_version",
    "rlock_client_opts_init",
    "rlock_client_open",
    "rlock_client_close",
    "rlock_client_errmsg",
    "rlock_client_cancel_waits",
    "rlock_client_ping",
    "rlock_client_set_event_cb",
    "rlock_client_set_log_cb",
    "rlock_client_stats",
    "rlock_client_metrics_text",
    "rlock_mutex_opts_init",
    "rlock_mutex_new",
    "rlock_mutex_new_len",
    "rlock_mutex_free",
    "rlock_mutex_client",
    "rlock_mutex_lock",
    "rlock_mutex_trylock",
    "rlock_mutex_timedlock",
    "rlock_mutex_unlock",
    "rlock_mutex_extend",
    "rlock_mutex_fence",
    "rlock_mutex_token",
    "rlock_mutex_lease_left",
    "rlock_with",
    "rlock_owner_new",
    "rlock_owner_free",
    "rlock_owner_errmsg",
    "rlock_mutex_lock_as",
    "rlock_mutex_trylock_as",
    "rlock_mutex_timedlock_as",
    "rlock_mutex_unlock_as",
    "rlock_mutex_extend_as",
    "rlock_mutex_fence_as",
    "rlock_mutex_token_as",
    "rlock_mutex_lease_left_as",
    "rlock_with_as",
    "rlock_mutex_status",
    "rlock_mutex_force_unlock",
    "rlock_mutex_force_unlock_ex",
    "rlock_scan_new",
    "rlock_scan_next",
    "rlock_scan_info",
    "rlock_scan_free",
};

#define NFUNCTIONS (sizeof api_functions / sizeof api_functions[0])

/* ------------------------------------------------------------------------ */
/* The runner                                                               */
/* ------------------------------------------------------------------------ */

static const char *describe(long long v, char *buf, size_t len)
{
    switch (v) {
    case RT_HANDLE:
        return "a handle";
    case RT_NULL:
        return "NULL";
    case RT_FN_CALLED:
        return "fn called";
    case RT_MISMATCH:
        return "a value against the contract";
    case RT_DIED:
        return "a dead child";
    default:
        if (v >= INT_MIN && v <= 0)
            snprintf(buf, len, "%lld (%s)", v, rlock_strerror((int)v));
        else
            snprintf(buf, len, "%lld", v);
        return buf;
    }
}

/* Every key with its type and value (DUMP leaves the TTL out, so a lease
 * running down is no change). Read before CONFIG RESETSTAT and after the
 * last count, so that these commands are not counted. */
static char *snapshot(rt_server *s)
{
    redisReply *keys = rt_cmd(s, "KEYS *");
    size_t i, j, cap = 4096, len = 0;
    char *out = malloc(cap);

    CHECK(out && keys->type == REDIS_REPLY_ARRAY);
    out[0] = '\0';
    /* KEYS has no order: sort the names. */
    for (i = 1; i < keys->elements; i++)
        for (j = i; j > 0 && strcmp(keys->element[j - 1]->str,
                                    keys->element[j]->str) > 0;
             j--) {
            redisReply *tmp = keys->element[j];
            keys->element[j] = keys->element[j - 1];
            keys->element[j - 1] = tmp;
        }
    for (i = 0; i < keys->elements; i++) {
        const char *k = keys->element[i]->str;
        redisReply *d = rt_cmd(s, "DUMP %b", k, keys->element[i]->len);
        long long ttl = rt_cmd_int(s, "PTTL %b", k, keys->element[i]->len);
        size_t need = len + keys->element[i]->len + 2 * d->len + 64;
        if (need > cap) {
            cap = need * 2;
            out = realloc(out, cap);
            CHECK(out != NULL);
        }
        len += (size_t)snprintf(out + len, cap - len, "%s ttl:%s dump:", k,
                                ttl >= 0 ? "yes" : "no");
        for (j = 0; j < d->len; j++)
            len += (size_t)snprintf(out + len, cap - len, "%02x",
                                    (unsigned char)d->str[j]);
        len += (size_t)snprintf(out + len, cap - len, "\n");
        freeReplyObject(d);
    }
    freeReplyObject(keys);
    return out;
}

/* Commands and connections the server saw since CONFIG RESETSTAT, other
 * than the harness's own INFO (its connection is open already). PING
 * counts here: rlock_client_ping sends one. */
static long long traffic(rt_server *s)
{
    return rt_commands_from_clients(s) + rt_cmdstat_calls(s, "ping") +
           rt_info_field(s, "stats", "total_connections_received");
}

/* Parks the thread's last error on a client no row uses, so that every
 * errmsg() reads "" until the row's call fails. */
static void quiet(struct bi *t)
{
    int err;

    CHECK(rlock_mutex_new_len(t->quiet, "q", 0, NULL, &err) == NULL);
    CHECK(*rlock_client_errmsg(NULL) == '\0');
    CHECK(*rlock_client_errmsg(t->c) == '\0');
    CHECK(*rlock_client_errmsg(t->c2) == '\0');
}

static int run_row(struct bi *t, const struct row *r)
{
    char b1[64], b2[64];
    const char *msg = NULL;
    long long got;
    int failed = 0;

    t->row = r;
    t->ret = NULL;
    t->buf[0] = '\0';
    quiet(t);
    got = r->call(t);
    switch (r->from) {
    case MSG_OPEN:
        msg = rlock_client_errmsg(NULL);
        break;
    case MSG_C:
        msg = rlock_client_errmsg(t->c);
        break;
    case MSG_C2:
        msg = rlock_client_errmsg(t->c2);
        break;
    case MSG_RETURNED:
        msg = t->ret;
        break;
    case MSG_OWNER:
        msg = rlock_owner_errmsg(t->owner);
        break;
    default:
        break;
    }
    if (got != r->want) {
        fprintf(stderr, "FAIL %s: %s: got %s, want %s", r->fn, r->what,
                describe(got, b1, sizeof b1), describe(r->want, b2, sizeof b2));
        if (msg && *msg)
            fprintf(stderr, " (message \"%s\")", msg);
        fprintf(stderr, "\n");
        failed = 1;
    }
    if (r->msg && (!msg || !strstr(msg, r->msg))) {
        fprintf(stderr, "FAIL %s: %s: message \"%s\" lacks \"%s\"\n", r->fn,
                r->what, msg ? msg : "(null)", r->msg);
        failed = 1;
    }
    if (r->may_send == SENDS_NOTHING) {
        long long sent = traffic(t->s);
        if (sent != 0) {
            fprintf(stderr,
                    "FAIL %s: %s: %lld commands or connections "
                    "reached Redis\n",
                    r->fn, r->what, sent);
            failed = 1;
            freeReplyObject(rt_cmd(t->s, "CONFIG RESETSTAT"));
        }
    }
    return failed;
}

TEST(bad_input_to_every_public_function_is_refused_and_changes_nothing)
{
    static struct bi fixture;
    struct bi *t = &fixture;
    rlock_mutex_opts mo;
    char *before, *after;
    size_t i, failed = 0, n_nothing = 0, n_send = 0;

    child_out = mmap(NULL, sizeof *child_out, PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(child_out != MAP_FAILED);
    memset(t->over, 'o', RLOCK_NAME_MAX + 1);
    t->over[RLOCK_NAME_MAX + 1] = '\0';
    memset(t->max, 'm', RLOCK_NAME_MAX);
    t->max[RLOCK_NAME_MAX] = '\0';
    t->huge = malloc(1 << 20);
    CHECK(t->huge != NULL);
    memset(t->huge, 'h', (1 << 20) - 1);
    t->huge[(1 << 20) - 1] = '\0';

    t->s = rt_server_start(NULL);
    t->c = rt_client(rt_server_url(t->s), NULL);
    t->c2 = rt_client(rt_server_url(t->s), NULL);
    t->quiet = rt_client(rt_server_url(t->s), NULL);
    t->m = rt_mutex(t->c, "bi-free", NULL);
    /* A fixed lease: no watchdog renewals while the table runs. */
    rlock_mutex_opts_init(&mo);
    mo.lease_ms = 10 * 60 * 1000;
    t->held = rt_mutex(t->c, "bi-held", &mo);
    t->other = rt_mutex(t->c2, "bi-held", &mo);
    t->owner = rlock_owner_new(NULL);
    CHECK(t->owner != NULL);
    CHECK_RC(rlock_mutex_lock(t->held), RLOCK_OK);
    CHECK(rlock_mutex_token(t->held) != 0);

    before = snapshot(t->s);
    freeReplyObject(rt_cmd(t->s, "CONFIG RESETSTAT"));
    CHECK_INT(traffic(t->s), ==, 0);

    /* First every row that must send nothing, then those that connect. */
    for (i = 0; i < NROWS; i++) {
        if (rows[i].may_send == SENDS_NOTHING) {
            failed += (size_t)run_row(t, &rows[i]);
            n_nothing++;
        }
    }
    after = snapshot(t->s);
    if (strcmp(before, after) != 0) {
        fprintf(stderr, "FAIL keys changed:\n--- before\n%s--- after\n%s",
                before, after);
        failed++;
    }
    free(after);
    for (i = 0; i < NROWS; i++) {
        if (rows[i].may_send == MAY_SEND) {
            failed += (size_t)run_row(t, &rows[i]);
            n_send++;
        }
    }
    after = snapshot(t->s);
    if (strcmp(before, after) != 0) {
        fprintf(stderr,
                "FAIL keys changed by the allowed calls:\n--- before\n"
                "%s--- after\n%s",
                before, after);
        failed++;
    }
    printf("%zu rows (%zu sending nothing, %zu connecting), %zu failed\n",
           NROWS, n_nothing, n_send, failed);
    CHECK_INT(failed, ==, 0);

    /* The lock every non-owner call aimed at is still the owner's. */
    CHECK(rlock_mutex_token(t->held) != 0);
    CHECK_RC(rlock_mutex_unlock(t->held), RLOCK_OK);

    free(before);
    free(after);
    free(t->huge);
    rlock_mutex_free(t->held);
    rlock_mutex_free(t->other);
    rlock_owner_free(t->owner);
    rlock_mutex_free(t->m);
    rlock_client_close(t->quiet);
    rlock_client_close(t->c2);
    rlock_client_close(t->c);
    munmap(child_out, sizeof *child_out);
    rt_server_stop(t->s);
}

/* Every public function has rows, and every row names a public function
 * (api_coverage.sh checks api_functions[] against the header). */
TEST(bad_input_table_has_rows_for_every_public_function)
{
    size_t f, i, missing = 0;

    for (f = 0; f < NFUNCTIONS; f++) {
        size_t n = 0;
        for (i = 0; i < NROWS; i++)
            if (strcmp(rows[i].fn, api_functions[f]) == 0)
                n++;
        printf("%-28s %zu rows\n", api_functions[f], n);
        if (n == 0) {
            fprintf(stderr, "FAIL %s has no row in the bad-input table\n",
                    api_functions[f]);
            missing++;
        }
    }
    for (i = 0; i < NROWS; i++) {
        for (f = 0; f < NFUNCTIONS; f++)
            if (strcmp(rows[i].fn, api_functions[f]) == 0)
                break;
        if (f == NFUNCTIONS) {
            fprintf(stderr, "FAIL row \"%s: %s\" names no listed function\n",
                    rows[i].fn, rows[i].what);
            missing++;
        }
    }
    printf("%zu rows for %zu functions\n", NROWS, NFUNCTIONS);
    CHECK_INT(missing, ==, 0);
}
