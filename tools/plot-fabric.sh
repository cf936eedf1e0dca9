#!/usr/bin/env bash
# Draws a fabric's sample (softhca sample --output CSV, of an engine up with --fabric):
# every link direction's utilisation over time as a heat map (its bytes' rate over its
# rate), and the queues of the busiest ports (the highest peaks) over time.
#   tools/plot-fabric.sh CSV PLOT.png [TITLE]
# Needs gnuplot (gnuplot-nox).
set -euo pipefail
csv=${1:?sample CSV} plot=${2:?output PNG} title=${3:-fabric}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Utilisation per link and sample: the grid gnuplot draws ("with image"), one row per link
# (links in the order they first appear), and each link's name.
awk -F, -v dir="$work" '
    $2 ~ /^link:/ && $3 == "rate_bps" { rate[$2] = $4 }
    $2 ~ /^link:/ && $3 == "bytes" {
        if (!($2 in row)) { row[$2] = n++; name[row[$2]] = substr($2, 6) }
        if ($2 in last && $1 > when[$2] && rate[$2] > 0)
            printf "%s %d %.4f\n", $1, row[$2], ($4 - last[$2]) * 8 / ($1 - when[$2]) / rate[$2] > (dir "/heat.dat")
        last[$2] = $4; when[$2] = $1
    }
    $2 ~ /^link:/ && $3 == "queue_bytes" {
        printf "%s %.1f\n", $1, $4 / 1024 > (dir "/queue." substr($2, 6) ".dat")
        if ($4 > peak[$2]) peak[$2] = $4
    }
    END {
        for (i = 0; i < n; i++) printf "%d \"%s\"\n", i, name[i] > (dir "/names")
        for (l in peak) printf "%d %s\n", peak[l], substr(l, 6) > (dir "/peaks")
    }' "$csv"
[ -s "$work/heat.dat" ] || {
    echo "plot-fabric: no fabric links in $csv" >&2
    exit 1
}
links=$(wc -l <"$work/names")
ytics=$(awk '{printf "%s%s %s", (NR > 1 ? ", " : ""), $2, $1}' "$work/names")
busiest=$(sort -rn "$work/peaks" 2>/dev/null | head -4 | awk '{print $2}')
queues=""
for link in $busiest; do
    queues+="\"$work/queue.$link.dat\" using 1:2 with lines lw 2 title \"$link\", "
done
height=$((300 + links * 14))
gnuplot <<EOF
set terminal pngcairo size 1100,$((height + 350))
set output "$plot"
set multiplot
set size 1, $(awk -v h=$height -v t=$((height + 350)) 'BEGIN {printf "%.3f", h / t}')
set origin 0, $(awk -v t=$((height + 350)) 'BEGIN {printf "%.3f", 350 / t}')
set title "$title\nutilisation of each link direction (bytes' rate over the link's rate)"
set xlabel "seconds"
set ytics ($ytics) font ",8"
set yrange [-0.5:$links - 0.5]
set cbrange [0:1]
set palette defined (0 "white", 0.5 "orange", 1 "dark-red")
plot "$work/heat.dat" using 1:2:3 with points pt 5 ps 0.6 palette notitle
set size 1, $(awk -v t=$((height + 350)) 'BEGIN {printf "%.3f", 350 / t}')
set origin 0, 0
set title "queues of the busiest ports (KiB)"
unset ytics
set ytics
set yrange [0:*]
set key outside right
plot ${queues%, }
unset multiplot
EOF
echo "plot: $plot"
