#!/usr/bin/env bash
# ibv_devices (ibverbs-utils) lists both default devices of a running instance.
source "$(dirname "$0")/lib.sh"
out=$("$SOFTHCA" exec -- ibv_devices)
echo "$out"
grep -qE "^\s+${SOFTHCA_PREFIX}0\s+[0-9a-f]{16}$" <<<"$out" || fail "${SOFTHCA_PREFIX}0 not listed"
grep -qE "^\s+${SOFTHCA_PREFIX}1\s+[0-9a-f]{16}$" <<<"$out" || fail "${SOFTHCA_PREFIX}1 not listed"
echo PASS
