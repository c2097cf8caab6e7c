/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A main() for a fuzz target built without libFuzzer (gcc, or clang without
 * RLOCK_FUZZ): runs LLVMFuzzerTestOneInput once on each file named on the
 * command line and on each file of each directory named, in name order.
 * CTest uses it to replay fuzz/corpus/<target> and fuzz/regressions/<target>
 * in the ordinary sanitizer builds.
 *
 * Names starting with '.' or "README" are skipped (a directory's notes and
 * placeholders are not inputs). Exits 0 if every input ran; 1 if a path
 * cannot be read or nothing at all was run. An input that breaks an
 * invariant aborts the process, as it would under libFuzzer.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static int skipped(const char *name)
{
    return name[0] == '.' || strncmp(name, "README", 6) == 0;
}

/* Reads the whole file into a buffer of exactly its size, so that
 * AddressSanitizer sees any read past the input's end. */
static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    unsigned char *buf = NULL;
    size_t size = 0, cap = 0, n;
    unsigned char chunk[4096];

    if (!f) {
        fprintf(stderr, "%s: %s\n", path, strerror(errno));
        return -1;
    }
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (size + n > cap) {
            unsigned char *bigger;
            cap = (size + n) * 2;
            bigger = realloc(buf, cap);
            if (!bigger) {
                free(buf);
                fclose(f);
                fprintf(stderr, "%s: out of memory\n", path);
                return -1;
            }
            buf = bigger;
        }
        memcpy(buf + size, chunk, n);
        size += n;
    }
    if (ferror(f)) {
        fprintf(stderr, "%s: read error\n", path);
        free(buf);
        fclose(f);
        return -1;
    }
    fclose(f);
    {
        unsigned char *exact = malloc(size ? size : 1);
        if (!exact) {
            free(buf);
            return -1;
        }
        if (size)
            memcpy(exact, buf, size);
        free(buf);
        LLVMFuzzerTestOneInput(exact, size);
        free(exact);
    }
    return 0;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Runs every regular file of dir, in name order; returns how many, or -1. */
static int run_dir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char **names = NULL;
    size_t n = 0, cap = 0, i;
    int count = 0;

    if (!d) {
        fprintf(stderr, "%s: %s\n", dir, strerror(errno));
        return -1;
    }
    while ((e = readdir(d)) != NULL) {
        if (skipped(e->d_name))
            continue;
        if (n == cap) {
            char **bigger;
            cap = cap ? cap * 2 : 64;
            bigger = realloc(names, cap * sizeof *names);
            if (!bigger)
                break;
            names = bigger;
        }
        if (!(names[n] = strdup(e->d_name)))
            break;
        n++;
    }
    closedir(d);
    if (n)
        qsort(names, n, sizeof *names, cmp_names);
    for (i = 0; i < n; i++) {
        size_t len = strlen(dir) + 1 + strlen(names[i]) + 1;
        char *path = malloc(len);
        struct stat st;

        if (path) {
            snprintf(path, len, "%s/%s", dir, names[i]);
            if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
                if (run_file(path) != 0)
                    count = -1;
                else if (count >= 0)
                    count++;
            }
        }
        free(path);
        free(names[i]);
    }
    free(names);
    return count;
}

int main(int argc, char **argv)
{
    int i, total = 0, failed = 0;

    for (i = 1; i < argc; i++) {
        struct stat st;
        int n;

        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "%s: %s\n", argv[i], strerror(errno));
            failed = 1;
            continue;
        }
        if (S_ISDIR(st.st_mode))
            n = run_dir(argv[i]);
        else
            n = run_file(argv[i]) == 0 ? 1 : -1;
        if (n < 0)
            failed = 1;
        else
            total += n;
    }
    printf("%s: %d inputs replayed\n", argc > 0 ? argv[0] : "fuzz", total);
    if (total == 0) {
        fprintf(stderr, "no input found\n");
        return 1;
    }
    return failed;
}
