#!/usr/bin/env bash
# Runs one kernel-peer test (test_kernel_peer_*.sh with its arguments) and, when it failed
# because the guest's own network device hung — the guest kernel's "NETDEV WATCHDOG:
# transmit queue timed out", which QEMU without KVM on a loaded 2-core machine sometimes
# gives, and after which the guest sends nothing — or because the guest's console stalled
# (it never began a command it was given) — runs it once more with a fresh guest.
# Any other failure stands; so does a second hang.
script=${1:?test script}
shift
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$script" "$@" 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
if [ "$rc" -ne 0 ] && grep -qE "NETDEV WATCHDOG|GUEST CONSOLE STALLED" "$out"; then
    echo "kernel peer: the guest's network device or console hung: once more with a fresh guest" >&2
    "$script" "$@"
    rc=$?
fi
exit "$rc"
