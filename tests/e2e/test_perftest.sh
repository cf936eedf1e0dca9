#!/usr/bin/env bash
# One perftest tool (Debian's perftest, unmodified) between the two devices of an
# instance: server on <prefix>0, client on <prefix>1, over all message sizes the tool
# allows (-a), with bounded iterations so the suite stays short. Both sides must exit 0
# and the client must print its result table.
#   test_perftest.sh TOOL [EXTRA ARGS...]   (GID_INDEX picks the GID, 0 by default)
source "$(dirname "$0")/lib.sh"
tool=${1:?perftest tool}
shift
server_out=$(mktemp)
trap 'kill ${server:-} 2>/dev/null || true; rm -f "$server_out"' EXIT
args=(-x "${GID_INDEX:-0}" -n 20 "$@")
case "$tool" in
ib_atomic_bw | ib_atomic_lat) ;; # 8-byte operations only
*) if [ -n "${PERFTEST_SIZE:-}" ]; then args+=(-s "$PERFTEST_SIZE"); else args+=(-a); fi ;;
esac
# One run on a TCP port of its own: 0 when both exited 0, the client's output in $out.
run_once() {
    port=$(free_port)
    on_server timeout 240 "$tool" -d "$SERVER_DEV" -p "$port" "${args[@]}" >"$server_out" 2>&1 &
    server=$!
    wait_listening "$port" || fail "$tool server did not start: $(cat "$server_out")"
    local rc=0
    out=$(on_client timeout 240 "$tool" -d "$CLIENT_DEV" -p "$port" "${args[@]}" "$SERVER_ADDR" 2>&1) || rc=$?
    wait "$server" || rc=$((rc ? rc : 100))
    PERFTEST_OUTPUT="$out $(cat "$server_out")"
    return "$rc"
}
perftest_attempts run_once || fail "$tool failed: client: $out"$'\n'"server: $(cat "$server_out")"
echo "$out"
# The result table: a header line, then at least one row of numbers.
grep -qE "#bytes" <<<"$out" || fail "no result table"
rows=$(grep -cE "^ +[0-9]+ +[0-9]+ +[0-9.]+" <<<"$out")
[ "$rows" -ge 1 ] || fail "no result rows"
echo "PASS ($rows sizes)"
