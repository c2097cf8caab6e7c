/* SPDX-License-Identifier: BSD-3-Clause */
/* The libuv adapter (rlock/adapters/libuv.h) under the adapters'
 * scenario (scenario.c). */
#include <stdlib.h>

#include "adapters/scenario.h"
#include "harness/test.h"

#ifdef RLOCK_TEST_LIBUV
#include <rlock/adapters/libuv.h>
#endif

#ifdef RLOCK_TEST_LIBUV
typedef struct uv_t {
    uv_loop_t loop;
    uv_timer_t tick;
} uv_t;

static void tick_uv(uv_timer_t *t)
{
    (void)t;
}

static void *libuv_make(void)
{
    uv_t *l = calloc(1, sizeof *l);

    CHECK(l && uv_loop_init(&l->loop) == 0);
    uv_timer_init(&l->loop, &l->tick);
    uv_timer_start(&l->tick, tick_uv, 50, 50);
    return l;
}

static int libuv_attach(rlock_async *a, void *loop)
{
    return rlock_libuv_attach(a, &((uv_t *)loop)->loop);
}

static void libuv_turn(void *loop)
{
    uv_run(&((uv_t *)loop)->loop, UV_RUN_ONCE);
}

static void libuv_check_and_free(void *loop)
{
    uv_t *l = loop;
    int i;

    uv_close((uv_handle_t *)&l->tick, NULL);
    for (i = 0; i < 10; i++)
        uv_run(&l->loop, UV_RUN_NOWAIT);
    /* Every handle of the adapter closed (else UV_EBUSY). */
    CHECK_INT(uv_loop_close(&l->loop), ==, 0);
    free(l);
}
#endif

TEST(async_through_the_libuv_adapter)
{
#ifdef RLOCK_TEST_LIBUV
    static const rt_loop_kind k = {"libuv", libuv_make, libuv_attach,
                                   libuv_turn, libuv_check_and_free};
    rt_adapter_scenario(&k);
#else
    rt_fail(__FILE__, __LINE__,
            "built without libuv (Debian: libuv1-dev; RLOCK_ADAPTERS)");
#endif
}
