#!/usr/bin/env bash
# Gloo (Debian's libgloo, the collective library PyTorch uses on CPUs) over softhca: three
# ranks, alternating between the instance's two devices, run ring allreduces over Gloo's
# ibverbs transport (RDMA WRITE with immediate into registered heap buffers, its own QP
# per pair), of a size the ranks do not divide evenly; softhca-gloo-bench checks every
# element of every result. Each device must have sent at least what the allreduces put
# through it.
#   test_gloo.sh GLOO_BENCH [ITERATIONS]
source "$(dirname "$0")/lib.sh"
bench=${1:?softhca-gloo-bench}
iters=${2:-20}
size=$((1048576 + 12))
store=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$store"' EXIT
before=$(devices_tx_bytes)
devices=("$SERVER_DEV" "$CLIENT_DEV" "$SERVER_DEV")
for rank in 0 1 2; do
    "$SOFTHCA" exec --prefix "$SOFTHCA_PREFIX" -- timeout 120 "$bench" \
        "ibverbs:${devices[$rank]}" "$rank" 3 "$store" "$size" "$iters" >"$store.$rank" 2>&1 &
    pids+=($!)
done
rc=0
for rank in 0 1 2; do
    wait "${pids[$rank]}" || { rc=$?; echo "rank $rank exited $rc: $(cat "$store.$rank")"; }
done
out=$(cat "$store".[012])
rm -f "$store".[012]
echo "$out"
[ "$rc" -eq 0 ] || fail "a Gloo rank failed"
grep -qE "^allreduce $size us [0-9.]+$" <<<"$out" || fail "rank 0 printed no figure"
# A ring allreduce sends 2 (ranks - 1) / ranks of the buffer from every rank, each round.
require_devices_sent "$before" $((iters * size)) "the allreduces"
echo "PASS"
