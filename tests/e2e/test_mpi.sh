#!/usr/bin/env bash
# Open MPI (Debian's openmpi-bin, unmodified) over softhca: two ranks, one on each device
# of the instance, with pml ucx and UCX limited to softhca's RC (UD for its wire-up) and
# to the rank's device: softhca-mpi-bench's ping-pongs (8 B and 1 MiB) and 1 MiB
# MPI_Allreduce, every byte and sum checked by the program. The job must exit 0 and print
# its three figures, and each device must have sent at least the 1 MiB messages that
# went through it (so MPI did not find another way).
#   test_mpi.sh MPI_BENCH [ITERATIONS]
source "$(dirname "$0")/lib.sh"
bench=${1:?softhca-mpi-bench}
iters=${2:-100}
command -v mpirun >/dev/null || fail "mpirun not installed (openmpi-bin)"
before=$(devices_tx_bytes)
# The environment of each rank: UCX on this rank's device only, over RC with UD to wire
# up, and never shared memory or TCP. Open MPI's own verbs BTL stays out. Each rank's app
# context names it: mpirun's -x belongs to the context it is in.
ucx_env=(-x UCX_TLS=rc_verbs,ud_verbs:aux,self -x UCX_WARN_UNUSED_ENV_VARS=n)
out=$("$SOFTHCA" exec --prefix "$SOFTHCA_PREFIX" -- timeout 240 mpirun --allow-run-as-root \
    -mca pml ucx -mca btl ^openib,uct -mca osc ^ucx \
    -np 1 "${ucx_env[@]}" -x UCX_NET_DEVICES="$SERVER_DEV:1" "$bench" "$iters" : \
    -np 1 "${ucx_env[@]}" -x UCX_NET_DEVICES="$CLIENT_DEV:1" "$bench" "$iters" 2>&1) ||
    fail "mpirun over softhca failed: $out"
echo "$out"
for figure in "pingpong 8 us" "pingpong 1048576 MBps" "allreduce 1048576 us"; do
    grep -qE "^$figure [0-9.]+$" <<<"$out" || fail "no figure for $figure"
done
# 1 MiB ping-pongs (iters/10 + 1, and the warm-up rounds) go each way through each device.
require_devices_sent "$before" $(((iters / 10 + 1) * 1048576)) "the job's messages"
echo "PASS"
