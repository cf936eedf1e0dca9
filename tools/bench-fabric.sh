#!/usr/bin/env bash
# Fabric scenarios (softhca up --fabric), each with the stock perftest, sampled every
# 50 ms with `softhca sample`, as a table and a plot (default build/fabric-*.png; the
# README's fabric section shows them):
#   (b) ECMP collisions: 4 long flows across a leaf-spine of 4 spines (each flow could
#       have a spine of its own), static ECMP against adaptive routing: each flow's rate,
#       Jain's index, which spine each took;
#   (c) a 7-to-1 incast into h9 beside a victim flow h4 -> h8 that shares only the
#       spine's link to leaf1 with it: lossy without DCQCN, with DCQCN, and with PFC (no
#       DCQCN): the victim's rate, the incast's, drops, pauses, and the queues over time;
#   (e) Open MPI (pml ucx) on the fabric beside the same on one link;
#   (d) a spine link failing under an MPI all-reduce, and the time to recover.
# Needs a build (tools/build.sh) and root; installs gnuplot if missing.
#   tools/bench-fabric.sh [OUTPUT_PREFIX]   (default build/fabric)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/fabric}
softhca=$PWD/build/tools/softhca
[ -x "$softhca" ] || {
    echo "build first (tools/build.sh)" >&2
    exit 1
}
command -v gnuplot >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gnuplot-nox >/dev/null
export SOFTHCA_PREFIX=bfab$$
P=$SOFTHCA_PREFIX
work=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; "$softhca" down >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
SECONDS_RUN=${FABRIC_SECONDS:-5}
port=19100

