#!/usr/bin/env bash
# The tools users already have, on an instance of this test's own: ibstat and ibstatus
# (infiniband-diags) list the devices; iproute2's rdma tool (dev, link, system, statistic
# and resource show) sees them through the RDMA netlink softhca's preload answers, bad
# netlink input gets the kernel's errors, and another user sees none of root's QPs; the
# port counters in sysfs (ports/1/counters,
# hw_counters) grow by what an ib_write_bw moved, agree with `softhca status` and between
# the two ends, and honour hw_counters/lifespan; Prometheus's node_exporter (its
# infiniband collector, pointed at softhca's sysfs) exports them.
#   test_diag_tools.sh
source "$(dirname "$0")/lib.sh"
here=$(cd "$(dirname "$0")" && pwd)
server=${SOFTHCA_PREFIX}0 client=${SOFTHCA_PREFIX}1
exporter= pingpongs=()
trap 'if [ -n "$exporter" ]; then kill "$exporter" 2>/dev/null || true; fi
      for p in "${pingpongs[@]}"; do kill "$p" 2>/dev/null || true; done
      "$SOFTHCA" down >/dev/null 2>&1 || true' EXIT
"$SOFTHCA" up >/dev/null || fail "softhca up failed"
tree=$("$SOFTHCA" env | sed -n 's/^export SYSFS_PATH=//p')
[ -d "$tree/class/infiniband/$client" ] || fail "no device tree at '$tree'"

# ibstat: libibumad scans the device's ports and pkeys with scandir.
out=$("$SOFTHCA" exec -- ibstat "$client") || fail "ibstat: $out"
echo "$out"
for want in "CA '$client'" "CA type: softhca" "State: Active" "Physical state: LinkUp" \
    "Capability mask: 0x00010000" "Link layer: Ethernet"; do
    grep -qF "$want" <<<"$out" || fail "ibstat printed no '$want'"
done
[ "$("$SOFTHCA" exec -- ibstat -l | sort | tr '\n' ' ')" = "$server $client " ] ||
    fail "ibstat -l does not list exactly $server and $client"
# ibstatus (a shell script): cd into the class folder, list it, cat each port's files.
out=$("$SOFTHCA" exec -- ibstatus) || fail "ibstatus: $out"
for dev in "$server" "$client"; do
    grep -qF "Infiniband device '$dev' port 1 status:" <<<"$out" || fail "ibstatus: no $dev: $out"
done
grep -qE "state:[[:space:]]+4: ACTIVE" <<<"$out" || fail "ibstatus shows no ACTIVE port: $out"

# iproute2's rdma tool.
out=$("$SOFTHCA" exec -- rdma dev show) || fail "rdma dev show: $out"
echo "$out"
for dev in "$server" "$client"; do
    guid=$(cat "$tree/class/infiniband/$dev/node_guid")
    grep -qE "^[0-9]+: $dev: node_type ca fw .* node_guid $guid " <<<"$out" ||
        fail "rdma dev show: no $dev with node_guid $guid"
done
out=$("$SOFTHCA" exec -- rdma link show) || fail "rdma link show: $out"
echo "$out"
for dev in "$server" "$client"; do
    grep -q "^link $dev/1 state ACTIVE physical_state LINK_UP" <<<"$out" ||
        fail "rdma link show: $dev/1 is not ACTIVE and LINK_UP"
done
out=$("$SOFTHCA" exec -- rdma system show) || fail "rdma system show: $out"
grep -q "netns shared copy-on-fork on" <<<"$out" || fail "rdma system show: $out"
"$SOFTHCA" exec -- python3 "$here/rdma_netlink_probe.py" || fail "bad netlink input"
out=$("$SOFTHCA" exec -- rdma resource show cm_id 2>&1) || fail "rdma resource show cm_id: $out"
[ -z "$out" ] || fail "rdma resource show cm_id lists ids before any was made: $out"

