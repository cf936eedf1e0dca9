#!/usr/bin/env bash
# Benchmark (not a test): two bulk RC flows (ib_write_bw -q 2, 64 KiB writes) into one
# port whose link is shaped to 2 Gb/s with a 512 KiB queue and ECN marking on it, once
# without DCQCN, once with it, and once with link-level credits between the two ports
# instead (lossless: no DCQCN), sampled every 50 ms with `softhca sample`. Prints each
# run's throughput, drops and queue, and plots the two flows' rates and the queue depth
# over time for the three (default build/congestion.png; the README shows it).
#
#   tools/bench-congestion.sh [PLOT.png]
# Needs a build (tools/build.sh) and root; installs gnuplot if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
plot=${1:-build/congestion.png}
softhca=$PWD/build/tools/softhca
[ -x "$softhca" ] || {
    echo "build first (tools/build.sh)" >&2
    exit 1
}
command -v gnuplot >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gnuplot-nox >/dev/null
export SOFTHCA_PREFIX=bcong$$
work=$(mktemp -d)
trap '"$softhca" down >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

SHAPE=rate_mbps=2000,queue_kb=512
ECN=kmin_kb=16,kmax_kb=64,pmax=0.2
DCQCN=ai_mbps=2,hai_mbps=20,b=524288 # the paper's 40 Gb/s steps scaled to 2 Gb/s
SECONDS_RUN=6

# run NAME [ENGINE ARGS...]: the two flows, sampled; leaves $work/NAME.csv.
run() {
    local name=$1 port=18555
    shift
    "$softhca" up --shape "$SHAPE" --ecn "$ECN" "$@" >/dev/null
    "$softhca" exec -- timeout 60 ib_write_bw -d "${SOFTHCA_PREFIX}0" -x 0 -p $port -q 2 \
        -D $SECONDS_RUN -s 65536 >"$work/$name.server" 2>&1 &
    local server=$!
    sleep 1
    "$softhca" sample --interval 0.05 --count $((SECONDS_RUN * 20 + 40)) \
        --output "$work/$name.csv" &
    local sampler=$!
    "$softhca" exec -- timeout 60 ib_write_bw -d "${SOFTHCA_PREFIX}1" -x 0 -p $port -q 2 \
        -D $SECONDS_RUN -s 65536 127.0.0.1 >"$work/$name.client" 2>&1
    wait "$server" || true
    kill "$sampler" 2>/dev/null || true
    wait "$sampler" 2>/dev/null || true
    local bw
    bw=$(awk '$1 == 65536 {print $4}' "$work/$name.client")
    local summary
    summary=$("$softhca" status | grep -A3 "${SOFTHCA_PREFIX}1 port" | grep "shaped link")
    echo "$name: ib_write_bw ${bw:-?} MB/s;$summary"
    "$softhca" down >/dev/null
    # Per sender QP (device 1): Mb/s of payload between samples (4096-byte packets), and
    # the sending port's queue in KiB.
    awk -F, -v dev="qp:${SOFTHCA_PREFIX}1/" -v port="device:${SOFTHCA_PREFIX}1" -v out="$work/$name" '
        $3 == "packets_sent" && index($2, dev) == 1 {
            if (!($2 in flow)) flow[$2] = ++n
            if ($2 in last) printf "%s %.1f\n", $1, ($4 - last[$2]) * 4096 * 8 / ($1 - when[$2]) / 1e6 > (out ".flow" flow[$2] ".dat")
            last[$2] = $4; when[$2] = $1
        }
        $2 == port && $3 == "queue_bytes" { printf "%s %.1f\n", $1, $4 / 1024 > (out ".queue.dat") }
        END { for (i = 1; i <= n; i++) print "flow" i > (out ".flows") }
    ' "$work/$name.csv"
}

run off
run on --dcqcn "$DCQCN"
run credits --link-credits buffer_kb=64

series() {
    local name=$1 f
    while read -r f; do
        printf '"%s.%s.dat" using 1:2 with lines lw 2 title "%s: %s sends (Mb/s)", ' \
            "$work/$name" "$f" "$2" "$f"
    done <"$work/$name.flows"
    printf '"%s.queue.dat" using 1:2 axes x1y2 with lines lc rgb "gray" title "%s: queue (KiB, right)"' \
        "$work/$name" "$2"
}

gnuplot <<EOF
set terminal pngcairo size 1100,1000
set output "$plot"
set multiplot layout 3,1 title "Two RC flows into a 2 Gb/s shaped link (512 KiB queue, ECN kmin 16 / kmax 64 KiB)"
set xlabel "seconds"
set ylabel "Mb/s"
set y2label "queue KiB"
set yrange [0:2200]
set y2range [0:560]
set ytics nomirror
set y2tics
set key outside right
set title "DCQCN off: the queue fills, frames are dropped, RC goes back N (sends count the resent)"
plot $(series off "off")
set title "DCQCN on: CNPs pace the requesters, the queue stays short, the flows share"
plot $(series on "on")
set title "Link credits, no DCQCN: the full queue holds the requesters back, none dropped or resent"
plot $(series credits "credits")
unset multiplot
EOF
echo "plot: $plot"
