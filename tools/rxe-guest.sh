#!/usr/bin/env bash
# The Linux Soft-RoCE peer (tools/rxe-guest/: Debian 12's kernel with rdma_rxe in a
# QEMU guest), built once per machine and cached: prints the directory that holds its
# vmlinuz and initrd.gz. The cache is keyed by the build script's contents, so a changed
# script builds anew; the kernel tests use it (tests/e2e/kernel_peer.sh).
#
#   tools/rxe-guest.sh            # build if needed, print the directory
#
# SOFTHCA_RXE_GUEST_SRC names the directory of build.sh and run.sh (default
# tools/rxe-guest), SOFTHCA_RXE_GUEST_CACHE the cache
# (default /var/cache/softhca/rxe-guest).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
src=${SOFTHCA_RXE_GUEST_SRC:-$repo/tools/rxe-guest}
[ -x "$src/build.sh" ] && [ -x "$src/run.sh" ] ||
    { echo "rxe-guest: no build.sh/run.sh in $src (set SOFTHCA_RXE_GUEST_SRC)" >&2; exit 1; }
cache=${SOFTHCA_RXE_GUEST_CACHE:-/var/cache/softhca/rxe-guest}
key=$(cat "$src/build.sh" | sha256sum | cut -c1-16)
out="$cache/$key"
if [ ! -s "$out/vmlinuz" ] || [ ! -s "$out/initrd.gz" ]; then
    mkdir -p "$cache"
    # One build at a time: tests that start together wait for the first one's guest.
    exec 9>"$cache/.lock"
    flock 9
    if [ ! -s "$out/vmlinuz" ] || [ ! -s "$out/initrd.gz" ]; then
        rm -rf "$out.tmp"
        "$src/build.sh" "$out.tmp" >&2 || { echo "rxe-guest: build failed" >&2; exit 1; }
        # Only the two boot files are kept; the unpacked kernel and the package go.
        mkdir -p "$out"
        mv "$out.tmp/vmlinuz" "$out.tmp/initrd.gz" "$out/"
        rm -rf "$out.tmp"
    fi
fi
echo "$out"