counter() { cat "$tree/class/infiniband/$1/ports/1/$2"; }
status_counter() { # DEVICE NAME: the port counter as `softhca status` shows it
    "$SOFTHCA" status | grep -A3 "^device $1 " | grep -m1 "counters:" |
        sed -n "s/.* $2 \([0-9]*\).*/\1/p"
}
# The files agree with the engine's counts once the engine has published (lifespan 10 ms).
settled() {
    local dev
    for dev in "$server" "$client"; do
        [ "$(counter "$dev" counters/port_xmit_packets)" = "$(status_counter "$dev" tx_packets)" ] &&
            [ "$(counter "$dev" counters/port_rcv_packets)" = "$(status_counter "$dev" rx_packets)" ] &&
            [ $(($(status_counter "$dev" tx_bytes) / 4)) = "$(counter "$dev" counters/port_xmit_data)" ] ||
            return 1
    done
}
# The port counters count what crosses the port: the writes go the engine's way
# (SOFTHCA_SINGLE_COPY=0), unless SINGLE_COPY=1 lets the client copy them itself.
write_bw() { # MESSAGES: 64 KiB writes from the client to the server
    local port=$((18700 + RANDOM % 200)) rc=0
    "$SOFTHCA" exec -- env SOFTHCA_SINGLE_COPY="${SINGLE_COPY:-0}" timeout 60 ib_write_bw \
        -d "$server" -x 0 -p "$port" -s 65536 -n "$1" >/dev/null 2>&1 &
    local server_pid=$!
    wait_listening "$port" || fail "ib_write_bw's server did not listen"
    "$SOFTHCA" exec -- env SOFTHCA_SINGLE_COPY="${SINGLE_COPY:-0}" timeout 60 ib_write_bw \
        -d "$client" -x 0 -p "$port" -s 65536 -n "$1" \
        "$SERVER_ADDR" >/dev/null 2>&1 || rc=$?
    wait "$server_pid" || rc=$?
    [ "$rc" -eq 0 ] || fail "ib_write_bw -n $1 failed ($rc)"
}

wait_until settled 5 || fail "the counter files do not agree with softhca status at rest"
sent_before=$(counter "$client" counters/port_xmit_data)
received_before=$(counter "$server" counters/port_rcv_data)
write_bw 1000
wait_until settled 5 || fail "the counter files do not agree with softhca status after traffic"
sent=$(($(counter "$client" counters/port_xmit_data) - sent_before))
received=$(($(counter "$server" counters/port_rcv_data) - received_before))
echo "ib_write_bw 1000 x 64 KiB: $client port_xmit_data +$sent words, $server port_rcv_data +$received"
[ $((sent * 4)) -ge $((1000 * 65536)) ] || fail "port_xmit_data grew by $sent words, less than was sent"
# The built-in wire loses nothing: what one end sent, the other received.
[ "$(counter "$client" counters/port_xmit_data)" = "$(counter "$server" counters/port_rcv_data)" ] ||
    fail "$client sent $(counter "$client" counters/port_xmit_data) words, $server received $(counter "$server" counters/port_rcv_data)"
# Copied by the client itself (single copy, docs/memory-model.md): nothing crosses the
# port, and hw_counters/placed_bytes counts the bytes.
placed_before=$(counter "$client" hw_counters/placed_bytes)
SINGLE_COPY=1 write_bw 1000
wait_until settled 5 || fail "the counter files do not agree with softhca status after traffic"
placed=$(($(counter "$client" hw_counters/placed_bytes) - placed_before))
echo "ib_write_bw 1000 x 64 KiB, single copy: $client placed_bytes +$placed"
[ "$placed" -ge $((1000 * 65536)) ] || fail "placed_bytes grew by $placed, less than was written"
[ "$(counter "$client" hw_counters/sent_pkts)" = "$(counter "$client" counters/port_xmit_packets)" ] ||
    fail "hw_counters/sent_pkts differs from counters/port_xmit_packets"
[ "$(counter "$server" hw_counters/rcvd_pkts)" = "$(counter "$server" counters/port_rcv_packets)" ] ||
    fail "hw_counters/rcvd_pkts differs from counters/port_rcv_packets"
