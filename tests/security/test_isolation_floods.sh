#!/usr/bin/env bash
# One user at every cap stalls nobody else (issue 40, items 2, 3, 5, 6 and 7). An
# unprivileged user (uid 65534) takes, in turn, as many rdma_cm ids (each bound to a
# port, then each resolving an address nobody answers), PDs and open contexts (control
# connections) as the engine gives it, then registers MRs without pause in an address
# space of some 60,000 mappings, then floods PDs from IDs of its own user namespace (one
# user: one set of caps); each flood must stop at the user's cap with the kernel's
# errno, and while the attacker holds everything, and while the engine tears it all
# down after a SIGKILL, root (another user) must still:
#   - make the same object (the cap left room below the engine's maximum),
#   - run ibv_rc_pingpong within 2x its time without the attack (or 1 s more),
#   - get `softhca status` answered within 1 s.
# Runs against an engine of its own, with the default caps.
#   test_isolation_floods.sh FLOOD_ATTACK
source "$(dirname "$0")/../e2e/lib.sh"
source "$(dirname "$0")/honest_client.sh"
ATTACK=${1:?path to flood_attack}
as_nobody=(setpriv --reuid=65534 --regid=65534 --clear-groups)
out=$(mktemp)
cleanup() {
    [ -n "${attacker:-}" ] && kill -9 "$attacker" 2>/dev/null
    [ -n "${flooder:-}" ] && kill -9 "$flooder" 2>/dev/null
    [ -n "${first:-}" ] && kill -9 "$first" 2>/dev/null
    wait 2>/dev/null
    "$SOFTHCA" down >/dev/null 2>&1 || true
    rm -f "$out"
}
trap cleanup EXIT
"$SOFTHCA" up >/dev/null || fail "softhca up failed"
caps=$("$SOFTHCA" status --json | python3 -c 'import json,sys; u=json.load(sys.stdin)["limits"]["user"]; print(u["cm_ids"], u["pds"], u["connections"], u["cm_files"])')
read -r cap_cm_ids cap_pds cap_connections cap_cm_files <<<"$caps"
echo "the user's caps: $cap_cm_ids rdma_cm ids, $cap_pds PDs, $cap_connections connections, $cap_cm_files rdma_cm files"

honest_baseline

# flood KIND TARGET CAP ERRNO: the attacker floods, is held to CAP with ERRNO, root still
# makes one, and nothing of root's slows down, during the flood or its teardown.
flood() {
    local kind=$1 target=$2 cap=$3 errno=$4 made
    "${as_nobody[@]}" "$SOFTHCA" exec -- "$ATTACK" "$kind" "$target" $((cap * 4)) >"$out" 2>&1 &
    attacker=$!
    wait_until "grep -q ready '$out'" 240 || fail "the $kind flood did not finish: $(cat "$out")"
    echo "$kind flood as uid 65534: $(head -1 "$out")"
    made=$(awk '/^made/ {print $2}' "$out")
    [ "$made" = "$cap" ] || fail "the $kind flood made $made, not the user's cap $cap"
    grep -q "errno $errno " "$out" || fail "the $kind flood did not end with errno $errno: $(cat "$out")"
    "$SOFTHCA" exec -- "$ATTACK" "$kind" "$target" 1 --exit >/dev/null ||
        fail "root could not make one of $kind beside the flood"
    honest_keeps_going "while uid 65534 holds $cap of $kind"
    kill -9 "$attacker"
    wait "$attacker" 2>/dev/null || true
    attacker=
    # The teardown of everything it held, while the honest client works.
    honest_keeps_going "while the engine tears down $cap of $kind"
}
flood cm_ids 198.18.0.1 "$cap_cm_ids" 12                        # ENOMEM
# Ids resolving an address nobody answers (on the port's subnet: ARP goes unanswered):
# each look at them takes a few, in turn, not all of them every millisecond.
flood resolving 198.18.0.99 "$cap_cm_ids" 12                     # ENOMEM
flood pds "${SOFTHCA_PREFIX}0" "$cap_pds" 12                     # ENOMEM
# A context past the cap: the engine refuses the connection, ibv_open_device fails EMFILE.
flood contexts "${SOFTHCA_PREFIX}0" "$cap_connections" 24                 # EMFILE
# An rdma_cm file past the cap: refused the same way, open(2) of the device fails EMFILE.
flood cm_files - "$cap_cm_files" 24                                       # EMFILE
# Registrations by a process split into some 60,000 mappings (issue 40, item 7): each
# reads only the mappings its range covers (PROCMAP_QUERY, Linux 6.11), not the whole maps
# file, while every data path waits.
# An older kernel reads the whole file for each (docs/security.md): not checked there.
IFS=. read -r major minor _ <<<"$(uname -r)"
if [ "$major" -gt 6 ] || { [ "$major" -eq 6 ] && [ "${minor%%[!0-9]*}" -ge 11 ]; }; then
    "${as_nobody[@]}" "$SOFTHCA" exec -- "$ATTACK" vmas "${SOFTHCA_PREFIX}0" 60000 >"$out" 2>&1 &
    attacker=$!
    wait_until "grep -q ready '$out'" 120 || fail "the mappings were not made: $(cat "$out")"
    echo "registrations in a split address space as uid 65534: $(head -1 "$out")"
    honest_keeps_going "while uid 65534 registers MRs among $(awk '/^made/ {print $2}' "$out") mappings"
    kill -9 "$attacker"
    wait "$attacker" 2>/dev/null || true
    attacker=
