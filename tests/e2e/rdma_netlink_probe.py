"""Bad input on the RDMA netlink socket softhca's preload answers (run under softhca exec):
requests the kernel does not know or softhca does not offer, link adds and deletes and
QP counter sets, binds, unbinds and lookups the kernel refuses (checked before the engine
is asked, so none changes a counter), truncated and unpadded messages and
messages that are not requests each get the kernel's answer; 400 requests
in one datagram get all their 800 answers though they are more than the socket holds;
the socket still answers a device dump afterwards; and a descriptor number reused behind
the library's back (dup2) is a plain socket again. Prints what it saw; exits 1 on a
wrong answer."""
import errno
import os
import socket
import struct
import sys

NETLINK_RDMA = 20
NLM_F_REQUEST, NLM_F_ACK, NLM_F_DUMP = 0x1, 0x4, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
RDMA_NL_NLDEV = 5
EOPNOTSUPP, EINVAL = 95, 22


def nl_type(client, op):
    return (client << 10) + op


def message(kind, flags, seq, payload=b""):
    return struct.pack("=IHHII", 16 + len(payload), kind, flags, seq, 0) + payload


def replies(sock):
    """Every message the socket has for us now (one datagram each)."""
    out = []
    sock.settimeout(0.5)
    try:
        while True:
            data = sock.recv(65536)
            at = 0
            while at + 16 <= len(data):
                length, kind, flags, seq, pid = struct.unpack_from("=IHHII", data, at)
                out.append((kind, flags, seq, data[at + 16:at + length]))
                at += (length + 3) & ~3
    except socket.timeout:
        pass
    return out


def fail(what):
    print("FAIL:", what)
    sys.exit(1)


sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_RDMA)
sock.bind((0, 0))
pid, groups = sock.getsockname()
print("bound, port id", pid)


def expect_error(got, code, what):
    if len(got) != 1 or got[0][0] != NLMSG_ERROR or struct.unpack_from("=i", got[0][3])[0] != -code:
        fail("%s was not answered %s: %r" % (what, errno.errorcode[code], got))
    print("%s: %s" % (what, errno.errorcode[code]))


# An operation nldev does not have, and one softhca does not offer (setting a device).
sock.send(message(nl_type(RDMA_NL_NLDEV, 99), NLM_F_REQUEST | NLM_F_ACK, 1))
expect_error(replies(sock), EINVAL, "an unknown operation")
sock.send(message(nl_type(RDMA_NL_NLDEV, 2), NLM_F_REQUEST | NLM_F_ACK, 1))  # SET
expect_error(replies(sock), EOPNOTSUPP, "rdma dev set")


def strz(kind, text):
    value = text.encode() + b"\0"
    attr = struct.pack("=HH", 4 + len(value), kind) + value
    return attr + b"\0" * (-len(attr) % 4)


# rdma link add NAME type TYPE netdev IF (NEWLINK, op 3: DEV_NAME 2, LINK_TYPE 65,
# NDEV_NAME 51) as the kernel refuses it, and rdma link delete (DELLINK, op 4) of an
# index no device has: none of them reaches the engine.
def link_add(name, kind, netdev):
    attrs = b""
    if name is not None:
        attrs += strz(2, name)
    if kind is not None:
        attrs += strz(65, kind)
    if netdev is not None:
        attrs += strz(51, netdev)
    return message(nl_type(RDMA_NL_NLDEV, 3), NLM_F_REQUEST | NLM_F_ACK, 1, attrs)


for what, name, kind, netdev in (("no attributes", None, None, None),
                                 ("no netdev", "probe0", "softhca", None),
                                 ("type rxe", "probe0", "rxe", "lo"),
                                 ("a name with '%'", "probe%d", "softhca", "lo"),
                                 ("an empty name", "", "softhca", "lo"),
                                 ("a 64-byte name", "p" * 64, "softhca", "lo")):
    sock.send(link_add(name, kind, netdev))
    expect_error(replies(sock), EINVAL, "rdma link add with " + what)
sock.send(message(nl_type(RDMA_NL_NLDEV, 4), NLM_F_REQUEST | NLM_F_ACK, 1,
                  struct.pack("=HHI", 8, 1, 999)))
