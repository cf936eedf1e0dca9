#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, clang with ASan and UBSan) in build/fuzz, seeds
# their corpora from the Linux Soft-RoCE captures in ../shared/vectors, and runs each
# target for RUNS inputs (default 100000). Prints one line per target with the inputs
# run; exits non-zero on the first crash or sanitizer report (the reproducer is left in
# build/fuzz/crashes/).
#   tools/fuzz.sh [RUNS] [TARGET...]
#   TARGET: roce_frame cm_mad transport_receive control_messages rdma_cm
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-100000}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(roce_frame cm_mad transport_receive control_messages rdma_cm)
out=build/fuzz
vectors=$(cd .. && pwd)/shared/vectors
command -v clang++ >/dev/null || { echo "fuzz: clang++ is missing (tools/install-deps.sh)" >&2; exit 1; }
cmake -S fuzz -B "$out" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$out" -j"$(nproc)" >/dev/null

# Seeds: every frame of the captures for the frame parser, their IB packets (length-
# prefixed, as the transport target reads them) and their QP1 MADs.
python3 - "$vectors" "$out/seeds" <<'PY'
import os, struct, sys
vectors, seeds = sys.argv[1], sys.argv[2]
for d in ("roce_frame", "cm_mad", "transport_receive", "control_messages", "rdma_cm"):
    os.makedirs(os.path.join(seeds, d), exist_ok=True)
def frames(path):
    data = open(path, "rb").read()
    endian = "<" if data[:4] == b"\xd4\xc3\xb2\xa1" else ">"
    at = 24
    while at + 16 <= len(data):
        incl = struct.unpack(endian + "I", data[at + 8:at + 12])[0]
        yield data[at + 16:at + 16 + incl]
        at += 16 + incl
for name in sorted(os.listdir(vectors)):
    if not name.endswith(".pcap"):
        continue
    packets = []
    for i, f in enumerate(frames(os.path.join(vectors, name))):
        open(os.path.join(seeds, "roce_frame", f"{name}-{i}"), "wb").write(f)
        if len(f) < 14 + 20 + 8 + 12:
            continue
        ip = 14 + (40 if f[12:14] == b"\x86\xdd" else (f[14] & 0xF) * 4)
        ib = f[ip + 8:len(f) - 4]
        packets.append(ib)
        if len(ib) > 12 + 8 and ib[7] == 1:  # destination QP 1: a MAD behind BTH and DETH
            open(os.path.join(seeds, "cm_mad", f"{name}-{i}"), "wb").write(ib[20:])
    # One transport input per capture direction: an RC QP in RTS fed its packets.
    for start in range(0, len(packets), 16):
        chunk = packets[start:start + 16]
        blob = bytes([0, 1]) + b"".join(struct.pack(">H", len(p)) + p for p in chunk)
        open(os.path.join(seeds, "transport_receive", f"{name}-{start}"), "wb").write(blob)
PY

mkdir -p "$out/crashes"
for target in "${targets[@]}"; do
    corpus="$out/corpus/$target"
    mkdir -p "$corpus"
    log="$out/$target.log"
    # SOFTHCA_FUZZ_SEEDS: where a target writes seeds of its own (rdma_cm: a whole
    # connection in its step encoding) before the corpora are read.
    if ! SOFTHCA_FUZZ_SEEDS="$out/seeds/$target" "$out/fuzz_$target" -runs="$runs" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="$out/crashes/$target-" -print_final_stats=1 \
        "$corpus" "$out/seeds/$target" >"$log" 2>&1; then
        tail -40 "$log" >&2
        # Whether the input alone does it again: a target that keeps state across inputs
        # (rdma_cm's engine lives for the whole run) may need the inputs before it.
        crash=$(ls -t "$out/crashes/$target-"* 2>/dev/null | head -1 || true)
        if [ -n "$crash" ]; then
            if "$out/fuzz_$target" "$crash" >"$log.again" 2>&1; then
                echo "fuzz: $crash does not fail again when run alone" >&2
            else
                echo "fuzz: $crash fails again when run alone:" >&2
                grep -E "ERROR|fuzz_|SUMMARY" "$log.again" | head -8 >&2 || true
            fi
            echo "fuzz: the input, in hex: $(od -An -tx1 -v "$crash" | tr -d ' \n' | head -c 4000)" >&2
        fi
        echo "fuzz: $target FAILED (reproducer in $out/crashes)" >&2
        exit 1
    fi
    # fuzz_control_messages' engine socket (libFuzzer leaves without running atexit).
    for sock in /tmp/softhca-fuzz-*.sock; do
        pid=${sock##*-}
        pid=${pid%.sock}
        [ -e "$sock" ] && ! kill -0 "$pid" 2>/dev/null && rm -f "$sock"
    done
    done_runs=$(awk '/stat::number_of_executed_units/ {print $2}' "$log")
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
    echo "fuzz: $target: $done_runs inputs, $cov, corpus $(ls "$corpus" | wc -l) files, no crash"
done
