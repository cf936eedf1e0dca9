#include "softhca/transport/roce_frame.hpp"

#include "softhca/transport/byte_order.hpp"
#include "softhca/transport/crc32.hpp"
#include "softhca/transport/icrc_ipv4_id.hpp"

#include <cstring>

namespace softhca::transport {

uint16_t ipv4_header_checksum(const uint8_t* header, size_t length) {
    // RFC 1071 2(B): the one's complement sum does not depend on byte order, so 32-bit
    // words are added in the machine's order, folded, and the result put in network order.
    uint64_t sum = 0;
    size_t i = 0;
    for (; i + 4 <= length; i += 4) {
        uint32_t word;
        std::memcpy(&word, header + i, 4);
        sum += word;
    }
    if (i + 2 <= length) {
        uint16_t half;
        std::memcpy(&half, header + i, 2);
        sum += half;
    }
    while (sum >> 16)
        sum = (sum & 0xffff) + (sum >> 16);
    const uint16_t folded = static_cast<uint16_t>(~sum);
    uint8_t bytes[2];
    std::memcpy(bytes, &folded, 2);
    return load_be16(bytes);
}

uint32_t compute_icrc(const uint8_t* ip, size_t ip_length) {
    // A17.4.2: 64 bits of ones stand in for the LRH, then the IP, UDP and BTH headers
    // with their variant fields set to ones, then the rest of the IB packet.
    const bool v4 = (ip[0] >> 4) == 4;
    const size_t ip_header = v4 ? static_cast<size_t>(ip[0] & 0xf) * 4 : kIpv6HeaderBytes;
    const size_t masked_length = ip_header + kUdpHeaderBytes + 12;
    uint8_t masked[kIpv6HeaderBytes + kUdpHeaderBytes + 12 + 40];
    std::memcpy(masked, ip, masked_length);
    if (v4) {
        masked[1] = 0xff;  // type of service
        masked[8] = 0xff;  // time to live
        masked[10] = 0xff; // header checksum
        masked[11] = 0xff;
    } else {
        masked[0] |= 0x0f; // traffic class and flow label
        masked[1] = 0xff;
        masked[2] = 0xff;
        masked[3] = 0xff;
        masked[7] = 0xff; // hop limit
    }
    masked[ip_header + 6] = 0xff; // UDP checksum
    masked[ip_header + 7] = 0xff;
    masked[ip_header + kUdpHeaderBytes + 4] = 0xff; // BTH: FECN, BECN, reserved
    static constexpr uint8_t ones[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    uint32_t crc = crc32(0, ones, sizeof(ones));
    crc = crc32(crc, masked, masked_length);
    return crc32(crc, ip + masked_length, ip_length - masked_length);
}

size_t roce_header_bytes(const FrameAddressing& a) {
    return kEthernetHeaderBytes + (a.priority >= 0 ? kVlanTagBytes : 0) +
           (gid_is_ipv4_mapped(a.dst_gid) ? kIpv4HeaderBytes : kIpv6HeaderBytes) + kUdpHeaderBytes;
}

namespace {
// Where a frame's IP header starts and which EtherType it has, past a priority tag (VID 0)
// if there is one; 0 when the frame is too short or tagged for a VLAN (not ours).
size_t network_offset(const uint8_t* frame, size_t length, uint16_t& ethertype, int8_t& pcp) {
    if (length < kEthernetHeaderBytes)
        return 0;
    ethertype = load_be16(frame + 12);
    pcp = -1;
    if (ethertype != kEtherTypeVlan)
        return kEthernetHeaderBytes;
    if (length < kEthernetHeaderBytes + kVlanTagBytes)
        return 0;
    const uint16_t tci = load_be16(frame + 14);
    if ((tci & 0x0fff) != 0)
        return 0; // a VLAN's frame: a port is on no VLAN
    pcp = static_cast<int8_t>(tci >> 13);
    ethertype = load_be16(frame + 16);
    return kEthernetHeaderBytes + kVlanTagBytes;
}
} // namespace

size_t finish_roce_frame(uint8_t* frame, const FrameAddressing& a, size_t ib_length,
                         uint16_t ipv4_id, Icrc icrc_mode) {
    const bool v4 = gid_is_ipv4_mapped(a.dst_gid);
    uint8_t* eth = frame;
    std::memcpy(eth, a.dst_mac.data(), 6);
    std::memcpy(eth + 6, a.src_mac.data(), 6);
    size_t link_header = kEthernetHeaderBytes;
    if (a.priority >= 0) {
        store_be16(eth + 12, kEtherTypeVlan);
        store_be16(eth + 14, static_cast<uint16_t>((a.priority & 7) << 13)); // VID 0
        link_header += kVlanTagBytes;
    }
    store_be16(eth + link_header - 2, v4 ? kEtherTypeIpv4 : kEtherTypeIpv6);
    uint8_t* ip = eth + link_header;
    const size_t ip_header = v4 ? kIpv4HeaderBytes : kIpv6HeaderBytes;
    const size_t udp_length = kUdpHeaderBytes + ib_length + kIcrcBytes;
    if (v4) {
        ip[0] = 0x45;
        ip[1] = a.traffic_class;
        store_be16(ip + 2, static_cast<uint16_t>(ip_header + udp_length));
        store_be16(ip + 4, ipv4_id);
        store_be16(ip + 6, 0x4000); // don't fragment
        ip[8] = a.hop_limit;
        ip[9] = 17; // UDP
        store_be16(ip + 10, 0);
        std::memcpy(ip + 12, a.src_gid.data() + 12, 4);
        std::memcpy(ip + 16, a.dst_gid.data() + 12, 4);
        store_be16(ip + 10, ipv4_header_checksum(ip, kIpv4HeaderBytes));
    } else {
        store_be32(ip, 6u << 28 | static_cast<uint32_t>(a.traffic_class) << 20 |
                           (a.flow_label & 0xfffff));
        store_be16(ip + 4, static_cast<uint16_t>(udp_length));
        ip[6] = 17;
        ip[7] = a.hop_limit;
        std::memcpy(ip + 8, a.src_gid.data(), 16);
        std::memcpy(ip + 24, a.dst_gid.data(), 16);
    }
    uint8_t* udp = ip + ip_header;
    store_be16(udp, a.udp_src_port);
    store_be16(udp + 2, kRoceV2UdpPort);
    store_be16(udp + 4, static_cast<uint16_t>(udp_length));
    store_be16(udp + 6, 0); // RoCEv2 sends a zero UDP checksum (A17.4.3)
    const size_t ip_length = ip_header + kUdpHeaderBytes + ib_length;
    const uint32_t icrc = icrc_mode == Icrc::Offloaded ? 0 : compute_icrc(ip, ip_length);
    uint8_t* tail = ip + ip_length;
    tail[0] = static_cast<uint8_t>(icrc);
    tail[1] = static_cast<uint8_t>(icrc >> 8);
    tail[2] = static_cast<uint8_t>(icrc >> 16);
    tail[3] = static_cast<uint8_t>(icrc >> 24);
    return link_header + ip_length + kIcrcBytes;
}

FrameError parse_roce_frame(const uint8_t* frame, size_t length, ParsedFrame& out, Icrc icrc) {
    uint16_t ethertype = 0;
    int8_t pcp = -1;
    const size_t link_header = network_offset(frame, length, ethertype, pcp);
    if (!link_header)
        return length < kEthernetHeaderBytes ? FrameError::Malformed : FrameError::NotRoce;
    out = ParsedFrame{};
    FrameAddressing& a = out.addressing;
    std::memcpy(a.dst_mac.data(), frame, 6);
    std::memcpy(a.src_mac.data(), frame + 6, 6);
    a.priority = pcp;
    const uint8_t* ip = frame + link_header;
    const size_t available = length - link_header;
    size_t ip_header = 0;
    size_t ip_total = 0;
    if (ethertype == kEtherTypeIpv4) {
        if (available < kIpv4HeaderBytes || (ip[0] >> 4) != 4)
            return FrameError::Malformed;
        ip_header = static_cast<size_t>(ip[0] & 0xf) * 4;
        ip_total = load_be16(ip + 2);
        if (ip_header < kIpv4HeaderBytes || ip_total < ip_header || ip_total > available)
            return FrameError::Malformed;
        if (ip[9] != 17)
            return FrameError::NotRoce;
        if (ipv4_header_checksum(ip, ip_header) != 0)
            return FrameError::BadChecksum;
        if ((load_be16(ip + 6) & 0x3fff) != 0)
            return FrameError::Malformed; // fragments are not RoCE
        a.traffic_class = ip[1];
        a.hop_limit = ip[8];
        a.src_gid = gid_from_ipv4(load_be32(ip + 12));
        a.dst_gid = gid_from_ipv4(load_be32(ip + 16));
    } else if (ethertype == kEtherTypeIpv6) {
        if (available < kIpv6HeaderBytes || (ip[0] >> 4) != 6)
            return FrameError::Malformed;
        ip_header = kIpv6HeaderBytes;
        ip_total = kIpv6HeaderBytes + load_be16(ip + 4);
        if (ip_total > available)
            return FrameError::Malformed;
        if (ip[6] != 17)
            return FrameError::NotRoce;
        const uint32_t first = load_be32(ip);
        a.traffic_class = static_cast<uint8_t>(first >> 20);
        a.flow_label = first & 0xfffff;
        a.hop_limit = ip[7];
        std::memcpy(a.src_gid.data(), ip + 8, 16);
        std::memcpy(a.dst_gid.data(), ip + 24, 16);
    } else {
        return FrameError::NotRoce;
    }
    if (ip_total < ip_header + kUdpHeaderBytes)
        return FrameError::Malformed;
    const uint8_t* udp = ip + ip_header;
    if (load_be16(udp + 2) != kRoceV2UdpPort)
        return FrameError::NotRoce;
    const size_t udp_length = load_be16(udp + 4);
    if (udp_length != ip_total - ip_header || udp_length < kUdpHeaderBytes + 12 + kIcrcBytes)
        return FrameError::Malformed;
    a.udp_src_port = load_be16(udp);
    const size_t ip_length = ip_total - kIcrcBytes;
    const uint8_t* tail = ip + ip_length;
    const uint32_t carried = static_cast<uint32_t>(tail[0]) | static_cast<uint32_t>(tail[1]) << 8 |
                             static_cast<uint32_t>(tail[2]) << 16 |
                             static_cast<uint32_t>(tail[3]) << 24;
    if (icrc == Icrc::Offloaded) {
        // Built by this engine and never out of it: nothing to check.
    } else if (const uint32_t computed = compute_icrc(ip, ip_length); computed != carried) {
        uint16_t id = 0;
        bool df = true;
        if (icrc != Icrc::Ipv4IdUnknown || ethertype != kEtherTypeIpv4 ||
            !icrc_explained_by_ipv4_id(computed, carried, ip_length, id, df))
            return FrameError::BadIcrc;
    }
    out.ib = udp + kUdpHeaderBytes;
    out.ib_length = udp_length - kUdpHeaderBytes - kIcrcBytes;
    out.ip = ip;
    out.ip_header_length = ip_header;
    return FrameError::None;
}

void grh_from_frame(const ParsedFrame& frame, uint8_t (&grh)[40]) {
    std::memset(grh, 0, sizeof(grh));
    if (!frame.ip)
        return;
    if (frame.ip_header_length == kIpv6HeaderBytes && (frame.ip[0] >> 4) == 6)
        std::memcpy(grh, frame.ip, kIpv6HeaderBytes);
    else if (frame.ip_header_length == kIpv4HeaderBytes)
        std::memcpy(grh + 20, frame.ip, kIpv4HeaderBytes);
}

bool mark_congestion_experienced(uint8_t* frame, size_t length) {
    uint16_t ether_type = 0;
    int8_t pcp = -1;
    const size_t link_header = network_offset(frame, length, ether_type, pcp);
    if (!link_header || length < link_header + kIpv4HeaderBytes)
        return false;
    uint8_t* ip = frame + link_header;
    if (ether_type == kEtherTypeIpv4 && (ip[0] >> 4) == 4) {
        const size_t header = static_cast<size_t>(ip[0] & 0xf) * 4;
        const uint8_t ecn = ip[1] & 3;
        if (ecn == 0 || ecn == 3 || header < kIpv4HeaderBytes || length < link_header + header)
            return false;
        ip[1] |= 3;
        store_be16(ip + 10, 0);
        store_be16(ip + 10, ipv4_header_checksum(ip, header));
        return true;
    }
    if (ether_type == kEtherTypeIpv6 && (ip[0] >> 4) == 6 &&
        length >= link_header + kIpv6HeaderBytes) {
        // The traffic class spans the low nibble of byte 0 and the high one of byte 1:
        // its ECN bits are bits 5..4 of byte 1.
        const uint8_t ecn = (ip[1] >> 4) & 3;
        if (ecn == 0 || ecn == 3)
            return false;
        ip[1] |= 0x30;
        return true;
    }
    return false;
}

} // namespace softhca::transport