else
    echo "NOTE: kernel $(uname -r) has no PROCMAP_QUERY: the split address space is not checked"
fi
# Subordinate IDs: uid 65534's own user namespace, its IDs 0-3 mapped to 400000-400003
# (as /etc/subuid hands a user a range, newuidmap writes it). Those IDs are the owner's:
# what one of them takes counts against 65534's caps, so a second gets nothing, and a
# process of the namespace (a rootless container) opens the device and registers memory.
"${as_nobody[@]}" unshare --user sleep 600 &
attacker=$!
wait_until "[ \"\$(readlink /proc/$attacker/ns/user)\" != \"\$(readlink /proc/self/ns/user)\" ]" 10 ||
    fail "no user namespace for uid 65534"
echo "0 400000 4" >"/proc/$attacker/uid_map" && echo "0 400000 4" >"/proc/$attacker/gid_map" ||
    fail "could not map the namespace's IDs"
# A process of ID N of the namespace: "${as_id[@]}" N --setgid N -- COMMAND (exec'd).
as_id=(nsenter --no-fork --user --target "$attacker" --setuid)
made_as() { # ID: PDs made by that ID of the namespace, and the errno it stopped at
    "${as_id[@]}" "$1" --setgid "$1" -- "$SOFTHCA" exec -- "$ATTACK" pds "${SOFTHCA_PREFIX}0" $((cap_pds * 4)) >"$out" 2>&1 &
    flooder=$!
    wait_until "grep -q ready '$out'" 240 || fail "the flood of ID $1 did not finish: $(cat "$out")"
    echo "pds flood as ID $1 of uid 65534's namespace: $(head -1 "$out")"
}
made_as 1
[ "$(awk '/^made/ {print $2}' "$out")" = "$cap_pds" ] || fail "ID 1 did not reach the cap $cap_pds"
first=$flooder
made_as 2
[ "$(awk '/^made/ {print $2}' "$out")" = 0 ] && grep -q "errno 12 " "$out" ||
    fail "ID 2 of the same user's namespace made PDs past its owner's cap: $(cat "$out")"
"$SOFTHCA" exec -- "$ATTACK" pds "${SOFTHCA_PREFIX}0" 1 --exit >/dev/null ||
    fail "root could not make a PD beside the namespace's flood"
kill -9 "$first" "$flooder"
wait "$first" "$flooder" 2>/dev/null || true
first=
# Memory registered and moved by processes of the namespace, once the floods' PDs are
# given back (their owner's cap is full until then).
wait_until "[ \"\$(\"\$SOFTHCA\" status --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)[\"contexts\"]))')\" = 0 ]" 30 ||
    fail "the namespace's floods were not torn down: $("$SOFTHCA" status | grep -E "^context|objects")"
port=$(free_port)
"${as_id[@]}" 3 --setgid 3 -- "$SOFTHCA" exec -- timeout 60 ibv_rc_pingpong -d "${SOFTHCA_PREFIX}0" -g 0 \
    -p "$port" -n 100 >"$out" 2>&1 &
flooder=$!
wait_listening "$port" || fail "the pingpong server in a user namespace did not start: $(cat "$out")"
"${as_id[@]}" 3 --setgid 3 -- "$SOFTHCA" exec -- timeout 60 ibv_rc_pingpong -d "${SOFTHCA_PREFIX}1" -g 0 \
    -p "$port" -n 100 127.0.0.1 >/dev/null 2>&1 ||
    fail "ibv_rc_pingpong in a user namespace failed: $(cat "$out")"
wait "$flooder" || fail "the pingpong server in a user namespace failed: $(cat "$out")"
flooder=
kill -9 "$attacker"
wait "$attacker" 2>/dev/null || true
attacker=

# Everything of the attacker is gone.
wait_until "[ \"\$(\"\$SOFTHCA\" status --json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d[\"rdma_cm\"][\"ids\"], len(d[\"contexts\"]))')\" = '0 0' ]" 30 ||
    fail "the attacker's objects are still there: $("$SOFTHCA" status | head -20)"
kill -0 "$(engine_pid)" || fail "the engine died"
echo PASS
