#!/usr/bin/env bash
# Soak and load: many processes with many QPs at once on one engine whose wire drops,
# duplicates, reorders and corrupts packets, while processes are killed with SIGKILL at
# random moments and started again.
#
#   tools/soak.sh [--procs N] [--flows RC,UC,UD,XRC] [--seconds S] [--life MIN,MAX]
#                 [--seed N] [--prefix P] [--memory-bound-mb MB]
#
# Defaults: 8 processes, each with 40 RC, 32 UC, 24 UD and 32 XRC flows (a flow is two
# QPs, one on each device: 256 QPs a process, 2,048 in all), for 600 s; each process lives
# MIN..MAX seconds (default 10..40) and half of them are killed at a random moment of
# their life (some while still creating their QPs). Every process checks every byte it
# receives and every atomic result (tests/helpers/soak_worker.cpp); one that lives to its
# end must report zero errors. At the end the engine must hold no context and no object,
# as many descriptors as before the first process, and at most --memory-bound-mb (default
# 32) MiB more resident memory than then (the engine gives its heap back with
# malloc_trim when its last context closes; what stays is allocator fragmentation). Prints the figures; exits non-zero on any
# failure. Starts its own instance (prefix soak by default) and takes it down.
# The test suite runs a short version ("e2e: soak, short" in tests/CMakeLists.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
procs=8
flows=40,32,24,32
seconds=600
life=10,40
seed=$RANDOM
prefix=soak
memory_bound_mb=32
build=${SOFTHCA_BUILD:-build}
while [ $# -gt 0 ]; do
    case $1 in
    --procs) procs=$2 ;;
    --flows) flows=$2 ;;
    --seconds) seconds=$2 ;;
    --life) life=$2 ;;
    --seed) seed=$2 ;;
    --prefix) prefix=$2 ;;
    --memory-bound-mb) memory_bound_mb=$2 ;;
    *) echo "usage: see the head of $0" >&2; exit 2 ;;
    esac
    shift 2
done
softhca=$build/tools/softhca
worker=$build/tests/soak_worker
[ -x "$softhca" ] && [ -x "$worker" ] || { echo "soak: build first ($build)" >&2; exit 2; }
IFS=, read -r rc uc ud xrc <<<"$flows"
IFS=, read -r life_min life_max <<<"$life"
RANDOM=$seed
work=$(mktemp -d /tmp/softhca-soak-XXXXXX)
running=() # worker pids, by slot

