#!/usr/bin/env bash
# An ibverbs-utils pingpong (ibv_rc_pingpong, ibv_uc_pingpong, ibv_ud_pingpong,
# ibv_srq_pingpong, ibv_xsrq_pingpong), unmodified, between the two devices of an
# instance, at each message size given: every exchange is checked by the tool (the
# first four validate the received buffer pattern with -c; ibv_xsrq_pingpong has no such
# option, its -c is a client count, and says "success" when every test completed).
#   test_pingpong.sh TOOL SIZE... [-- EXTRA ARGS]   (PINGPONG_SIZES overrides the sizes)
source "$(dirname "$0")/lib.sh"
tool=${1:?pingpong tool}
shift
sizes=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    sizes+=("$1")
    shift
done
[ "${1:-}" = "--" ] && shift
[ -n "${PINGPONG_SIZES:-}" ] && read -r -a sizes <<<"$PINGPONG_SIZES"
server_out=$(mktemp)
trap 'kill ${server:-} 2>/dev/null || true; rm -f "$server_out"' EXIT
port=$((18515 + RANDOM % 1000))
check=(-c)
[ "$tool" = ibv_xsrq_pingpong ] && check=()
for size in "${sizes[@]}"; do
    iters=200
    [ "$size" -ge 1048576 ] && iters=20
    done_line="$iters iters in"
    [ "$tool" = ibv_xsrq_pingpong ] && done_line=success
    on_server timeout 60 "$tool" -d "$SERVER_DEV" -g 0 -p "$port" -s "$size" \
        -n "$iters" "${check[@]}" "$@" >"$server_out" 2>&1 &
    server=$!
    wait_listening "$port" || fail "server did not start at size $size: $(cat "$server_out")"
    out=$(on_client timeout 60 "$tool" -d "$CLIENT_DEV" -g 0 -p "$port" \
        -s "$size" -n "$iters" "${check[@]}" "$@" "$SERVER_ADDR" 2>&1) ||
        fail "client failed at size $size: $out"$'\n'"server: $(cat "$server_out")"
    wait "$server" || fail "server failed at size $size: $(cat "$server_out")"
    echo "$tool size $size: $(tail -1 <<<"$out")"
    grep -q "$done_line" <<<"$out" || fail "no result line at size $size"
    port=$((port + 1))
done
echo PASS
