#!/usr/bin/env bash
# Runs an attack program against an engine instance of its own (SOFTHCA_PREFIX), brought
# up here with SOFTHCA_UP_ARGS and taken down after, so that what the attack does to the
# engine (a port taken down and up, filled pipes, floods up to its caps) reaches no other
# test. With SOFTHCA_RUN_AS=UID the program runs as that user (and its group), without
# supplementary groups, as an unprivileged local user would.
#   test_with_own_engine.sh PROGRAM [ARGS...]
source "$(dirname "$0")/../e2e/lib.sh"
trap '"$SOFTHCA" down >/dev/null 2>&1 || true' EXIT
# shellcheck disable=SC2086 # the options are words
"$SOFTHCA" up ${SOFTHCA_UP_ARGS:-} >/dev/null || fail "softhca up failed"
as=()
if [ -n "${SOFTHCA_RUN_AS:-}" ]; then
    as=(setpriv --reuid="$SOFTHCA_RUN_AS" --regid="$SOFTHCA_RUN_AS" --clear-groups)
fi
SOFTHCA_TEST_DEVICE=${SOFTHCA_PREFIX}0 "$SOFTHCA" exec -- "${as[@]}" "$@"
# The engine outlived the attacks.
kill -0 "$(engine_pid)" || fail "the engine died"
echo PASS
