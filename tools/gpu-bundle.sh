#!/usr/bin/env bash
# Gathers what tools/gpu-check.sh needs on a machine that has a GPU, PyTorch and NCCL but
# no network and no RDMA packages, into one folder to carry there:
#   softhca/              the install (cmake --install of the build: relocatable)
#   lib/rdma/             libibverbs, libnl and what they need: for the NCCL processes
#                         (LD_LIBRARY_PATH), with libibverbs.so for NCCL's dlopen
#   lib/engine/           DPDK, ISA-L, liburing, libnuma, libbsd... : for the engine only
#   lib/engine/dpdk/      the DPDK plugins the engine uses (mempool ops, vdev bus, PMDs)
#   bin/ibv_devinfo       to show the devices from the folder
#   gpu-check.sh, nccl_check.py, packages.txt (each Debian package taken, with its version)
# The shared objects come from the Debian 12 packages installed here (the same ones
# tools/install-deps.sh installs), as those packages ship them; the C and C++ runtimes
# are the host's (a newer glibc and libstdc++ run these; an older one is refused there).
#   tools/gpu-bundle.sh [FOLDER]   (after tools/build.sh; default build/gpu-bundle)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=${1:-build/gpu-bundle}
build=${SOFTHCA_BUILD:-build}
limit_mb=60
[ -x "$build/hca_engine/softhca-engine" ] || { echo "gpu-bundle: build first (tools/build.sh)" >&2; exit 1; }
multiarch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
pmds=$(find "/usr/lib/$multiarch/dpdk" -maxdepth 1 -type d -name 'pmds-*' | head -1)
[ -n "$pmds" ] || { echo "gpu-bundle: DPDK's plugin folder not found" >&2; exit 1; }

rm -rf "$out"
mkdir -p "$out"/lib/rdma "$out"/lib/engine/dpdk "$out"/bin
cmake --install "$build" --prefix "$out/softhca" --strip >/dev/null
install -m 755 tools/gpu-check.sh tools/nccl_check.py "$out"/
install -m 755 /usr/bin/ibv_devinfo "$out"/bin/

# The DPDK plugins an engine on the built-in wire or on a veth needs and does not link
# (the vdev bus and the ring PMD it links): the mempool ops, the af_packet and memif PMDs.
plugins=(librte_mempool_ring librte_net_af_packet librte_net_memif)
for p in "${plugins[@]}"; do
    if ldd "$build/hca_engine/softhca-engine" | grep -q "$p\.so"; then
        echo "gpu-bundle: the engine links $p: not a plugin to carry" >&2
        exit 1
    fi
    cp -L "$pmds/$p.so" "$out/lib/engine/dpdk/$p.so"
done

# Each shared object these programs load, with what it loads in turn, but the C and C++
# runtimes and the dynamic loader.
runtime='^(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|ld-linux-x86-64)\.so'
closure() {
    ldd "$@" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u
}
app_objects=("$out"/softhca/lib*/softhca/*.so "$out/bin/ibv_devinfo" "/usr/lib/$multiarch/libibverbs.so.1")
engine_objects=("$out/softhca/libexec/softhca/softhca-engine" "$out/softhca/bin/softhca"
    "$out"/lib/engine/dpdk/*.so)
packages=()
take() { # FOLDER LIBRARY: the library under its own name, and its package noted
    local folder=$1 lib=$2 name
    name=$(basename "$lib")
    [[ $name =~ $runtime ]] && return 0
    [ -e "$folder/$name" ] || cp -L "$lib" "$folder/$name"
    packages+=("$(package_of "$lib")")
}
package_of() { # the Debian package that ships LIBRARY (under /lib or /usr/lib: usrmerge)
    local path owner
    path=$(readlink -f "$1")
    for candidate in "$path" "${path#/usr}" "/usr$path" "$1"; do
        owner=$(dpkg -S "$candidate" 2>/dev/null | head -1 | cut -d: -f1) || true
        [ -n "$owner" ] && break
    done
    echo "$owner"
}
while read -r lib; do take "$out/lib/rdma" "$lib"; done < <(closure "${app_objects[@]}")
take "$out/lib/rdma" "/usr/lib/$multiarch/libibverbs.so.1"
ln -sf libibverbs.so.1 "$out/lib/rdma/libibverbs.so" # NCCL dlopens libibverbs.so first
while read -r lib; do
    # What the NCCL processes already have from lib/rdma stays there.
    [ -e "$out/lib/rdma/$(basename "$lib")" ] || take "$out/lib/engine" "$lib"
done < <(closure "${engine_objects[@]}")
printf '%s\n' "${packages[@]}" | grep -v '^$' | sort -u |
    xargs dpkg-query -W -f '${Package} ${Version}\n' >"$out/packages.txt"
{
    echo "softhca $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?'), built $(date -u +%F)"
    echo "DPDK plugins from $pmds: ${plugins[*]}"
} >"$out/BUNDLE"

size_kb=$(du -sk "$out" | cut -f1)
if [ "$size_kb" -gt $((limit_mb * 1024)) ]; then
    echo "gpu-bundle: $out is $((size_kb / 1024)) MiB, over $limit_mb MiB" >&2
    exit 1
fi
echo "gpu-bundle: $out, $((size_kb / 1024)) MiB ($size_kb KiB), $(wc -l <"$out/packages.txt") Debian packages"
echo "gpu-bundle: carry it to the GPU machine and run: $out/gpu-check.sh (as root)"
