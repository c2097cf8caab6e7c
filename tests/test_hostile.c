/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A hostile server and a hostile network (the fake server of
 * harness/fake_server.h, and the proxy trickling a real server's replies):
 * every call returns by its deadline whatever the server does, no reply
 * can make the client allocate without bound, the error code says what
 * happened, a holder behind a trickling path learns of its loss before
 * anyone else can take the lock, and nothing of the client's reaches a
 * program it execs.
 *
 * The deadlines here are 300 ms; "in time" allows 1.5 s more for a busy
 * machine. Before the connection engine, the trickled calls took seconds
 * per call and the endless string grew the client by gigabytes.
 */
#include <fcntl.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness/fake_server.h"
#include "harness/proxy.h"
#include "harness/test.h"

#define DEADLINE_MS 300
#define MARGIN_MS 1500

/* The process's peak resident size, in KiB (VmHWM). */
static long peak_rss_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;

    if (!f)
        return -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld kB", &kb) == 1)
            break;
    fclose(f);
    return kb;
}

static void short_deadlines(rlock_client_opts *o)
{
    rlock_client_opts_init(o);
    o->connect_timeout_ms = DEADLINE_MS;
    o->command_timeout_ms = DEADLINE_MS;
}

/* What each misbehaviour must come out as: the code and a word of the
 * message. */
static const struct {
    rt_fake_mode mode;
    const char *name;
    int code;
    const char *says;
} cases[] = {
    {RT_FAKE_SILENT, "silent", RLOCK_ENOREPLY, "within"},
    {RT_FAKE_TRICKLE, "trickle", RLOCK_ENOREPLY, "within"},
    {RT_FAKE_STALL, "stall", RLOCK_ENOREPLY, "within"},
    {RT_FAKE_BULK, "endless bulk", RLOCK_EPROTO, "max_reply_bytes"},
    {RT_FAKE_ARRAY, "huge array", RLOCK_EPROTO, "max_array_elements"},
    {RT_FAKE_DEEP, "deep nesting", RLOCK_EPROTO, "max_depth"},
    {RT_FAKE_GARBAGE, "garbage", RLOCK_EPROTO, "protocol error"},
};

static void check_outcome(const char *what, const char *mode, int rc, int want,
                          const char *msg, const char *says, int64_t took)
{
    if (rc != want)
        rt_fail(__FILE__, __LINE__, "%s against %s: %s, want %s (%s)", what,
                mode, rlock_strerror(rc), rlock_strerror(want), msg);
    if (!strstr(msg, says))
        rt_fail(__FILE__, __LINE__, "%s against %s: message lacks \"%s\": %s",
                what, mode, says, msg);
    if (took > DEADLINE_MS + MARGIN_MS)
        rt_fail(__FILE__, __LINE__, "%s against %s took %lld ms", what, mode,
                (long long)took);
}

TEST(a_hostile_server_cannot_hold_open_past_its_deadline_or_grow_memory)
{
    long rss0 = peak_rss_kb();
    size_t i;

    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rt_fake *f = rt_fake_start(cases[i].mode, 1);
        rlock_client_opts o;
        int64_t t0;
        int err = 0;

        short_deadlines(&o);
        t0 = rt_now_ms();
        CHECK(rlock_client_open(rt_fake_url(f), &o, &err) == NULL);
        check_outcome("open", cases[i].name, err, cases[i].code,
                      rlock_client_errmsg(NULL), cases[i].says,
                      rt_now_ms() - t0);
        rt_fake_stop(f);
    }
    /* The endless string alone streamed far more than this. */
    CHECK_INT(peak_rss_kb() - rss0, <, 64 * 1024);
}

static int op_trylock(rlock_mutex *m)
{
    return rlock_mutex_trylock(m);
}
static int op_timedlock(rlock_mutex *m)
{
    return rlock_mutex_timedlock(m, 100);
}
static int op_status(rlock_mutex *m)
{
    rlock_status st;
    return rlock_mutex_status(m, &st);
}
static int op_force(rlock_mutex *m)
{
    return rlock_mutex_force_unlock(m, NULL);
}
static int op_ping(rlock_mutex *m)
{
    rlock_server_info info;
    return rlock_client_ping(rlock_mutex_client(m), &info);
}

