/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What a lock promises, checked against a real Redis: mutual exclusion,
 * re-entry, owner-only release and extend, fencing tokens, expiry of every
 * key, script reloading, binary names in one hash slot, WRONGTYPE, fork.
 */
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness/test.h"

TEST(two_clients_exclude_each_other)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *a = rt_client(rt_server_url(s), NULL);
    rlock_client *b = rt_client(rt_server_url(s), NULL);
    rlock_mutex *ma = rt_mutex(a, "job", NULL), *mb = rt_mutex(b, "job", NULL);

    CHECK_RC(rlock_mutex_trylock(ma), RLOCK_OK);
    CHECK_RC(rlock_mutex_trylock(mb), RLOCK_EBUSY);
    CHECK_RC(rlock_mutex_timedlock(mb, 0), RLOCK_ETIMEDOUT);
    CHECK_RC(rlock_mutex_timedlock(mb, 100), RLOCK_ETIMEDOUT);
    CHECK_RC(rlock_mutex_unlock(ma), RLOCK_OK);
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:job}"), ==, 0);
    CHECK_RC(rlock_mutex_trylock(mb), RLOCK_OK);
    CHECK_RC(rlock_mutex_trylock(ma), RLOCK_EBUSY);
    CHECK_RC(rlock_mutex_unlock(mb), RLOCK_OK);
    rlock_mutex_free(ma);
    rlock_mutex_free(mb);
    rlock_client_close(a);
    rlock_client_close(b);
    rt_server_stop(s);
}

TEST(reentry_counts_holds_and_releases_at_zero)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *c = rt_client(rt_server_url(s), NULL);
    rlock_client *other = rt_client(rt_server_url(s), NULL);
    rlock_mutex *m = rt_mutex(c, "deep", NULL);
    rlock_mutex *same_name = rt_mutex(c, "deep", NULL);
    rlock_mutex *mo = rt_mutex(other, "deep", NULL);
    uint64_t token;
    int i;

    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    token = rlock_mutex_token(m);
    CHECK(token > 0);
    for (i = 2; i <= 10; i++) {
        CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
        CHECK_INT(rt_lock_count(s, "deep"), ==, i);
        CHECK(rlock_mutex_token(m) == token); /* a re-entry keeps the token */
    }
    /* Another handle on the same name, same thread: the same owner. */
    CHECK_RC(rlock_mutex_trylock(same_name), RLOCK_OK);
    CHECK_INT(rt_lock_count(s, "deep"), ==, 11);
    CHECK_RC(rlock_mutex_unlock(same_name), RLOCK_OK);
    for (i = 9; i >= 1; i--) {
        CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
        CHECK_INT(rt_lock_count(s, "deep"), ==, i);
        CHECK_RC(rlock_mutex_trylock(mo), RLOCK_EBUSY);
    }
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:deep}"), ==, 0);
    CHECK(rlock_mutex_token(m) == 0);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_ENOTOWNER);
    CHECK_RC(rlock_mutex_trylock(mo), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(mo), RLOCK_OK);
    rlock_mutex_free(m);
    rlock_mutex_free(same_name);
    rlock_mutex_free(mo);
    rlock_client_close(c);
    rlock_client_close(other);
    rt_server_stop(s);
}

struct thread_try {
    rlock_mutex *m;
    int trylock_rc, unlock_rc;
    uint64_t token;
};

static void *other_thread(void *arg)
{
    struct thread_try *t = arg;

    t->unlock_rc = rlock_mutex_unlock(t->m);
    t->token = rlock_mutex_token(t->m);
    t->trylock_rc = rlock_mutex_trylock(t->m);
    return NULL;
}

TEST(threads_of_one_client_are_different_owners)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *c = rt_client(rt_server_url(s), NULL);
    rlock_mutex *m = rt_mutex(c, "per-thread", NULL);
    struct thread_try t = {m, 0, 0, 99};
    pthread_t th;

    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    pthread_create(&th, NULL, other_thread, &t);
    pthread_join(th, NULL);
    CHECK_RC(t.unlock_rc, RLOCK_ENOTOWNER);
    CHECK(t.token == 0);
    CHECK_RC(t.trylock_rc, RLOCK_EBUSY);
    CHECK_INT(rt_lock_count(s, "per-thread"), ==, 1);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    rlock_mutex_free(m);
    rlock_client_close(c);
    rt_server_stop(s);
}

