#!/usr/bin/env bash
# Attack (issue 26, item 1): a context outlives the process that opened it, through a
# forked child that keeps its socket, while that process execs a non-dumpable target
# (as a setuid program would be) or exits and a new process takes its PID. RDMA READ
# and WRITE through the old context's MRs must all fail, the target's memory must be
# neither read nor changed, and an honest transfer beside it must work.
#   test_stale_context.sh ATTACK_BINARY exec|reuse
source "$(dirname "$0")/../e2e/lib.sh"
ATTACK=${1:?path to stale_context_attack}
MODE=${2:?exec or reuse}

out=$(mktemp)
trap 'rm -f "$out"' EXIT
# The exec attack is about privilege: an unprivileged user runs it (root's contexts use
# cross-memory attach, which follows an exec: README, Security model). PID reuse is
# forced through ns_last_pid, which needs root; a context reaches nothing once its
# process has exited, root's included.
as=()
if [ "$MODE" = exec ]; then
    as=(setpriv --reuid=65534 --regid=65534 --clear-groups)
fi
chmod 644 "$out"
"$SOFTHCA" exec -- "${as[@]}" "$ATTACK" "${SOFTHCA_PREFIX}0" "${SOFTHCA_PREFIX}1" "$MODE" >"$out" 2>&1 &
opener=$!
# The opener's exit code: in exec mode the target's verdict on its own memory (0: as it
# made it, 3: written into); in reuse mode the opener just leaves.
target_status=0
wait "$opener" || target_status=$?
# The attacker (the forked child) reports last.
wait_until "grep -qE 'PASS|ATTACK SUCCEEDED|stale_context_attack:' '$out'" 90 ||
    fail "the attacker did not finish: $(cat "$out")"
cat "$out"
[ "$target_status" = 0 ] || fail "the target's memory was changed (status $target_status)"
grep -q "attack failed: PASS" "$out" || fail "the attack succeeded or broke"
echo PASS
