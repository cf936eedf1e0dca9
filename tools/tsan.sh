#!/usr/bin/env bash
# The provider under ThreadSanitizer (SOFTHCA_TSAN, in build/tsan): the verbs programs
# that call from many threads and processes at once (control_channel_test: eight threads
# and forked processes on one context's control channel; event_verbs_test: completion
# channels, the async event thread) built with TSan, loading the TSan build's provider
# and preload library (the normal build's `softhca` told so by SOFTHCA_PROVIDER and
# SOFTHCA_PRELOAD), against the normal build's engine (DPDK's EAL and TSan's shadow memory
# do not go together). Only those four targets are built with TSan: not the engine, which
# the TSan build's `softhca` would pull in. Any TSan report fails.
#   tools/tsan.sh   (after tools/build.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=build/tsan
# A unity build (eight sources to a unit): the sanitizer tree compiles in two-thirds of
# the time. The normal build keeps one unit per source, which checks every file's includes.
cmake -S . -B "$out" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSOFTHCA_TSAN=ON -DCMAKE_UNITY_BUILD=ON >/dev/null
cmake --build "$out" -j"$(nproc)" --target softhca_provider softhca_preload \
    control_channel_test event_verbs_test >/dev/null
prefix=shtsan
export SOFTHCA_ENGINE=$root/build/hca_engine/softhca-engine SOFTHCA_PREFIX=$prefix
export SOFTHCA_PROVIDER=$root/$out/provider/libsofthca-rdmav34.so
export SOFTHCA_PRELOAD=$root/$out/kernel_shim/libsofthca-preload.so
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
softhca=$root/build/tools/softhca
trap '"$softhca" down --prefix "$prefix" >/dev/null 2>&1 || true' EXIT
"$softhca" up --prefix "$prefix" >/dev/null
grep -q "$root/$out/provider/" "/etc/libibverbs.d/$prefix.driver" ||
    { echo "tsan: the instance does not use the TSan build's provider" >&2; exit 1; }
"$softhca" exec --prefix "$prefix" -- sh -c 'echo "$LD_PRELOAD"' | grep -q "$root/$out/kernel_shim/" ||
    { echo "tsan: exec does not preload the TSan build's library" >&2; exit 1; }
for test in control_channel_test event_verbs_test; do
    "$softhca" exec --prefix "$prefix" -- "$root/$out/tests/$test" >/tmp/softhca-tsan-$$.log 2>&1 ||
        { tail -60 /tmp/softhca-tsan-$$.log >&2; rm -f /tmp/softhca-tsan-$$.log; echo "tsan: $test FAILED" >&2; exit 1; }
    echo "tsan: $test: $(grep -E '^All tests passed' /tmp/softhca-tsan-$$.log)"
done
rm -f /tmp/softhca-tsan-$$.log
echo "tsan: PASS (no ThreadSanitizer report)"
