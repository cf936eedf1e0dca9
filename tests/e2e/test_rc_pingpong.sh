#!/usr/bin/env bash
# ibv_rc_pingpong (ibverbs-utils), unmodified, between the two devices of an instance,
# at message sizes 1, 4096, 65536 and 1048576: every exchange is checked by the tool
# (it validates the received buffer pattern with -c).
source "$(dirname "$0")/lib.sh"
server_out=$(mktemp)
trap 'kill ${server:-} 2>/dev/null || true; rm -f "$server_out"' EXIT
port=$((18515 + RANDOM % 1000))
for size in ${PINGPONG_SIZES:-1 4096 65536 1048576}; do
    iters=200
    [ "$size" -ge 1048576 ] && iters=20
    on_server timeout 60 ibv_rc_pingpong -d "$SERVER_DEV" -g 0 -p "$port" -s "$size" \
        -n "$iters" -c >"$server_out" 2>&1 &
    server=$!
    wait_listening "$port" || fail "server did not start at size $size: $(cat "$server_out")"
    out=$(on_client timeout 60 ibv_rc_pingpong -d "$CLIENT_DEV" -g 0 -p "$port" \
        -s "$size" -n "$iters" -c "$SERVER_ADDR" 2>&1) || fail "client failed at size $size: $out"
    wait "$server" || fail "server failed at size $size: $(cat "$server_out")"
    echo "size $size: $(tail -1 <<<"$out")"
    grep -q "$iters iters in" <<<"$out" || fail "no result line at size $size"
    port=$((port + 1))
done
echo PASS
