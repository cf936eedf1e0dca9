#!/usr/bin/env bash
# Taking a port down and up: the port state follows, and ibv_asyncwatch (ibverbs-utils)
# receives IBV_EVENT_PORT_ERR and IBV_EVENT_PORT_ACTIVE on the async event fd.
source "$(dirname "$0")/lib.sh"
dev="${SOFTHCA_PREFIX}0"
out=$(mktemp)
trap 'kill ${watch:-} 2>/dev/null || true; "$SOFTHCA" down >/dev/null 2>&1 || true; rm -f "$out"' EXIT
"$SOFTHCA" up >/dev/null || fail "softhca up failed"

"$SOFTHCA" exec -- stdbuf -oL ibv_asyncwatch -d "$dev" >"$out" 2>&1 &
watch=$!
wait_until "grep -q 'async event FD' '$out'" 20 || fail "ibv_asyncwatch did not start: $(cat "$out")"

"$SOFTHCA" port "$dev" down
wait_until "grep -q 'PORT_ERR' '$out'" 10 || fail "no PORT_ERR: $(cat "$out")"
"$SOFTHCA" exec -- ibv_devinfo -d "$dev" | grep -qE "state:\s+PORT_DOWN" || fail "port not DOWN"
"$SOFTHCA" status | grep -q "^device $dev port 1: DOWN (admin)" || fail "status does not say DOWN"

"$SOFTHCA" port "$dev" up
wait_until "grep -q 'PORT_ACTIVE' '$out'" 10 || fail "no PORT_ACTIVE: $(cat "$out")"
"$SOFTHCA" exec -- ibv_devinfo -d "$dev" | grep -qE "state:\s+PORT_ACTIVE" || fail "port not ACTIVE"
cat "$out"
grep -q "event_type IBV_EVENT_PORT_ERR (10), port 1" "$out" || fail "PORT_ERR line malformed"
grep -q "event_type IBV_EVENT_PORT_ACTIVE (9), port 1" "$out" || fail "PORT_ACTIVE line malformed"

! "$SOFTHCA" port nosuchdev0 down 2>/dev/null || fail "port on a missing device succeeded"
echo PASS
