/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A client's background state: made with its driver, freed, and reset in
 * a forked child.
 */
#include <stdlib.h>

#include "bg/bg.h"

int rlock__bg_new(rlock_client *c, const rlock__driver *driver)
{
    c->bg = calloc(1, sizeof *c->bg);
    if (!c->bg)
        return RLOCK_ENOMEM;
    c->bg->driver = driver;
    c->bg->pipe[0] = c->bg->pipe[1] = -1;
    c->bg->ring[0] = c->bg->ring[1] = -1;
    return RLOCK_OK;
}

void rlock__bg_free(rlock_client *c)
{
    if (!c->bg)
        return;
    c->bg->driver->stop(c);
    rlock__notify_free(c);
    rlock__sub_free(c);
    rlock__cleanup_free(c);
    free(c->bg);
    c->bg = NULL;
}

void rlock__bg_after_fork(rlock_client *c)
{
    struct rlock__bg *bg = c->bg;

    bg->driver->after_fork(c);
    /* Subscriptions name the parent's client id; mutexes notice by their
     * fork generation and subscribe again. The parent's socket is not
     * closed here: it is not ours (its copy closes with the process). */
    bg->sub_conn = NULL;
    rlock__sub_free(c);
    bg->sub_up = 0;
    bg->sub_broken = 0;
    /* The parent's undos are the parent's to send. */
    bg->cleanups = NULL;
    rlock__notify_after_fork(c);
}
