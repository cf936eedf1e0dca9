#!/usr/bin/env bash
# Link-level credits between two softhca engines: two namespaces joined by a
# veth pair (tools/netns-pair.sh), an engine in each on an af_packet port with a 2 Gb/s
# shaped link and --link-credits. Two bulk RC flows (ib_write_bw -q 2) from one host to
# the other overload the link: the sender's queue fills to its limit and holds the
# requesters back, the receiving engine's credits pace the link, and nothing is dropped
# or retransmitted anywhere (without credits the receiving socket overflows and RC goes
# back N). Then ibv_rc_pingpong checks its data (-c) over the lossless link.
source "$(dirname "$0")/lib.sh"
here=$(cd "$(dirname "$0")" && pwd)
pair=${SOFTHCA_PREFIX}
export SOFTHCA
out=$(mktemp)
status=$(mktemp)
trap '"$here/../../tools/netns-pair.sh" down "$pair" >/dev/null 2>&1 || true; rm -f "$out" "$status"' EXIT
"$here/../../tools/netns-pair.sh" down "$pair" >/dev/null 2>&1 || true
SOFTHCA_UP_ARGS="--shape rate_mbps=2000,queue_kb=512 --link-credits buffer_kb=128" \
    "$here/../../tools/netns-pair.sh" up "$pair" >/dev/null || fail "netns-pair up failed"
pair_hosts "$pair"

status_of() { ip netns exec "$pair-$1" "$SOFTHCA" status --prefix "$pair$1" --json; }

# Flows of 10 s; the client's status is read 3 s after both its QPs have started sending
# (a loaded machine may take seconds to start them), while they still run (checked).
port=$(free_port)
on_server timeout 60 ib_write_bw -d "$SERVER_DEV" -x 0 -p "$port" -q 2 -D 10 -s 65536 \
    >"$out" 2>&1 &
server=$!
wait_listening "$port" || fail "ib_write_bw server did not start: $(cat "$out")"
on_client timeout 60 ib_write_bw -d "$CLIENT_DEV" -x 0 -p "$port" -q 2 -D 10 -s 65536 \
    "$SERVER_ADDR" >"$out.client" 2>&1 &
client=$!
wait_until '[ "$(status_of b | qps_sending)" -ge 2 ]' 30 || fail "the flows did not start: $(cat "$out.client")"
sleep 3
status_of b >"$status"
kill -0 "$client" 2>/dev/null || fail "the flows ended before the status was read"
# (Without perftest's report, when its clock fit fails, there is no figure; the counters
# still tell.)
perftest_wait "$client" "$out.client" "ib_write_bw's client"
perftest_wait "$server" "$out" "ib_write_bw's server"
bw=$(awk '$1 == 65536 {print $4}' "$out.client")
rm -f "$out.client"
read -r retransmitted peak limit waits < <(python3 - "$status" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
cp = doc["devices"][0]["congestion_point"]
qps = [q for c in doc["contexts"] for q in c["qps"]]
assert len(qps) >= 2, "the status holds no flows"
print(sum(q["counters"]["retransmitted"] + q["counters"]["timeouts"] for q in qps),
      cp["peak_queue_bytes"], 512 * 1024,
      next(v["credit_waits"] for v in cp["vls"] if v["vl"] == 0))
EOF
)
read -r dropped tx_dropped fc_in fc_bad < <(for host in a b; do status_of $host; done |
    python3 -c '
import json, sys
docs = [json.loads(line) for line in sys.stdin.read().replace("}\n{", "}\x00{").split("\x00")]
ports = [d for doc in docs for d in doc["devices"]]
print(sum(p["congestion_point"]["dropped"] for p in ports),
      sum(p["counters"]["tx_dropped"] for p in ports),
      min(p["congestion_point"]["link_credits"]["flow_control_received"] for p in ports),
      sum(p["congestion_point"]["link_credits"]["flow_control_bad"] for p in ports))')
echo "two engines with link credits: ib_write_bw $bw MB/s; retransmitted $retransmitted;" \
    "dropped $dropped at the queues, $tx_dropped at the ports; the sender's queue peaked at" \
    "$peak of $limit bytes; VL 0 waited for credits $waits times; flow-control packets" \
    "received (the fewer side) $fc_in, bad $fc_bad"
[ "$retransmitted" -eq 0 ] || fail "$retransmitted packets were retransmitted on a lossless link: $(cat "$status")"
[ "$dropped" -eq 0 ] && [ "$tx_dropped" -eq 0 ] || fail "frames were dropped on a lossless link"
[ "$fc_in" -gt 0 ] || fail "an engine received no flow-control packets"
[ "$fc_bad" -eq 0 ] || fail "$fc_bad flow-control packets were bad"
[ "$waits" -gt 0 ] || fail "the sender never waited for credits: they did not pace the link"
"$here/test_pingpong.sh" ibv_rc_pingpong 4096 65536 -- -c ||
    fail "ibv_rc_pingpong -c over the lossless link"
echo "link credits between two engines: lossless, data checked"
