/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Finding the locks on the servers, for rlock list and rlock top: a walk
 * over the keys (rlock_scan), the keys that name a lock of some layout
 * recognised by their shape, and each lock looked at with
 * rlock_mutex_status, which refuses a key that is not a lock. Every part
 * of the work is bounded by the caller: the walk's steps, the looks, the
 * locks kept.
 */
#ifndef RLOCK_CLI_FIND_H
#define RLOCK_CLI_FIND_H

#include <stddef.h>
#include <stdint.h>

#include "cli.h"

/* What the last look at a lock said. */
enum look_state {
    LOOK_NONE,    /* not looked at yet */
    LOOK_OK,      /* st is the lock's */
    LOOK_NOTLOCK, /* the key is not a lock of the layout (someone's data) */
    LOOK_ERROR    /* Redis refused to read it (e.g. CROSSSLOT) */
};

/* A lock the walk found: a name and a layout. */
typedef struct found {
    struct found *next; /* in its hash chain */
    int layout;         /* RLOCK_LAYOUT_* */
    int64_t seq;        /* in the order found */
    int state;          /* enum look_state, of the last look */
    int looks;
    rlock_status st;   /* of the last look, when LOOK_OK */
    int64_t looked_ms; /* when (monotonic) */
    /* Acquisitions per second: the fencing counter's growth between the
     * last two looks (-1 until there are two). */
    double rate;
    /* Since when the hold st names has been seen (0: free); held_before:
     * it was held at the first look, so held_since is a lower bound. */
    int64_t held_since_ms;
    int held_before;
    int shown;      /* on the last screen (rlock top looks at it first) */
    int64_t round;  /* rlock top's refresh that looked at it last */
    int64_t walked; /* the last walk (generation) that found a key of it */
    size_t len;
    char name[]; /* len bytes, then a NUL */
} found;

/* The layouts a finder looks for: bits 1 << RLOCK_LAYOUT_*. */
#define FIND_ALL_LAYOUTS                                                       \
    ((1 << RLOCK_LAYOUT_NATIVE) | (1 << RLOCK_LAYOUT_TOKEN) |                  \
     (1 << RLOCK_LAYOUT_REDISSON))

typedef struct finder finder;

struct finder {
    rlock_client *c;
    struct cli *cli;
    const char *pattern; /* a glob on names (Redis's), NULL: every name */
    int layouts;         /* FIND_ALL_LAYOUTS or one of them */
    /* Free locks too: a lock known by its fencing counter alone is worth
     * a look (rlock top, rlock list --all). Without it a native lock is
     * looked at only when its key exists; the peers' layouts are found by
     * their counters (or Redisson's hash) and looked at all the same. */
    int free_too;
    int redlock; /* a Redlock client: the native layout only */
    int count;   /* SCAN's COUNT */
    /* The two walks: every key (names), and the hashes (Redisson's lock
     * keys, whose names say nothing). NULL: not started, or ended. */
    rlock_scan *walk[2];
    int ended[2], wanted[2];
    int64_t generation; /* walks begun (rlock top begins again) */
    /* The commands the walks sent, over every generation. */
    int64_t commands;
    /* Of the present walks: about how many keys SCAN looked at, how many
     * servers there are and their keys (-1: unknown). */
    int64_t gen_keys, servers, dbsize;
    /* The locks found: a hash table of at most max. */
    found **buckets;
    size_t nbuckets, n, max;
    int64_t dropped; /* found but not kept (the table was full) by the
                        present walks */
    int64_t next_seq;
    int64_t skipped;   /* looks that found no lock (other shapes) */
    int64_t failed;    /* looks Redis refused (LOOK_ERROR) */
    char failure[300]; /* the first such refusal, for the message */
};

/* Checks a PATTERN as Redis's glob reads it, refusing what would mean
 * something else once '*' is put around it (an unclosed '[', a '\' at the
 * end): 0, or -1. */
int glob_check(const char *pat);
/* Whether name (len bytes) matches pat, as Redis's MATCH would. */
int glob_match(const char *pat, const char *name, size_t len);

/* Sets f up (nothing sent); 0, or -1 if out of memory (said). */
int finder_init(finder *f, struct cli *cli, rlock_client *c,
                const char *pattern, int layouts, int free_too, size_t max);
void finder_free(finder *f);

/* Up to steps SCAN steps of the present walks, starting them if none
 * runs. Returns 1 while they go on, 0 once both ended, or an rlock error
 * (the client's message says which). */
int finder_walk(finder *f, int steps);
/* What to call a failed walk in a message: names SCAN when the ACL
 * refused it. */
const char *walk_failure(int rc);
/* Forgets the present walks: the next finder_walk begins again. */
void finder_restart(finder *f);
/* After a walk that went over every key: forgets the locks it found no
 * key of (gone since an earlier walk). */
void finder_prune(finder *f);

/* Looks at x (rlock_mutex_status), now_ms the monotonic time: RLOCK_OK
 * (x's state says what it found: a lock, another shape, a refusal), or an
 * error that concerns the server rather than x (connection, ACL). */
int finder_look(finder *f, found *x, int64_t now_ms);

/* Every lock kept, in a new array (free it), in the order found. */
found **finder_all(const finder *f, size_t *n);

/* Whether a looked-at lock is held or waited for. */
int found_busy(const found *x);

/* "about N of the M keys" the present walks looked at. */
const char *keys_walked(const finder *f, char *buf, size_t len);

/* Shared by rlock list and rlock top (list.c). */
/* --layout's value as a set of layouts; 0, or -1 (said). */
int parse_layouts(const char *cmd, const char *v, int *layouts);
/* The holder: "pid@host" for rlock's holds, else its own string cut to
 * cols columns; "-" when free. */
const char *holder_text(const found *x, char *buf, size_t len, size_t cols);
/* The lease left: "29.812s", "none" (no expiry), "-" when free. */
const char *lease_text(const found *x, char *buf, size_t len);

/* The layout's name. */
const char *layout_name(int layout);

#endif
