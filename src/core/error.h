/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Where the detail of a failed call ends up for the application: the
 * calling thread's record, tagged with the client it happened on, which
 * rlock_client_errmsg reads (the SQLite errcode/errmsg split, per thread
 * because a client is shared between threads). Explicit owners keep
 * their own copy too (core/owner.h).
 */
#ifndef RLOCK_CORE_ERROR_H
#define RLOCK_CORE_ERROR_H

#include <stdint.h>

/* Makes msg the calling thread's last error detail on the client with
 * this serial (0: rlock_client_open, read with rlock_client_errmsg(NULL)). */
void rlock__errmsg_set(uint64_t client_serial, const char *msg);

/* The calling thread's last detail for that client, or "". */
const char *rlock__errmsg_get(uint64_t client_serial);

#endif
