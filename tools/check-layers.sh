#!/usr/bin/env bash
# The engine's rooms and the one direction of their dependencies: fails when a file under
# hca_engine/src/ includes a header of a room its own room may not use, when a room's
# CMakeLists links a room it may not use, when a file sits outside every room, or when
# DPDK or liburing appear outside their port code. CI runs it (tools/run-tests.sh).
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
    [memory]="support"
    [datapath]="memory neighbors ports support"
    [control]="datapath memory neighbors ports support"
    [rdma_cm]="datapath memory neighbors ports support"
    [daemon]="control rdma_cm datapath memory neighbors ports ports/dpdk ports/udp support"
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
    dir=$(dirname "${file#"$src"/}")
    if [[ -z ${may_use[$dir]+set} ]]; then
        fail "$file is in no room (rooms: ${!may_use[*]})"
        continue
    fi
    name=$(basename "$file")
    if [[ -n ${room_of[$name]+set} && ${room_of[$name]} != "$dir" ]]; then
        fail "$name is in two rooms: ${room_of[$name]} and $dir"
    fi
    room_of[$name]=$dir
done < <(find "$src" -type f \( -name '*.hpp' -o -name '*.cpp' \) | sort)

while IFS= read -r file; do
    room=$(dirname "${file#"$src"/}")
    [[ -z ${may_use[$room]+set} ]] && continue
    while IFS= read -r header; do
        target=${room_of[$header]-}
        [[ -z $target ]] && continue
        if ! allowed "$room" "$target"; then
            fail "$file ($room) includes $header ($target): $room may use only: ${may_use[$room]:-nothing of the engine}"
        fi
    done < <(sed -nE 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"([^"]+)".*/\1/p' "$file")
    if [[ $room != ports/dpdk ]] && grep -qE '^[[:space:]]*#[[:space:]]*include[[:space:]]*<rte_' "$file"; then
        fail "$file includes DPDK: DPDK belongs in ports/dpdk only"
    fi
    if [[ $room != ports/udp ]] && grep -qE '^[[:space:]]*#[[:space:]]*include[[:space:]]*<liburing' "$file"; then
        fail "$file includes liburing: it belongs in ports/udp only"
    fi
done < <(find "$src" -type f \( -name '*.hpp' -o -name '*.cpp' \) | sort)

# The build states the same direction: a room's target links only the rooms it may use
# (softhca_engine_<room>, '/' as '_').
for room in "${!may_use[@]}"; do
    cmake=$src/$room/CMakeLists.txt
    if [[ ! -f $cmake ]]; then
        fail "$room has no CMakeLists.txt"
        continue
    fi
    own=softhca_engine_${room//\//_}
    while IFS= read -r target; do
        [[ $target == "$own" ]] && continue
        linked=""
        for other in "${!may_use[@]}"; do
            [[ softhca_engine_${other//\//_} == "$target" ]] && linked=$other
        done
        if [[ -z $linked ]]; then
            [[ $room == daemon ]] || fail "$cmake names $target, which is no room's target"
        elif ! allowed "$room" "$linked"; then
            fail "$cmake links $target: $room may use only: ${may_use[$room]:-nothing of the engine}"
        fi
    done < <(grep -v '^[[:space:]]*#' "$cmake" | grep -oE 'softhca_engine_[a-z_]+' | sort -u)
done

if ((failures)); then
    echo "check-layers: $failures problem(s)" >&2
    exit 1
fi
echo "check-layers: ${#may_use[@]} rooms, every include and link points down"
