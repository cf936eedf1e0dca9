#!/usr/bin/env bash
# Fabric scenarios (softhca up --fabric), each with unmodified programs (the stock perftest,
# Open MPI), sampled every 50 ms with `softhca sample`, as a table and a plot (default
# build/fabric-*.png; the README's fabric section shows them):
#   (a) all-to-all among 8 hosts (Open MPI's MPI_Alltoall, a rank per host) over a 2:1
#       oversubscribed leaf-spine, and over a 1:1 one, against the bisection bound computed
#       from the spec: the aggregate rate, the uplinks' utilisation, a heat map of the 2:1 run;
#   (b) ECMP collisions: 4 long flows across a leaf-spine of 4 spines (each flow could
#       have a spine of its own), static ECMP against adaptive routing: each flow's rate,
#       Jain's index, which spine each took;
#   (c) a 7-to-1 incast into h9 beside a victim flow h4 -> h8 that shares only the
#       spine's link to leaf1 with it: lossy without DCQCN, with DCQCN, and with PFC (no
#       DCQCN): the victim's rate, the incast's, drops, pauses, and the queues over time;
#   (e) Open MPI (pml ucx) on the fabric beside the same on one link;
#   (d) a spine link failing under an MPI all-reduce, and the time to recover.
# Needs a build (tools/build.sh) and root; installs gnuplot if missing.
#   [FABRIC_SCENARIOS="a b c e d"] tools/bench-fabric.sh [OUTPUT_PREFIX]   (default build/fabric)
# FABRIC_SCENARIOS names the scenarios to run (default all); only theirs are plotted.
# FABRIC_A_ITERATIONS: (a)'s timed all-to-alls (default 50, about 8 s each run).
# FABRIC_C_MODES: (c)'s modes (default "lossy dcqcn pfc"); FABRIC_DCQCN: its DCQCN parameters.
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
scenarios=" ${FABRIC_SCENARIOS:-a b c e d} "
for s in $scenarios; do
    case $s in
    a | b | c | d | e) ;;
    *)
        echo "FABRIC_SCENARIOS: unknown scenario '$s' (a b c d e)" >&2
        exit 2
        ;;
    esac
done
want() { [[ $scenarios == *" $1 "* ]]; } # want X: scenario X is to run
section() {                                # a blank line between scenarios
    [ -z "${sectioned:-}" ] || echo
    sectioned=1
}
plots=()

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

