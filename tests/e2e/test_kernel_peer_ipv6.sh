#!/usr/bin/env bash
# softhca against the Linux kernel's RDMA stack over IPv6 (kernel_peer.sh with KP_IPV6):
# both sides have an IPv6 address beside the IPv4 one; ibv_devinfo -v shows softhca's
# GID table (the IPv4-mapped GID, the link-local one, the IPv6 one, all RoCE v2); each
# side finds the other's MAC by Neighbor Discovery; ibv_rc_pingpong, ibv_ud_pingpong
# (an IPv6 address handle), ib_send_bw, ib_write_bw and ib_read_bw run over the IPv6
# GIDs with Linux and then softhca as the server, and rping, ucmatose and udaddy over the
# IPv6 addresses through rdma_cm. A capture of softhca's port shows the
# RoCE traffic went over IPv6 and passes the codec checks.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/kernel_peer.sh"
PCAP_CHECK=${1:?path to pcap_check}
subnet=${KP_SUBNET:-11}
capture=$(mktemp -d)
trap 'kp_down; rm -rf "$capture"' EXIT
KP_IPV6=1 kp_up "$SOFTHCA_PREFIX" "$subnet" --pcap "$capture/port"

gids=$(kp_on_softhca ibv_devinfo -v -d "$KP_DEV")
grep -q "GID\[  0\]:[[:space:]]*::ffff:$KP_SOFTHCA_ADDR, RoCE v2" <<<"$gids" ||
    fail "GID 0 is not the IPv4 one: $gids"
grep -q "GID\[  1\]:[[:space:]]*fe80::[0-9a-f:]*, RoCE v2" <<<"$gids" ||
    fail "GID 1 is not the link-local one: $gids"
[ "$KP_SOFTHCA_GID6" = 2 ] || fail "the IPv6 address is GID $KP_SOFTHCA_GID6, not 2: $gids"
# shellcheck disable=SC2034 # read by kp_exchange
KP_GUEST_GID=$KP_GUEST_GID6 KP_SOFTHCA_GID=$KP_SOFTHCA_GID6

exchange() {
    kp_tool "$@"
    local side=$1 tool=$2
    shift 2
    echo "$tool $* over IPv6 ($side server): $KP_RESULT"
}

for side in linux softhca; do
    exchange "$side" ibv_rc_pingpong -s 4096 -n 100
    exchange "$side" ibv_rc_pingpong -s 65536 -n 50
    exchange "$side" ibv_ud_pingpong -s 1024 -n 100
    exchange "$side" ib_send_bw -s 65536 -n 200
    exchange "$side" ib_write_bw -s 65536 -n 200
    exchange "$side" ib_read_bw -s 65536 -n 200
done

# rdma_cm over IPv6 addresses (the rdma_cm header's IP version 6, GIDs from the IPv6
# addresses), both ways.
for side in linux softhca; do
    KP_CM_IPV6=1 kp_exchange "$side" cm "rping -s -a @ADDR@ -V -C 20 -S 4000" \
        "rping -c -a @ADDR@ -V -C 20 -S 4000"
    echo "rping over IPv6 ($side server): 20 pings verified"
    KP_CM_IPV6=1 kp_exchange "$side" cm "ucmatose -b @ADDR@ -c 2 -C 10" "ucmatose -s @ADDR@ -c 2 -C 10"
    echo "ucmatose over IPv6 ($side server): $(tail -1 <<<"$KP_OUT")"
    KP_CM_IPV6=1 kp_exchange "$side" cm "udaddy -b @ADDR@ -c 2" "udaddy -s @ADDR@ -c 2"
    echo "udaddy over IPv6 ($side server): $(tail -1 <<<"$KP_OUT")"
done

# The guest knows softhca's IPv6 address by Neighbor Discovery, and softhca asked for its.
neigh=$(kp_guest 10 "ip -6 neigh show $KP_SOFTHCA_ADDR6")
grep -q "lladdr" <<<"$neigh" || fail "the guest has no neighbour entry for softhca: $neigh"
counters=$(kp_check_received)
echo "$counters"
grep -q "nd_solicitations [1-9]" <<<"$counters" || fail "softhca never solicited the guest"
grep -q "nd_advertisements [1-9]" <<<"$counters" || fail "softhca never answered a solicitation"
ip netns exec "$KP_NS" "$SOFTHCA" down --prefix "$KP_NS" >/dev/null # flushes the capture
"$PCAP_CHECK" --min-ipv6 2000 "$capture"/port-*.pcap || fail "softhca's IPv6 frames"
echo PASS
