// What a RoCEv2 HCA puts in the IP and UDP headers of a path, as the Linux kernel and
// ConnectX drivers choose it (rdma-core and kernel conventions, IBTA Annex A17):
//  - the hop limit of a routable unicast destination is the route's, not the one the
//    application put in its address vector (the kernel resolves it with the destination
//    MAC when an AH is created or a QP gets its path; the tools pass 1, which would not
//    cross a router). Multicast and link-local destinations keep the application's.
//  - the UDP source port carries the flow's entropy for ECMP fabrics (A17.4.5.1): 14 bits
//    folded from the 20-bit flow label, in 0xC000..0xFFFF; a connected QP without a flow
//    label gets one computed from its own and its peer's QP numbers, so that each
//    connection hashes on its own.
#pragma once

#include "softhca/transport/roce_address.hpp"

#include <cstdint>

namespace softhca::transport {

constexpr uint16_t kRoceUdpSourcePortMin = 0xc000;
constexpr uint32_t kFlowLabelMask = 0xfffff;

// ff00::/8, or an IPv4-mapped address in 224.0.0.0/4.
constexpr bool gid_is_multicast(const Gid& gid) {
    if (gid[0] == 0xff)
        return true;
    for (int i = 0; i < 10; ++i)
        if (gid[static_cast<size_t>(i)])
            return false;
    return gid[10] == 0xff && gid[11] == 0xff && (gid[12] & 0xf0) == 0xe0;
}

// fe80::/10.
constexpr bool gid_is_link_local(const Gid& gid) {
    return gid[0] == 0xfe && (gid[1] & 0xc0) == 0x80;
}

// The hop limit on the wire for a destination: the route's for a routable unicast one.
constexpr uint8_t wire_hop_limit(const Gid& dgid, uint8_t requested, uint8_t route_hop_limit) {
    if (gid_is_multicast(dgid) || gid_is_link_local(dgid))
        return requested ? requested : route_hop_limit;
    return route_hop_limit;
}

// A flow label for a connection that has none: both QP numbers mixed into 20 bits.
constexpr uint32_t flow_label_for_qps(uint32_t local_qpn, uint32_t remote_qpn) {
    uint64_t v = static_cast<uint64_t>(local_qpn) * remote_qpn;
    v ^= v >> 20;
    v ^= v >> 40;
    return static_cast<uint32_t>(v & kFlowLabelMask);
}

// The UDP source port of a flow label: its low 14 bits folded with its high 6.
constexpr uint16_t udp_source_port_for_flow(uint32_t flow_label) {
    uint32_t low = flow_label & 0x3fff;
    const uint32_t high = flow_label & 0xfc000;
    low ^= high >> 14;
    return static_cast<uint16_t>(low | kRoceUdpSourcePortMin);
}

} // namespace softhca::transport
