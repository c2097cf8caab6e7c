/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * rlock-check: the mutual-exclusion checker as a program, for any Redis
 * deployment rlock can reach.
 *
 *   rlock-check --redis URL [-n WORKERS] [-m HOLDS] [--hold-us US]
 *               [--lease MS] [--wait MS] [--deadline MS] [--name NAME]
 *               [--layout native|redisson|token] [--unsafe] [--no-fence]
 *               [--reverse-tokens]
 *
 * Prints the checker's one-line summary; exits 0 when the history has no
 * violation, 1 when it has, 64 on bad arguments.
 */
#include <stdlib.h>
#include <string.h>

#include "checker.h"

static int usage(void)
{
    fprintf(stderr,
            "usage: rlock-check --redis URL [-n WORKERS] [-m HOLDS] "
            "[--hold-us US] [--lease MS] [--wait MS] [--deadline MS] "
            "[--name NAME] [--layout native|redisson|token] [--unsafe] [--no-fence] "
            "[--reverse-tokens]\n");
    return 64;
}

static int number(const char *s, long long lo, long long hi, long long *out)
{
    char *end;
    long long v;

    if (!s || !*s)
        return -1;
    v = strtoll(s, &end, 10);
    if (*end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

int main(int argc, char **argv)
{
    rt_check_opts o;
    rt_check_result r;
    int i, rc;

    rt_check_opts_init(&o);
    o.url = getenv("RLOCK_URL");
    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long long n;

        if (strcmp(a, "--unsafe") == 0) {
            o.unsafe = 1;
            continue;
        }
        if (strcmp(a, "--no-fence") == 0) {
            o.no_fence = 1;
            continue;
        }
        if (strcmp(a, "--reverse-tokens") == 0) {
            o.reverse_tokens = 1;
            continue;
        }
        if (!v)
            return usage();
        i++;
        if (strcmp(a, "--redis") == 0)
            o.url = v;
        else if (strcmp(a, "--name") == 0)
            o.name = v;
        else if (strcmp(a, "--layout") == 0 && strcmp(v, "native") == 0)
            o.layout = RLOCK_LAYOUT_NATIVE;
        else if (strcmp(a, "--layout") == 0 && strcmp(v, "token") == 0)
            o.layout = RLOCK_LAYOUT_TOKEN;
        else if (strcmp(a, "--layout") == 0 && strcmp(v, "redisson") == 0)
            o.layout = RLOCK_LAYOUT_REDISSON;
        else if (strcmp(a, "-n") == 0 && number(v, 1, 64, &n) == 0)
            o.workers = (int)n;
        else if (strcmp(a, "-m") == 0 && number(v, 1, 1000000, &n) == 0)
            o.iterations = (int)n;
        else if (strcmp(a, "--hold-us") == 0 && number(v, 0, 60000000, &n) == 0)
            o.hold_us = n;
        else if (strcmp(a, "--lease") == 0 && number(v, 0, 86400000, &n) == 0)
            o.lease_ms = n;
        else if (strcmp(a, "--wait") == 0 && number(v, -1, 86400000, &n) == 0)
            o.wait_ms = n;
        else if (strcmp(a, "--deadline") == 0 &&
                 number(v, 1, 86400000, &n) == 0)
            o.deadline_ms = n;
        else
            return usage();
    }
    if (!o.url)
        return usage();
    rc = rt_check_run(&o, &r);
    rt_check_print(stdout, &r);
    return rc;
}
