#!/usr/bin/env bash
# One perftest tool (Debian's perftest, unmodified) between the two devices of an
# instance: server on <prefix>0, client on <prefix>1, over all message sizes the tool
# allows (-a), with bounded iterations so the suite stays short. Both sides must exit 0
# and the client must print its result table.
#   test_perftest.sh TOOL [EXTRA ARGS...]   (GID_INDEX picks the GID, 0 by default)
# PERFTEST_SIZE=N runs one size (-s N) instead of all; PERFTEST_SIZES="N M ..." runs the
# tool once per size, each of which must have its row. Every size costs perftest a clock
# calibration, 0.22 s of spinning on each side (get_cpu_mhz), so a run over -a's 23
# sizes takes 7-12 s where three sizes take about 2.5 s: the runs that repeat a tool over
# another kind of port take the sizes that cross that port's boundaries (one packet, a
# few, many), and the first run of each tool, on the shared engine, takes them all.
source "$(dirname "$0")/lib.sh"
tool=${1:?perftest tool}
shift
server_out=$(mktemp)
trap 'kill ${server:-} 2>/dev/null || true; rm -f "$server_out"' EXIT
sizes=(all)
case "$tool" in
ib_atomic_bw | ib_atomic_lat) sizes=(8) ;; # 8-byte operations only: neither -a nor -s
*)
    if [ -n "${PERFTEST_SIZE:-}" ]; then
        sizes=("$PERFTEST_SIZE")
    elif [ -n "${PERFTEST_SIZES:-}" ]; then
        read -r -a sizes <<<"$PERFTEST_SIZES"
    fi
    ;;
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
rows=0
for size in "${sizes[@]}"; do
    args=(-x "${GID_INDEX:-0}" -n 20 "$@")
    case "$tool:$size" in
    ib_atomic_*) ;;
    *:all) args+=(-a) ;;
    *) args+=(-s "$size") ;;
    esac
    perftest_attempts run_once || fail "$tool failed: client: $out"$'\n'"server: $(cat "$server_out")"
    echo "$out"
    # The result table: a header line, then at least one row of numbers; a size asked
    # for has its own row.
    grep -qE "#bytes" <<<"$out" || fail "no result table"
    size_rows=$(grep -cE "^ +[0-9]+ +[0-9]+ +[0-9.]+" <<<"$out")
    [ "$size_rows" -ge 1 ] || fail "no result rows"
    case "$tool:$size" in
    ib_atomic_* | *:all) ;;
    *) grep -qE "^ +$size +[0-9]+ +[0-9.]+" <<<"$out" || fail "no row for $size B: $out" ;;
    esac
    rows=$((rows + size_rows))
done
echo "PASS ($rows sizes)"
