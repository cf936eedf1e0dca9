#!/usr/bin/env bash
# A fabric inside the engine (softhca up --fabric): a 2:1 oversubscribed leaf-spine of 8
# hosts on 10 Gb/s links. The four pingpongs (data checked) and the perftest bandwidth
# tools between hosts on different leaves, the traffic seen on the spine links and no
# faster than the hosts' links; the spine link an RC flow uses taken down under it
# (softhca fabric link) and the flow completing around it, then brought back; a link that
# does not exist refused, and so is the command on an engine without a fabric. Then RC
# data integrity (every byte checked, heap and shared memory) between two hosts whose path
# crosses spine links that drop, duplicate, reorder and corrupt frames. An incast under
# PFC loses nothing.
#   test_fabric.sh RC_VERBS_TEST
source "$(dirname "$0")/lib.sh"
RC_VERBS_TEST=${1:?path to rc_verbs_test}
trap '"$SOFTHCA" down >/dev/null 2>&1 || true; rm -f "${server_out:-}"' EXIT
server_out=$(mktemp)
P=$SOFTHCA_PREFIX

# One exchange between device numbers $1 (server) and $2 (client): TOOL ARGS.
exchange_once() {
    local server=$1 client=$2 tool=$3 port rc=0 flag=-g
    shift 3
    [[ $tool = ib_* ]] && flag=-x
    port=$(free_port)
    "$SOFTHCA" exec -- timeout 120 "$tool" -d "$P$server" $flag 0 -p "$port" "$@" \
        >"$server_out" 2>&1 &
    local pid=$!
    wait_listening "$port" || fail "$tool server did not start: $(cat "$server_out")"
    out=$("$SOFTHCA" exec -- timeout 120 "$tool" -d "$P$client" $flag 0 -p "$port" "$@" \
        127.0.0.1 2>&1) || rc=$?
    wait "$pid" || rc=$((rc ? rc : 100))
    PERFTEST_OUTPUT="$out $(cat "$server_out")"
    return "$rc"
}
exchange() {
    perftest_attempts exchange_once "$@" ||
        fail "$3 ${*:4} between $P$1 and $P$2: $out"$'\n'"server: $(cat "$server_out")"
}

# A counter of one egress port of the fabric ("leaf0 spine1 frames").
egress() {
    "$SOFTHCA" status --json | python3 -c '
import json, sys
doc = json.load(sys.stdin)
for e in doc["fabric"]["egress"]:
    if e["from"] == sys.argv[1] and e["to"] == sys.argv[2]:
        print(e[sys.argv[3]])' "$@"
}

"$SOFTHCA" up --fabric leaf-spine:hosts=8,leaves=2,spines=2,oversubscription=2,rate_gbps=10 \
    >/dev/null || fail "softhca up --fabric failed"
status=$("$SOFTHCA" status)
[ "$(grep -c "^device ${P}[0-7] port 1: ACTIVE" <<<"$status")" = 8 ] || fail "not 8 devices: $status"
grep -q "^fabric: leaf-spine: 8 hosts, 2 leaves, 2 spines, oversubscription 2" <<<"$status" ||
    fail "no fabric in the status: $status"
"$SOFTHCA" status --json | python3 -c '
import json, sys
f = json.load(sys.stdin)["fabric"]
assert f["endpoints"] == ["h%d" % i for i in range(8)], f["endpoints"]
assert len(f["egress"]) == 2 * (8 + 4), len(f["egress"])
assert [s["name"] for s in f["switches"]] == ["leaf0", "leaf1", "spine0", "spine1"]
' || fail "the fabric's status document"

