// Service levels, virtual lanes and the IP header's traffic class for RoCEv2.
// An SL (0..15, the address vector's `sl`) picks a VL through the port's SL-to-VL table
// (IBTA 7.6.6; SLtoVLMappingTable); VL15 is never a data VL. On RoCEv2 the SL itself is
// not on the wire: the traffic class (`grh.traffic_class`) travels as the IP header's
// DSCP (upper six bits) and ECN field (lower two, RFC 3168), which the congestion
// point marks Congestion Experienced.
#pragma once

#include "softhca/transport/vl_arbiter.hpp"

#include <array>
#include <cstdint>
#include <string>

namespace softhca::transport {

// RFC 3168 ECN codepoints, the low two bits of the traffic class / TOS.
enum class Ecn : uint8_t { NotEct = 0, Ect1 = 1, Ect0 = 2, Ce = 3 };

constexpr uint8_t dscp_of(uint8_t traffic_class) {
    return traffic_class >> 2;
}
constexpr Ecn ecn_of(uint8_t traffic_class) {
    return static_cast<Ecn>(traffic_class & 3);
}
constexpr uint8_t with_ecn(uint8_t traffic_class, Ecn ecn) {
    return static_cast<uint8_t>((traffic_class & ~3u) | static_cast<uint8_t>(ecn));
}
// Whether a switch may mark it CE rather than drop it: ECT(0), ECT(1) or already CE.
constexpr bool ecn_capable(uint8_t traffic_class) {
    return (traffic_class & 3) != 0;
}

class SlToVlTable {
  public:
    // SL n on VL n mod `data_vls` (the identity for 8 VLs and SLs 0..7).
    explicit SlToVlTable(unsigned data_vls = kDataVls);
    uint8_t vl(uint8_t sl) const { return vl_[sl & 15]; }
    // Parses "SL:VL,SL:VL,..." over the default (VLs 0..14). Empty or a message.
    static std::string parse(const std::string& text, SlToVlTable& out);
    std::string to_string() const; // all sixteen, "0:0,1:1,..."

  private:
    std::array<uint8_t, 16> vl_{};
};

} // namespace softhca::transport
