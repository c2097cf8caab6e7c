/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The scenario every event-loop adapter is tested with (scenario.c), and
 * the loop it drives: one file per adapter (their loops' headers cannot
 * meet in one file: libevent and libev both define EV_READ).
 */
#ifndef RLOCK_TEST_ADAPTERS_SCENARIO_H
#define RLOCK_TEST_ADAPTERS_SCENARIO_H

#include <rlock/async.h>

typedef struct rt_loop_kind {
    const char *name;
    void *(*make)(void);
    int (*attach)(rlock_async *a, void *loop);
    void (*turn)(void *loop); /* one turn, 50 ms at most */
    /* After the client closed: the loop holds nothing of rlock's (its
     * own tick aside). Then frees the loop. */
    void (*check_and_free)(void *loop);
} rt_loop_kind;

void rt_adapter_scenario(const rt_loop_kind *k);

#endif
