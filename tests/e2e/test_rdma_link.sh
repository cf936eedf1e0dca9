#!/usr/bin/env bash
# `rdma link add` and `rdma link delete` (iproute2) on an engine's devices, as users make
# rxe and siw devices: an engine on the built-in wire inside a network namespace of this
# test's own gets a device on each end of a veth pair (198.18.9.0/24); the rdma tool,
# ibv_devices and the device tree list them with their netdev and the interface's address
# as GID; ibv_rc_pingpong runs between them and their port counters grow; the kernel's
# refusals (another user, a name in use, an interface already a port's or missing, another
# link type, the engine's own devices); deleting a device whose context is open gives that
# context IBV_EVENT_DEVICE_FATAL (ibv_asyncwatch) and takes the device from every listing,
# its name free again; and the engine serves its own devices throughout.
source "$(dirname "$0")/lib.sh"
ns="shlk$$"
SERVER_NS=$ns # free_port and wait_listening look there
watch_out=$(mktemp)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
      ip netns exec "$ns" "$SOFTHCA" down >/dev/null 2>&1 || true
      ip netns del "$ns" 2>/dev/null || true; rm -f "$watch_out"' EXIT
ip netns add "$ns"
ip -n "$ns" link set lo up
ip -n "$ns" link add shla type veth peer name shlb
ip -n "$ns" link add shlc type veth peer name shld
for i in shla shlb shlc; do ip -n "$ns" link set "$i" up; done
ip -n "$ns" addr add 198.18.9.1/24 dev shla
ip -n "$ns" addr add 198.18.9.2/24 dev shlb
in_ns() { ip netns exec "$ns" "$@"; }
sx() { in_ns "$SOFTHCA" exec -- "$@"; }

in_ns "$SOFTHCA" up >/dev/null || fail "softhca up failed"
tree=$(in_ns "$SOFTHCA" env | sed -n 's/^export SYSFS_PATH=//p')
a=${SOFTHCA_PREFIX}a b=${SOFTHCA_PREFIX}b

sx rdma link add "$a" type softhca netdev shla || fail "rdma link add $a on shla failed"
sx rdma link add "$b" type softhca netdev shlb || fail "rdma link add $b on shlb failed"
out=$(sx rdma link show) || fail "rdma link show: $out"
echo "$out"
grep -q "^link $a/1 state ACTIVE physical_state LINK_UP netdev shla" <<<"$out" ||
    fail "rdma link show: no ACTIVE $a/1 on shla"
grep -q "^link $b/1 state ACTIVE physical_state LINK_UP netdev shlb" <<<"$out" ||
    fail "rdma link show: no ACTIVE $b/1 on shlb"
grep -q "^link ${SOFTHCA_PREFIX}0/1 state ACTIVE" <<<"$out" || fail "the engine's own devices went"
sx ibv_devices | grep -qw "$a" || fail "ibv_devices does not list $a"
out=$(sx ibv_devinfo -v -d "$b") || fail "ibv_devinfo -d $b: $out"
grep -qE "GID\[\s*0\]:\s+::ffff:198\.18\.9\.2, RoCE v2" <<<"$out" || fail "$b has no GID 198.18.9.2"
[ "$(cat "$tree/class/infiniband/$a/ports/1/gid_attrs/ndevs/0")" = shla ] ||
    fail "$a's GID 0 is not on shla"

# Traffic between the two new devices, over the veth.
sent_before=$(cat "$tree/class/infiniband/$b/ports/1/counters/port_xmit_packets")
port=$(free_port)
sx ibv_rc_pingpong -d "$a" -g 0 -p "$port" -n 200 -s 4096 >"$watch_out" 2>&1 &
pids+=($!)
wait_listening "$port" || fail "the pingpong server on $a does not listen: $(cat "$watch_out")"
out=$(sx ibv_rc_pingpong -d "$b" -g 0 -p "$port" -n 200 -s 4096 198.18.9.1 2>&1) ||
    fail "ibv_rc_pingpong between $a and $b: $out $(cat "$watch_out")"
echo "$out"
wait "${pids[0]}" || fail "the pingpong server on $a failed: $(cat "$watch_out")"
pids=()
wait_until "[ \$(cat '$tree/class/infiniband/$b/ports/1/counters/port_xmit_packets') -ge \
    $((sent_before + 200)) ]" 5 || fail "$b's port_xmit_packets did not grow by 200"

