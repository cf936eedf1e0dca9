#!/usr/bin/env bash
# One engine on the host serving a program in a container. The container is stood in for
# by new mount and PID namespaces (unshare) with views of their own: an empty /run, an
# empty /etc/libibverbs.d and /dev/infiniband and the build tree hidden, into which only
# what `softhca env --container` names is bind-mounted (-v) or made (--device), with its
# environment (-e). There an
# unmodified ibv_devices finds the host engine's devices and an ib_write_bw client
# reaches a server on the host; the engine sees the container's process under its host
# pid and frees its context when it ends.
#   test_container.sh BUILD_DIR
source "$(dirname "$0")/lib.sh"
build=${1:?build directory}
command -v unshare >/dev/null || fail "unshare not found (util-linux)"
server=
trap 'kill $server 2>/dev/null || true; "$SOFTHCA" down >/dev/null 2>&1 || true' EXIT
"$SOFTHCA" up >/dev/null || fail "softhca up failed"
options=$("$SOFTHCA" env --container) || fail "softhca env --container failed"
echo "options: $options"
read -ra words <<<"$options"
binds=() envs=() nodes=()
for ((i = 0; i < ${#words[@]}; i += 2)); do
    case "${words[i]}" in
    -v) binds+=("${words[i + 1]}") ;;
    -e) envs+=("${words[i + 1]}") ;;
    --device) nodes+=("${words[i + 1]}:$(stat -c '%t:%T' "${words[i + 1]}")") ;;
    *) fail "unexpected option ${words[i]} in: $options" ;;
    esac
done
[ ${#binds[@]} -ge 3 ] && [ ${#envs[@]} -eq 2 ] && [ ${#nodes[@]} -eq 2 ] ||
    fail "too few mounts, devices or variables: $options"

port=$(free_port)
"$SOFTHCA" exec -- timeout 60 ib_write_bw -d "${SOFTHCA_PREFIX}0" -p "$port" -n 200 >/dev/null 2>&1 &
server=$!
wait_listening "$port" || fail "ib_write_bw server did not start"

# The container's side: what a runtime does with those options, then the program.
container=$(cat <<'INNER'
set -euo pipefail
build=$1 port=$2 prefix=$3
shift 3
binds=() nodes=()
while [ "$1" != -- ]; do binds+=("$1"); shift; done
shift
while [ "$1" != -- ]; do nodes+=("$1"); shift; done
shift
envs=("$@")
mount --make-rprivate /
keep=$(mktemp -d)
n=0
for b in "${binds[@]}"; do
    IFS=: read -r src dst mode <<<"$b"
    if [ -d "$src" ]; then mkdir "$keep/$n"; else touch "$keep/$n"; fi
    mount --bind "$src" "$keep/$n"
    n=$((n + 1))
done
# Views of its own: nothing of the host's /run, libibverbs.d or build tree.
mount -t tmpfs none /run
mount -t tmpfs none /etc/libibverbs.d
mount -t tmpfs none "$build"
mkdir -p /dev/infiniband
mount -t tmpfs none /dev/infiniband
left=$(find /run/softhca /etc/libibverbs.d "$build" /dev/infiniband -mindepth 1 2>/dev/null || true)
[ -z "$left" ] || { echo "own views not empty: $left"; exit 1; }
n=0
for b in "${binds[@]}"; do
    IFS=: read -r src dst mode <<<"$b"
    if [ -d "$keep/$n" ]; then mkdir -p "$dst"; else mkdir -p "$(dirname "$dst")"; touch "$dst"; fi
    mount --bind "$keep/$n" "$dst"
    [ "$mode" = ro ] && mount -o remount,bind,ro "$dst"
    n=$((n + 1))
done
# --device: the node, with the host's numbers (hexadecimal from stat).
for n in "${nodes[@]}"; do
    IFS=: read -r path major minor <<<"$n"
    mknod -m 666 "$path" c $((16#$major)) $((16#$minor))
done
for e in "${envs[@]}"; do export "${e?}"; done
echo "pid in the container: $$"
ibv_devices
timeout 60 ib_write_bw -d "${prefix}1" -p "$port" -n 200 127.0.0.1
INNER
)
out=$(unshare --mount --pid --fork --mount-proc bash -c "$container" container "$build" "$port" \
    "$SOFTHCA_PREFIX" "${binds[@]}" -- "${nodes[@]}" -- "${envs[@]}" 2>&1) || fail "in the container: $out"
wait "$server" || fail "ib_write_bw server on the host failed"
server=
grep -q "pid in the container: 1$" <<<"$out" || fail "not in a PID namespace of its own: $out"
grep -qw "${SOFTHCA_PREFIX}0" <<<"$out" && grep -qw "${SOFTHCA_PREFIX}1" <<<"$out" ||
    fail "ibv_devices in the container did not list the host's devices: $out"
grep -qE "^ +65536 +200 " <<<"$out" || fail "no ib_write_bw result in the container: $out"
echo "in the container: $(grep -E '^ +65536 +200 ' <<<"$out")"
wait_until "\"$SOFTHCA\" status | grep -q '^contexts 0 '" 10 ||
    fail "the container's context was not freed: $("$SOFTHCA" status)"
echo PASS