# SENDs and receives completed: a pingpong of 200 exchanges (each end sends and
# receives 200 messages) adds at least that many to rdma_sends and rdma_recvs on each.
sends_before=$(counter "$client" hw_counters/rdma_sends)
recvs_before=$(counter "$server" hw_counters/rdma_recvs)
port=$((18900 + RANDOM % 100))
"$SOFTHCA" exec -- timeout 60 ibv_rc_pingpong -d "$server" -g 0 -p "$port" -n 200 >/dev/null 2>&1 &
pingpong_server=$!
wait_listening "$port" || fail "ibv_rc_pingpong's server did not listen"
"$SOFTHCA" exec -- timeout 60 ibv_rc_pingpong -d "$client" -g 0 -p "$port" -n 200 "$SERVER_ADDR" \
    >/dev/null 2>&1 || fail "ibv_rc_pingpong failed"
wait "$pingpong_server" || fail "ibv_rc_pingpong's server failed"
wait_until "[ \$((\$(counter $client hw_counters/rdma_sends) - $sends_before)) -ge 200 ] &&
    [ \$((\$(counter $server hw_counters/rdma_recvs) - $recvs_before)) -ge 200 ]" 5 ||
    fail "rdma_sends grew by $(($(counter "$client" hw_counters/rdma_sends) - sends_before)), rdma_recvs by $(($(counter "$server" hw_counters/rdma_recvs) - recvs_before)) over 200 exchanges"
for name in rcvd_seq_err retry_exceeded_err retry_rnr_exceeded_err completer_retry_err; do
    [ -n "$(counter "$client" "hw_counters/$name")" ] || fail "no hw_counters/$name"
done
wait_until settled 5 || fail "the counter files do not agree with softhca status after the pingpong"
for f in port_rcv_errors symbol_error; do
    [ "$(counter "$server" "counters/$f")" = 0 ] || fail "counters/$f is not 0"
done
[ "$(counter "$client" hw_counters/lifespan)" = 10 ] || fail "lifespan is not 10 ms by default"
out=$("$SOFTHCA" exec -- rdma statistic show link "$client/1") || fail "rdma statistic show: $out"
echo "$out"
grep -q " sent_pkts $(counter "$client" hw_counters/sent_pkts) " <<<"$out" ||
    fail "rdma statistic show: sent_pkts differs from hw_counters/sent_pkts"

# rdma resource show: a running ibv_rc_pingpong's QPs, with their processes; another user
# sees none of them.
# start_pingpong TOOL PORT: TOOL's server on $server and client on $client, exchanging
# until stopped (their pids in pingpongs).
start_pingpong() {
    "$SOFTHCA" exec -- "$1" -d "$server" -g 0 -p "$2" -n 100000000 >/dev/null 2>&1 &
    pingpongs+=($!)
    wait_listening "$2" || fail "$1's server did not listen"
    "$SOFTHCA" exec -- "$1" -d "$client" -g 0 -p "$2" -n 100000000 "$SERVER_ADDR" \
        >/dev/null 2>&1 &
    pingpongs+=($!)
}
# Per-QP counters (rdma statistic qp): none until asked for; auto mode by QP type and
# process binds the pingpong's QP when it reaches INIT.
sx() { "$SOFTHCA" exec -- "$@"; }
sx rdma statistic qp mode link "$client/1" | grep -q "mode qp auto off" ||
    fail "rdma statistic qp mode: $(sx rdma statistic qp mode link "$client/1")"
out=$(sx rdma statistic qp show link "$client/1") || fail "rdma statistic qp show: $out"
[ -z "$out" ] || fail "per-QP counters before any was asked for: $out"
if id nobody >/dev/null 2>&1; then
    said=$(setpriv --reuid=65534 --regid=65534 --clear-groups "$SOFTHCA" exec -- \
        rdma statistic qp set link "$client/1" auto type on 2>&1) &&
        fail "another user set the counter mode"
    grep -q "Operation not permitted" <<<"$said" || fail "another user's set: $said"
fi
sx rdma statistic qp set link "$client/1" auto type,pid on || fail "rdma statistic qp set auto type,pid on"
sx rdma statistic qp mode link "$client/1" | grep -q "mode qp auto type,pid on" ||
    fail "rdma statistic qp mode after set: $(sx rdma statistic qp mode link "$client/1")"