expect_error(replies(sock), EINVAL, "rdma link delete of device 999")


# rdma statistic qp set|bind (STAT_SET, op 16), unbind (STAT_DEL, op 18) and mode|show
# (STAT_GET, op 17) as nldev refuses them: EINVAL, the engine never asked. Attributes:
# DEV_INDEX 1, PORT_INDEX 3, RES_LQPN 21, STAT_MODE 74 (AUTO 1, MANUAL 2), STAT_RES 75
# (RES_QP 19, RES_MR 37), STAT_AUTO_MODE_MASK 76, STAT_COUNTER_ID 79, STAT_HWCOUNTERS 80.
def u32(kind, value):
    return struct.pack("=HHI", 8, kind, value)


def counter_request(op, what, flags=NLM_F_REQUEST | NLM_F_ACK):
    return message(nl_type(RDMA_NL_NLDEV, op), flags, 1, b"".join(what))


dev, port, qp = u32(1, 1), u32(3, 1), u32(75, 19)
auto, manual, lqpn, cntn = u32(74, 1), u32(74, 2), u32(21, 17), u32(79, 1)
for what, op, attrs, flags in (
        ("a counter set without attributes", 16, [], None),
        ("a counter set without a port", 16, [dev, qp, auto, u32(76, 1)], None),
        ("a counter set of device 999", 16, [u32(1, 999), port, qp, auto, u32(76, 1)], None),
        ("a counter set of port 2", 16, [dev, u32(3, 2), qp, auto, u32(76, 1)], None),
        ("a counter set of port 0", 16, [dev, u32(3, 0), qp, auto, u32(76, 1)], None),
        ("a counter set without a mode", 16, [dev, port, qp, u32(76, 1)], None),
        ("a counter set without STAT_RES", 16, [dev, port, auto, u32(76, 1)], None),
        ("a counter set for MRs", 16, [dev, port, u32(75, 37), auto, u32(76, 1)], None),
        ("a counter bind without a QP", 16, [manual, qp, dev, port, cntn], None),
        ("a counter bind with a 2-byte mode", 16,
         [struct.pack("=HHH2x", 6, 74, 2), qp, dev, port, lqpn], None),
        ("a counter bind with an 8-byte QP", 16,
         [manual, qp, dev, port, struct.pack("=HHQ", 12, 21, 17)], None),
        ("a counter set naming an optional counter", 16,
         [dev, port, struct.pack("=HH", 12, 80 | 0x8000) + u32(94, 0)], None),
        ("a counter bind as a dump", 16, [manual, qp, dev, port, lqpn],
         NLM_F_REQUEST | NLM_F_ACK | NLM_F_DUMP),
        ("a counter unbind without attributes", 18, [], None),
        ("a counter unbind without a counter", 18, [manual, qp, dev, port, lqpn], None),
        ("a counter unbind without a QP", 18, [manual, qp, dev, port, cntn], None),
        ("a counter unbind without STAT_RES", 18, [manual, dev, port, cntn, lqpn], None),
        ("a counter unbind for MRs", 18, [manual, u32(75, 37), dev, port, cntn, lqpn], None),
        ("a counter unbind of device 999", 18, [manual, qp, u32(1, 999), port, cntn, lqpn], None),
        ("a counter unbind of port 2", 18, [manual, qp, dev, u32(3, 2), cntn, lqpn], None),
        ("a counter unbind as a dump", 18, [manual, qp, dev, port, cntn, lqpn],
         NLM_F_REQUEST | NLM_F_ACK | NLM_F_DUMP),
        ("a counter mode without a port", 17, [dev, manual, qp], None),
        ("a counter get without a mode or counter", 17, [dev, port, qp], None),
        ("a counter get without a port", 17, [dev, qp, cntn], None),
        ("a counter get of resource 999", 17, [dev, port, u32(75, 999), manual], None),
        ("a counter dump without a device", 17, [qp], NLM_F_REQUEST | NLM_F_ACK | NLM_F_DUMP),
        ("a counter dump of port 2", 17, [dev, u32(3, 2), qp],
         NLM_F_REQUEST | NLM_F_ACK | NLM_F_DUMP)):
    sock.send(counter_request(op, attrs, flags or NLM_F_REQUEST | NLM_F_ACK))
    expect_error(replies(sock), EINVAL, what)

