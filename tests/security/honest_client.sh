# The honest client of the isolation tests (issue 40): root, another user than the
# attacker, runs ibv_rc_pingpong between the instance's two devices and asks for
# `softhca status`. Sourced after tests/e2e/lib.sh, with the engine up.
#   honest_baseline            sets $baseline (ms) and $bound: 2x, or 1 s more if larger
#   honest_keeps_going WHEN    fails unless status answers within 1 s and the pingpong
#                              stays within $bound, WHEN saying what the attacker is doing

now_ms() { echo $(($(date +%s%N) / 1000000)); }
# The milliseconds an ibv_rc_pingpong of 500 exchanges between the two devices takes.
pingpong_ms() {
    local port start server
    port=$(free_port)
    start=$(now_ms)
    "$SOFTHCA" exec -- timeout 60 ibv_rc_pingpong -d "${SOFTHCA_PREFIX}0" -g 0 -p "$port" \
        -n 500 >/dev/null 2>&1 &
    server=$!
    wait_listening "$port" || fail "the honest pingpong server did not start"
    "$SOFTHCA" exec -- timeout 60 ibv_rc_pingpong -d "${SOFTHCA_PREFIX}1" -g 0 -p "$port" \
        -n 500 127.0.0.1 >/dev/null 2>&1 || fail "the honest pingpong failed"
    wait "$server" || fail "the honest pingpong server failed"
    echo $(($(now_ms) - start))
}
# Fails unless `softhca status` answers within a second.
status_within_a_second() {
    local start took
    start=$(now_ms)
    timeout 10 "$SOFTHCA" status >/dev/null || fail "softhca status failed $1"
    took=$(($(now_ms) - start))
    [ "$took" -le 1000 ] || fail "softhca status took $took ms $1"
}
honest_baseline() {
    baseline=$(pingpong_ms)
    pingpong_ms >/dev/null # warm
    baseline=$(((baseline + $(pingpong_ms)) / 2))
    bound=$((2 * baseline > baseline + 1000 ? 2 * baseline : baseline + 1000))
    echo "honest pingpong alone: $baseline ms (bound $bound ms)"
}
honest_keeps_going() {
    status_within_a_second "$1"
    local took
    took=$(pingpong_ms)
    echo "  honest pingpong $1: $took ms"
    [ "$took" -le "$bound" ] || fail "the honest pingpong took $took ms $1 (bound $bound ms)"
    status_within_a_second "$1"
}
