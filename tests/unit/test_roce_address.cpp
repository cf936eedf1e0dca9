// Wire-codec layer: port identities (GID, GUID) and path MTU encodings.
#include "softhca/transport/path_mtu.hpp"
#include "softhca/transport/roce_address.hpp"

#include <catch2/catch.hpp>

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
