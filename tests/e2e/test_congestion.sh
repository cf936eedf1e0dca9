#!/usr/bin/env bash
# Congestion on a shaped link: two bulk RC senders (ib_write_bw -q 2, 64 KiB
# writes) into one port whose link is shaped to 2 Gb/s with a 512 KiB queue, ECN marking
# on that queue (RED, kmin 16 KiB, kmax 64 KiB, pmax 0.2).
#   Without DCQCN: the marks change nothing, the queue fills, frames are dropped (RC
#   retransmits them) and most frames find the queue at or above kmax.
#   With DCQCN (its rate steps scaled to the 2 Gb/s link): CNPs come back, the
#   requesters are paced, no frame is dropped once they are (the flows start at line
#   rate and their first burst may overflow the queue), most frames find the queue below kmax, and
#   the two flows share the link: Jain's fairness index of their throughputs over the
#   middle of the run >= 0.95.
#   Then RC data integrity (every byte checked, heap and shared memory) over the shaped
#   link with DCQCN.
#   With link-level credits between the two ports instead (no ECN, no DCQCN): the same
#   overload fills the sender's queue to its limit and no further (the requesters wait
#   for room, and the link for the peer's credits): nothing is dropped anywhere and
#   nothing retransmitted, the two flows share the link (Jain >= 0.9), the two ports
#   exchange flow-control packets, and every byte is checked over it too.
# Numbers come from `softhca status --json`: the port's congestion point and each QP's
# packets sent and DCQCN state.
#   test_congestion.sh RC_VERBS_TEST
source "$(dirname "$0")/lib.sh"
RC_VERBS_TEST=${1:?path to rc_verbs_test}
trap '"$SOFTHCA" down >/dev/null 2>&1 || true; rm -f "${server_out:-}" "${first:-}" "${second:-}"' EXIT
server_out=$(mktemp)
first=$(mktemp)
second=$(mktemp)

SHAPE=rate_mbps=2000,queue_kb=512
ECN=kmin_kb=16,kmax_kb=64,pmax=0.2
# The paper's additive and hyper increase and byte counter are for 40 Gb/s: scaled by
# 2/40 for this link (the timers stay 55 us).
DCQCN=ai_mbps=2,hai_mbps=20,b=524288

# Two bulk flows for 12 s. The status is sampled twice, 3 s apart, from 2 s after both
# QPs have started sending (on a loaded machine the tools take seconds to start, and one
# status call takes up to a second), while the flows still run.
run_flows() {
    local port
    port=$(free_port)
    "$SOFTHCA" exec -- timeout 60 ib_write_bw -d "${SOFTHCA_PREFIX}0" -x 0 -p "$port" -q 2 \
        -D 12 -s 65536 >"$server_out" 2>&1 &
    local server=$!
    wait_listening "$port" || fail "ib_write_bw server did not start: $(cat "$server_out")"
    "$SOFTHCA" exec -- timeout 60 ib_write_bw -d "${SOFTHCA_PREFIX}1" -x 0 -p "$port" -q 2 \
        -D 12 -s 65536 127.0.0.1 >"$server_out.client" 2>&1 &
    local client=$!
    wait_until '[ "$("$SOFTHCA" status --json | qps_sending "${SOFTHCA_PREFIX}1")" = 2 ]' 30 ||
        fail "the two flows did not start: $(cat "$server_out.client" "$server_out")"
    sleep 2
    "$SOFTHCA" status --json >"$first"
    sleep 3
    "$SOFTHCA" status --json >"$second"
    kill -0 "$client" 2>/dev/null ||
        fail "the flows ended before the second sample: it would not be of them"
    perftest_wait "$client" "$server_out.client" "ib_write_bw's client"
    perftest_wait "$server" "$server_out" "ib_write_bw's server"
    grep -E '^ +65536' "$server_out.client" || true
    rm -f "$server_out.client"
}

