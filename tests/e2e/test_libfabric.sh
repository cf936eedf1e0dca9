#!/usr/bin/env bash
# libfabric's verbs provider (Debian's libfabric1 and libfabric-bin, unmodified) over
# softhca: it finds the devices through libibverbs and connects through librdmacm.
#   - On the built-in wire: `fi_info -p verbs` lists the MSG and DGRAM domains of the
#     instance's device, and fi_pingpong over MSG (rdma_cm-connected RC), RDM (ofi_rxm
#     over MSG, both transmit modes) and DGRAM (UD) endpoints moves every size from 1 B
#     up with its data checks (-c) on.
#   - Across two namespaces (af_packet ports on a veth whose kernel interfaces carry the
#     ports' addresses, as a RoCE netdev does): fi_info puts the interface's address on
#     the device, and fi_pingpong over DGRAM passes with data checks.
# fi_pingpong (libfabric 1.17) has no source-address option: its MSG and RDM servers bind
# "localhost" and name themselves 127.0.0.1, which a client on another host cannot reach,
# over the kernel's rdma_cm as over softhca's; those two run on one host only.
#   test_libfabric.sh
source "$(dirname "$0")/lib.sh"
here=$(cd "$(dirname "$0")" && pwd)
command -v fi_pingpong >/dev/null || fail "fi_pingpong not found (libfabric-bin)"
pair=shfab
servers=()
out=$(mktemp)
cleanup() {
    for pid in "${servers[@]}"; do kill "$pid" 2>/dev/null || true; done
    "$SOFTHCA" down >/dev/null 2>&1 || true
    "$here/../../tools/netns-pair.sh" down "$pair" >/dev/null 2>&1 || true
    rm -f "$out"
}
trap cleanup EXIT

# One fi_pingpong exchange: server then client (to the server's control address $1).
#   pingpong SERVER_RUNNER CLIENT_RUNNER ADDR NAME ARGS...
pingpong() {
    local server_run=$1 client_run=$2 addr=$3 name=$4
    shift 4
    local port=$((20000 + RANDOM % 20000))
    $server_run timeout 60 fi_pingpong -p verbs -B "$port" "$@" >"$out" 2>&1 &
    servers+=($!)
    sleep 0.3
    local result rc=0 i
    # The server's control socket listens once it has its endpoint: retry the connect.
    for i in $(seq 20); do
        rc=0
        result=$($client_run timeout 60 fi_pingpong -p verbs -P "$port" "$@" "$addr" 2>&1) || rc=$?
        grep -q "ctrl/connect\|Connection refused" <<<"$result" || break
        sleep 0.3
    done
    [ "$rc" -eq 0 ] || fail "fi_pingpong $name client ($rc): $result"$'\n'"server: $(cat "$out")"
    wait "${servers[-1]}" || fail "fi_pingpong $name server: $(cat "$out")"
    # Every size of the run is reported with all of its transfers acknowledged.
    local rows
    rows=$(grep -cE "^[0-9.]+[kmg]? +[0-9]+ +=[0-9]+ " <<<"$result" || true)
    [ "$rows" -ge 1 ] || fail "fi_pingpong $name printed no results: $result"
    if grep -E "^[0-9.]+[kmg]? +[0-9]+ +=[0-9]+ " <<<"$result" | awk '$2 != substr($3, 2) {bad = 1} END {exit !bad}'; then
        fail "fi_pingpong $name: transfers not all acknowledged: $result"
    fi
    echo "fi_pingpong $name: $rows sizes, largest: $(grep -E "^[0-9.]+[kmg]? +[0-9]+ +=" <<<"$result" | tail -1)"
}

# The built-in wire.
"$SOFTHCA" up >/dev/null || fail "softhca up failed"
local_run() { "$SOFTHCA" exec -- "$@"; }
info=$(local_run fi_info -p verbs) || fail "fi_info -p verbs: $info"
for want in "domain: ${SOFTHCA_PREFIX}0 .*FI_EP_MSG" "domain: ${SOFTHCA_PREFIX}0-dgram .*FI_EP_DGRAM"; do
    paste -sd' ' <<<"$info" | sed 's/provider:/\nprovider:/g' | grep -qE "$want" ||
        fail "fi_info -p verbs lists no '$want': $info"
done
echo "fi_info -p verbs: $(grep -c "^provider:" <<<"$info") entries on the built-in wire"
pingpong local_run local_run 127.0.0.1 "msg on the built-in wire" -e msg -I 20 -S all -c
pingpong local_run local_run 127.0.0.1 "rdm on the built-in wire" -e rdm -I 20 -S all -c
pingpong local_run local_run 127.0.0.1 "rdm tagged on the built-in wire" -e rdm -m tagged -I 20 -S all -c
pingpong local_run local_run 127.0.0.1 "dgram on the built-in wire" -e dgram -I 20 -S all -c
"$SOFTHCA" down >/dev/null

# Across two namespaces.
"$here/../../tools/netns-pair.sh" up "$pair" >/dev/null || fail "netns-pair up failed"
run_a() { ip netns exec "$pair-a" "$SOFTHCA" exec --prefix "${pair}a" -- "$@"; }
run_b() { ip netns exec "$pair-b" "$SOFTHCA" exec --prefix "${pair}b" -- "$@"; }
info=$(run_a fi_info -p verbs -t FI_EP_MSG -s 198.18.2.1) || fail "fi_info -s 198.18.2.1: $info"
grep -q "domain: ${pair}a0$" <<<"$info" || fail "fi_info puts 198.18.2.1 on no ${pair}a0: $info"
echo "fi_info -p verbs: ${pair}a0 at 198.18.2.1"
pingpong run_a run_b 198.18.2.1 "dgram across namespaces" -e dgram -I 20 -S all -c
echo PASS
