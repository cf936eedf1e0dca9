#!/usr/bin/env bash
# `softhca status --json` against its schema (docs/status.schema.json, validated with
# python3-jsonschema) on an idle engine, with an ib_write_bw running (contexts and QPs in
# the document) and with faults injected (the faults member); the text report carries the
# same counters as the document; `softhca watch --count 2` prints rates for each device
# and for the running QPs.
source "$(dirname "$0")/lib.sh"
here=$(cd "$(dirname "$0")" && pwd)
schema="$here/../../docs/status.schema.json"
server=
flow_out=$(mktemp)
trap 'kill $server 2>/dev/null || true; "$SOFTHCA" down >/dev/null 2>&1 || true; rm -f "$flow_out"*' EXIT

validate() {
    python3 -c '
import json, sys, jsonschema
schema = json.load(open(sys.argv[1]))
doc = json.load(sys.stdin)
jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker()).validate(doc)
print(json.dumps(doc))
' "$schema"
}
# One expression over the document (python, the document as d).
query() { python3 -c "import json, sys; d = json.load(sys.stdin); print($1)"; }

"$SOFTHCA" up >/dev/null || fail "softhca up failed"
doc=$("$SOFTHCA" status --json | validate) || fail "idle status does not match the schema"
[ "$(query 'len(d["devices"]), len(d["contexts"]), d["engine"]["prefix"]' <<<"$doc")" = \
    "2 0 $SOFTHCA_PREFIX" ] || fail "idle document: $doc"
# The text report and the document give the same figures.
text=$("$SOFTHCA" status)
doc=$("$SOFTHCA" status --json | validate)
want=$(query '" ".join(k + " " + str(v) for k, v in d["devices"][0]["counters"].items())' <<<"$doc")
grep -qF "counters: $want" <<<"$text" || fail "text and JSON differ: $want / $text"
echo "idle: valid, text and JSON agree"

# Twenty seconds of traffic: beside other tests the checks below can take several before
# watch samples, and watch needs the QPs still moving then.
port=$(free_port)
"$SOFTHCA" exec -- timeout 60 ib_write_bw -d "${SOFTHCA_PREFIX}0" -p "$port" -D 20 \
    >"$flow_out.server" 2>&1 &
server=$!
wait_listening "$port" || fail "ib_write_bw server did not start"
"$SOFTHCA" exec -- timeout 60 ib_write_bw -d "${SOFTHCA_PREFIX}1" -p "$port" -D 20 127.0.0.1 \
    >"$flow_out.client" 2>&1 &
client=$!
# What the client moved: packets its device sent, and messages it placed itself (single
# copy: between two devices of one engine the WRITEs cross no port).
moved='d["devices"][1]["counters"]["tx_packets"] + sum(q["counters"]["placed_messages"] for c in d["contexts"] for q in c["qps"])'
client_moved() { "$SOFTHCA" status --json | query "$moved"; }
wait_until '[ "$(client_moved)" -gt 0 ]' 20 || fail "the client moved nothing"
doc=$("$SOFTHCA" status --json | validate) || fail "busy status does not match the schema"
summary=$(query "(len(d[\"contexts\"]), sorted(q[\"type\"] for c in d[\"contexts\"] for q in c[\"qps\"]), d[\"objects\"][\"qp\"], $moved > 0)" <<<"$doc")
[ "$summary" = "(2, ['RC', 'RC'], 2, True)" ] || fail "busy document: $summary: $doc"
echo "busy: valid: $summary"
kill -0 "$client" 2>/dev/null || fail "the flow ended before watch could sample it"
watch=$("$SOFTHCA" watch --interval 0.5 --count 2) || fail "softhca watch failed: $watch"
echo "$watch"
for dev in 0 1; do
    grep -qE "^device ${SOFTHCA_PREFIX}$dev: rx_packets [0-9]+/s rx_bytes [0-9.]+ MB/s" <<<"$watch" ||
        fail "watch printed no rates for ${SOFTHCA_PREFIX}$dev"
done
grep -qE "^  qp [0-9]+ \(ib_write_bw\): (packets_sent|placed_messages) [1-9][0-9]*/s" <<<"$watch" ||
    fail "watch printed no moving QP"
perftest_wait "$client" "$flow_out.client" "ib_write_bw's client"
perftest_wait "$server" "$flow_out.server" "ib_write_bw's server"
server=
"$SOFTHCA" watch --count 0 >/dev/null 2>&1 && fail "watch --count 0 accepted"
"$SOFTHCA" down >/dev/null

"$SOFTHCA" up --faults drop=0.01,seed=3 >/dev/null || fail "softhca up --faults failed"
doc=$("$SOFTHCA" status --json | validate) || fail "status with faults does not match the schema"
[ "$(query 'd["devices"][0]["faults"] is not None' <<<"$doc")" = True ] ||
    fail "no faults member with --faults: $doc"
"$SOFTHCA" down >/dev/null
"$SOFTHCA" status --json >/dev/null 2>&1 && fail "status --json of an engine that is down succeeded"
echo PASS
