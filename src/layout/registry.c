/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The layouts, by their RLOCK_LAYOUT_* number, and the key naming they
 * share. A new layout is one file that fills an rlock__layout and one
 * line here.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "layout/layout.h"

static const rlock__layout *const layouts[] = {
    [RLOCK_LAYOUT_NATIVE] = &rlock__layout_native,
    [RLOCK_LAYOUT_TOKEN] = &rlock__layout_token,
    [RLOCK_LAYOUT_REDISSON] = &rlock__layout_redisson,
};

const rlock__layout *rlock__layout_of(int id)
{
    if (id < 0 || (size_t)id >= sizeof layouts / sizeof layouts[0])
        return NULL;
    return layouts[id];
}

#define SCRIPTS_MAX 64

static const rlock__script *all_scripts[SCRIPTS_MAX];
static int nall;
static pthread_once_t all_once = PTHREAD_ONCE_INIT;

static void collect(void)
{
    size_t i;
    int k;

    for (i = 0; i < sizeof layouts / sizeof layouts[0]; i++)
        for (k = 0; layouts[i]->scripts[k] && nall < SCRIPTS_MAX; k++)
            all_scripts[nall++] = layouts[i]->scripts[k];
}

const rlock__script *const *rlock__layout_scripts(int *n)
{
    pthread_once(&all_once, collect);
    *n = nall;
    return all_scripts;
}

void rlock__key_init(rlock__key *k)
{
    k->count = 0;
    k->len = 0;
}

void rlock__key_add(rlock__key *k, const char *p, size_t n)
{
    k->p[k->count] = p;
    k->n[k->count++] = n;
    k->len += n;
}

void rlock__tagged_key(const char *prefix, const char *name, size_t len,
                       const char *suffix, rlock__key *k)
{
    rlock__key_init(k);
    rlock__key_add(k, "{", 1);
    rlock__key_add(k, prefix, strlen(prefix));
    rlock__key_add(k, ":", 1);
    rlock__key_add(k, name, len);
    rlock__key_add(k, "}", 1);
    rlock__key_add(k, suffix, strlen(suffix));
}

/* k's pieces end to end at out (k->len bytes). */
static void key_write(const rlock__key *k, char *out)
{
    int i;

    for (i = 0; i < k->count; i++) {
        memcpy(out, k->p[i], k->n[i]);
        out += k->n[i];
    }
}

/* Key i of m's lock written into the room that room gives in r. */
static void req_put(rlock__req *r, const rlock_mutex *m, int i,
                    char *(*room)(rlock__req *r, size_t len))
{
    rlock__key k;
    char *p;

    m->layout->key(m, i, &k);
    if ((p = room(r, k.len)) != NULL)
        key_write(&k, p);
}

void rlock__req_lock_key(rlock__req *r, const rlock_mutex *m, int i)
{
    req_put(r, m, i, rlock__req_keyroom);
}

void rlock__req_lock_arg(rlock__req *r, const rlock_mutex *m, int i)
{
    req_put(r, m, i, rlock__req_argroom);
}

char *rlock__lock_key_dup(const rlock_mutex *m, int i, const char *tail,
                          size_t len, size_t *out_len)
{
    rlock__key k;
    char *d;

    m->layout->key(m, i, &k);
    if ((d = malloc(k.len + len + 1)) != NULL) {
        key_write(&k, d);
        if (len)
            memcpy(d + k.len, tail, len);
        d[k.len + len] = '\0';
        *out_len = k.len + len;
    }
    return d;
}

int rlock__lock_key_is(const rlock_mutex *m, int i, const char *tail,
                       size_t tail_len, const char *p, size_t len)
{
    rlock__key k;
    int j;

    m->layout->key(m, i, &k);
    if (len != k.len + tail_len)
        return 0;
    for (j = 0; j < k.count; p += k.n[j++])
        if (memcmp(p, k.p[j], k.n[j]) != 0)
            return 0;
    return !tail_len || memcmp(p, tail, tail_len) == 0;
}

void rlock__extend_req(const rlock__script *s, const rlock_mutex *m,
                       const char *owner, size_t len, uint64_t id,
                       int64_t lease_ms, rlock__req *r)
{
    rlock__req_init(r, s);
    rlock__req_lock_key(r, m, 0);
    rlock__req_arg(r, owner, len);
    rlock__req_argu(r, id);
    rlock__req_argi(r, lease_ms);
}