TEST(a_hostile_server_cannot_hold_a_call_past_its_deadline_or_grow_memory)
{
    static const struct {
        const char *what;
        int (*op)(rlock_mutex *);
    } calls[] = {{"trylock", op_trylock},
                 {"timedlock", op_timedlock},
                 {"status", op_status},
                 {"force_unlock", op_force},
                 {"ping", op_ping}};
    long rss0 = peak_rss_kb();
    size_t i, k;

    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rt_fake *f = rt_fake_start(cases[i].mode, 0);
        rlock_client_opts o;
        rlock_client *c;
        rlock_mutex *m;

        short_deadlines(&o);
        o.use_pubsub = 0; /* the fake server knows no pub/sub */
        c = rt_client(rt_fake_url(f), &o); /* the handshake is answered */
        m = rt_mutex(c, "hostile", NULL);
        for (k = 0; k < sizeof calls / sizeof calls[0]; k++) {
            int64_t t0 = rt_now_ms();
            int rc = calls[k].op(m);
            check_outcome(calls[k].what, cases[i].name, rc, cases[i].code,
                          rlock_client_errmsg(c), cases[i].says,
                          rt_now_ms() - t0);
        }
        rlock_mutex_free(m);
        rlock_client_close(c);
        rt_fake_stop(f);
    }
    CHECK_INT(peak_rss_kb() - rss0, <, 64 * 1024);
}

/* A longer deadline, so that a call taking twice its deadline shows
 * beyond the busy machine's margin: a wait that slept in recv(2) for most
 * of the deadline and then polled for the whole of it again took 4 s. */
TEST(a_call_to_a_silent_server_ends_at_its_deadline_not_twice_it)
{
    rt_fake *f = rt_fake_start(RT_FAKE_STALL, 0);
    rlock_client_opts o;
    rlock_client *c;
    rlock_mutex *m;
    int k;

    rlock_client_opts_init(&o);
    o.command_timeout_ms = 2000;
    o.use_pubsub = 0;
    c = rt_client(rt_fake_url(f), &o);
    m = rt_mutex(c, "silent", NULL);
    for (k = 0; k < 2; k++) {
        int64_t t0 = rt_now_ms();
        int rc = rlock_mutex_trylock(m);
        int64_t took = rt_now_ms() - t0;

        CHECK_RC(rc, RLOCK_ENOREPLY);
        CHECK_INT(took, >=, 1900);
        CHECK_INT(took, <, 3300);
    }
    rlock_mutex_free(m);
    rlock_client_close(c);
    rt_fake_stop(f);
}

/* Each timed-out attempt leaves an undo that the background thread sends
 * until Redis confirms it or the attempt's lease is over (here 30 s).
 * Against a server that never answers, each send takes a whole timeout;
 * with more than one undo queued, the step that sent them never ended
 * (each came due again while the others were sent), so closing the
 * client waited for the lease, and renewals due meanwhile waited too. */
TEST(undos_a_silent_server_never_confirms_do_not_hold_up_close)
{
    rt_fake *f = rt_fake_start(RT_FAKE_STALL, 0);
    static const char *const names[] = {"undo-a", "undo-b", "undo-c"};
    rlock_client_opts o;
    rlock_client *c;
    int64_t t0;
    size_t i;

    short_deadlines(&o);
    o.use_pubsub = 0;
    o.watchdog_lease_ms = 30000;
    c = rt_client(rt_fake_url(f), &o);
    for (i = 0; i < sizeof names / sizeof names[0]; i++) {
        rlock_mutex *m = rt_mutex(c, names[i], NULL);

        CHECK_RC(rlock_mutex_trylock(m), RLOCK_ENOREPLY);
        rlock_mutex_free(m);
    }
    rt_sleep_ms(1500); /* the undos are sent, time out, come due again */
    t0 = rt_now_ms();
    rlock_client_close(c);
    CHECK_INT(rt_now_ms() - t0, <, DEADLINE_MS + MARGIN_MS);
    rt_fake_stop(f);
}