# A message whose length is not padded (18 bytes): no device named, so refused.
sock.send(struct.pack("=IHHII", 18, nl_type(RDMA_NL_NLDEV, 1), NLM_F_REQUEST, 7, 0) + b"\x01\x02")
expect_error(replies(sock), EINVAL, "an unpadded get without a device")
# Not a request, but asking for an ACK: acknowledged (an error message carrying 0).
sock.send(message(nl_type(RDMA_NL_NLDEV, 1), NLM_F_ACK, 8))
got = replies(sock)
if len(got) != 1 or got[0][0] != NLMSG_ERROR or struct.unpack_from("=i", got[0][3])[0] != 0:
    fail("a non-request asking for an ACK was not acknowledged: %r" % (got,))
print("a non-request asking for an ACK: acknowledged")

# A client that is not nldev.
sock.send(message(nl_type(7, 1), NLM_F_REQUEST, 2))
expect_error(replies(sock), EINVAL, "an unknown client")

# A header that claims more than was sent, a short datagram, and a reply-like message.
sock.send(struct.pack("=IHHII", 400, nl_type(RDMA_NL_NLDEV, 1), NLM_F_REQUEST, 3, 0))
sock.send(b"\x01\x02\x03")
sock.send(message(nl_type(RDMA_NL_NLDEV, 1), 0, 4))
got = replies(sock)
if got:
    fail("malformed messages were answered: %r" % (got,))
print("truncated, short and non-request messages: no answer")

# A device index that does not exist: ENODEV for a get, EINVAL for a port dump.
sock.send(message(nl_type(RDMA_NL_NLDEV, 1), NLM_F_REQUEST | NLM_F_ACK, 5,
                  struct.pack("=HHI", 8, 1, 999)))
expect_error(replies(sock), errno.ENODEV, "device 999")
sock.send(message(nl_type(RDMA_NL_NLDEV, 5), NLM_F_REQUEST | NLM_F_DUMP, 5,
                  struct.pack("=HHI", 8, 1, 999)))
expect_error(replies(sock), EINVAL, "a port dump of device 999")

# 400 gets in one datagram, nothing read meanwhile: 400 replies and 400 ACKs, more than
# the socket holds at once, all arrive in order.
batch = b"".join(message(nl_type(RDMA_NL_NLDEV, 1), NLM_F_REQUEST | NLM_F_ACK, 1000 + i,
                         struct.pack("=HHI", 8, 1, 1)) for i in range(400))
sock.send(batch)
got = replies(sock)
answers = [g for g in got if g[0] == nl_type(RDMA_NL_NLDEV, 1)]
acks = [g for g in got if g[0] == NLMSG_ERROR and struct.unpack_from("=i", g[3])[0] == 0]
if len(answers) != 400 or len(acks) != 400 or [g[2] for g in answers] != list(range(1000, 1400)):
    fail("400 batched gets got %d answers and %d ACKs" % (len(answers), len(acks)))
print("400 batched gets: 400 answers and 400 ACKs, in order")

# The socket still works: a device dump ends with DONE.
sock.send(message(nl_type(RDMA_NL_NLDEV, 1), NLM_F_REQUEST | NLM_F_DUMP, 6))
got = replies(sock)
devices = [g for g in got if g[0] == nl_type(RDMA_NL_NLDEV, 1)]
if not devices or got[-1][0] != NLMSG_DONE or any(g[2] != 6 for g in got):
    fail("the dump after bad input did not come back whole: %r" % (got,))
print("device dump afterwards: %d devices and DONE" % len(devices))

# The number reused behind the library's back: dup2 puts a UDP socket there, and sending
# on it is sending on that socket (not connected: refused), not netlink.
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
os.dup2(udp.fileno(), sock.fileno())
try:
    os.write(sock.fileno(), b"x")
    fail("a write on the reused number was taken as netlink")
except OSError as e:
    if e.errno != errno.EDESTADDRREQ:
        fail("a write on the reused number failed with %s, not EDESTADDRREQ" % errno.errorcode[e.errno])
print("number reused by dup2: a UDP socket again (EDESTADDRREQ)")
print("PASS")
