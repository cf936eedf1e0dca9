#!/usr/bin/env bash
# The engine's rooms and the one direction of their dependencies: fails when a file under
# hca_engine/src/ includes a header of a room its own room may not use, when a room's
# CMakeLists links a room it may not use, when a file sits outside every room, or when
# DPDK or liburing appear outside their port code (ports/xdp holds the af_xdp ports'
# BPF program, C, and nothing else). CI runs it (tools/run-tests.sh).
#
# The rooms, lowest first; each may use only the rooms listed after it (and the transport,
# the device interface and the standard library). A lower room that needs something of a
# higher one declares an interface the higher one implements.
set -euo pipefail
cd "$(dirname "$0")/.."
src=hca_engine/src

declare -A may_use=(
    [support]=""
    [neighbors]=""
    [ports]="support"
    [ports/dpdk]="ports support"
    [ports/udp]="ports support"
    [ports/xdp]=""
    [ports/fabric]="ports support"
    [memory]="support"
    [datapath]="memory neighbors ports support"
    [control]="datapath memory neighbors ports support"
    [rdma_cm]="datapath memory neighbors ports support"
    [daemon]="control rdma_cm datapath memory neighbors ports ports/dpdk ports/udp ports/fabric support"
)

failures=0
fail() {
    echo "check-layers: $*" >&2
    failures=$((failures + 1))
}
allowed() { # allowed FROM TO
    [[ $1 == "$2" ]] && return 0
    local room
    for room in ${may_use[$1]}; do
        [[ $room == "$2" ]] && return 0
    done
    return 1
}

# Where each header lives: includes name headers without their room (each room's folder
# is on the include path of the rooms that may use it), so a name must be unique.
declare -A room_of
while IFS= read -r file; do
    relative=${file#"$src"/}
    dir=${relative%/*}
    name=${file##*/}
    if [[ $name == CMakeLists.txt ]]; then
        continue
    fi
    # The one BPF program (ports/xdp): C for the kernel's verifier, built with clang.
    if [[ $relative == ports/xdp/*.bpf.c ]]; then
        continue
    fi
    if [[ $name != *.hpp && $name != *.cpp ]]; then
        fail "$file: the engine's sources are *.hpp and *.cpp only"
        continue
    fi
    if [[ -z ${may_use[$dir]+set} ]]; then
        fail "$file is in no room (rooms: ${!may_use[*]})"
        continue
    fi
    if [[ -n ${room_of[$name]+set} && ${room_of[$name]} != "$dir" ]]; then
        fail "$name is in two rooms: ${room_of[$name]} and $dir"
    fi
    room_of[$name]=$dir
done < <(find "$src" -type f | sort)

engine_root=$(realpath "$src")
while IFS= read -r file; do
    relative=${file#"$src"/}
    room=${relative%/*}
    [[ -z ${may_use[$room]+set} ]] && continue
    # Every include, quoted or bracketed.
    while IFS= read -r header; do
        if [[ $header == */* ]]; then
            # A path to an engine header (relative to this file, or through the
            # source root) would get around the rooms' include paths.
            resolved=""
            if [[ -e ${file%/*}/$header ]]; then
                resolved=$(realpath "${file%/*}/$header")
            fi
            base=${header##*/}
            if [[ $resolved == "$engine_root"/* || $header == *hca_engine/src/* ||
                (-n ${room_of[$base]-} && $header == *"${room_of[$base]}/$base") ]]; then
                fail "$file includes $header: name an engine header without a path"
            fi
            continue
        fi
        target=${room_of[$header]-}
        [[ -z $target ]] && continue
        if ! allowed "$room" "$target"; then
            fail "$file ($room) includes $header ($target): $room may use only: ${may_use[$room]:-nothing of the engine}"
        fi
    done < <(sed -nE 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*["<]([^">]+)[">].*/\1/p' "$file")
    if [[ $room != ports/dpdk ]] && grep -qE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]rte_' "$file"; then
        fail "$file includes DPDK: DPDK belongs in ports/dpdk only"
    fi
    if [[ $room != ports/udp ]] && grep -qE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]liburing' "$file"; then
        fail "$file includes liburing: it belongs in ports/udp only"
    fi
done < <(find "$src" -type f \( -name '*.hpp' -o -name '*.cpp' \) | sort)

# The build states the same direction: a room's target links only the rooms it may use
# (softhca_engine_<room>, '/' as '_'), named in full, and only in its own CMakeLists;
# DPDK and liburing are linked only by their ports.
for room in "${!may_use[@]}"; do
    cmake=$src/$room/CMakeLists.txt
    if [[ ! -f $cmake ]]; then
        fail "$room has no CMakeLists.txt"
        continue
    fi
    code=$(grep -v '^[[:space:]]*#' "$cmake")
    if grep -qE 'softhca_engine_[a-z_]*\$' <<<"$code"; then
        fail "$cmake builds a room's target name from a variable: name it in full"
    fi
    if [[ $room != ports/dpdk ]] && grep -qE 'PkgConfig::DPDK|rte_' <<<"$code"; then
        fail "$cmake links DPDK: only ports/dpdk may"
    fi
    if [[ $room != ports/udp ]] && grep -q 'PkgConfig::URING' <<<"$code"; then
        fail "$cmake links liburing: only ports/udp may"
    fi
    own=softhca_engine_${room//\//_}
    while IFS= read -r target; do
        [[ $target == "$own" ]] && continue
        linked=""
        for other in "${!may_use[@]}"; do
            [[ softhca_engine_${other//\//_} == "$target" ]] && linked=$other
        done
        if [[ -z $linked ]]; then
            fail "$cmake names $target, which is no room's target"
        elif ! allowed "$room" "$linked"; then
            fail "$cmake links $target: $room may use only: ${may_use[$room]:-nothing of the engine}"
        fi
    done < <(grep -oE 'softhca_engine_[a-z_]+' <<<"$code" | sort -u)
done
# The engine's own CMakeLists only adds the rooms: no links of its own.
if grep -v '^[[:space:]]*#' hca_engine/CMakeLists.txt | grep -qE 'target_link_libraries|link_libraries'; then
    fail "hca_engine/CMakeLists.txt links targets: each room's links belong in its own CMakeLists"
fi

if ((failures)); then
    echo "check-layers: $failures problem(s)" >&2
    exit 1
fi
echo "check-layers: ${#may_use[@]} rooms, every include and link points down"
