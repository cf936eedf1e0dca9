#!/usr/bin/env bash
# The traffic class and congestion control on the wire, as Wireshark decodes them:
# two ib_send_bw flows with --tclass 104 (DSCP 26, AF31) into a shaped link
# with ECN marking and DCQCN on, each port captured (--pcap: with a shaped link, frames
# are written as they leave the link). tshark must find
#   on the sender's port: every request in DSCP 26 and ECN-capable, ECT(0) (binary 10),
#     and some marked Congestion Experienced (11) by the congested queue;
#   on the receiver's port: CNPs (BTH opcode 129) in DSCP 26, Not-ECT, one per QP at most
#     every 50 us, and ACKs in DSCP 26.
# Then a port's global traffic class (--traffic-class) on every QP's packets and in sysfs.
# The SL is not on a RoCEv2 wire (no VLAN tag here): it picks the VL inside the port.
# And with priority tags (--priority-tag): every RoCE frame carries an 802.1Q tag with
# VID 0 and the SL as its priority (tshark's vlan.priority), and an RC receive's
# completion reports the sender's SL (wc.sl; a UD receive's SL bits carry the frame's
# network header type instead, as on a ConnectX).
#   test_capture_qos.sh RC_VERBS_TEST
source "$(dirname "$0")/lib.sh"
rc_verbs_test=${1:?path to rc_verbs_test}
command -v tshark >/dev/null || fail "tshark is missing (tools/install-deps.sh installs it)"
dir=$(mktemp -d)
trap '"$SOFTHCA" down >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT

# ib_send_bw from device 1 to device 0 of the instance, with perftest options "$@".
send_bw() {
    local port server
    port=$(free_port)
    "$SOFTHCA" exec -- timeout 60 ib_send_bw -d "${SOFTHCA_PREFIX}0" -x 0 -p "$port" "$@" \
        >"$dir/server.out" 2>&1 &
    server=$!
    wait_listening "$port" || fail "ib_send_bw server did not start: $(cat "$dir/server.out")"
    "$SOFTHCA" exec -- timeout 60 ib_send_bw -d "${SOFTHCA_PREFIX}1" -x 0 -p "$port" "$@" \
        127.0.0.1 >"$dir/client.out" 2>&1 || fail "ib_send_bw $* failed: $(cat "$dir/client.out")"
    wait "$server" || fail "ib_send_bw $* server failed: $(cat "$dir/server.out")"
}

"$SOFTHCA" up --shape rate_mbps=2000,queue_kb=512 --ecn kmin_kb=16,kmax_kb=64,pmax=0.2 \
    --dcqcn ai_mbps=2,hai_mbps=20,b=524288 --pcap "$dir/cap" >/dev/null ||
    fail "softhca up with a capture, a shaped link and DCQCN failed"
send_bw --tclass=104 -q 2 -n 300 -s 65536
"$SOFTHCA" down >/dev/null # the captures are complete once the engine is gone

# Counts of each combination of tshark's fields "$@" and the BTH opcode in capture $1.
count_fields() {
    local capture=$1 field fields=()
    shift
    for field in "$@" infiniband.bth.opcode; do
        fields+=(-e "$field")
    done
    tshark -r "$capture" -Y "udp.dstport == 4791" -T fields "${fields[@]}" 2>/dev/null |
        sort | uniq -c
}
# "count dscp ecn opcode" rows.
decode() { count_fields "$1" ip.dsfield.dscp ip.dsfield.ecn; }
sender=$(decode "$dir/cap-${SOFTHCA_PREFIX}1.pcap")
receiver=$(decode "$dir/cap-${SOFTHCA_PREFIX}0.pcap")
echo "sender's port (count, DSCP, ECN, opcode):"
echo "$sender"
echo "receiver's port:"
echo "$receiver"
# Requests: SEND_FIRST (0), SEND_MIDDLE (1), SEND_LAST (2), SEND_ONLY (4).
awk '$4 <= 4 && ($2 != 26 || ($3 != 2 && $3 != 3)) {bad = 1} END {exit bad}' <<<"$sender" ||
    fail "a request left without DSCP 26 and an ECN-capable codepoint"
[ "$(awk '$4 <= 4 && $3 == 2 {s += $1} END {print s + 0}' <<<"$sender")" -gt 1000 ] ||
    fail "no requests in ECT(0)"
[ "$(awk '$4 <= 4 && $3 == 3 {s += $1} END {print s + 0}' <<<"$sender")" -gt 0 ] ||
    fail "the congested queue marked nothing Congestion Experienced"
