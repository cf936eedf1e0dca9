#!/usr/bin/env bash
# The engine's data-path threads (--threads, SOFTHCA_ENGINE_THREADS): the shared engine
# of the end-to-end tests runs two, each device served by its own (status: one thread per
# port, both running rounds; the second, softhca-dp1, free to run on every CPU);
# an ib_write_bw between the two devices moves every byte through both threads; rping
# connects through the rdma_cm across them; and the
# option's bad values are refused, a count above the ports' is cut to one per port.
#   test_datapath_threads.sh   (SOFTHCA_PREFIX: the shared engine, started with 2)
source "$(dirname "$0")/lib.sh"
other=shthr
server_out=$(mktemp)
trap '"$SOFTHCA" down --prefix "$other" >/dev/null 2>&1 || true; rm -f "$server_out"' EXIT

threads() {
    "$SOFTHCA" status --json "$@" | python3 -c '
import json, sys
d = json.load(sys.stdin)["engine"]["datapath_threads"]
print(" ".join(",".join(str(p) for p in t["ports"]) for t in d))'
}
rounds() {
    "$SOFTHCA" status --json | python3 -c '
import json, sys
print(" ".join(str(t["rounds"]) for t in json.load(sys.stdin)["engine"]["datapath_threads"]))'
}

[ "$(threads)" = "0 1" ] || fail "the shared engine should serve port 0 and port 1 from a thread each: $(threads)"
"$SOFTHCA" status | head -1 | grep -q "datapath_threads 2 (ports 0 1)" ||
    fail "the text status does not show the threads: $("$SOFTHCA" status | head -1)"
pid=$(engine_pid)
read -r before0 before1 <<<"$(rounds)"
# One ib_write_bw between the two devices (run again when only perftest's clock failed).
write_once() {
    local port server rc=0
    port=$(free_port)
    on_server timeout 60 ib_write_bw -d "${SOFTHCA_PREFIX}0" -x 0 -p "$port" -s 65536 -n 2000 \
        >"$server_out" 2>&1 &
    server=$!
    wait_listening "$port" || fail "ib_write_bw server did not start: $(cat "$server_out")"
    out=$(on_client timeout 60 ib_write_bw -d "${SOFTHCA_PREFIX}1" -x 0 -p "$port" -s 65536 \
        -n 2000 127.0.0.1 2>&1) || rc=$?
    wait "$server" || rc=$((rc ? rc : 100))
    PERFTEST_OUTPUT="$out $(cat "$server_out")"
    return "$rc"
}
perftest_attempts write_once || fail "ib_write_bw over two threads failed: $PERFTEST_OUTPUT"
grep -E '^ +65536 +2000' <<<"$out" || fail "no result line: $out"
read -r after0 after1 <<<"$(rounds)"
[ "$after0" -gt "$before0" ] && [ "$after1" -gt "$before1" ] ||
    fail "both threads should have run rounds: $before0 $before1 -> $after0 $after1"
# The second data path's thread, by name, may run on every CPU the engine was given (DPDK's
# EAL pins the main loop to one; a thread left there would only take turns with it).
worker=
for task in /proc/"$pid"/task/*; do
    [ "$(cat "$task/comm")" = softhca-dp1 ] && worker=$task
done
[ -n "$worker" ] || fail "no thread softhca-dp1 in the engine"
allowed=$(awk '/^Cpus_allowed_list/ {print $2}' "$worker/status")
[ "$allowed" = "$(awk '/^Cpus_allowed_list/ {print $2}' /proc/self/status)" ] ||
    fail "softhca-dp1 may run only on CPUs $allowed"
echo "engine $pid: softhca-dp1 on CPUs $allowed, rounds $after0 and $after1"

# rdma_cm across the threads: the CM's MADs that reach either port (the REQ at device 1's,
# the REP at device 0's) go through the main loop's inbox to the rdma_cm, and its answers
# leave from the thread of the port they go out on.
listening() { "$SOFTHCA" status | grep -q "rdma_cm:.* listening [1-9]"; }
cm_port=$((20000 + RANDOM % 20000))
rping_out=$(mktemp)
on_server timeout 60 rping -s -a 198.18.0.2 -p "$cm_port" -V -C 50 -S 2000 >"$rping_out" 2>&1 &
rping_server=$!
wait_until listening 20 || fail "rping server did not listen: $(cat "$rping_out")"
# The shared engine may hold other tests' listeners: a client that came before this
# server's own listener is rejected (reason 8, no listener) and tries again.
for attempt in $(seq 40); do
    client_out=$(on_client timeout 60 rping -c -I 198.18.0.1 -a 198.18.0.2 -p "$cm_port" -V \
        -C 50 -S 2000 2>&1) && break
    [ "$attempt" -lt 40 ] && kill -0 "$rping_server" 2>/dev/null &&
        grep -q "RDMA_CM_EVENT_REJECTED, error 8" <<<"$client_out" ||
        fail "rping across the two threads failed: $client_out"
    sleep 0.5
done
wait "$rping_server" || fail "rping server failed: $(cat "$rping_out")"
rm -f "$rping_out"
echo "rping: 50 pings of 2000 B verified, across the two threads"

# Refused: 0 and more than 64; more threads than ports: one per port.
for bad in 0 65 two; do
    if "$SOFTHCA" up --prefix "$other" --threads "$bad" >/dev/null 2>&1; then
        fail "--threads $bad was accepted"
    fi
done
if SOFTHCA_ENGINE_THREADS=0 "$SOFTHCA" up --prefix "$other" >/dev/null 2>&1; then
    fail "SOFTHCA_ENGINE_THREADS=0 was accepted"
fi
"$SOFTHCA" up --prefix "$other" --threads 8 >/dev/null || fail "--threads 8 was refused"
[ "$(threads --prefix "$other")" = "0 1" ] || fail "--threads 8 on two ports: $(threads --prefix "$other")"
"$SOFTHCA" down --prefix "$other" >/dev/null
SOFTHCA_ENGINE_THREADS=1 "$SOFTHCA" up --prefix "$other" >/dev/null || fail "one thread refused"
[ "$(threads --prefix "$other")" = "0,1" ] || fail "one thread: $(threads --prefix "$other")"
"$SOFTHCA" down --prefix "$other" >/dev/null
echo "PASS"
