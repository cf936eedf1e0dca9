#!/usr/bin/env bash
# Two hosts on one machine (tools/netns-pair.sh): two namespaces joined by a veth pair,
# an engine in each on a DPDK af_packet port. ibv_rc_pingpong at every size, the eight
# perftest RC tools, the UC/UD/SRQ/XRC pingpongs and perftest over UD, UC, XRC and an SRQ,
# ibv_rc_pingpong -e and ib_send_lat -e (completion channels), and UCX's ucx_perftest
# over rc_verbs and ud_verbs, rping and ib_send_bw -R through librdmacm run between them,
# over a real kernel link; ibv_rc_pingpong, ibv_ud_pingpong, ib_send_bw and ib_read_bw
# also over the ports' IPv6 GIDs, and rping, ucmatose and udaddy over IPv6 addresses;
# then again with 1%
# loss, duplication and reordering injected at both engines' ports: ib_write_bw,
# ib_read_bw and ib_send_bw complete and ibv_rc_pingpong's data checks (-c) pass, with
# messages up to 64 KiB.
source "$(dirname "$0")/lib.sh"
here=$(cd "$(dirname "$0")" && pwd)
mcast_peer=${1:?path to mcast_peer}
pair=${SOFTHCA_PREFIX}
export SOFTHCA
trap '"$here/../../tools/netns-pair.sh" down "$pair" >/dev/null 2>&1 || true' EXIT
"$here/../../tools/netns-pair.sh" down "$pair" >/dev/null 2>&1 || true
"$here/../../tools/netns-pair.sh" up "$pair" || fail "netns-pair up failed"

pair_hosts "$pair"

"$here/test_pingpong.sh" ibv_rc_pingpong 1 4096 65536 1048576 ||
    fail "ibv_rc_pingpong across namespaces"
# The bandwidth tools at every size over the kernel link; the others (and the repeats
# below) at one packet, a few and many: each size costs perftest a fixed calibration
# (test_perftest.sh).
few_sizes="2 4096 1048576"
for tool in ib_send_bw ib_write_bw ib_read_bw ib_atomic_bw; do
    "$here/test_perftest.sh" "$tool" | tail -3 || fail "$tool across namespaces"
done
for tool in ib_send_lat ib_write_lat ib_read_lat ib_atomic_lat; do
    PERFTEST_SIZES=$few_sizes "$here/test_perftest.sh" "$tool" | tail -3 ||
        fail "$tool across namespaces"
done
"$here/test_pingpong.sh" ibv_uc_pingpong 4096 65536 || fail "ibv_uc_pingpong across namespaces"
# The veth MTU is 1500, so the path MTU is 1024: UD messages go up to that.
"$here/test_pingpong.sh" ibv_ud_pingpong 512 1024 || fail "ibv_ud_pingpong across namespaces"
"$here/test_pingpong.sh" ibv_srq_pingpong 4096 65536 || fail "ibv_srq_pingpong across namespaces"
"$here/test_pingpong.sh" ibv_xsrq_pingpong 4096 65536 ||
    fail "ibv_xsrq_pingpong across namespaces"
"$here/test_multicast.sh" "$mcast_peer" || fail "UD multicast across namespaces"
for run in "ib_send_bw -c UD" "ib_send_lat -c UD" "ib_send_bw -c UC" "ib_write_bw -c UC" \
    "ib_send_lat -c UC" "ib_send_bw --use-srq" "ib_send_bw -c XRC" "ib_write_bw -c XRC"; do
    # UD messages fit the path MTU (1024).
    sizes=$few_sizes
    [[ $run == *UD ]] && sizes="2 1024"
    # shellcheck disable=SC2086 # the tool and its arguments
    PERFTEST_SIZES=$sizes "$here/test_perftest.sh" $run | tail -2 || fail "$run across namespaces"
done
# Completion channels (the tools sleep in ibv_get_cq_event) and UCX over RC and UD.
"$here/test_pingpong.sh" ibv_rc_pingpong 4096 65536 -- -e ||
    fail "ibv_rc_pingpong -e across namespaces"
PERFTEST_SIZES=$few_sizes "$here/test_perftest.sh" ib_send_lat -e | tail -2 ||
    fail "ib_send_lat -e across namespaces"
for run in "rc_verbs tag_lat 8" "rc_verbs tag_bw 1048576" "ud_verbs tag_lat 8" \
    "ud_verbs tag_bw 65536"; do
    # shellcheck disable=SC2086
    "$here/test_ucx_perftest.sh" $run 200 | tail -2 || fail "ucx_perftest $run across namespaces"
done
# librdmacm across the kernel link: rping with every ping verified, and perftest -R.
rping_out=$(mktemp)
on_server timeout 60 rping -s -a "$SERVER_ADDR" -V -C 50 -S 4000 >"$rping_out" 2>&1 &
rping_server=$!
wait_until "ip netns exec '$SERVER_NS' '$SOFTHCA' status --prefix '$SERVER_PREFIX' | grep -q 'listening [1-9]'" 20 ||
    fail "rping server did not listen: $(cat "$rping_out")"
