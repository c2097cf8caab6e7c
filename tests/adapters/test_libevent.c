/* SPDX-License-Identifier: BSD-3-Clause */
/* The libevent adapter (rlock/adapters/libevent.h) under the adapters'
 * scenario (scenario.c). */
#include <stdlib.h>

#include "adapters/scenario.h"
#include "harness/test.h"

#ifdef RLOCK_TEST_LIBEVENT
#include <rlock/adapters/libevent.h>
#endif

#ifdef RLOCK_TEST_LIBEVENT
typedef struct ev_loop_t {
    struct event_base *base;
    struct event *tick;
} ev_loop_t;

static void tick_event(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
}

static void *libevent_make(void)
{
    ev_loop_t *l = calloc(1, sizeof *l);
    struct timeval tv = {0, 50000};

    CHECK(l && (l->base = event_base_new()) != NULL);
    l->tick = event_new(l->base, -1, EV_PERSIST, tick_event, NULL);
    event_add(l->tick, &tv);
    return l;
}

static int libevent_attach(rlock_async *a, void *loop)
{
    return rlock_libevent_attach(a, ((ev_loop_t *)loop)->base);
}

static void libevent_turn(void *loop)
{
    event_base_loop(((ev_loop_t *)loop)->base, EVLOOP_ONCE);
}

static void libevent_check_and_free(void *loop)
{
    ev_loop_t *l = loop;

    /* Only the tick is left. */
    CHECK_INT(event_base_get_num_events(l->base, EVENT_BASE_COUNT_ADDED), ==,
              1);
    event_free(l->tick);
    event_base_free(l->base);
    free(l);
}
#endif

TEST(async_through_the_libevent_adapter)
{
#ifdef RLOCK_TEST_LIBEVENT
    static const rt_loop_kind k = {"libevent", libevent_make, libevent_attach,
                                   libevent_turn, libevent_check_and_free};
    rt_adapter_scenario(&k);
#else
    rt_fail(__FILE__, __LINE__,
            "built without libevent (Debian: libevent-dev; RLOCK_ADAPTERS)");
#endif
}