start_pingpong ibv_rc_pingpong $((18900 + RANDOM % 100))
wait_until "\"$SOFTHCA\" exec -- rdma res show qp | grep -q '^link $client/1 .*state RTS'" 10 ||
    fail "no RTS QP of the pingpong in rdma res show qp: $("$SOFTHCA" exec -- rdma res show qp)"
qp_counter_sends() { # the rdma_sends of the client's counter
    sx rdma statistic qp show link "$client/1" | sed -n 's/.* rdma_sends \([0-9]*\) .*/\1/p'
}
out=$(sx rdma statistic qp show link "$client/1") || fail "rdma statistic qp show: $out"
echo "$out"
client_qpn=$(sx rdma res show qp link "$client/1" | sed -n 's/.* lqpn \([0-9]*\) .*/\1/p' | head -1)
grep -qE "^link $client/1 cntn [0-9]+ qp-type RC pid [0-9]+ comm ibv_rc_pingpong .*rdma_sends [0-9]+ " \
    <<<"$out" || fail "rdma statistic qp show: no RC counter of the pingpong: $out"
tr -d '\n' <<<"$out" | grep -q "LQPN: <$client_qpn>" || fail "the counter does not hold QP $client_qpn: $out"
first=$(qp_counter_sends)
wait_until "[ \$(qp_counter_sends) -gt $first ]" 5 || fail "the counter's rdma_sends does not grow"
refused_with() { # TEXT COMMAND...: the command fails saying TEXT
    local want=$1 said
    shift
    if said=$("$@" 2>&1); then fail "$* succeeded"; fi
    grep -q "$want" <<<"$said" || fail "$*: '$said', expected '$want'"
}
refused_with "busy" sx rdma statistic qp set link "$client/1" auto pid on
refused_with "Invalid argument" sx rdma statistic qp bind link "$client/1" lqpn "$client_qpn"
if id nobody >/dev/null 2>&1; then
    theirs=$(setpriv --reuid=65534 --regid=65534 --clear-groups "$SOFTHCA" exec -- \
        rdma statistic qp show) || fail "rdma statistic qp show as nobody failed"
    [ -z "$theirs" ] || fail "another user sees root's QP counters: $theirs"
fi
# Off with a counter left: manual, where unbind and bind work.
sx rdma statistic qp set link "$client/1" auto off || fail "rdma statistic qp set auto off"
cntn=$(sx rdma statistic qp show link "$client/1" | sed -n 's/.* cntn \([0-9]*\) .*/\1/p')
sx rdma statistic qp unbind link "$client/1" cntn "$cntn" lqpn "$client_qpn" || fail "unbind"
out=$(sx rdma statistic qp show link "$client/1") || fail "rdma statistic qp show: $out"
[ -z "$out" ] || fail "the counter outlived its last QP: $out"
sx rdma statistic qp bind link "$client/1" lqpn "$client_qpn" || fail "bind to a new counter"
sx rdma statistic qp show link "$client/1" | grep -q "LQPN: <$client_qpn>" ||
    fail "bind: $(sx rdma statistic qp show link "$client/1")"
refused_with "No such file" sx rdma statistic qp bind link "$client/1" lqpn 999999
out=$("$SOFTHCA" exec -- rdma res show qp) || fail "rdma res show qp: $out"
echo "$out"
line=$(grep "^link $client/1 " <<<"$out") || fail "no QP on $client/1"
qp_pid=$(sed -n 's/.* pid \([0-9]*\) .*/\1/p' <<<"$line")
[ "$(cat "/proc/$qp_pid/comm" 2>/dev/null)" = ibv_rc_pingpong ] ||
    fail "the QP's pid $qp_pid is not the pingpong's"
grep -qE "type RC state RTS rq-psn [0-9]+ sq-psn [0-9]+ pid $qp_pid comm ibv_rc_pingpong" <<<"$line" ||
    fail "rdma res show qp line: $line"
