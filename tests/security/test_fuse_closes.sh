#!/usr/bin/env bash
# Descriptors whose close waits stall nobody but their user (issue 40). An unprivileged
# user (uid 65534) hands the engine a thousand times two descriptors of a file on its own
# FUSE filesystem, whose FLUSH its daemon never answers, with malformed control messages
# (fuse_memory_attack.cpp, "closes" mode). Each close the engine makes asks the daemon,
# so each holds the thread that makes it. The engine closes a user's descriptors on
# threads of that user's own (client_descriptors.hpp) and stops reading the connections
# of a user with more than 256 closes waiting, so:
#   - the engine holds no more than about 256 of the attacker's descriptors;
#   - root (another user) runs ibv_rc_pingpong within 2x its time alone (or 1 s more),
#     gets `softhca status` answered within 1 s, and the descriptors its programs handed
#     the engine are closed when they end (with one pool of closing threads for all, they
#     waited behind the attacker's);
#   - once the attacker and its daemon are killed, the waiting closes end, the paused
#     connection is read to its end and the engine is back to its descriptors before.
# Runs against an engine of its own.
#   test_fuse_closes.sh FUSE_MEMORY_ATTACK
source "$(dirname "$0")/../e2e/lib.sh"
source "$(dirname "$0")/honest_client.sh"
ATTACK=${1:?path to fuse_memory_attack}
source "$(dirname "$0")/fuse_attacker.sh"
engine_descriptors() { find "/proc/$(engine_pid)/fd" -mindepth 1 -maxdepth 1 | wc -l; }

"$SOFTHCA" up >/dev/null || fail "softhca up failed"
honest_baseline
before=$(engine_descriptors)
setpriv --reuid=65534 --regid=65534 --clear-groups "$SOFTHCA" exec -- \
    "$ATTACK" "${SOFTHCA_PREFIX}0" "$mount_dir" closes >"$out" 2>&1 &
attacker=$!
wait_until "grep -q holding '$out'" 60 || fail "the attack did not get to holding: $(cat "$out")"
cat "$out"
grep -q "fuse: FLUSH asked" "$out" || fail "no close of the engine's asked the daemon: $(cat "$out")"
sleep 0.5
held=$(($(engine_descriptors) - before))
echo "the engine holds $held more descriptors (at most 256 of the attacker's waiting closes)"
[ "$held" -ge 200 ] || fail "the attack reached the engine with only $held descriptors"
[ "$held" -le 300 ] || fail "the engine holds $held of the attacker's descriptors"
flooded=$(engine_descriptors)
honest_keeps_going "while uid 65534's closes wait on FLUSHes its daemon never answers"
wait_until "[ \$(engine_descriptors) -le $flooded ]" 5 ||
    fail "root's descriptors were not closed: the engine holds $(engine_descriptors), $flooded before root's programs"
stop_attacker
wait_until "[ \$(engine_descriptors) -le $((before + 2)) ]" 20 ||
    fail "the attacker's descriptors were not all closed after it died: $(engine_descriptors), $before before"
honest_keeps_going "after the attacker was killed"
kill -0 "$(engine_pid)" || fail "the engine died"
echo PASS