TEST(non_owner_release_and_extend_never_touch_the_owners_lock)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *a = rt_client(rt_server_url(s), NULL);
    rlock_client *b = rt_client(rt_server_url(s), NULL);
    rlock_mutex_opts o;
    rlock_mutex *ma, *mb;
    redisReply *before, *after;

    rlock_mutex_opts_init(&o);
    o.lease_ms = 200;
    ma = rt_mutex(a, "mine", &o);
    mb = rt_mutex(b, "mine", NULL);
    CHECK_RC(rlock_mutex_lock(ma), RLOCK_OK);
    before = rt_cmd(s, "GET {rlock:mine}");
    CHECK_RC(rlock_mutex_unlock(mb), RLOCK_ENOTOWNER);
    CHECK_RC(rlock_mutex_extend(mb, 60000), RLOCK_ENOTOWNER);
    after = rt_cmd(s, "GET {rlock:mine}");
    CHECK(before->type == REDIS_REPLY_STRING &&
          after->type == REDIS_REPLY_STRING &&
          strcmp(before->str, after->str) == 0);
    freeReplyObject(before);
    freeReplyObject(after);

    /* Stale holder: a's lease runs out and b takes the lock. a's release
     * and extend report the loss and leave b's lock alone. */
    rt_sleep_ms(300);
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:mine}"), ==, 0);
    CHECK_RC(rlock_mutex_lock(mb), RLOCK_OK);
    CHECK_RC(rlock_mutex_extend(ma, 60000), RLOCK_ELOST);
    CHECK_RC(rlock_mutex_unlock(ma), RLOCK_ENOTOWNER); /* forgotten */
    CHECK_INT(rt_cmd_int(s, "PTTL {rlock:mine}"), <=, 30000);
    CHECK_INT(rt_lock_count(s, "mine"), ==, 1);
    CHECK_RC(rlock_mutex_unlock(mb), RLOCK_OK);
    rlock_mutex_free(ma);
    rlock_mutex_free(mb);
    rlock_client_close(a);
    rlock_client_close(b);
    rt_server_stop(s);
}

TEST(unlock_after_expiry_and_takeover_reports_lost)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *a = rt_client(rt_server_url(s), NULL);
    rlock_client *b = rt_client(rt_server_url(s), NULL);
    rlock_mutex_opts o;
    rlock_mutex *ma, *mb;

    rlock_mutex_opts_init(&o);
    o.lease_ms = 100;
    ma = rt_mutex(a, "stale", &o);
    mb = rt_mutex(b, "stale", NULL);
    CHECK_RC(rlock_mutex_lock(ma), RLOCK_OK);
    rt_sleep_ms(200);
    CHECK_RC(rlock_mutex_lock(mb), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(ma), RLOCK_ELOST);
    CHECK(strstr(rlock_client_errmsg(a), "nothing was released") != NULL ||
          strstr(rlock_client_errmsg(a), "lost") != NULL);
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:stale}"), ==, 1);
    CHECK_RC(rlock_mutex_unlock(mb), RLOCK_OK);
    rlock_mutex_free(ma);
    rlock_mutex_free(mb);
    rlock_client_close(a);
    rlock_client_close(b);
    rt_server_stop(s);
}

TEST(extend_never_recreates_an_expired_lock)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *c = rt_client(rt_server_url(s), NULL);
    rlock_mutex_opts o;
    rlock_mutex *m;

    rlock_mutex_opts_init(&o);
    o.lease_ms = 300;
    m = rt_mutex(c, "short", &o);
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    CHECK_RC(rlock_mutex_extend(m, 5000), RLOCK_OK);
    CHECK_INT(rt_cmd_int(s, "PTTL {rlock:short}"), >, 4000);
    CHECK_RC(rlock_mutex_extend(m, 100), RLOCK_OK);
    rt_sleep_ms(250);
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:short}"), ==, 0);
    CHECK_RC(rlock_mutex_extend(m, 5000), RLOCK_ELOST);
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:short}"), ==, 0);
    rlock_mutex_free(m);
    rlock_client_close(c);
    rt_server_stop(s);
}

