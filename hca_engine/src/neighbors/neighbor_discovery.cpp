#include "neighbor_discovery.hpp"

#include "softhca/transport/byte_order.hpp"
#include "softhca/transport/roce_frame.hpp"

#include <cstring>

namespace softhca::engine {

namespace tp = transport;

namespace {

constexpr size_t kIpv6Offset = tp::kEthernetHeaderBytes;
constexpr size_t kIcmpOffset = kIpv6Offset + tp::kIpv6HeaderBytes;
constexpr size_t kNdMessageBytes = 24; // type, code, checksum, flags/reserved, target
constexpr uint8_t kSourceLinkLayerOption = 1;
constexpr uint8_t kTargetLinkLayerOption = 2;
constexpr uint8_t kNdHopLimit = 255;

bool is_multicast(const tp::Gid& address) {
    return address[0] == 0xff;
}

bool is_unspecified(const tp::Gid& address) {
    return address == tp::Gid{};
}

// The Ethernet and IPv6 headers of an ND message of icmp_length bytes.
void write_headers(uint8_t* frame, const tp::MacAddress& src_mac, const tp::MacAddress& dst_mac,
                   const tp::Gid& source, const tp::Gid& destination, size_t icmp_length) {
    std::memcpy(frame, dst_mac.data(), 6);
    std::memcpy(frame + 6, src_mac.data(), 6);
    tp::store_be16(frame + 12, tp::kEtherTypeIpv6);
    uint8_t* ip = frame + kIpv6Offset;
    std::memset(ip, 0, tp::kIpv6HeaderBytes);
    ip[0] = 0x60; // version 6, traffic class and flow label 0
    tp::store_be16(ip + 4, static_cast<uint16_t>(icmp_length));
    ip[6] = kIcmpv6NextHeader;
    ip[7] = kNdHopLimit; // RFC 4861 7.1: a receiver drops ND with any other hop limit
    std::memcpy(ip + 8, source.data(), 16);
    std::memcpy(ip + 24, destination.data(), 16);
}

// Writes an NS or NA (type) with its target and one link-layer option; returns the frame size.
size_t write_message(uint8_t* frame, uint8_t type, uint8_t flags, const tp::Gid& target,
                     uint8_t option, const tp::MacAddress& our_mac) {
    uint8_t* icmp = frame + kIcmpOffset;
    std::memset(icmp, 0, 32);
    icmp[0] = type;
    icmp[4] = flags;
    std::memcpy(icmp + 8, target.data(), 16);
    icmp[24] = option;
    icmp[25] = 1; // in units of 8 bytes: type, length and the 6-byte MAC
    std::memcpy(icmp + 26, our_mac.data(), 6);
    tp::Gid source, destination;
    std::memcpy(source.data(), frame + kIpv6Offset + 8, 16);
    std::memcpy(destination.data(), frame + kIpv6Offset + 24, 16);
    tp::store_be16(icmp + 2, icmpv6_checksum(source, destination, icmp, 32));
    return kNdFrameBytes;
}

} // namespace

uint16_t icmpv6_checksum(const tp::Gid& source, const tp::Gid& destination, const uint8_t* message,
                         size_t length) {
    uint64_t sum = 0;
    auto add = [&](const uint8_t* bytes, size_t n) {
        for (size_t i = 0; i + 1 < n; i += 2)
            sum += tp::load_be16(bytes + i);
        if (n & 1)
            sum += static_cast<uint32_t>(bytes[n - 1]) << 8;
    };
    add(source.data(), 16);
    add(destination.data(), 16);
    sum += static_cast<uint32_t>(length); // upper-layer packet length (32 bits)
    sum += kIcmpv6NextHeader;
    add(message, length);
    while (sum >> 16)
        sum = (sum & 0xffff) + (sum >> 16);
    return static_cast<uint16_t>(~sum & 0xffff);
}

tp::Gid solicited_node_group(const tp::Gid& address) {
    tp::Gid group{};
    group[0] = 0xff;
    group[1] = 0x02;
    group[11] = 0x01;
    group[12] = 0xff;
    group[13] = address[13];
    group[14] = address[14];
    group[15] = address[15];
    return group;
}

tp::MacAddress ipv6_multicast_mac(const tp::Gid& group) {
    return {0x33, 0x33, group[12], group[13], group[14], group[15]};
}

size_t build_neighbor_solicitation(uint8_t* frame, const tp::MacAddress& our_mac,
                                   const tp::Gid& source, const tp::Gid& target) {
    const tp::Gid group = solicited_node_group(target);
    write_headers(frame, our_mac, ipv6_multicast_mac(group), source, group, 32);
    return write_message(frame, kNeighborSolicitation, 0, target, kSourceLinkLayerOption, our_mac);
}

size_t build_neighbor_advertisement(uint8_t* frame, const tp::MacAddress& our_mac,
                                    const tp::MacAddress& destination_mac,
                                    const tp::Gid& destination, const tp::Gid& target,
                                    bool solicited) {
    write_headers(frame, our_mac, destination_mac, target, destination, 32);
    // Flags (RFC 4861 4.4): not a router; Solicited when answering a unicast question;
    // Override, as the owner of the address.
    const uint8_t flags = static_cast<uint8_t>((solicited ? 0x40 : 0) | 0x20);
    return write_message(frame, kNeighborAdvertisement, flags, target, kTargetLinkLayerOption,
                         our_mac);
}

NdParse parse_neighbor_discovery(const uint8_t* frame, size_t length, NdMessage& out) {
    if (length < kIcmpOffset + 1 || tp::load_be16(frame + 12) != tp::kEtherTypeIpv6)
        return NdParse::NotNd;
    const uint8_t* ip = frame + kIpv6Offset;
    if ((ip[0] >> 4) != 6 || ip[6] != kIcmpv6NextHeader)
        return NdParse::NotNd;
    const uint8_t* icmp = frame + kIcmpOffset;
    if (icmp[0] != kNeighborSolicitation && icmp[0] != kNeighborAdvertisement)
        return NdParse::NotNd;
    const size_t icmp_length = tp::load_be16(ip + 4);
    // RFC 4861 7.1.1 (NS) and 7.1.2 (NA): hop limit 255, a valid checksum, code 0, at
    // least 24 bytes, a target that is not multicast, options of nonzero length.
    if (icmp_length > length - kIcmpOffset || icmp_length < kNdMessageBytes ||
        ip[7] != kNdHopLimit || icmp[1] != 0)
        return NdParse::Malformed;
    out = NdMessage{};
    out.solicitation = icmp[0] == kNeighborSolicitation;
    std::memcpy(out.frame_src.data(), frame + 6, 6);
    std::memcpy(out.source.data(), ip + 8, 16);
    std::memcpy(out.destination.data(), ip + 24, 16);
    std::memcpy(out.target.data(), icmp + 8, 16);
    if (icmpv6_checksum(out.source, out.destination, icmp, icmp_length) != 0 ||
        is_multicast(out.target))
        return NdParse::Malformed;
    const uint8_t wanted = out.solicitation ? kSourceLinkLayerOption : kTargetLinkLayerOption;
    for (size_t at = kNdMessageBytes; at < icmp_length;) {
        if (icmp_length - at < 2 || icmp[at + 1] == 0 || icmp[at + 1] * 8u > icmp_length - at)
            return NdParse::Malformed;
        if (icmp[at] == wanted && !out.has_link_layer) {
            out.has_link_layer = true;
            std::memcpy(out.link_layer.data(), icmp + at + 2, 6);
        }
        at += icmp[at + 1] * 8u;
    }
    if (out.solicitation) {
        // A DAD probe comes from :: to a solicited-node group, without a source link-layer
        // address.
        if (is_unspecified(out.source) &&
            (out.destination != solicited_node_group(out.target) || out.has_link_layer))
            return NdParse::Malformed;
    } else {
        out.solicited = icmp[4] & 0x40;
        out.override_flag = icmp[4] & 0x20;
        if (is_multicast(out.destination) && out.solicited)
            return NdParse::Malformed;
    }
    return NdParse::Ok;
}

} // namespace softhca::engine
