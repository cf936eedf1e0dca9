#!/usr/bin/env bash
# What a udp port's UDP GSO runs are on the wire: two hosts with udp ports
# (tools/netns-pair.sh, SOFTHCA_PAIR_PORT=udp); the client's veth has its UDP segmentation
# turned off, so the kernel cuts each run there into ordinary datagrams, numbering their
# IPv4 identification 0, 1, 2, ... as a NIC does. A capture on the server's veth during
# ib_write_bw, ib_send_bw and ibv_rc_pingpong from the client holds every packet as it
# went (the client's; the server's own leave uncut, as its veth has segmentation on): each one passes the codec checks with its real header (parse, ICRC, re-encoding:
# pcap_check), tshark decodes them as InfiniBand over UDP, and the runs show as packets
# numbered past 0.
source "$(dirname "$0")/lib.sh"
here=$(cd "$(dirname "$0")" && pwd)
PCAP_CHECK=${1:?path to pcap_check}
pair=${SOFTHCA_PREFIX}
dir=$(mktemp -d)
trap '[ -n "${capture:-}" ] && kill "$capture" 2>/dev/null; pair_down "$pair"; rm -rf "$dir"' EXIT
SOFTHCA_PAIR_PORT=udp pair_up "$pair"
pair_hosts "$pair"
ip netns exec "$CLIENT_NS" ethtool -K "${pair}vb" tx-udp-segmentation off >/dev/null ||
    fail "ethtool could not turn off the client veth's UDP segmentation"

ip netns exec "$SERVER_NS" dumpcap -q -P -i "${pair}va" -f "udp dst port 4791 and src host 198.18.2.2" \
    -w "$dir/wire.pcap" >/dev/null 2>&1 &
capture=$!
wait_until "[ -s '$dir/wire.pcap' ]" 10 || fail "dumpcap did not start"
sleep 0.5
for tool in ib_write_bw ib_send_bw; do
    PERFTEST_SIZE=65536 "$here/test_perftest.sh" "$tool" | tail -1 || fail "$tool"
done
"$here/test_pingpong.sh" ibv_rc_pingpong 65536 || fail "ibv_rc_pingpong"
sleep 0.5
kill -INT "$capture"
wait "$capture" || true
capture=

"$PCAP_CHECK" "$dir/wire.pcap" || fail "packets of the cut GSO runs failed the codec checks"
ids=$(tshark -r "$dir/wire.pcap" -Y "udp.dstport == 4791" -T fields -e ip.id 2>/dev/null)
packets=$(wc -l <<<"$ids")
numbered=$(grep -cv "^0x0*0$" <<<"$ids" || true)
decoded=$(tshark -r "$dir/wire.pcap" -d udp.port==4791,infiniband -Y infiniband 2>/dev/null | wc -l)
echo "captured $packets packets, $numbered numbered past 0, $decoded decoded as InfiniBand"
[ "$packets" -ge 2000 ] || fail "too few packets captured: $packets"
[ "$numbered" -ge $((packets / 2)) ] || fail "the runs were not cut into numbered packets: $numbered of $packets"
[ "$decoded" -eq "$packets" ] || fail "tshark decoded $decoded of $packets packets as InfiniBand"
echo PASS
