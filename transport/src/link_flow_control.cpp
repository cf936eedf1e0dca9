#include "softhca/transport/link_flow_control.hpp"

#include "softhca/transport/byte_order.hpp"
#include "softhca/transport/roce_frame.hpp"
#include "softhca/transport/settings_text.hpp"

#include <algorithm>
#include <cstring>

namespace softhca::transport {

namespace {
constexpr size_t kTagBytes = 6; // magic, version, count
} // namespace

std::string LinkCreditParameters::parse(const std::string& text, LinkCreditParameters& out) {
    LinkCreditParameters p = out;
    std::string error =
        for_each_setting(text == "on" ? "" : text, [&](const std::string& key, double v) {
            if (key == "buffer_kb" && v >= 1 && v <= 128)
                p.buffer_bytes = static_cast<uint32_t>(v * 1024);
            else if (key == "refresh_us" && v >= 10 && v <= 1e6)
                p.refresh_ns = static_cast<uint64_t>(v * 1000);
            else
                return false;
            return true;
        });
    if (!error.empty())
        return error + " (buffer_kb 1..128, refresh_us 10..1000000)";
    out = p;
    return {};
}

bool is_flow_control_frame(const uint8_t* frame, size_t length) {
    return length >= kEthernetHeaderBytes && load_be16(frame + 12) == kLinkFlowControlEtherType;
}

size_t write_flow_control_frame(uint8_t* out, const MacAddress& source,
                                const FlowControlPacket* packets, size_t count) {
    count = std::min<size_t>(count, kCreditDataVls);
    std::memset(out, 0, kLinkFlowControlFrameBytes);
    std::copy(kLinkFlowControlMac.begin(), kLinkFlowControlMac.end(), out);
    std::copy(source.begin(), source.end(), out + 6);
    store_be16(out + 12, kLinkFlowControlEtherType);
    store_be32(out + kEthernetHeaderBytes, kLinkFlowControlMagic);
    out[kEthernetHeaderBytes + 4] = kLinkFlowControlVersion;
    out[kEthernetHeaderBytes + 5] = static_cast<uint8_t>(count);
    std::memcpy(out + kEthernetHeaderBytes + kTagBytes, packets, count * sizeof(FlowControlPacket));
    return kLinkFlowControlFrameBytes; // padded alike whatever the count
}

int parse_flow_control_frame(const uint8_t* frame, size_t length, FlowControlPacket* out) {
    if (!is_flow_control_frame(frame, length) || length < kEthernetHeaderBytes + kTagBytes)
        return -1;
    const uint8_t* tag = frame + kEthernetHeaderBytes;
    if (load_be32(tag) != kLinkFlowControlMagic || tag[4] != kLinkFlowControlVersion)
        return -1;
    const size_t count = tag[5];
    if (count > kCreditDataVls ||
        length < kEthernetHeaderBytes + kTagBytes + count * sizeof(FlowControlPacket))
        return -1;
    std::memcpy(out, tag + kTagBytes, count * sizeof(FlowControlPacket));
    return static_cast<int>(count);
}

LinkCreditPort::LinkCreditPort(uint32_t buffer_bytes, uint64_t refresh_ns)
    : buffer_blocks_(std::min(credit_blocks(buffer_bytes), kMaxAdvertisedBlocks)),
      refresh_ns_(refresh_ns) {
    for (Vl& v : vls_)
        v.receiver = CreditReceiver(buffer_blocks_);
    asked_ = true; // our first packets ask the peer for its limits
}

bool LinkCreditPort::may_send(uint8_t vl, uint32_t bytes) const {
    return vl >= kCreditDataVls || vls_[vl].sender.may_send(bytes);
}

void LinkCreditPort::started(uint8_t vl, uint32_t bytes) {
    if (vl < kCreditDataVls)
        vls_[vl].sender.sent(bytes);
}

void LinkCreditPort::delivered(uint8_t vl, uint32_t bytes) {
    if (vl < kCreditDataVls)
        vls_[vl].delivered =
            static_cast<uint16_t>((vls_[vl].delivered + credit_blocks(bytes)) % kCreditModulus);
}

void LinkCreditPort::set_waiting(uint8_t vl, bool waiting, uint64_t now) {
    if (vl >= kCreditDataVls || vls_[vl].waiting == waiting)
        return;
    vls_[vl].waiting = waiting;
    if (waiting) {
        ++vls_[vl].waits;
        // Ask at once if nothing was sent for a refresh interval (the peer may have
        // granted nothing yet); otherwise at the next refresh.
        if (now - last_sent_ >= refresh_ns_)
            asked_ = answer_owed_ = true;
    }
}

bool LinkCreditPort::on_packet(const FlowControlPacket& packet) {
    if (!packet.crc_ok() || packet.vl() >= kCreditDataVls) {
        ++packets_bad_;
        return false;
    }
    ++packets_received_;
    Vl& v = vls_[packet.vl()];
    v.sender.on_credit_limit(packet.fccl());
    v.receiver.on_sender_total(packet.fctbs()); // 7.9.4.2: ABR := FCTBS
    if (packet.op() == FlowControlPacket::kOpInit)
        answer_owed_ = true;
    return true;
}

bool LinkCreditPort::wants_to_send(uint64_t now) const {
    if (answer_owed_)
        return true;
    for (const Vl& v : vls_) {
        // What reached the peer is reported a quarter of its buffer at a time (a frame
        // per round would cost as many frames as the data), and all of it once nothing
        // more is on the way; a new limit of ours goes at once (it is what the peer waits
        // for).
        const uint32_t unreported = (v.delivered + kCreditModulus - v.reported) % kCreditModulus;
        if (unreported >= std::max<uint32_t>(buffer_blocks_ / 4, 1) ||
            (unreported && v.delivered == v.sender.fctbs()) ||
            v.receiver.credit_limit() != v.advertised)
            return true;
    }
    return now >= next_refresh();
}

size_t LinkCreditPort::make_packets(uint64_t now, FlowControlPacket* out) {
    const bool refresh = now >= next_refresh();
    const uint8_t op =
        asked_ || refresh ? FlowControlPacket::kOpInit : FlowControlPacket::kOpNormal;
    for (uint8_t vl = 0; vl < kCreditDataVls; ++vl) {
        Vl& v = vls_[vl];
        v.reported = v.delivered;
        v.advertised = v.receiver.credit_limit();
        out[vl].set(op, v.reported, vl, v.advertised);
    }
    answer_owed_ = asked_ = false;
    last_sent_ = now;
    packets_sent_ += kCreditDataVls;
    return kCreditDataVls;
}

uint64_t LinkCreditPort::next_refresh() const {
    for (const Vl& v : vls_)
        if (v.waiting)
            return last_sent_ + refresh_ns_;
    return UINT64_MAX;
}

LinkCreditPort::VlState LinkCreditPort::vl_state(uint8_t vl) const {
    const Vl& v = vls_[vl % kCreditDataVls];
    return {v.sender.fctbs(), v.sender.fccl(), v.sender.available_blocks(),
            v.receiver.abr(), v.advertised,    v.waits,
            v.waiting};
}

} // namespace softhca::transport
