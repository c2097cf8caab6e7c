/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * rlock status, rlock unlock --force, rlock ping: looking at locks and the
 * server, and the operator's release.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"

/* " (pid P on host H)" when the holder's process is known. */
static void print_identity(const rlock_status *st)
{
    if (!st->holder_host[0] || st->holder_pid <= 0)
        return;
    printf(" (pid %lld on ", (long long)st->holder_pid);
    put_safe(stdout, st->holder_host);
    fputs(")", stdout);
}

static void print_status(const char *name, const rlock_status *st, int json)
{
    if (json) {
        printf("{\"name\":");
        json_string(stdout, name);
        printf(",\"held\":%s,\"holder\":", st->held ? "true" : "false");
        if (st->held)
            json_string(stdout, st->holder);
        else
            printf("null");
        printf(",\"host\":");
        if (st->holder_host[0])
            json_string(stdout, st->holder_host);
        else
            printf("null");
        if (st->holder_pid > 0)
            printf(",\"pid\":%lld", (long long)st->holder_pid);
        else
            printf(",\"pid\":null");
        printf(",\"count\":%lld,\"lease_ms\":", (long long)st->count);
        if (st->held && st->lease_ms < 0)
            printf("null"); /* a key without expiry */
        else
            printf("%lld", (long long)st->lease_ms);
        printf(",\"token\":%llu,\"last_token\":%llu,\"waiters\":%lld}\n",
               (unsigned long long)(st->held ? st->token : st->last_token),
               (unsigned long long)st->last_token, (long long)st->waiters);
        return;
    }
    put_safe(stdout, name);
    if (st->held) {
        fputs(": held by ", stdout);
        put_safe(stdout, st->holder);
        print_identity(st);
    }
    if (st->held) {
        printf(", count %lld, ", (long long)st->count);
        /* A key without expiry (the token layout): a redis-py Lock made
         * without a timeout, or an application's data under the name. */
        if (st->lease_ms < 0)
            printf("no expiry");
        else
            printf("lease %.3fs left", (double)st->lease_ms / 1000.0);
    }
    /* A peer's hold, Redisson's layout, or a hold that has not drawn its
     * token yet (taken uncontended, never asked for it). */
    if (st->held && st->token == 0)
        printf(", no token (last token %llu), %lld waiting\n",
               (unsigned long long)st->last_token, (long long)st->waiters);
    else if (st->held)
        printf(", token %llu, %lld waiting\n", (unsigned long long)st->token,
               (long long)st->waiters);
    else
        printf(": free, last token %llu, %lld waiting\n",
               (unsigned long long)st->last_token, (long long)st->waiters);
}

int cmd_status(struct cli *cli, int argc, char **argv)
{
    rlock_client *c;
    rlock_mutex_opts mo;
    int i, k, json = 0, code = 0, names = 0, opts_end = 0;

    rlock_mutex_opts_init(&mo);
    /* Options may come anywhere before "--"; names after it may start
     * with '-'. Names are moved to the front of argv[1..]. */
    for (i = 1; i < argc; i++) {
        const char *v;
        int at = i, r;
        if (!opts_end && strcmp(argv[i], "--") == 0) {
            opts_end = 1;
        } else if (!opts_end && strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (!opts_end && (strcmp(argv[i], "-v") == 0 ||
                                 strcmp(argv[i], "--verbose") == 0)) {
            cli->verbose = 1;
        } else if (!opts_end &&
                   (r = cli_opt(argc, argv, &at, "rlock status", NULL,
                                "--layout", &v)) != 0) {
            if (r < 0 || parse_layout(v, &mo.layout) != 0) {
                if (r > 0)
                    fprintf(stderr, "rlock status: --layout takes native, "
                                    "redisson or token\n");
                return EXIT_USAGE;
            }
            i = at - 1;
        } else if (!opts_end && argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "rlock status: unknown option %s (see rlock "
                            "status --help)\n",
                    argv[i]);
            return EXIT_USAGE;
        } else if (!*argv[i] || strlen(argv[i]) > RLOCK_NAME_MAX) {
            fprintf(stderr, "rlock status: bad lock name '%s'\n", argv[i]);
            return EXIT_USAGE;
        } else {
            argv[1 + names++] = argv[i];
        }
    }
    if (names == 0) {
        fprintf(stderr, "rlock status: name at least one lock\n");
        return EXIT_USAGE;
    }
    if (!(c = cli_open(cli, &code)))
        return code;
    for (k = 0; k < names; k++) {
        i = 1 + k;
        int err;
        rlock_status st;
        rlock_mutex *m = rlock_mutex_new(c, argv[i], &mo, &err);
        if (!m) {
            cli_error(cli, c, argv[i], err);
            code = exit_code_for(err);
            break;
        }
        err = rlock_mutex_status(m, &st);
        rlock_mutex_free(m);
        if (err != RLOCK_OK) {
            cli_error(cli, c, argv[i], err);
            code = exit_code_for(err);
            break;
        }
        print_status(argv[i], &st, json);
    }
    rlock_client_close(c);
    return code;
}

