// Wire codec: IPv6 Neighbor Discovery (RFC 4861) as the engine builds and validates it.
#include "neighbor_discovery.hpp"
#include "softhca/transport/byte_order.hpp"

#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

using namespace softhca::engine;
namespace tp = softhca::transport;

namespace {

const tp::MacAddress kOurMac{0x02, 0x00, 0x00, 0x00, 0x00, 0x01};
const tp::MacAddress kPeerMac{0x52, 0x54, 0x00, 0x12, 0x0b, 0x02};
const tp::Gid kOurs{0x20, 0x01, 0, 2, 0, 0, 0, 0x0b, 0, 0, 0, 0, 0, 0, 0, 3};
const tp::Gid kPeer{0x20, 0x01, 0, 2, 0, 0, 0, 0x0b, 0, 0, 0, 0, 0, 0x12, 0x34, 0x56};

// Recomputes the ICMPv6 checksum after a test changed the message.
void reseal(uint8_t* frame) {
    tp::Gid source, destination;
    std::memcpy(source.data(), frame + 22, 16);
    std::memcpy(destination.data(), frame + 38, 16);
    const size_t length = tp::load_be16(frame + 18);
    frame[56] = frame[57] = 0;
    tp::store_be16(frame + 56, icmpv6_checksum(source, destination, frame + 54, length));
}

} // namespace

TEST_CASE("a Neighbor Solicitation goes to the target's solicited-node group and parses back") {
    uint8_t frame[kNdFrameBytes];
    REQUIRE(build_neighbor_solicitation(frame, kOurMac, kOurs, kPeer) == kNdFrameBytes);
    // 33:33:ff:12:34:56 and ff02::1:ff12:3456 (RFC 4291 2.7.1, RFC 2464 7).
    const uint8_t group_mac[6] = {0x33, 0x33, 0xff, 0x12, 0x34, 0x56};
    CHECK(std::memcmp(frame, group_mac, 6) == 0);
    const tp::Gid group{0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xff, 0x12, 0x34, 0x56};
    CHECK(std::memcmp(frame + 38, group.data(), 16) == 0);
    CHECK(frame[21] == 255); // hop limit
    NdMessage nd;
    REQUIRE(parse_neighbor_discovery(frame, sizeof(frame), nd) == NdParse::Ok);
    CHECK(nd.solicitation);
    CHECK(nd.source == kOurs);
    CHECK(nd.destination == group);
    CHECK(nd.target == kPeer);
    CHECK(nd.has_link_layer);
    CHECK(nd.link_layer == kOurMac);
    CHECK(nd.frame_src == kOurMac);
}

TEST_CASE("a Neighbor Advertisement carries our MAC and the Solicited and Override flags") {
    uint8_t frame[kNdFrameBytes];
    build_neighbor_advertisement(frame, kOurMac, kPeerMac, kPeer, kOurs, true);
    CHECK(std::memcmp(frame, kPeerMac.data(), 6) == 0);
    NdMessage nd;
    REQUIRE(parse_neighbor_discovery(frame, sizeof(frame), nd) == NdParse::Ok);
    CHECK_FALSE(nd.solicitation);
    CHECK(nd.solicited);
    CHECK(nd.override_flag);
    CHECK(nd.target == kOurs);
    CHECK(nd.link_layer == kOurMac);
    // The checksum field makes the message's sum come out at zero.
    CHECK(icmpv6_checksum(kOurs, kPeer, frame + 54, 32) == 0);
}

TEST_CASE("ND messages failing RFC 4861's validation are malformed, other ICMPv6 is not ND") {
    uint8_t good[kNdFrameBytes];
    build_neighbor_solicitation(good, kOurMac, kOurs, kPeer);
    NdMessage nd;
    uint8_t frame[kNdFrameBytes];
    auto check = [&](NdParse expected, size_t length = kNdFrameBytes) {
        CHECK(parse_neighbor_discovery(frame, length, nd) == expected);
    };

    std::memcpy(frame, good, sizeof(frame));
    frame[57] ^= 1; // checksum
    check(NdParse::Malformed);

    std::memcpy(frame, good, sizeof(frame));
    frame[21] = 254; // hop limit: the message crossed a router
    check(NdParse::Malformed);

    std::memcpy(frame, good, sizeof(frame));
    frame[55] = 1; // code
    reseal(frame);
    check(NdParse::Malformed);

    std::memcpy(frame, good, sizeof(frame));
    frame[79] = 0; // an option of length zero
    reseal(frame);
    check(NdParse::Malformed);

    std::memcpy(frame, good, sizeof(frame));
    frame[62] = 0xff; // a multicast target
    reseal(frame);
    check(NdParse::Malformed);

    std::memcpy(frame, good, sizeof(frame));
    check(NdParse::Malformed, 60); // payload length past the frame's end

    std::memcpy(frame, good, sizeof(frame));
    std::memset(frame + 22, 0, 16); // a DAD probe (source ::) may not carry our link layer
    reseal(frame);
    check(NdParse::Malformed);

    build_neighbor_advertisement(frame, kOurMac, kPeerMac,
                                 tp::Gid{0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, kOurs,
                                 true); // Solicited, yet to all nodes
    check(NdParse::Malformed);

    std::memcpy(frame, good, sizeof(frame));
    frame[54] = 128; // an echo request
    reseal(frame);
    check(NdParse::NotNd);

    std::memcpy(frame, good, sizeof(frame));
    frame[20] = 17; // UDP (RoCEv2 over IPv6)
    check(NdParse::NotNd);
    check(NdParse::NotNd, 20);
}
