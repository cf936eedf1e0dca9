// IPv6 Neighbor Discovery (RFC 4861) for a port's IPv6 addresses: the IPv6 analogue of
// ARP, so that a peer (a Linux kernel among them) resolves softhca's addresses to its MAC
// and softhca resolves theirs. Neighbor Solicitations go to the target's solicited-node
// multicast group (RFC 4291 2.7.1) with our link-layer address; Advertisements answer
// them. Only these two messages are ours; other ICMPv6 is not.
#pragma once

#include "softhca/transport/roce_address.hpp"

#include <cstddef>
#include <cstdint>

namespace softhca::engine {

constexpr uint8_t kIcmpv6NextHeader = 58;
constexpr uint8_t kNeighborSolicitation = 135;
constexpr uint8_t kNeighborAdvertisement = 136;
// Ethernet, IPv6, and an NS or NA with one link-layer address option (24 + 8 bytes).
constexpr size_t kNdFrameBytes = 14 + 40 + 32;

struct NdMessage {
    bool solicitation = false;         // NS; else NA
    transport::MacAddress frame_src{}; // the Ethernet source
    transport::Gid source{};           // IPv6 source (:: for a DAD probe)
    transport::Gid destination{};      // IPv6 destination
    transport::Gid target{};
    bool has_link_layer = false; // source (NS) or target (NA) link-layer address option
    transport::MacAddress link_layer{};
    bool solicited = false; // NA flags (RFC 4861 4.4)
    bool override_flag = false;
};

enum class NdParse : uint8_t {
    NotNd,     // not an ICMPv6 NS or NA
    Malformed, // an NS or NA failing RFC 4861 7.1.1 / 7.1.2 validation
    Ok,
};

NdParse parse_neighbor_discovery(const uint8_t* frame, size_t length, NdMessage& out);

// ff02::1:ffXX:XXXX for the low 24 bits of `address`.
transport::Gid solicited_node_group(const transport::Gid& address);
// 33:33 and the group's low 32 bits (RFC 2464 7).
transport::MacAddress ipv6_multicast_mac(const transport::Gid& group);

// A solicitation for `target` from `source` (one of the port's addresses), to the
// target's solicited-node group; returns the frame's size.
size_t build_neighbor_solicitation(uint8_t* frame, const transport::MacAddress& our_mac,
                                   const transport::Gid& source, const transport::Gid& target);

// An advertisement of our `target` to `destination` at `destination_mac` (all-nodes
// ff02::1 for an answer to a DAD probe, with `solicited` false); returns the frame's size.
size_t build_neighbor_advertisement(uint8_t* frame, const transport::MacAddress& our_mac,
                                    const transport::MacAddress& destination_mac,
                                    const transport::Gid& destination, const transport::Gid& target,
                                    bool solicited);

// The ICMPv6 checksum (RFC 4443 2.3) over the IPv6 pseudo-header and the message.
uint16_t icmpv6_checksum(const transport::Gid& source, const transport::Gid& destination,
                         const uint8_t* message, size_t length);

} // namespace softhca::engine
