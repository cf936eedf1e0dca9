#!/usr/bin/env bash
# Two hosts on one machine: two network namespaces joined by a veth pair, each with a
# softhca engine on a DPDK af_packet port bound to its end of the pair.
#
#   tools/netns-pair.sh up NAME     # namespaces NAME-a and NAME-b, 198.18.2.1 and .2
#   tools/netns-pair.sh down NAME   # stop both engines, delete the namespaces
#
# Devices: in NAME-a the instance "<NAME>a" (device <NAME>a0 at 198.18.2.1), in NAME-b
# "<NAME>b" (device <NAME>b0 at 198.18.2.2). Each port also has an IPv6 address,
# 2001:2:0:2::1 and ::2 (GID index 2; 1 is the link-local one). Run programs on a host with
#   ip netns exec NAME-a softhca exec --prefix <NAME>a -- PROGRAM ...
# The kernel interface of each namespace carries the same address, so TCP side
# channels (perftest, the pingpongs) reach the other host over the same veth.
# NAME must be 1..10 characters of [a-z0-9]. SOFTHCA_UP_ARGS adds options to both
# engines' `softhca up` (e.g. --faults drop=0.01,seed=3); SOFTHCA_UP_ARGS_A and
# SOFTHCA_UP_ARGS_B add options to one engine only. SOFTHCA_PAIR_PORT=udp gives the
# engines kernel UDP socket ports (--port udp@...) on the veths' own addresses instead of
# af_packet ports (their GID table then has no link-local entry: the IPv6 one is index 1);
# SOFTHCA_PAIR_PORT=af_xdp gives them DPDK af_xdp ports (the kernel keeps ARP, ND, TCP).
# SOFTHCA_PAIR_MTU sets the veths' MTU (default 1500; 9000 for jumbo frames): the ports
# take it from the interface.
set -euo pipefail
cmd=${1:?up|down}
name=${2:?name}
[[ "$name" =~ ^[a-z0-9]{1,10}$ ]] || { echo "netns-pair: bad name '$name'" >&2; exit 2; }
softhca=${SOFTHCA:-$(cd "$(dirname "$0")/.." && pwd)/build/tools/softhca}
ns_a="$name-a" ns_b="$name-b"
veth_a="${name}va" veth_b="${name}vb"

case "$cmd" in
up)
    ip netns add "$ns_a"
    ip netns add "$ns_b"
    mtu=${SOFTHCA_PAIR_MTU:-1500}
    ip link add "$veth_a" netns "$ns_a" mtu "$mtu" type veth peer name "$veth_b" netns "$ns_b" \
        mtu "$mtu"
    ip -n "$ns_a" addr add 198.18.2.1/24 dev "$veth_a"
    ip -n "$ns_b" addr add 198.18.2.2/24 dev "$veth_b"
    ip -n "$ns_a" -6 addr add 2001:2:0:2::1/64 dev "$veth_a" nodad
    ip -n "$ns_b" -6 addr add 2001:2:0:2::2/64 dev "$veth_b" nodad
    for ns in "$ns_a" "$ns_b"; do
        ip -n "$ns" link set lo up
    done
    ip -n "$ns_a" link set "$veth_a" up
    ip -n "$ns_b" link set "$veth_b" up
    port_a="net_af_packet0,iface=$veth_a" port_b="net_af_packet0,iface=$veth_b"
    [ "${SOFTHCA_PAIR_PORT:-}" = udp ] && port_a=udp port_b=udp
    if [ "${SOFTHCA_PAIR_PORT:-}" = af_xdp ]; then
        port_a="net_af_xdp0,iface=$veth_a" port_b="net_af_xdp0,iface=$veth_b"
    fi
    # shellcheck disable=SC2086 # SOFTHCA_UP_ARGS is a list of options
    ip netns exec "$ns_a" "$softhca" up --prefix "${name}a" \
        --port "$port_a@198.18.2.1,2001:2:0:2::1" ${SOFTHCA_UP_ARGS:-} ${SOFTHCA_UP_ARGS_A:-} \
        >/dev/null
    # shellcheck disable=SC2086
    ip netns exec "$ns_b" "$softhca" up --prefix "${name}b" \
        --port "$port_b@198.18.2.2,2001:2:0:2::2" ${SOFTHCA_UP_ARGS:-} ${SOFTHCA_UP_ARGS_B:-} \
        >/dev/null
    # A veth has carrier only once both ends are up: wait until both ports are ACTIVE.
    for i in $(seq 50); do
        ip netns exec "$ns_a" "$softhca" status --prefix "${name}a" | grep -q "port 1: ACTIVE" &&
            ip netns exec "$ns_b" "$softhca" status --prefix "${name}b" | grep -q "port 1: ACTIVE" &&
            break
        sleep 0.1
    done
    echo "netns-pair: $ns_a (${name}a0, 198.18.2.1) <-> $ns_b (${name}b0, 198.18.2.2)"
    ;;
down)
    ip netns exec "$ns_a" "$softhca" down --prefix "${name}a" >/dev/null 2>&1 || true
    ip netns exec "$ns_b" "$softhca" down --prefix "${name}b" >/dev/null 2>&1 || true
    ip netns del "$ns_a" 2>/dev/null || true
    ip netns del "$ns_b" 2>/dev/null || true
    ;;
*)
    echo "usage: netns-pair.sh up|down NAME" >&2
    exit 2
    ;;
esac
