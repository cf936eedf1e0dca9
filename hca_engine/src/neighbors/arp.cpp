#include "arp.hpp"

#include "softhca/transport/byte_order.hpp"
#include "softhca/transport/roce_frame.hpp"

#include <cstring>

namespace softhca::engine {

using transport::load_be16;
using transport::load_be32;
using transport::store_be16;
using transport::store_be32;

bool parse_arp(const uint8_t* frame, size_t length, ArpMessage& out) {
    if (length < 42 || load_be16(frame + 12) != transport::kEtherTypeArp)
        return false;
    const uint8_t* arp = frame + 14;
    // Hardware Ethernet (1), protocol IPv4, address lengths 6 and 4 (RFC 826).
    if (load_be16(arp) != 1 || load_be16(arp + 2) != transport::kEtherTypeIpv4 || arp[4] != 6 ||
        arp[5] != 4)
        return false;
    const uint16_t op = load_be16(arp + 6);
    if (op != 1 && op != 2)
        return false;
    out.request = op == 1;
    std::memcpy(out.sender_mac.data(), arp + 8, 6);
    out.sender_ip = load_be32(arp + 14);
    std::memcpy(out.target_mac.data(), arp + 18, 6);
    out.target_ip = load_be32(arp + 24);
    return true;
}

size_t build_arp(uint8_t* frame, const ArpMessage& m) {
    std::memset(frame, 0, kArpFrameBytes);
    if (m.request)
        std::memset(frame, 0xff, 6);
    else
        std::memcpy(frame, m.target_mac.data(), 6);
    std::memcpy(frame + 6, m.sender_mac.data(), 6);
    store_be16(frame + 12, transport::kEtherTypeArp);
    uint8_t* arp = frame + 14;
    store_be16(arp, 1);
    store_be16(arp + 2, transport::kEtherTypeIpv4);
    arp[4] = 6;
    arp[5] = 4;
    store_be16(arp + 6, m.request ? 1 : 2);
    std::memcpy(arp + 8, m.sender_mac.data(), 6);
    store_be32(arp + 14, m.sender_ip);
    if (!m.request)
        std::memcpy(arp + 18, m.target_mac.data(), 6);
    store_be32(arp + 24, m.target_ip);
    return kArpFrameBytes;
}

} // namespace softhca::engine
