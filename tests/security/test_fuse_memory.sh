#!/usr/bin/env bash
# A user's FUSE file under an MR stalls nobody (issue 40, item 1). An unprivileged user
# (uid 65534) mounts a FUSE filesystem of its own in a user and mount namespace of its
# own, whose READ it never answers, maps a file of it privately and shared in a process
# that stays in the original namespaces, and registers both mappings
# (fuse_memory_attack.cpp). Both registrations must fail with EOPNOTSUPP, no READ may
# reach the daemon; the file handed to the engine as an XRC domain's and as MIGRATE_ID's
# source (where a stat or a close would ask the daemon, which never answers a FLUSH)
# holds no thread that serves others. While the attacker holds its mount, root (another user) must run
# ibv_rc_pingpong within 2x its time alone (or 1 s more) and get `softhca status`
# answered within 1 s. Then the same user maps the file over registered anonymous memory
# afterwards and has a 64 KiB SEND received there (fuse_memory_attack's "swap" mode, whose
# daemon takes requests of users its namespace does not map, as Linux 6.12 allows): the
# engine's write asks the daemon for the page, and its stall watch must abort that FUSE
# connection (the receive fails, the daemon sees its connection aborted, the user opens
# no device for a minute) while root's pingpong and status, started as the SEND is
# posted, keep the same bounds. Then the same with a completion channel's pipe whose
# reader holds the pipe's lock on the FUSE page while the engine writes the next event
# ("pipe" mode). Runs against an engine of its own.
#   test_fuse_memory.sh FUSE_MEMORY_ATTACK
source "$(dirname "$0")/../e2e/lib.sh"
source "$(dirname "$0")/honest_client.sh"
ATTACK=${1:?path to fuse_memory_attack}
as_nobody=(setpriv --reuid=65534 --regid=65534 --clear-groups)
source "$(dirname "$0")/fuse_attacker.sh"
"$SOFTHCA" up >/dev/null || fail "softhca up failed"
honest_baseline

"${as_nobody[@]}" "$SOFTHCA" exec -- "$ATTACK" "${SOFTHCA_PREFIX}0" "$mount_dir" >"$out" 2>&1 &
attacker=$!
wait_until "grep -q holding '$out'" 30 || fail "the attack did not get to holding: $(cat "$out")"
cat "$out"
honest_keeps_going "while uid 65534 holds a FUSE file it registered"
grep -q "REGISTERED" "$out" && fail "the engine registered memory on the user's FUSE file: $(cat "$out")"
for sharing in private shared; do
    grep -q "refused: $sharing EOPNOTSUPP" "$out" ||
        fail "the $sharing mapping was not refused with EOPNOTSUPP: $(cat "$out")"
done
grep -q "fuse: READ asked" "$out" && fail "something read the FUSE file: $(cat "$out")"
# As a descriptor: an XRC domain may be made over any file the user opened (and closed
# again); MIGRATE_ID refuses a descriptor that is no rdma_cm file.
grep -q "^xrcd: 0, closed: 0" "$out" || fail "ibv_open_xrcd/ibv_close_xrcd over the file: $(cat "$out")"
grep -q "^migrate: EINVAL" "$out" || fail "MIGRATE_ID from the FUSE file was not EINVAL: $(cat "$out")"
stop_attacker
honest_keeps_going "after the attacker was killed"

# One held attack in MODE: started as uid 65534, root's honest client run from the
# moment it says POSTED (while the engine is held) until it is done (holding).
#   held_attack MODE POSTED WHEN
held_attack() {
    "${as_nobody[@]}" "$SOFTHCA" exec -- "$ATTACK" "${SOFTHCA_PREFIX}0" "$mount_dir" "$1" >"$out" 2>&1 &
    attacker=$!
    wait_until "grep -q '$2' '$out'" 30 || fail "the $1 attack did not post: $(cat "$out")"
    honest_keeps_going "$3"
    wait_until "grep -q holding '$out'" 30 || fail "the $1 attack did not end: $(cat "$out")"
    cat "$out"
}

held_attack swap "swapped: posted" "while the engine writes a SEND into uid 65534's FUSE page"
grep -q "swapped: receive .* after" "$out" ||
    fail "the receive into the FUSE page never completed: $(cat "$out")"
grep -q "swapped: receive success" "$out" &&
    fail "a receive into a page the daemon never gave succeeded: $(cat "$out")"
# A kernel before 6.12 (no FUSE_ALLOW_IDMAP) refuses the engine's request itself (root is
# not mapped in the daemon's namespace): the write fails at once, and nothing is asked.
if grep -q "fuse: requests of unmapped users allowed" "$out"; then
    grep -q "fuse: READ asked" "$out" ||
        fail "the engine's write did not ask the daemon for the page: $(cat "$out")"
    grep -q "fuse: connection aborted" "$out" ||
        fail "the stall watch did not abort the FUSE connection: $(cat "$out")"
    # Its user is cut off for a minute (a new mount costs it milliseconds): no device
    # opens for uid 65534 meanwhile, root's still do (below).
    "${as_nobody[@]}" "$SOFTHCA" exec -- ibv_devinfo -d "${SOFTHCA_PREFIX}0" >/dev/null 2>&1 &&
        fail "uid 65534 opened a device right after its FUSE page held the engine"
fi
stop_attacker
honest_keeps_going "after the swap attacker was killed"

# The same with an event pipe: a completion channel's reader holds the pipe's lock while
# its read copies into the user's FUSE page, and the engine's data path writes the next
# completion event into that pipe ("pipe" mode). A fresh engine: uid 65534 may be cut off.
"$SOFTHCA" down >/dev/null 2>&1 || true
"$SOFTHCA" up >/dev/null || fail "softhca up failed"
held_attack pipe "pipe: posted" \
    "while the engine writes an event into a pipe held on uid 65534's FUSE page"
grep -q "fuse: READ asked" "$out" || fail "the reader's copy did not ask the daemon: $(cat "$out")"
grep -q "pipe: reader got" "$out" || fail "the pipe's reader was never freed: $(cat "$out")"
grep -q "fuse: connection aborted" "$out" ||
    fail "the stall watch did not abort the FUSE connection: $(cat "$out")"
stop_attacker
honest_keeps_going "after the pipe attacker was killed"
kill -0 "$(engine_pid)" || fail "the engine died"
echo PASS
