#!/usr/bin/env bash
# Descriptors queued on a connection the engine refuses stall nobody (issue 40). An
# unprivileged user (uid 65534) at its cap of control connections (four, on an engine of
# its own: --limits user_connections=4) connects again and again, each time sending a
# message that carries a TCP socket lingering 30 s on unsent data, before the engine
# accepts and refuses the connection (linger_attack.cpp). Closing a refused connection
# drops what is queued on it, and the kernel runs the lingering socket's release on the
# closing thread: the engine closes such connections on the user's own closing threads
# (client_descriptors.hpp), so root (another user) must run ibv_rc_pingpong within 2x
# its time alone (or 1 s more) and get `softhca status` answered within 1 s.
#   test_refused_linger.sh LINGER_ATTACK
source "$(dirname "$0")/../e2e/lib.sh"
source "$(dirname "$0")/honest_client.sh"
ATTACK=${1:?path to linger_attack}
out=$(mktemp)
cleanup() {
    if [ -n "${attacker:-}" ]; then
        kill -9 "$attacker" 2>/dev/null || true
        wait "$attacker" 2>/dev/null || true
    fi
    "$SOFTHCA" down >/dev/null 2>&1 || true
    rm -f "$out"
}
trap cleanup EXIT
"$SOFTHCA" up --limits user_connections=4 >/dev/null || fail "softhca up failed"
honest_baseline
tree=$("$SOFTHCA" env | sed -n 's/^export SYSFS_PATH=//p')
socket=$(cat "$tree/class/infiniband/${SOFTHCA_PREFIX}0/softhca_engine_socket")
setpriv --reuid=65534 --regid=65534 --clear-groups "$ATTACK" "$socket" 4 20 >"$out" 2>&1 &
attacker=$!
wait_until "grep -q sending '$out'" 30 || fail "the attack did not start: $(cat "$out")"
honest_keeps_going "while uid 65534's refused connections carry lingering sockets"
wait_until "grep -q holding '$out'" 30 || fail "the attack did not get to holding: $(cat "$out")"
cat "$out"
sent=$(awk '/^sent:/ {print $2}' "$out")
[ "$sent" -gt 0 ] || fail "no message went out before the engine refused the connection"
honest_keeps_going "after uid 65534's refused connections carried lingering sockets"
kill -0 "$(engine_pid)" || fail "the engine died"
echo PASS
