#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Fetches the upstream source of a Debian source package from one suite of
# deb.debian.org, checked the way apt checks it: the suite's InRelease must
# carry a good signature by a key of debian-archive-keyring (gpgv); the
# Sources index must have the SHA-256 InRelease gives; the orig tarball the
# one the index gives. No apt configuration is touched.
#   tools/debsrc.sh SUITE PACKAGE DIR
# Leaves the tarball in DIR and prints "VERSION PATH" (VERSION upstream,
# without epoch or Debian revision). The suite's current version is taken,
# whatever it is: sid and experimental move on, and their pool keeps only
# what they carry now, so a pinned version would soon be gone.
set -euo pipefail
[ $# -eq 3 ] || { echo "usage: $0 SUITE PACKAGE DIR" >&2; exit 2; }
suite=$1 pkg=$2 dir=$3
mirror=http://deb.debian.org/debian
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
mkdir -p "$dir"
# A stalled mirror must not hang the run: each try has 30 s to connect
# and 10 minutes in all.
fetch() { curl -fsSL --retry 3 --connect-timeout 30 --max-time 600 -o "$2" "$1"; }
sha_ok() { echo "$1  $2" | sha256sum -c --quiet - >/dev/null 2>&1; }

fetch "$mirror/dists/$suite/InRelease" "$dir/InRelease"
gpgv --keyring "$keyring" --output "$dir/Release" "$dir/InRelease" \
    2>"$dir/gpgv.log" || { cat "$dir/gpgv.log" >&2; exit 1; }
sources_sha=$(awk '/^SHA256:/ { s = 1; next } /^[^ ]/ { s = 0 }
    s && $3 == "main/source/Sources.xz" { print $1 }' "$dir/Release")
[ -n "$sources_sha" ] || { echo "$suite: no Sources.xz in Release" >&2; exit 1; }
fetch "$mirror/dists/$suite/main/source/Sources.xz" "$dir/Sources.xz"
sha_ok "$sources_sha" "$dir/Sources.xz" ||
    { echo "$suite: Sources.xz does not match its Release" >&2; exit 1; }

# The package's stanza: its version, directory and orig tarball's SHA-256.
read -r version directory tarball sha < <(xz -dc "$dir/Sources.xz" | awk -v p="$pkg" '
    /^Package: / { in_pkg = ($2 == p) }
    in_pkg && /^Version: / { v = $2 }
    in_pkg && /^Directory: / { d = $2 }
    in_pkg && /^Checksums-Sha256:/ { c = 1; next }
    in_pkg && c && /^ / { if ($3 ~ /\.orig\.tar\./) { f = $3; s = $1 } next }
    { c = 0 }
    /^$/ { if (in_pkg && f) { print v, d, f, s; exit } in_pkg = 0 }')
[ -n "${tarball:-}" ] || { echo "$suite: no $pkg source" >&2; exit 1; }
if ! sha_ok "$sha" "$dir/$tarball" 2>/dev/null; then
    fetch "$mirror/$directory/$tarball" "$dir/$tarball"
    sha_ok "$sha" "$dir/$tarball" ||
        { echo "$tarball does not match $suite's Sources" >&2; exit 1; }
fi
upstream=${version#*:}
upstream=${upstream%-*}
echo "$upstream $dir/$tarball"
