/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * rlock top: a live view of the busiest locks, drawn again in place every
 * --interval. Each refresh does a bounded part of the work: a part of the
 * walk over the keys (--max-keys; the walk goes on where it stopped, and
 * begins again once it has been over every key) and a bounded number of
 * looks at locks (--max-locks): those on the screen first, then those
 * held or waited for at their last look, then those never looked at, then
 * those looked at longest ago. The footer says what the refresh cost the
 * servers in commands and what it left out.
 *
 * Acquisitions per second are the growth of each lock's fencing counter
 * between two looks: every layout keeps one (rlock's native acquisitions
 * that drew no token, the uncontended ones of callers that never asked
 * for one, are not counted). How long a lock has been held is measured
 * from the look that first saw its hold; ">" marks a hold that was there
 * already at the first look.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "find.h"
#include "term.h"

#define TOP_MAX_LOCKS 200
#define TOP_MAX_KEYS 50000L
#define TOP_INTERVAL_MS 2000
/* Locks kept between refreshes at most (memory: about 500 bytes each). */
#define TOP_TRACKED 100000
#define TOP_TRACKED_S "100000"
/* Looks between checks for a key or a signal. */
#define TOP_LOOKS_AT_ONCE 16

enum sort { SORT_RATE, SORT_WAITERS, SORT_HELD, SORT_LEASE, SORT_NAME, NSORTS };
static const char *const sort_names[NSORTS] = {"acq/s", "waiters", "held",
                                               "lease", "name"};

typedef struct top {
    struct cli *cli;
    rlock_client *c;
    finder f;
    int64_t interval_ms;
    long max_locks, max_keys;
    int once, live, ansi, sort;
    int rows, cols;
    /* The last refresh. */
    int64_t cmds_walk, cmds_look, looks, refreshes;
    size_t tracked, busy, left_out;
    time_t at;
    char error[400]; /* a failure of the last refresh, shown in the footer */
    char err_what[96], err_detail[512]; /* its parts, for stderr */
    found **view;                       /* the rows, sorted */
    size_t nview;
    int quit; /* a signal (TERM_QUIT) or 'q' (-1) */
} top;

/* ------------------------------------------------------------------------ */
/* One refresh                                                              */
/* ------------------------------------------------------------------------ */

/* The order of the looks: on the screen, busy, never looked at, then the
 * longest ago. */
static int look_rank(const found *x)
{
    if (x->shown)
        return 0;
    if (found_busy(x))
        return 1;
    return x->state == LOOK_NONE ? 2 : 3;
}

