#!/usr/bin/env bash
# NCCL over softhca, proven in one command on a machine with a GPU, PyTorch and NCCL but
# no network and no RDMA packages, from the folder tools/gpu-bundle.sh made (this script
# lies in it). As root:
#   1. brings up softhca from the folder (two devices on the built-in wire) and shows them
#      with ibv_devinfo through the folder's libibverbs;
#   2. finds PyTorch, a GPU and NCCL (a dry run stops here, saying what it found);
#   3. runs two ranks as two hosts on one GPU (NCCL_HOSTID per rank, one softhca device per
#      rank: NCCL_IB_HCA==PREFIX0 and =PREFIX1, NCCL_NET=IB, no net plugin, GPUDirect
#      only for memory on the NIC's own device (none), P2P and SHM off): all_reduce,
#      all_gather, reduce_scatter and send/recv from 1 KiB to 64 MiB, every element
#      checked (tools/nccl_check.py), with NCCL_PROTO=LL and with Simple;
#   4. asserts from NCCL's own log that it used NET/IB on the softhca devices and that
#      GPUDirect RDMA was off, and records which memory path softhca used for NCCL's
#      buffers (the MRs the engine mapped against those it reached by memory file or
#      cross-memory attach, `softhca status` sampled during the run);
#   5. runs the same over NCCL's socket transport and prints the bus bandwidth side by
#      side. Within 5 minutes on a 16-core machine.
# NCCL picks the GID itself (2.21 and later: the first IPv4 one of RoCE v2, from
# gid_attrs/types), unless GPU_CHECK_GID_INDEX=N sets NCCL_IB_GID_INDEX.
#   gpu-check.sh [--dry-run]   (GPU_CHECK_OUT=DIR keeps the logs there; GPU_CHECK_PREFIX
#   names the instance, default gpuchk; GPU_CHECK_KEEP_UP=1 leaves it up for a look)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dry=0
[ "${1:-}" = --dry-run ] && dry=1
prefix=${GPU_CHECK_PREFIX:-gpuchk}
softhca=$here/softhca/bin/softhca
logs=${GPU_CHECK_OUT:-$(mktemp -d /tmp/softhca-gpu-check-XXXXXX)}
mkdir -p "$logs"
say() { echo "gpu-check: $*"; }
die() {
    echo "gpu-check: FAIL: $*" >&2
    exit 1
}
sampler=
cleanup() {
    [ -n "$sampler" ] && kill "$sampler" 2>/dev/null || true
    [ -n "${GPU_CHECK_KEEP_UP:-}" ] && return
    "$softhca" down --prefix "$prefix" >/dev/null 2>&1 || true
    rm -rf "/run/softhca-gpu-check-$prefix"
}
trap cleanup EXIT

# 1. softhca from the folder.
[ "$(id -u)" = 0 ] || die "run as root: the engine registers its devices under /etc/libibverbs.d and /run"
for part in softhca/bin/softhca softhca/libexec/softhca/softhca-engine lib/rdma/libibverbs.so.1 \
    bin/ibv_devinfo nccl_check.py; do
    [ -e "$here/$part" ] || die "$part is missing from $here: make the folder with tools/gpu-bundle.sh"
