#!/usr/bin/env bash
# UCX's ucx_perftest (Debian's ucx-utils, unmodified) between the two devices of an
# instance, or across two namespaces (see lib.sh): the server on one device, the client
# on the other, each limited to its device by UCX_NET_DEVICES and to the transports in
# TLS by UCX_TLS. Both must exit 0, the client must print its final figures, and UCX
# must say the endpoint carries the test over the transport asked for (not shared
# memory or TCP).
#   test_ucx_perftest.sh TLS TEST [SIZE [ITERATIONS]]
# TLS "rc_verbs" means rc_verbs with ud_verbs as UCX's auxiliary (wire-up) transport,
# which is how UCP connects RC endpoints (UCX's own alias "rc_v" is exactly that): the
# protocol data goes over RC.
source "$(dirname "$0")/lib.sh"
tls=${1:?transport}
test_name=${2:?ucx_perftest test}
size=${3:-8}
iters=${4:-1000}
ucx_tls=$tls
[ "$tls" = rc_verbs ] && ucx_tls="rc_verbs,ud_verbs:aux"
command -v ucx_perftest >/dev/null || fail "ucx_perftest not installed (ucx-utils)"
server_out=$(mktemp)
trap 'kill ${server:-} 2>/dev/null || true; rm -f "$server_out"' EXIT
port=$(free_port)
common=(-p "$port" -t "$test_name" -s "$size" -n "$iters")
on_server env UCX_TLS="$ucx_tls" UCX_NET_DEVICES="$SERVER_DEV:1" UCX_WARN_UNUSED_ENV_VARS=n \
    timeout 120 ucx_perftest "${common[@]}" >"$server_out" 2>&1 &
server=$!
wait_listening "$port" || fail "ucx_perftest server did not start: $(cat "$server_out")"
out=$(on_client env UCX_TLS="$ucx_tls" UCX_NET_DEVICES="$CLIENT_DEV:1" UCX_LOG_LEVEL=info \
    UCX_WARN_UNUSED_ENV_VARS=n timeout 120 ucx_perftest "$SERVER_ADDR" "${common[@]}" 2>&1) ||
    fail "ucx_perftest client failed: $out"$'\n'"server: $(cat "$server_out")"
wait "$server" || fail "ucx_perftest server failed: $(cat "$server_out")"
grep -E "ep_cfg|Final:" <<<"$out"
grep -q "tag($tls/$CLIENT_DEV:1)" <<<"$out" || fail "the endpoint does not use $tls on $CLIENT_DEV"
grep -qE "^Final: +$iters " <<<"$out" || fail "no final figures for $iters iterations"
! grep -q " ERROR " <<<"$out$(cat "$server_out")" || fail "UCX reported errors"
echo "PASS"
