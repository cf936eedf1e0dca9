#!/usr/bin/env bash
# What an unprivileged user sees and may do beside others (issue 26, items 14 and 15):
# `softhca status` shows it only its own user's contexts (root sees all), and rdma_cm
# refuses it a port below 1024 (EACCES, as the kernel without CAP_NET_BIND_SERVICE).
#   test_unprivileged.sh HOLD_RESOURCES
source "$(dirname "$0")/../e2e/lib.sh"
HOLD=${1:?path to hold_resources}
as_nobody=(setpriv --reuid=65534 --regid=65534 --clear-groups)
out=$(mktemp)
trap 'kill -9 ${holder:-} 2>/dev/null || true; rm -f "$out"' EXIT

# A root context held open, and the status as root and as nobody.
"$SOFTHCA" exec -- "$HOLD" "${SOFTHCA_PREFIX}0" >"$out" 2>&1 &
holder=$!
wait_until "grep -q ready '$out'" 20 || fail "holder did not get ready: $(cat "$out")"
pids() { python3 -c 'import json,sys; print(" ".join(str(c["pid"]) for c in json.load(sys.stdin)["contexts"]))'; }
root_view=$("$SOFTHCA" status --json | pids)
nobody_view=$("${as_nobody[@]}" "$SOFTHCA" status --json | pids)
echo "contexts root sees: $root_view; nobody sees: ${nobody_view:-none}"
grep -qw "$holder" <<<"$root_view" || fail "root does not see the root context"
! grep -qw "$holder" <<<"$nobody_view" || fail "nobody sees root's context"
"${as_nobody[@]}" "$SOFTHCA" status | grep -q "pid $holder" && fail "nobody's text status shows root's context"
kill -9 "$holder"

# rdma_cm: port 999 refused to nobody, allowed to root; an unprivileged port to both.
server_try() { # SECONDS PORT USER...: rping server output for SECONDS (a refused one ends at once)
    local seconds=$1 port=$2
    shift 2
    timeout "$seconds" "$@" "$SOFTHCA" exec -- rping -s -a 198.18.0.1 -p "$port" -C 1 2>&1 || true
}
refused=$(server_try 20 999 "${as_nobody[@]}")
echo "nobody binding port 999: $refused"
grep -qi "permission denied\|EACCES\|error 13\|-13" <<<"$refused" ||
    fail "nobody was not refused port 999"
allowed=$(server_try 3 999 env)
grep -qi "permission denied" <<<"$allowed" && fail "root was refused port 999: $allowed"
unprivileged=$(server_try 3 19999 "${as_nobody[@]}")
grep -qi "permission denied" <<<"$unprivileged" && fail "nobody was refused port 19999: $unprivileged"
echo PASS