TEST(fencing_tokens_increase_after_expiry_and_delete)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *a = rt_client(rt_server_url(s), NULL);
    rlock_client *b = rt_client(rt_server_url(s), NULL);
    rlock_mutex_opts o;
    rlock_mutex *ma, *mb;
    uint64_t last = 0, t;
    int i;

    rlock_mutex_opts_init(&o);
    o.lease_ms = 100;
    ma = rt_mutex(a, "fenced", &o);
    mb = rt_mutex(b, "fenced", &o);
    for (i = 0; i < 5; i++) {
        rlock_mutex *m = i % 2 ? mb : ma;
        /* b's hold of round 1 expired, never unlocked: b's next lock would
         * be a re-entry of a lost hold, which reports the loss first. */
        if (i == 3)
            CHECK_RC(rlock_mutex_lock(m), RLOCK_ELOST);
        CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
        t = rlock_mutex_token(m);
        CHECK(t > last);
        last = t;
        switch (i) {
        case 0: CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK); break;
        case 1: rt_sleep_ms(150); break; /* expires */
        case 2:
            /* Deleted under its holder, which learns of it at unlock. */
            CHECK_INT(rt_cmd_int(s, "DEL {rlock:fenced}"), ==, 1);
            CHECK_RC(rlock_mutex_unlock(m), RLOCK_ELOST);
            break;
        default: CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK); break;
        }
    }
    rlock_mutex_free(ma);
    rlock_mutex_free(mb);
    rlock_client_close(a);
    rlock_client_close(b);
    rt_server_stop(s);
}

TEST(every_key_expires_except_the_fencing_counter)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *a = rt_client(rt_server_url(s), NULL);
    rlock_client *b = rt_client(rt_server_url(s), NULL);
    rlock_mutex_opts o;
    rlock_mutex *ma, *mb;
    redisReply *keys;
    size_t i;

    rlock_mutex_opts_init(&o);
    o.lease_ms = 10000;
    ma = rt_mutex(a, "ttl", &o);
    mb = rt_mutex(b, "ttl", NULL);
    CHECK_RC(rlock_mutex_lock(ma), RLOCK_OK);
    CHECK_RC(rlock_mutex_timedlock(mb, 50), RLOCK_ETIMEDOUT);
    /* A waiter that died without cancelling leaves a queue place behind;
     * make one by hand the way a waiter enqueues. */
    freeReplyObject(rt_cmd(s, "RPUSH {rlock:ttl}:queue ghost"));
    freeReplyObject(rt_cmd(s, "HSET {rlock:ttl}:qinfo ghost %s", "1 10000 0"));
    freeReplyObject(rt_cmd(s, "PEXPIRE {rlock:ttl}:queue 6000"));
    freeReplyObject(rt_cmd(s, "PEXPIRE {rlock:ttl}:qinfo 6000"));
    CHECK_RC(rlock_mutex_timedlock(mb, 0), RLOCK_ETIMEDOUT);

    keys = rt_cmd(s, "KEYS *");
    CHECK(keys->elements >= 2);
    for (i = 0; i < keys->elements; i++) {
        const char *k = keys->element[i]->str;
        long long ttl = rt_cmd_int(s, "PTTL %s", k);
        if (strcmp(k, "{rlock:ttl}:fence") == 0)
            CHECK_INT(ttl, ==, -1);
        else if (ttl < 0)
            rt_fail(__FILE__, __LINE__, "key %s has no expiry", k);
    }
    freeReplyObject(keys);
    rlock_mutex_free(ma);
    rlock_mutex_free(mb);
    rlock_client_close(a);
    rlock_client_close(b);
    rt_server_stop(s);
}

TEST(scripts_reload_after_script_flush_and_restart)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *c = rt_client(rt_server_url(s), NULL);
    rlock_mutex *m = rt_mutex(c, "flush", NULL);

    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    freeReplyObject(rt_cmd(s, "SCRIPT FLUSH"));
    freeReplyObject(rt_cmd(s, "CONFIG RESETSTAT"));
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK); /* re-entry: acquire script */
    freeReplyObject(rt_cmd(s, "SCRIPT FLUSH"));
    CHECK_RC(rlock_mutex_extend(m, 20000), RLOCK_OK);
    freeReplyObject(rt_cmd(s, "SCRIPT FLUSH"));
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    freeReplyObject(rt_cmd(s, "SCRIPT FLUSH"));
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:flush}"), ==, 0);
    /* Each call after a flush found no script and sent its body. */
    CHECK_INT(rt_cmdstat_calls(s, "eval"), ==, 4);
    rlock_mutex_free(m);
    rlock_client_close(c);
    rt_server_stop(s);
}

