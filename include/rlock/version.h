/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * rlock version numbers. CMake reads the three numbers below, so the version
 * is written in exactly one place.
 */
#ifndef RLOCK_VERSION_H
#define RLOCK_VERSION_H

#define RLOCK_VERSION_MAJOR 0
#define RLOCK_VERSION_MINOR 1
#define RLOCK_VERSION_PATCH 0

#define RLOCK_STRINGIFY_HELPER(v) #v
#define RLOCK_STRINGIFY(v) RLOCK_STRINGIFY_HELPER(v)

/* "0.1.0" */
#define RLOCK_VERSION_STRING                                                   \
    RLOCK_STRINGIFY(RLOCK_VERSION_MAJOR)                                       \
    "." RLOCK_STRINGIFY(RLOCK_VERSION_MINOR) "." RLOCK_STRINGIFY(              \
        RLOCK_VERSION_PATCH)

/* One number that compares in release order: 0xMMmmpp. */
#define RLOCK_VERSION_NUM                                                      \
    ((RLOCK_VERSION_MAJOR << 16) | (RLOCK_VERSION_MINOR << 8) |                \
     RLOCK_VERSION_PATCH)

#endif