# Its CQ, MR, PD and context, each with the pingpong's pid: the CQ both its queues
# complete into, the 4 KiB buffer it registered, the PD that holds the MR and the QP (two
# users).
for kind in cq mr pd ctx; do
    out=$("$SOFTHCA" exec -- rdma res show "$kind" dev "$client") || fail "rdma res show $kind: $out"
    echo "$out"
    grep -q " pid $qp_pid comm ibv_rc_pingpong" <<<"$out" || fail "rdma res show $kind: no object of pid $qp_pid"
done
"$SOFTHCA" exec -- rdma res show mr dev "$client" | grep -qE "mrlen 4096 .*pid $qp_pid" ||
    fail "rdma res show mr: no 4096-byte MR of the pingpong"
"$SOFTHCA" exec -- rdma res show pd dev "$client" | grep -qE "users 2 .*pid $qp_pid" ||
    fail "rdma res show pd: the pingpong's PD does not have its MR and QP as users"
summary=$("$SOFTHCA" exec -- rdma res show) || fail "rdma res show: $summary"
echo "$summary"
grep -qE "^[0-9]+: $client: pd 1 cq 1 qp 1 mr 1 ctx 1" <<<"$summary" || fail "rdma res show: $summary"
if id nobody >/dev/null 2>&1; then
    theirs=$(setpriv --reuid=65534 --regid=65534 --clear-groups "$SOFTHCA" exec -- rdma res show qp) ||
        fail "rdma res show qp as nobody failed"
    [ -z "$theirs" ] || fail "another user sees root's QPs: $theirs"
fi
for p in "${pingpongs[@]}"; do kill "$p" 2>/dev/null || true; done
pingpongs=()

# rdma resource show srq: an ibv_srq_pingpong's SRQ, of type BASIC, with the QPs that
# receive from it (the ones `rdma resource show qp` lists for that process).
start_pingpong ibv_srq_pingpong $((19000 + RANDOM % 100))
wait_until "\"$SOFTHCA\" exec -- rdma res show srq dev $client | grep -q ' comm ibv_srq_pingpon'" 10 ||
    fail "no SRQ of the pingpong in rdma res show srq: $("$SOFTHCA" exec -- rdma res show srq)"
out=$("$SOFTHCA" exec -- rdma res show srq dev "$client") || fail "rdma res show srq: $out"
echo "$out"
srq_pid=$(sed -n 's/.* pid \([0-9]*\) .*/\1/p' <<<"$out")
[ "$(cat "/proc/$srq_pid/comm" 2>/dev/null)" = ibv_srq_pingpon ] ||
    fail "the SRQ's pid $srq_pid is not the pingpong's"
grep -qE "^dev $client srqn [0-9]+ type BASIC lqpn [0-9,]+ pdn [0-9]+ pid $srq_pid " <<<"$out" ||
    fail "rdma res show srq line: $out"
listed=$(sed -n 's/.* lqpn \([0-9,]*\) .*/\1/p' <<<"$out" | tr ',' '\n' | sort -n | tr '\n' ' ')
theirs=$("$SOFTHCA" exec -- rdma res show qp link "$client/1" | grep " pid $srq_pid " |
    sed -n 's/.* lqpn \([0-9]*\) .*/\1/p' | sort -n | tr '\n' ' ')
[ -n "$listed" ] && [ "$listed" = "$theirs" ] ||
    fail "the SRQ lists QPs '$listed', the process has '$theirs'"
for p in "${pingpongs[@]}"; do kill "$p" 2>/dev/null || true; done
pingpongs=()

# rdma resource show cm_id: an rping server's listener and both ends of its connection,
# with their QPs, addresses and processes; another user sees none of them.
port=$((19200 + RANDOM % 100))
address=$("$SOFTHCA" status --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["devices"][0]["ipv4"])')
"$SOFTHCA" exec -- rping -s -a "$address" -p "$port" -C 100000000 >/dev/null 2>&1 &
pingpongs+=($!)
rping_server=$!
wait_until "\"$SOFTHCA\" exec -- rdma res show cm_id | grep -q 'state LISTEN .* src-addr $address:$port'" 10 ||
    fail "no listener in rdma res show cm_id: $("$SOFTHCA" exec -- rdma res show cm_id)"
