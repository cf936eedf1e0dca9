// RoCEv2 framing (IBTA Annex A17): Ethernet, IPv4 or IPv6, UDP to port 4791, the IB
// transport packet, and the invariant CRC (A17.4.2: CRC-32 over the IP and UDP headers
// and the IB packet with the variant fields masked, preceded by 64 bits of ones).
#pragma once

#include "softhca/transport/roce_address.hpp"

#include <cstddef>
#include <cstdint>

namespace softhca::transport {

constexpr uint16_t kRoceV2UdpPort = 4791;
constexpr uint16_t kEtherTypeIpv4 = 0x0800;
constexpr uint16_t kEtherTypeIpv6 = 0x86dd;
constexpr uint16_t kEtherTypeArp = 0x0806;
constexpr size_t kEthernetHeaderBytes = 14;
// An IEEE 802.1Q tag between the source MAC and the EtherType: TPID 0x8100, then PCP (3
// bits), DEI (1) and the VLAN ID (12). With VID 0 it is a priority tag (802.1p): it only
// carries the frame's priority, which RoCE takes from the SL (and PFC acts on).
constexpr uint16_t kEtherTypeVlan = 0x8100;
constexpr size_t kVlanTagBytes = 4;
constexpr size_t kIpv4HeaderBytes = 20;
constexpr size_t kIpv6HeaderBytes = 40;
constexpr size_t kUdpHeaderBytes = 8;
constexpr size_t kIcrcBytes = 4;

// IPv4-mapped GIDs travel as IPv4, all others as IPv6 (A17.4.5).
inline bool gid_is_ipv4_mapped(const Gid& gid) {
    for (int i = 0; i < 10; ++i)
        if (gid[static_cast<size_t>(i)])
            return false;
    return gid[10] == 0xff && gid[11] == 0xff;
}

struct FrameAddressing {
    MacAddress src_mac{};
    MacAddress dst_mac{};
    Gid src_gid{};
    Gid dst_gid{};
    uint16_t udp_src_port = 0xc000; // per-QP entropy (A17.4.5.1)
    uint8_t traffic_class = 0;      // IPv4 DSCP/ECN byte or IPv6 traffic class
    uint8_t hop_limit = 64;
    uint32_t flow_label = 0; // IPv6 only
    int8_t priority = -1;    // a priority tag's PCP (0..7), or -1: untagged
};

// Bytes in front of the IB packet for this addressing (Ethernet, a priority tag when it
// has one, IP, UDP).
size_t roce_header_bytes(const FrameAddressing& addressing);

// Whether a frame's ICRC (A17.4.2) is computed when it is built and checked when it
// arrives. Offloaded is for frames that this engine builds and receives itself without
// anything in between that could see or change them (as a NIC's own loopback with ICRC
// offload): the ICRC field is then zero on sending and not checked on arrival.
enum class Icrc : uint8_t {
    Computed,      // sent with its ICRC; checked on arrival
    Ipv4IdUnknown, // checked on arrival, the IPv4 header rebuilt by a receiver that could
                   // not see the identification and DF bit (a kernel UDP socket, which
                   // gives 0 and DF): it passes when some value of them explains the
                   // difference (icrc_ipv4_id.hpp)
    Offloaded,     // neither computed nor checked
};

// Writes Ethernet, IP and UDP headers in front of an IB packet of ib_length bytes that
// already sits at frame + roce_header_bytes(), then appends the ICRC after it (zero when
// `icrc` is Offloaded). Returns the whole frame length.
size_t finish_roce_frame(uint8_t* frame, const FrameAddressing& addressing, size_t ib_length,
                         uint16_t ipv4_id = 0, Icrc icrc = Icrc::Computed);

struct ParsedFrame {
    FrameAddressing addressing; // as found (src/dst swapped as seen by the receiver)
    const uint8_t* ib = nullptr;
    size_t ib_length = 0;        // BTH to end of pad, ICRC excluded
    const uint8_t* ip = nullptr; // the IP header
    size_t ip_header_length = 0;
};

enum class FrameError : uint8_t {
    None,
    NotRoce,     // not IPv4/IPv6 UDP to 4791 (ARP and the like are not errors of ours)
    Malformed,   // lengths or header fields inconsistent
    BadChecksum, // IPv4 header checksum
    BadIcrc,
};

// Parses and validates a RoCEv2 frame; `icrc` says how its ICRC is checked.
FrameError parse_roce_frame(const uint8_t* frame, size_t length, ParsedFrame& out,
                            Icrc icrc = Icrc::Computed);

// The 40 bytes a UD receive finds in front of its data (ibv_post_recv(3)): for RoCEv2 over
// IPv6 the IPv6 header; over IPv4, 20 zero bytes and then the IPv4 header, as
// rdma-core's ibv_init_ah_from_wc expects.
void grh_from_frame(const ParsedFrame& frame, uint8_t (&grh)[40]);

// The ICRC of a RoCEv2 frame's IP packet (ip points at the IP header, ip_length runs
// to the end of the IB packet without the ICRC). The value is sent little-endian.
uint32_t compute_icrc(const uint8_t* ip, size_t ip_length);

// The congestion point's mark (RFC 3168 5, RoCEv2 A17.9.1): sets the ECN field of the IP
// header of an Ethernet frame to Congestion Experienced when it is ECN-capable (ECT(0) or
// ECT(1)), updating the IPv4 header checksum. The ICRC does not cover the field
// (A17.4.2). Returns whether the frame is now marked (false: Not-ECT, already CE, or not
// an IPv4/IPv6 frame).
bool mark_congestion_experienced(uint8_t* frame, size_t length);

// Internet checksum (RFC 1071) of an IPv4 header.
uint16_t ipv4_header_checksum(const uint8_t* header, size_t length);

} // namespace softhca::transport
