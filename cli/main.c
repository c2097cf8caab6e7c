/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * rlock(1): global options and the choice of subcommand.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static int is_help(const char *a)
{
    return strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0;
}

/* Overwrites the password of a URL given on the command line, in place:
 * /proc/PID/cmdline, and so ps(1), shows argv's own memory. The caller
 * has a copy. */
static void scrub_password(char *arg)
{
    size_t from, to, start = 0;

    if (url_password_span(arg, &from, &to))
        memset(arg + from, '*', to - from);
    while (url_query_secret(arg, start, &from, &to)) {
        memset(arg + from, '*', to - from);
        start = to;
    }
}

/* The first line of a password file, without its line end. */
static int read_password_file(const char *path, char *out, size_t len)
{
    FILE *f = fopen(path, "re");
    size_t n;

    if (!f) {
        fprintf(stderr, "rlock: --password-file %s: %s\n", path,
                strerror(errno));
        return -1;
    }
    if (!fgets(out, (int)len, f)) {
        out[0] = '\0';
    }
    fclose(f);
    n = strcspn(out, "\r\n");
    if (out[n] == '\0' && n == len - 1) {
        fprintf(stderr, "rlock: --password-file %s: the password is longer "
                        "than %zu bytes\n",
                path, len - 2);
        return -1;
    }
    out[n] = '\0';
    if (n == 0) {
        fprintf(stderr, "rlock: --password-file %s: no password on its first "
                        "line\n",
                path);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    static char password[1026], url_copy[CLI_URL_MAX];
    struct cli cli;
    const char *cmd, *url = NULL;
    int i = 1, code;

    memset(&cli, 0, sizeof cli);
    cli.prog = "rlock";
    while (i < argc && argv[i][0] == '-') {
        static const struct {
            const char *name;
            size_t off;
        } value_opts[] = {{"--cacert", offsetof(struct cli, tls_ca)},
                          {"--cert", offsetof(struct cli, tls_cert)},
                          {"--key", offsetof(struct cli, tls_key)},
                          {"--sni", offsetof(struct cli, tls_sni)},
                          {"--user", offsetof(struct cli, user)},
                          {"--password-file", 0},
                          {"--redis", 0}};
        size_t k;
        int r = 0, at = i;
        const char *v = NULL;

        for (k = 0; r == 0 && k < sizeof value_opts / sizeof value_opts[0];
             k++)
            r = cli_opt(argc, argv, &i, "rlock", NULL, value_opts[k].name,
                        &v);
        if (r < 0)
            return EXIT_USAGE;
        if (r > 0) {
            const char *name = value_opts[k - 1].name;
            if (strcmp(name, "--redis") == 0) {
                /* Kept as a copy; the argument itself loses its password. */
                if (strlen(v) >= sizeof url_copy) {
                    fprintf(stderr, "rlock: --redis: the URL is longer than "
                                    "%zu bytes\n",
                            sizeof url_copy - 1);
                    return EXIT_USAGE;
                }
                strcpy(url_copy, v);
                url = url_copy;
                scrub_password(argv[at + (argv[at][7] == '=' ? 0 : 1)]);
            } else if (strcmp(name, "--password-file") == 0) {
                if (read_password_file(v, password, sizeof password) != 0)
                    return EXIT_USAGE;
                cli.password = password;
            } else {
                *(const char **)((char *)&cli + value_opts[k - 1].off) = v;
                if (strcmp(name, "--user") != 0)
                    cli.tls = 1; /* a TLS file or name means TLS */
            }
            continue;
        }
        if (strcmp(argv[i], "--tls") == 0) {
            cli.tls = 1;
            i++;
        } else if (strcmp(argv[i], "--insecure") == 0) {
            cli.tls = 1;
            cli.tls_insecure = 1;
            i++;
        } else if (strcmp(argv[i], "--version") == 0) {
            printf("rlock %s (library %s)\n", RLOCK_VERSION_STRING,
                   rlock_version());
            return 0;
        } else if (is_help(argv[i])) {
            usage_main(stdout);
            return 0;
        } else {
            fprintf(stderr, "rlock: unknown option %s (see rlock --help)\n",
                    argv[i]);
            return EXIT_USAGE;
        }
    }
    if (!cli.password) {
        /* As redis-cli's REDISCLI_AUTH: kept out of argv and of COMMAND's
         * environment (rlock run leaves it out). */
        const char *pw = getenv("RLOCK_PASSWORD");
        if (pw && *pw)
            cli.password = pw;
    }
    if (cli.user && !cli.password) {
        fprintf(stderr, "rlock: --user needs a password (--password-file or "
                        "$RLOCK_PASSWORD)\n");
        return EXIT_USAGE;
    }
    if (i >= argc) {
        fprintf(stderr, "rlock: no command given (see rlock --help)\n");
        return EXIT_USAGE;
    }
    cmd = argv[i];
    if (i + 1 < argc && is_help(argv[i + 1])) {
        if (usage_for(cmd, stdout) == 0)
            return 0;
    }
    if (cli_pick_url(&cli, url) != 0)
        return EXIT_USAGE;
    argc -= i;
    argv += i;
    if (strcmp(cmd, "run") == 0)
        code = cmd_run(&cli, argc, argv);
    else if (strcmp(cmd, "status") == 0)
        code = cmd_status(&cli, argc, argv);
    else if (strcmp(cmd, "unlock") == 0)
        code = cmd_unlock(&cli, argc, argv);
    else if (strcmp(cmd, "ping") == 0)
        code = cmd_ping(&cli, argc, argv);
    else if (strcmp(cmd, "list") == 0)
        code = cmd_list(&cli, argc, argv);
    else if (strcmp(cmd, "top") == 0)
        code = cmd_top(&cli, argc, argv);
    else if (strcmp(cmd, "demo") == 0)
        code = cmd_demo(&cli, argc, argv);
    else {
        fprintf(stderr, "rlock: unknown command '%s' (see rlock --help)\n",
                cmd);
        code = EXIT_USAGE;
    }
    return code;
}
