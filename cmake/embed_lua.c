/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Build step: embeds the Lua scripts of src/layout/lua in the library.
 *
 *   embed_lua OUT.c DIR NAME...
 *
 * For each NAME, DIR/NAME.lua is read, its "--! include FILE" lines
 * replaced by FILE (from DIR, recursively), its comment-only and blank
 * lines dropped (they would only lengthen the body sent once after a
 * NOSCRIPT), and written to OUT.c as the rlock__script rlock__lua_NAME
 * with the SHA-1 that EVALSHA knows it by, so that the library never has
 * to load a script to learn its digest. The message name is NAME with its
 * first word dropped for the native layout ("native_acquire" is
 * "acquire") and '_' as a space ("token_acquire" is "token acquire").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

typedef struct buf {
    char *p;
    size_t len, cap;
} buf;

static void die(const char *what, const char *name)
{
    fprintf(stderr, "embed_lua: %s: %s\n", what, name);
    exit(1);
}

static void put(buf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        b->cap = (b->len + n + 1) * 2;
        b->p = realloc(b->p, b->cap);
        if (!b->p)
            die("out of memory", "");
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void expand(buf *out, const char *dir, const char *file, int depth)
{
    char path[4096], line[4096];
    FILE *f;

    if (depth > 8)
        die("includes nested too deep at", file);
    snprintf(path, sizeof path, "%s/%s", dir, file);
    if (!(f = fopen(path, "r")))
        die("cannot open", path);
    while (fgets(line, sizeof line, f)) {
        const char *s = line;
        size_t n = strlen(line);

        if (n == sizeof line - 1 && line[n - 1] != '\n')
            die("line too long in", path);
        while (*s == ' ' || *s == '\t')
            s++;
        if (strncmp(s, "--! include ", 12) == 0) {
            char inc[256];
            size_t k = strcspn(s + 12, " \t\r\n");
            if (k == 0 || k >= sizeof inc)
                die("bad include in", path);
            memcpy(inc, s + 12, k);
            inc[k] = '\0';
            expand(out, dir, inc, depth + 1);
            continue;
        }
        if (strncmp(s, "--", 2) == 0 || *s == '\n' || *s == '\0')
            continue;
        put(out, line, n);
        if (line[n - 1] != '\n')
            put(out, "\n", 1);
    }
    fclose(f);
}

static void sha1_hex(const char *p, size_t n, char out[41])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0, i;

    if (!EVP_Digest(p, n, md, &len, EVP_sha1(), NULL) || len != 20)
        die("SHA-1 failed", "");
    for (i = 0; i < 20; i++)
        sprintf(out + 2 * i, "%02x", md[i]);
}

/* The body as a char array of numbers, NUL-terminated: a string literal
 * that long is more than ISO C requires compilers to take (4095). */
static void c_array(FILE *o, const char *s, size_t n)
{
    size_t i;

    fputs("{", o);
    for (i = 0; i < n; i++)
        fprintf(o, "%s%u,", i % 16 == 0 ? "\n    " : " ",
                (unsigned)(unsigned char)s[i]);
    fputs("\n    0}", o);
}

int main(int argc, char **argv)
{
    FILE *o;
    int i;

    if (argc < 4) {
        fprintf(stderr, "usage: embed_lua OUT.c DIR NAME...\n");
        return 64;
    }
    if (!(o = fopen(argv[1], "w")))
        die("cannot write", argv[1]);
    fprintf(o, "/* Generated from src/layout/lua by cmake/embed_lua.c at "
               "build time: do not edit. */\n#include "
               "\"layout/scripts.h\"\n\n");
    for (i = 3; i < argc; i++) {
        const char *name = argv[i], *shown = name;
        char file[256], sha[41], label[256];
        buf b = {0};
        size_t k;

        snprintf(file, sizeof file, "%s.lua", name);
        expand(&b, argv[2], file, 0);
        if (!b.p)
            die("empty script", name);
        sha1_hex(b.p, b.len, sha);
        if (strncmp(name, "native_", 7) == 0)
            shown = name + 7;
        snprintf(label, sizeof label, "%s", shown);
        for (k = 0; label[k]; k++)
            if (label[k] == '_')
                label[k] = ' ';
        fprintf(o, "static const char body_%s[] = ", name);
        c_array(o, b.p, b.len);
        fprintf(o,
                ";\nconst rlock__script rlock__lua_%s = {\"%s\", body_%s, "
                "%zu, \"%s\", NULL, 0};\n\n",
                name, label, name, b.len, sha);
        free(b.p);
    }
    if (fclose(o) != 0)
        die("cannot write", argv[1]);
    return 0;
}