"$SOFTHCA" exec -- rping -c -a "$address" -p "$port" -C 100000000 -S 64 >/dev/null 2>&1 &
pingpongs+=($!)
rping_client=$!
wait_until "[ \$(\"$SOFTHCA\" exec -- rdma res show cm_id | grep -c 'state CONNECT') = 2 ]" 10 ||
    fail "no connection in rdma res show cm_id: $("$SOFTHCA" exec -- rdma res show cm_id)"
out=$("$SOFTHCA" exec -- rdma res show cm_id) || fail "rdma res show cm_id: $out"
echo "$out"
grep -qE "^link $server/1 cm-idn [0-9]+ state LISTEN ps TCP pid $rping_server comm rping src-addr $address:$port" <<<"$out" ||
    fail "rdma res show cm_id: no listener of pid $rping_server"
grep -qE "lqpn [0-9]+ qp-type RC state CONNECT ps TCP pid $rping_client comm rping src-addr $address:[0-9]+ dst-addr $address:$port" <<<"$out" ||
    fail "rdma res show cm_id: no connected id of the client, pid $rping_client"
grep -qE "lqpn [0-9]+ qp-type RC state CONNECT ps TCP pid $rping_server comm rping src-addr $address:$port dst-addr $address:[0-9]+" <<<"$out" ||
    fail "rdma res show cm_id: no connected id of the server, pid $rping_server"
if id nobody >/dev/null 2>&1; then
    theirs=$(setpriv --reuid=65534 --regid=65534 --clear-groups "$SOFTHCA" exec -- rdma res show cm_id) ||
        fail "rdma res show cm_id as nobody failed"
    [ -z "$theirs" ] || fail "another user sees root's cm_ids: $theirs"
fi
for p in "${pingpongs[@]}"; do kill "$p" 2>/dev/null || true; done
pingpongs=()

# lifespan: at 10 s (the kernel's most) the files keep the values of the last publication
# while traffic goes on (the engine reads lifespan each second); back at 10 ms they catch
# up. A value the kernel would refuse (over 10 s) leaves the lifespan as it was.
lifespan_file=$tree/class/infiniband/$client/ports/1/hw_counters/lifespan
echo 10000 >"$lifespan_file"
sleep 2 # the writer reads lifespan each second
write_bw 200
shown=$(counter "$client" counters/port_xmit_data)
engine=$(($(status_counter "$client" tx_bytes) / 4))
echo "lifespan 10000: port_xmit_data shows $shown, the engine counts $engine"
[ "$shown" -lt "$engine" ] || fail "the file was updated within its 10 s lifespan"
echo 10 >"$lifespan_file"
wait_until settled 5 || fail "the files did not catch up once lifespan was 10 ms again"
echo 60000 >"$lifespan_file"
sleep 2
write_bw 100
wait_until settled 5 || fail "a lifespan over 10 s was taken"

# node_exporter's infiniband collector over softhca's sysfs.
port=$((19100 + RANDOM % 500))
prometheus-node-exporter --collector.disable-defaults --collector.infiniband \
    --path.sysfs="$tree" --web.listen-address="127.0.0.1:$port" >/dev/null 2>&1 &
exporter=$!
metrics=
wait_until "metrics=\$(curl -sf http://127.0.0.1:$port/metrics)" 20 ||
    fail "node_exporter did not answer"
bytes=$(grep "^node_infiniband_port_data_transmitted_bytes_total{device=\"$client\",port=\"1\"}" \
    <<<"$metrics" | awk '{printf "%.0f", $2}')
echo "node_exporter: $client transmitted $bytes bytes"
[ "$bytes" = $(($(counter "$client" counters/port_xmit_data) * 4)) ] ||
    fail "node_exporter's transmitted bytes ($bytes) differ from port_xmit_data x 4"
for want in "node_infiniband_info{board_id=\"softhca\",device=\"$server\"" \
    "node_infiniband_state_id{device=\"$client\",port=\"1\"} 4" \
    "node_infiniband_port_packets_received_total{device=\"$server\",port=\"1\"}"; do
    grep -qF "$want" <<<"$metrics" || fail "node_exporter exports no '$want'"
done
echo PASS
