#!/usr/bin/env bash
# End-to-end tests against an engine built with AddressSanitizer and UndefinedBehavior-
# Sanitizer (SOFTHCA_SANITIZE, in build/sanitize): the programs are the normal build's
# (the provider is loaded into uninstrumented programs, where ASan cannot run), the
# engine they talk to is instrumented, chosen with SOFTHCA_ENGINE. The subset: the verbs
# tests of every transport (RC integrity and atomics on a faulty wire, on both memory
# paths), bad input and control-socket garbage, rdma_cm's errors and librdmacm's tools,
# a process killed with SIGKILL, rdma-core's own test suite, and a short soak (many
# processes, every transport, faults, SIGKILLs); the faulty wire and the soak with two
# data-path threads. Any
# sanitizer report of the engine, during the run or at its exit (leaks), fails.
#   tools/sanitize-e2e.sh   (after tools/build.sh; builds build/sanitize's engine)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=build/sanitize
# A unity build (eight sources to a unit): the sanitizer tree compiles in two-thirds of
# the time. The normal build keeps one unit per source, which checks every file's includes.
cmake -S . -B "$out" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSOFTHCA_SANITIZE=ON -DCMAKE_UNITY_BUILD=ON >/dev/null
cmake --build "$out" -j"$(nproc)" --target softhca-engine >/dev/null
reports=$(mktemp -d /tmp/softhca-sanitize-XXXXXX)
output=$(mktemp /tmp/softhca-sanitize-out-XXXXXX)
prefix=shasan
export SOFTHCA=$root/build/tools/softhca SOFTHCA_PREFIX=$prefix SOFTHCA_TEST_DEVICE=${prefix}0
export SOFTHCA_ENGINE=$root/$out/hca_engine/softhca-engine
# The engine inherits these from `softhca up`; reports go to files, one per process.
export ASAN_OPTIONS=log_path=$reports/asan:detect_leaks=1:halt_on_error=1
export UBSAN_OPTIONS=log_path=$reports/ubsan:print_stacktrace=1:halt_on_error=1
tests=$root/build/tests
cleanup() {
    "$SOFTHCA" down --prefix "$prefix" >/dev/null 2>&1 || true
    rm -rf "$reports" "$output"
}
trap cleanup EXIT
fail() {
    echo "sanitize-e2e: FAIL: $*" >&2
    cat "$reports"/* 2>/dev/null | head -80 >&2 || true
    exit 1
}
# Any report so far fails the run.
check_reports() {
    if compgen -G "$reports/*" >/dev/null; then
        fail "a sanitizer report of the engine after: $1"
    fi
}
run() {
    local name=$1
    shift
    local start=$SECONDS
    "$@" >"$output" 2>&1 || { tail -30 "$output" >&2; fail "$name"; }
    check_reports "$name"
    echo "sanitize-e2e: $name: passed ($((SECONDS - start)) s)"
}
on_engine() { "$SOFTHCA" exec --prefix "$prefix" -- "$@"; }

"$SOFTHCA" up --prefix "$prefix" >/dev/null
engine=$(cat "${SOFTHCA_RUN_ROOT:-/run/softhca}/$prefix/engine.pid")
[ "$(readlink -f "/proc/$engine/exe")" = "$(readlink -f "$SOFTHCA_ENGINE")" ] ||
    fail "softhca up did not start the sanitizer build's engine"
grep -q ASAN_OPTIONS "/proc/$engine/environ" || fail "the engine did not get ASAN_OPTIONS"
run "verbs bad input and control socket garbage" on_engine "$tests/verbs_errors_test"
run "extended verbs" on_engine "$tests/extended_verbs_test"
run "completion channels" on_engine "$tests/event_verbs_test"
run "UD, multicast and SRQ verbs" on_engine "$tests/ud_srq_verbs_test"
run "XRC verbs" on_engine "$tests/xrc_verbs_test"
run "rdma_cm errors" on_engine "$tests/rdma_cm_errors_test"
run "SIGKILLed process leaves no objects" tests/e2e/test_kill_cleanup.sh "$tests/hold_resources"
run "librdmacm's tools (rping, ucmatose, udaddy, mckey, rsockets)" \
    tests/e2e/test_rdma_cm_tools.sh "$tests/tcp_stream_check"
"$SOFTHCA" down --prefix "$prefix" >/dev/null
check_reports "softhca down (leaks at the engine's exit)"

# Two data-path threads, one per device: every packet crosses threads.
"$SOFTHCA" up --prefix "$prefix" --threads 2 \
    --faults drop=0.01,dup=0.01,reorder=0.01,corrupt=0.002,seed=7 >/dev/null
for memory in heap shared; do
    run "RC integrity and atomics under faults, $memory memory" env SOFTHCA_TEST_MEMORY=$memory \
        SOFTHCA_TEST_LOSSY=1 "$SOFTHCA" exec --prefix "$prefix" -- "$tests/rc_verbs_test"
done
"$SOFTHCA" down --prefix "$prefix" >/dev/null
check_reports "softhca down after the faulty wire"

# The QoS paths: a shaped link with a queue per VL and its arbiter, ECN marking, DCQCN
# (CNPs, pacing), together with the fault injector; frames still held by the link when
# the engine stops.
"$SOFTHCA" up --prefix "$prefix" --shape rate_mbps=2000,delay_us=20,queue_kb=256 \
    --ecn kmin_kb=16,kmax_kb=64,pmax=0.2 --dcqcn ai_mbps=2,hai_mbps=20,b=524288 \
    --vl-arbitration "high=1:255;low=0:16,2:48;limit=255" \
    --faults drop=0.005,dup=0.005,reorder=0.005,seed=5 >/dev/null
run "RC integrity over a shaped, marked, paced and lossy link" env SOFTHCA_TEST_MEMORY=heap \
    SOFTHCA_TEST_LOSSY=1 "$SOFTHCA" exec --prefix "$prefix" -- "$tests/rc_verbs_test" "[integrity]"
run "UD, multicast and SRQ over the shaped link" on_engine "$tests/ud_srq_verbs_test" "[faults]"
"$SOFTHCA" down --prefix "$prefix" >/dev/null
check_reports "softhca down with a shaped link"

# Link-level credits: a lossless link whose flow-control frames go both ways, with the
# fault injector (its drops are before the link: the credits never see those frames).
"$SOFTHCA" up --prefix "$prefix" --shape rate_mbps=2000,queue_kb=256 \
    --link-credits buffer_kb=32,refresh_us=200 \
    --faults drop=0.005,dup=0.005,reorder=0.005,seed=9 >/dev/null
run "RC integrity over a lossless link with credits" env SOFTHCA_TEST_MEMORY=heap \
    SOFTHCA_TEST_LOSSY=1 "$SOFTHCA" exec --prefix "$prefix" -- "$tests/rc_verbs_test" "[integrity]"
"$SOFTHCA" down --prefix "$prefix" >/dev/null
check_reports "softhca down with link credits"

# (ASan keeps freed memory in quarantine: the soak's memory bound is not the point here.)
# rdma-core's own suite brings its instance up and down itself.
run "rdma-core's test suite" tests/e2e/test_rdma_core_suite.sh
check_reports "rdma-core's test suite (its engine's exit)"
run "soak, short, two data-path threads" env SOFTHCA_ENGINE_THREADS=2 tools/soak.sh --procs 4 --flows 6,6,6,6 --seconds 15 --life 3,8 \
    --prefix "$prefix" --seed 3 --memory-bound-mb 1024
echo "sanitize-e2e: PASS (no sanitizer report of the engine)"
