#!/usr/bin/env bash
# A named DPDK port instead of the built-in wire: an engine inside a network namespace
# of its own on an af_packet port bound to one end of a veth pair (198.18.1.0/24). The
# device shows the port's address as its RoCE v2 GID and the veth as its netdev, and
# frames the kernel sends on the other end reach the engine's port; `--mtu 1500` works.
source "$(dirname "$0")/lib.sh"
ns="shns$$"
trap 'ip netns exec "$ns" "$SOFTHCA" down >/dev/null 2>&1 || true; ip netns del "$ns" 2>/dev/null || true' EXIT
ip netns add "$ns"
ip -n "$ns" link add shv0 type veth peer name shv1
ip -n "$ns" link set shv0 up
ip -n "$ns" link set shv1 up
ip -n "$ns" addr add 198.18.1.2/24 dev shv1
in_ns() { ip netns exec "$ns" "$@"; }

in_ns "$SOFTHCA" up --port "net_af_packet0,iface=shv0@198.18.1.1" || fail "softhca up failed"
dev="${SOFTHCA_PREFIX}0"
out=$(in_ns "$SOFTHCA" exec -- ibv_devinfo -v -d "$dev") || fail "ibv_devinfo failed"
grep -qE "state:\s+PORT_ACTIVE" <<<"$out" || fail "port not ACTIVE"
grep -qE "active_mtu:\s+1024 \(3\)" <<<"$out" || fail "active_mtu does not follow the veth MTU 1500"
grep -qE "GID\[\s*0\]:\s+::ffff:198\.18\.1\.1, RoCE v2" <<<"$out" || fail "no GID for 198.18.1.1"

ifindex=$(in_ns cat /sys/class/net/shv0/ifindex)
ndev=$(in_ns "$SOFTHCA" exec -- /usr/bin/python3 -c \
    "import pyverbs.device as d; print(d.Context(name='$dev').query_gid_ex(1, 0).ndev_ifindex)")
[ "$ndev" = "$ifindex" ] || fail "GID ndev ifindex $ndev, expected shv0's $ifindex"

# The kernel on shv1 resolves 198.18.1.1 with ARP broadcasts: they must reach the port.
in_ns bash -c 'echo probe > /dev/udp/198.18.1.1/4791' || true
wait_until "in_ns '$SOFTHCA' status | grep -qE 'rx_packets [1-9]'" 10 ||
    fail "no frames reached the af_packet port: $(in_ns "$SOFTHCA" status)"
in_ns "$SOFTHCA" status

# --mtu 1500 on an af_packet port: the PMD's ring frames need more than the MTU's frame,
# and the mbufs are sized for what the PMD needs, not only for the MTU.
in_ns "$SOFTHCA" down >/dev/null
out=$(in_ns "$SOFTHCA" up --port "net_af_packet0,iface=shv0@198.18.1.1" --mtu 1500 2>&1) ||
    fail "softhca up --mtu 1500 on af_packet failed: $out"
grep -qE "ACTIVE .* mtu 1500 active_mtu 1024" <<<"$out" || fail "--mtu 1500: $out"
echo PASS
