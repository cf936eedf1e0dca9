#!/usr/bin/env bash
# rdma-core's own test suite (Debian's python3-pyverbs ships it, gzipped, under
# /usr/share/doc/rdma-core/tests) against a softhca device on the built-in wire, run as
# its README says: run_tests.py --dev DEV, with Debian's /usr/bin/python3. Fails on any
# failure or error; prints the counts (the README lists the skips and why).
source "$(dirname "$0")/lib.sh"
suite=/usr/share/doc/rdma-core/tests
[ -f "$suite/run_tests.py" ] || fail "rdma-core's tests are not installed (python3-pyverbs)"
work=$(mktemp -d)
trap '"$SOFTHCA" down >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
cp -r "$suite" "$work/tests"
gunzip "$work"/tests/*.gz
"$SOFTHCA" up >/dev/null || fail "softhca up failed"
log="$work/run.log"
rc=0
(cd "$work/tests" && "$SOFTHCA" exec -- timeout 600 /usr/bin/python3 run_tests.py \
    --dev "${SOFTHCA_PREFIX}0" -v) >"$log" 2>&1 || rc=$?
summary=$(grep -E '^(Ran [0-9]+ tests|OK|FAILED)' "$log" | tr '\n' ' ')
passed=$(grep -cE '\.\.\. ok$' "$log" || true)
skipped=$(grep -cE '\.\.\. skipped' "$log" || true)
echo "rdma-core tests: $summary($passed passed, $skipped skipped)"
if [ "$rc" -ne 0 ]; then
    grep -E '\.\.\. (FAIL|ERROR)$' "$log" >&2 || true
    sed -n '/^=====/,$p' "$log" | head -80 >&2
    fail "rdma-core's test suite failed"
fi
