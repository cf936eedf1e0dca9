// Wire-codec layer: port identities (GID, GUID), path MTU encodings and path choices (hop
// limit, UDP source port).
#include "softhca/transport/path_mtu.hpp"
#include "softhca/transport/roce_address.hpp"
#include "softhca/transport/roce_path.hpp"

#include <catch2/catch.hpp>
#include <set>

using namespace softhca::transport;

TEST_CASE("an IPv4 port address maps to the IPv4-mapped RoCE v2 GID") {
    const Gid gid = gid_from_ipv4(*parse_ipv4("198.18.0.1"));
    const Gid expected = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 0, 1};
    CHECK(gid == expected);
    CHECK(gid_to_sysfs_string(gid) == "0000:0000:0000:0000:0000:ffff:c612:0001");
}

TEST_CASE("the node GUID is the EUI-64 of the port MAC") {
    const MacAddress mac = {0x02, 0x53, 0x48, 0x12, 0x34, 0x56};
    // U/L bit flipped (0x02 -> 0x00), ff:fe inserted in the middle.
    CHECK(guid_from_mac(mac) == 0x005348fffe123456ull);
    CHECK(guid_to_sysfs_string(0x005348fffe123456ull) == "0053:48ff:fe12:3456");
}

TEST_CASE("a GUID's sysfs text parses back, and anything else is 0") {
    CHECK(guid_from_sysfs_string("0053:48ff:fe12:3456") == 0x005348fffe123456ull);
    CHECK(guid_from_sysfs_string(guid_to_sysfs_string(0xfedcba9876543210ull)) ==
          0xfedcba9876543210ull);
    CHECK(guid_from_sysfs_string("0053:48FF:FE12:3456") == 0x005348fffe123456ull);
    CHECK(guid_from_sysfs_string("0053:48fg:fe12:3456") == 0);
}

TEST_CASE("IPv4 text is parsed strictly") {
    CHECK(parse_ipv4("198.19.255.254") == ((198u << 24) | (19u << 16) | (255u << 8) | 254u));
    CHECK_FALSE(parse_ipv4("198.18.0"));
    CHECK_FALSE(parse_ipv4("198.18.0.256"));
    CHECK_FALSE(parse_ipv4("198.18.0.1x"));
    CHECK_FALSE(parse_ipv4(""));
    CHECK_FALSE(parse_ipv4("1..2.3"));
    CHECK(ipv4_to_string(*parse_ipv4("198.18.0.2")) == "198.18.0.2");
}

TEST_CASE("path MTU codes and bytes follow IBTA") {
    CHECK(path_mtu_bytes(PathMtu::Mtu256) == 256);
    CHECK(path_mtu_bytes(PathMtu::Mtu4096) == 4096);
    CHECK_FALSE(path_mtu_from_code(0));
    CHECK_FALSE(path_mtu_from_code(6));
    CHECK(path_mtu_from_code(3) == PathMtu::Mtu1024);
}

TEST_CASE("the active MTU is the largest IB MTU whose RoCEv2 packet fits the link") {
    CHECK(path_mtu_for_ethernet_mtu(1500) == PathMtu::Mtu1024);
    CHECK(path_mtu_for_ethernet_mtu(9000) == PathMtu::Mtu4096);
    CHECK(path_mtu_for_ethernet_mtu(4200) == PathMtu::Mtu4096);
    CHECK(path_mtu_for_ethernet_mtu(4100) == PathMtu::Mtu2048);
    CHECK(path_mtu_for_ethernet_mtu(576) == PathMtu::Mtu512);
    CHECK_FALSE(path_mtu_for_ethernet_mtu(300));
}

TEST_CASE("path choices: the route's hop limit for routable unicast, entropy in the UDP source "
          "port") {
    using namespace softhca::transport;
    const Gid unicast = gid_from_ipv4(0xc6120702);
    const Gid v4_multicast = gid_from_ipv4(0xe0000101);
    Gid v6_multicast{};
    v6_multicast[0] = 0xff;
    v6_multicast[1] = 0x0e;
    Gid link_local{};
    link_local[0] = 0xfe;
    link_local[1] = 0x80;
    CHECK(wire_hop_limit(unicast, 1, 64) == 64); // what the pingpong tools pass
    CHECK(wire_hop_limit(unicast, 255, 64) == 64);
    CHECK(wire_hop_limit(v4_multicast, 1, 64) == 1);
    CHECK(wire_hop_limit(v6_multicast, 3, 64) == 3);
    CHECK(wire_hop_limit(link_local, 1, 64) == 1);
    CHECK(wire_hop_limit(link_local, 0, 64) == 64);
    CHECK(gid_is_multicast(v4_multicast));
    CHECK_FALSE(gid_is_multicast(unicast));

    // Every port is in the RoCEv2 source range; connections spread over it.
    std::set<uint16_t> ports;
    for (uint32_t local = 0x11; local < 0x11 + 64; ++local) {
        const uint16_t port = udp_source_port_for_flow(flow_label_for_qps(local, 0x2a));
        CHECK(port >= kRoceUdpSourcePortMin);
        ports.insert(port);
    }
    CHECK(ports.size() >= 60);
    // The 20 bits of a flow label fold into 14: its high bits change the port too.
    CHECK(udp_source_port_for_flow(0x00001) != udp_source_port_for_flow(0x04001));
    CHECK(udp_source_port_for_flow(0x00001) == (kRoceUdpSourcePortMin | 1));
    CHECK(flow_label_for_qps(0x11, 0x2a) <= kFlowLabelMask);
}
