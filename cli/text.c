/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Text from Redis or the command line on its way to a terminal or to
 * JSON: UTF-8 checked, control characters and bytes that are not UTF-8
 * escaped, widths counted in characters.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"

/* Length of the valid UTF-8 sequence at s (1 to 4 bytes) within its rem
 * bytes, or 0: no overlong forms, no surrogates, nothing above U+10FFFF. */
size_t utf8_seq_len(const unsigned char *s, size_t rem)
{
    size_t n, k;
    unsigned cp;

    if (s[0] < 0x80)
        return 1;
    if (s[0] >= 0xc2 && s[0] <= 0xdf)
        n = 2, cp = s[0] & 0x1fu;
    else if (s[0] >= 0xe0 && s[0] <= 0xef)
        n = 3, cp = s[0] & 0x0fu;
    else if (s[0] >= 0xf0 && s[0] <= 0xf4)
        n = 4, cp = s[0] & 0x07u;
    else
        return 0;
    for (k = 1; k < n; k++) {
        if (k >= rem || (s[k] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[k] & 0x3fu);
    }
    if ((n == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
        (n == 4 && (cp < 0x10000 || cp > 0x10ffff)))
        return 0;
    return n;
}

/* A NUL-terminated string never has a sequence past its end: a NUL is no
 * continuation byte. */
size_t utf8_seq(const unsigned char *s)
{
    return utf8_seq_len(s, 4);
}

/* Text that came from Redis (or from the command line) on its way to a
 * terminal: control bytes (escape sequences among them, and NUL in a name
 * of any bytes) and bytes that are not UTF-8 are written as \xNN, a
 * backslash as \\; the rest as is. The escaped form of the character at
 * s (rem bytes left) goes to piece (NUL-terminated); returns how many
 * bytes of s it stands for. */
static size_t safe_piece(const unsigned char *s, size_t rem, char piece[8])
{
    size_t n = utf8_seq_len(s, rem);

    if (*s == '\\') {
        strcpy(piece, "\\\\");
        return 1;
    }
    if (n == 0 || *s < 0x20 || *s == 0x7f ||
        (n == 2 && s[0] == 0xc2 && s[1] < 0xa0)) {
        /* invalid, C0 (NUL too), DEL, or a C1 control (U+0080..U+009F) */
        snprintf(piece, 8, "\\x%02x", *s);
        return 1;
    }
    memcpy(piece, s, n);
    piece[n] = '\0';
    return n;
}

void put_safe_len(FILE *out, const char *str, size_t len)
{
    const unsigned char *s = (const unsigned char *)str,
                        *end = (const unsigned char *)str + len;
    char piece[8];

    while (s < end) {
        s += safe_piece(s, (size_t)(end - s), piece);
        fputs(piece, out);
    }
}

void put_safe(FILE *out, const char *str)
{
    put_safe_len(out, str, strlen(str));
}

size_t safe_width(const char *str, size_t len)
{
    const unsigned char *s = (const unsigned char *)str,
                        *end = (const unsigned char *)str + len;
    size_t cols = 0;
    char piece[8];

    while (s < end) {
        s += safe_piece(s, (size_t)(end - s), piece);
        /* An escape is as wide as it is long; a character is one column
         * (wide characters are counted as one: names are rarely CJK). */
        cols += piece[0] == '\\' ? strlen(piece) : 1;
    }
    return cols;
}

const char *safe_cols(const char *str, size_t len, size_t cols, char *buf,
                      size_t buflen)
{
    const unsigned char *s = (const unsigned char *)str,
                        *end = (const unsigned char *)str + len;
    size_t used = 0, room = cols, w;
    char piece[8];

    /* All of it, or what leaves room for "...", cut between characters. */
    if (safe_width(str, len) > cols)
        room = cols > 3 ? cols - 3 : 0;
    while (s < end) {
        size_t n = safe_piece(s, (size_t)(end - s), piece), k = strlen(piece);
        w = piece[0] == '\\' ? k : 1;
        if (w > room || used + k + 4 > buflen)
            break;
        memcpy(buf + used, piece, k);
        used += k;
        room -= w;
        s += n;
    }
    buf[used] = '\0';
    if (s < end && cols > 3 && used + 4 <= buflen)
        strcpy(buf + used, "...");
    return buf;
}

const char *safe_text(const char *str, char *buf, size_t len)
{
    const unsigned char *s, *end = (const unsigned char *)str + strlen(str);
    size_t total = 0, used = 0, room;
    char piece[8];

    for (s = (const unsigned char *)str; s < end;) {
        s += safe_piece(s, (size_t)(end - s), piece);
        total += strlen(piece);
    }
    /* All of it, or what leaves room for "...", cut between characters. */
    room = total < len ? len - 1 : len > 4 ? len - 4 : 0;
    for (s = (const unsigned char *)str; s < end;) {
        size_t n = safe_piece(s, (size_t)(end - s), piece), k = strlen(piece);
        if (used + k > room)
            break;
        memcpy(buf + used, piece, k);
        used += k;
        s += n;
    }
    buf[used] = '\0';
    if (total >= len && len > 4)
        strcpy(buf + used, "...");
    return buf;
}

void json_string_len(FILE *out, const char *str, size_t len)
{
    const unsigned char *s = (const unsigned char *)str,
                        *end = (const unsigned char *)str + len;

    /* Always valid UTF-8: controls (NUL too) as \u00NN; a byte that is not
     * part of valid UTF-8 as the six characters \\xNN (the decoded string
     * then shows it as the human output does). */
    fputc('"', out);
    while (s < end) {
        size_t n = utf8_seq_len(s, (size_t)(end - s));
        if (*s == '"' || *s == '\\') {
            fprintf(out, "\\%c", *s);
            s++;
        } else if (n == 0) {
            fprintf(out, "\\\\x%02x", *s);
            s++;
        } else if (*s < 0x20 || *s == 0x7f) {
            fprintf(out, "\\u%04x", *s);
            s++;
        } else {
            fwrite(s, 1, n, out);
            s += n;
        }
    }
    fputc('"', out);
}

void json_string(FILE *out, const char *str)
{
    json_string_len(out, str, strlen(str));
}
