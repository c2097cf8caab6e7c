/*
 * rlock(1): global options and the choice of subcommand.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

static int is_help(const char *a)
{
    return strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0;
}

/* The global options that take a value: "--name VALUE" or
 * "--name=VALUE". Returns 1 and sets *value (i advanced) if argv[*i] is
 * one of them, 0 if not, -1 on a missing or empty value (said). */
static int value_opt(int argc, char **argv, int *i, const char *name,
                     const char **value)
{
    size_t n = strlen(name);

    if (strncmp(argv[*i], name, n) != 0 ||
        (argv[*i][n] != '\0' && argv[*i][n] != '='))
        return 0;
    if (argv[*i][n] == '=') {
        *value = argv[*i] + n + 1;
        (*i)++;
    } else if (*i + 1 < argc) {
        *value = argv[*i + 1];
        *i += 2;
    } else {
        *value = NULL;
    }
    if (!*value || !**value) {
        fprintf(stderr, "rlock: %s needs a value\n", name);
        return -1;
    }
    return 1;
}

int main(int argc, char **argv)
{
    struct cli cli;
    const char *url = NULL, *cmd;
    int i = 1;

    memset(&cli, 0, sizeof cli);
    cli.prog = "rlock";
    while (i < argc && argv[i][0] == '-') {
        static const struct {
            const char *name;
            size_t off;
        } tls_opts[] = {{"--cacert", offsetof(struct cli, tls_ca)},
                        {"--cert", offsetof(struct cli, tls_cert)},
                        {"--key", offsetof(struct cli, tls_key)},
                        {"--sni", offsetof(struct cli, tls_sni)}};
        size_t k;
        int r = 0;

        for (k = 0; r == 0 && k < sizeof tls_opts / sizeof tls_opts[0]; k++)
            r = value_opt(argc, argv, &i, tls_opts[k].name,
                          (const char **)((char *)&cli + tls_opts[k].off));
        if (r < 0)
            return EXIT_USAGE;
        if (r > 0) {
            cli.tls = 1; /* a TLS file or name means TLS */
            continue;
        }
        if (strcmp(argv[i], "--tls") == 0) {
            cli.tls = 1;
            i++;
        } else if (strcmp(argv[i], "--insecure") == 0) {
            cli.tls = 1;
            cli.tls_insecure = 1;
            i++;
        } else if (strcmp(argv[i], "--redis") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "rlock: --redis needs a URL\n");
                return EXIT_USAGE;
            }
            url = argv[i + 1];
            i += 2;
            if (!*url) {
                fprintf(stderr, "rlock: --redis needs a URL, got an empty "
                                "one\n");
                return EXIT_USAGE;
            }
        } else if (strncmp(argv[i], "--redis=", 8) == 0) {
            url = argv[i] + 8;
            i++;
            if (!*url) {
                fprintf(stderr, "rlock: --redis needs a URL, got an empty "
                                "one\n");
                return EXIT_USAGE;
            }
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
    if (i >= argc) {
        fprintf(stderr, "rlock: no command given (see rlock --help)\n");
        return EXIT_USAGE;
    }
    cmd = argv[i];
    if (i + 1 < argc && is_help(argv[i + 1])) {
        if (usage_for(cmd, stdout) == 0)
            return 0;
    }
    cli_pick_url(&cli, url);
    argc -= i;
    argv += i;
    if (strcmp(cmd, "run") == 0)
        return cmd_run(&cli, argc, argv);
    if (strcmp(cmd, "status") == 0)
        return cmd_status(&cli, argc, argv);
    if (strcmp(cmd, "unlock") == 0)
        return cmd_unlock(&cli, argc, argv);
    if (strcmp(cmd, "ping") == 0)
        return cmd_ping(&cli, argc, argv);
    if (strcmp(cmd, "demo") == 0)
        return cmd_demo(&cli, argc, argv);
    fprintf(stderr, "rlock: unknown command '%s' (see rlock --help)\n", cmd);
    return EXIT_USAGE;
}
