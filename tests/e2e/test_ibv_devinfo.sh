#!/usr/bin/env bash
# ibv_devinfo -v (ibverbs-utils) queries device, port and GID table successfully: on the
# built-in wire each port has two GIDs, both RoCE v2: the IPv4-mapped one and the
# link-local IPv6 one built from the port's MAC (fe80::, EUI-64).
source "$(dirname "$0")/lib.sh"
for n in 0 1; do
    dev="${SOFTHCA_PREFIX}$n"
    out=$("$SOFTHCA" exec -- ibv_devinfo -v -d "$dev") || fail "ibv_devinfo -v -d $dev exited $?"
    echo "$out"
    grep -q "hca_id:\s*$dev" <<<"$out" || fail "no hca_id $dev"
    grep -qE "state:\s+PORT_ACTIVE \(4\)" <<<"$out" || fail "port not ACTIVE"
    grep -qE "link_layer:\s+Ethernet" <<<"$out" || fail "link layer not Ethernet"
    grep -qE "active_mtu:\s+(1024|2048|4096) \([345]\)" <<<"$out" || fail "no active_mtu"
    grep -qE "GID\[\s*0\]:\s+::ffff:198\.18\.0\.$((n + 1)), RoCE v2" <<<"$out" ||
        fail "no RoCE v2 GID for 198.18.0.$((n + 1))"
    grep -qE "gid_tbl_len:\s+2$" <<<"$out" || fail "gid_tbl_len is not 2"
    mac=$("$SOFTHCA" status | grep "device $dev " | sed -n 's/.* mac \([0-9a-f:]*\) .*/\1/p')
    IFS=: read -r m0 m1 m2 m3 m4 m5 <<<"$mac"
    lladdr=$(printf 'fe80::%x:%x:%x:%x' $((((0x$m0 ^ 2) << 8) | 0x$m1)) $(((0x$m2 << 8) | 0xff)) \
        $(((0xfe << 8) | 0x$m3)) $(((0x$m4 << 8) | 0x$m5)))
    grep -qE "GID\[\s*1\]:\s+$lladdr, RoCE v2" <<<"$out" ||
        fail "GID 1 is not the link-local $lladdr from MAC $mac"
    grep -qE "vendor_id:\s+0x534843" <<<"$out" || fail "unexpected vendor id"
done
echo PASS
