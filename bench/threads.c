/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Scenario "threads": T threads of one client with the default options
 * (as users keep them: the pool is the library's to size), each on a name
 * of its own, against the floor with T connections (T = 1, 2, 4, 8, 16,
 * 64). Aggregate pairs per second and the client's CPU per pair; runs
 * alternate (targets: rlock >= 0.9 x the floor's pairs per second where
 * the floor still scales, client CPU per pair <= 1.15 x the floor's).
 *
 * A third side tells where a gap comes from: T raw hiredis connections
 * sending rlock's own uncontended requests (the lean acquisition, a SET
 * NX PX of the value the library writes, and the release's fast script,
 * the bytes the library embeds), with none of the library around them.
 * rlock against it is the client's cost; it against the floor is the
 * protocol's, paid on the server. Each side's Redis CPU per pair (INFO cpu,
 * main thread) and the bench process's CPU per pair (getrusage) are reported
 * too.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "layout/scripts.h"

#define MAX_T 64
#define ROUNDS 3

enum side { RLOCK, PROTOCOL, FLOOR, SIDES };

static const char *const side_name[SIDES] = {"rlock", "protocol", "floor"};

struct runner {
    rlock_mutex *m;    /* rlock */
    redisContext *raw; /* protocol and floor */
    char key[32];      /* floor */
    char lock[40], owner[80]; /* protocol */
    unsigned long nonce;
    double until;
    long pairs;
    int failed;
};

static void *rlock_runner(void *p)
{
    struct runner *r = p;

    while (bench_now() < r->until) {
        if (rlock_mutex_lock(r->m) != RLOCK_OK ||
            rlock_mutex_unlock(r->m) != RLOCK_OK) {
            r->failed = 1;
            break;
        }
        r->pairs++;
    }
    return NULL;
}

/* rlock's uncontended pair, as the native layout sends it on a calm name
 * whose callers never asked for a token: the lean acquisition (SET NX PX
 * of "<owner> <nonce> 1 0 0") and the release's fast form ("<owner>
 * <nonce> "), which answers 0. */
static int protocol_pair(struct runner *r)
{
    const rlock__script *rel = &rlock__lua_native_release_fast;
    redisReply *x;
    char value[128], start[128];
    int ok;

    r->nonce++;
    snprintf(value, sizeof value, "%s %lu 1 0 0", r->owner, r->nonce);
    x = redisCommand(r->raw, "SET %s %s NX PX 30000", r->lock, value);
    ok = x && x->type == REDIS_REPLY_STATUS;
    if (x)
        freeReplyObject(x);
    if (!ok)
        return -1;
    snprintf(start, sizeof start, "%s %lu ", r->owner, r->nonce);
    x = redisCommand(r->raw, "EVALSHA %s 1 %s %s", rel->sha, r->lock, start);
    ok = x && x->type == REDIS_REPLY_INTEGER && x->integer == 0;
    if (x)
        freeReplyObject(x);
    return ok ? 0 : -1;
}

static void *protocol_runner(void *p)
{
    struct runner *r = p;

    while (bench_now() < r->until) {
        if (protocol_pair(r) != 0) {
            r->failed = 1;
            break;
        }
        r->pairs++;
    }
    return NULL;
}

static void *floor_runner(void *p)
{
    struct runner *r = p;

    while (bench_now() < r->until) {
        if (floor_pair(r->raw, r->key, "token") != 0) {
            r->failed = 1;
            break;
        }
        r->pairs++;
    }
    return NULL;
}

static void *(*const side_fn[SIDES])(void *) = {rlock_runner, protocol_runner,
                                                floor_runner};

/* Loads rlock's release script on c (a raw connection); 0 or -1. */
static int load_scripts(redisContext *c)
{
    const rlock__script *s[1] = {&rlock__lua_native_release_fast};
    int i, ok = 1;

    for (i = 0; i < 1 && ok; i++) {
        redisReply *x = redisCommand(c, "SCRIPT LOAD %b", s[i]->body, s[i]->len);
        ok = x && x->type == REDIS_REPLY_STRING && x->len == 40 &&
             memcmp(x->str, s[i]->sha, 40) == 0;
        if (x)
            freeReplyObject(x);
    }
    return ok ? 0 : -1;
}

struct tally {
    double pairs, secs, client_us, redis_us;
};

/* Runs T threads of one side for secs; adds to *t. 0, or -1. */
static int run(redisContext *info, struct runner *rs, int t, enum side s,
               double secs, struct tally *tl)
{
    pthread_t th[MAX_T];
    double t0 = bench_now(), until = t0 + secs, c0 = bench_cpu_usec();
    long long r0 = server_cpu_usec(info), r1;
    long total = 0;
    int i, failed = 0;

    for (i = 0; i < t; i++) {
        rs[i].until = until;
        rs[i].pairs = 0;
        pthread_create(&th[i], NULL, side_fn[s], &rs[i]);
    }
    for (i = 0; i < t; i++) {
        pthread_join(th[i], NULL);
        total += rs[i].pairs;
        failed |= rs[i].failed;
    }
    tl->secs += bench_now() - t0;
    tl->client_us += bench_cpu_usec() - c0;
    r1 = server_cpu_usec(info);
    tl->redis_us += r0 >= 0 && r1 >= r0 ? (double)(r1 - r0) : 0;
    tl->pairs += (double)total;
    return failed ? -1 : 0;
}

static int set_up(bench *b, rlock_client *c, struct runner *rs, int t)
{
    int i, err, rc = 0;

    for (i = 0; i < t; i++) {
        char name[32];

        snprintf(name, sizeof name, "bench:threads:%d", i);
        snprintf(rs[i].key, sizeof rs[i].key, "bench:floor:%d", i);
        snprintf(rs[i].lock, sizeof rs[i].lock, "{rlock:bench:protocol:%d}", i);
        /* As long as the library's owner ids: the bytes cost too. */
        snprintf(rs[i].owner, sizeof rs[i].owner,
                 "%032x@bench/%d:%d", (unsigned)i, (int)getpid(), i + 1);
        rs[i].m = rlock_mutex_new(c, name, NULL, &err);
        rs[i].raw = floor_connect(b->url);
        rs[i].failed = 0;
        if (!rs[i].m || !rs[i].raw || load_scripts(rs[i].raw) != 0)
            rc = -1;
    }
    return rc;
}

static void report(bench *b, int t, const struct tally *tl)
{
    double per_s[SIDES];
    int s;

    for (s = 0; s < SIDES; s++)
        per_s[s] = tl[s].pairs / tl[s].secs;
    fprintf(b->out,
            "  T=%d  rlock %7.0f  protocol %7.0f  floor %7.0f pairs/s  "
            "ratio %.3f (target >= 0.9; protocol/floor %.3f)\n",
            t, per_s[RLOCK], per_s[PROTOCOL], per_s[FLOOR],
            per_s[RLOCK] / per_s[FLOOR], per_s[PROTOCOL] / per_s[FLOOR]);
    fprintf(b->out, "        us/pair Redis CPU");
    for (s = 0; s < SIDES; s++)
        fprintf(b->out, " %s %.1f", side_name[s], tl[s].redis_us / tl[s].pairs);
    fprintf(b->out, "; client CPU");
    for (s = 0; s < SIDES; s++)
        fprintf(b->out, " %s %.1f", side_name[s],
                tl[s].client_us / tl[s].pairs);
    /* Which core is the limit: Redis's main thread near 100 % of a core
     * means Redis's cost per pair decides; client and Redis together near
     * the machine's cores means the CPU they share does. */
    fprintf(b->out, "\n        busy (%% of a core) Redis");
    for (s = 0; s < SIDES; s++)
        fprintf(b->out, " %s %.0f", side_name[s],
                100 * tl[s].redis_us / (tl[s].secs * 1e6));
    fprintf(b->out, "; client");
    for (s = 0; s < SIDES; s++)
        fprintf(b->out, " %s %.0f", side_name[s],
                100 * tl[s].client_us / (tl[s].secs * 1e6));
    fprintf(b->out,
            "\n        client CPU per pair, rlock / floor %.2f (target <= "
            "1.15)\n",
            tl[RLOCK].client_us / tl[RLOCK].pairs /
                (tl[FLOOR].client_us / tl[FLOOR].pairs));
    report_open(b, "threads");
    report_num(b, "threads", t);
    report_num(b, "rlock_pairs_per_s", per_s[RLOCK]);
    report_num(b, "protocol_pairs_per_s", per_s[PROTOCOL]);
    report_num(b, "floor_pairs_per_s", per_s[FLOOR]);
    report_num(b, "ratio", per_s[RLOCK] / per_s[FLOOR]);
    report_num(b, "protocol_ratio", per_s[PROTOCOL] / per_s[FLOOR]);
    report_num(b, "client_cpu_ratio",
               tl[RLOCK].client_us / tl[RLOCK].pairs /
                   (tl[FLOOR].client_us / tl[FLOOR].pairs));
    for (s = 0; s < SIDES; s++) {
        char key[48];

        snprintf(key, sizeof key, "%s_redis_us_per_pair", side_name[s]);
        report_num(b, key, tl[s].redis_us / tl[s].pairs);
        snprintf(key, sizeof key, "%s_client_us_per_pair", side_name[s]);
        report_num(b, key, tl[s].client_us / tl[s].pairs);
        snprintf(key, sizeof key, "%s_redis_busy", side_name[s]);
        report_num(b, key, tl[s].redis_us / (tl[s].secs * 1e6));
        snprintf(key, sizeof key, "%s_client_busy", side_name[s]);
        report_num(b, key, tl[s].client_us / (tl[s].secs * 1e6));
    }
    report_close(b);
}

int scenario_threads(bench *b)
{
    static const int ts[] = {1, 2, 4, 8, 16, 64};
    struct runner rs[MAX_T];
    redisContext *info = floor_connect(b->url);
    size_t k;
    int rc = info ? 0 : 1;

    fprintf(b->out,
            "threads: T threads, a name each, one client with the default "
            "options; rlock's requests over T raw connections; the floor on "
            "T connections; %d alternating rounds, %.1f s each side\n",
            ROUNDS, b->seconds);
    for (k = 0; k < sizeof ts / sizeof ts[0] && rc == 0; k++) {
        int t = ts[k], i, err, round, s;
        struct tally tl[SIDES];
        rlock_client_opts o;
        rlock_client *c;

        memset(tl, 0, sizeof tl);
        memset(rs, 0, sizeof rs);
        rlock_client_opts_init(&o);
        c = rlock_client_open(b->url, &o, &err);
        if (!c) {
            fprintf(stderr, "rlock-bench: %s\n", rlock_strerror(err));
            redisFree(info);
            return 1;
        }
        if (set_up(b, c, rs, t) != 0)
            rc = 1;
        for (round = 0; round < ROUNDS && rc == 0; round++)
            for (s = 0; s < SIDES && rc == 0; s++)
                if (run(info, rs, t, (enum side)s, b->seconds / ROUNDS,
                        &tl[s]) != 0)
                    rc = 1;
        if (rc == 0)
            report(b, t, tl);
        else
            fprintf(stderr, "rlock-bench: threads: a lock, a script or the "
                            "floor failed\n");
        for (i = 0; i < t; i++) {
            if (rs[i].m)
                rlock_mutex_free(rs[i].m);
            if (rs[i].raw)
                redisFree(rs[i].raw);
        }
        rlock_client_close(c);
    }
    if (info)
        redisFree(info);
    return rc;
}
