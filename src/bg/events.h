/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Events about a lock (observe.h): the lock's fields of an event filled
 * from its mutex and owner, and a hold's loss counted and reported in one
 * place, whoever finds it (the background, or a call of the owner).
 */
#ifndef RLOCK_BG_EVENTS_H
#define RLOCK_BG_EVENTS_H

#include <stdint.h>

#include <rlock/rlock.h>

#include "core/handles.h"
#include "core/hold.h"
#include "core/observe.h"

/* Fills ev's name, layout and owner (as m's layout writes owner number
 * no with acquisition nonce) and reports it. */
void rlock__event_lock(rlock_mutex *m, uint64_t no, uint64_t nonce,
                       rlock_event *ev);
/* The same with the owner string given. */
void rlock__event_owned(const rlock_mutex *m, const char *owner,
                        rlock_event *ev);
/* An undo of owner's acquisition of m was sent (the first time): counted,
 * and reported (flags: RLOCK_EVF_LATER if by the background). */
void rlock__undo_sent(const rlock_mutex *m, const char *owner, unsigned flags);
/* The same for hold h (its mutex, owner and nonce). */
void rlock__event_hold(const rlock__hold *h, rlock_event *ev);
/* Hold h got a new lease of lease_ms (type RLOCK_EV_RENEWED or
 * _EXTENDED): counted as counter says, and reported (mu held). */
void rlock__hold_leased(const rlock__hold *h, int type, int counter,
                        int64_t lease_ms);

/* Hold h of client c is found lost for cause (RLOCK_LOST_*), by what how
 * says: counted, and reported. Once per hold: the caller marks it lost,
 * or forgets it. */
void rlock__hold_lost(rlock_client *c, const rlock__hold *h, int cause,
                      const char *how);

#endif
