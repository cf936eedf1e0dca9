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
#   counts PFC frames received, host b sent, from just before the stop).
#   Per priority: host a has PFC on every priority (--pfc), host b on priority 3 only
#   (--pfc-priorities 3), as a RoCE network keeps one priority lossless. Host b's own
#   pauses and resumes, which a busy engine sends whenever its queue backs up and drains,
#   then never name priority 0, so nothing but the injector pauses or resumes it there;
#   and frames pausing priorities 0 and 3, sent into host b, pause its priority 3 only.
source "$(dirname "$0")/lib.sh"
here=$(cd "$(dirname "$0")" && pwd)
pair=${SOFTHCA_PREFIX}
export SOFTHCA
out=$(mktemp -d)
# (an injector is told to stop; kill 0 would signal the whole process group)
trap '[ -z "${injector:-}" ] || { touch "$out/stop"; wait "$injector"; } 2>/dev/null || true
      [ -z "${engine_b:-}" ] || kill -CONT "$engine_b" 2>/dev/null || true
      "$here/../../tools/netns-pair.sh" down "$pair" >/dev/null 2>&1 || true; rm -rf "$out"' EXIT
"$here/../../tools/netns-pair.sh" down "$pair" >/dev/null 2>&1 || true
SOFTHCA_UP_ARGS_A="--pfc" SOFTHCA_UP_ARGS_B="--pfc-priorities 3" \
    "$here/../../tools/netns-pair.sh" up "$pair" >/dev/null ||
    fail "netns-pair up failed"
run_a() { ip netns exec "$pair-a" "$SOFTHCA" exec --prefix "${pair}a" -- "$@"; }
run_b() { ip netns exec "$pair-b" "$SOFTHCA" exec --prefix "${pair}b" -- "$@"; }
status_a() { ip netns exec "$pair-a" "$SOFTHCA" status --prefix "${pair}a" --json; }
status_b() { ip netns exec "$pair-b" "$SOFTHCA" status --prefix "${pair}b" --json; }
# fields HOST_STATUS_JSON EXPRESSION...: values of the host's device `d`, on one line.
fields() {
    python3 -c 'import json, sys
d = json.loads(sys.argv[1])["devices"][0]
print(*(eval(e) for e in sys.argv[2:]))' "$@"
}

# PFC frames from a raw socket on INTERFACE: with QUANTA 0 one frame resuming the
# priorities in ENABLE (XON); otherwise frames pausing them that long, every millisecond,
# until $out/stop exists (40 s at most), marking $out/injecting once the first has left.
#   pfc_frames NAMESPACE INTERFACE ENABLE QUANTA
pfc_frames() {
    ip netns exec "$1" chrt -f 10 python3 - "$2" "$3" "$4" "$out" <<'EOF'
import os, socket, struct, sys, time
enable, quanta = int(sys.argv[2], 0), int(sys.argv[3], 0)
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((sys.argv[1], 0))
frame = bytes.fromhex("0180c2000001") + bytes.fromhex("025348aabbcc") + struct.pack(
    "!HHH8H", 0x8808, 0x0101, enable, *(quanta if enable >> p & 1 else 0 for p in range(8)))
frame += bytes(60 - len(frame))
started, stop = os.path.join(sys.argv[4], "injecting"), os.path.join(sys.argv[4], "stop")
end = time.monotonic() + 40
while True:
    s.send(frame)
    if quanta == 0 or time.monotonic() >= end or os.path.exists(stop):
        break
    if not os.path.exists(started):
        open(started, "w").close()
    time.sleep(0.001)
EOF
}
# Pauses of the priorities in ENABLE, the longest (3.4 ms at the port's 10 Gb/s), every
# millisecond from a real-time process, so that the busy flows cannot hold it off for
# longer than a pause, until stop_injector. Returns once the first frame has left.
#   start_injector NAMESPACE INTERFACE ENABLE
start_injector() {
    rm -f "$out/injecting" "$out/stop"
    pfc_frames "$1" "$2" "$3" 0xffff &
    injector=$!
    for _ in $(seq 100); do [ -e "$out/injecting" ] && break; sleep 0.1; done
    [ -e "$out/injecting" ] || fail "the PFC frame injector did not start"
}
stop_injector() {
    touch "$out/stop"
    wait "$injector" || fail "the PFC frame injector failed"
    injector=
}