/* ---- two holders through a trickling path ------------------------------ */

static atomic_llong lost_at_ms;

static void note_lost(rlock_mutex *m, void *arg)
{
    (void)m;
    (void)arg;
    atomic_store(&lost_at_ms, rt_now_ms());
}

typedef struct {
    rlock_mutex *m;
    int rc;
    int64_t got_at_ms;
} taker;

static void *take(void *arg)
{
    taker *t = arg;

    t->rc = rlock_mutex_timedlock(t->m, 20000);
    t->got_at_ms = rt_now_ms();
    if (t->rc == RLOCK_OK)
        rlock_mutex_unlock(t->m);
    return NULL;
}

/*
 * Holder A reaches Redis through a path that, once A holds the lock, passes
 * requests at once but trickles replies a byte every 400 ms: A's renewals
 * reach Redis, their replies do not come back in time. Holder B waits on
 * the same real server directly. A must be told of the loss (on_lost)
 * before B gets the lock, and must not claim the hold afterwards.
 */
TEST(a_trickled_renewal_never_lets_two_holders_overlap)
{
    rt_server *s = rt_server_start(NULL);
    rt_proxy *p = rt_proxy_start(rt_server_port(s));
    rlock_client_opts oa, ob;
    rlock_mutex_opts mo;
    rlock_client *a, *b;
    rlock_mutex *ma, *mb;
    taker t;
    pthread_t th;

    rlock_client_opts_init(&oa);
    oa.watchdog_lease_ms = 1000;
    oa.command_timeout_ms = 5000; /* far longer than the lease */
    a = rt_client(rt_proxy_url(p), &oa);
    rlock_client_opts_init(&ob);
    b = rt_client(rt_server_url(s), &ob);
    rlock_mutex_opts_init(&mo);
    mo.on_lost = note_lost;
    ma = rt_mutex(a, "two-holders", &mo);
    mb = rt_mutex(b, "two-holders", NULL);
    atomic_store(&lost_at_ms, 0);

    CHECK_RC(rlock_mutex_lock(ma), RLOCK_OK);
    rt_proxy_trickle(p, 0, 400);
    t.m = mb;
    CHECK(pthread_create(&th, NULL, take, &t) == 0);
    pthread_join(th, NULL);
    CHECK_RC(t.rc, RLOCK_OK);
    CHECK(atomic_load(&lost_at_ms) != 0);
    if (atomic_load(&lost_at_ms) > t.got_at_ms)
        rt_fail(__FILE__, __LINE__,
                "A was told of its loss %lld ms after B acquired",
                (long long)(atomic_load(&lost_at_ms) - t.got_at_ms));
    /* B got it within about a lease of A's last confirmed renewal. */
    CHECK_RC(rlock_mutex_unlock(ma), RLOCK_ELOST);

    rlock_mutex_free(ma);
    rlock_mutex_free(mb);
    rlock_client_close(a);
    rlock_client_close(b);
    rt_proxy_stop(p);
    rt_server_stop(s);
}

/* A fixed lease extended through the trickling path: the extension may
 * reach Redis, its confirmation does not come in time, so the holder
 * counts with the old lease's end and is lost after it. */
