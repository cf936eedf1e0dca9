#!/usr/bin/env bash
# af_xdp ports between two hosts (tools/netns-pair.sh with SOFTHCA_PAIR_PORT=af_xdp): each
# engine's DPDK af_xdp port puts softhca's XDP program on its veth, which hands RoCEv2 to
# the port and everything else to the kernel. The kernel keeps the interface: TCP (the
# tools' side channels, a connection of its own) still works over it, and the kernel
# resolves the engines' destinations (ARP, and ND for the IPv6 GIDs) — the engines ask it
# (kernel_resolutions) and send no ARP of their own. Pingpongs with their data checks, perftest, UD and an SRQ
# at the veth's MTU 1500 (path MTU 1024) and over IPv6; RC under 1% loss, duplication
# and reordering; a 3500-byte veth gives path MTU 2048 (XDP on a veth takes frames of up
# to a page); a 9000-byte one is refused with the reason, and so is an interface with two
# receive queues (the port reads queue 0); `down` leaves no XDP program.
source "$(dirname "$0")/lib.sh"
here=$(cd "$(dirname "$0")" && pwd)
pair=${SOFTHCA_PREFIX}
trap 'pair_down "$pair"' EXIT
pair_hosts "$pair"
export SOFTHCA_PAIR_PORT=af_xdp

# up MTU [softhca up options]: a fresh pair of af_xdp ports.
up() {
    local mtu=$1
    shift
    SOFTHCA_PAIR_MTU=$mtu SOFTHCA_UP_ARGS="$*" pair_up "$pair"
}
server_status() { ip netns exec "$SERVER_NS" "$SOFTHCA" status --prefix "$SERVER_PREFIX"; }
client_status() { ip netns exec "$CLIENT_NS" "$SOFTHCA" status --prefix "$CLIENT_PREFIX"; }
xdp_on() { ip -n "$1" link show "$2" | grep -q "xdp"; }

up 1500
grep -qE "ACTIVE .* mtu 1500 active_mtu 1024 pmd net_af_xdp" <<<"$(server_status)" ||
    fail "not an af_xdp port at mtu 1500: $(server_status)"
xdp_on "$SERVER_NS" "${pair}va" || fail "no XDP program on ${pair}va"
# A TCP connection across the veth: the kernel still has the interface's other traffic.
port=$(free_port)
ip netns exec "$SERVER_NS" timeout 10 python3 -c "
import socket; s = socket.create_server(('198.18.2.1', $port)); c, _ = s.accept(); c.sendall(b'kernel')" &
tcp_server=$!
wait_until "ip netns exec '$SERVER_NS' ss -ltn | grep -q ':$port '" 10 || fail "no TCP listener"
reply=$(ip netns exec "$CLIENT_NS" timeout 10 python3 -c "
import socket; print(socket.create_connection(('198.18.2.1', $port)).recv(16).decode())") || true
wait "$tcp_server" || true
[ "$reply" = kernel ] || fail "the kernel lost the interface's other traffic (TCP: '$reply')"
"$here/test_pingpong.sh" ibv_rc_pingpong 1 4096 65536 1048576 || fail "ibv_rc_pingpong over af_xdp"
"$here/test_pingpong.sh" ibv_ud_pingpong 1024 || fail "ibv_ud_pingpong over af_xdp"
"$here/test_pingpong.sh" ibv_srq_pingpong 4096 65536 || fail "ibv_srq_pingpong over af_xdp"
# One packet, a few and many (every size on the shared engine: test_perftest.sh).
for tool in ib_write_bw ib_read_bw ib_send_bw ib_atomic_bw; do
    PERFTEST_SIZES="2 4096 1048576" "$here/test_perftest.sh" "$tool" | tail -1 ||
        fail "$tool over af_xdp"
done
GID_INDEX=2 "$here/test_pingpong.sh" ibv_rc_pingpong 4096 65536 ||
    fail "ibv_rc_pingpong over the IPv6 GIDs (ND by the kernel)"
for side in server client; do
    counters=$("${side}_status" | grep -m1 "counters:")
    grep -q " arp_requests 0 " <<<"$counters" || fail "$side engine sent ARP itself: $counters"
    grep -q " nd_solicitations 0 " <<<"$counters" || fail "$side engine sent ND itself: $counters"
    grep -q "rx_bad_icrc 0 rx_malformed 0" <<<"$counters" || fail "$side: bad packets: $counters"
done
grep -qE " kernel_resolutions [1-9]" <<<"$(client_status)" ||
    fail "the client engine never asked the kernel to resolve: $(client_status)"
echo "af_xdp, MTU 1500: pingpongs, perftest, IPv6; ARP and ND left to the kernel"

up 1500 --faults drop=0.01,dup=0.01,reorder=0.01,seed=23
PINGPONG_LOSSY=1 "$here/test_pingpong.sh" ibv_rc_pingpong 4096 65536 ||
    fail "ibv_rc_pingpong -c over af_xdp under faults"
PERFTEST_SIZE=65536 "$here/test_perftest.sh" ib_write_bw | tail -1 ||
    fail "ib_write_bw over af_xdp under faults"

up 3500
grep -qE "ACTIVE .* mtu 3500 active_mtu 2048 " <<<"$(server_status)" ||
    fail "a 3500-byte veth: $(server_status)"
"$here/test_pingpong.sh" ibv_rc_pingpong 65536 1048576 -- -m 2048 ||
    fail "ibv_rc_pingpong at path MTU 2048 over af_xdp"

pair_down "$pair"
xdp_on "$SERVER_NS" "${pair}va" 2>/dev/null && fail "down left the XDP program on ${pair}va"
ip netns add "$pair-c"
# (A refused `up` leaves its engine.log in the instance's run folder: removed here too.)
trap 'ip netns del "$pair-c" 2>/dev/null || true; rm -rf "${SOFTHCA_RUN_ROOT:-/run/softhca}/${pair}c"' EXIT
# refused IFACE WHAT: an af_xdp port on IFACE (in $pair-c) does not come up; its
# refusal in $out.
refused() {
    out=$(ip netns exec "$pair-c" "$SOFTHCA" up --prefix "${pair}c" \
        --port "net_af_xdp0,iface=$1@198.18.2.5" 2>&1) || return 0
    ip netns exec "$pair-c" "$SOFTHCA" down --prefix "${pair}c" >/dev/null 2>&1
    fail "af_xdp on $2 came up: $out"
}
ip -n "$pair-c" link add "${pair}j0" mtu 9000 type veth peer name "${pair}j1" mtu 9000
ip -n "$pair-c" link set "${pair}j0" up
ip -n "$pair-c" link set "${pair}j1" up
refused "${pair}j0" "a 9000-byte veth"
grep -q "MTU" <<<"$out" || fail "the refusal does not name the MTU: $out"
# An interface with two receive queues: RSS would take RoCE flows past the port's queue.
ip -n "$pair-c" link add "${pair}q0" numrxqueues 2 numtxqueues 2 type veth peer name \
    "${pair}q1" numrxqueues 2 numtxqueues 2
ip -n "$pair-c" link set "${pair}q0" up
ip -n "$pair-c" link set "${pair}q1" up
refused "${pair}q0" "an interface with two receive queues"
grep -q "2 receive queues" <<<"$out" || fail "the refusal does not name the queues: $out"
echo PASS
