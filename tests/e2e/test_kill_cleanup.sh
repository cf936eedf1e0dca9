#!/usr/bin/env bash
# A process killed with SIGKILL while holding PDs, MRs, CQs and a QP leaves zero objects.
# Other tests may share the engine, so this one looks at its own process's context and
# at the totals going back down by exactly what it held.
source "$(dirname "$0")/lib.sh"
HOLD=${1:?path to hold_resources}

# "pd mr cq qp" of the context owned by pid $1, or nothing if it has none.
context_counts() {
    "$SOFTHCA" status | awk -v pid="$1" '$1 == "context" && $4 == pid {print $9, $11, $13, $15}'
}

out=$(mktemp)
"$SOFTHCA" exec -- "$HOLD" "${SOFTHCA_PREFIX}0" >"$out" 2>&1 &
pid=$!
trap 'kill -9 $pid 2>/dev/null || true; rm -f "$out"' EXIT
wait_until "grep -q ready '$out'" 20 || fail "helper did not get ready: $(cat "$out")"
counts=$(context_counts "$pid")
echo "while held, context of pid $pid: pd mr cq qp = $counts"
[ "$counts" = "4 3 4 1" ] || fail "expected 4 3 4 1 objects while held, got '$counts'"
"$SOFTHCA" status | grep -qE "^  qp [0-9]+ RC RESET dest_qp 0: packets_sent 0" ||
    fail "no per-QP line for the held QP"

kill -9 "$pid"
wait "$pid" 2>/dev/null || true
wait_until '[ -z "$(context_counts "$pid")" ]' 10 || fail "context of $pid survived SIGKILL"
"$SOFTHCA" status
echo "after SIGKILL: no context of pid $pid; totals pd mr cq = $(object_counts)"
echo PASS