cnps=$(awk '$4 == 129 {s += $1} END {print s + 0}' <<<"$receiver")
[ "$cnps" -gt 0 ] || fail "no CNP (opcode 129) on the receiver's port"
awk '$4 == 129 && ($2 != 26 || $3 != 0) {bad = 1} END {exit bad}' <<<"$receiver" ||
    fail "a CNP left outside DSCP 26 or ECN-capable"
awk '$4 == 17 && $2 != 26 {bad = 1} END {exit bad}' <<<"$receiver" ||
    fail "an ACK left outside the flow's DSCP"
echo "tshark: requests in DSCP 26 with ECT(0) and CE, $cnps CNPs back, ACKs in DSCP 26"

# A port's global traffic class (--traffic-class, as a ConnectX's "Global tclass"): the
# sysfs file NVSHMEM reads says it, and every QP's packets carry it, whatever their
# address vector says (here perftest's default, 0): 106 is DSCP 26 with ECT(0).
"$SOFTHCA" up --traffic-class 106 --pcap "$dir/global" >/dev/null ||
    fail "softhca up --traffic-class failed"
tc_file=$("$SOFTHCA" exec -- cat "/sys/class/infiniband/${SOFTHCA_PREFIX}1/tc/1/traffic_class")
[ "$tc_file" = "Global tclass=106" ] || fail "tc/1/traffic_class says '$tc_file'"
send_bw -n 100 -s 65536
"$SOFTHCA" down >/dev/null
sender=$(decode "$dir/global-${SOFTHCA_PREFIX}1.pcap")
receiver=$(decode "$dir/global-${SOFTHCA_PREFIX}0.pcap")
echo "with --traffic-class 106, sender's port:"
echo "$sender"
[ "$(awk '$4 <= 4 {s += $1} END {print s + 0}' <<<"$sender")" -gt 100 ] || fail "no requests captured"
awk '$4 <= 4 && ($2 != 26 || $3 != 2) {bad = 1} END {exit bad}' <<<"$sender" ||
    fail "a request left outside the global traffic class (DSCP 26, ECT(0))"
awk '$4 == 17 && ($2 != 26 || $3 != 2) {bad = 1} END {exit bad}' <<<"$receiver" ||
    fail "an ACK left outside the global traffic class"
"$SOFTHCA" up >/dev/null || fail "softhca up failed"
tc_file=$("$SOFTHCA" exec -- cat "/sys/class/infiniband/${SOFTHCA_PREFIX}1/tc/1/traffic_class")
[ -z "$tc_file" ] || fail "without --traffic-class tc/1/traffic_class says '$tc_file'"
echo "tshark: with a global traffic class every request and ACK in DSCP 26 with ECT(0); the tc file says it"
"$SOFTHCA" down >/dev/null

# Priority tags: the SL on the wire and in completions.
"$SOFTHCA" up --priority-tag --pcap "$dir/tagged" >/dev/null || fail "softhca up --priority-tag failed"
send_bw -S 5 -n 100 -s 65536
"$SOFTHCA" exec -- env SOFTHCA_PREFIX="$SOFTHCA_PREFIX" SOFTHCA_TEST_PRIORITY_TAG=1 timeout 60 \
    "$rc_verbs_test" "[sl]" >"$dir/rc.out" 2>&1 ||
    fail "an RC receive did not report the sender's SL 3 in wc.sl: $(tail -30 "$dir/rc.out")"
"$SOFTHCA" down >/dev/null
tagged() { count_fields "$1" vlan.priority vlan.id; }
sender=$(tagged "$dir/tagged-${SOFTHCA_PREFIX}1.pcap")
receiver=$(tagged "$dir/tagged-${SOFTHCA_PREFIX}0.pcap")
echo "with --priority-tag (count, priority, VLAN ID, opcode), sender's port:"
echo "$sender"
echo "receiver's port:"
echo "$receiver"
[ "$(awk '$2 == 5 && $3 == 0 && $4 <= 4 {s += $1} END {print s + 0}' <<<"$sender")" -ge 1500 ] ||
    fail "the SL 5 flow's requests did not carry priority 5 in a VID 0 tag"
# (The SL 3 SEND's ACK is on priority 3.)
[ "$(awk '$4 == 17 && $2 == 5 {s += $1} END {print s + 0}' <<<"$receiver")" -ge 1 ] &&
    awk '$4 == 17 && $2 != 5 && $2 != 3 {bad = 1} END {exit bad}' <<<"$receiver" ||
    fail "an ACK of the SL 5 flow left without priority 5"
[ "$(awk '$2 == 3 && $4 == 4 {s += $1} END {print s + 0}' <<<"$sender")" -ge 1 ] ||
    fail "the SEND on SL 3 did not carry priority 3"
echo "tshark: requests and ACKs of an SL 5 flow with priority 5 (VID 0), a SEND on SL 3 with priority 3 and wc.sl 3"
