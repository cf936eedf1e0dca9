#!/usr/bin/env bash
# The engine killed while a program has a device open: the program gets
# IBV_EVENT_DEVICE_FATAL and its later verbs fail instead of hanging.
source "$(dirname "$0")/lib.sh"
AWAIT=${1:?path to await_fatal}
trap '"$SOFTHCA" down >/dev/null 2>&1 || true; rm -f "${out:-}"' EXIT
"$SOFTHCA" up >/dev/null || fail "softhca up failed"

out=$(mktemp)
"$SOFTHCA" exec -- "$AWAIT" "${SOFTHCA_PREFIX}0" >"$out" 2>&1 &
pid=$!
wait_until "grep -q ready '$out'" 20 || fail "helper did not get ready: $(cat "$out")"
engine=$(engine_pid)
kill -9 "$engine"
rc=0
wait "$pid" || rc=$?
cat "$out"
[ $rc -eq 0 ] || fail "await_fatal exited $rc"
grep -q "ok: the event is DEVICE_FATAL" "$out" || fail "no DEVICE_FATAL seen"
echo PASS
