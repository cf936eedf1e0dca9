#!/usr/bin/env bash
# The tools users already have, on an instance of this test's own: ibstat and ibstatus
# (infiniband-diags) list the devices; the port counters in sysfs (ports/1/counters,
# hw_counters) grow by what an ib_write_bw moved, agree with `softhca status` and between
# the two ends, and honour hw_counters/lifespan; Prometheus's node_exporter (its
# infiniband collector, pointed at softhca's sysfs) exports them.
#   test_diag_tools.sh
source "$(dirname "$0")/lib.sh"
server=${SOFTHCA_PREFIX}0 client=${SOFTHCA_PREFIX}1
exporter=
trap 'if [ -n "$exporter" ]; then kill "$exporter" 2>/dev/null || true; fi
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
write_bw() { # MESSAGES: 64 KiB writes from the client to the server
    local port=$((18700 + RANDOM % 200)) rc=0
    "$SOFTHCA" exec -- timeout 60 ib_write_bw -d "$server" -x 0 -p "$port" -s 65536 -n "$1" \
        >/dev/null 2>&1 &
    local server_pid=$!
    wait_listening "$port" || fail "ib_write_bw's server did not listen"
    "$SOFTHCA" exec -- timeout 60 ib_write_bw -d "$client" -x 0 -p "$port" -s 65536 -n "$1" \
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
[ "$(counter "$client" hw_counters/sent_pkts)" = "$(counter "$client" counters/port_xmit_packets)" ] ||
    fail "hw_counters/sent_pkts differs from counters/port_xmit_packets"
[ "$(counter "$server" hw_counters/rcvd_pkts)" = "$(counter "$server" counters/port_rcv_packets)" ] ||
    fail "hw_counters/rcvd_pkts differs from counters/port_rcv_packets"
for f in port_rcv_errors symbol_error; do
    [ "$(counter "$server" "counters/$f")" = 0 ] || fail "counters/$f is not 0"
done
[ "$(counter "$client" hw_counters/lifespan)" = 10 ] || fail "lifespan is not 10 ms by default"

# lifespan: at 10 s (the kernel's most) the files keep the values of the last publication
# while traffic goes on (the engine reads lifespan each second); back at 10 ms they catch
# up. A value the kernel would refuse (over 10 s) leaves the lifespan as it was.
lifespan_file=$tree/class/infiniband/$client/ports/1/hw_counters/lifespan
echo 10000 >"$lifespan_file"
sleep 1.2
write_bw 200
shown=$(counter "$client" counters/port_xmit_data)
engine=$(($(status_counter "$client" tx_bytes) / 4))
echo "lifespan 10000: port_xmit_data shows $shown, the engine counts $engine"
[ "$shown" -lt "$engine" ] || fail "the file was updated within its 10 s lifespan"
echo 10 >"$lifespan_file"
wait_until settled 5 || fail "the files did not catch up once lifespan was 10 ms again"
echo 60000 >"$lifespan_file"
sleep 1.2
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
