/* SPDX-License-Identifier: BSD-3-Clause */
/* The libev adapter (rlock/adapters/libev.h) under the adapters'
 * scenario (scenario.c). */
#include <stdlib.h>

#include "adapters/scenario.h"
#include "harness/test.h"

#ifdef RLOCK_TEST_LIBEV
#include <rlock/adapters/libev.h>
#endif

#ifdef RLOCK_TEST_LIBEV
typedef struct lev_t {
    struct ev_loop *loop;
    ev_timer tick;
} lev_t;

static void tick_ev(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)w;
    (void)revents;
}

static void *libev_make(void)
{
    lev_t *l = calloc(1, sizeof *l);

    CHECK(l && (l->loop = ev_loop_new(0)) != NULL);
    ev_timer_init(&l->tick, tick_ev, 0.05, 0.05);
    ev_timer_start(l->loop, &l->tick);
    return l;
}

static int libev_attach(rlock_async *a, void *loop)
{
    return rlock_libev_attach(a, ((lev_t *)loop)->loop);
}

static void libev_turn(void *loop)
{
    ev_run(((lev_t *)loop)->loop, EVRUN_ONCE);
}

static void libev_check_and_free(void *loop)
{
    lev_t *l = loop;

    ev_timer_stop(l->loop, &l->tick);
    /* No watcher of the adapter is left active. */
    CHECK(!ev_run(l->loop, EVRUN_NOWAIT));
    ev_loop_destroy(l->loop);
    free(l);
}
#endif

TEST(async_through_the_libev_adapter)
{
#ifdef RLOCK_TEST_LIBEV
    static const rt_loop_kind k = {"libev", libev_make, libev_attach,
                                   libev_turn, libev_check_and_free};
    rt_adapter_scenario(&k);
#else
    rt_fail(__FILE__, __LINE__,
            "built without libev (Debian: libev-dev; RLOCK_ADAPTERS)");
#endif
}
