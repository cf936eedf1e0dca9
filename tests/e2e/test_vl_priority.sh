#!/usr/bin/env bash
# Virtual lanes on a shaped link: a bulk RC flow on SL 0 fills a 2 Gb/s link's
# queue while a ping-pong (ib_send_lat) measures latency over the same link. The bulk flow
# uses a 1 KiB path MTU: the arbiter does not preempt the frame on the wire (IBTA 7.6.9),
# and a 4 KiB frame at 2 Gb/s would hold a ping up to 16 us (0.3 us at 100 Gb/s).
#   On SL 1, which the port's SL-to-VL table puts on VL 1, high priority in the VL
#   arbiter's tables, the ping keeps its latency: VL 1's queue never holds more than the
#   pings themselves, and of the delay the bulk queue adds to a ping on SL 0 the ping on
#   SL 1 sees under a tenth. (Not a bound against the idle link's latency: on two cores
#   the engine forwarding the bulk flow delays every packet by its poll rounds, which is
#   the machine's cost, not the link's queue.)
#   On SL 0, behind the bulk flow's queue in the same VL, it does not.
# Then a second bulk flow on SL 2 (VL 2): the low-priority table's weights (VL 0: 16,
# VL 2: 48) split the wire's bytes 1:3, within 10 %.
# Then one port given its own tables (PORT@), as the status shows.
# The status shows the VLs' queues and what each put on the wire. Both latency tools use
# completion events (-e), and the bulk sender too, so that on two cores the processes
# sleep instead of taking the CPU from each other: what is measured is the link's queue.
#   test_vl_priority.sh
source "$(dirname "$0")/lib.sh"
trap 'kill "${bulk_pids[@]}" 2>/dev/null || true; "$SOFTHCA" down >/dev/null 2>&1 || true
      rm -f "${out:-}"' EXIT
out=$(mktemp)
bulk_pids=()

# Typical latency (us) of 1,000 8-byte sends from device 1 to device 0 on SL $1.
latency() {
    local port rc=0 server
    port=$(free_port)
    "$SOFTHCA" exec -- timeout 60 ib_send_lat -d "${SOFTHCA_PREFIX}0" -x 0 -p "$port" -e \
        -S "$1" -n 1000 -s 8 >"$out" 2>&1 &
    server=$!
    wait_listening "$port" || fail "ib_send_lat server did not start: $(cat "$out")"
    local result
    result=$("$SOFTHCA" exec -- timeout 60 ib_send_lat -d "${SOFTHCA_PREFIX}1" -x 0 -p "$port" \
        -e -S "$1" -n 1000 -s 8 127.0.0.1 2>&1) || rc=$?
    wait "$server" || rc=$((rc ? rc : 100))
    [ "$rc" -eq 0 ] || fail "ib_send_lat on SL $1 failed: $result $(cat "$out")"
    # t_typical is the fifth column of the result row.
    awk '$1 == 8 {print $5}' <<<"$result"
}

# A bulk RC flow on SL $1 from device 1 to device 0: 64 KiB sends in 1 KiB packets,
# about 60 s of the link (stopped once measured). RC's window (256 packets) fits the
# queue: nothing is dropped, the queue stays full.
start_bulk() {
    local port
    port=$(free_port)
    "$SOFTHCA" exec -- timeout 150 ib_send_bw -d "${SOFTHCA_PREFIX}0" -x 0 -p "$port" -S "$1" \
        -e -n 240000 -s 65536 -m 1024 >/dev/null 2>&1 &
    bulk_pids+=($!)
    wait_listening "$port" || fail "ib_send_bw server did not start"
    "$SOFTHCA" exec -- timeout 150 ib_send_bw -d "${SOFTHCA_PREFIX}1" -x 0 -p "$port" -S "$1" \
        -e -n 240000 -s 65536 -m 1024 127.0.0.1 >/dev/null 2>&1 &
    bulk_pids+=($!)
    wait_until "[ \$(vl_queue $1) -gt 100000 ]" 30 || fail "the bulk flow on SL $1 did not fill its queue"
}
# The bytes in VL $1's queue at device 1's port (SL n is on VL n here).
vl_queue() {
    "$SOFTHCA" status --json | python3 -c '
import json, sys
d = json.load(sys.stdin)["devices"][1]["congestion_point"]
print(next((v["queue_bytes"] for v in d["vls"] if v["vl"] == int(sys.argv[1])), 0))' "$1"
}

"$SOFTHCA" up --shape rate_mbps=2000,queue_kb=2048 \
    --vl-arbitration "high=1:255;low=0:16,2:48;limit=255" >/dev/null ||
    fail "softhca up with a shaped link and VL arbitration failed"
