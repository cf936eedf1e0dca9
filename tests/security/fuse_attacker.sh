# The FUSE attacker of the isolation tests (fuse_memory_attack.cpp), sourced after
# tests/e2e/lib.sh: its output file ($out), the mount point it mounts on ($mount_dir,
# uid 65534's), and the cleanup on exit. The test sets $attacker to the attack's PID.
#   stop_attacker   kills the attack, then its FUSE daemon: the attack's exit closes the
#                   FUSE file, whose FLUSH the daemon answers to it; the daemon's death
#                   ends the requests it never answered (the engine's, if any)
out=$(mktemp)
mount_dir=$(mktemp -d)
chown 65534:65534 "$mount_dir"
stop_attacker() {
    local daemon
    daemon=$(awk '/^daemon:/ {print $2}' "$out")
    if [ -n "${attacker:-}" ]; then
        kill -9 "$attacker" 2>/dev/null || true
        wait "$attacker" 2>/dev/null || true
    fi
    [ -z "$daemon" ] || kill -9 "$daemon" 2>/dev/null || true
    attacker=
}
cleanup() {
    stop_attacker
    wait 2>/dev/null
    "$SOFTHCA" down >/dev/null 2>&1 || true
    rm -f "$out"
    rmdir "$mount_dir" 2>/dev/null || true
}
trap cleanup EXIT
