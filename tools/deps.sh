#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Installs the Debian 12 packages rlock needs to build, test and demo, if
# any is missing. Needs root or sudo only when something must be installed.
set -euo pipefail
cd "$(dirname "$0")/.."

#   tools/deps.sh           what building and the demo need
#   tools/deps.sh --tests   and what the test suite needs besides
# libclang-rt-dev: clang's sanitizer runtimes (only recommended by clang).
# libc-ares-dev: name lookups inside a call's deadline, never blocking an
# event loop (the library builds without it: RLOCK_CARES=off).
pkgs=(cmake make gcc clang libclang-rt-dev pkg-config libhiredis-dev libssl-dev
      libc-ares-dev redis-server redis-tools procps util-linux valgrind openssl)
tests=0
[ "${1:-}" = --tests ] && tests=1
if [ $tests = 1 ]; then
    # python3-redis, php-cli, php-redis: the other languages' clients the
    # interop tests share locks with (tests/interop/); bash-completion, to
    # run rlock's completion script in a test; abigail-tools, for the ABI
    # check (tools/abi.sh); man-db, to check the man pages; dpkg-dev and
    # file, for CPack's Debian packages (tools/package.sh); curl, xz-utils,
    # gpgv and debian-archive-keyring, to fetch, check and unpack newer
    # servers' source (tools/valkey81.sh, tools/newserver.sh);
    # python3-prometheus-client, whose parser reads the metrics text
    # (tests/metrics/parse.py); tmux, to drive rlock top in a terminal and
    # read its screen back; strace, which rlock-bench's syscalls scenario
    # counts system calls with; libevent-dev, libuv1-dev and libev-dev,
    # the loops the event-loop adapters are tested and their examples
    # built on.
    pkgs+=(python3-redis php-cli php-redis bash-completion abigail-tools
           man-db dpkg-dev file curl xz-utils gpgv debian-archive-keyring
           python3-prometheus-client tmux strace libevent-dev libuv1-dev
           libev-dev)
    # node and npm, for node-redlock: Debian's, unless some node is there
    # already (NodeSource's nodejs, for one, bundles npm and conflicts with
    # Debian's npm package).
    command -v node >/dev/null && command -v npm >/dev/null ||
        pkgs+=(nodejs npm)
fi
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep 'ok installed' >/dev/null ||
        missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    sudo=()
    [ "$(id -u)" -eq 0 ] || sudo=(sudo)
    echo "installing: ${missing[*]}" >&2
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# node-redlock (v5 and v4) and ioredis from the npm registry, at the
# versions package-lock.json pins, into tests/interop/node/node_modules;
# again only when the lock file changed.
if [ $tests = 1 ]; then
    node_dir=tests/interop/node
    stamp=$node_dir/node_modules/.rlock-installed
    if ! cmp -s "$node_dir/package-lock.json" "$stamp" 2>/dev/null; then
        echo "installing node-redlock and ioredis (npm ci in $node_dir)" >&2
        (cd "$node_dir" && npm ci --no-audit --no-fund --loglevel=error)
        cp "$node_dir/package-lock.json" "$stamp"
    fi
fi
