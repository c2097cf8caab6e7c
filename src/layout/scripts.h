/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The Lua scripts, embedded at build time from the files in lua/ with their
 * SHA-1 (cmake/embed_lua.c). Each layout's file says what its scripts take
 * and return; docs/protocol.md explains each one.
 */
#ifndef RLOCK_LAYOUT_SCRIPTS_H
#define RLOCK_LAYOUT_SCRIPTS_H

#include "core/request.h"

extern const rlock__script rlock__lua_native_acquire;
extern const rlock__script rlock__lua_native_acquire_fast;
extern const rlock__script rlock__lua_native_release;
extern const rlock__script rlock__lua_native_release_fast;
extern const rlock__script rlock__lua_native_extend;
extern const rlock__script rlock__lua_native_renew;
extern const rlock__script rlock__lua_native_cancel;
extern const rlock__script rlock__lua_native_retoken;
extern const rlock__script rlock__lua_native_fence;
extern const rlock__script rlock__lua_native_status;
extern const rlock__script rlock__lua_native_force;

extern const rlock__script rlock__lua_token_acquire;
extern const rlock__script rlock__lua_token_release;
extern const rlock__script rlock__lua_token_extend;
extern const rlock__script rlock__lua_token_renew;
extern const rlock__script rlock__lua_token_cancel;
extern const rlock__script rlock__lua_token_status;
extern const rlock__script rlock__lua_token_force;

extern const rlock__script rlock__lua_redisson_acquire;
extern const rlock__script rlock__lua_redisson_release;
extern const rlock__script rlock__lua_redisson_extend;
extern const rlock__script rlock__lua_redisson_renew;
extern const rlock__script rlock__lua_redisson_cancel;
extern const rlock__script rlock__lua_redisson_status;
extern const rlock__script rlock__lua_redisson_force;

#endif