# flows NAME SERVER:CLIENT...: one ib_write_bw per pair (device numbers), all at once for
# SECONDS_RUN, sampled; each client's output in $work/NAME.SERVER-CLIENT.
flows() {
    local name=$1 pair server client servers=() clients=()
    shift
    for pair in "$@"; do
        server=${pair%:*} client=${pair#*:}
        port=$((port + 1))
        "$softhca" exec -- timeout $((SECONDS_RUN + 15)) ib_write_bw -d "$P$server" -x 0 -p $port -D "$SECONDS_RUN" \
            -s 65536 >"$work/$name.$pair.server" 2>&1 &
        servers+=($!)
        pids+=($!)
        echo "$port" >"$work/$name.$pair.port"
    done
    sleep 1
    "$softhca" sample --interval 0.05 --count $((SECONDS_RUN * 20 + 60)) \
        --output "$work/$name.csv" &
    local sampler=$!
    pids+=("$sampler")
    for pair in "$@"; do
        server=${pair%:*} client=${pair#*:}
        "$softhca" exec -- timeout $((SECONDS_RUN + 15)) ib_write_bw -d "$P$client" -x 0 \
            -p "$(cat "$work/$name.$pair.port")" -D "$SECONDS_RUN" -s 65536 127.0.0.1 \
            >"$work/$name.$pair" 2>&1 &
        clients+=($!)
        pids+=($!)
    done
    for p in "${clients[@]}" "${servers[@]}"; do wait "$p" || true; done
    sleep 0.3
    kill "$sampler" 2>/dev/null || true
    wait "$sampler" 2>/dev/null || true
}
# A client's rate in Mb/s, or 0 when it printed none (it had not finished when its time
# ran out: a flow starved by drops, waiting on RC's retransmission timer).
rate() { awk '$1 == 65536 {r = $4 * 8} END {printf "%.0f", r}' "$1" 2>/dev/null || echo 0; }
# jain RATE...: Jain's fairness index of the rates.
jain() { printf '%s\n' "$@" | awk '{s += $1; q += $1 * $1; n++} END {printf "%.3f", q ? s * s / (n * q) : 0}'; }
# series CSV LINK FIELD OUT: a fabric port's FIELD over time (bytes as Mb/s, queue as KiB).
series() {
    awk -F, -v obj="link:$2" -v field="$3" '
        $2 == obj && $3 == field {
            if (field == "bytes") { if (t != "") printf "%s %.1f\n", $1, ($4 - v) * 8 / ($1 - t) / 1e6; t = $1; v = $4 }
            else printf "%s %.1f\n", $1, $4 / 1024
        }' "$1" >"$4"
}
fabric_value() { # fabric_value LINK FIELD: from the live status
    "$softhca" status --json | python3 -c '
import json, sys
for e in json.load(sys.stdin)["fabric"]["egress"]:
    if e["from"] + ">" + e["to"] == sys.argv[1]:
        print(e[sys.argv[2]])' "$1" "$2"
}

ECN=ecn_kmin_kb=16,ecn_kmax_kb=64,ecn_pmax=0.2
DCQCN=ai_mbps=2,hai_mbps=20,b=524288 # the paper's 40 Gb/s steps scaled to 2 Gb/s

# (b) ECMP collisions: h0..h3 on leaf0 send to h4..h7 on leaf1 over 4 spines of 2 Gb/s,
# with ECN marking and DCQCN (as a RoCE fabric runs: flows that share a link share it).
echo "(b) ECMP collisions: 4 flows across a leaf-spine of 4 spines, 2 Gb/s links, DCQCN"
printf '%-9s %-36s %-7s %-7s %s\n' routing "flows h0>h4 h1>h5 h2>h6 h3>h7 (Mb/s)" total Jain "spines taken (frames leaf0->spine0..3)"
for routing in ecmp adaptive; do
    "$softhca" up --fabric "leaf-spine:hosts=8,leaves=2,spines=4,rate_gbps=2,queue_kb=512,$ECN,routing=$routing,flowlet_us=100,seed=3" \
        --dcqcn "$DCQCN" >/dev/null
    flows "b-$routing" 4:0 5:1 6:2 7:3
    rates=()
    for pair in 4:0 5:1 6:2 7:3; do rates+=("$(rate "$work/b-$routing.$pair")"); done
    spines=""
    for s in 0 1 2 3; do spines+="$(fabric_value "leaf0>spine$s" frames) "; done
    total=$((rates[0] + rates[1] + rates[2] + rates[3]))
    printf '%-9s %-36s %-7s %-7s %s\n' "$routing" "${rates[*]}" "$total" "$(jain "${rates[@]}")" "$spines"
    for s in 0 1 2 3; do series "$work/b-$routing.csv" "leaf0>spine$s" bytes "$work/b-$routing.spine$s.dat"; done
    "$softhca" down >/dev/null
done

# (c) incast: h0..h3 (leaf0) and h5..h7 (leaf1) into h9 (leaf1); the victim h4 (leaf0) ->
# h8 (leaf1) shares the spine's link to leaf1 with the incast's leaf0 senders, not h9's.
echo
echo "(c) 7-to-1 incast into h9 beside a victim flow h4 -> h8, 2 Gb/s links, 256 KiB queues"
printf '%-8s %-14s %-22s %-10s %-10s %-10s %s\n' mode "victim (Mb/s)" "incast (Mb/s, stalled)" drops marks pauses "peak queue leaf1>h9 (KiB)"
BASE="leaf-spine:hosts=10,leaves=2,spines=1,rate_gbps=2,oversubscription=2.5,queue_kb=256"
for mode in lossy dcqcn pfc; do
    case $mode in
    lossy) "$softhca" up --fabric "$BASE" >/dev/null ;;
    dcqcn) "$softhca" up --fabric "$BASE,$ECN" --dcqcn "$DCQCN" >/dev/null ;;
    pfc) "$softhca" up --fabric "$BASE,pfc=1,pfc_xoff_kb=64" >/dev/null ;;
    esac
    flows "c-$mode" 8:4 9:0 9:1 9:2 9:3 9:5 9:6 9:7
    incast=0
    stalled=0
    for pair in 9:0 9:1 9:2 9:3 9:5 9:6 9:7; do
        r=$(rate "$work/c-$mode.$pair")
        incast=$((incast + r))
        [ "$r" -gt 0 ] || stalled=$((stalled + 1))
    done
    totals=$("$softhca" status --json | python3 -c '
import json, sys
e = json.load(sys.stdin)["fabric"]["egress"]
print(sum(x["dropped"] for x in e), sum(x["marked"] for x in e), sum(x["pauses"] for x in e))')
    read -r drops marks pauses <<<"$totals"
    printf '%-8s %-14s %-22s %-10s %-10s %-10s %s\n' "$mode" "$(rate "$work/c-$mode.8:4")" "$incast ($stalled of 7)" \
        "$drops" "$marks" "$pauses" "$(($(fabric_value "leaf1>h9" peak_queue_bytes) / 1024))"
    series "$work/c-$mode.csv" "spine0>leaf1" bytes "$work/c-$mode.victim_path.dat"
    series "$work/c-$mode.csv" "leaf1>h8" bytes "$work/c-$mode.victim.dat"
    series "$work/c-$mode.csv" "leaf1>h9" bytes "$work/c-$mode.incast.dat"
    series "$work/c-$mode.csv" "leaf1>h9" queue_bytes "$work/c-$mode.queue.dat"
    series "$work/c-$mode.csv" "spine0>leaf1" queue_bytes "$work/c-$mode.spine_queue.dat"
    "$softhca" down >/dev/null
done

# Open MPI (softhca-mpi-bench, pml ucx over RC, a rank per host: every sum checked).
# mpi DEVICE... [-- BENCH ARGS]: a rank on each device; prints what rank 0 printed.
mpi() {
    local devices=() line=() dev
    while [ $# -gt 0 ] && [ "$1" != -- ]; do
        devices+=("$1")
        shift
    done
    [ "${1:-}" = -- ] && shift
    for dev in "${devices[@]}"; do
        [ ${#line[@]} -gt 0 ] && line+=(:)
        line+=(-np 1 -x "UCX_NET_DEVICES=$dev:1" build/tools/softhca-mpi-bench "$@")
    done
    "$softhca" exec -- timeout 300 mpirun --allow-run-as-root --oversubscribe -mca pml ucx \
        -mca btl ^openib,uct -mca osc ^ucx -x UCX_TLS=rc_verbs,ud_verbs:aux,self \
        -x UCX_WARN_UNUSED_ENV_VARS=n "${line[@]}" 2>&1
}
mpi_row() { # mpi_row LABEL DEVICES...: ping-pong 8 B and 1 MiB (ranks 0-1), all-reduce 1 MiB
    local out
    out=$(mpi "${@:2}" -- 1000)
    awk -v label="$1" '{v[$1 " " $2] = $4}
        END {printf "%-50s %10s %10s %12s\n", label, v["pingpong 8"], v["pingpong 1048576"], v["allreduce 1048576"]}' <<<"$out"
}

# (e) Open MPI on the fabric beside the same on one link (the built-in wire).
echo
echo "(e) Open MPI (pml ucx over RC), a rank per host; 10 Gb/s links, 2:1 leaf-spine"
printf '%-50s %10s %10s %12s\n' "ranks" "8 B (us)" "1 MiB MB/s" "allreduce us"
"$softhca" up >/dev/null
mpi_row "2 on the built-in wire (one link, no fabric)" "${P}0" "${P}1"
"$softhca" down >/dev/null
"$softhca" up --fabric leaf-spine:hosts=8,leaves=2,spines=2,oversubscription=2,rate_gbps=10 >/dev/null
mpi_row "2 on one leaf (h0 h1)" "${P}0" "${P}1"
mpi_row "2 across a spine (h0 h4)" "${P}0" "${P}4"
mpi_row "4 on two leaves (h0 h1 h4 h5; ping-pong h0-h1)" "${P}0" "${P}1" "${P}4" "${P}5"
"$softhca" down >/dev/null

# (d) A spine link failing under an MPI all-reduce: 4 ranks on two leaves, 1 MiB
# all-reduces; 3 s in, the uplink of leaf0 that carried more goes down. The traffic out of
# leaf0 over time shows the failure and the recovery (RC retransmitting what was lost once
# leaf0 has stopped using the dead link, at once, and the spine has routed around it).
echo
echo "(d) a spine link failing under 4 ranks' 1 MiB MPI_Allreduce (10 Gb/s links)"
"$softhca" up --fabric leaf-spine:hosts=8,leaves=2,spines=2,oversubscription=2,rate_gbps=10 >/dev/null
"$softhca" sample --interval 0.05 --count 1200 --output "$work/d.csv" &
sampler=$!
pids+=("$sampler")
t0=$(date +%s.%N)
mpi "${P}0" "${P}1" "${P}4" "${P}5" -- 2000 allreduce >"$work/d.out" &
job=$!
pids+=("$job")
sleep 3
s0=$(fabric_value "leaf0>spine0" frames)
s1=$(fabric_value "leaf0>spine1" frames)
dead=0
[ "$s1" -gt "$s0" ] && dead=1
t_fail=$(date +%s.%N)
"$softhca" fabric link leaf0 "spine$dead" down >/dev/null
result=ok
wait "$job" || result=failed
kill "$sampler" 2>/dev/null || true
wait "$sampler" 2>/dev/null || true
fail_at=$(awk -v a="$t0" -v b="$t_fail" 'BEGIN {printf "%.2f", b - a}')
awk -F, '$2 ~ /^link:leaf0>spine/ && $3 == "bytes" {
        if ($2 in v) r[$1] += ($4 - v[$2]) * 8 / ($1 - t[$2]) / 1e6
        v[$2] = $4; t[$2] = $1 }
    END { for (x in r) printf "%s %.1f\n", x, r[x] }' "$work/d.csv" | sort -n >"$work/d.rate.dat"
recovery=$(awk -v f="$fail_at" '
    $1 > 0.5 && $1 < f && $2 > 0 { sum += $2; n++ }
    $1 >= f + 0.05 && !done && n > 0 && $2 >= sum / n / 2 {
        printf "%.2f s (back to half the %.0f Mb/s it averaged before)", $1 - f, sum / n; done = 1
    }
    END { if (!done) print "not within the run" }' "$work/d.rate.dat")
echo "leaf0-spine$dead down at ${fail_at} s; MPI $result: $(grep allreduce "$work/d.out");" \
    "traffic out of leaf0 recovered after $recovery"
"$softhca" down >/dev/null

gnuplot <<EOF
set termoption noenhanced
set terminal pngcairo size 1100,700
set output "$out-ecmp.png"
set multiplot layout 2,1 title "(b) 4 flows across 4 spines (2 Gb/s links): the rate each leaf0->spine uplink carries"
set xlabel "seconds"
set ylabel "Mb/s"
set yrange [0:4500]
set key outside right
set title "static ECMP"
plot for [s=0:3] "$work/b-ecmp.spine".s.".dat" using 1:2 with lines lw 2 title "leaf0->spine".s
set title "adaptive routing (flowlets onto the least-loaded uplink)"
plot for [s=0:3] "$work/b-adaptive.spine".s.".dat" using 1:2 with lines lw 2 title "leaf0->spine".s
unset multiplot
set terminal pngcairo size 1100,1000
set output "$out-incast.png"
set multiplot layout 3,1 title "(c) 7-to-1 incast into h9 beside a victim h4->h8 (2 Gb/s links)"
set ylabel "Mb/s"
set y2label "queue KiB"
set yrange [0:2200]
set y2range [0:*]
set ytics nomirror
set y2tics
do for [m in "lossy dcqcn pfc"] {
    set title m eq "lossy" ? "lossy, no DCQCN" : m eq "dcqcn" ? "DCQCN, ECN marking at the switches" : "PFC, no DCQCN"
    plot "$work/c-".m.".victim.dat" using 1:2 with lines lw 2 title "victim h4->h8 (Mb/s)", \
         "$work/c-".m.".incast.dat" using 1:2 with lines lw 2 title "incast into h9 (Mb/s)", \
         "$work/c-".m.".queue.dat" using 1:2 axes x1y2 with lines lc rgb "gray" title "queue leaf1->h9 (KiB, right)", \
         "$work/c-".m.".spine_queue.dat" using 1:2 axes x1y2 with lines lc rgb "black" dt 2 title "queue spine0->leaf1 (KiB, right)"
}
unset multiplot
set terminal pngcairo size 1100,450 noenhanced
set output "$out-failure.png"
set title "(d) leaf0-spine$dead fails at ${fail_at} s under 4 ranks' 1 MiB MPI_Allreduce: traffic out of leaf0"
set ylabel "Mb/s"
unset y2label
unset y2tics
set yrange [0:*]
set arrow from $fail_at, graph 0 to $fail_at, graph 1 nohead dt 2
plot "$work/d.rate.dat" using 1:2 with lines lw 2 title "leaf0 -> spines (Mb/s)"
EOF
tools/plot-fabric.sh "$work/c-pfc.csv" "$out-heat-pfc.png" \
    "(c) under PFC: every link's utilisation and the busiest queues" >/dev/null
echo
echo "plots: $out-ecmp.png $out-incast.png $out-heat-pfc.png $out-failure.png"
