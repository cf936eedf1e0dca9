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
tx_bytes() { "$SOFTHCA" status | awk -v d="device $1 " 'index($0, d) == 1 {f = 1; next}
    f && /counters:/ {for (i = 1; i < NF; i++) if ($i == "tx_bytes") print $(i + 1); exit}'; }
before0=$(tx_bytes "$SERVER_DEV")
before1=$(tx_bytes "$CLIENT_DEV")
# The environment of each rank: UCX on this rank's device only, over RC with UD to wire
# up, and never shared memory or TCP. Open MPI's own verbs BTL stays out.
ucx_env=(-x UCX_TLS=rc_verbs,ud_verbs:aux,self -x UCX_WARN_UNUSED_ENV_VARS=n)
out=$("$SOFTHCA" exec --prefix "$SOFTHCA_PREFIX" -- timeout 240 mpirun --allow-run-as-root \
    -mca pml ucx -mca btl ^openib,uct -mca osc ^ucx "${ucx_env[@]}" \
    -np 1 -x UCX_NET_DEVICES="$SERVER_DEV:1" "$bench" "$iters" : \
    -np 1 -x UCX_NET_DEVICES="$CLIENT_DEV:1" "$bench" "$iters" 2>&1) ||
    fail "mpirun over softhca failed: $out"
echo "$out"
for figure in "pingpong 8 us" "pingpong 1048576 MBps" "allreduce 1048576 us"; do
    grep -qE "^$figure [0-9.]+$" <<<"$out" || fail "no figure for $figure"
done
# 1 MiB ping-pongs (iters/10 + 1, and the warm-up rounds) go each way through each device.
least=$(((iters / 10 + 1) * 1048576))
sent0=$(($(tx_bytes "$SERVER_DEV") - before0))
sent1=$(($(tx_bytes "$CLIENT_DEV") - before1))
echo "sent: $SERVER_DEV $sent0 B, $CLIENT_DEV $sent1 B (at least $least each)"
[ "$sent0" -ge "$least" ] && [ "$sent1" -ge "$least" ] ||
    fail "the devices did not carry the job's messages"
echo "PASS"
