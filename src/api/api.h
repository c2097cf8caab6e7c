/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What the public functions share: entering a call on a client (a fork
 * since the last call is handled first) and ending one (the error detail
 * goes to the calling thread's record, and to the owner's).
 */
#ifndef RLOCK_API_API_H
#define RLOCK_API_API_H

#include <rlock/rlock.h>

#include "core/call.h"
#include "core/handles.h"

/* Most replicas sync_replicas may ask for. */
#define RLOCK__SYNC_MAX 64

/* Every public call on c starts here: handles a fork since the last call
 * (new identity, no inherited connections or holds). */
void rlock__api_enter(rlock_client *c);

/* rlock_client_open; lazy: the servers are not reached now (an event
 * loop's client connects on its loop). */
rlock_client *rlock__client_open(const char *url, const rlock_client_opts *opts,
                                 int lazy, int *err);

/* Every public call ends here: rc's detail (call's, or the code's name)
 * becomes the calling thread's for client c (NULL: rlock_client_open's)
 * and owner's, and call's detail is given back (rlock__call_end).
 * Returns rc. */
int rlock__api_done(rlock__call *call, rlock_client *c, rlock_owner *owner,
                    int rc);

#endif