# Prints "dropped dropped_in_all above_kmax_fraction jain cnps_received packets packets"
# for the sending port (device 1) and its two QPs, between the two samples (and drops
# since the start).
measure() {
    python3 - "$first" "$second" "${SOFTHCA_PREFIX}1" <<'EOF'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
device = sys.argv[3]
def port(doc):
    return next(d for d in doc["devices"] if d["name"] == device)
def senders(doc):
    qps = {}
    for c in doc["contexts"]:
        if c["device"] == device:
            for q in c["qps"]:
                qps[q["qpn"]] = q
    return qps
pa, pb = port(a)["congestion_point"], port(b)["congestion_point"]
queued = pb["queued"] - pa["queued"]
above = (pb["above_kmax"] - pa["above_kmax"]) / max(queued, 1)
qa, qb = senders(a), senders(b)
rates = [qb[n]["counters"]["packets_sent"] - qa[n]["counters"]["packets_sent"] for n in qb if n in qa]
if len(rates) != 2 or min(rates) <= 0:
    print("no-flows", rates)
    sys.exit(1)
jain = sum(rates) ** 2 / (len(rates) * sum(r * r for r in rates))
cnps = sum((q.get("congestion") or {}).get("cnps_received", 0) for q in qb.values())
print(pb["dropped"] - pa["dropped"], pb["dropped"], "%.3f" % above, "%.3f" % jain, cnps, *rates)
EOF
}

# Without DCQCN: marks but no reaction.
"$SOFTHCA" up --shape "$SHAPE" --ecn "$ECN" >/dev/null || fail "softhca up --shape --ecn failed"
run_flows
read -r dropped all_dropped above jain cnps r1 r2 < <(measure) ||
    fail "no flows measured: $(measure)"
echo "without DCQCN: dropped $dropped ($all_dropped since the start), frames finding the queue at or above kmax $above," \
    "Jain $jain, CNPs $cnps, packets $r1 $r2"
"$SOFTHCA" status | grep -E "shaped link"
[ "$dropped" -gt 0 ] || fail "the overloaded queue dropped nothing without DCQCN"
python3 -c "import sys; sys.exit(0 if $above > 0.5 else 1)" ||
    fail "without DCQCN the queue was at or above kmax for only $above of the frames"
"$SOFTHCA" down >/dev/null

# With DCQCN.
"$SOFTHCA" up --shape "$SHAPE" --ecn "$ECN" --dcqcn "$DCQCN" >/dev/null ||
    fail "softhca up --dcqcn failed"
run_flows
read -r dropped all_dropped above jain cnps r1 r2 < <(measure) ||
    fail "no flows measured: $(measure)"
echo "with DCQCN: dropped $dropped ($all_dropped since the start), frames finding the queue at or above kmax $above," \
    "Jain $jain, CNPs $cnps, packets $r1 $r2"
"$SOFTHCA" status | grep -E "shaped link|dcqcn"
# The congestion point and the QPs' DCQCN state are in the status schema.
python3 -c 'import json, sys, jsonschema
jsonschema.validate(json.load(open(sys.argv[1])), json.load(open(sys.argv[2])))' \
    "$second" "$(dirname "$0")/../../docs/status.schema.json" ||
    fail "the status with DCQCN does not match docs/status.schema.json"
[ "$cnps" -gt 0 ] || fail "no CNP reached the senders"
# `softhca sample` writes the queue and the QPs' DCQCN state as CSV rows.
samples=$("$SOFTHCA" sample --interval 0.05 --count 3)
[ "$(grep -cE ',device:[^,/]+,queue_bytes,' <<<"$samples")" -eq 6 ] ||
    fail "softhca sample did not give each port's queue three times: $samples"
[ "$(grep -cE ',device:[^,/]+/vl0,queue_bytes,' <<<"$samples")" -eq 6 ] ||
    fail "softhca sample did not give each port's VL 0 queue three times: $samples"
grep -q '^time_s,object,field,value$' <<<"$samples" || fail "softhca sample wrote no header"
# The flows start at line rate, as on a NIC: their first burst may overflow the queue
# before the first CNP is back. From then on, nothing.
[ "$dropped" -eq 0 ] || fail "DCQCN let the queue overflow: $dropped frames dropped in 3 s"
python3 -c "import sys; sys.exit(0 if $above < 0.5 else 1)" ||
    fail "with DCQCN the queue was at or above kmax for $above of the frames"
python3 -c "import sys; sys.exit(0 if $jain >= 0.95 else 1)" ||
    fail "the two flows did not share the link: Jain's index $jain ($r1 and $r2 packets)"

# Every byte checked across the shaped, marked, paced link.
for memory in heap shared; do
    "$SOFTHCA" exec -- env SOFTHCA_PREFIX="$SOFTHCA_PREFIX" SOFTHCA_TEST_MEMORY=$memory \
        timeout 300 "$RC_VERBS_TEST" "[integrity]" >/dev/null ||
        fail "RC data integrity over the shaped link with DCQCN ($memory memory)"
