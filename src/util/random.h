/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Randomness for secrets: owner ids come from getrandom(2), so that
 * another process cannot guess one and release a lock it does not hold.
 */
#ifndef RLOCK_UTIL_RANDOM_H
#define RLOCK_UTIL_RANDOM_H

#include <stddef.h>

/* 128 random bits as 32 lower-case hex digits. */
#define RLOCK__ID_LEN 32

/* Fills buf with len bytes from the OS random source; 0 or -1. */
int rlock__random_bytes(void *buf, size_t len);

/* A new random id into out (RLOCK__ID_LEN hex digits and a NUL); 0 or
 * -1 when the OS gives no randomness. */
int rlock__random_id(char out[RLOCK__ID_LEN + 1]);

#endif
