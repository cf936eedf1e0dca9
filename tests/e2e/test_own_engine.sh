#!/usr/bin/env bash
# One command against an engine of its own (SOFTHCA_PREFIX), brought up with the engine's
# defaults and taken down after: for a suite that reads device-wide counters, which the
# other tests sharing an engine would move under it.
#   test_own_engine.sh COMMAND [ARG...]   (run under softhca exec)
source "$(dirname "$0")/lib.sh"
[ $# -ge 1 ] || fail "usage: test_own_engine.sh COMMAND [ARG...]"
trap '"$SOFTHCA" down >/dev/null 2>&1 || true' EXIT
"$SOFTHCA" up >/dev/null || fail "softhca up failed"
"$SOFTHCA" exec -- "$@" || fail "$(basename "$1") failed"
kill -0 "$(engine_pid)" || fail "the engine died"
echo PASS
