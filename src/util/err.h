/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * An error as the library carries it between its modules: a code
 * (RLOCK_E*) and the sentence that explains it. Every module below the
 * public API reports failures into one of these, which the caller passed
 * in; nothing travels through globals or thread-locals. The API layer
 * decides where the detail goes in the end (rlock_client_errmsg,
 * rlock_owner_errmsg).
 */
#ifndef RLOCK_UTIL_ERR_H
#define RLOCK_UTIL_ERR_H

#include <rlock/rlock.h>

#define RLOCK__ERR_MAX 512

typedef struct rlock__err {
    int code;                 /* RLOCK_OK while nothing failed */
    char msg[RLOCK__ERR_MAX]; /* NUL-terminated; "" while nothing failed */
} rlock__err;

/* Sets *e to code and the formatted message and returns code, so that
 * "return rlock__err_set(e, RLOCK_EINVAL, ...)" reads as one step. */
int rlock__err_set(rlock__err *e, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Clears *e (code RLOCK_OK, empty message). */
void rlock__err_clear(rlock__err *e);

#endif
