/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The hooks, through the client's driver: the engine and the steps never
 * name the driver that runs them.
 */
#include "bg/bg.h"
#include "bg/driver.h"

int rlock__bg_ensure(rlock_client *c, rlock__call *call)
{
    return c->bg->driver->ensure(c, call);
}

void rlock__bg_kick(rlock_client *c)
{
    c->bg->driver->kick(c);
}

void rlock__bg_kick_before(rlock_client *c, int64_t due_ns)
{
    c->bg->driver->kick_before(c, due_ns);
}