# The kernel's refusals.
refused() { # WHAT ERRNO-TEXT COMMAND...: the command fails saying ERRNO-TEXT
    local what=$1 want=$2
    shift 2
    local said
    if said=$("$@" 2>&1); then fail "$what succeeded"; fi
    grep -qF "$want" <<<"$said" || fail "$what: '$said', expected '$want'"
}
refused "link add of a name in use" "File exists" sx rdma link add "$a" type softhca netdev shlc
refused "link add on an interface that has a port" "File exists" \
    sx rdma link add "${SOFTHCA_PREFIX}x" type softhca netdev shla
refused "link add on a missing interface" "No such device" \
    sx rdma link add "${SOFTHCA_PREFIX}x" type softhca netdev nosuch0
refused "link add of type rxe" "Invalid argument" \
    sx rdma link add "${SOFTHCA_PREFIX}x" type rxe netdev shlc
refused "link add of type rxe on a missing interface" "No such device" \
    sx rdma link add "${SOFTHCA_PREFIX}x" type rxe netdev nosuch0
refused "link add of a name with /" "Invalid argument" \
    sx rdma link add "x/y" type softhca netdev shlc
refused "link add of a name too long for its node" "Invalid argument" \
    sx rdma link add "$(printf 'n%.0s' $(seq 57))" type softhca netdev shlc
refused "link add on an interface with no address" "Cannot assign requested address" \
    sx rdma link add "${SOFTHCA_PREFIX}x" type softhca netdev shlc
refused "link delete of the engine's own device" "Invalid argument" \
    sx rdma link delete "${SOFTHCA_PREFIX}0"
if id nobody >/dev/null 2>&1; then
    ip -n "$ns" addr add 198.18.9.3/24 dev shlc
    refused "link add by another user" "Operation not permitted" \
        in_ns setpriv --reuid=65534 --regid=65534 --clear-groups "$SOFTHCA" exec -- \
        rdma link add "${SOFTHCA_PREFIX}x" type softhca netdev shlc
    refused "link delete by another user" "Operation not permitted" \
        in_ns setpriv --reuid=65534 --regid=65534 --clear-groups "$SOFTHCA" exec -- \
        rdma link delete "$a"
fi

dev_index() { sx rdma dev show | sed -n "s/^\([0-9]*\): $1:.*/\1/p"; }
first_index=$(dev_index "$a")
[ -n "$first_index" ] && [ "$first_index" != "$(dev_index "$b")" ] || fail "rdma dev show: $a's index"
# Delete with a context open: it gets DEVICE_FATAL, and the device is gone everywhere.
sx stdbuf -oL ibv_asyncwatch -d "$a" >"$watch_out" 2>&1 &
pids+=($!)
wait_until "grep -q 'async event FD' '$watch_out'" 20 ||
    fail "ibv_asyncwatch did not start: $(cat "$watch_out")"
sx rdma link delete "$a" || fail "rdma link delete $a failed"
wait_until "grep -q 'IBV_EVENT_DEVICE_FATAL' '$watch_out'" 10 ||
    fail "the open context got no DEVICE_FATAL: $(cat "$watch_out")"
out=$(sx rdma link show)
! grep -q "^link $a/" <<<"$out" || fail "rdma link show still lists $a: $out"
! sx ibv_devices | grep -qw "$a" || fail "ibv_devices still lists $a"
[ ! -e "$tree/class/infiniband/$a" ] || fail "$a is still in the device tree"
[ ! -e "/dev/infiniband/${a}_uverbs" ] || fail "/dev/infiniband/${a}_uverbs is still there"
! in_ns "$SOFTHCA" status | grep -q "^device $a " || fail "status still shows $a"
refused "ibv_devinfo of the deleted device" "wasn't found" sx ibv_devinfo -d "$a"
refused "link delete of a deleted device" "Wrong device name" sx rdma link delete "$a"

