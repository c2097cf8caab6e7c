/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * rlock-bench's machine-readable output: one JSON document,
 *   {"rlock_version": "...", "results": [{"scenario": "...", ...}, ...]}
 * The JSON goes to its own stream (--json FILE, or stdout with the text
 * on stderr), written as the scenarios report.
 */
#include <math.h>

#include "bench.h"

static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

void report_open(bench *b, const char *scenario)
{
    if (!b->json)
        return;
    fputs(b->json_items++ ? ",\n  {" : "\n  {", b->json);
    fputs("\"scenario\": ", b->json);
    json_string(b->json, scenario);
}

void report_close(bench *b)
{
    if (b->json)
        fputc('}', b->json);
}

void report_num(bench *b, const char *key, double v)
{
    if (!b->json)
        return;
    fputs(", ", b->json);
    json_string(b->json, key);
    if (isfinite(v) && v == floor(v) && fabs(v) < 1e15)
        fprintf(b->json, ": %.0f", v);
    else if (isfinite(v))
        fprintf(b->json, ": %.6g", v);
    else
        fputs(": null", b->json);
}

void report_str(bench *b, const char *key, const char *v)
{
    if (!b->json)
        return;
    fputs(", ", b->json);
    json_string(b->json, key);
    fputs(": ", b->json);
    json_string(b->json, v);
}
