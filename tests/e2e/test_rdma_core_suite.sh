#!/usr/bin/env bash
# rdma-core's own test suite (Debian's python3-pyverbs ships it, gzipped, under
# /usr/share/doc/rdma-core/tests) against a softhca device, run as its README says:
# run_tests.py --dev DEV, with Debian's /usr/bin/python3. Fails on any failure or error;
# prints the counts (the README lists the skips and why).
#
# With no argument the device is on the built-in wire. With `netdev` it is an af_packet
# port on a veth in a namespace of its own (tools/netns-pair.sh), so the device has a
# kernel interface (/sys/class/infiniband/DEV/device/net/) with an address, and the
# tests that need one run: rdma_cm over it, and they must pass, not skip.
source "$(dirname "$0")/lib.sh"
here=$(cd "$(dirname "$0")" && pwd)
mode=${1:-wire}
suite=/usr/share/doc/rdma-core/tests
[ -f "$suite/run_tests.py" ] || fail "rdma-core's tests are not installed (python3-pyverbs)"
work=$(mktemp -d)
pair=$SOFTHCA_PREFIX
if [ "$mode" = netdev ]; then
    export SOFTHCA
    trap '"$here/../../tools/netns-pair.sh" down "$pair" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
    "$here/../../tools/netns-pair.sh" down "$pair" >/dev/null 2>&1 || true
    "$here/../../tools/netns-pair.sh" up "$pair" >/dev/null || fail "netns-pair up failed"
    prefix="${pair}a"
    run=(ip netns exec "$pair-a" "$SOFTHCA" exec --prefix "$prefix" --)
    [ "$("${run[@]}" ls "/sys/class/infiniband/${prefix}0/device/net/")" = "${pair}va" ] ||
        fail "the device does not name its interface in device/net"
else
    trap '"$SOFTHCA" down >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
    "$SOFTHCA" up >/dev/null || fail "softhca up failed"
    prefix=$SOFTHCA_PREFIX
    run=("$SOFTHCA" exec --)
fi
cp -r "$suite" "$work/tests"
gunzip "$work"/tests/*.gz
log="$work/run.log"
rc=0
(cd "$work/tests" && "${run[@]}" timeout 600 /usr/bin/python3 run_tests.py \
    --dev "${prefix}0" -v) >"$log" 2>&1 || rc=$?
summary=$(grep -E '^(Ran [0-9]+ tests|OK|FAILED)' "$log" | tr '\n' ' ')
# From unittest's own summary (a test's "ok" may follow its docstring on another line).
read -r ran skipped unsuccessful < <(awk '
    /^Ran [0-9]+ test/ { ran = $2 }
    /^(OK|FAILED) \(/ {
        while (match($0, /(skipped|failures|errors)=[0-9]+/)) {
            split(substr($0, RSTART, RLENGTH), kv, "=")
            if (kv[1] == "skipped") skipped = kv[2]; else bad += kv[2]
            $0 = substr($0, RSTART + RLENGTH)
        }
    }
    END { print ran + 0, skipped + 0, bad + 0 }' "$log")
passed=$((ran - skipped - unsuccessful))
echo "rdma-core tests ($mode): $summary($passed passed, $skipped skipped)"
if [ "$rc" -ne 0 ]; then
    grep -E '\.\.\. (FAIL|ERROR)$' "$log" >&2 || true
    sed -n '/^=====/,$p' "$log" | head -80 >&2
    fail "rdma-core's test suite failed"
fi
if [ "$mode" = netdev ]; then
    # The tests that need the device's interface ran and passed.
    for t in test_rdmacm_sync_traffic test_rdmacm_async_traffic test_rdmacm_async_read \
        test_rdmacm_async_write test_rdmacm_async_udp_traffic \
        test_rdmacm_async_multicast_traffic test_rdmacm_async_reject_traffic; do
        grep -qE "^$t .*\.\.\. ok$" "$log" || fail "$t did not pass: $(grep -E "^$t " "$log")"
    done
    grep -q "doesn't have net interface" "$log" && fail "a test found no net interface"
fi
echo "rdma-core's test suite ($mode): no failure, no error"
