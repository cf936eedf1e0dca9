#!/usr/bin/env bash
# tools/gpu-bundle.sh makes the folder the NCCL check carries to a GPU machine (under
# 60 MiB, every Debian package named with its version), and tools/gpu-check.sh --dry-run
# from that folder brings softhca up, shows both devices through the folder's libibverbs
# and stops where CUDA would be needed, saying that no GPU was found: once as on this
# host (its DPDK runs the engine), once in a mount namespace where DPDK's plugin folder
# is hidden, as on a GPU machine without DPDK (the folder's DPDK libraries and plugins run
# the engine: checked in its memory map).
#   test_gpu_bundle.sh   (SOFTHCA_BUILD: the build folder)
source "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
bundle=$work/gpu
export GPU_CHECK_PREFIX=$SOFTHCA_PREFIX
trap '"$SOFTHCA" down >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

out=$("$root/tools/gpu-bundle.sh" "$bundle" 2>&1) || fail "gpu-bundle.sh failed: $out"
echo "$out"
size_kb=$(du -sk "$bundle" | cut -f1)
[ "$size_kb" -le $((60 * 1024)) ] || fail "the folder is $size_kb KiB"
for lib in libibverbs1 librte-eal23 libnl-3-200; do
    grep -q "^$lib " "$bundle/packages.txt" || fail "$lib is not in packages.txt"
done
[ -L "$bundle/lib/rdma/libibverbs.so" ] || fail "no libibverbs.so for NCCL's dlopen"
ls "$bundle/lib/engine/dpdk/librte_mempool_ring.so" >/dev/null || fail "no mempool plugin"

out=$("$bundle/gpu-check.sh" --dry-run 2>&1) || fail "gpu-check.sh --dry-run failed: $out"
echo "$out"
grep -q "active through the folder's libibverbs" <<<"$out" || fail "the devices were not shown"
grep -qE "dry run: (no GPU found|a GPU)" <<<"$out" || fail "the dry run did not say whether a GPU is here"

# As on a host without DPDK: its plugin folder hidden, the folder's DPDK runs the engine.
dpdk=$(compgen -G "/usr/lib/*/dpdk" | head -1)
[ -n "$dpdk" ] || fail "no DPDK folder on this host"
mkdir "$work/empty"
out=$(unshare -m bash -c '
    mount --bind "$1" "$2"
    GPU_CHECK_KEEP_UP=1 "$3/gpu-check.sh" --dry-run || exit 1
    engine=$(cat "${SOFTHCA_RUN_ROOT:-/run/softhca}/$GPU_CHECK_PREFIX/engine.pid")
    grep -q "$3/lib/engine/librte_eal.so.23" "/proc/$engine/maps" || { echo "not the folder DPDK"; exit 1; }
    grep -q "/run/softhca-gpu-check-$GPU_CHECK_PREFIX/librte_mempool_ring.so" "/proc/$engine/maps" ||
        { echo "not the folder plugins"; exit 1; }
    "$3/softhca/bin/softhca" down --prefix "$GPU_CHECK_PREFIX" >/dev/null
    rm -rf "/run/softhca-gpu-check-$GPU_CHECK_PREFIX"
' check "$work/empty" "$dpdk" "$bundle" 2>&1) || fail "gpu-check.sh without the host's DPDK: $out"
echo "$out"
grep -q "the host's DPDK" <<<"$out" && fail "the host's DPDK ran the engine with its plugins hidden"
echo "PASS"
