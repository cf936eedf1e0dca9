#!/usr/bin/env bash
# The built-in wire with a fault injector on both ports. First 1% drop plus 1%
# duplication and 1% reordering (and a little corruption), on an engine of two data-path
# threads (one per device: every packet crosses threads): ib_write_bw, ib_read_bw,
# ib_send_bw and ib_send_bw over an SRQ complete, the RC data-integrity and atomics tests
# pass with every byte checked (with heap buffers and with shared memory, the engine's
# two memory paths), and UC and UD deliver only whole messages. Then
# corruption alone: the ICRC rejects every corrupted frame and the same byte-checking
# tests pass, on an engine of one thread.
#   test_faults.sh RC_VERBS_TEST UD_SRQ_VERBS_TEST NCCL_SHAPED_TEST
source "$(dirname "$0")/lib.sh"
RC_VERBS_TEST=${1:?path to rc_verbs_test}
UD_SRQ_VERBS_TEST=${2:?path to ud_srq_verbs_test}
NCCL_SHAPED_TEST=${3:?path to nccl_shaped_test}
trap '"$SOFTHCA" down >/dev/null 2>&1 || true; rm -f "${server_out:-}"' EXIT
server_out=$(mktemp)

# One run of a perftest tool between the two devices, 500 messages of 16 KiB.
perftest_once() {
    local tool=$1 port rc=0
    shift
    port=$(free_port)
    "$SOFTHCA" exec -- timeout 120 "$tool" -d "${SOFTHCA_PREFIX}0" -x 0 -p "$port" -n 500 \
        -s 16384 "$@" >"$server_out" 2>&1 &
    local server=$!
    wait_listening "$port" || fail "$tool server did not start: $(cat "$server_out")"
    out=$("$SOFTHCA" exec -- timeout 120 "$tool" -d "${SOFTHCA_PREFIX}1" -x 0 -p "$port" \
        -n 500 -s 16384 "$@" 127.0.0.1 2>&1) || rc=$?
    wait "$server" || rc=$((rc ? rc : 100))
    PERFTEST_OUTPUT="$out $(cat "$server_out")"
    return "$rc"
}

run_perftest() {
    perftest_attempts perftest_once "$@" ||
        fail "$1 failed under faults: $out"$'\n'"server: $(cat "$server_out")"$'\n'"$("$SOFTHCA" status)"
    echo "$1 ${*:2} under faults: $(grep -E '^ +16384' <<<"$out")"
}

# Sums a counter over both ports of `softhca status`.
port_total() {
    "$SOFTHCA" status | grep -oE "$1 [0-9]+" | awk '{s += $2} END {print s + 0}'
}

"$SOFTHCA" up --threads 2 --faults drop=0.01,dup=0.01,reorder=0.01,corrupt=0.002,seed=11 \
    >/dev/null || fail "softhca up with faults failed"
"$SOFTHCA" status | head -1 | grep -q "datapath_threads 2" || fail "the engine runs one thread"
for tool in ib_write_bw ib_read_bw ib_send_bw; do
    run_perftest "$tool"
done
run_perftest ib_send_bw --use-srq # RC over an SRQ: every message (send_bw waits for each)
# On both memory paths: heap buffers (cross-memory attach, read ahead and written
# behind) and shared memory (mapped by the engine).
for memory in heap shared; do
    "$SOFTHCA" exec -- env SOFTHCA_PREFIX="$SOFTHCA_PREFIX" SOFTHCA_TEST_MEMORY=$memory \
        SOFTHCA_TEST_LOSSY=1 timeout 300 "$RC_VERBS_TEST" ||
        fail "RC data integrity under loss, duplication and reordering ($memory memory)"
done
out=$("$SOFTHCA" exec -- env SOFTHCA="$SOFTHCA" SOFTHCA_PREFIX="$SOFTHCA_PREFIX" timeout 300 \
    "$UD_SRQ_VERBS_TEST" "[faults]" 2>&1) ||
    fail "UC/UD delivered a partial message, or too few arrived: $out"
# NCCL's sequence of verbs (FIFO entries polled in memory, WRITE chains with immediate,
# the flush READ) on both memory paths, across the two threads, on the faulty wire.
"$SOFTHCA" exec -- env SOFTHCA_PREFIX="$SOFTHCA_PREFIX" timeout 300 "$NCCL_SHAPED_TEST" 40 ||
    fail "NCCL's sequence of verbs under faults"
grep "arrived whole" <<<"$out"
"$SOFTHCA" status
[ "$(port_total dropped)" -gt 0 ] || fail "no drops were injected"
[ "$(port_total reordered)" -gt 0 ] || fail "no reordering was injected"
# What the QPs went through, now all destroyed, stays in each device's hw_counters
# (summed over its QPs, alive and gone): the senders retransmitted, the receivers saw
# requests out of sequence and duplicates.
tree=$("$SOFTHCA" env | sed -n 's/^export SYSFS_PATH=//p')
hw_total() {
    local sum=0 dev
    for dev in "${SOFTHCA_PREFIX}0" "${SOFTHCA_PREFIX}1"; do
        sum=$((sum + $(cat "$tree/class/infiniband/$dev/ports/1/hw_counters/$1")))
    done
    echo "$sum"
}
wait_until '[ "$(hw_total retransmitted_pkts)" -gt 0 ]' 5 ||
    fail "hw_counters/retransmitted_pkts stayed 0 under loss"
for counter in out_of_seq_request duplicate_request; do
    [ "$(hw_total "$counter")" -gt 0 ] || fail "hw_counters/$counter stayed 0 under loss and duplication"
done
echo "hw_counters: retransmitted_pkts $(hw_total retransmitted_pkts)" \
    "out_of_seq_request $(hw_total out_of_seq_request) duplicate_request $(hw_total duplicate_request)"
"$SOFTHCA" down >/dev/null

"$SOFTHCA" up --threads 1 --faults corrupt=0.01,seed=5 >/dev/null ||
    fail "softhca up with corruption failed"
# A frame the ICRC rejects is a frame lost (SOFTHCA_TEST_LOSSY: a READ's responses may be
# lost after its responder failed on the next request, and the READ then flushes: seen
# once in a full run of the suite here).
for memory in heap shared; do
    "$SOFTHCA" exec -- env SOFTHCA_PREFIX="$SOFTHCA_PREFIX" SOFTHCA_TEST_MEMORY=$memory \
        SOFTHCA_TEST_LOSSY=1 timeout 300 "$RC_VERBS_TEST" "[integrity]" ||
        fail "a corrupted byte reached memory ($memory memory)"
done
corrupted=$(port_total corrupted)
rejected=$(port_total rx_bad_icrc)
echo "corrupted frames: $corrupted, rejected by the ICRC: $rejected"
[ "$corrupted" -gt 0 ] || fail "no corruption was injected"
# Every corrupted RoCE frame fails the ICRC, but for two kinds: an ARP frame damaged in
# its padding is not RoCE, and a flip in the BTH's byte 4 (FECN, BECN, reserved) passes,
# since the ICRC covers that byte as ones (A17.4.2); that byte is 1 in 40 to 60 of a
# short ACK's corruptible bytes, so allow one in 20.
arp=$(($(port_total arp_requests) + $(port_total arp_replies)))
[ "$rejected" -ge $((corrupted - arp - corrupted / 20)) ] && [ "$rejected" -le "$corrupted" ] ||
    fail "corrupted $corrupted frames but the ICRC rejected $rejected"
echo PASS
