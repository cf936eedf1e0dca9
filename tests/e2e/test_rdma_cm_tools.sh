#!/usr/bin/env bash
# librdmacm's own tools (Debian's rdmacm-utils and perftest, unmodified) connecting
# through the emulated rdma_cm device and the engine's IB CM:
#   rping -V (every ping's data verified), ucmatose with 16 connections, udaddy (UD ids
#   through SIDR), mckey (multicast), rdma_server/rdma_client (synchronous ids, migrated
#   to their own channels), rstream and riostream (rsockets), a plain TCP program over
#   librspreload (every byte checked), perftest -R over RC and UD, and rping to a port
#   nobody listens on (REJECTED, reason 8: invalid service id).
#   test_rdma_cm_tools.sh TCP_STREAM_CHECK          # across the built-in wire: client on
#                                                   # <prefix>0 (198.18.0.1), server on
#                                                   # <prefix>1 (198.18.0.2)
#   test_rdma_cm_tools.sh TCP_STREAM_CHECK pair     # two engines in two namespaces
#                                                   # (tools/netns-pair.sh) on af_packet
#                                                   # ports over a veth: server 198.18.2.1
source "$(dirname "$0")/lib.sh"
here=$(cd "$(dirname "$0")" && pwd)
tcp_check=${1:?tcp_stream_check binary}
mode=${2:-wire}
rspreload=$(dpkg -L librdmacm1 | grep '/librspreload\.so$' | head -1)
[ -n "$rspreload" ] || fail "librspreload.so not found"
servers=()
ns_pair=$SOFTHCA_PREFIX
if [ "$mode" = pair ]; then
    export SOFTHCA
    SERVER_NS="$ns_pair-a" CLIENT_NS="$ns_pair-b" SERVER_PREFIX="${ns_pair}a" CLIENT_PREFIX="${ns_pair}b"
    server_dev="${ns_pair}a0" client_dev="${ns_pair}b0"
    server_ip=198.18.2.1 client_ip=198.18.2.2
else
    SERVER_NS="" CLIENT_NS="" SERVER_PREFIX=$SOFTHCA_PREFIX CLIENT_PREFIX=$SOFTHCA_PREFIX
    server_dev="${SOFTHCA_PREFIX}1" client_dev="${SOFTHCA_PREFIX}0"
    server_ip=198.18.0.2 client_ip=198.18.0.1
fi
cleanup() {
    for pid in "${servers[@]}"; do kill "$pid" 2>/dev/null || true; done
    if [ "$mode" = pair ]; then
        "$here/../../tools/netns-pair.sh" down "$ns_pair" >/dev/null 2>&1 || true
    else
        "$SOFTHCA" down >/dev/null 2>&1 || true
    fi
}
trap cleanup EXIT
if [ "$mode" = pair ]; then
    "$here/../../tools/netns-pair.sh" down "$ns_pair" >/dev/null 2>&1 || true
    "$here/../../tools/netns-pair.sh" up "$ns_pair" >/dev/null || fail "netns-pair up failed"
else
    "$SOFTHCA" up >/dev/null || fail "softhca up failed"
fi
srv() { on_server timeout 60 "$@"; }
cli() { on_client timeout 60 "$@"; }
server_status() {
    if [ -n "$SERVER_NS" ]; then
        ip netns exec "$SERVER_NS" "$SOFTHCA" status --prefix "$SERVER_PREFIX" "$@"
    else
        "$SOFTHCA" status --prefix "$SERVER_PREFIX" "$@"
    fi
}
out=$(mktemp)
trap 'cleanup; rm -f "$out"' EXIT

# A listener is there once the engine reports it; rping has no TCP port to wait for.
listening() { server_status | grep -q "rdma_cm:.* listening [1-9]"; }

port=$((20000 + RANDOM % 20000))
srv rping -s -a "$server_ip" -p "$port" -V -C 100 -S 4000 >"$out" 2>&1 &
servers+=($!)
wait_until listening 20 || fail "rping server did not listen: $(cat "$out")"
cli rping -c -I "$client_ip" -a "$server_ip" -p "$port" -V -C 100 -S 4000 ||
    fail "rping client failed"
wait "${servers[-1]}" || fail "rping server failed: $(cat "$out")"
echo "rping: 100 pings of 4000 B verified"

port=$((port + 1))
srv ucmatose -b "$server_ip" -p "$port" -c 16 -C 20 >"$out" 2>&1 &
servers+=($!)
wait_until listening 20 || fail "ucmatose server did not listen: $(cat "$out")"
cli ucmatose -s "$server_ip" -b "$client_ip" -p "$port" -c 16 -C 20 ||
    fail "ucmatose client failed"
wait "${servers[-1]}" || fail "ucmatose server failed: $(cat "$out")"
echo "ucmatose: 16 connections"

