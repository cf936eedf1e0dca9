#!/usr/bin/env bash
# A process killed with SIGKILL while holding PDs, MRs, CQs and a QP leaves zero objects,
# and no mapping of its shared memory in the engine (nor does a deregistered MR).
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
[ "$counts" = "5 4 4 1" ] || fail "expected 5 4 4 1 objects while held, got '$counts'"
# The MR on shared memory is mapped into the engine; the deregistered one is not.
engine_maps=/proc/$(cat "/run/softhca/$SOFTHCA_PREFIX/engine.pid")/maps
grep -q "softhca-hold-$pid" "$engine_maps" || fail "the shared MR is not mapped by the engine"
! grep -q "softhca-dereg-$pid" "$engine_maps" || fail "a deregistered MR is still mapped"
mapped=$("$SOFTHCA" status | awk '$1 == "memory:" && $2 == "mapped" {print $4}')
[ "${mapped:-0}" -ge 1 ] || fail "softhca status shows no mapped MR while one is held"
"$SOFTHCA" status | grep -qE "^  qp [0-9]+ RC RESET dest_qp 0: packets_sent 0" ||
    fail "no per-QP line for the held QP"

kill -9 "$pid"
wait "$pid" 2>/dev/null || true
wait_until '[ -z "$(context_counts "$pid")" ]' 10 || fail "context of $pid survived SIGKILL"
! grep -q "softhca-hold-$pid" "$engine_maps" || fail "the engine still maps a dead process's MR"
"$SOFTHCA" status
echo "after SIGKILL: no context of pid $pid; totals pd mr cq = $(object_counts)"
echo PASS
