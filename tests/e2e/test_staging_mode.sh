#!/usr/bin/env bash
# One opt-in staging mode of the engine (docs/memory-model.md): the end-to-end suite runs
# on the defaults users get, and each mode the engine keeps behind a switch gets this job
# of its own. An engine of its own with MODE=1 in its environment (and in the tests', whose
# expectations follow it), then the verbs suites that cross the mode's code:
#   SOFTHCA_SEND_STAGING     RC, UD/SRQ, XRC and NCCL-shaped verbs; RC again with the
#                            provider's SOFTHCA_STAGE_SENDS=0 (every source read from memory)
#   SOFTHCA_RECEIVE_STAGING  the same four; RC again with SOFTHCA_TEST_MEMORY=shared
#   SOFTHCA_READ_STAGING     the same four; RC again with SOFTHCA_SINGLE_COPY=0, so that
#                            READs between the two devices go the engine's way, staged
#   test_staging_mode.sh MODE RC_TEST UD_SRQ_TEST XRC_TEST NCCL_SHAPED_TEST
source "$(dirname "$0")/lib.sh"
mode=${1:?staging switch}
shift
[ $# -eq 4 ] || fail "usage: test_staging_mode.sh MODE RC UD_SRQ XRC NCCL_SHAPED"
rc=$1
export "$mode=1"
trap '"$SOFTHCA" down >/dev/null 2>&1 || true' EXIT
"$SOFTHCA" up >/dev/null || fail "softhca up failed"
for suite in "$@"; do
    echo "== $(basename "$suite") with $mode=1"
    "$SOFTHCA" exec -- "$suite" || fail "$(basename "$suite") failed with $mode=1"
done
case $mode in
SOFTHCA_SEND_STAGING) again=(env SOFTHCA_STAGE_SENDS=0) ;;
SOFTHCA_RECEIVE_STAGING) again=(env SOFTHCA_TEST_MEMORY=shared) ;;
SOFTHCA_READ_STAGING) again=(env SOFTHCA_SINGLE_COPY=0) ;;
*) fail "unknown staging switch $mode" ;;
esac
echo "== $(basename "$rc") with $mode=1 and ${again[*]:1}"
"$SOFTHCA" exec -- "${again[@]}" "$rc" || fail "$(basename "$rc") failed with $mode=1 and ${again[*]:1}"
kill -0 "$(engine_pid)" || fail "the engine died"
echo PASS