# Two flows from a to b: priority 0 and priority 3; the servers listen on b. They run
# 20 s, past the two phases that need them even on a loaded machine (checked); the
# priority 3 flow on four QPs, the other on two: with up to 256 packets in flight per QP,
# what reaches a stopped engine (up to 1536, 1024 of them priority 3, the one priority it
# may ask to pause) is more than one receive round takes (512), so the round after it is
# backlogged.
export SERVER_NS="$pair-b"
flow() { # flow NAME TCLASS QPS
    local port
    port=$(free_port)
    run_b timeout 60 ib_write_bw -d "${pair}b0" -x 0 -p "$port" --tclass="$2" -D 20 \
        -q "$3" -s 65536 >"$out/$1.server" 2>&1 &
    echo $! >"$out/$1.server.pid"
    wait_listening "$port" || fail "ib_write_bw server $1 did not start: $(cat "$out/$1.server")"
    run_a timeout 60 ib_write_bw -d "${pair}a0" -x 0 -p "$port" --tclass="$2" -D 20 \
        -q "$3" -s 65536 198.18.2.2 >"$out/$1.client" 2>&1 &
    echo $! >"$out/$1.client.pid"
}
flows_running() {
    local f
    for f in p0 p3; do
        kill -0 "$(cat "$out/$f.client.pid")" 2>/dev/null ||
            fail "the $f flow ended before $1: $(cat "$out/$f.client")"
    done
}
flow p0 0 2
flow p3 104 4
sleep 2
# packets_sent of host a's QPs: "p0 p3" (the p0 flow's context was opened first).
sent() {
    status_a | python3 -c '
import json, sys
contexts = sorted(json.load(sys.stdin)["contexts"], key=lambda c: c["id"])
sent = [sum(q["counters"]["packets_sent"] for q in c["qps"]) for c in contexts]
print(*(sent + [0, 0])[:2])'
}

# Honouring: priority 0 paused at host a. What the flows sent is counted between two looks
# at least 1.2 s apart, both taken while the injector runs (on a loaded machine one look
# at the status can take a second: a fixed schedule once counted past the pauses' end).
flows_running "the pause"
start_injector "$pair-b" "${pair}vb" 0x01
sleep 0.3 # what was on its way when the first pause came is out
read -r p0_before p3_before < <(sent)
sleep 1.2
read -r p0_after p3_after < <(sent)
a_status=$(status_a)
b_status=$(status_b)
stop_injector
# Resume (XON), then let the flows finish.
pfc_frames "$pair-b" "${pair}vb" 0x01 0
read -r rx_pfc waits a_prio < <(fields "$a_status" 'd["counters"]["rx_pfc_frames"]' \
    'd["counters"]["tx_pfc_waits"]' 'd["pfc"]["priorities"]')
b_prio=$(fields "$b_status" 'd["pfc"]["priorities"]')
p0=$((p0_after - p0_before))
p3=$((p3_after - p3_before))
echo "over 1.2 s or more of PFC pausing priority 0: priority 0 flow sent $p0 packets," \
    "priority 3 flow $p3; host a received $rx_pfc PFC frames, its requesters waited $waits times"
[ "$a_prio $b_prio" = "255 8" ] ||
    fail "PFC enabled for priorities $a_prio and $b_prio (bit masks), not 255 and 8"
[ "$rx_pfc" -ge 500 ] || fail "host a counted only $rx_pfc PFC frames"
[ "$waits" -gt 0 ] || fail "no requester waited for the paused priority"
[ "$p3" -ge 1000 ] || fail "the priority 3 flow stopped too ($p3 packets): the pause was not per priority"
[ "$p0" -le $((p3 / 50)) ] || fail "the paused priority 0 flow kept sending ($p0 packets, priority 3 $p3)"

# Asking: stop host b's engine for 200 ms under the flows. Counted from just before, host
# a's count around host b's (so it takes in every frame host b counted).
flows_running "host b's engine stood still"
a_rx_before=$(fields "$(status_a)" 'd["counters"]["rx_pfc_frames"]')
b_tx_before=$(fields "$(status_b)" 'd["counters"]["tx_pfc_frames"]')
engine_b=$(cat "${SOFTHCA_RUN_ROOT:-/run/softhca}/${pair}b/engine.pid")
kill -STOP "$engine_b"
sleep 0.2
kill -CONT "$engine_b"
sleep 0.5
b_tx=$(($(fields "$(status_b)" 'd["counters"]["tx_pfc_frames"]') - b_tx_before))
a_rx=$(($(fields "$(status_a)" 'd["counters"]["rx_pfc_frames"]') - a_rx_before))
echo "after host b's engine stood still for 200 ms: it sent $b_tx PFC frames, host a received $a_rx"
[ "$b_tx" -gt 0 ] || fail "the backlogged engine asked for no pause"
[ "$a_rx" -ge "$b_tx" ] || fail "host a received $a_rx of host b's $b_tx PFC frames"

for f in p0 p3; do
    perftest_wait "$(cat "$out/$f.client.pid")" "$out/$f.client" "the $f flow"
    perftest_wait "$(cat "$out/$f.server.pid")" "$out/$f.server" "the $f flow's server"
done
# Per priority at host b: frames pausing priorities 0 and 3 pause only 3 there (a frame
# sets what is paused when it arrives; no traffic needed).
start_injector "$pair-a" "${pair}va" 0x09
masks=()
for _ in 1 2 3; do
    masks+=("$(fields "$(status_b)" 'd["pfc"]["paused_by_peer"]')")
    sleep 0.1
done
stop_injector
echo "host b, paused on priorities 0 and 3 by its peer, has paused (bit masks): ${masks[*]}"
for mask in "${masks[@]}"; do
    [ $((mask & 1)) -eq 0 ] || fail "host b paused priority 0, which has no PFC there (${masks[*]})"
done
[ $((masks[0] | masks[1] | masks[2])) -eq 8 ] || fail "host b never paused priority 3 (${masks[*]})"

echo "PFC: a paused priority waits and resumes, another runs on; a backlogged engine asks for" \
    "pauses; PFC is per priority"
