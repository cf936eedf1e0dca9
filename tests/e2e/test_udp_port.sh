#!/usr/bin/env bash
# The kernel UDP socket port (--port udp@ADDRESSES, io_uring): two namespaces joined by a
# veth pair (tools/netns-pair.sh with SOFTHCA_PAIR_PORT=udp), each engine on a UDP socket
# bound to its veth's own IPv4 and IPv6 address, the kernel doing ARP, ND and routing.
# The four pingpongs, the eight perftest RC tools, perftest over UC and UD, the RC
# pingpong and ib_send_bw over the IPv6 GID, and rping over both families run between
# them; then bad datagrams sent to
# port 4791 from the other namespace (truncated, oversized, a corrupted ICRC, a valid
# packet for a QP that does not exist, and the same as UDP GSO runs, one with a short
# last segment, one of segments that are not RoCE) are dropped and counted, one by one,
# and the ports work on.
source "$(dirname "$0")/lib.sh"
here=$(cd "$(dirname "$0")" && pwd)
pair=${SOFTHCA_PREFIX}
export SOFTHCA
trap 'pair_down "$pair"' EXIT
SOFTHCA_PAIR_PORT=udp pair_up "$pair"

pair_hosts "$pair"
status() { ip netns exec "$SERVER_NS" "$SOFTHCA" status --prefix "$SERVER_PREFIX"; }
status | head -3
status | grep -q "pmd kernel udp (io_uring) udp" || fail "not a udp port: $(status)"
gids=$(ip netns exec "$SERVER_NS" "$SOFTHCA" exec --prefix "$SERVER_PREFIX" -- ibv_devinfo -v)
grep -qE "GID\[\s*0\]:\s+::ffff:198.18.2.1, RoCE v2" <<<"$gids" || fail "GID 0: $gids"
grep -qE "GID\[\s*1\]:\s+2001:2:0:2::1, RoCE v2" <<<"$gids" || fail "GID 1: $gids"

"$here/test_pingpong.sh" ibv_rc_pingpong 1 4096 65536 1048576 || fail "ibv_rc_pingpong"
"$here/test_pingpong.sh" ibv_uc_pingpong 4096 65536 || fail "ibv_uc_pingpong"
"$here/test_pingpong.sh" ibv_ud_pingpong 512 1024 || fail "ibv_ud_pingpong"
"$here/test_pingpong.sh" ibv_srq_pingpong 4096 65536 || fail "ibv_srq_pingpong"
# The bandwidth tools at every size; the others at one packet, a few and many (each size
# costs perftest a fixed calibration: test_perftest.sh).
few_sizes="2 4096 1048576"
for tool in ib_send_bw ib_write_bw ib_read_bw ib_atomic_bw; do
    "$here/test_perftest.sh" "$tool" | tail -2 || fail "$tool over the udp port"
done
for tool in ib_send_lat ib_write_lat ib_read_lat ib_atomic_lat; do
    PERFTEST_SIZES=$few_sizes "$here/test_perftest.sh" "$tool" | tail -2 ||
        fail "$tool over the udp port"
done
PERFTEST_SIZES="2 1024" "$here/test_perftest.sh" ib_send_bw -c UD | tail -2 ||
    fail "ib_send_bw -c UD over the udp port"
PERFTEST_SIZES=$few_sizes "$here/test_perftest.sh" ib_write_bw -c UC | tail -2 ||
    fail "ib_write_bw -c UC over the udp port"
GID_INDEX=1 "$here/test_pingpong.sh" ibv_rc_pingpong 4096 65536 || fail "ibv_rc_pingpong over IPv6"
GID_INDEX=1 PERFTEST_SIZES=$few_sizes "$here/test_perftest.sh" ib_send_bw | tail -2 ||
    fail "ib_send_bw over IPv6"

# rdma_cm over the udp ports, both families: rping with every ping verified.
for addr in 198.18.2.1 2001:2:0:2::1; do
    on_server timeout 60 rping -s -a "$addr" -V -C 20 -S 4000 >/dev/null 2>&1 &
    rping_server=$!
    wait_until "ip netns exec '$SERVER_NS' '$SOFTHCA' status --prefix '$SERVER_PREFIX' | grep -q 'listening [1-9]'" 20 ||
        fail "rping server on $addr did not listen"
    on_client timeout 60 rping -c -a "$addr" -V -C 20 -S 4000 >/dev/null || fail "rping to $addr"
    wait "$rping_server" || fail "rping server on $addr"
    echo "rping over the udp port to $addr: 20 pings verified"