int cmd_unlock(struct cli *cli, int argc, char **argv)
{
    rlock_client *c;
    rlock_mutex *m;
    rlock_mutex_opts mo;
    rlock_status st;
    const char *name = NULL;
    unsigned flags = 0;
    int i, err, code = 0, force = 0;

    rlock_mutex_opts_init(&mo);
    for (i = 1; i < argc; i++) {
        const char *v;
        int at = i, r;
        if (strcmp(argv[i], "--force") == 0 && !name) {
            force = 1;
        } else if (strcmp(argv[i], "--no-expiry") == 0 && !name) {
            flags |= RLOCK_FORCE_NO_EXPIRY;
        } else if ((strcmp(argv[i], "-v") == 0 ||
                    strcmp(argv[i], "--verbose") == 0) &&
                   !name) {
            cli->verbose = 1;
        } else if (!name && (r = cli_opt(argc, argv, &at, "rlock unlock",
                                         NULL, "--layout", &v)) != 0) {
            if (r < 0 || parse_layout(v, &mo.layout) != 0) {
                if (r > 0)
                    fprintf(stderr, "rlock unlock: --layout takes native, "
                                    "redisson or token\n");
                return EXIT_USAGE;
            }
            i = at - 1;
        } else if (!name && (argv[i][0] != '-' || !argv[i][1])) {
            name = argv[i];
        } else {
            force = 0;
            break;
        }
    }
    if (!force || !name) {
        fprintf(stderr, "usage: rlock unlock --force [--no-expiry] "
                        "[--layout L] NAME (an operator's release; holders "
                        "release their own locks)\n");
        return EXIT_USAGE;
    }
    if (!*name || strlen(name) > RLOCK_NAME_MAX) {
        fprintf(stderr, "rlock unlock: bad lock name '%s'\n", name);
        return EXIT_USAGE;
    }
    if (!(c = cli_open(cli, &code)))
        return code;
    m = rlock_mutex_new(c, name, &mo, &err);
    if (m)
        err = rlock_mutex_force_unlock_ex(m, flags, &st);
    if (err == RLOCK_ENOTIFY) {
        /* Removed, and handed to the first waiter, who was not told (an
         * ACL without PUBLISH): it takes the lock by its own timer. */
        cli_error(cli, c, name, err);
        err = RLOCK_OK;
    }
    if (err != RLOCK_OK) {
        cli_error(cli, c, name, err);
        code = exit_code_for(err);
    } else if (st.held) {
        put_safe(stdout, name);
        fputs(": removed the hold of ", stdout);
        put_safe(stdout, st.holder);
        fputs(" (", stdout);
        if (st.holder_host[0] && st.holder_pid > 0) {
            printf("pid %lld on ", (long long)st.holder_pid);
            put_safe(stdout, st.holder_host);
            fputs("; ", stdout);
        }
        printf("count %lld, token %llu); the first waiter, if any, has it "
               "now\n",
               (long long)st.count, (unsigned long long)st.token);
    } else {
        put_safe(stdout, name);
        fputs(": was not held; nothing removed\n", stdout);
        code = 1;
    }
    rlock_mutex_free(m);
    rlock_client_close(c);
    return code;
}

int cmd_ping(struct cli *cli, int argc, char **argv)
{
    rlock_server_info info;
    rlock_client *c;
    int err, code = 0;

    if (argc == 2 &&
        (strcmp(argv[1], "-v") == 0 || strcmp(argv[1], "--verbose") == 0))
        cli->verbose = 1;
    else if (argc != 1) {
        fprintf(stderr, "usage: rlock [--redis URL] ping [-v]\n");
        return EXIT_USAGE;
    }
    if (!(c = cli_open(cli, &code)))
        return code;
    err = rlock_client_ping(c, &info);
    if (err != RLOCK_OK) {
        cli_error(cli, c, "ping", err);
        code = exit_code_for(err);
    } else {
        printf("PONG from %s: %s %s, round trip %.3f ms\n", cli->url_shown,
               info.server[0] ? info.server : "redis",
               info.version[0] ? info.version : "(unknown version)",
               (double)info.rtt_us / 1000.0);
    }
    rlock_client_close(c);
    return code;
}
