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

char *rlock__tagged_key(const char *prefix, const char *name, size_t len,
                        const char *suffix, size_t *out_len)
{
    size_t plen = strlen(prefix), slen = strlen(suffix);
    size_t n = 1 + plen + 1 + len + 1 + slen;
    char *k = malloc(n + 1), *p;

    if (!k)
        return NULL;
    p = k;
    *p++ = '{';
    memcpy(p, prefix, plen);
    p += plen;
    *p++ = ':';
    memcpy(p, name, len);
    p += len;
    *p++ = '}';
    memcpy(p, suffix, slen);
    p[slen] = '\0';
    *out_len = n;
    return k;
}

void rlock__extend_req(const rlock__script *s, const rlock_mutex *m,
                       const char *owner, size_t len, uint64_t id,
                       int64_t lease_ms, rlock__req *r)
{
    rlock__req_init(r, s);
    rlock__req_key(r, m->keys[0], m->key_lens[0]);
    rlock__req_arg(r, owner, len);
    rlock__req_argu(r, id);
    rlock__req_argi(r, lease_ms);
}