cleanup() {
    for pid in "${running[@]}"; do
        [ "$pid" = 0 ] || kill -9 "$pid" 2>/dev/null || true
    done
    "$softhca" down --prefix "$prefix" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
fail() {
    echo "soak: FAIL: $*" >&2
    exit 1
}

"$softhca" up --prefix "$prefix" \
    --faults "drop=0.005,dup=0.005,reorder=0.005,corrupt=0.001,seed=$seed" >/dev/null
engine=$(cat "${SOFTHCA_RUN_ROOT:-/run/softhca}/$prefix/engine.pid")
eval "$("$softhca" env --prefix "$prefix")"
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$engine/status"; }
fds() { ls "/proc/$engine/fd" | wc -l; }
status_json() { "$softhca" status --prefix "$prefix" --json; }
rss_before=$(rss_kb)
fds_before=$(fds)

# Slot bookkeeping: the running worker's pid, its log, when it ends on its own (for the
# record) and when it is to be killed (0: never).
declare -a kill_at log_of
started=0 killed=0 finished=0 max_qps=0
ops=0 bytes=0 atomics=0 lost=0 late=0 again=0
launch() {
    local slot=$1 lifetime memory worker_seed
    lifetime=$((life_min + RANDOM % (life_max - life_min + 1)))
    memory=heap
    ((RANDOM % 2)) && memory=shared
    worker_seed=$((RANDOM * 32768 + RANDOM))
    log_of[$slot]=$work/worker-$started.log
    "$worker" "${prefix}0" "${prefix}1" "$rc" "$uc" "$ud" "$xrc" "$lifetime" "$worker_seed" \
        "$memory" >"${log_of[$slot]}" 2>&1 &
    running[$slot]=$!
    kill_at[$slot]=0
    # Half are killed: anywhere from during setup to just before their end.
    if ((RANDOM % 2)); then
        kill_at[$slot]=$((SECONDS + RANDOM % (lifetime + 2)))
    fi
    started=$((started + 1))
}

# A worker that ended by itself: it must have succeeded; add up its figures.
collect() {
    local slot=$1 status=0 line
    wait "${running[$slot]}" || status=$?
    running[$slot]=0
    line=$(grep '^soak:' "${log_of[$slot]}" | tail -1 || true)
    [ "$status" = 0 ] && [ -n "$line" ] ||
        fail "worker (slot $slot) exited $status: $(tail -5 "${log_of[$slot]}")"
    read -r _ _ _ _ q _ o _ b _ a _ l _ t _ d _ e <<<"$line"
    [ "$e" = 0 ] || fail "worker reported errors: $line"
    finished=$((finished + 1))
    ops=$((ops + o)) bytes=$((bytes + b)) atomics=$((atomics + a))
    lost=$((lost + l)) late=$((late + t)) again=$((again + d))
    max_qps=$q
}

end=$((SECONDS + seconds))
began=$SECONDS
for ((s = 0; s < procs; s++)); do
    launch "$s"
done
peak_qps=0
while :; do
    any=0
    for ((s = 0; s < procs; s++)); do
        pid=${running[$s]}
        [ "$pid" = 0 ] && continue
        any=1
        if ! kill -0 "$pid" 2>/dev/null || [ -n "$(ps -o stat= -p "$pid" | grep Z)" ]; then
            collect "$s"
        elif [ "${kill_at[$s]}" != 0 ] && [ "$SECONDS" -ge "${kill_at[$s]}" ]; then
            { kill -9 "$pid" && wait "$pid"; } 2>/dev/null || true
            running[$s]=0
            killed=$((killed + 1))
        else
            continue
        fi
        [ "$SECONDS" -lt "$end" ] && launch "$s"
    done
    [ "$any" = 1 ] || break
    qps_now=$(status_json | python3 -c 'import json,sys; print(json.load(sys.stdin)["objects"]["qp"])')
    [ "$qps_now" -gt "$peak_qps" ] && peak_qps=$qps_now
    sleep 0.5
done
duration=$((SECONDS - began))

# The engine holds nothing of the processes, dead or finished.
deadline=$((SECONDS + 20))
until [ "$(status_json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(len(d["contexts"]) + sum(d["objects"].values()))')" = 0 ]; do
    [ $SECONDS -lt $deadline ] || fail "the engine still holds objects: $("$softhca" status --prefix "$prefix" | sed -n '/^contexts/,$p')"
    sleep 0.2
done
wait_fds=$((SECONDS + 10))
until [ "$(fds)" -le "$fds_before" ] || [ $SECONDS -ge $wait_fds ]; do sleep 0.2; done
rss_after=$(rss_kb)
fds_after=$(fds)
faults=$(status_json | python3 -c '
import json, sys
d = json.load(sys.stdin)
t = {}
for dev in d["devices"]:
    for k, v in (dev.get("faults") or {}).items():
        t[k] = t.get(k, 0) + v
print(" ".join(f"{k} {v}" for k, v in t.items()))')

cat <<EOF
soak: seed $seed, $procs processes x ($rc RC + $uc UC + $ud UD + $xrc XRC flows) = $max_qps QPs a process
soak: duration ${duration} s; processes started $started, killed with SIGKILL $killed, lived to their end $finished
soak: peak QPs in the engine $peak_qps
soak: operations checked $ops, bytes checked $bytes, atomics checked $atomics (processes that lived)
soak: UC/UD messages lost to injected faults $lost (no retransmission; counted, not errors), received late $late; UD datagrams received again or out of order (the wire's duplicates) $again
soak: faults injected: $faults
soak: engine descriptors before $fds_before after $fds_after; resident memory before $((rss_before / 1024)) MiB after $((rss_after / 1024)) MiB (bound +$memory_bound_mb MiB)
EOF
[ "$fds_after" -le "$fds_before" ] || fail "the engine holds $((fds_after - fds_before)) more descriptors than before"
[ "$rss_after" -le $((rss_before + memory_bound_mb * 1024)) ] ||
    fail "the engine's resident memory grew by $(((rss_after - rss_before) / 1024)) MiB"
[ "$finished" -gt 0 ] || fail "no process lived to its end"
echo "soak: PASS (errors 0, bytes lost or corrupted on the reliable transports 0)"
