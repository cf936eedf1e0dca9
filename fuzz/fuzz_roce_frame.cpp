// Fuzz target: a frame as it arrives at a port. Every parser the engine runs on received
// bytes (ARP, IPv6 Neighbor Discovery, RoCEv2 with each way of checking the ICRC, the IB
// headers behind it, a UD receive's GRH, a link flow-control frame and its packets fed to
// a port's credits) must refuse what is malformed without reading outside the frame, and
// what it accepts must be consistent with the frame.
#include "arp.hpp"
#include "neighbor_discovery.hpp"
#include "softhca/transport/ib_packet.hpp"
#include "softhca/transport/link_flow_control.hpp"
#include "softhca/transport/roce_frame.hpp"
#include "softhca/transport/work_requests.hpp"

#include <cstdlib>
#include <vector>

namespace tp = softhca::transport;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    // A copy of exactly `size` bytes, so that ASan sees any read past the frame.
    const std::vector<uint8_t> frame(data, data + size);
    softhca::engine::ArpMessage arp;
    (void)softhca::engine::parse_arp(frame.data(), frame.size(), arp);
    softhca::engine::NdMessage nd;
    (void)softhca::engine::parse_neighbor_discovery(frame.data(), frame.size(), nd);
    tp::FlowControlPacket packets[tp::kCreditDataVls];
    const int count = tp::parse_flow_control_frame(frame.data(), frame.size(), packets);
    if (count > tp::kCreditDataVls)
        std::abort();
    if (count > 0) {
        tp::LinkCreditPort port(64 * 1024, 1'000'000);
        for (int i = 0; i < count; ++i)
            if (port.on_packet(packets[i]) &&
                port.vl_state(packets[i].vl()).fccl != packets[i].fccl())
                std::abort(); // an accepted packet's limit is the sender's
        tp::FlowControlPacket out[tp::kCreditDataVls];
        (void)port.make_packets(0, out);
    }
    for (tp::Icrc icrc : {tp::Icrc::Computed, tp::Icrc::Ipv4IdUnknown, tp::Icrc::Offloaded}) {
        tp::ParsedFrame parsed;
        if (tp::parse_roce_frame(frame.data(), frame.size(), parsed, icrc) != tp::FrameError::None)
            continue;
        // The IB packet lies inside the frame.
        if (parsed.ib < frame.data() || parsed.ib + parsed.ib_length > frame.data() + frame.size())
            std::abort();
        uint8_t grh[tp::kGrhBytes];
        tp::grh_from_frame(parsed, grh);
        tp::IbPacket packet;
        if (tp::parse_ib_packet(parsed.ib, parsed.ib_length, packet) != tp::PacketError::None)
            continue;
        if (packet.payload_length &&
            (packet.payload < parsed.ib ||
             packet.payload + packet.payload_length > parsed.ib + parsed.ib_length))
            std::abort();
    }
    return 0;
}
