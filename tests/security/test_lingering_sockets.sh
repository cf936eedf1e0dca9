#!/usr/bin/env bash
# Descriptors still queued on a connection the engine closes stall nobody and pile up
# nowhere (issue 40). Closing a client's connection drops the messages still queued on
# it, and the kernel runs the release of the descriptors they carry on the thread that
# drops them: a TCP socket lingering on unsent data (SO_LINGER 30 s) holds that thread
# for 30 s. An unprivileged user (uid 65534) sends such sockets (linger_attack.cpp):
#   teardown  on 50 connections of its own, each after an empty message (which the
#             engine reads as the connection's end);
#   refused   at its cap of control connections (four, on an engine of its own:
#             --limits user_connections=4), on 200 connections the engine refuses.
# The engine hands the sockets it lets go of to its descriptor sink, a process of its
# own (descriptor_sink.hpp), so root (another user) must run ibv_rc_pingpong within 2x
# its time alone (or 1 s more) and get `softhca status` answered within 1 s throughout,
# the engine's descriptors must stay where they were (within 16: the four connections
# held), the sink's threads must be the ones waiting, and the engine must be idle after
# (no connection left watched after its end). The engine and the sink share one CPU: the
# sink must not close a socket before the engine's own close of it has returned, or the
# engine's would be the last reference (a race the shared CPU makes likely).
#   test_lingering_sockets.sh LINGER_ATTACK
source "$(dirname "$0")/../e2e/lib.sh"
source "$(dirname "$0")/honest_client.sh"
ATTACK=${1:?path to linger_attack}
out=$(mktemp)
stop_attacker() {
    if [ -n "${attacker:-}" ]; then
        kill -9 "$attacker" 2>/dev/null || true
        wait "$attacker" 2>/dev/null || true
    fi
    attacker=
}
cleanup() {
    stop_attacker
    "$SOFTHCA" down >/dev/null 2>&1 || true
    rm -f "$out"
}
trap cleanup EXIT
descriptors_of() { find "/proc/$1/fd" -mindepth 1 -maxdepth 1 | wc -l; }
threads_of() { find "/proc/$1/task" -mindepth 1 -maxdepth 1 | wc -l; }
"$SOFTHCA" up --limits user_connections=4 >/dev/null || fail "softhca up failed"
sink=$(pgrep -P "$(engine_pid)" -x softhca-sink) || fail "the engine has no descriptor sink"
taskset -a -p 0x1 "$(engine_pid)" >/dev/null && taskset -a -p 0x1 "$sink" >/dev/null ||
    fail "could not put the engine and its sink on one CPU"
# The engine's CPU time (utime + stime, clock ticks) so far.
engine_ticks() { awk '{print $14 + $15}' "/proc/$(engine_pid)/stat"; }
honest_baseline
tree=$("$SOFTHCA" env | sed -n 's/^export SYSFS_PATH=//p')
socket=$(cat "$tree/class/infiniband/${SOFTHCA_PREFIX}0/softhca_engine_socket")

# attack MODE ARGS...: linger_attack MODE ARGS, while root's client runs, and after.
attack() {
    local mode=$1 before sunk_before
    before=$(descriptors_of "$(engine_pid)")
    sunk_before=$(($(threads_of "$sink") + $(descriptors_of "$sink")))
    setpriv --reuid=65534 --regid=65534 --clear-groups "$ATTACK" "$socket" "$@" >"$out" 2>&1 &
    attacker=$!
    wait_until "grep -q sending '$out'" 60 || fail "the $mode attack did not start: $(cat "$out")"
    honest_keeps_going "while uid 65534 sends lingering sockets on connections that end ($mode)"
    wait_until "grep -q holding '$out'" 60 || fail "the $mode attack did not end: $(cat "$out")"
    cat "$out"
    local sent held sunk
    sent=$(awk '/^sent:/ {print $2}' "$out")
    [ "$sent" -gt 0 ] || fail "no message of the $mode attack went out"
    honest_keeps_going "after uid 65534 sent $sent lingering sockets ($mode)"
    held=$(($(descriptors_of "$(engine_pid)") - before))
    # In the sink each socket is either being closed (a thread waits on it) or waits its
    # turn (a descriptor).
    sunk=$(($(threads_of "$sink") + $(descriptors_of "$sink") - sunk_before))
    echo "$mode: $sent sent; the engine holds $held more descriptors, the sink $sunk more threads and descriptors"
    [ "$held" -le 16 ] || fail "the engine holds $held more descriptors after the $mode attack"
    [ "$sunk" -ge 1 ] || fail "no lingering socket of the $mode attack reached the sink"
    stop_attacker
}
attack teardown 50
attack refused 4 200
# Idle after: no socket of a connection that ended is still watched (a registration that
# outlived its descriptor would wake the loop for ever).
sleep 1
ticks=$(engine_ticks)
sleep 2
busy=$(($(engine_ticks) - ticks))
echo "the engine used $busy clock ticks in the 2 s after the attacks"
[ "$busy" -le 40 ] || fail "the engine is busy after the attacks: $busy ticks in 2 s"
kill -0 "$(engine_pid)" || fail "the engine died"
kill -0 "$sink" || fail "the descriptor sink died"
echo PASS