# Open MPI (softhca-mpi-bench, pml ucx over RC, a rank per host: every sum checked).
# mpi DEVICE... [-- BENCH ARGS]: a rank on each device; prints what rank 0 printed.
# mpirun's -x belongs to the app context it is in (a -x before the first ':' reaches rank 0
# alone), so every rank's context names UCX_TLS: without it ranks 1.. would take UCX's
# default transports and talk to each other through shared memory, not the fabric.
mpi() {
    local devices=() line=() dev
    while [ $# -gt 0 ] && [ "$1" != -- ]; do
        devices+=("$1")
        shift
    done
    [ "${1:-}" = -- ] && shift
    for dev in "${devices[@]}"; do
        [ ${#line[@]} -gt 0 ] && line+=(:)
        line+=(-np 1 -x "UCX_TLS=rc_verbs,ud_verbs:aux,self" -x UCX_WARN_UNUSED_ENV_VARS=n
            -x "UCX_NET_DEVICES=$dev:1" build/tools/softhca-mpi-bench "$@")
    done
    "$softhca" exec -- timeout 300 mpirun --allow-run-as-root --oversubscribe -mca pml ucx \
        -mca btl ^openib,uct -mca osc ^ucx "${line[@]}" 2>&1
}
mpi_row() { # mpi_row LABEL DEVICES...: ping-pong 8 B and 1 MiB (ranks 0-1), all-reduce 1 MiB
    local out
    out=$(mpi "${@:2}" -- 1000)
    awk -v label="$1" '{v[$1 " " $2] = $4}
        END {printf "%-50s %10s %10s %12s\n", label, v["pingpong 8"], v["pingpong 1048576"], v["allreduce 1048576"]}' <<<"$out"
}

ECN=ecn_kmin_kb=16,ecn_kmax_kb=64,ecn_pmax=0.2
# DCQCN's timers (T, the rate increase's, and K, alpha's) at 1 ms instead of the paper's 55
# us: here a QP hears a CNP about every 1.25 ms however many of its packets are marked (the
# engine answers marks once a round, and a round takes that long with 16 perftest processes
# spinning on 2 cores), and with 55 us timers a cut rate was back where it was in 0.3 ms, so
# DCQCN never held a sender down (7-to-1 incast: 137,000 drops, as many as without it). The
# steps: R_AI 10 Mb/s and R_HAI 100 Mb/s per T, B 512 KiB (for 2 Gb/s links).
# FABRIC_DCQCN: other parameters (--dcqcn's).
DCQCN=${FABRIC_DCQCN:-ai_mbps=10,hai_mbps=100,b=524288,t_us=1000,k_us=1000}
c_modes=${FABRIC_C_MODES:-lossy dcqcn pfc}

# (a) All-to-all among 8 hosts, a rank per host, 4 on each of 2 leaves over 2 spines: Open
# MPI's MPI_Alltoall of 1 MiB per pair (every byte checked), with 2:1 oversubscribed uplinks
# and, for comparison, 1:1, against the bisection bound of the spec. With H hosts on each of
# L leaves (N = H * L), host links of rate R and uplinks of U = H * R / oversubscription per
# leaf, every host sends to the N - 1 others evenly and H * (L - 1) / (N - 1) of it leaves
# its leaf, so a host's rate x is at most min(R, U * (N - 1) / (H * H * (L - 1))) and the
# all-to-all's aggregate at most N * x: 7 R at 2:1 (the uplinks full), 8 R at 1:1 (the host
# links full, the uplinks at 4/7).
# * 1 Gb/s host links: one engine thread forwards 8 hosts' 1 GB/s, each frame over 2 to 4
#   links, while the 8 ranks spin on the same 2 cores (the engine runs at nice -10).
# * 16 MiB switch queues (deep-buffer switches): they hold all that a leaf's ranks can have
#   in flight (its 16 cross-leaf pairs' 1 MiB messages). An all-to-all is a 7-to-1 incast
#   at every host: 256 KiB queues drop, and RC then waits out UCX's 1 s retransmission
#   timer (over a second per all-to-all); PFC instead pauses the links that feed a full
#   queue, and flows to other hosts wait with them (it ran 10-20% slower).
# * Adaptive routing with 2 ms flowlets: it spreads a leaf's 16 cross-leaf QPs evenly over
#   its 2 uplinks, where ECMP's hash put up to twice as much on one as on the other.
#   Each QP's frames follow one another well within 2 ms while a message lasts, so a
#   message keeps its path and a new one takes the emptier uplink.
# * NICs that hold their QPs back at 512 KiB (4 ms at 1 Gb/s): a NIC as deep as the
#   switches held up to 5 MB of one host's READ responses ahead of its next READ request
#   (0.67 of the bound at 2:1, 0.62 at 1:1, where 512 KiB gave 0.76 and 0.73); much less
#   and the link idles between the engine's rounds, which take milliseconds on 2 cores
#   under 8 spinning ranks.
A_HOSTS=8 A_LEAVES=2 A_RATE_MBPS=1000
A_SPEC=leaf-spine:hosts=$A_HOSTS,leaves=$A_LEAVES,spines=2,rate_gbps=$((A_RATE_MBPS / 1000)),queue_kb=16384,nic_queue_kb=512,routing=adaptive,flowlet_us=2000
A_SIZE=1048576
A_ITERATIONS=${FABRIC_A_ITERATIONS:-50}
if want a; then
    section
    echo "(a) MPI_Alltoall of 1 MiB per pair among 8 hosts (a rank each), 2 leaves x 4 hosts, 2 spines, 1 Gb/s"
    printf '%-8s %-12s %-15s %-15s %-22s %s\n' oversub "bound (Mb/s)" "achieved (Mb/s)" "achieved/bound" \
        "uplinks' utilisation" "per MPI_Alltoall (ms)"
    for over in 2 1; do
        "$softhca" up --fabric "$A_SPEC,oversubscription=$over" >/dev/null
        "$softhca" sample --interval 0.05 --count 1200 --output "$work/a-$over.csv" &
        sampler=$!
        pids+=("$sampler")
        ranks=()
        for ((h = 0; h < A_HOSTS; h++)); do ranks+=("$P$h"); done
        mpi "${ranks[@]}" -- \
            "$A_ITERATIONS" alltoall "$A_SIZE" >"$work/a-$over.out" || true
        kill "$sampler" 2>/dev/null || true
        wait "$sampler" 2>/dev/null || true
        "$softhca" down >/dev/null
        us="" mbps=""
        read -r us mbps < <(awk '$1 == "alltoall" {print $4, $6}' "$work/a-$over.out") || true
        if [ -z "$mbps" ]; then
            echo "$over:1: MPI failed:" >&2
            tail -5 "$work/a-$over.out" >&2
            continue
        fi
        # The bound (Mb/s) from the spec (above).
        bound=$(awk -v n="$A_HOSTS" -v h=$((A_HOSTS / A_LEAVES)) -v l="$A_LEAVES" \
            -v r="$A_RATE_MBPS" -v o="$over" 'BEGIN {
            u = h * r / o; x = u * (n - 1) / (h * h * (l - 1)); if (x > r) x = r
            printf "%.0f", n * x }')
        # The uplinks' (leaf>spine) bytes over their capacity while the job moved data: from
        # the sample where they had carried 1 MB (past wire-up) to the one they stopped in.
        util=$(awk -F, '
            $2 ~ /^link:leaf[0-9]+>spine/ && $3 == "rate_bps" && !($2 in rate) { rate[$2] = $4; cap += $4 }
            $2 ~ /^link:leaf[0-9]+>spine/ && $3 == "bytes" {
                if (!($1 in sum)) time[n++] = $1
                sum[$1] += $4 }
            END {
                for (i = 0; i < n; i++) {
                    if (t0 == "" && sum[time[i]] > 1e6) { t0 = time[i]; b0 = sum[time[i]] }
                    if (i == 0 || sum[time[i]] > sum[time[i - 1]]) t1 = time[i]
                }
                if (t0 == "" || t1 <= t0) print "n/a"
                else printf "%.0f%%", (sum[t1] - b0) * 8 / (cap * (t1 - t0)) * 100 }' "$work/a-$over.csv")
        printf '%-8s %-12s %-15s %-15s %-22s %s\n' "$over:1" "$bound" "$((mbps * 8))" \
            "$(awk -v a="$((mbps * 8))" -v b="$bound" 'BEGIN {printf "%.2f", a / b}')" "$util" \
            "$(awk -v u="$us" 'BEGIN {printf "%.1f", u / 1000}')"
    done
fi

# (b) ECMP collisions: h0..h3 on leaf0 send to h4..h7 on leaf1 over 4 spines of 2 Gb/s,
# with ECN marking and DCQCN (as a RoCE fabric runs: flows that share a link share it).
if want b; then
    section
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
fi

# (c) incast: h0..h3 (leaf0) and h5..h7 (leaf1) into h9 (leaf1); the victim h4 (leaf0) ->
# h8 (leaf1) shares the spine's link to leaf1 with the incast's leaf0 senders, not h9's.
if want c; then
    section
    echo "(c) 7-to-1 incast into h9 beside a victim flow h4 -> h8, 2 Gb/s links, 256 KiB queues"
    printf '%-8s %-14s %-22s %-10s %-10s %-8s %-10s %s\n' mode "victim (Mb/s)" "incast (Mb/s, stalled)" drops marks CNPs pauses "peak queue leaf1>h9 (KiB)"
    BASE="leaf-spine:hosts=10,leaves=2,spines=1,rate_gbps=2,oversubscription=2.5,queue_kb=256"
    for mode in $c_modes; do
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
d = json.load(sys.stdin)
e = d["fabric"]["egress"]
print(sum(x["dropped"] for x in e), sum(x["marked"] for x in e),
      sum(x["counters"]["rx_cnps"] for x in d["devices"]), sum(x["pauses"] for x in e))')
        read -r drops marks cnps pauses <<<"$totals"
        printf '%-8s %-14s %-22s %-10s %-10s %-8s %-10s %s\n' "$mode" "$(rate "$work/c-$mode.8:4")" "$incast ($stalled of 7)" \
            "$drops" "$marks" "$cnps" "$pauses" "$(($(fabric_value "leaf1>h9" peak_queue_bytes) / 1024))"
        series "$work/c-$mode.csv" "spine0>leaf1" bytes "$work/c-$mode.victim_path.dat"
        series "$work/c-$mode.csv" "leaf1>h8" bytes "$work/c-$mode.victim.dat"
        series "$work/c-$mode.csv" "leaf1>h9" bytes "$work/c-$mode.incast.dat"
        series "$work/c-$mode.csv" "leaf1>h9" queue_bytes "$work/c-$mode.queue.dat"
        series "$work/c-$mode.csv" "spine0>leaf1" queue_bytes "$work/c-$mode.spine_queue.dat"
        "$softhca" down >/dev/null
    done
fi

# (e) Open MPI on the fabric beside the same on one link (the built-in wire).
if want e; then
    section
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
fi

# (d) A spine link failing under an MPI all-reduce: 4 ranks on two leaves, 1 MiB
# all-reduces; 3 s in, the uplink of leaf0 that carried more goes down. The traffic out of
# leaf0 over time shows the failure and the recovery (RC retransmitting what was lost once
# leaf0 has stopped using the dead link, at once, and the spine has routed around it).
if want d; then
    section
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
fi

# Plots, of the scenarios that ran.
want a && tools/plot-fabric.sh "$work/a-2.csv" "$out-alltoall.png" \
    "(a) Open MPI all-to-all, 1 MiB per pair, 8 hosts over a 2:1 leaf-spine (1 Gb/s host links)" >/dev/null &&
    plots+=("$out-alltoall.png")
if want b; then
    gnuplot <<EOF
set terminal pngcairo size 1100,700 noenhanced
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
EOF
    plots+=("$out-ecmp.png")
fi
if want c; then
    gnuplot <<EOF
set terminal pngcairo size 1100,1000 noenhanced
set output "$out-incast.png"
set multiplot layout $(wc -w <<<"$c_modes"),1 title "(c) 7-to-1 incast into h9 beside a victim h4->h8 (2 Gb/s links)"
set xlabel "seconds"
set ylabel "Mb/s"
set y2label "queue KiB"
set yrange [0:2200]
set y2range [0:*]
set ytics nomirror
set y2tics
set key outside right
do for [m in "$c_modes"] {
    set title m eq "lossy" ? "lossy, no DCQCN" : m eq "dcqcn" ? "DCQCN, ECN marking at the switches" : "PFC, no DCQCN"
    plot "$work/c-".m.".victim.dat" using 1:2 with lines lw 2 title "victim h4->h8 (Mb/s)", \
         "$work/c-".m.".incast.dat" using 1:2 with lines lw 2 title "incast into h9 (Mb/s)", \
         "$work/c-".m.".queue.dat" using 1:2 axes x1y2 with lines lc rgb "gray" title "queue leaf1->h9 (KiB, right)", \
         "$work/c-".m.".spine_queue.dat" using 1:2 axes x1y2 with lines lc rgb "black" dt 2 title "queue spine0->leaf1 (KiB, right)"
}
unset multiplot
EOF
    plots+=("$out-incast.png")
    if [[ " $c_modes " == *" pfc "* ]]; then
        tools/plot-fabric.sh "$work/c-pfc.csv" "$out-heat-pfc.png" \
            "(c) under PFC: every link's utilisation and the busiest queues" >/dev/null
        plots+=("$out-heat-pfc.png")
    fi
fi
if want d; then
    gnuplot <<EOF
set terminal pngcairo size 1100,450 noenhanced
set output "$out-failure.png"
set title "(d) leaf0-spine$dead fails at ${fail_at} s under 4 ranks' 1 MiB MPI_Allreduce: traffic out of leaf0"
set xlabel "seconds"
set ylabel "Mb/s"
set yrange [0:*]
set key outside right
set arrow from $fail_at, graph 0 to $fail_at, graph 1 nohead dt 2
plot "$work/d.rate.dat" using 1:2 with lines lw 2 title "leaf0 -> spines (Mb/s)"
EOF
    plots+=("$out-failure.png")
fi
echo
echo "plots: ${plots[*]:-none}"
