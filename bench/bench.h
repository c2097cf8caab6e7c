/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * rlock-bench: rlock measured beside the Redis floor, in the same run, on
 * the same server. Shared pieces of the scenarios.
 */
#ifndef RLOCK_BENCH_H
#define RLOCK_BENCH_H

#include <stdint.h>
#include <stdio.h>

#include <hiredis/hiredis.h>
#include <rlock/rlock.h>

typedef struct bench {
    const char *url; /* the server every scenario uses */
    int quick;       /* tiny counts: a smoke run, not a measurement */
    double seconds;  /* length of each timed run */
    FILE *out;       /* the readable tables: stdout, or stderr with --json */
    FILE *json;      /* NULL: text only */
    const char *plot_dir; /* --plot DIR: wait samples for bench/plot.sh */
    int json_items;       /* values written in the current JSON object */
    int sync_replicas;    /* --sync-replicas: for the uncontended client */
    int count_events;     /* --count-events: the uncontended client has an
                             event callback that counts */
    long holds;           /* --holds: the async scenario's (0: its own) */
} bench;

/* ---- time and statistics (stats.c) ---------------------------------- */

double bench_now(void); /* monotonic, seconds */
/* CPU time of this process, user and system, every thread: microseconds
 * (getrusage). */
double bench_cpu_usec(void);
/* Sorts v[0..n) and returns its q-quantile (0 <= q <= 1); 0 if n == 0. */
double bench_quantile(double *v, size_t n, double q);

/* ---- the floor: a plain lock written with raw hiredis (floor.c) ------- */

/* A raw connection to url (redis:// or unix://), with the floor's
 * compare-and-delete script loaded; NULL after a message on stderr. */
redisContext *floor_connect(const char *url);
/* Where url points, for hiredis: FLOOR_UNIX (path), FLOOR_TCP (host and
 * port), or 0 (neither: not a URL the floor reads). */
enum { FLOOR_UNIX = 1, FLOOR_TCP };
int floor_where(const char *url, char host[256], int *port, char path[256]);
/* SET key token NX PX 30000, then the compare-and-delete script: the two
 * round trips every lock needs. Returns 0, or -1 on any failure. */
int floor_pair(redisContext *ctx, const char *key, const char *token);
/* The SHA-1 of the compare-and-delete script (after floor_connect). */
const char *floor_release_sha(void);

/* ---- what the server reports (server.c) ------------------------------- */

/* A numeric field of INFO section, or -1. */
long long server_info_field(redisContext *raw, const char *section,
                            const char *field);
/* Calls of cmd ("evalsha", "exec") so far (INFO commandstats). */
long long server_calls(redisContext *raw, const char *cmd);
/* Microseconds Redis has spent running the requests a lock sends, from
 * one INFO commandstats, into *usec; 0, or -1: scripts (EVAL, EVALSHA,
 * FCALL and their _RO forms, each with what it runs), SET, and the
 * compare-and-delete commands (DELEX, DELIFEQ). A SET a script runs is
 * counted twice (with the script and as a SET): both sides of the
 * uncontended run send only scripts that run none (rlock's lean
 * acquisition is a plain SET, its release a script of GET and DEL, or
 * DELEX/DELIFEQ; the floor's the same SET and such a script), so each of
 * their requests is timed exactly once. */
int server_request_usec(redisContext *raw, long long *usec);
/* CPU time, user and system, of the server's main thread in microseconds
 * (INFO cpu), or -1: everything Redis does for a request, reading it,
 * running it and writing the reply. */
long long server_cpu_usec(redisContext *raw);

/* ---- reporting (report.c) --------------------------------------------- */

/* Text goes to stdout; with --json, the same values go into one JSON
 * document. A scenario opens an object (or an array of objects) and puts
 * numbers and strings in it. */
void report_open(bench *b, const char *scenario);
void report_close(bench *b);
void report_num(bench *b, const char *key, double v);
void report_str(bench *b, const char *key, const char *v);

/* ---- scenarios -------------------------------------------------------- */

int scenario_uncontended(bench *b);
int scenario_threads(bench *b);
int scenario_contended(bench *b);
int scenario_scale(bench *b);
int scenario_waiters(bench *b);
int scenario_interop(bench *b);
int scenario_events(bench *b);
int scenario_syscalls(bench *b);
int scenario_redlock(bench *b);
int scenario_async(bench *b);
/* The child of the syscalls scenario (--syscall-run SIDE PAIRS): side
 * "rlock" or "floor"; an exit code. */
int syscall_run(const char *url, const char *side, int pairs);

#endif
