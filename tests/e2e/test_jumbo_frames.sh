#!/usr/bin/env bash
# Jumbo frames between two hosts (tools/netns-pair.sh with a 9000-byte veth), for each
# port kind that sits on a kernel interface: af_packet and the kernel UDP socket port.
# The ports take the interface's MTU (status: mtu 9000, active_mtu 4096, as a RoCE HCA on
# a 9000-byte netdev), and traffic at path MTU 4096 arrives whole: ibv_rc_pingpong with
# its data check up to 1 MiB at -m 4096, ibv_ud_pingpong with 4096-byte messages (a UD
# message fills one 4 KiB packet), perftest's write, read and send at one packet, two and
# 2048 of them (8 MiB; every size on the shared engine: test_perftest.sh). Then
# `--mtu 1500` below the interface's MTU wins (active_mtu 1024), and a veth of MTU 4000
# gives path MTU 2048.
source "$(dirname "$0")/lib.sh"
here=$(cd "$(dirname "$0")" && pwd)
pair=${SOFTHCA_PREFIX}
trap 'pair_down "$pair"' EXIT
pair_hosts "$pair"

# up KIND MTU [softhca up options]: a fresh pair; both ports' status lines in $ports.
up() {
    local kind=$1 mtu=$2
    shift 2
    SOFTHCA_PAIR_PORT=$kind SOFTHCA_PAIR_MTU=$mtu SOFTHCA_UP_ARGS="$*" pair_up "$pair"
    ports="$(ip netns exec "$SERVER_NS" "$SOFTHCA" status --prefix "$SERVER_PREFIX" | grep "port 1")
$(ip netns exec "$CLIENT_NS" "$SOFTHCA" status --prefix "$CLIENT_PREFIX" | grep "port 1")"
}
# expect_mtu MTU ACTIVE: both ports say so.
expect_mtu() {
    [ "$(grep -cE "ACTIVE .* mtu $1 active_mtu $2 " <<<"$ports")" = 2 ] ||
        fail "expected mtu $1 active_mtu $2 on both ports: $ports"
}

for kind in af_packet udp; do
    up "$kind" 9000
    expect_mtu 9000 4096
    "$here/test_pingpong.sh" ibv_rc_pingpong 4096 65536 1048576 -- -m 4096 ||
        fail "ibv_rc_pingpong at path MTU 4096 over $kind"
    "$here/test_pingpong.sh" ibv_ud_pingpong 4096 || fail "ibv_ud_pingpong 4096 B over $kind"
    for tool in ib_write_bw ib_read_bw ib_send_bw; do
        out=$(PERFTEST_SIZES="2 4096 8192 8388608" "$here/test_perftest.sh" "$tool" -m 4096) ||
            fail "$tool over $kind at 9000: $out"
        grep -q "^ 8388608 " <<<"$out" || fail "$tool over $kind: no 8 MiB row: $out"
    done
    echo "$kind: 9000-byte veth, path MTU 4096: pingpongs and perftest passed"
    up "$kind" 9000 --mtu 1500
    expect_mtu 1500 1024
    up "$kind" 4000
    expect_mtu 4000 2048
    "$here/test_pingpong.sh" ibv_rc_pingpong 65536 -- -m 2048 ||
        fail "ibv_rc_pingpong at path MTU 2048 over $kind"
done
echo PASS
