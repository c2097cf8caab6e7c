#!/usr/bin/env bash
# Installs the Debian 12 packages rlock needs to build, test and demo, if
# any is missing. Needs root or sudo only when something must be installed.
set -euo pipefail

#   tools/deps.sh           what building and the demo need
#   tools/deps.sh --tests   and what the test suite needs besides
# libclang-rt-dev: clang's sanitizer runtimes (only recommended by clang).
pkgs=(cmake make gcc clang libclang-rt-dev pkg-config libhiredis-dev redis-server
      redis-tools procps util-linux valgrind)
# python3-redis, php-cli, php-redis: the other languages' clients the
# interop tests share locks with (tests/interop/).
[ "${1:-}" = --tests ] && pkgs+=(python3-redis php-cli php-redis)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' ||
        missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=()
[ "$(id -u)" -eq 0 ] || sudo=(sudo)
echo "installing: ${missing[*]}" >&2
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -q --no-install-recommends "${missing[@]}"
