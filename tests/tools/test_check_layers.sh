#!/usr/bin/env bash
# tools/check-layers.sh passes on the tree as it is and fails on each kind of wrong
# dependency. Between the top-level parts: an include of a part one may not use, a path
# out of one's part, a CMake link or path into a part one may not use, code in a folder
# that is no part. Between the engine's rooms: an include that points up (by name, by
# path, bracketed), a link that points up (named, built from a variable, or outside the
# room's CMakeLists), DPDK or liburing outside their ports, and a file outside every room
# or of another kind. Runs on a copy in a temporary directory.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fresh() {
    rm -rf "$work/tree"
    mkdir -p "$work/tree"
    # Every part, as the table in docs/architecture.md names them, and that table.
    (cd "$root" && tar -c --exclude=./build --exclude='./build-*' --exclude=./.git \
        --exclude=./tests --exclude=./packaging . ) | tar -x -C "$work/tree"
}
expect_pass() {
    "$work/tree/tools/check-layers.sh" >"$work/out" 2>&1 ||
        { cat "$work/out"; echo "FAIL: the tree as it is was refused" >&2; exit 1; }
}
expect_fail() { # expect_fail WHAT PATTERN
    if "$work/tree/tools/check-layers.sh" >"$work/out" 2>&1; then
        echo "FAIL: $1 was not refused" >&2
        exit 1
    fi
    grep -q -- "$2" "$work/out" ||
        { cat "$work/out"; echo "FAIL: $1: no message matching '$2'" >&2; exit 1; }
    echo "refused: $1"
}

fresh
expect_pass

src=$work/tree/hca_engine/src
sed -i '0,/^#include/s//#include "resource_tables.hpp"\n#include/' "$src/memory/process_memory.cpp"
expect_fail "memory including control" "process_memory.cpp (memory) includes resource_tables.hpp (control)"

fresh
sed -i '0,/^#include/s//#include "datapath.hpp"\n#include/' "$src/ports/link_shaper.hpp"
expect_fail "ports including datapath" "link_shaper.hpp (ports) includes datapath.hpp (datapath)"

fresh
sed -i "s/PUBLIC softhca_engine_support softhca_transport/PUBLIC softhca_engine_support softhca_engine_control softhca_transport/" \
    "$src/memory/CMakeLists.txt"
grep -q softhca_engine_control "$src/memory/CMakeLists.txt" || { echo "FAIL: edit did not apply" >&2; exit 1; }
expect_fail "memory linking control" "links softhca_engine_control"

fresh
sed -i '0,/^#include/s//#include <rte_mbuf.h>\n#include/' "$src/datapath/datapath.cpp"
expect_fail "DPDK in the data path" "DPDK belongs in ports/dpdk only"

fresh
echo '#pragma once' >"$src/stray.hpp"
expect_fail "a file outside every room" "stray.hpp is in no room"

fresh
sed -i '0,/^#include/s//#include "..\/control\/resource_tables.hpp"\n#include/' "$src/memory/process_memory.cpp"
expect_fail "a path to a higher room's header" "name an engine header without a path"

fresh
sed -i '0,/^#include/s//#include "control\/resource_tables.hpp"\n#include/' "$src/memory/process_memory.cpp"
expect_fail "a room-qualified include" "name an engine header without a path"

fresh
sed -i '0,/^#include/s//#include <resource_tables.hpp>\n#include/' "$src/memory/process_memory.cpp"
expect_fail "a bracketed include of a higher room" "process_memory.cpp (memory) includes resource_tables.hpp (control)"

fresh
echo '#include "datapath.hpp"' >"$src/memory/extra.h"
expect_fail "a source with another extension" "extra.h: the engine's sources are"

fresh
sed -i '0,/^#include/s//#include <liburing.h>\n#include/' "$src/ports/dpdk/dpdk_ports.cpp"
expect_fail "liburing outside ports/udp" "liburing: it belongs in ports/udp only"