done
echo "RC data integrity over the shaped link with DCQCN: heap and shared memory"

# With link-level credits: lossless.
"$SOFTHCA" down >/dev/null
"$SOFTHCA" up --shape "$SHAPE" --link-credits buffer_kb=64 >/dev/null ||
    fail "softhca up --link-credits failed"
run_flows
"$SOFTHCA" status | grep -E "shaped link|link credits|vl 0"
read -r dropped tx_dropped retransmitted peak limit waits fc_in fc_out jain < <(
    python3 - "$second" "${SOFTHCA_PREFIX}1" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
device = sys.argv[2]
ports = doc["devices"]
sender = next(d for d in ports if d["name"] == device)
cp = sender["congestion_point"]
limit = int(cp["shape"].split("queue_kb=")[1]) * 1024
vl0 = next(v for v in cp["vls"] if v["vl"] == 0)
qps = [q for c in doc["contexts"] for q in c["qps"]]
retransmitted = sum(q["counters"]["retransmitted"] + q["counters"]["timeouts"] for q in qps)
rates = [q["counters"]["packets_sent"] for c in doc["contexts"] if c["device"] == device
         for q in c["qps"]]
jain = sum(rates) ** 2 / (len(rates) * sum(r * r for r in rates)) if rates and max(rates) else 0
print(sum(d["congestion_point"]["dropped"] for d in ports),
      sum(d["counters"]["tx_dropped"] for d in ports), retransmitted,
      cp["peak_queue_bytes"], limit, vl0["credit_waits"],
      min(d["congestion_point"]["link_credits"]["flow_control_received"] for d in ports),
      min(d["congestion_point"]["link_credits"]["flow_control_sent"] for d in ports),
      "%.3f" % jain)
EOF
) || fail "no lossless status measured"
echo "with link credits: dropped $dropped at the queues, $tx_dropped at the ports," \
    "retransmitted $retransmitted; the sender's queue peaked at $peak of $limit bytes;" \
    "VL 0 waited for credits $waits times; flow-control packets in $fc_in, out $fc_out; Jain $jain"
[ "$dropped" -eq 0 ] || fail "a lossless queue dropped $dropped frames"
[ "$tx_dropped" -eq 0 ] || fail "a lossless port dropped $tx_dropped frames"
[ "$retransmitted" -eq 0 ] || fail "with link credits $retransmitted packets were retransmitted"
[ "$peak" -ge $((limit * 9 / 10)) ] ||
    fail "the overload did not reach the queue's limit ($peak of $limit): nothing was held back"
[ "$fc_in" -gt 0 ] && [ "$fc_out" -gt 0 ] || fail "the ports exchanged no flow-control packets"
# The room a full queue frees goes to each held-back requester in turn (the data path
# starts each round one QP further along).
python3 -c "import sys; sys.exit(0 if $jain >= 0.9 else 1)" ||
    fail "the two flows did not share the lossless link: Jain's index $jain"
python3 -c 'import json, sys, jsonschema
jsonschema.validate(json.load(open(sys.argv[1])), json.load(open(sys.argv[2])))' \
    "$second" "$(dirname "$0")/../../docs/status.schema.json" ||
    fail "the status with link credits does not match docs/status.schema.json"
for memory in heap shared; do
    "$SOFTHCA" exec -- env SOFTHCA_PREFIX="$SOFTHCA_PREFIX" SOFTHCA_TEST_MEMORY=$memory \
        timeout 300 "$RC_VERBS_TEST" "[integrity]" >/dev/null ||
        fail "RC data integrity over the lossless link ($memory memory)"
done
read -r dropped tx_dropped < <("$SOFTHCA" status --json | python3 -c '
import json, sys
ports = json.load(sys.stdin)["devices"]
print(sum(d["congestion_point"]["dropped"] for d in ports),
      sum(d["counters"]["tx_dropped"] for d in ports))')
[ "$dropped" -eq 0 ] && [ "$tx_dropped" -eq 0 ] ||
    fail "the integrity runs lost frames on the lossless link ($dropped, $tx_dropped)"
echo "RC data integrity over the lossless link: heap and shared memory, nothing dropped"
