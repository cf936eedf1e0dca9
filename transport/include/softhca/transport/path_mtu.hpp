// Path MTU values as IBTA encodes them (9.6.1 / 14.2.5.6 PortInfo: 1=256 .. 5=4096)
// and the mapping from an Ethernet MTU to the largest IB MTU whose RoCEv2 packet fits
// (Annex A17.4: the IB payload rides in UDP/IP, so headers must fit beside it).
#pragma once

#include <cstdint>
#include <optional>

namespace softhca::transport {

enum class PathMtu : uint8_t { Mtu256 = 1, Mtu512 = 2, Mtu1024 = 3, Mtu2048 = 4, Mtu4096 = 5 };

constexpr uint32_t path_mtu_bytes(PathMtu mtu) {
    return 128u << static_cast<uint8_t>(mtu);
}

constexpr std::optional<PathMtu> path_mtu_from_code(uint32_t code) {
    if (code < 1 || code > 5)
        return std::nullopt;
    return static_cast<PathMtu>(code);
}

// Bytes a RoCEv2 packet spends around the IB payload inside the Ethernet MTU:
// IPv4 (20) + UDP (8) + BTH (12) + the largest extension header set a
// payload-carrying packet has (RETH 16 + ImmDt 4) + ICRC (4).
constexpr uint32_t kRoceV2IpOverhead = 20 + 8 + 12 + 16 + 4 + 4;

// The largest IB path MTU that fits in an Ethernet MTU (what a RoCE HCA reports as
// active_mtu). Returns nullopt when even 256 bytes do not fit.
constexpr std::optional<PathMtu> path_mtu_for_ethernet_mtu(uint32_t eth_mtu) {
    for (uint8_t code = 5; code >= 1; --code) {
        auto mtu = static_cast<PathMtu>(code);
        if (path_mtu_bytes(mtu) + kRoceV2IpOverhead <= eth_mtu)
            return mtu;
    }
    return std::nullopt;
}

} // namespace softhca::transport
