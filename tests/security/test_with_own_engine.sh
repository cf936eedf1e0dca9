#!/usr/bin/env bash
# Runs an attack program against an engine instance of its own (SOFTHCA_PREFIX), brought
# up here and taken down after, so that what the attack does to the engine (a port taken
# down and up, filled pipes) reaches no other test.
#   test_with_own_engine.sh PROGRAM [ARGS...]
source "$(dirname "$0")/../e2e/lib.sh"
trap '"$SOFTHCA" down >/dev/null 2>&1 || true' EXIT
"$SOFTHCA" up >/dev/null || fail "softhca up failed"
SOFTHCA_TEST_DEVICE=${SOFTHCA_PREFIX}0 "$SOFTHCA" exec -- "$@"
# The engine outlived the attacks.
kill -0 "$(engine_pid)" || fail "the engine died"
echo PASS