# h0 and h7 are on different leaves: every frame crosses a spine.
exchange 0 7 ibv_rc_pingpong -c -s 65536 -n 200
echo "ibv_rc_pingpong h0 <-> h7: $(grep "iters in" <<<"$out")"
exchange 0 7 ibv_uc_pingpong -c -s 4096 -n 200
exchange 0 7 ibv_ud_pingpong -c -s 2048 -n 200
exchange 0 7 ibv_srq_pingpong -c -s 4096 -n 200
for tool in ib_write_bw ib_read_bw ib_send_bw; do
    exchange 1 6 "$tool" -s 65536 -n 2000
    line=$(grep -E '^ +65536' <<<"$out")
    echo "$tool h1 -> h6: $line"
    # No faster than a 10 Gb/s host link carries (1250 MB/s with the headers).
    awk '{exit !($4 <= 1250)}' <<<"$line" || fail "$tool beat the link's rate: $line"
done
spine_frames=$(($(egress leaf0 spine0 frames) + $(egress leaf0 spine1 frames)))
[ "$spine_frames" -gt 10000 ] || fail "the spine links carried $spine_frames frames"
[ "$(egress leaf1 h7 frames)" -gt 0 ] || fail "nothing reached h7"

# A spine link taken down under an RC flow (the one its frames from h0 cross): the flow
# moves to the other spine and completes, every message checked. 50,000 iterations: about
# 12 s on an idle machine, over a minute on a loaded one.
spines() { # frames leaf0 sent to spine0 and to spine1, from one status
    "$SOFTHCA" status --json | python3 -c '
import json, sys
e = {(x["from"], x["to"]): x["frames"] for x in json.load(sys.stdin)["fabric"]["egress"]}
print(e[("leaf0", "spine0")], e[("leaf0", "spine1")])'
}
port=$(free_port)
"$SOFTHCA" exec -- timeout 240 ibv_rc_pingpong -d "${P}0" -g 0 -p "$port" -c -s 4096 \
    -n 50000 >"$server_out" 2>&1 &
server=$!
wait_listening "$port" || fail "ibv_rc_pingpong server did not start"
read -r before0 before1 <<<"$(spines)"
"$SOFTHCA" exec -- timeout 240 ibv_rc_pingpong -d "${P}7" -g 0 -p "$port" -c -s 4096 \
    -n 50000 127.0.0.1 >"$server_out.client" 2>&1 &
client=$!
# Once the flow has crossed a spine 1000 times (however long a loaded machine takes to
# start it), the spine it crosses is the one whose count moved.
crossed() {
    read -r now0 now1 <<<"$(spines)"
    [ $((now0 - before0 + now1 - before1)) -ge 1000 ]
}
wait_until crossed 60 || fail "the RC flow did not start: $(cat "$server_out.client")"
used=0
[ $((now1 - before1)) -gt $((now0 - before0)) ] && used=1
other=$((1 - used))
other_before=$((other ? now1 : now0))
"$SOFTHCA" fabric link leaf0 "spine$used" down >/dev/null || fail "fabric link down"
kill -0 "$client" 2>/dev/null || fail "the RC flow ended before its link went down"
grep -q "leaf0 -> spine$used (down)" <<<"$("$SOFTHCA" status)" || fail "the link is not down"
wait_until '[ "$(egress leaf0 "spine$other" frames)" -gt $((other_before + 100)) ]' 10 ||
    fail "the flow did not move to spine$other"
wait "$client" ||
    fail "the RC flow did not survive spine$used's link (exit $?): $(cat "$server_out.client")"
wait "$server" || fail "the RC server: $(cat "$server_out")"
echo "ibv_rc_pingpong with leaf0-spine$used down under it: $(grep "iters in" "$server_out.client")"
rm -f "$server_out.client"
[ "$(egress leaf0 "spine$used" up)" = False ] || fail "leaf0 -> spine$used is up"
"$SOFTHCA" fabric link "spine$used" leaf0 up >/dev/null || fail "fabric link up"
[ "$(egress leaf0 "spine$used" up)" = True ] || fail "leaf0 -> spine$used stayed down"
exchange 0 7 ibv_rc_pingpong -c -s 4096 -n 100
if "$SOFTHCA" fabric link leaf0 leaf1 down 2>"$server_out"; then
    fail "a link that does not exist went down"