fresh
echo 'set(UP control)
target_link_libraries(softhca_engine_memory PUBLIC softhca_engine_${UP})' >>"$src/memory/CMakeLists.txt"
expect_fail "a target name built from a variable" "name it in full"

fresh
echo 'target_link_libraries(softhca_engine_memory PUBLIC PkgConfig::DPDK)' >>"$src/memory/CMakeLists.txt"
expect_fail "DPDK linked outside ports/dpdk" "links DPDK: only ports/dpdk may"

fresh
echo 'target_link_libraries(softhca_engine_memory PUBLIC softhca_engine_control)' \
    >>"$work/tree/hca_engine/CMakeLists.txt"
expect_fail "a link outside the rooms' own CMakeLists" "each room's links belong in its own"

# The top-level parts.
tree=$work/tree
fresh
sed -i '0,/^#include/s//#include "softhca\/device_interface\/control.hpp"\n#include/' "$tree/transport/src/opcodes.cpp"
expect_fail "the transport including the device interface" \
    "opcodes.cpp (transport) includes softhca/device_interface/control.hpp (device_interface)"

fresh
sed -i '0,/^#include/s//#include "softhca\/transport\/opcodes.hpp"\n#include/' "$tree/provider/src/qp.cpp"
expect_fail "the provider including the transport" \
    "qp.cpp (provider) includes softhca/transport/opcodes.hpp (transport)"

fresh
sed -i '0,/^#include/s//#include "..\/..\/hca_engine\/src\/support\/clock.hpp"\n#include/' \
    "$tree/kernel_shim/preload/rdma_netlink.cpp"
expect_fail "a path out of the preload into the engine" \
    "rdma_netlink.cpp (kernel_shim) includes ../../hca_engine/src/support/clock.hpp by a path out of kernel_shim/"

fresh
sed -i 's/PUBLIC softhca_device_interface$/PUBLIC softhca_device_interface softhca_preload/' \
    "$tree/device_interface/CMakeLists.txt"
sed -i 's/softhca_device_registration PUBLIC softhca_device_interface/& softhca_engine_support/' \
    "$tree/device_interface/CMakeLists.txt"
grep -q softhca_engine_support "$tree/device_interface/CMakeLists.txt" || { echo "FAIL: edit did not apply" >&2; exit 1; }
expect_fail "the device interface linking the engine" \
    "device_interface/CMakeLists.txt (device_interface) names softhca_engine_support (hca_engine)"

fresh
echo 'target_link_libraries(softhca_engine_daemon PUBLIC softhca_preload)' \
    >>"$tree/hca_engine/src/daemon/CMakeLists.txt"
expect_fail "the engine linking the preload library" \
    "(hca_engine) names softhca_preload (kernel_shim)"

fresh
echo 'target_include_directories(softhca_provider PRIVATE ${CMAKE_SOURCE_DIR}/hca_engine/src/support)' \
    >>"$tree/provider/CMakeLists.txt"
expect_fail "the provider naming a path into the engine" \
    "provider/CMakeLists.txt (provider) names a path into hca_engine/"

fresh
echo 'target_include_directories(softhca_provider PRIVATE ${CMAKE_SOURCE_DIR}/hca_engine)' \
    >>"$tree/provider/CMakeLists.txt"
expect_fail "the provider naming the engine's folder" \
    "provider/CMakeLists.txt (provider) names a path into hca_engine/"

fresh
ln -s ../../hca_engine/src/support/clock.hpp "$tree/provider/src/engine_clock.hpp"
expect_fail "a link out of the provider into the engine" \
    "provider/src/engine_clock.hpp (provider) is a link out of provider/"

fresh
mkdir -p "$tree/extras"
echo 'int main() {}' >"$tree/extras/main.cpp"
expect_fail "code in a folder that is no part" "extras/ holds code but is no part"

echo "PASS"