# The name and the interface are free again; the engine's own devices still serve.
sx rdma link add "$a" type softhca netdev shla || fail "rdma link add $a again failed"
# A new device: a new index, as the kernel never gives a deleted device's to another.
[ "$(dev_index "$a")" != "$first_index" ] || fail "$a again has the deleted device's index"
# An rdma_cm listener on the device: DEVICE_REMOVAL when it goes (rping says so).
sx rping -s -a 198.18.9.1 -p 7174 -C 1 -v >"$watch_out" 2>&1 &
pids+=($!)
wait_until "sx rdma resource show cm_id | grep -q 'state LISTEN'" 10 ||
    fail "rping's listener is not bound: $(sx rdma resource show cm_id)"
sx rdma link delete "$a" || fail "rdma link delete $a with a listener failed"
wait_until "grep -q 'device removal' '$watch_out'" 10 ||
    fail "the listener got no DEVICE_REMOVAL: $(cat "$watch_out")"
sx rdma link add "$a" type softhca netdev shla || fail "rdma link add $a a third time failed"
sx ibv_devinfo -d "$a" | grep -qE "state:\s+PORT_ACTIVE" || fail "$a again is not ACTIVE"
sx rdma link delete "$a" || fail "rdma link delete $a again failed"
sx rdma link delete "$b" || fail "rdma link delete $b failed"
port=$(free_port)
sx ibv_rc_pingpong -d "${SOFTHCA_PREFIX}0" -g 0 -p "$port" -n 50 >/dev/null 2>&1 &
pids+=($!)
wait_listening "$port" || fail "the pingpong server on ${SOFTHCA_PREFIX}0 does not listen"
sx ibv_rc_pingpong -d "${SOFTHCA_PREFIX}1" -g 0 -p "$port" -n 50 127.0.0.1 >/dev/null 2>&1 ||
    fail "the engine's own devices no longer serve a pingpong"
wait "${pids[-1]}" || fail "the pingpong server on ${SOFTHCA_PREFIX}0 failed"

# An engine on kernel UDP socket ports adds ports of its kind: sockets on the interface's
# addresses, the kernel's stack between them.
in_ns "$SOFTHCA" down >/dev/null
# Every address of the interface gets a socket, and a delete closes them all.
ip -n "$ns" -6 addr add 2001:2:0:9::1/64 dev shla nodad
ip -n "$ns" -6 addr add 2001:2:0:9::11/64 dev shla nodad
in_ns "$SOFTHCA" up --port udp@127.0.0.1 >/dev/null || fail "softhca up on a udp port failed"
sx rdma link add "$a" type softhca netdev shla || fail "rdma link add $a (udp) failed"
sx rdma link add "$b" type softhca netdev shlb || fail "rdma link add $b (udp) failed"
in_ns "$SOFTHCA" status | grep -q "^device $a port 1: ACTIVE ipv4 198.18.9.1 .*pmd kernel udp" ||
    fail "$a is not a udp port on 198.18.9.1: $(in_ns "$SOFTHCA" status | grep "^device")"
port=$(free_port)
sx ibv_rc_pingpong -d "$a" -g 0 -p "$port" -n 100 -s 4096 >"$watch_out" 2>&1 &
pids+=($!)
wait_listening "$port" || fail "the pingpong server on $a (udp) does not listen"
out=$(sx ibv_rc_pingpong -d "$b" -g 0 -p "$port" -n 100 -s 4096 198.18.9.1 2>&1) ||
    fail "ibv_rc_pingpong between $a and $b (udp): $out $(cat "$watch_out")"
echo "$out"
wait "${pids[-1]}" || fail "the pingpong server on $a (udp) failed: $(cat "$watch_out")"
sx rdma link delete "$a" || fail "rdma link delete $a (udp) failed"
# Its sockets are closed: the addresses' port 4791 is free again for a new one.
! in_ns ss -Hulpn "sport = :4791" | grep -qE "2001:2:0:9::1?1\]" ||
    fail "a socket of the deleted $a is still bound: $(in_ns ss -Hulpn "sport = :4791")"
sx rdma link add "$a" type softhca netdev shla || fail "rdma link add $a (udp) again failed"
sx rdma link delete "$a" || fail "rdma link delete $a (udp) again failed"
sx ibv_devinfo -d "$b" | grep -qE "state:\s+PORT_ACTIVE" || fail "$b went with $a"
echo PASS