TEST(a_trickled_extend_does_not_outlast_the_lease)
{
    rt_server *s = rt_server_start(NULL);
    rt_proxy *p = rt_proxy_start(rt_server_port(s));
    rlock_client_opts oa;
    rlock_mutex_opts mo;
    rlock_client *a;
    rlock_mutex *ma;
    int64_t t0;

    rlock_client_opts_init(&oa);
    oa.command_timeout_ms = 600;
    a = rt_client(rt_proxy_url(p), &oa);
    rlock_mutex_opts_init(&mo);
    mo.lease_ms = 1000;
    ma = rt_mutex(a, "trickled-extend", &mo);
    t0 = rt_now_ms();
    CHECK_RC(rlock_mutex_lock(ma), RLOCK_OK);
    rt_proxy_trickle(p, 0, 400);
    CHECK_RC(rlock_mutex_extend(ma, 60000), RLOCK_ENOREPLY);
    CHECK_INT(rt_now_ms() - t0, <, 600 + MARGIN_MS + 200);
    /* Past the first lease: whatever Redis did, the client may not claim
     * the hold. */
    while (rt_now_ms() - t0 < 1000)
        rt_sleep_ms(10);
    CHECK_RC(rlock_mutex_extend(ma, 60000), RLOCK_ELOST);
    rlock_mutex_free(ma);
    rlock_client_close(a);
    rt_proxy_stop(p);
    rt_server_stop(s);
}

/* ---- descriptors ------------------------------------------------------- */

/* Keeps, of ls -l's lines ("... N -> target"), those of descriptors
 * above 2, as "N target". */
static void keep_above_2(char *buf)
{
    char out[4096], *line, *save = NULL;
    size_t len = 0;

    out[0] = '\0';
    for (line = strtok_r(buf, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        char *arrow = strstr(line, " -> "), *num;
        if (!arrow)
            continue;
        *arrow = '\0';
        num = strrchr(line, ' ');
        if (!num || atoi(num + 1) <= 2)
            continue;
        len += (size_t)snprintf(out + len, sizeof out - len, "%s %s\n", num + 1,
                                arrow + 4);
        if (len >= sizeof out)
            break;
    }
    strcpy(buf, out);
}

/* What a program this process execs now sees open above fd 2: lines of
 * "fd target". */
static void exec_listing(char *buf, size_t size)
{
    size_t len = 0;
    ssize_t n;
    int out[2], status;
    pid_t pid;

    CHECK(pipe2(out, O_CLOEXEC) == 0);
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        dup2(out[1], 1); /* dup2 clears close-on-exec on 1 */
        /* The shell's own descriptors, listed by a child of it (the
         * shell itself opens nothing meanwhile). */
        execl("/bin/sh", "sh", "-c", "ls -l /proc/$$/fd", (char *)NULL);
        _exit(127);
    }
    close(out[1]);
    while (len < size - 1 && (n = read(out[0], buf + len, size - 1 - len)) > 0)
        len += (size_t)n;
    buf[len] = '\0';
    close(out[0]);
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    keep_above_2(buf);
}

/* A program the process execs while a client holds a lock and has its
 * background thread and pooled connections sees none of the client's
 * sockets or pipes: what it sees is what it saw before the client
 * existed (the test runner's own descriptors). */
TEST(a_program_started_while_holding_inherits_no_descriptor)
{
    rt_server *s = rt_server_start(NULL);
    static char before[4096], during[4096];
    rlock_client *c;
    rlock_mutex *m, *other;
    rlock_client_opts o;

    exec_listing(before, sizeof before);
    rlock_client_opts_init(&o);
    o.watchdog_lease_ms = 300; /* the background thread renews meanwhile */
    c = rt_client(rt_server_url(s), &o);
    m = rt_mutex(c, "fds", NULL);
    other = rt_mutex(c, "fds-other", NULL);
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    CHECK_RC(rlock_mutex_lock(other), RLOCK_OK);
    exec_listing(during, sizeof during);
    if (strcmp(before, during) != 0)
        rt_fail(__FILE__, __LINE__,
                "the program inherited more than before the client:\n"
                "before:\n%s\nwhile holding:\n%s",
                before, during);
    CHECK(strstr(during, "socket:") == NULL);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(other), RLOCK_OK);
    rlock_mutex_free(m);
    rlock_mutex_free(other);
    rlock_client_close(c);
    rt_server_stop(s);
}
