#!/usr/bin/env bash
# What libsofthca-preload.so does for a program run with `softhca exec`, besides
# completion channels (the verbs tests cover those): the hard-coded sysfs paths NCCL and
# UCX open resolve into the device tree, paths of devices that are not ours are left
# alone, and RDMA netlink answers from the tree (libibverbs's discovery sees the tree's
# devices, not the host kernel's); without a tree the family is not there.
source "$(dirname "$0")/lib.sh"
dev="${SOFTHCA_PREFIX}0"
run() { "$SOFTHCA" exec -- "$@"; }

types=$(run cat "/sys/class/infiniband/$dev/ports/1/gid_attrs/types/0") ||
    fail "cannot read the GID type at the hard-coded path"
[ "$types" = "RoCE v2" ] || fail "GID type read as '$types'"
[ "$(run cat "/sys/class/infiniband/$dev/node_type")" = "1: CA" ] || fail "node_type"
run ls /sys/class/infiniband | grep -qx "$dev" || fail "$dev not listed in /sys/class/infiniband"
run ls /sys/class/infiniband_verbs | grep -qx "${dev}_uverbs" ||
    fail "${dev}_uverbs not listed in /sys/class/infiniband_verbs"
run test -d "/sys/class/infiniband/$dev/ports/1" || fail "stat of a port directory"
run python3 -c "import os,sys; sys.exit(not os.path.exists('/sys/class/infiniband/$dev/node_guid'))" ||
    fail "python os.path.exists"
# Each device has a `device` link as NCCL reads it: realpath() resolves, to a path of its
# own that NCCL's port and VF merging ('0' over the last and the third and fourth from last
# characters) leaves unchanged, whose subsystem is not PCI (NCCL then puts the NIC under
# the CPU instead of warning on every start).
paths=()
for d in 0 1; do
    real=$(run realpath "/sys/class/infiniband/${SOFTHCA_PREFIX}$d/device") ||
        fail "no device link for ${SOFTHCA_PREFIX}$d"
    [[ $real == *_0000 ]] || fail "device path $real would be changed by NCCL's merging"
    subsystem=$(run realpath "$real/subsystem") || fail "no subsystem for $real"
    [[ $subsystem != *pci ]] || fail "a virtual device with subsystem $subsystem"
    paths+=("$real")
done
[ "${paths[0]}" != "${paths[1]}" ] || fail "both devices have the device path ${paths[0]}"
echo "device links: ${paths[*]}"
# A device that is not in the tree: the path is the kernel's, untouched.
if run test -e /sys/class/infiniband/softhca_no_such_dev/node_type; then
    fail "a device outside the tree resolved"
fi
# Without the preload (SYSFS_PATH alone) the hard-coded path is the kernel's.
if SYSFS_PATH=$("$SOFTHCA" env | sed -n 's/^export SYSFS_PATH=//p') \
    test -e "/sys/class/infiniband/$dev/node_type"; then
    fail "the path resolved without the preload library"
fi
# RDMA netlink (NETLINK_RDMA = 20): a device dump names the tree's devices, and only them.
tree=$("$SOFTHCA" env | sed -n 's/^export SYSFS_PATH=//p')
want=$(ls "$tree/class/infiniband" | sort | tr '\n' ' ')
got=$(run python3 - <<'PY'
import socket, struct
s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 20)
s.bind((0, 0))
s.send(struct.pack("=IHHII", 16, (5 << 10) + 1, 0x301, 1, 0))
names, done = [], False
while not done:
    data = s.recv(65536)
    at = 0
    while at + 16 <= len(data):
        length, kind = struct.unpack_from("=IH", data, at)
        done |= kind == 3
        attr = at + 16
        while kind != 3 and attr + 4 <= at + length:
            alen, atype = struct.unpack_from("=HH", data, attr)
            if atype == 2:  # RDMA_NLDEV_ATTR_DEV_NAME
                names.append(data[attr + 4:attr + alen].rstrip(b"\0").decode())
            attr += (alen + 3) & ~3
        at += (length + 3) & ~3
print(" ".join(sorted(names)) + " ")
PY
) || fail "RDMA netlink device dump failed"
[ "$got" = "$want" ] || fail "RDMA netlink lists '$got', the tree has '$want'"
# Without a tree (the preload loaded, SYSFS_PATH not softhca's) it is not there.
preload=$("$SOFTHCA" env | sed -n 's/^export LD_PRELOAD=\([^$:]*\).*/\1/p')
LD_PRELOAD=$preload SYSFS_PATH=/sys python3 - <<'PY' || fail "NETLINK_RDMA socket was not refused without a tree"
import errno, socket, sys
try:
    socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 20)
except OSError as e:
    sys.exit(0 if e.errno == errno.EPROTONOSUPPORT else 1)
sys.exit(1)
PY
# Other netlink families still work (route netlink for ip, UCX's interface lookups).
run python3 -c "import socket; socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0).close()" ||
    fail "route netlink refused"
echo PASS
