/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * rlock list: the locks on the servers, of every layout, found by a walk
 * over the keys (find.c) and read one by one, each line what rlock status
 * says of one lock. The work is bounded: the keys the walk looks at
 * (--max-keys) and the locks read (--max-locks); what a bound left out is
 * said on stderr.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "find.h"

#define LIST_MAX_LOCKS 10000
#define LIST_MAX_KEYS 10000000L
/* SCAN steps between checks of the table (a walk that found more locks
 * than it may read stops). */
#define LIST_STEPS_AT_ONCE 100

/* Shared by list and top: "--layout native|redisson|token" into a set of
 * layouts. */
int parse_layouts(const char *cmd, const char *v, int *layouts)
{
    int layout;

    if (parse_layout(v, &layout) != 0) {
        fprintf(stderr, "%s: --layout takes native, redisson or token\n", cmd);
        return -1;
    }
    *layouts = 1 << layout;
    return 0;
}

/* The holder as a line shows it: "pid@host" for rlock's holds, the
 * holder's own string (cut) for a peer's. */
const char *holder_text(const found *x, char *buf, size_t len, size_t cols)
{
    char host[4 * 64 + 1];

    if (x->state != LOOK_OK || !x->st.held)
        return "-";
    if (x->st.holder_host[0] && x->st.holder_pid > 0) {
        snprintf(buf, len, "%lld@%s", (long long)x->st.holder_pid,
                 safe_cols(x->st.holder_host, strlen(x->st.holder_host), cols,
                           host, sizeof host));
        return buf;
    }
    return safe_cols(x->st.holder, strlen(x->st.holder), cols, buf, len);
}

/* The lease left: "29.812s", "none" (a key without expiry), "-" free. */
const char *lease_text(const found *x, char *buf, size_t len)
{
    if (x->state != LOOK_OK || !x->st.held)
        return "-";
    if (x->st.lease_ms < 0)
        return "none";
    snprintf(buf, len, "%.3fs", (double)x->st.lease_ms / 1000.0);
    return buf;
}

static int by_name(const void *a, const void *b)
{
    const found *x = *(found *const *)a, *y = *(found *const *)b;
    size_t n = x->len < y->len ? x->len : y->len;
    int d = memcmp(x->name, y->name, n);

    if (d)
        return d;
    if (x->len != y->len)
        return x->len < y->len ? -1 : 1;
    return x->layout - y->layout;
}

static void print_json(const found *x)
{
    const rlock_status *st = &x->st;

    /* rlock status --json's fields, and the layout. */
    fputs("{\"name\":", stdout);
    json_string_len(stdout, x->name, x->len);
    printf(",\"layout\":\"%s\",\"held\":%s,\"holder\":", layout_name(x->layout),
           st->held ? "true" : "false");
    if (st->held)
        json_string(stdout, st->holder);
    else
        fputs("null", stdout);
    fputs(",\"host\":", stdout);
    if (st->holder_host[0])
        json_string(stdout, st->holder_host);
    else
        fputs("null", stdout);
    if (st->holder_pid > 0)
        printf(",\"pid\":%lld", (long long)st->holder_pid);
    else
        fputs(",\"pid\":null", stdout);
    printf(",\"count\":%lld,\"lease_ms\":", (long long)st->count);
    if (st->held && st->lease_ms < 0)
        fputs("null", stdout);
    else
        printf("%lld", (long long)st->lease_ms);
    printf(",\"token\":%llu,\"last_token\":%llu,\"waiters\":%lld}\n",
           (unsigned long long)(st->held ? st->token : st->last_token),
           (unsigned long long)st->last_token, (long long)st->waiters);
}

static void print_line(const found *x)
{
    char holder[4 * 160 + 8], lease[32];

    printf("%-9s %-24s %10s %5lld %7lld %17llu  ", layout_name(x->layout),
           holder_text(x, holder, sizeof holder, 24),
           lease_text(x, lease, sizeof lease), (long long)x->st.count,
           (long long)x->st.waiters, (unsigned long long)x->st.last_token);
    put_safe_len(stdout, x->name, x->len);
    putchar('\n');
}

static int usage_list(void)
{
    fprintf(stderr, "usage: rlock list [--json] [--all] [--layout L] "
                    "[--max-locks N] [--max-keys N] [PATTERN] (see rlock "
                    "list --help)\n");
    return EXIT_USAGE;
}

