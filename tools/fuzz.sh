#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, clang with ASan and UBSan) in build/fuzz, seeds
# their corpora from the Linux Soft-RoCE captures in tests/vectors (fuzz/seeds.py), and
# runs each target for RUNS inputs (default 100000). Prints one line per target with the inputs
# run; exits non-zero on a crash or sanitizer report (the reproducer is left in
# build/fuzz/crashes/). The targets run side by side, as many as there are cores.
#   tools/fuzz.sh [RUNS] [TARGET...]
#   TARGET: roce_frame cm_mad ib_cm transport_receive control_messages rdma_cm rdma_netlink
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-100000}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(roce_frame cm_mad ib_cm transport_receive control_messages rdma_cm rdma_netlink)
out=build/fuzz
command -v clang++ >/dev/null || { echo "fuzz: clang++ is missing (tools/install-deps.sh)" >&2; exit 1; }
cmake -S fuzz -B "$out" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$out" -j"$(nproc)" >/dev/null

# Seeds from the Linux Soft-RoCE captures (fuzz/seeds.py says which).
python3 fuzz/seeds.py tests/vectors "$out/seeds"

mkdir -p "$out/crashes"
# One target's run: 0 when it ends without a crash, its summary line printed.
run_target() {
    local target=$1
    local corpus="$out/corpus/$target" log="$out/$target.log"
    mkdir -p "$corpus"
    # SOFTHCA_FUZZ_SEEDS: where a target writes seeds of its own (rdma_cm, ib_cm: a whole
    # connection in its step encoding) before the corpora are read.
    if ! SOFTHCA_FUZZ_SEEDS="$out/seeds/$target" "$out/fuzz_$target" -runs="$runs" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="$out/crashes/$target-" -print_final_stats=1 \
        "$corpus" "$out/seeds/$target" >"$log" 2>&1; then
        {
            tail -40 "$log"
            # Whether the input alone does it again: a target that keeps state across
            # inputs (rdma_cm's engine lives for the whole run) may need the inputs before it.
            local crash
            crash=$(ls -t "$out/crashes/$target-"* 2>/dev/null | head -1 || true)
            if [ -n "$crash" ]; then
                if "$out/fuzz_$target" "$crash" >"$log.again" 2>&1; then
                    echo "fuzz: $crash does not fail again when run alone"
                else
                    echo "fuzz: $crash fails again when run alone:"
                    grep -E "ERROR|fuzz_|SUMMARY" "$log.again" | head -8 || true
                fi
                echo "fuzz: the input, in hex: $(od -An -tx1 -v "$crash" | tr -d ' \n' | head -c 4000)"
            fi
            echo "fuzz: $target FAILED (reproducer in $out/crashes)"
        } >&2
        return 1
    fi
    local done_runs cov
    done_runs=$(awk '/stat::number_of_executed_units/ {print $2}' "$log")
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
    echo "fuzz: $target: $done_runs inputs, $cov, corpus $(ls "$corpus" | wc -l) files, no crash"
}
# The targets run side by side, one per core (each fuzzer is one thread); a failure
# fails the run once the others have ended.
failed=0
running=0
for target in "${targets[@]}"; do
    if [ "$running" -ge "$(nproc)" ]; then
        wait -n || failed=1
        running=$((running - 1))
    fi
    run_target "$target" &
    running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
    wait -n || failed=1
    running=$((running - 1))
done
# fuzz_control_messages' engine socket (libFuzzer leaves without running atexit).
for sock in /tmp/softhca-fuzz-*.sock; do
    pid=${sock##*-}
    pid=${pid%.sock}
    [ -e "$sock" ] && ! kill -0 "$pid" 2>/dev/null && rm -f "$sock"
done
exit "$failed"
