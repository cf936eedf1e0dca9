#!/usr/bin/env bash
# The one direction of dependencies, at two levels. The top-level parts (transport,
# device_interface, provider, kernel_shim, hca_engine, tools, fuzz): fails when a part
# includes a header of, names a path into, or links a target of a part it may not use,
# as docs/architecture.md's table "Dependency direction" states (read from there), or
# when code sits in a top-level folder the table does not name. The engine's rooms:
# fails when a file under hca_engine/src/ includes a header of a room its own room may
# not use, when a room's CMakeLists links a room it may not use, when a file sits outside
# every room, or when DPDK or liburing appear outside their port code (ports/xdp holds
# the af_xdp ports' BPF program, C, and nothing else). CI runs it (tools/run-tests.sh).
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

# A CMakeLists without its comment lines, into $code (no subprocess: this script runs
# often, in CI and many times in its own test).
read_cmake() {
    code=""
    local line
    while IFS= read -r line || [[ -n $line ]]; do
        [[ $line =~ ^[[:space:]]*# ]] || code+=$line$'\n'
    done <"$1"
}
# Each distinct match of the regex $2 in the text $1, one a line, into $matches.
distinct_matches() {
    local rest=$1 pattern=$2
    local -A seen=()
    matches=""
    while [[ $rest =~ $pattern ]]; do
        local match=${BASH_REMATCH[0]}
        [[ -n ${seen[$match]+set} ]] || matches+=$match$'\n'
        seen[$match]=1
        rest=${rest#*"$match"}
    done
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
# Every include, quoted or bracketed, as FILE:#include ..., from one grep.
include_line='^[[:space:]]*#[[:space:]]*include[[:space:]]*["<]([^">]+)[">]'
while IFS= read -r line; do
    file=${line%%:*}
    [[ ${line#*:} =~ $include_line ]] || continue
    header=${BASH_REMATCH[1]}
    relative=${file#"$src"/}
    room=${relative%/*}
    [[ -z ${may_use[$room]+set} ]] && continue
    if [[ $room != ports/dpdk && $header == rte_* ]]; then
        fail "$file includes DPDK: DPDK belongs in ports/dpdk only"
    fi
    if [[ $room != ports/udp && $header == liburing* ]]; then
        fail "$file includes liburing: it belongs in ports/udp only"
    fi
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
done < <(grep -rHE --include='*.hpp' --include='*.cpp' "$include_line" "$src" | sort)

# The build states the same direction: a room's target links only the rooms it may use
# (softhca_engine_<room>, '/' as '_'), named in full, and only in its own CMakeLists;
# DPDK and liburing are linked only by their ports.
for room in "${!may_use[@]}"; do
    cmake=$src/$room/CMakeLists.txt
    if [[ ! -f $cmake ]]; then
        fail "$room has no CMakeLists.txt"
        continue
    fi
    read_cmake "$cmake"
    if [[ $code =~ softhca_engine_[a-z_]*\$ ]]; then
        fail "$cmake builds a room's target name from a variable: name it in full"
    fi
    if [[ $room != ports/dpdk && $code =~ PkgConfig::DPDK|rte_ ]]; then
        fail "$cmake links DPDK: only ports/dpdk may"
    fi
    if [[ $room != ports/udp && $code == *PkgConfig::URING* ]]; then
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
    done < <(distinct_matches "$code" 'softhca_engine_[a-z_]+' && printf %s "$matches")
done
# The engine's own CMakeLists only adds the rooms: no links of its own.
if grep -v '^[[:space:]]*#' hca_engine/CMakeLists.txt | grep -qE 'target_link_libraries|link_libraries'; then
    fail "hca_engine/CMakeLists.txt links targets: each room's links belong in its own CMakeLists"
fi

# The top-level parts, read from the one table that states them: "Dependency direction"
# in docs/architecture.md. Its third column names, in backquotes, the parts each part may
# use; a part uses another by including its headers (softhca/<part>/...), by a path into
# its folder, or by naming its targets in a CMakeLists. tests/ may use every part.
declare -A part_may_use
in_table=""
while IFS= read -r row; do
    [[ $row == "### Dependency direction" ]] && { in_table=1; continue; }
    [[ -n $in_table && $row == "### "* ]] && break
    [[ -n $in_table && $row == "|"* ]] || continue
    IFS='|' read -r _ part _ uses _ <<<"$row"
    [[ $part =~ ^[[:space:]]*\`([a-z_]+)/\` ]] || continue
    part=${BASH_REMATCH[1]}
    distinct_matches "$uses" '`[a-z_]+/`'
    matches=${matches//\`/}
    matches=${matches//\//}
    part_may_use[$part]=${matches//$'\n'/ }
done <docs/architecture.md
[[ ${#part_may_use[@]} -gt 0 ]] ||
    { echo "check-layers: no part table under 'Dependency direction' in docs/architecture.md" >&2; exit 1; }
part_allowed() { # part_allowed FROM TO
    [[ $1 == "$2" ]] && return 0
    local part
    for part in ${part_may_use[$1]}; do
        [[ $part == "$2" ]] && return 0
    done
    return 1
}
# Whose header a softhca/<name>/ include names, and whose target a CMake name is.
declare -A part_of_namespace=([transport]=transport [device_interface]=device_interface)
part_of_target() { # sets target
    case $1 in
    softhca_transport) target=transport ;;
    softhca_device_interface | softhca_device_registration) target=device_interface ;;
    softhca_provider) target=provider ;;
    softhca_preload) target=kernel_shim ;;
    softhca_engine_* | softhca-engine) target=hca_engine ;;
    *) target="" ;;
    esac
}
shopt -s globstar nullglob
for dir in */; do
    dir=${dir%/}
    [[ -n ${part_may_use[$dir]+set} || $dir == tests || $dir == build* ]] && continue
    code_files=("$dir"/**/*.{cpp,hpp,h,c})
    if ((${#code_files[@]})); then
        fail "$dir/ holds code but is no part of the table in docs/architecture.md"
    fi
done
for part in "${!part_may_use[@]}"; do
    [[ -d $part ]] || { fail "docs/architecture.md names $part/, which does not exist"; continue; }
    part_root=$(realpath "$part")
    # Every include of the part's code, as FILE:#include ..., from one grep.
    include_line='^[[:space:]]*#[[:space:]]*include[[:space:]]*["<]([^">]+)[">]'
    while IFS= read -r line; do
        file=${line%%:*}
        [[ ${line#*:} =~ $include_line ]] || continue
        header=${BASH_REMATCH[1]}
        if [[ $header == softhca/*/* ]]; then
            namespace=${header#softhca/}
            namespace=${namespace%%/*}
            target=${part_of_namespace[$namespace]-}
            if [[ -n $target ]] && ! part_allowed "$part" "$target"; then
                fail "$file ($part) includes $header ($target): $part may use only: ${part_may_use[$part]:-no other part}"
            fi
        elif [[ $header == */* && -e ${file%/*}/$header ]]; then
            resolved=$(realpath "${file%/*}/$header")
            if [[ $resolved != "$part_root"/* ]]; then
                fail "$file ($part) includes $header by a path out of $part/: include a part's headers as softhca/<part>/..."
            fi
        fi
    done < <(grep -rHE --include='*.cpp' --include='*.hpp' --include='*.h' --include='*.c' \
        "$include_line" "$part" | sort)
    # A link out of the part would carry another part's code in under a name of its own.
    while IFS= read -r link; do
        resolved=$(realpath -m "$link")
        if [[ $resolved != "$part_root"/* ]]; then
            fail "$link ($part) is a link out of $part/, to $resolved"
        fi
    done < <(find "$part" -type l)
    while IFS= read -r cmake; do
        read_cmake "$cmake"
        while IFS= read -r name; do
            part_of_target "$name"
            if [[ -n $target ]] && ! part_allowed "$part" "$target"; then
                fail "$cmake ($part) names $name ($target): $part may use only: ${part_may_use[$part]:-no other part}"
            fi
        done < <(distinct_matches "$code" 'softhca[_-][a-z_]+' && printf %s "$matches")
        for other in "${!part_may_use[@]}"; do
            path_into="(\\}|\\.\\.)/$other(/|[[:space:]]|\\)|\"|\$)"
            if [[ $code =~ $path_into ]] && ! part_allowed "$part" "$other"; then
                fail "$cmake ($part) names a path into $other/: $part may use only: ${part_may_use[$part]:-no other part}"
            fi
        done
    done < <(find "$part" -name CMakeLists.txt | sort)
done

if ((failures)); then
    echo "check-layers: $failures problem(s)" >&2
    exit 1
fi
echo "check-layers: ${#part_may_use[@]} parts and the engine's ${#may_use[@]} rooms, every include and link points down"