fi
grep -q "no such link" "$server_out" || fail "the refusal: $(cat "$server_out")"
"$SOFTHCA" down >/dev/null
# An engine without a fabric refuses the command, and says why.
"$SOFTHCA" up >/dev/null || fail "softhca up (the built-in wire) failed"
if "$SOFTHCA" fabric link leaf0 spine0 down 2>"$server_out"; then
    fail "an engine without a fabric took a fabric link down"
fi
grep -q "the engine runs no fabric" "$server_out" || fail "the refusal: $(cat "$server_out")"
"$SOFTHCA" down >/dev/null

# An incast under PFC: h0, h1 and h2 (leaf0) and h4 (leaf1) write into h5 (leaf1) at once;
# nothing is dropped anywhere, the switches paused the links that fed h5's queue, and every
# flow completes.
"$SOFTHCA" up --fabric leaf-spine:hosts=6,leaves=2,spines=1,rate_gbps=2,queue_kb=64,pfc=1,pfc_xoff_kb=32 \
    >/dev/null || fail "softhca up --fabric with PFC failed"
# All four servers listen before any client starts, so that the flows overlap however
# slowly a loaded machine starts them (one alone takes about 2 s).
pids=() outputs=() ports=()
for sender in 0 1 2 4; do
    port=$(free_port)
    "$SOFTHCA" exec -- timeout 120 ib_write_bw -d "${P}5" -x 0 -p "$port" -s 65536 -n 8000 \
        >"$server_out.$sender" 2>&1 &
    pids+=($!) outputs+=("$server_out.$sender")
    wait_listening "$port" || fail "ib_write_bw server for h$sender did not start"
    ports+=("$port")
done
for sender in 0 1 2 4; do
    "$SOFTHCA" exec -- timeout 120 ib_write_bw -d "$P$sender" -x 0 -p "${ports[0]}" -s 65536 \
        -n 8000 127.0.0.1 >"$server_out.client$sender" 2>&1 &
    pids+=($!) outputs+=("$server_out.client$sender")
    ports=("${ports[@]:1}")
done
for i in "${!pids[@]}"; do
    perftest_wait "${pids[$i]}" "${outputs[$i]}" "an incast flow under PFC"
done
rm -f "$server_out".*
"$SOFTHCA" status --json | python3 -c '
import json, sys
egress = json.load(sys.stdin)["fabric"]["egress"]
drops = sum(e["dropped"] + e["link_down"] for e in egress)
pauses = {e["from"] + ">" + e["to"]: e["pauses"] for e in egress if e["pauses"]}
assert drops == 0, "%d frames dropped under PFC" % drops
assert any(k.endswith(">leaf1") for k in pauses), "leaf1 paused nothing: %s" % pauses
print("incast of 4 into h5 under PFC: nothing dropped; pauses %s" % pauses)
' || fail "the incast under PFC"
"$SOFTHCA" down >/dev/null

# Faults on the spine links (each leaf has one host: devices 0 and 1 talk across them).
"$SOFTHCA" up --fabric leaf-spine:hosts=2,leaves=2,spines=2 \
    --faults drop=0.01,dup=0.01,reorder=0.01,corrupt=0.002,seed=7 >/dev/null ||
    fail "softhca up --fabric --faults failed"
for memory in heap shared; do
    "$SOFTHCA" exec -- env SOFTHCA_PREFIX="$P" SOFTHCA_TEST_MEMORY=$memory SOFTHCA_TEST_LOSSY=1 \
        timeout 300 "$RC_VERBS_TEST" "[integrity]" ||
        fail "RC data integrity across lossy spine links ($memory memory)"
done
bad_icrc=$("$SOFTHCA" status | grep -oE "rx_bad_icrc [0-9]+" | awk '{s += $2} END {print s}')
[ "$bad_icrc" -gt 0 ] || fail "no corrupted frame reached a host: were the faults on the path?"
echo "RC integrity across lossy spine links: passed (heap and shared memory;" \
    "$bad_icrc corrupted frames rejected by the ICRC)"
echo PASS
