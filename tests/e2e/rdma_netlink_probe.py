"""Bad input on the RDMA netlink socket softhca's preload answers (run under softhca exec):
a request the kernel does not know, a truncated message and a message that is not a
request each get the kernel's answer (an error, nothing, nothing), and the socket still
answers a device dump afterwards. Prints what it saw; exits 1 on a wrong answer."""
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

# An operation nldev does not have.
sock.send(message(nl_type(RDMA_NL_NLDEV, 99), NLM_F_REQUEST | NLM_F_ACK, 1))
got = replies(sock)
if len(got) != 1 or got[0][0] != NLMSG_ERROR or struct.unpack_from("=i", got[0][3])[0] != -EOPNOTSUPP:
    fail("an unknown operation was not answered EOPNOTSUPP: %r" % (got,))
print("unknown operation: EOPNOTSUPP")

# A client that is not nldev.
sock.send(message(nl_type(7, 1), NLM_F_REQUEST, 2))
got = replies(sock)
if len(got) != 1 or got[0][0] != NLMSG_ERROR or struct.unpack_from("=i", got[0][3])[0] != -EINVAL:
    fail("an unknown client was not answered EINVAL: %r" % (got,))
print("unknown client: EINVAL")

# A header that claims more than was sent, a short datagram, and a reply-like message.
sock.send(struct.pack("=IHHII", 400, nl_type(RDMA_NL_NLDEV, 1), NLM_F_REQUEST, 3, 0))
sock.send(b"\x01\x02\x03")
sock.send(message(nl_type(RDMA_NL_NLDEV, 1), 0, 4))
got = replies(sock)
if got:
    fail("malformed messages were answered: %r" % (got,))
print("truncated, short and non-request messages: no answer")

# A device index that does not exist.
sock.send(message(nl_type(RDMA_NL_NLDEV, 1), NLM_F_REQUEST | NLM_F_ACK, 5,
                  struct.pack("=HHI", 8, 1, 999)))
got = replies(sock)
if len(got) != 1 or got[0][0] != NLMSG_ERROR or struct.unpack_from("=i", got[0][3])[0] != -19:
    fail("device 999 was not answered ENODEV: %r" % (got,))
print("no such device: ENODEV")

# The socket still works: a device dump ends with DONE.
sock.send(message(nl_type(RDMA_NL_NLDEV, 1), NLM_F_REQUEST | NLM_F_DUMP, 6))
got = replies(sock)
devices = [g for g in got if g[0] == nl_type(RDMA_NL_NLDEV, 1)]
if not devices or got[-1][0] != NLMSG_DONE or any(g[2] != 6 for g in got):
    fail("the dump after bad input did not come back whole: %r" % (got,))
print("device dump afterwards: %d devices and DONE" % len(devices))
print("PASS")
