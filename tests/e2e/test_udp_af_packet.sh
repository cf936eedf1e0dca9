#!/usr/bin/env bash
# softhca's two kinds of port talk to each other: in one namespace, an engine on a DPDK
# af_packet port (its own MAC and ARP, 198.18.15.3 on a veth into a bridge) and an engine
# on a kernel UDP socket port bound to the bridge's address (198.18.15.1, the kernel's
# stack). The DPDK side numbers its IPv4 packets; the UDP side cannot see those numbers
# and solves for them in its ICRC check. RC, UD and SRQ pingpongs and perftest's RC
# bandwidth tools run both ways; neither side may see a bad ICRC or a malformed packet,
# and the af_packet side receives the udp side's GSO runs as numbered packets.
source "$(dirname "$0")/lib.sh"
here_dir=$(cd "$(dirname "$0")" && pwd)
ns=${SOFTHCA_PREFIX}
dpdk=${SOFTHCA_PREFIX}d udp=${SOFTHCA_PREFIX}u
cleanup() {
    ip netns exec "$ns" "$SOFTHCA" down --prefix "$dpdk" >/dev/null 2>&1 || true
    ip netns exec "$ns" "$SOFTHCA" down --prefix "$udp" >/dev/null 2>&1 || true
    ip netns del "$ns" 2>/dev/null || true
}
trap cleanup EXIT
cleanup
ip netns add "$ns"
n="ip -n $ns"
$n link set lo up
$n link add "${ns}br" type bridge
$n link add "${ns}v0" type veth peer name "${ns}v1"
$n link set "${ns}v1" master "${ns}br"
for l in br v0 v1; do $n link set "${ns}$l" up; done
$n addr add 198.18.15.1/24 dev "${ns}br"
# The udp port sends a message's packets as one UDP GSO buffer. Over a veth or a bridge
# such a buffer is not cut into packets unless an interface on the way lacks UDP
# segmentation, and an af_packet port would see it whole (the kernel's UDP sockets take
# it whole or cut it, a NIC cuts it): the bridge cuts it here, numbering the packets'
# IPv4 identification 0, 1, 2, ... as a NIC does, so the af_packet side's strict ICRC check
# tests the ICRCs the udp port computed for those numbers.
ip netns exec "$ns" ethtool -K "${ns}br" tx-udp-segmentation off >/dev/null ||
    fail "ethtool could not turn off the bridge's UDP segmentation"
ip netns exec "$ns" "$SOFTHCA" up --prefix "$dpdk" \
    --port "net_af_packet0,iface=${ns}v0@198.18.15.3" >/dev/null || fail "af_packet engine"
ip netns exec "$ns" "$SOFTHCA" up --prefix "$udp" --port udp@198.18.15.1 >/dev/null ||
    fail "udp engine"
wait_until "ip netns exec $ns $SOFTHCA status --prefix $udp | grep -q 'port 1: ACTIVE'" 10 ||
    fail "udp port not active"

# Each pair: the server on one kind of port, the client on the other (TCP side channel
# over the bridge address).
export SERVER_NS=$ns CLIENT_NS=$ns SERVER_ADDR=198.18.15.1
for direction in "$udp $dpdk" "$dpdk $udp"; do
    read -r server client <<<"$direction"
    export SERVER_PREFIX=$server CLIENT_PREFIX=$client
    export SERVER_DEV=${server}0 CLIENT_DEV=${client}0
    echo "server on $server, client on $client"
    "$here_dir/test_pingpong.sh" ibv_rc_pingpong 4096 65536 || fail "ibv_rc_pingpong"
    "$here_dir/test_pingpong.sh" ibv_ud_pingpong 1024 || fail "ibv_ud_pingpong"
    "$here_dir/test_pingpong.sh" ibv_srq_pingpong 4096 || fail "ibv_srq_pingpong"
    for tool in ib_write_bw ib_read_bw ib_send_bw; do
        PERFTEST_SIZE=65536 "$here_dir/test_perftest.sh" "$tool" | tail -1 || fail "$tool"
    done
done
for prefix in "$dpdk" "$udp"; do
    counters=$(ip netns exec "$ns" "$SOFTHCA" status --prefix "$prefix" | grep -m1 "counters:")
    echo "$prefix $counters"
    grep -q "rx_bad_icrc 0 rx_malformed 0" <<<"$counters" || fail "bad packets at $prefix"
done
echo PASS
