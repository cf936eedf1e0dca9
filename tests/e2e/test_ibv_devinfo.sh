#!/usr/bin/env bash
# ibv_devinfo -v (ibverbs-utils) queries device, port and GID table successfully.
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
    grep -qE "vendor_id:\s+0x534843" <<<"$out" || fail "unexpected vendor id"
done
echo PASS