done
mkdir -p /etc/libibverbs.d
rdma_libs=$here/lib/rdma
# The engine's DPDK: the folder's, with its plugins, on a host without DPDK 22.11; the
# host's own where it has that one (DPDK loads every plugin of its installed folder, and
# with the folder's libraries too each driver would be registered twice).
if compgen -G "/usr/lib/*/dpdk/pmds-23.0" >/dev/null; then
    engine_env=(env "LD_LIBRARY_PATH=$rdma_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
    say "the host's DPDK 22.11 runs the engine"
else
    # DPDK loads plugins only from a folder no one but root may write to, up to /: a copy
    # under /run, wherever the folder was unpacked (/tmp would be refused).
    plugins=/run/softhca-gpu-check-$prefix
    rm -rf "$plugins"
    mkdir -m 755 "$plugins"
    cp "$here"/lib/engine/dpdk/*.so "$plugins"/
    engine_env=(env "LD_LIBRARY_PATH=$here/lib/engine:$rdma_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        "SOFTHCA_DPDK_PLUGINS=$plugins")
fi
app() { env "LD_LIBRARY_PATH=$rdma_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$softhca" exec --prefix "$prefix" -- "$@"; }
"$softhca" down --prefix "$prefix" >/dev/null 2>&1 || true
"${engine_env[@]}" "$softhca" up --prefix "$prefix" >"$logs/up.log" 2>&1 ||
    die "softhca up failed: $(cat "$logs/up.log")"
"$softhca" status --prefix "$prefix" >"$logs/status-idle.txt"
head -1 "$logs/status-idle.txt"
for d in 0 1; do
    app "$here/bin/ibv_devinfo" -d "$prefix$d" >"$logs/ibv_devinfo$d.txt" 2>&1 ||
        die "ibv_devinfo -d $prefix$d: $(cat "$logs/ibv_devinfo$d.txt")"
    grep -q PORT_ACTIVE "$logs/ibv_devinfo$d.txt" || die "$prefix$d is not active"
done
say "softhca is up from $here: ${prefix}0 and ${prefix}1 active through the folder's libibverbs"

# 2. PyTorch, a GPU, NCCL.
python=${GPU_CHECK_PYTHON:-python3}
python3 "$here/nccl_check.py" --cpu-only >/dev/null || die "nccl_check.py does not run"
nvidia=$(compgen -G "/dev/nvidia[0-9]*" | tr '\n' ' ' || true)
if ! found=$(app "$python" -c 'import torch; print(torch.__version__)' 2>"$logs/torch.txt"); then
    [ "$dry" = 1 ] || die "no PyTorch for $python: $(tail -1 "$logs/torch.txt")"
    if [ -z "$nvidia" ]; then
        say "dry run: no GPU found (no /dev/nvidia*) and no PyTorch for $python: everything before CUDA passed"
    else
        say "dry run: a GPU ($nvidia) but no PyTorch for $python: everything before CUDA passed"
    fi
    exit 0
fi
say "PyTorch $found"
gpu=$(app "$python" -c 'import torch
if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
    print("none")
else:
    print(torch.cuda.get_device_name(0), "NCCL", ".".join(map(str, torch.cuda.nccl.version())))' 2>>"$logs/torch.txt") ||
    die "PyTorch could not look for a GPU: $(tail -3 "$logs/torch.txt")"
if [ "$gpu" = none ]; then
    [ "$dry" = 1 ] || die "no GPU found (torch.cuda.is_available() is false)"
    say "dry run: no GPU found; everything before CUDA passed"
    exit 0
fi
say "GPU: $gpu"
if [ "$dry" = 1 ]; then
    say "dry run: a GPU is here; run without --dry-run for the NCCL check"
    exit 0
fi

# 3-5. Two ranks, over softhca's verbs (LL and Simple) and over NCCL's sockets.
# Samples of `softhca status` while NCCL runs: which MRs the engine mapped.
(
    while :; do
        "$softhca" status --prefix "$prefix" --json >>"$logs/status-samples.jsonl" 2>/dev/null || true
        sleep 0.5
    done
) &
sampler=$!
run_pair() { # NAME NET PROTO
    local name=$1 net=$2 proto=$3 port pids=() rank rc=0
    port=$((29500 + RANDOM % 2000))
    for rank in 0 1; do
        app env RANK=$rank WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
            CUDA_VISIBLE_DEVICES=0 NCCL_HOSTID="softhca-host$rank" NCCL_NET="$net" \
            NCCL_PROTO="$proto" NCCL_IB_HCA="=$prefix$rank" NCCL_IBEXT_DISABLE=1 \
            NCCL_NET_PLUGIN=none NCCL_NET_GDR_LEVEL=LOC NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 \
            NCCL_SOCKET_IFNAME=lo ${GPU_CHECK_GID_INDEX:+NCCL_IB_GID_INDEX=$GPU_CHECK_GID_INDEX} \
            NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET \
            timeout 240 "$python" "$here/nccl_check.py" >"$logs/$name.rank$rank.log" 2>&1 &
        pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
    [ "$rc" = 0 ] || die "$name: a rank failed (logs in $logs): $(grep -hE 'Error|error|wrong|FAIL' "$logs/$name".rank*.log | head -5)"
    grep -q '^CHECKED 36' "$logs/$name.rank0.log" || die "$name: not every result was checked"
}
start=$SECONDS
for proto in LL Simple; do
    run_pair "ib-$proto" IB "$proto"
    for rank in 0 1; do
        log=$logs/ib-$proto.rank$rank.log
        grep -q "NET/IB : Using \[0\]$prefix$rank" "$log" ||
            die "ib-$proto rank $rank: NCCL did not use $prefix$rank over NET/IB: $(grep -m3 'NET/' "$log")"
        grep -q "via NET/IB" "$log" || die "ib-$proto rank $rank: no channel went via NET/IB"
        ! grep -q "GDRDMA" "$log" || die "ib-$proto rank $rank: GPUDirect RDMA was used"
    done
    say "NCCL over softhca ($proto): every result checked, NET/IB on ${prefix}0 and ${prefix}1, GPUDirect off"
done
run_pair socket Socket Simple
kill "$sampler" 2>/dev/null || true
sampler=
say "all runs in $((SECONDS - start)) s"

# What the engine did with NCCL's memory.
python3 - "$logs/status-samples.jsonl" <<'EOF'
import json, sys
mapped = mrs = 0
for line in open(sys.argv[1]):
    try:
        d = json.loads(line)
    except ValueError:
        continue
    mapped = max(mapped, d.get("memory", {}).get("mapped_mr", 0))
    mrs = max(mrs, sum(c["objects"]["mr"] for c in d.get("contexts", [])))
print(f"gpu-check: NCCL's memory: at most {mrs} MRs registered at once, {mapped} of them "
      f"mapped by the engine (shared memory); the rest reached by memory file or "
      f"cross-memory attach")
EOF
echo "Bus bandwidth, GB/s (nccl_check.py; two ranks on one GPU as two hosts)"
printf "%-15s %10s %10s %10s %10s\n" op bytes ib-LL ib-Simple socket
for result in $(awk '/^RESULT/ {print $2 ":" $3}' "$logs/ib-Simple.rank0.log"); do
    op=${result%%:*} bytes=${result##*:}
    row=()
    for name in ib-LL ib-Simple socket; do
        row+=("$(awk -v op="$op" -v b="$bytes" '$1 == "RESULT" && $2 == op && $3 == b {print $5}' "$logs/$name.rank0.log")")
    done
    printf "%-15s %10s %10s %10s %10s\n" "$op" "$bytes" "${row[@]}"
done
say "PASS (logs in $logs)"
