#!/usr/bin/env bash
# An idle engine uses under 2% of one core over 10 seconds.
source "$(dirname "$0")/lib.sh"
trap '"$SOFTHCA" down >/dev/null 2>&1 || true' EXIT
"$SOFTHCA" up >/dev/null || fail "softhca up failed"
pid=$(engine_pid)
ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
hz=$(getconf CLK_TCK)
sleep 1 # let start-up settle
before=$(ticks)
sleep 10
after=$(ticks)
used=$((after - before))
pct=$(awk -v t="$used" -v hz="$hz" 'BEGIN {printf "%.2f", 100 * t / hz / 10}')
echo "idle engine: $used ticks of $((10 * hz)) in 10 s = ${pct}% of one core"
awk -v p="$pct" 'BEGIN {exit !(p < 2.0)}' || fail "idle engine used ${pct}% of a core"
echo PASS
