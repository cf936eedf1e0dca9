#!/usr/bin/env bash
# `softhca down` removes everything `softhca up` created.
source "$(dirname "$0")/lib.sh"
run_dir="${SOFTHCA_RUN_ROOT:-/run/softhca}/$SOFTHCA_PREFIX"
driver="/etc/libibverbs.d/$SOFTHCA_PREFIX.driver"
nodes=("/dev/infiniband/${SOFTHCA_PREFIX}0_uverbs" "/dev/infiniband/${SOFTHCA_PREFIX}1_uverbs")
had_cdev_dir=0
[ -d /dev/infiniband ] && had_cdev_dir=1
trap '"$SOFTHCA" down >/dev/null 2>&1 || true' EXIT

"$SOFTHCA" up >/dev/null || fail "softhca up failed"
for p in "$run_dir/sysfs" "$run_dir/engine.sock" "$driver" "${nodes[@]}"; do
    [ -e "$p" ] || fail "up did not create $p"
done
pid=$(engine_pid)
"$SOFTHCA" down || fail "softhca down failed"
for p in "$run_dir" "$driver" "${nodes[@]}"; do
    [ ! -e "$p" ] || fail "down left $p behind"
done
if [ $had_cdev_dir -eq 0 ] && [ -d /dev/infiniband ] && [ -z "$(ls -A /dev/infiniband)" ]; then
    fail "down left the empty /dev/infiniband it created"
fi
! kill -0 "$pid" 2>/dev/null || fail "engine $pid still running after down"

# After an engine dies without cleaning up, down still removes its leftovers.
"$SOFTHCA" up >/dev/null || fail "second softhca up failed"
kill -9 "$(engine_pid)"
sleep 0.2
[ -e "$driver" ] || fail "expected leftovers after SIGKILL"
"$SOFTHCA" down || fail "softhca down after a crash failed"
for p in "$run_dir" "$driver" "${nodes[@]}"; do
    [ ! -e "$p" ] || fail "down after a crash left $p behind"
done
echo PASS