static int by_look_order(const void *a, const void *b)
{
    const found *x = *(found *const *)a, *y = *(found *const *)b;
    int rx = look_rank(x), ry = look_rank(y);

    if (rx != ry)
        return rx - ry;
    if (x->looked_ms != y->looked_ms)
        return x->looked_ms < y->looked_ms ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* A failure that no later refresh can mend: the ACL, the credentials. */
static int fatal(int rc)
{
    return rc == RLOCK_EPERM || rc == RLOCK_EAUTH;
}

/* A failure, for the footer and, if it ends the view, for stderr. */
static void note_error(top *t, const char *what, int rc)
{
    char detail[300];

    snprintf(t->err_what, sizeof t->err_what, "%s", what);
    snprintf(t->err_detail, sizeof t->err_detail, "%s",
             rlock_client_errmsg(t->c));
    snprintf(t->error, sizeof t->error, "%s: %s: %s", what, rlock_strerror(rc),
             safe_text(t->err_detail, detail, sizeof detail));
}

/* A key or a signal that came during the work: 1 to stop it. */
static int interrupted(top *t)
{
    int key, ev;

    if (!t->live)
        return 0;
    while ((ev = term_wait(0, &key)) != TERM_TIMEOUT) {
        if (ev == TERM_QUIT) {
            t->quit = key;
            return 1;
        }
        if (ev == TERM_KEY && (key == 'q' || key == 'Q')) {
            t->quit = -1;
            return 1;
        }
        if (ev == TERM_KEY && key == 's')
            t->sort = (t->sort + 1) % NSORTS;
    }
    return 0;
}

/* Looks at up to --max-locks locks, in look order (with again, the ones
 * the refresh looked at already: --once's second look). Returns RLOCK_OK,
 * or a failure of the server. */
static int look_round(top *t, found **all, size_t n, int again)
{
    size_t k;
    int64_t looks = 0;
    int rc;

    if (!again)
        qsort(all, n, sizeof *all, by_look_order);
    for (k = 0; k < n && looks < t->max_locks; k++) {
        if (again && all[k]->round != t->refreshes)
            continue;
        if (looks % TOP_LOOKS_AT_ONCE == 0 && interrupted(t))
            return RLOCK_OK;
        rc = finder_look(&t->f, all[k], mono_ms());
        all[k]->round = t->refreshes;
        looks++;
        t->looks++;
        if (rc != RLOCK_OK) {
            char name[64];
            note_error(
                t, safe_cols(all[k]->name, all[k]->len, 40, name, sizeof name),
                rc);
            return rc;
        }
    }
    return RLOCK_OK;
}

/* Figures of the locks, and the rows of the view. */
static int by_view(const void *a, const void *b);
/* What by_view sorts by, and when (one time for every comparison). */
static top *sorting;
static int64_t sorting_now;

static void sort_view(top *t)
{
    sorting = t;
    sorting_now = mono_ms();
    qsort(t->view, t->nview, sizeof *t->view, by_view);
}

static void make_view(top *t, found **all, size_t n)
{
    size_t k;

    t->busy = 0;
    t->nview = 0;
    for (k = 0; k < n; k++) {
        found *x = all[k];
        x->shown = 0;
        if (x->state != LOOK_OK)
            continue;
        t->busy += found_busy(x);
        /* The busy, and the free that were taken since the look before. */
        if (found_busy(x) || x->rate > 0)
            t->view[t->nview++] = x;
    }
    sort_view(t);
}

/* One refresh: a part of the walk, then the looks. Returns RLOCK_OK or
 * the failure the footer shows (fatal() ones end the view). */
static int refresh(top *t)
{
    int64_t before = t->f.commands;
    found **all;
    size_t n, k;
    int rc;

    t->error[0] = '\0';
    t->looks = 0;
    t->at = time(NULL);
    t->refreshes++;
    /* The walk, where it stopped; once over, it begins again, to find the
     * locks made since, and the locks it found no key of are gone. */
    if (t->f.ended[0] && t->f.ended[1]) {
        t->nview = 0; /* the view may point at them */
        finder_prune(&t->f);
        finder_restart(&t->f);
    }
    rc = finder_walk(&t->f, (int)(t->max_keys / t->f.count));
    t->cmds_walk = t->f.commands - before;
    if (rc < 0) {
        note_error(t, walk_failure(rc), rc);
        finder_restart(&t->f);
        if (fatal(rc))
            return rc;
    }
    free(t->view);
    t->view = NULL;
    t->nview = 0;
    if (!(all = finder_all(&t->f, &n)) ||
        !(t->view = malloc((n ? n : 1) * sizeof *t->view))) {
        free(all);
        snprintf(t->error, sizeof t->error, "out of memory");
        return RLOCK_ENOMEM;
    }
    if (rc >= 0)
        rc = look_round(t, all, n, 0);
    if (rc == RLOCK_OK && t->once && !t->quit) {
        /* --once: the same locks again an interval later, for rates. */
        usleep((useconds_t)(t->interval_ms * 1000));
        rc = look_round(t, all, n, 1);
    }
    t->tracked = n;
    for (k = 0, t->left_out = 0; k < n; k++)
        t->left_out += all[k]->round != t->refreshes;
    make_view(t, all, n);
    free(all);
    /* A look is one script call on each node (Redlock: every node). */
    t->cmds_look =
        t->looks * (t->f.redlock && t->f.servers > 0 ? t->f.servers : 1);
    return rc < 0 ? rc : RLOCK_OK;
}

/* ------------------------------------------------------------------------ */
/* Drawing                                                                  */
/* ------------------------------------------------------------------------ */

static int64_t held_for(const found *x, int64_t now)
{
    return x->st.held && x->held_since_ms ? now - x->held_since_ms : -1;
}

static int by_view(const void *a, const void *b)
{
    const found *x = *(found *const *)a, *y = *(found *const *)b;
    int64_t now = sorting_now;
    double d = 0;

    switch (sorting->sort) {
    case SORT_RATE:
        d = x->rate - y->rate;
        if (d == 0)
            d = (double)(x->st.waiters - y->st.waiters);
        if (d == 0)
            d = (double)(held_for(x, now) - held_for(y, now));
        d = -d;
        break;
    case SORT_WAITERS:
        d = (double)(y->st.waiters - x->st.waiters);
        if (d == 0)
            d = y->rate - x->rate;
        break;
    case SORT_HELD:
        d = (double)(held_for(y, now) - held_for(x, now));
        break;
    case SORT_LEASE: {
        /* The soonest to end first; no expiry, then free, last. */
        int64_t lx = !x->st.held          ? INT64_MAX
                     : x->st.lease_ms < 0 ? INT64_MAX - 1
                                          : x->st.lease_ms;
        int64_t ly = !y->st.held          ? INT64_MAX
                     : y->st.lease_ms < 0 ? INT64_MAX - 1
                                          : y->st.lease_ms;
        d = lx < ly ? -1 : lx > ly;
        break;
    }
    default:
        break;
    }
    if (d != 0)
        return d < 0 ? -1 : 1;
    {
        size_t m = x->len < y->len ? x->len : y->len;
        int c = memcmp(x->name, y->name, m);
        if (c)
            return c;
        return x->len < y->len ? -1 : x->len > y->len;
    }
}

static void duration(int64_t ms, char *buf, size_t len)
{
    int64_t s = ms / 1000;

    if (s < 60)
        snprintf(buf, len, "%llds", (long long)s);
    else if (s < 3600)
        snprintf(buf, len, "%lldm%02llds", (long long)(s / 60),
                 (long long)(s % 60));
    else
        snprintf(buf, len, "%lldh%02lldm", (long long)(s / 3600),
                 (long long)(s % 3600 / 60));
}

/* The frame being drawn: its lines, each cut to the screen's width. */
typedef struct frame {
    char *buf;
    size_t len, cap;
    int lines;
} frame;

static void add(frame *fr, const char *s, size_t n)
{
    if (fr->len + n + 1 > fr->cap) {
        size_t cap = (fr->len + n + 1) * 2;
        char *b = realloc(fr->buf, cap);
        if (!b)
            return;
        fr->buf = b;
        fr->cap = cap;
    }
    memcpy(fr->buf + fr->len, s, n);
    fr->len += n;
    fr->buf[fr->len] = '\0';
}

/* A line of text (UTF-8, no controls) cut to cols columns; in reverse
 * video with inverse and ANSI. */
static void line(top *t, frame *fr, const char *text, int inverse)
{
    const unsigned char *s = (const unsigned char *)text;
    size_t cols = 0, i = 0;

    /* A window shorter than the view shows its first lines: one more
     * would scroll the screen. */
    if (t->live && fr->lines >= t->rows)
        return;

    while (s[i] && cols < (size_t)t->cols) {
        size_t n = utf8_seq(s + i);
        i += n ? n : 1;
        cols++;
    }
    if (inverse && t->ansi)
        add(fr, "\033[7m", 4);
    add(fr, text, i);
    if (inverse && t->ansi) {
        /* The bar across the whole width. */
        for (; cols < (size_t)t->cols; cols++)
            add(fr, " ", 1);
        add(fr, "\033[m", 3);
    }
    if (t->live)
        add(fr, "\033[K", 3);
    add(fr, "\n", 1);
    fr->lines++;
}

static void row(top *t, frame *fr, const found *x, int name_cols, int64_t now)
{
    char name[4 * RLOCK_NAME_MAX + 8], holder[4 * 160 + 8], lease[32], held[32],
        rate[32], out[sizeof name + sizeof holder + 128];
    int64_t h = held_for(x, now);
    size_t w;

    safe_cols(x->name, x->len, (size_t)name_cols, name, sizeof name);
    if (h < 0)
        snprintf(held, sizeof held, "-");
    else {
        char d[24];
        duration(h, d, sizeof d);
        snprintf(held, sizeof held, "%s%s", x->held_before ? ">" : "", d);
    }
    if (x->rate < 0)
        snprintf(rate, sizeof rate, "-");
    else if (x->rate < 100)
        snprintf(rate, sizeof rate, "%.1f", x->rate);
    else
        snprintf(rate, sizeof rate, "%.0f", x->rate);
    /* The name is padded by its columns, not its bytes. */
    w = safe_width(x->name, x->len);
    snprintf(out, sizeof out, "%s%*s %-8s %-20.20s %7s %9s %5lld %7s", name,
             (int)(w < (size_t)name_cols ? (size_t)name_cols - w : 0), "",
             layout_name(x->layout), holder_text(x, holder, sizeof holder, 20),
             held, lease_text(x, lease, sizeof lease), (long long)x->st.waiters,
             rate);
    line(t, fr, out, 0);
}

static void draw(top *t)
{
    frame fr = {NULL, 0, 0, 0};
    char text[1024], when[16], keys[96], iv[32];
    int name_cols, body, k;
    int64_t now = mono_ms();

    if (t->live)
        term_size(&t->rows, &t->cols);
    if (t->live)
        add(&fr, "\033[H", 3);
    strftime(when, sizeof when, "%H:%M:%S", localtime(&t->at));
    duration(t->interval_ms, iv, sizeof iv);
    if (t->interval_ms < 1000)
        snprintf(iv, sizeof iv, "%lldms", (long long)t->interval_ms);
    /* The URL last: it may be long, and the line is cut to the width. */
    snprintf(text, sizeof text,
             "rlock top - sort: %s%s - every %s - %s - %.200s",
             sort_names[t->sort], t->live ? " (s: next, q: quit)" : "", iv,
             when, t->cli->url_shown);
    line(t, &fr, text, 0);
    /* "busy": held or waited for. The walk's figures are those of the
     * present one (a new one begins after the last has ended). */
    snprintf(text, sizeof text, "locks: %zu busy of %zu found - walk %lld: %s",
             t->busy, t->tracked, (long long)t->f.generation,
             t->f.ended[0] && t->f.ended[1]
                 ? "every key"
                 : keys_walked(&t->f, keys, sizeof keys));
    line(t, &fr, text, 0);
    name_cols = t->cols - 64;
    if (name_cols < 12)
        name_cols = 12;
    snprintf(text, sizeof text, "%-*s %-8s %-20s %7s %9s %5s %7s", name_cols,
             "NAME", "LAYOUT", "HOLDER", "HELD", "LEASE", "WAIT", "ACQ/S");
    line(t, &fr, text, 1);
    /* The rows that fit above the two lines of the footer. */
    body = t->rows - 3 - 2;
    if (body < 1)
        body = 1;
    for (k = 0; k < body && (size_t)k < t->nview; k++) {
        t->view[k]->shown = 1;
        row(t, &fr, t->view[k], name_cols, now);
    }
    if (t->nview == 0)
        line(t, &fr, "(no lock held, waited for or taken since the last look)",
             0);
    while (t->live && fr.lines < t->rows - 2)
        line(t, &fr, "", 0);
    snprintf(text, sizeof text,
             "this refresh: %lld commands (%lld walking the keys, %lld "
             "reading locks)",
             (long long)(t->cmds_walk + t->cmds_look), (long long)t->cmds_walk,
             (long long)t->cmds_look);
    line(t, &fr, text, 0);
    if (t->error[0]) {
        snprintf(text, sizeof text, "error: %s", t->error);
    } else {
        char below[48] = "";
        if (t->nview > (size_t)body)
            snprintf(below, sizeof below, "; %zu rows below",
                     t->nview - (size_t)body);
        snprintf(text, sizeof text,
                 "left out: %zu of %zu locks not read (--max-locks %ld)%s%s",
                 t->left_out, t->tracked, t->max_locks,
                 t->f.dropped ? "; more not kept (over " TOP_TRACKED_S ")" : "",
                 below);
    }
    line(t, &fr, text, 0);
    if (t->live) {
        /* No new line after the last: the screen would scroll. */
        if (fr.len > 0 && fr.buf[fr.len - 1] == '\n')
            fr.len--;
        add(&fr, "\033[J", 3);
    }
    if (fr.buf) {
        fwrite(fr.buf, 1, fr.len, stdout);
        if (!t->live && !t->once)
            putchar('\n');
        fflush(stdout);
    }
    free(fr.buf);
}

/* ------------------------------------------------------------------------ */
/* The command                                                              */
/* ------------------------------------------------------------------------ */

static int usage_top(void)
{
    fprintf(stderr, "usage: rlock top [--once] [--interval DUR] [--layout L] "
                    "[--max-locks N] [--max-keys N] [PATTERN] (see rlock top "
                    "--help)\n");
    return EXIT_USAGE;
}

static int parse_top(top *t, int argc, char **argv, const char **pattern,
                     int *layouts)
{
    int i, opts_end = 0;

    for (i = 1; i < argc; i++) {
        const char *v;
        long *num = NULL, lo = 1, hi = 0;
        int at = i, r;
        if (!opts_end && strcmp(argv[i], "--") == 0) {
            opts_end = 1;
            continue;
        }
        if (!opts_end && strcmp(argv[i], "--once") == 0) {
            t->once = 1;
            continue;
        }
        if (!opts_end &&
            (strcmp(argv[i], "-v") == 0 || strcmp(argv[i], "--verbose") == 0)) {
            t->cli->verbose = 1;
            continue;
        }
        if (!opts_end && (r = cli_opt(argc, argv, &at, "rlock top", NULL,
                                      "--layout", &v)) != 0) {
            if (r < 0 || parse_layouts("rlock top", v, layouts) != 0)
                return -1;
        } else if (!opts_end && (r = cli_opt(argc, argv, &at, "rlock top", NULL,
                                             "--interval", &v)) != 0) {
            if (r < 0)
                return -1;
            if (parse_duration(v, &t->interval_ms) != 0 ||
                t->interval_ms < 100 || t->interval_ms > 3600000) {
                fprintf(stderr, "rlock top: --interval takes a duration from "
                                "100ms to 1h\n");
                return -1;
            }
        } else if (!opts_end && (r = cli_opt(argc, argv, &at, "rlock top", NULL,
                                             "--max-locks", &v)) != 0) {
            num = &t->max_locks, hi = 100000;
        } else if (!opts_end && (r = cli_opt(argc, argv, &at, "rlock top", NULL,
                                             "--max-keys", &v)) != 0) {
            num = &t->max_keys, lo = 1000, hi = 100000000;
        } else if (!opts_end && argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr,
                    "rlock top: unknown option %s (see rlock top "
                    "--help)\n",
                    argv[i]);
            return -1;
        } else if (*pattern) {
            usage_top();
            return -1;
        } else {
            *pattern = argv[i];
            continue;
        }
        if (r < 0)
            return -1;
        if (num && parse_number(v, lo, hi, num) != 0) {
            fprintf(stderr, "rlock top: %s takes a number from %ld to %ld\n",
                    cli_last_opt, lo, hi);
            return -1;
        }
        i = at - 1;
    }
    if (*pattern && (!**pattern || glob_check(*pattern) != 0)) {
        char shown[256];
        fprintf(stderr,
                "rlock top: bad pattern '%s' (empty, an unclosed '[' "
                "or a '\\' at the end)\n",
                safe_text(*pattern, shown, sizeof shown));
        return -1;
    }
    return 0;
}