done

# Bad datagrams from the other host: each is dropped and counted, nothing else moves.
counter() { status | grep -m1 "counters:" | sed -n "s/.* $1 \([0-9]*\).*/\1/p"; }
# send_bad single|runs: the bad datagrams, one by one or as UDP GSO runs.
send_bad() {
    ip netns exec "$CLIENT_NS" python3 - "$1" <<'PY' || fail "could not send the bad datagrams ($1)"
import socket, struct, sys, zlib
UDP_SEGMENT = 103
runs = sys.argv[1] == "runs"
source_port = 50124 if runs else 50123
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("198.18.2.2", source_port))
to = ("198.18.2.1", 4791)
# A SEND_ONLY to QP 0x123456, which does not exist, with its right ICRC (A17.4.2: ones
# for the LRH, the IPv4 and UDP headers with their variant fields as ones; the kernel
# sends identification 0 and DF from this unconnected socket).
bth = struct.pack(">BBHII", 0x04, 0x40, 0xffff, 0x123456, 0x00000001)
payload = bth + b"\x00" * 16
length = 20 + 8 + len(payload) + 4
ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0xff, length, 0, 0x4000, 0xff, 17, 0xffff,
                 socket.inet_aton("198.18.2.2"), socket.inet_aton("198.18.2.1"))
udp = struct.pack(">HHHH", source_port, 4791, length - 20, 0xffff)
masked = bytearray(payload)
masked[4] = 0xff
packet = payload + struct.pack("<I", zlib.crc32(b"\xff" * 8 + ip + udp + bytes(masked)))
if not runs:
    s.sendto(b"\x04\x00", to)                     # shorter than a BTH and an ICRC
    s.sendto(b"\x04" * 6000, to)                  # longer than any RoCEv2 packet
    s.sendto(payload + b"\xde\xad\xbe\xef", to)   # a wrong ICRC
    s.sendto(packet, to)
else:
    # Three copies of that packet and a short piece of garbage as the run's last
    # segment, then a run of four segments that are not RoCE at all.
    s.setsockopt(socket.SOL_UDP, UDP_SEGMENT, len(packet))
    s.sendto(packet * 3 + b"\x04" * 10, to)
    s.setsockopt(socket.SOL_UDP, UDP_SEGMENT, 40)
    s.sendto(b"\x04" * 160, to)
PY
}
malformed=$(counter rx_malformed) bad_icrc=$(counter rx_bad_icrc) no_qp=$(counter rx_no_qp)
send_bad single
# Once all are counted (the engine's thread may be late on a loaded machine), and a moment
# later, so that a count that went past what was sent would show.
wait_until '[ "$(counter rx_no_qp)" -ge $((no_qp + 1)) ] && [ "$(counter rx_malformed)" -ge $((malformed + 2)) ] && [ "$(counter rx_bad_icrc)" -ge $((bad_icrc + 1)) ]' 10 || true
sleep 0.3
[ "$(counter rx_malformed)" -ge $((malformed + 2)) ] || fail "short/long datagrams not counted: $(status)"
[ "$(counter rx_bad_icrc)" -ge $((bad_icrc + 1)) ] || fail "bad ICRC not counted: $(status)"
[ "$(counter rx_no_qp)" -eq $((no_qp + 1)) ] ||
    fail "the packet for no QP: rx_no_qp $(counter rx_no_qp), was $no_qp"
# UDP GSO runs (the port's sockets take them whole with UDP_GRO over the veth): each
# segment is a packet of its own: three more for no QP, five malformed or with a bad ICRC.
malformed=$(counter rx_malformed) bad_icrc=$(counter rx_bad_icrc) no_qp=$(counter rx_no_qp)
send_bad runs
wait_until '[ "$(counter rx_no_qp)" -ge $((no_qp + 3)) ] && [ $(($(counter rx_malformed) + $(counter rx_bad_icrc))) -ge $((malformed + bad_icrc + 5)) ]' 10 || true
sleep 0.3
[ "$(counter rx_no_qp)" -eq $((no_qp + 3)) ] ||
    fail "a GSO run's packets for no QP: rx_no_qp $(counter rx_no_qp), was $no_qp"
[ $(($(counter rx_malformed) + $(counter rx_bad_icrc))) -ge $((malformed + bad_icrc + 5)) ] ||
    fail "a GSO run's bad segments not counted: $(status)"
"$here/test_pingpong.sh" ibv_rc_pingpong 4096 || fail "ibv_rc_pingpong after bad datagrams"
status | grep -E "counters"
echo PASS