int cmd_list(struct cli *cli, int argc, char **argv)
{
    const char *pattern = NULL;
    rlock_client *c;
    finder f;
    found **all;
    size_t n, k, shown = 0;
    char keys[96];
    long max_locks = LIST_MAX_LOCKS, max_keys = LIST_MAX_KEYS;
    int i, json = 0, free_too = 0, opts_end = 0, code = 0, rc = 0;
    int layouts = FIND_ALL_LAYOUTS;
    int64_t steps;

    for (i = 1; i < argc; i++) {
        const char *v;
        long *num = NULL, lo = 1, hi = 0;
        int at = i, r = 0;
        if (!opts_end && strcmp(argv[i], "--") == 0) {
            opts_end = 1;
            continue;
        }
        if (!opts_end && strcmp(argv[i], "--json") == 0) {
            json = 1;
            continue;
        }
        if (!opts_end && strcmp(argv[i], "--all") == 0) {
            free_too = 1;
            continue;
        }
        if (!opts_end &&
            (strcmp(argv[i], "-v") == 0 || strcmp(argv[i], "--verbose") == 0)) {
            cli->verbose = 1;
            continue;
        }
        if (!opts_end && (r = cli_opt(argc, argv, &at, "rlock list", NULL,
                                      "--layout", &v)) != 0) {
            if (r < 0 || parse_layouts("rlock list", v, &layouts) != 0)
                return EXIT_USAGE;
        } else if (!opts_end && (r = cli_opt(argc, argv, &at, "rlock list",
                                             NULL, "--max-locks", &v)) != 0) {
            num = &max_locks, hi = 10000000;
        } else if (!opts_end && (r = cli_opt(argc, argv, &at, "rlock list",
                                             NULL, "--max-keys", &v)) != 0) {
            num = &max_keys, lo = 1000, hi = 1000000000000L;
        } else if (!opts_end && argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr,
                    "rlock list: unknown option %s (see rlock list "
                    "--help)\n",
                    argv[i]);
            return EXIT_USAGE;
        } else if (pattern) {
            return usage_list();
        } else {
            pattern = argv[i];
            continue;
        }
        if (r < 0)
            return EXIT_USAGE;
        if (num && parse_number(v, lo, hi, num) != 0) {
            fprintf(stderr, "rlock list: %s takes a number from %ld to %ld\n",
                    cli_last_opt, lo, hi);
            return EXIT_USAGE;
        }
        i = at - 1;
    }
    if (pattern && (!*pattern || glob_check(pattern) != 0)) {
        char said[256];
        fprintf(stderr,
                "rlock list: bad pattern '%s' (empty, an unclosed '[' "
                "or a '\\' at the end)\n",
                safe_text(pattern, said, sizeof said));
        return EXIT_USAGE;
    }
    if (!(c = cli_open(cli, &code)))
        return code;
    if (finder_init(&f, cli, c, pattern, layouts, free_too,
                    (size_t)max_locks) != 0) {
        rlock_client_close(c);
        return EXIT_SOFTWARE;
    }
    if (max_keys < f.count)
        f.count = (int)max_keys;
    /* The walk in parts: it ends, reaches --max-keys, or finds more locks
     * than --max-locks lets it read (what comes after is left out). */
    steps = max_keys / f.count;
    while (steps > 0 && f.dropped == 0) {
        int part = steps < LIST_STEPS_AT_ONCE ? (int)steps : LIST_STEPS_AT_ONCE;
        if ((rc = finder_walk(&f, part)) <= 0)
            break;
        steps -= part;
    }
    if (rc < 0) {
        cli_error(cli, c, walk_failure(rc), rc);
        code = exit_code_for(rc);
        goto out;
    }
    if (!(all = finder_all(&f, &n))) {
        fprintf(stderr, "rlock list: out of memory\n");
        code = EXIT_SOFTWARE;
        goto out;
    }
    for (k = 0; k < n; k++) {
        int err = finder_look(&f, all[k], mono_ms());
        if (err != RLOCK_OK) {
            char what[4 * RLOCK_NAME_MAX + 16];
            safe_cols(all[k]->name, all[k]->len, 4 * RLOCK_NAME_MAX, what,
                      sizeof what);
            cli_error(cli, c, what, err);
            code = exit_code_for(err);
            free(all);
            goto out;
        }
        if (found_busy(all[k]) || (free_too && all[k]->state == LOOK_OK))
            all[shown++] = all[k];
    }
    qsort(all, shown, sizeof *all, by_name);
    if (!json && shown > 0)
        printf("%-9s %-24s %10s %5s %7s %17s  %s\n", "LAYOUT", "HOLDER",
               "LEASE", "COUNT", "WAITERS", "LAST TOKEN", "NAME");
    for (k = 0; k < shown; k++) {
        if (json)
            print_json(all[k]);
        else
            print_line(all[k]);
    }
    free(all);
    /* What was left out, and what could not be read. */
    if (f.dropped > 0)
        fprintf(stderr,
                "rlock list: more than %ld locks to read (--max-locks): the "
                "walk stopped after %s; the locks beyond were left out\n",
                max_locks, keys_walked(&f, keys, sizeof keys));
    else if (rc > 0)
        fprintf(stderr,
                "rlock list: the walk stopped after %s (--max-keys %ld); the "
                "locks beyond were left out\n",
                keys_walked(&f, keys, sizeof keys), max_keys);
    if (f.failed > 0)
        fprintf(stderr, "rlock list: %lld lock%s could not be read: %s\n",
                (long long)f.failed, f.failed == 1 ? "" : "s", f.failure);
out:
    finder_free(&f);
    rlock_client_close(c);
    return code;
}
