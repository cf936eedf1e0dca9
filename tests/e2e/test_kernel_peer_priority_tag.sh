#!/usr/bin/env bash
# softhca with --priority-tag against the Linux kernel's RDMA stack (Soft-RoCE in a QEMU
# guest, kernel_peer.sh): every RoCE frame softhca sends carries an 802.1Q priority tag
# (VID 0, PCP = the QP's SL), as a RoCE NIC in PCP mode sends it. Linux takes a VID 0 frame
# as untagged (802.1Q priority tagging) once its NIC lets it through: the guest's NIC has
# no VLAN filter here (KP_GUEST_NO_VLAN_FILTER; with one, and no 8021q module to register
# VID 0, the NIC drops every tagged frame and RC ends in RETRY_EXC_ERR). rxe must accept
# every frame: ibv_rc_pingpong and ibv_ud_pingpong on SL 3 (-l 3, -c checks the data) and
# ib_send_bw on SL 3 run with Linux and then softhca as the server; rxe sends untagged and
# softhca takes those. A capture of softhca's port (what it sends) shows every request
# and ACK with priority 3 in a VID 0 tag.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/kernel_peer.sh"
capture=$(mktemp -d)
trap 'kp_down; rm -rf "$capture"' EXIT
KP_GUEST_NO_VLAN_FILTER=1 kp_up "$SOFTHCA_PREFIX" "${KP_SUBNET:-13}" --priority-tag --pcap "$capture/port"

exchange() {
    kp_tool "$@"
    local side=$1 tool=$2
    shift 2
    [ -n "$KP_RESULT" ] || fail "$tool $*: no result: $KP_OUT"
    echo "$tool $* tagged ($side server): $KP_RESULT"
}

for side in linux softhca; do
    exchange "$side" ibv_rc_pingpong -l 3 -s 4096 -n 100
    exchange "$side" ibv_rc_pingpong -l 3 -s 65536 -n 50
    exchange "$side" ibv_ud_pingpong -l 3 -s 1024 -n 100
    exchange "$side" ib_send_bw -S 3 -s 65536 -n 200
done
kp_check_received # prints the counters; fails on a bad packet
received=$(kp_softhca_status | sed -n 's/.*counters: rx_packets \([0-9]*\).*/\1/p' | head -1)
[ "${received:-0}" -ge 1000 ] || fail "softhca received only ${received:-0} packets from the guest"
ip netns exec "$KP_NS" "$SOFTHCA" down --prefix "$KP_NS" >/dev/null # flushes the capture

# "count source priority VID opcode" rows of the RoCE frames softhca sent.
frames=$(tshark -r "$capture/port-$KP_DEV.pcap" -Y "udp.dstport == 4791" -T fields \
    -e ip.src -e vlan.priority -e vlan.id -e infiniband.bth.opcode 2>/dev/null | sort | uniq -c)
echo "RoCE frames softhca sent (count, source, priority, VLAN ID, opcode):"
echo "$frames"
sent=$(awk '{s += $1} END {print s + 0}' <<<"$frames")
tagged=$(awk -v me="$KP_SOFTHCA_ADDR" '$2 == me && $3 == 3 && $4 == 0 {s += $1} END {print s + 0}' \
    <<<"$frames")
echo "softhca sent $sent RoCE frames, $tagged of them from $KP_SOFTHCA_ADDR with priority 3" \
    "in a VID 0 tag; it received $received packets from the guest, untagged"
[ "$sent" -ge 1000 ] && [ "$tagged" -eq "$sent" ] ||
    fail "softhca's frames on SL 3 did not all carry priority 3 in a VID 0 tag"
# RC requests (SEND_FIRST, 0), RC ACKs (17) and UD sends (SEND_ONLY, 100), all tagged.
for opcode in 0 17 100; do
    awk -v op="$opcode" '$5 == op {found = 1} END {exit !found}' <<<"$frames" ||
        fail "no tagged frame of opcode $opcode from softhca"
done
echo PASS