# Server and client of one tool: "server args" and "client args" (the port is added).
# udaddy and mckey take -p as the port space: they get no port (PAIR_PORT=no).
# One server and one client of a tool pair on a new port; 0 when both exited 0.
pair_once() {
    local server_args=$1 client_args=$2 port_args=() rc=0
    port=$((port + 1))
    [ "${PAIR_PORT:-yes}" = no ] || port_args=(-p "$port")
    # shellcheck disable=SC2086
    srv $server_args "${port_args[@]}" >"$out" 2>&1 &
    servers+=($!)
    wait_until listening 20 || fail "server did not listen: $server_args: $(cat "$out")"
    # shellcheck disable=SC2086
    result=$(cli $client_args "${port_args[@]}" 2>&1) || rc=$?
    # A server whose client failed would wait for it: stopped, its listener gone.
    [ "$rc" -eq 0 ] || { kill "${servers[-1]}" 2>/dev/null || true; }
    wait "${servers[-1]}" || rc=$((rc ? rc : 100))
    [ "$rc" -eq 0 ] || wait_until "! listening" 10 || true
    PERFTEST_OUTPUT="$result $(cat "$out")"
    return "$rc"
}
pair() {
    local name=$1
    perftest_attempts pair_once "$2" "$3" ||
        fail "$name failed: client: $result"$'\n'"server: $(cat "$out")"
    echo "$name: done"
}
PAIR_PORT=no pair udaddy "udaddy -b $server_ip" "udaddy -s $server_ip -b $client_ip"
pair rdma_server "rdma_server -s $server_ip" "rdma_client -s $server_ip"
pair rstream "rstream -b $server_ip -S 65536 -C 200" "rstream -s $server_ip -S 65536 -C 200"
pair riostream "riostream -b $server_ip -S 4096 -C 200" "riostream -s $server_ip -S 4096 -C 200"

# A plain TCP program over rsockets (librspreload after softhca's preload). On the built-in
# wire 198.18.0.2 has no kernel route, so the bytes can only travel as RDMA; across the
# namespaces the veth has one too, so the server port's counters must show the bytes.
port=$((port + 1))
rs_command() { echo "LD_PRELOAD=\$LD_PRELOAD:$rspreload exec timeout 60 \"\$@\""; }
received_bytes() {
    server_status --json | python3 -c 'import json, sys
print(sum(d["counters"]["rx_bytes"] for d in json.load(sys.stdin)["devices"] if d["name"] == sys.argv[1]))' "$server_dev"
}
bytes_before=$(received_bytes)
on_server sh -c "$(rs_command)" rs stdbuf -oL "$tcp_check" server "$server_ip" "$port" 8000000 \
    >"$out" 2>&1 &
servers+=($!)
wait_until "grep -q listening '$out'" 20 || fail "TCP server did not listen: $(cat "$out")"
on_client sh -c "$(rs_command)" rs "$tcp_check" client "$server_ip" "$port" 8000000 ||
    fail "TCP client over rsockets failed"
wait "${servers[-1]}" || fail "TCP server over rsockets failed: $(cat "$out")"
if [ "$mode" = pair ]; then
    # librspreload falls back to a kernel socket when rsockets cannot connect.
    received=$(($(received_bytes) - bytes_before))
    [ "$received" -ge 8000000 ] ||
        fail "the TCP program's bytes did not go through softhca ($received B)"
fi
echo "librspreload: 8 MB each way through a TCP program, every byte checked"

# mckey: the receiver joins first; the group needs no listener, so wait for the join.
port=$((port + 1))
srv stdbuf -oL mckey -m 239.1.1.1 -b "$server_ip" -C 10 >"$out" 2>&1 &
servers+=($!)
wait_until "grep -q 'receiving data' '$out'" 20 || fail "mckey receiver did not join: $(cat "$out")"
cli mckey -m 239.1.1.1 -s -b "$client_ip" -C 10 || fail "mckey sender failed"
wait "${servers[-1]}" || fail "mckey receiver failed: $(cat "$out")"
echo "mckey: 10 datagrams to 239.1.1.1"

for test in "ib_send_bw" "ib_write_bw" "ib_read_lat" "ib_send_bw -c UD"; do
    pair "$test -R" "$test -R -d $server_dev -n 200" "$test -R -d $client_dev -n 200 $server_ip"
    grep -qE "^ +[0-9]+ +200 " <<<"$result" || fail "$test -R printed no result: $result"
done

port=$((port + 1))
if result=$(cli rping -c -a "$server_ip" -p "$port" -C 1 2>&1); then
    fail "rping to a port nobody listens on succeeded: $result"
fi
grep -q "RDMA_CM_EVENT_REJECTED, error 8" <<<"$result" ||
    fail "no REJECTED (invalid service id) for a port nobody listens on: $result"
echo "no listener: REJECTED, reason 8"
echo PASS
