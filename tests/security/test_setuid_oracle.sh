#!/usr/bin/env bash
# No address oracle on a set-ID program (issue 40, item 8): an unprivileged user's process
# connects, execs a set-ID-root program (a copy of sleep, mode 4755), and a forked child
# holding the connection probes two addresses with OpenDevice: one inside the program's
# [stack], one mapped nowhere in it. The answers must be the same (the engine reads the
# pinned process's maps with that process's rights, which the user does not have once
# it runs a set-ID program). The same probes against a program that is not set-ID show
# the method sees the difference where the user may see it (its own process).
#   test_setuid_oracle.sh SETUID_ORACLE_ATTACK
source "$(dirname "$0")/../e2e/lib.sh"
ATTACK=${1:?path to setuid_oracle_attack}
as_nobody=(setpriv --reuid=65534 --regid=65534 --clear-groups)
work=$(mktemp -d)
chmod 755 "$work"
cleanup() {
    [ -n "${attacker:-}" ] && kill -9 "$attacker" 2>/dev/null
    [ -n "${pinned:-}" ] && kill -9 "$pinned" 2>/dev/null
    wait 2>/dev/null
    "$SOFTHCA" down >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
"$SOFTHCA" up >/dev/null || fail "softhca up failed"
cp /bin/sleep "$work/setuid-sleep"
chmod 4755 "$work/setuid-sleep"
cp /bin/sleep "$work/plain-sleep"
chmod 755 "$work/plain-sleep"

# probe PROGRAM: runs the attack with PROGRAM as the exec'd one; prints "STACK UNMAPPED",
# the statuses of the two probes.
probe() {
    local program=$1 out="$work/out" exe stack end unmapped
    rm -f "$work/addresses" "$out"
    "${as_nobody[@]}" "$SOFTHCA" exec -- "$ATTACK" "$program" "$work/addresses" >"$out" 2>&1 &
    attacker=$!
    wait_until "grep -q '^pinned' '$out'" 20 || fail "the attack did not start: $(cat "$out")"
    pinned=$(awk '/^pinned/ {print $2}' "$out")
    wait_until "[ \"\$(readlink /proc/$pinned/exe 2>/dev/null)\" = '$program' ]" 20 ||
        fail "the pinned process did not exec $program"
    # As root: an address inside its stack, and one mapped nowhere in it.
    read -r stack end < <(awk '/\[stack\]/ {split($1, r, "-"); print r[1], r[2]}' "/proc/$pinned/maps")
    [ -n "$end" ] || fail "no [stack] in the pinned process's maps"
    stack=$(printf '%x' $((0x$end - 0x2000)))
    unmapped=200000000000
    local range from to
    while read -r range _; do
        from=$((0x${range%-*})) to=$((0x${range#*-}))
        [ $((0x$unmapped)) -lt "$from" ] || [ $((0x$unmapped)) -ge "$to" ] ||
            fail "0x$unmapped is mapped in the pinned process"
    done <"/proc/$pinned/maps"
    echo "$stack $unmapped" >"$work/addresses"
    wait_until "grep -q '^unmapped' '$out'" 30 || fail "the probes did not finish: $(cat "$out")"
    kill -9 "$pinned" 2>/dev/null || true # the sleeping program (the attack waits for it)
    pinned=
    wait "$attacker" || true
    attacker=
    grep -q unusable "$out" && fail "a probe address could not be used: $(cat "$out")"
    echo "$(awk '/^stack/ {print $3}' "$out") $(awk '/^unmapped/ {print $3}' "$out")"
}

read -r plain_stack plain_unmapped <<<"$(probe "$work/plain-sleep")"
echo "not set-ID: stack probe $plain_stack, unmapped probe $plain_unmapped"
[ "$plain_stack" = 0 ] && [ "$plain_unmapped" != 0 ] ||
    fail "against its own user's program the probes should differ (0 and an errno)"
read -r setuid_stack setuid_unmapped <<<"$(probe "$work/setuid-sleep")"
echo "set-ID: stack probe $setuid_stack, unmapped probe $setuid_unmapped"
[ "$setuid_stack" = "$setuid_unmapped" ] ||
    fail "the answers tell the set-ID program's stack from unmapped memory: an oracle"
[ "$setuid_stack" != 0 ] || fail "the child opened a context on the set-ID process's memory"
kill -0 "$(engine_pid)" || fail "the engine died"
echo PASS