TEST(uncontended_acquire_and_release_are_one_round_trip_each)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *c = rt_client(rt_server_url(s), NULL);
    rlock_mutex *m = rt_mutex(c, "cheap", NULL);
    int i;

    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK); /* warm the pool */
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    freeReplyObject(rt_cmd(s, "CONFIG RESETSTAT"));
    for (i = 0; i < 10; i++) {
        CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
        CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    }
    /* The lean acquisition is a SET NX PX, the release a script. */
    CHECK_INT(rt_cmdstat_calls(s, "set"), ==, 10);
    CHECK_INT(rt_cmdstat_calls(s, "evalsha"), ==, 10);
    CHECK_INT(rt_cmdstat_calls(s, "eval"), ==, 0);
    CHECK_INT(rt_cmdstat_calls(s, "script|load"), ==, 0);
    rlock_mutex_free(m);
    rlock_client_close(c);
    rt_server_stop(s);
}

TEST(binary_names_share_one_cluster_slot)
{
    /* A cluster node without slots computes key slots (CLUSTER KEYSLOT);
     * a plain server holds the locks. */
    rt_server_opts so = {.cluster_enabled = 1};
    rt_server *cluster = rt_server_start(&so);
    rt_server *s = rt_server_start(NULL);
    rlock_client *c = rt_client(rt_server_url(s), NULL);
    static const char *suffix[] = {"", ":fence", ":queue", ":qinfo",
                                   ":wake"};
    static const struct {
        const char *name;
        size_t len;
    } names[] = {
        {"plain", 5},           {"}starts-with-brace", 18},
        {"a{b}c", 5},           {"{already}", 9},
        {"x}", 2},              {"nul\0l{}\xff", 8},
    };
    size_t i, k;

    for (i = 0; i < sizeof names / sizeof names[0]; i++) {
        int err;
        rlock_mutex *m = rlock_mutex_new_len(c, names[i].name, names[i].len,
                                             NULL, &err);
        long long slot0 = -1;
        char key[64];
        size_t base;

        CHECK(m != NULL);
        memcpy(key, "{rlock:", 7);
        memcpy(key + 7, names[i].name, names[i].len);
        base = 7 + names[i].len;
        key[base++] = '}';
        for (k = 0; k < sizeof suffix / sizeof suffix[0]; k++) {
            size_t n = strlen(suffix[k]);
            long long slot;
            memcpy(key + base, suffix[k], n);
            slot = rt_cmd_int(cluster, "CLUSTER KEYSLOT %b", key, base + n);
            if (k == 0)
                slot0 = slot;
            CHECK_INT(slot, ==, slot0);
        }
        /* The name really locks, NUL byte and all. */
        CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
        CHECK_INT(rt_cmd_int(s, "EXISTS %b", key, base), ==, 1);
        CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
        rlock_mutex_free(m);
    }
    rlock_client_close(c);
    rt_server_stop(s);
    rt_server_stop(cluster);
}

TEST(wrong_type_under_the_name_is_reported_and_unchanged)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *c = rt_client(rt_server_url(s), NULL);
    rlock_mutex *m = rt_mutex(c, "typed", NULL);
    redisReply *r;

    freeReplyObject(rt_cmd(s, "SET {rlock:typed} not-a-lock"));
    CHECK_RC(rlock_mutex_trylock(m), RLOCK_EREDIS);
    CHECK(strstr(rlock_client_errmsg(c), "WRONGTYPE") != NULL);
    CHECK_RC(rlock_mutex_timedlock(m, 100), RLOCK_EREDIS);
    CHECK(strstr(rlock_client_errmsg(c), "WRONGTYPE") != NULL);
    r = rt_cmd(s, "GET {rlock:typed}");
    CHECK(r->type == REDIS_REPLY_STRING && strcmp(r->str, "not-a-lock") == 0);
    freeReplyObject(r);
    CHECK_INT(rt_cmd_int(s, "PTTL {rlock:typed}"), ==, -1);
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:typed}:fence"), ==, 0);
    CHECK_INT(rt_cmd_int(s, "EXISTS {rlock:typed}:queue"), ==, 0);
    rlock_mutex_free(m);
    rlock_client_close(c);
    rt_server_stop(s);
}

struct fork_ctx {
    rlock_mutex *m;
    char parent_owner[128];
};

static int child_after_fork(void *arg)
{
    struct fork_ctx *f = arg;

    /* The child is a new owner: no re-entry into the parent's hold, no
     * token, no unlock of the parent's lock. */
    if (rlock_mutex_token(f->m) != 0)
        return 10;
    if (rlock_mutex_trylock(f->m) != RLOCK_EBUSY)
        return 11;
    if (rlock_mutex_unlock(f->m) != RLOCK_ENOTOWNER)
        return 12;
    /* ... and once the parent let go, it can lock on its own account. */
    if (rlock_mutex_timedlock(f->m, 5000) != RLOCK_OK)
        return 13;
    if (rlock_mutex_unlock(f->m) != RLOCK_OK)
        return 14;
    return 0;
}

