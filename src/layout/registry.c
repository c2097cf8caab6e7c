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

size_t rlock__tagged_key(const char *prefix, const char *name, size_t len,
                         const char *suffix, char *out)
{
    size_t plen = strlen(prefix), slen = strlen(suffix);
    char *p = out;

    *p++ = '{';
    memcpy(p, prefix, plen);
    p += plen;
    *p++ = ':';
    memcpy(p, name, len);
    p += len;
    *p++ = '}';
    memcpy(p, suffix, slen);
    return (size_t)(p - out) + slen;
}

void rlock__req_lock_key(rlock__req *r, const rlock_mutex *m, int i)
{
    char k[RLOCK__KEY_MAX];

    rlock__req_keycopy(r, k, m->layout->key(m, i, k));
}

void rlock__req_lock_arg(rlock__req *r, const rlock_mutex *m, int i)
{
    char k[RLOCK__KEY_MAX];

    rlock__req_argcopy(r, k, m->layout->key(m, i, k));
}

char *rlock__lock_key_dup(const rlock_mutex *m, int i, const char *tail,
                          size_t len, size_t *out_len)
{
    char k[RLOCK__KEY_MAX], *d;
    size_t n = m->layout->key(m, i, k);

    if ((d = malloc(n + len + 1)) != NULL) {
        memcpy(d, k, n);
        if (len)
            memcpy(d + n, tail, len);
        d[n + len] = '\0';
        *out_len = n + len;
    }
    return d;
}

int rlock__lock_key_is(const rlock_mutex *m, int i, const char *tail,
                       size_t tail_len, const char *p, size_t len)
{
    char k[RLOCK__KEY_MAX];
    size_t n = m->layout->key(m, i, k);

    return len == n + tail_len && memcmp(p, k, n) == 0 &&
           (!tail_len || memcmp(p + n, tail, tail_len) == 0);
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
