/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The test runner. "rlock_tests NAME" runs one test in this process (CTest
 * runs every test this way, each in its own process); "rlock_tests" alone
 * runs them all, each in a child process, and prints a summary;
 * "rlock_tests --list" prints the names.
 */
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness/test.h"

/* The list of tests: list.h, or the internal tests' (RT_LIST). */
#ifndef RT_LIST
#define RT_LIST "list.h"
#endif

#define RT_TEST(name, timeout) void test_##name(void);
#include RT_LIST
#undef RT_TEST

static const struct {
    const char *name;
    void (*fn)(void);
} tests[] = {
#define RT_TEST(name, timeout) {#name, test_##name},
#include RT_LIST
#undef RT_TEST
};

#define NTESTS (sizeof tests / sizeof tests[0])

static int run_child(size_t i)
{
    pid_t pid = fork();

    if (pid == 0) {
        tests[i].fn();
        exit(0);
    }
    return rt_wait(pid);
}

int main(int argc, char **argv)
{
    size_t i, passed = 0, failed = 0;

    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 2 && strcmp(argv[1], "--list") == 0) {
        for (i = 0; i < NTESTS; i++)
            printf("%s\n", tests[i].name);
        return 0;
    }
    if (argc == 2) {
        for (i = 0; i < NTESTS; i++) {
            if (strcmp(argv[1], tests[i].name) == 0) {
                tests[i].fn();
                printf("ok %s\n", tests[i].name);
                return 0;
            }
        }
        fprintf(stderr, "no test named %s\n", argv[1]);
        return 2;
    }
    for (i = 0; i < NTESTS; i++) {
        int rc = run_child(i);
        printf("%s %s\n", rc == 0 ? "ok    " : "FAILED", tests[i].name);
        if (rc == 0)
            passed++;
        else
            failed++;
    }
    printf("%zu passed, %zu failed\n", passed, failed);
    return failed ? 1 : 0;
}
