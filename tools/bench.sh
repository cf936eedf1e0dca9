#!/usr/bin/env bash
# Benchmark: softhca (perftest between the two built-in devices) side by side with
# what a user would otherwise use on the same machine, TCP over loopback (qperf), in
# one run, with the ratio. Not a test: machines here are shared and noisy, so read the
# figures as a comparison made under the same conditions, not as absolutes.
#
#   tools/bench.sh [-q]     # -q: fewer iterations (a quick look)
# Needs a build (tools/build.sh) and root; installs qperf if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
softhca=build/tools/softhca
prefix=shbench
iters=2000
[ "${1:-}" = "-q" ] && iters=300
command -v qperf >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q qperf >/dev/null

cleanup() {
    [ -n "${qperf_pid:-}" ] && kill "$qperf_pid" 2>/dev/null || true
    "$softhca" down --prefix "$prefix" >/dev/null 2>&1 || true
}
trap cleanup EXIT
"$softhca" up --prefix "$prefix" >/dev/null
qperf >/dev/null 2>&1 &
qperf_pid=$!
sleep 0.5

# perftest between <prefix>0 (server) and <prefix>1 (client); prints the value of
# column $3 of the result row.
perftest() {
    local tool=$1 size=$2 column=$3 port=$((40000 + RANDOM % 20000))
    "$softhca" exec --prefix "$prefix" -- timeout 120 "$tool" -d "${prefix}0" -x 0 -p "$port" \
        -s "$size" -n "$iters" >/dev/null 2>&1 &
    local server=$!
    sleep 0.3
    "$softhca" exec --prefix "$prefix" -- timeout 120 "$tool" -d "${prefix}1" -x 0 -p "$port" \
        -s "$size" -n "$iters" 127.0.0.1 2>/dev/null |
        awk -v size="$size" -v col="$column" '$1 == size && NF >= col {print $col; exit}'
    wait "$server" 2>/dev/null || true
}

# qperf over loopback: "bw" in MB/s or "lat" in microseconds.
tcp() {
    local test=$1 size=$2
    # -uu prints plain units: bytes/sec and nanoseconds.
    qperf -t 2 --msg_size "$size" -uu 127.0.0.1 "$test" 2>/dev/null |
        awk '$1 == "bw" {printf "%.2f\n", $3 / 1e6; exit} $1 == "latency" {printf "%.2f\n", $3 / 1000; exit}'
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0) printf "%.2f", a / b; else print "-"}'; }

echo "softhca $(git rev-parse --short HEAD 2>/dev/null || echo '?') on $(nproc) cores, $(date -u +%F)"
echo "Bandwidth, MB/s (softhca: perftest BW average; TCP: qperf tcp_bw over loopback)"
printf "%-12s %10s %12s %12s %12s %14s\n" size write_bw send_bw read_bw tcp_bw "write/tcp"
for size in 64 4096 65536 1048576; do
    w=$(perftest ib_write_bw "$size" 4)
    s=$(perftest ib_send_bw "$size" 4)
    r=$(perftest ib_read_bw "$size" 4)
    t=$(tcp tcp_bw "$size")
    printf "%-12s %10s %12s %12s %12s %14s\n" "$size" "$w" "$s" "$r" "$t" "$(ratio "$w" "$t")"
done
echo "Latency, microseconds (softhca: perftest typical; TCP: qperf tcp_lat, one way)"
printf "%-12s %10s %12s %12s %14s\n" size send_lat write_lat tcp_lat "tcp/send"
for size in 8 4096; do
    s=$(perftest ib_send_lat "$size" 5)
    w=$(perftest ib_write_lat "$size" 5)
    t=$(tcp tcp_lat "$size")
    printf "%-12s %10s %12s %12s %14s\n" "$size" "$s" "$w" "$t" "$(ratio "$t" "$s")"
done