/* The live view's loop: a refresh every interval, drawn again at once on
 * a key that sorts or a new size. */
static int run_live(top *t)
{
    int64_t next = 0;
    int key, ev, rc;

    for (;;) {
        if (mono_ms() >= next) {
            next = mono_ms() + t->interval_ms;
            rc = refresh(t);
            if (t->quit)
                break;
            /* Others are shown in the footer, and tried again. */
            if (fatal(rc))
                return rc;
            draw(t);
        }
        ev = term_wait(next, &key);
        if (ev == TERM_QUIT) {
            t->quit = key;
            break;
        }
        if (ev == TERM_KEY && (key == 'q' || key == 'Q')) {
            t->quit = -1;
            break;
        }
        if (ev == TERM_KEY && key == 's') {
            t->sort = (t->sort + 1) % NSORTS;
            sort_view(t);
            draw(t);
        } else if (ev == TERM_REDRAW) {
            draw(t);
        }
    }
    return RLOCK_OK;
}

int cmd_top(struct cli *cli, int argc, char **argv)
{
    top t;
    const char *pattern = NULL;
    int layouts = FIND_ALL_LAYOUTS, code = 0, rc;

    memset(&t, 0, sizeof t);
    t.cli = cli;
    t.interval_ms = TOP_INTERVAL_MS;
    t.max_locks = TOP_MAX_LOCKS;
    t.max_keys = TOP_MAX_KEYS;
    if (parse_top(&t, argc, argv, &pattern, &layouts) != 0)
        return EXIT_USAGE;
    /* The live view needs a terminal to draw on; without one (a pipe, a
     * file) each refresh is printed after the last, without escape
     * codes. */
    t.live = !t.once && isatty(STDOUT_FILENO);
    t.ansi = isatty(STDOUT_FILENO);
    /* The events would be written over the view. */
    if (cli->verbose && t.live && isatty(STDERR_FILENO)) {
        fprintf(stderr, "rlock top: -v writes the events on stderr, which is "
                        "the terminal the view is drawn on: add --once, or "
                        "send stderr elsewhere (2>FILE)\n");
        return EXIT_USAGE;
    }
    term_size(&t.rows, &t.cols);
    if (!(t.c = cli_open(cli, &code)))
        return code;
    if (finder_init(&t.f, cli, t.c, pattern, layouts, 1, TOP_TRACKED) != 0) {
        rlock_client_close(t.c);
        return EXIT_SOFTWARE;
    }
    if (t.max_keys < t.f.count)
        t.f.count = (int)t.max_keys;
    if (t.live && term_open() != 0) {
        code = EXIT_OSERR;
    } else if (t.live) {
        rc = run_live(&t);
        term_restore();
        if (fatal(rc)) {
            cli_error_detail(cli, t.err_what, rc, t.err_detail);
            code = exit_code_for(rc);
        }
    } else {
        for (;;) {
            rc = refresh(&t);
            /* --once says any failure and exits with its code; printing
             * refresh after refresh goes on after those it can. */
            if (fatal(rc) || (t.once && rc != RLOCK_OK)) {
                cli_error_detail(cli, t.err_what, rc, t.err_detail);
                code = exit_code_for(rc);
                break;
            }
            draw(&t);
            if (t.once)
                break;
            usleep((useconds_t)(t.interval_ms * 1000));
        }
    }
    free(t.view);
    finder_free(&t.f);
    rlock_client_close(t.c);
    if (t.quit > 0)
        term_die(t.quit);
    return code;
}
