#!/usr/bin/env bash
# librdmacm's own tools (Debian's rdmacm-utils and perftest, unmodified) connecting
# through the emulated rdma_cm device and the engine's IB CM, across the built-in wire
# (client on <prefix>0 at 198.18.0.1, server on <prefix>1 at 198.18.0.2):
#   rping -V (every ping's data verified), ucmatose with 16 connections, perftest -R,
#   and rping to a port nobody listens on (REJECTED, reason 8: invalid service id).
source "$(dirname "$0")/lib.sh"
servers=()
cleanup() {
    for pid in "${servers[@]}"; do kill "$pid" 2>/dev/null || true; done
    "$SOFTHCA" down >/dev/null 2>&1 || true
}
trap cleanup EXIT
"$SOFTHCA" up >/dev/null || fail "softhca up failed"
client_ip=198.18.0.1
server_ip=198.18.0.2
run() { "$SOFTHCA" exec -- timeout 60 "$@"; }
out=$(mktemp)
trap 'cleanup; rm -f "$out"' EXIT

# A listener is there once the engine reports it; rping has no TCP port to wait for.
listening() { "$SOFTHCA" status | grep -q "rdma_cm:.* listening [1-9]"; }

port=$((20000 + RANDOM % 20000))
run rping -s -a "$server_ip" -p "$port" -V -C 100 -S 4000 >"$out" 2>&1 &
servers+=($!)
wait_until listening 20 || fail "rping server did not listen: $(cat "$out")"
run rping -c -I "$client_ip" -a "$server_ip" -p "$port" -V -C 100 -S 4000 ||
    fail "rping client failed"
wait "${servers[-1]}" || fail "rping server failed: $(cat "$out")"
echo "rping: 100 pings of 4000 B verified"

port=$((port + 1))
run ucmatose -b "$server_ip" -p "$port" -c 16 -C 20 >"$out" 2>&1 &
servers+=($!)
wait_until listening 20 || fail "ucmatose server did not listen: $(cat "$out")"
run ucmatose -s "$server_ip" -b "$client_ip" -p "$port" -c 16 -C 20 ||
    fail "ucmatose client failed"
wait "${servers[-1]}" || fail "ucmatose server failed: $(cat "$out")"
echo "ucmatose: 16 connections"

for tool in ib_send_bw ib_write_bw ib_read_lat; do
    port=$((port + 1))
    run "$tool" -R -d "${SOFTHCA_PREFIX}1" -p "$port" -n 200 >"$out" 2>&1 &
    servers+=($!)
    wait_until listening 20 || fail "$tool server did not listen: $(cat "$out")"
    result=$(run "$tool" -R -d "${SOFTHCA_PREFIX}0" -p "$port" -n 200 "$server_ip" 2>&1) ||
        fail "$tool -R client failed: $result"
    wait "${servers[-1]}" || fail "$tool -R server failed: $(cat "$out")"
    grep -qE "^ +[0-9]+ +200 " <<<"$result" || fail "$tool -R printed no result: $result"
    echo "$tool -R: done"
done

port=$((port + 1))
if result=$(run rping -c -a "$server_ip" -p "$port" -C 1 2>&1); then
    fail "rping to a port nobody listens on succeeded: $result"
fi
grep -q "RDMA_CM_EVENT_REJECTED, error 8" <<<"$result" ||
    fail "no REJECTED (invalid service id) for a port nobody listens on: $result"
echo "no listener: REJECTED, reason 8"
echo PASS