TEST(forked_child_never_shares_the_parents_identity)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *c = rt_client(rt_server_url(s), NULL);
    struct fork_ctx f;
    char owner[128];
    pid_t pid;

    f.m = rt_mutex(c, "forked", NULL);
    CHECK_RC(rlock_mutex_lock(f.m), RLOCK_OK);
    rt_lock_field(s, "forked", RT_OWNER, f.parent_owner,
                  sizeof f.parent_owner);
    CHECK(f.parent_owner[0] != '\0');
    pid = rt_fork(child_after_fork, &f);
    /* Wait until the child is queued behind us, then let go. */
    RT_WAIT_UNTIL(rt_cmd_int(s, "LLEN {rlock:forked}:queue") == 1, 5000);
    CHECK_RC(rlock_mutex_unlock(f.m), RLOCK_OK);
    CHECK_INT(rt_wait(pid), ==, 0);
    /* The parent still works and is still itself. */
    CHECK_RC(rlock_mutex_lock(f.m), RLOCK_OK);
    CHECK(strcmp(rt_lock_field(s, "forked", RT_OWNER, owner, sizeof owner),
                 f.parent_owner) == 0);
    CHECK_RC(rlock_mutex_unlock(f.m), RLOCK_OK);
    rlock_mutex_free(f.m);
    rlock_client_close(c);
    rt_server_stop(s);
}

/* In a child forked while the server is stopped: the client is usable at
 * once, forgets the parent's hold without a round trip, and nothing it
 * inherited is locked. */
static int child_of_a_stalled_parent(void *arg)
{
    rlock_mutex *m = arg;
    int64_t left;

    if (rlock_mutex_lease_left(m, &left) != RLOCK_ENOTOWNER)
        return 10;
    if (rlock_mutex_unlock(m) != RLOCK_ENOTOWNER)
        return 11;
    return 0;
}

/*
 * Issue 33, item 11. fork() never waits on the network: with the server
 * stopped (SIGSTOP) while the background thread renews a watchdog hold
 * (each renewal waits up to the 2 s command timeout for a reply that
 * never comes), forks from the main thread each return at once. The
 * child gets a consistent copy of the client: it uses it at once, and it
 * holds nothing of the parent's.
 */
TEST(fork_never_waits_for_a_renewal_the_server_does_not_answer)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client_opts o;
    rlock_client *c;
    rlock_mutex *m;
    int64_t t0, until, longest = 0, total = 0;
    int forks = 0;

    rlock_client_opts_init(&o);
    o.watchdog_lease_ms = 6000; /* renewed from 2 s on */
    c = rt_client(rt_server_url(s), &o);
    m = rt_mutex(c, "forking", NULL);
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    t0 = rt_now_ms();
    rt_server_pause(s);
    /* From the first renewal until shortly before the lease ends, a
     * renewal is nearly always waiting for its reply. */
    while (rt_now_ms() < t0 + 2200)
        rt_sleep_ms(10);
    until = t0 + 5500;
    while (rt_now_ms() < until) {
        int64_t f0 = rt_now_ms(), took;
        pid_t pid = rt_fork(child_of_a_stalled_parent, m);
        took = rt_now_ms() - f0;
        if (took > longest)
            longest = took;
        total += took;
        forks++;
        CHECK_INT(rt_wait(pid), ==, 0);
        rt_sleep_ms(20);
    }
    printf("%d forks while the server was stopped: longest %lld ms, "
           "mean %.1f ms\n",
           forks, (long long)longest, (double)total / forks);
    CHECK_INT(longest, <, 150);
    CHECK_INT(forks, >, 10);
    rt_server_resume(s);
    rlock_mutex_unlock(m); /* lost or not: either way it is let go */
    rlock_mutex_free(m);
    rlock_client_close(c);
    rt_server_stop(s);
}

/* A child that closes its copy of the client before any other call on
 * it (cancel_first: after cancelling the waits, its first call). */
struct close_first {
    rlock_client *c;
    int cancel_first;
};

static int child_closes_first(void *arg)
{
    struct close_first *f = arg;

    if (f->cancel_first)
        rlock_client_cancel_waits(f->c);
    rlock_client_close(f->c);
    return 0;
}

/* Waits for child pid at most ms: its exit status, or the test fails
 * (and the child is killed) if it is still running then. */
