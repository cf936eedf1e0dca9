#include "softhca/transport/priority_flow_control.hpp"

#include "softhca/transport/byte_order.hpp"
#include "softhca/transport/roce_frame.hpp"

#include <algorithm>
#include <cstring>

namespace softhca::transport {

namespace {
// After the Ethernet header: the opcode, the class-enable vector, eight 16-bit times.
constexpr size_t kOpcodeAt = kEthernetHeaderBytes;
constexpr size_t kEnableAt = kOpcodeAt + 2;
constexpr size_t kQuantaAt = kEnableAt + 2;
constexpr size_t kPfcContentEnd = kQuantaAt + 2 * 8;

uint64_t quanta_ns(uint16_t quanta, double line_rate_bps) {
    const double rate = line_rate_bps > 0 ? line_rate_bps : 100e9;
    return static_cast<uint64_t>(static_cast<double>(quanta) * kPfcQuantumBits * 1e9 / rate);
}
} // namespace

size_t write_pfc_frame(uint8_t* out, const MacAddress& source, const PfcFrame& frame) {
    std::memset(out, 0, kPfcFrameBytes);
    std::copy(kPfcMac.begin(), kPfcMac.end(), out);
    std::copy(source.begin(), source.end(), out + 6);
    store_be16(out + 12, kMacControlEtherType);
    store_be16(out + kOpcodeAt, kPfcOpcode);
    store_be16(out + kEnableAt, frame.enable);
    for (size_t p = 0; p < 8; ++p)
        store_be16(out + kQuantaAt + 2 * p, frame.quanta[p]);
    return kPfcFrameBytes;
}

bool is_mac_control_frame(const uint8_t* data, size_t length) {
    return length >= kEthernetHeaderBytes && load_be16(data + 12) == kMacControlEtherType;
}

bool parse_pfc_frame(const uint8_t* data, size_t length, PfcFrame& out) {
    if (!is_mac_control_frame(data, length) || length < kPfcContentEnd ||
        load_be16(data + kOpcodeAt) != kPfcOpcode)
        return false;
    out.enable = static_cast<uint8_t>(load_be16(data + kEnableAt)); // the upper byte: reserved
    for (size_t p = 0; p < 8; ++p)
        out.quanta[p] = load_be16(data + kQuantaAt + 2 * p);
    return true;
}

void PfcPauses::on_frame(const PfcFrame& frame, uint64_t now, double line_rate_bps) {
    for (size_t p = 0; p < 8; ++p)
        if (frame.enable & enabled_ & (1u << p)) // 802.1Q clause 36: PFC-enabled only
            until_[p] = frame.quanta[p] ? now + quanta_ns(frame.quanta[p], line_rate_bps) : 0;
}

uint8_t PfcPauses::paused_mask(uint64_t now) const {
    uint8_t mask = 0;
    for (size_t p = 0; p < 8; ++p)
        if (now < until_[p])
            mask |= static_cast<uint8_t>(1u << p);
    return mask;
}

uint64_t PfcPauses::next_resume(uint64_t now) const {
    uint64_t next = UINT64_MAX;
    for (uint64_t until : until_)
        if (now < until)
            next = std::min(next, until);
    return next;
}

bool PfcRequester::after_round(bool backlogged, uint8_t priorities, uint64_t now,
                               double line_rate_bps, PfcFrame& out) {
    out = PfcFrame{};
    if (backlogged) {
        // 802.1Q clause 36: PFC-enabled priorities only.
        const uint8_t wanted = static_cast<uint8_t>(paused_ | (priorities & enabled_));
        if (wanted == paused_ && now < renew_at_)
            return false; // paused, and the pause still runs
        paused_ = wanted;
        renew_at_ = now + quanta_ns(kPfcMaxQuanta, line_rate_bps) / 2;
        out.enable = paused_;
        for (size_t p = 0; p < 8; ++p)
            if (paused_ & (1u << p))
                out.quanta[p] = kPfcMaxQuanta;
        return paused_ != 0;
    }
    if (!paused_)
        return false;
    out.enable = paused_; // XON: every quanta 0
    paused_ = 0;
    renew_at_ = 0;
    return true;
}

} // namespace softhca::transport
