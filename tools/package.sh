#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The Debian packages (packaging/cpack.cmake): librlock0, librlock-dev,
# rlock, built by CPack into build/pkg/pkg/.
#   tools/package.sh             build them
#   tools/package.sh --install   and check them as a user would (CI; needs
#                                root): install them with apt, check that
#                                the package ran ldconfig, build the
#                                examples against the installed package
#                                (CMake find_package and pkg-config), run
#                                `rlock ping` and the example against a
#                                private redis-server, then remove them.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${RLOCK_PKG_BUILD:-build/pkg}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_INSTALL_PREFIX=/usr \
    -DRLOCK_BUILD_TESTS=OFF -DRLOCK_BUILD_EXAMPLES=OFF -DRLOCK_WERROR=ON \
    -DRLOCK_CARES=on >/dev/null
cmake --build "$build" -j"$(nproc)" >/dev/null
rm -rf "$build/pkg"
(cd "$build" && cpack >/dev/null)
debs=("$build"/pkg/*.deb)
for d in "${debs[@]}"; do
    echo "built $d: $(dpkg-deb -f "$d" Depends)"
    # (Contents read whole first: grep -q closing the pipe early would
    # kill dpkg-deb with SIGPIPE, a failure under pipefail.)
    contents=$(dpkg-deb -c "$d")
    grep -q "usr/share/doc/$(dpkg-deb -f "$d" Package)/copyright" <<< "$contents" ||
        { echo "tools/package.sh: $d has no copyright file" >&2; exit 1; }
done
[ ${#debs[@]} = 3 ] || { echo "tools/package.sh: want 3 packages, got ${#debs[@]}" >&2; exit 1; }
if grep -q rlock-bench <<< "$(dpkg-deb -c "$build"/pkg/rlock_*.deb)"; then
    echo "tools/package.sh: rlock-bench must not be packaged" >&2
    exit 1
fi
[ "${1:-}" = --install ] || exit 0

tmp=$(mktemp -d /tmp/rlock-pkg-XXXXXX)
redis_pid=
cleanup() {
    [ -n "$redis_pid" ] && kill "$redis_pid" 2>/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get purge -y -q librlock0 librlock-dev rlock >/dev/null 2>&1 || true
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "tools/package.sh: $*" >&2; exit 1; }

DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    "$(realpath "$build"/pkg/librlock0_*.deb)" "$(realpath "$build"/pkg/librlock-dev_*.deb)" \
    "$(realpath "$build"/pkg/rlock_*.deb)" >/dev/null
ldconfig -p | grep 'librlock.so.0 ' >/dev/null || fail "librlock.so.0 is not in the ldconfig cache after install"
[ "$(command -v rlock)" = /usr/bin/rlock ] || fail "rlock is not /usr/bin/rlock"
! command -v rlock-bench >/dev/null || fail "rlock-bench was installed"
# Minimal images (Docker's Debian) tell dpkg not to install man pages;
# there the packages' contents are checked instead.
if grep -qs '^path-exclude=/usr/share/man' /etc/dpkg/dpkg.cfg.d/*; then
    grep -q 'man3/rlock_mutex_lock.3' <<< "$(dpkg-deb -c "$build"/pkg/librlock-dev_*.deb)" ||
        fail "librlock-dev has no rlock_mutex_lock(3)"
    grep -q 'man1/rlock.1' <<< "$(dpkg-deb -c "$build"/pkg/rlock_*.deb)" || fail "rlock has no rlock(1)"
else
    man -w rlock_mutex_lock >/dev/null || fail "man rlock_mutex_lock: no page"
    man -w 1 rlock >/dev/null || fail "man 1 rlock: no page"
fi
[ -f /usr/share/bash-completion/completions/rlock ] || fail "no bash completion"

# The examples against the installed package, both ways.
cmake -S examples -B "$tmp/ex" >/dev/null
cmake --build "$tmp/ex" >/dev/null
cc -Wall -Wextra -Werror -o "$tmp/contend-pc" examples/contend.c $(pkg-config --cflags --libs rlock)
# The event-loop adapters: headers of the -dev package, with pkg-config
# names that bring in their loops.
[ -x "$tmp/ex/evhttp_lock" ] && [ -x "$tmp/ex/uv_lock" ] ||
    fail "the adapters' examples were not built against the package"
cc -Wall -Wextra -Werror -o "$tmp/evhttp-pc" examples/evhttp_lock.c $(pkg-config --cflags --libs rlock-libevent)
cc -Wall -Wextra -Werror -o "$tmp/uv-pc" examples/uv_lock.c $(pkg-config --cflags --libs rlock-libuv)
printf '#include <rlock/adapters/libev.h>\nint main(void) { return rlock_libev_attach(0, EV_DEFAULT) == RLOCK_EINVAL ? 0 : 1; }\n' > "$tmp/ev.c"
cc -Wall -Wextra -Werror -o "$tmp/ev-pc" "$tmp/ev.c" $(pkg-config --cflags --libs rlock-libev)
"$tmp/ev-pc" || fail "the libev adapter"
[ "$(pkg-config --modversion rlock)" = "$(dpkg-deb -f "$build"/pkg/librlock0_*.deb Version)" ] ||
    fail "pkg-config version differs from the package's"

# A private server on a unix socket.
redis-server --port 0 --unixsocket "$tmp/redis.sock" --unixsocketperm 700 --dir "$tmp" \
    --save "" --appendonly no >"$tmp/redis.log" 2>&1 &
redis_pid=$!
for _ in $(seq 100); do [ -S "$tmp/redis.sock" ] && break; sleep 0.05; done
url="unix://$tmp/redis.sock"
rlock --redis "$url" ping | grep "^PONG from" >/dev/null || fail "rlock ping failed"
"$tmp/ex/contend" "$url" 2 >"$tmp/contend.out" || fail "contend (find_package): $(cat "$tmp/contend.out")"
"$tmp/contend-pc" "$url" 2 >"$tmp/contend-pc.out" || fail "contend (pkg-config): $(cat "$tmp/contend-pc.out")"
"$tmp/uv-pc" "$url" 4 2 >"$tmp/uv-pc.out" || fail "uv_lock (pkg-config): $(cat "$tmp/uv-pc.out")"
rlock --redis "$url" run -n pkg -- true || fail "rlock run"
echo "tools/package.sh: installed, ldconfig ran, examples built both ways (the adapters' too), rlock ping and run work"
