#!/usr/bin/env bash
# Priority flow control (802.1Qbb) with --pfc between two engines in two namespaces over
# af_packet on veth (the lossless option for ports to foreign peers).
#   Honouring: two RC flows leave host a, one on priority 0 (traffic class 0) and one on
#   priority 3 (traffic class 104: DSCP 26). PFC frames pausing priority 0 only, sent into
#   host a's port from host b's end of the veth (a raw socket, as a switch would), stop
#   the priority 0 flow for as long as they come and leave the priority 3 flow running;
#   when they stop, the paused flow resumes and both complete.
#   Asking: host b's engine is stopped for 200 ms (SIGSTOP) while the flows run; when it
#   runs again its receive queue is backlogged, and it asks host a to pause (host a
#   counts PFC frames received, host b sent).
# Host a has PFC on every priority (--pfc), host b on priority 3 only (--pfc-priorities 3),
# as a RoCE network keeps one priority lossless: host b's own pauses and resumes, which a
# busy engine sends whenever its queue backs up and drains, then never name priority 0,
# so nothing but the injector pauses or resumes it.
source "$(dirname "$0")/lib.sh"
here=$(cd "$(dirname "$0")" && pwd)
pair=${SOFTHCA_PREFIX}
export SOFTHCA
out=$(mktemp -d)
trap 'kill -CONT "${engine_b:-0}" 2>/dev/null || true
      "$here/../../tools/netns-pair.sh" down "$pair" >/dev/null 2>&1 || true; rm -rf "$out"' EXIT
"$here/../../tools/netns-pair.sh" down "$pair" >/dev/null 2>&1 || true
SOFTHCA_UP_ARGS_A="--pfc" SOFTHCA_UP_ARGS_B="--pfc-priorities 3" \
    "$here/../../tools/netns-pair.sh" up "$pair" >/dev/null ||
    fail "netns-pair up failed"
run_a() { ip netns exec "$pair-a" "$SOFTHCA" exec --prefix "${pair}a" -- "$@"; }
run_b() { ip netns exec "$pair-b" "$SOFTHCA" exec --prefix "${pair}b" -- "$@"; }
status_a() { ip netns exec "$pair-a" "$SOFTHCA" status --prefix "${pair}a" --json; }

# Two flows from a to b: priority 0 and priority 3; the servers listen on b.
export SERVER_NS="$pair-b"
flow() { # flow NAME TCLASS
    local port
    port=$(free_port)
    run_b timeout 60 ib_write_bw -d "${pair}b0" -x 0 -p "$port" --tclass="$2" -D 7 \
        -s 65536 >"$out/$1.server" 2>&1 &
    echo $! >"$out/$1.server.pid"
    wait_listening "$port" || fail "ib_write_bw server $1 did not start: $(cat "$out/$1.server")"
    run_a timeout 60 ib_write_bw -d "${pair}a0" -x 0 -p "$port" --tclass="$2" -D 7 \
        -s 65536 198.18.2.2 >"$out/$1.client" 2>&1 &
    echo $! >"$out/$1.client.pid"
}
flow p0 0
flow p3 104
sleep 2
# packets_sent of host a's QPs: "p0 p3" (the p0 flow's context was opened first).
sent() {
    status_a | python3 -c '
import json, sys
contexts = sorted(json.load(sys.stdin)["contexts"], key=lambda c: c["id"])
sent = [sum(q["counters"]["packets_sent"] for q in c["qps"]) for c in contexts]
print(*(sent + [0, 0])[:2])'
}
# PFC frames pausing priority 0 (the longest pause: 3.4 ms at the port's 10 Gb/s) every
# millisecond, from a real-time process so that the busy flows cannot hold it off for
# longer than a pause, until told to stop. What the flows sent is counted between two
# looks at least 1.2 s apart, both taken while it runs (on a loaded machine one look at
# the status can take a second: a fixed schedule once counted past the pauses' end).
ip netns exec "$pair-b" chrt -f 10 python3 - "${pair}vb" "$out" <<'EOF' &
import os, socket, struct, sys, time
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((sys.argv[1], 0))
frame = bytes.fromhex("0180c2000001") + bytes.fromhex("025348aabbcc") + struct.pack(
    "!HHH8H", 0x8808, 0x0101, 0x01, 0xffff, 0, 0, 0, 0, 0, 0, 0)
