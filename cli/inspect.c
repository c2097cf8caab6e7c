/*
 * rlock status, rlock unlock --force, rlock ping: looking at locks and the
 * server, and the operator's release.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static void json_string(FILE *out, const char *s)
{
    fputc('"', out);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(out, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(out, "\\u%04x", ch);
        else
            fputc(ch, out);
    }
    fputc('"', out);
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
        printf(",\"count\":%lld,\"lease_ms\":%lld,\"token\":%llu,"
               "\"last_token\":%llu,\"waiters\":%lld}\n",
               (long long)st->count, (long long)st->lease_ms,
               (unsigned long long)(st->held ? st->token : st->last_token),
               (unsigned long long)st->last_token, (long long)st->waiters);
        return;
    }
    if (st->held && st->token == 0) /* a peer's hold, or Redisson's layout */
        printf("%s: held by %s, count %lld, lease %.3fs left, no token (last "
               "token %llu), %lld waiting\n",
               name, st->holder, (long long)st->count,
               (double)st->lease_ms / 1000.0,
               (unsigned long long)st->last_token, (long long)st->waiters);
    else if (st->held)
        printf("%s: held by %s, count %lld, lease %.3fs left, token %llu, "
               "%lld waiting\n",
               name, st->holder, (long long)st->count,
               (double)st->lease_ms / 1000.0, (unsigned long long)st->token,
               (long long)st->waiters);
    else
        printf("%s: free, last token %llu, %lld waiting\n", name,
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
        if (!opts_end && strcmp(argv[i], "--") == 0) {
            opts_end = 1;
        } else if (!opts_end && strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (!opts_end && strcmp(argv[i], "--layout") == 0) {
            if (i + 1 >= argc || parse_layout(argv[++i], &mo.layout) != 0) {
                fprintf(stderr, "rlock status: --layout takes native, "
                                "redisson or token\n");
                return EXIT_USAGE;
            }
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
    int i, err, code = 0, force = 0;

    rlock_mutex_opts_init(&mo);
    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--force") == 0 && !name) {
            force = 1;
        } else if (strcmp(argv[i], "--layout") == 0 && !name) {
            if (i + 1 >= argc || parse_layout(argv[++i], &mo.layout) != 0) {
                fprintf(stderr, "rlock unlock: --layout takes native, "
                                "redisson or token\n");
                return EXIT_USAGE;
            }
        } else if (!name && (argv[i][0] != '-' || !argv[i][1])) {
            name = argv[i];
        } else {
            force = 0;
            break;
        }
    }
    if (!force || !name) {
        fprintf(stderr, "usage: rlock unlock --force [--layout L] NAME (an "
                        "operator's release; holders release their own "
                        "locks)\n");
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
        err = rlock_mutex_force_unlock(m, &st);
    if (err != RLOCK_OK) {
        cli_error(cli, c, name, err);
        code = exit_code_for(err);
    } else if (st.held) {
        printf("%s: removed the hold of %s (count %lld, token %llu); the "
               "first waiter, if any, has it now\n",
               name, st.holder, (long long)st.count,
               (unsigned long long)st.token);
    } else {
        printf("%s: was not held; nothing removed\n", name);
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

    (void)argv;
    if (argc != 1) {
        fprintf(stderr, "usage: rlock [--redis URL] ping\n");
        return EXIT_USAGE;
    }
    if (!(c = cli_open(cli, &code)))
        return code;
    err = rlock_client_ping(c, &info);
    if (err != RLOCK_OK) {
        cli_error(cli, c, "ping", err);
        code = exit_code_for(err);
    } else {
        printf("PONG from %s: redis %s, round trip %.3f ms\n", cli->url_shown,
               info.version[0] ? info.version : "(unknown version)",
               (double)info.rtt_us / 1000.0);
    }
    rlock_client_close(c);
    return code;
}
