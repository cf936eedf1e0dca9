#!/usr/bin/env bash
# Attack (issue 26, item 2): an unprivileged user races registrations of writable shared
# memory against swapping, at the same address, a read-only shared mapping of a file it
# may only read, and writes into every MR it gets. The file's bytes must never change.
#   test_mapping_swap.sh ATTACK_BINARY [ITERATIONS]
source "$(dirname "$0")/../e2e/lib.sh"
ATTACK=${1:?path to mapping_swap_attack}
ITERATIONS=${2:-5000}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
chmod 755 "$dir"
victim=$dir/victim
head -c 65536 /dev/urandom >"$victim"
chmod 644 "$victim" # root's: readable by all, writable by root only
before=$(sha256sum <"$victim")
"$SOFTHCA" exec -- setpriv --reuid=65534 --regid=65534 --clear-groups \
    "$ATTACK" "${SOFTHCA_PREFIX}0" "${SOFTHCA_PREFIX}1" "$victim" "$ITERATIONS" ||
    fail "the attack program failed"
after=$(sha256sum <"$victim")
[ "$before" = "$after" ] || fail "the read-only file was written through the engine"
echo "the victim file is unchanged"
echo PASS