frame += bytes(60 - len(frame))
started, stop = os.path.join(sys.argv[2], "injecting"), os.path.join(sys.argv[2], "stop")
end = time.monotonic() + 40
while time.monotonic() < end and not os.path.exists(stop):
    s.send(frame)
    if not os.path.exists(started):
        open(started, "w").close()
    time.sleep(0.001)
EOF
injector=$!
for _ in $(seq 100); do [ -e "$out/injecting" ] && break; sleep 0.1; done
[ -e "$out/injecting" ] || fail "the PFC frame injector did not start"
sleep 0.3 # what was on its way when the first pause came is out
read -r p0_before p3_before < <(sent)
sleep 1.2
read -r p0_after p3_after < <(sent)
a_status=$(status_a)
b_status=$(ip netns exec "$pair-b" "$SOFTHCA" status --prefix "${pair}b" --json)
touch "$out/stop"
wait "$injector" || fail "the PFC frame injector failed"
# Resume (XON), then let the flows finish.
ip netns exec "$pair-b" python3 - "${pair}vb" <<'EOF'
import socket, struct, sys
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((sys.argv[1], 0))
frame = bytes.fromhex("0180c2000001") + bytes.fromhex("025348aabbcc") + struct.pack(
    "!HHH8H", 0x8808, 0x0101, 0x01, 0, 0, 0, 0, 0, 0, 0, 0)
s.send(frame + bytes(60 - len(frame)))
EOF
read -r rx_pfc waits a_prio b_prio b_asked < <(python3 -c '
import json, sys
a, b = (json.loads(s)["devices"][0] for s in sys.argv[1:])
print(a["counters"]["rx_pfc_frames"], a["counters"]["tx_pfc_waits"], a["pfc"]["priorities"],
      b["pfc"]["priorities"], b["counters"]["tx_pfc_frames"])' "$a_status" "$b_status")
p0=$((p0_after - p0_before))
p3=$((p3_after - p3_before))
echo "over 1.2 s or more of PFC pausing priority 0: priority 0 flow sent $p0 packets, priority 3 flow" \
    "$p3; host a received $rx_pfc PFC frames ($b_asked of them host b's), its requesters waited" \
    "$waits times"
[ "$a_prio $b_prio" = "255 8" ] ||
    fail "PFC enabled for priorities $a_prio and $b_prio (bit masks), not 255 and 8"
[ "$rx_pfc" -ge 1000 ] || fail "host a counted only $rx_pfc PFC frames"
[ "$waits" -gt 0 ] || fail "no requester waited for the paused priority"
[ "$p3" -ge 1000 ] || fail "the priority 3 flow stopped too ($p3 packets): the pause was not per priority"
[ "$p0" -le $((p3 / 50)) ] || fail "the paused priority 0 flow kept sending ($p0 packets, priority 3 $p3)"

# Asking: stop host b's engine for 200 ms under the flows.
engine_b=$(cat "${SOFTHCA_RUN_ROOT:-/run/softhca}/${pair}b/engine.pid")
kill -STOP "$engine_b"
sleep 0.2
kill -CONT "$engine_b"
sleep 0.5
read -r b_tx_pfc < <(ip netns exec "$pair-b" "$SOFTHCA" status --prefix "${pair}b" --json |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["devices"][0]["counters"]["tx_pfc_frames"])')
read -r a_rx_pfc < <(status_a | python3 -c '
import json, sys; print(json.load(sys.stdin)["devices"][0]["counters"]["rx_pfc_frames"])')
echo "after host b's engine stood still for 200 ms: it sent $b_tx_pfc PFC frames; host a has received $a_rx_pfc in all"
[ "$b_tx_pfc" -gt 0 ] || fail "the backlogged engine asked for no pause"
[ "$a_rx_pfc" -gt "$rx_pfc" ] || fail "host a received none of host b's PFC frames"

for f in p0 p3; do
    wait "$(cat "$out/$f.client.pid")" || perftest_clock_failed "$(cat "$out/$f.client")" ||
        fail "the $f flow failed: $(cat "$out/$f.client")"
    wait "$(cat "$out/$f.server.pid")" || perftest_clock_failed "$(cat "$out/$f.server")" ||
        fail "the $f flow's server failed: $(cat "$out/$f.server")"
done
echo "PFC: a paused priority waits and resumes, another runs on; a backlogged engine asks for pauses"