idle=$(latency 1)
echo "idle link: ${idle} us"
start_bulk 0
# The link's queue is what is measured; on a shared 2-core machine another process can
# only add to a latency, never take from it. So the high VL gets up to three tries, and
# its best counts (the same VL's once: it only has to be slow).
same=$(latency 0)
high_enough() { python3 -c "import sys; sys.exit(0 if $1 - $idle < 0.1 * ($same - $idle) else 1)"; }
high=$(latency 1)
for try in 2 3; do
    high_enough "$high" && break
    echo "try $try: the high VL's ${high} us may have been the machine's, not the link's"
    high=$(python3 -c "print(min($high, $(latency 1)))")
done
"$SOFTHCA" status | grep -E "shaped link|vl "
read -r queue0 queue1 < <("$SOFTHCA" status --json | python3 -c '
import json, sys
d = json.load(sys.stdin)["devices"][1]["congestion_point"]
peak = {v["vl"]: v["peak_queue_bytes"] for v in d["vls"]}
print(peak.get(0, 0), peak.get(1, 0))')
echo "under a bulk flow on SL 0 (VL 0 queue peak ${queue0} bytes): ping on SL 1 (VL 1, high" \
    "priority, queue peak ${queue1} bytes) ${high} us, on SL 0 (behind the bulk) ${same} us," \
    "idle ${idle} us; high VL / idle = $(python3 -c "print('%.2f' % ($high / $idle))")"
[ "$queue0" -gt 100000 ] || fail "the bulk flow did not fill VL 0's queue ($queue0 bytes)"
python3 -c "import sys; sys.exit(0 if $same > 2 * $idle else 1)" ||
    fail "behind the bulk flow on the same VL the latency ${same} us stayed within twice idle"
# A ping is one 64-byte frame each way; two waiting in VL 1 at once is the most a
# ping-pong can put there (the previous one leaving, the next one arriving).
[ "$queue1" -le 256 ] ||
    fail "VL 1's queue held ${queue1} bytes: the high-priority pings waited behind each other"
high_enough "$high" ||
    fail "the high-priority VL's latency ${high} us took a tenth or more of the bulk queue's" \
        "delay (${same} us on SL 0, idle ${idle} us)"

# The low-priority table gives VL 0 weight 16 and VL 2 weight 48: with a second bulk flow
# on SL 2 (VL 2) both queues stay full and the wire's bytes split 1:3 (within 10 %).
start_bulk 2
vl_bytes() {
    "$SOFTHCA" status --json | python3 -c '
import json, sys
d = json.load(sys.stdin)["devices"][1]["congestion_point"]
sent = {v["vl"]: v["sent_bytes"] for v in d["vls"]}
print(sent.get(0, 0), sent.get(2, 0))'
}
read -r a0 a2 < <(vl_bytes)
sleep 3
read -r b0 b2 < <(vl_bytes)
# Both flows still run at the end of the window: the share is of two backlogged VLs.
for pid in "${bulk_pids[@]}"; do
    kill -0 "$pid" 2>/dev/null || fail "a bulk flow ended within the window"
done
kill "${bulk_pids[@]}" 2>/dev/null || true
wait "${bulk_pids[@]}" 2>/dev/null || true
share=$(python3 -c "print('%.3f' % (($b2 - $a2) / max($b0 - $a0, 1)))")
echo "two bulk flows on VL 0 (weight 16) and VL 2 (weight 48): $((b0 - a0)) and" \
    "$((b2 - a2)) bytes on the wire in 3 s, VL 2 / VL 0 = $share (the tables say 3)"
python3 -c "import sys; sys.exit(0 if abs($share - 3) <= 0.3 else 1)" ||
    fail "the arbiter's byte shares ($share) are not the tables' 3 within 10 %"

# Per port: a PORT@ prefix gives one port its own tables over the every-port ones, and
# the status shows each port's.
"$SOFTHCA" down >/dev/null
"$SOFTHCA" up --shape rate_mbps=2000 --vl-arbitration "high=1:255;low=0:16,2:48" \
    --vl-arbitration "0@low=0:64" --sl-to-vl "0@1:0" >/dev/null ||
    fail "softhca up with one port's own VL tables failed"
tables=$("$SOFTHCA" status --json | python3 -c '
import json, sys
for d in json.load(sys.stdin)["devices"]:
    cp = d["congestion_point"]
    print(cp["arbitration"], cp["sl_to_vl"].split(",")[1])')
echo "each port's tables: $(tr '\n' ' ' <<<"$tables")"
[ "$tables" = "$(printf 'high=;low=0:64;limit=0 1:0\nhigh=1:255;low=0:16,2:48;limit=0 1:1')" ] ||
    fail "the ports' tables are not their own: $tables"
