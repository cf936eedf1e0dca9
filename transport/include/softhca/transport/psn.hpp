// 24-bit packet sequence numbers (9.7.1): arithmetic modulo 2^24, and the signed
// distance that says whether a PSN is ahead of, equal to or behind another (a window
// of 2^23 either way, 9.7.5.1.1).
#pragma once

#include <cstdint>

namespace softhca::transport {

constexpr uint32_t kPsnMask = 0xffffff;

constexpr uint32_t psn_add(uint32_t psn, int64_t n) {
    return static_cast<uint32_t>(static_cast<int64_t>(psn) + n) & kPsnMask;
}

// a - b as a signed distance in [-2^23, 2^23).
constexpr int32_t psn_diff(uint32_t a, uint32_t b) {
    const uint32_t d = (a - b) & kPsnMask;
    return d & 0x800000 ? static_cast<int32_t>(d) - 0x1000000 : static_cast<int32_t>(d);
}

} // namespace softhca::transport
