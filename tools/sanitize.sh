#!/usr/bin/env bash
# Builds the engine, the transport and the unit tests with AddressSanitizer and
# UndefinedBehaviorSanitizer (SOFTHCA_SANITIZE=ON) in build/sanitize and runs the unit
# tests there: every engine piece the unit tests drive (the transport, the data path over
# the simulated wire, the rdma_cm and IB CM, the tables, the codecs) under the sanitizers.
# Exits non-zero on a failing test or any sanitizer report.
set -euo pipefail
cd "$(dirname "$0")/.."
out=build/sanitize
# A unity build (eight sources to a unit): the sanitizer tree compiles in two-thirds of
# the time. The normal build keeps one unit per source, which checks every file's includes.
cmake -S . -B "$out" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSOFTHCA_SANITIZE=ON -DCMAKE_UNITY_BUILD=ON >/dev/null
cmake --build "$out" -j"$(nproc)" --target unit_tests >/dev/null
# Leaks are reported at exit too; any report fails the run.
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:halt_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# One program per layer (tests/CMakeLists.txt); arguments go to each (a Catch2 filter
# that matches nothing in one program is not an error there).
for program in "$out"/tests/{transport,ib_cm,device_interface,engine_*}_unit_tests; do
    echo "sanitize: ${program##*/}"
    "$program" "$@"
done