static int wait_within(pid_t pid, int64_t ms)
{
    int64_t until = rt_now_ms() + ms;
    int status;
    pid_t got;

    while ((got = waitpid(pid, &status, WNOHANG)) == 0) {
        if (rt_now_ms() > until) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            rt_fail(__FILE__, __LINE__,
                    "the child did not exit within %lld ms: killed",
                    (long long)ms);
        }
        rt_sleep_ms(10);
    }
    CHECK(got == pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static atomic_int forked_renewals;

static void count_renewals(const rlock_event *ev, void *arg)
{
    (void)arg;
    if (ev->type == RLOCK_EV_RENEWED)
        atomic_fetch_add(&forked_renewals, 1);
}

/*
 * A forked child whose first call on an inherited client is
 * rlock_client_close (or rlock_client_cancel_waits, then close) closes
 * its own copy: it neither joins the parent's background and notifier
 * threads, which it does not have, nor destroys condition variables the
 * parent's threads wait on, nor wakes the parent's waiters. Before, the
 * child hung in pthread_join. The parent has a watchdog hold whose
 * renewals were delivered by a notifier thread, an on_lost, and a thread
 * waiting for a lock another client holds.
 */
TEST(a_forked_child_may_close_the_client_first)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client_opts o;
    rlock_mutex_opts mo;
    rlock_client *c, *other;
    rlock_mutex *m, *busy, *obusy;
    struct close_first f;
    rt_locker l;

    rlock_client_opts_init(&o);
    o.watchdog_lease_ms = 300;
    c = rt_client(rt_server_url(s), &o);
    other = rt_client(rt_server_url(s), NULL);
    atomic_store(&forked_renewals, 0);
    CHECK_RC(rlock_client_set_event_cb(c, count_renewals, NULL), RLOCK_OK);
    rlock_mutex_opts_init(&mo);
    mo.on_lost = rt_count_lost;
    m = rt_mutex(c, "close-first", &mo);
    busy = rt_mutex(c, "close-first-busy", NULL);
    obusy = rt_mutex(other, "close-first-busy", NULL);
    CHECK_RC(rlock_mutex_lock(m), RLOCK_OK);
    RT_WAIT_UNTIL(atomic_load(&forked_renewals) >= 2, 5000);
    CHECK_RC(rlock_mutex_lock(obusy), RLOCK_OK);
    rt_locker_start(&l, busy, 1);
    RT_WAIT_UNTIL(rt_cmd_int(s, "LLEN {rlock:close-first-busy}:queue") == 1,
                  5000);
    f.c = c;
    for (f.cancel_first = 0; f.cancel_first < 2; f.cancel_first++)
        CHECK_INT(wait_within(rt_fork(child_closes_first, &f), 5000), ==, 0);
    /* The parent's client goes on as before. */
    CHECK_INT(atomic_load(&l.done), ==, 0);
    CHECK_RC(rlock_mutex_unlock(obusy), RLOCK_OK);
    CHECK_RC(rt_locker_join(&l), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(m), RLOCK_OK);
    rlock_mutex_free(m);
    rlock_mutex_free(busy);
    rlock_mutex_free(obusy);
    rlock_client_close(other);
    rlock_client_close(c);
    rt_server_stop(s);
}

TEST(owner_ids_are_long_and_random)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *a = rt_client(rt_server_url(s), NULL);
    rlock_client *b = rt_client(rt_server_url(s), NULL);
    rlock_mutex *ma = rt_mutex(a, "ida", NULL), *mb = rt_mutex(b, "idb", NULL);
    char ra[160], rb[160];
    const char *colon;

    CHECK_RC(rlock_mutex_lock(ma), RLOCK_OK);
    CHECK_RC(rlock_mutex_lock(mb), RLOCK_OK);
    rt_lock_field(s, "ida", RT_OWNER, ra, sizeof ra);
    rt_lock_field(s, "idb", RT_OWNER, rb, sizeof rb);
    /* "<128 bits in hex>@<host>/<pid>:<thread>" */
    colon = strchr(ra, ':');
    CHECK(colon != NULL);
    CHECK_INT(strspn(ra, "0123456789abcdef"), ==, 32);
    CHECK(ra[32] == '@');
    CHECK(strncmp(ra, rb, 32) != 0);
    rlock_mutex_free(ma);
    rlock_mutex_free(mb);
    rlock_client_close(a);
    rlock_client_close(b);
    rt_server_stop(s);
}