on_client timeout 60 rping -c -a "$SERVER_ADDR" -V -C 50 -S 4000 || fail "rping across namespaces"
wait "$rping_server" || fail "rping server across namespaces: $(cat "$rping_out")"
rm -f "$rping_out"
echo "rping: 50 pings verified across namespaces"
server_listeners() {
    ip netns exec "$SERVER_NS" "$SOFTHCA" status --prefix "$SERVER_PREFIX" | grep -q "listening $1"
}
# One ib_send_bw -R; a server whose client failed is stopped (it would wait for it). Each
# try listens on a port of its own: a client of the next try must not reach the listener
# of a server still going away.
send_bw_cm_once() {
    local port=$((19000 + RANDOM % 1000))
    on_server timeout 60 ib_send_bw -R -d "$SERVER_DEV" -p "$port" -n 200 >/dev/null 2>&1 &
    local server=$! rc=0
    wait_until "server_listeners '[1-9]'" 20 || fail "ib_send_bw -R server did not listen"
    PERFTEST_OUTPUT=$(on_client timeout 60 ib_send_bw -R -d "$CLIENT_DEV" -p "$port" -n 200 \
        "$SERVER_ADDR" 2>&1) || rc=$?
    if [ "$rc" -ne 0 ]; then
        kill "$server" 2>/dev/null || true
        wait "$server" 2>/dev/null || true
        wait_until "server_listeners 0" 10 || true
        return "$rc"
    fi
    wait "$server" || return 100
}
perftest_attempts send_bw_cm_once || fail "ib_send_bw -R across namespaces: $PERFTEST_OUTPUT"
tail -2 <<<"$PERFTEST_OUTPUT"

# Over IPv6: the ports' IPv6 GIDs (index 2), each engine finding the other's MAC by
# Neighbor Discovery.
GID_INDEX=2 "$here/test_pingpong.sh" ibv_rc_pingpong 4096 65536 ||
    fail "ibv_rc_pingpong over IPv6 across namespaces"
GID_INDEX=2 "$here/test_pingpong.sh" ibv_ud_pingpong 1024 ||
    fail "ibv_ud_pingpong over IPv6 across namespaces"
for tool in ib_send_bw ib_read_bw; do
    GID_INDEX=2 PERFTEST_SIZES=$few_sizes "$here/test_perftest.sh" "$tool" | tail -2 ||
        fail "$tool over IPv6 across namespaces"
done
# rdma_cm over the IPv6 addresses: rping (every ping verified), ucmatose and udaddy.
rping_out=$(mktemp)
on_server timeout 60 rping -s -a 2001:2:0:2::1 -V -C 20 -S 4000 >"$rping_out" 2>&1 &
rping_server=$!
wait_until "ip netns exec '$SERVER_NS' '$SOFTHCA' status --prefix '$SERVER_PREFIX' | grep -q 'listening [1-9]'" 20 ||
    fail "rping server on IPv6 did not listen: $(cat "$rping_out")"
on_client timeout 60 rping -c -a 2001:2:0:2::1 -V -C 20 -S 4000 >/dev/null ||
    fail "rping over IPv6 across namespaces"
wait "$rping_server" || fail "rping server over IPv6: $(cat "$rping_out")"
rm -f "$rping_out"
for tool in ucmatose udaddy; do
    on_server timeout 60 "$tool" -b 2001:2:0:2::1 -C 5 >/dev/null 2>&1 &
    cm_server=$!
    wait_until "ip netns exec '$SERVER_NS' '$SOFTHCA' status --prefix '$SERVER_PREFIX' | grep -q 'listening [1-9]'" 20 ||
        fail "$tool server on IPv6 did not listen"
    on_client timeout 60 "$tool" -s 2001:2:0:2::1 -C 5 >/dev/null || fail "$tool over IPv6"
    wait "$cm_server" || fail "$tool server over IPv6"
done
echo "rping, ucmatose, udaddy over IPv6 across namespaces"
status=$(ip netns exec "$SERVER_NS" "$SOFTHCA" status --prefix "$SERVER_PREFIX")
head -4 <<<"$status"
grep -q "nd_advertisements [1-9]" <<<"$status" || fail "no Neighbor Advertisement sent"

"$here/../../tools/netns-pair.sh" down "$pair"
SOFTHCA_UP_ARGS="--faults drop=0.01,dup=0.01,reorder=0.01,seed=17" \
    "$here/../../tools/netns-pair.sh" up "$pair" || fail "netns-pair up with faults failed"
# Under faults RC over an SRQ still delivers every message: ibv_srq_pingpong checks each
# byte (-c), and perftest's send_bw waits for each one; UC writes complete. (Tools that
# wait for every UC/UD message cannot finish under loss; test_faults.sh checks that UC
# and UD lose whole messages only.)
PINGPONG_LOSSY=1 "$here/test_pingpong.sh" ibv_srq_pingpong 4096 65536 ||
    fail "ibv_srq_pingpong -c across namespaces under faults"
for run in "ib_send_bw --use-srq" "ib_write_bw -c UC"; do
    # shellcheck disable=SC2086
    PERFTEST_SIZE=65536 "$here/test_perftest.sh" $run | tail -2 ||
        fail "$run across namespaces under faults"
done
# Under faults: messages up to 64 KiB (see the stop note of issue 3: a 1 MiB message of
# 1024 packets over af_packet once ran out of retries here).
PINGPONG_LOSSY=1 "$here/test_pingpong.sh" ibv_rc_pingpong 1 4096 65536 ||
    fail "ibv_rc_pingpong -c across namespaces under faults"
for tool in ib_write_bw ib_read_bw ib_send_bw; do
    PERFTEST_SIZE=65536 "$here/test_perftest.sh" "$tool" | tail -2 ||
        fail "$tool across namespaces under faults"
done
GID_INDEX=2 PERFTEST_SIZE=65536 "$here/test_perftest.sh" ib_write_bw | tail -2 ||
    fail "ib_write_bw over IPv6 across namespaces under faults"
ip netns exec "$SERVER_NS" "$SOFTHCA" status --prefix "$SERVER_PREFIX" | grep -E "faults|counters"
echo PASS
