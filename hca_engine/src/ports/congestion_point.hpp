// A port's congestion point: the shaped link of link_shaper.hpp and, on its
// queue, what a switch's egress does under congestion: RED marking of ECN Congestion
// Experienced on ECN-capable frames (RFC 3168; RoCEv2 A17.9.1), and drops when the
// queue is full. Sans I/O and generic over the frame handle, as LinkShaper: the port
// code (dpdk_ports.cpp) gives it frames and time and sends what it releases.
//
// Without a shaped link there is no queue here (the engine hands every frame to the
// wire at once), so nothing is marked: the shaped link is where congestion forms.
//
// With link-level credits (between softhca ports; transport/link_flow_control.hpp) the
// queue is lossless: frames start only against the far end's credits, the data path asks
// room() before it builds one, and the port exchanges flow-control frames with its peer
// (flow_control_frame(), on_flow_control()).
#pragma once

#include "link_shaper.hpp"
#include "softhca/transport/congestion_control.hpp"
#include "softhca/transport/roce_frame.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>

namespace softhca::engine {

struct CongestionPointConfig {
    ShaperConfig shaper;                                        // off: no queue, nothing below
    std::optional<transport::EcnMarkingParameters> ecn_marking; // off unless configured
    // Which VL's frame goes on the wire next (transport/vl_arbiter.hpp).
    transport::VlArbitrationTables arbitration = transport::VlArbitrationTables::round_robin();
    // Link-level credits: the receive buffer granted per VL, in bytes; 0: off.
    uint32_t credit_buffer_bytes = 0;
    uint64_t credit_refresh_ns = 1'000'000;
};

// One VL's queue at the congestion point.
struct VlQueueCounters {
    uint64_t queued = 0;           // frames that joined it
    uint64_t dropped = 0;          // found it full
    uint64_t marked = 0;           // ECN Congestion Experienced set
    uint64_t sent_bytes = 0;       // put on the wire
    uint64_t queue_bytes = 0;      // when last looked at
    uint64_t peak_queue_bytes = 0; // the most it held
    // With link-level credits (data VLs): as LinkCreditPort::VlState.
    transport::LinkCreditPort::VlState credits{};
};

struct CongestionPointCounters {
    uint64_t queued = 0;           // frames that joined a queue
    uint64_t dropped = 0;          // found it full (the queue limit)
    uint64_t marked = 0;           // ECN Congestion Experienced set
    uint64_t above_kmax = 0;       // found their VL's queue at or above the marking's kmax
    uint64_t queue_bytes = 0;      // all VLs, when last looked at
    uint64_t peak_queue_bytes = 0; // the most they held
    std::array<VlQueueCounters, transport::kVlSlots> vls{};
    bool credits = false;              // link-level credits on
    uint32_t credit_buffer_blocks = 0; // granted per VL
    uint64_t flow_control_sent = 0;    // packets (one per data VL in each frame)
    uint64_t flow_control_received = 0;
    uint64_t flow_control_bad = 0; // CRC, VL or frame malformed: ignored
};

template <typename Frame> class CongestionPoint {
  public:
    CongestionPoint() = default;
    CongestionPoint(const CongestionPointConfig& config, uint64_t seed)
        : shaper_(config.shaper, config.arbitration), marking_(config.ecn_marking), rng_(seed) {
        if (marking_)
            marker_ = transport::EcnMarker(*marking_);
        if (config.credit_buffer_bytes) {
            credits_ = std::make_unique<transport::LinkCreditPort>(config.credit_buffer_bytes,
                                                                   config.credit_refresh_ns);
            shaper_.use_credits(credits_.get());
        }
    }
    bool enabled() const { return shaper_.enabled(); }
    bool lossless() const { return credits_ != nullptr; }

    // Whether `vl`'s queue has room for a frame of `bytes` (a lossless queue's senders
    // ask before they build one).
    bool room(uint64_t now, uint8_t vl, uint32_t bytes) { return shaper_.room(now, vl, bytes); }

    // A flow-control frame from the peer (its `count` packets).
    void on_flow_control(uint64_t now, const transport::FlowControlPacket* packets, int count,
                         CongestionPointCounters& counters) {
        if (!credits_)
            return;
        last_flow_control_ns_ = now;
        if (count < 0)
            credits_->malformed();
        shaper_.update_credits(now, [&] {
            for (int i = 0; i < count; ++i)
                credits_->on_packet(packets[i]);
        });
        look(now, counters);
    }
    // Writes the flow-control frame to send now, if one should go, at `out`
    // (kLinkFlowControlFrameBytes); returns its length or 0.
    size_t flow_control_frame(uint64_t now, const transport::MacAddress& source, uint8_t* out,
                              CongestionPointCounters& counters) {
        if (!credits_)
            return 0;
        shaper_.advance(now); // what was delivered and what waits, as of now
        if (!credits_->wants_to_send(now))
            return 0;
        transport::FlowControlPacket packets[transport::kCreditDataVls];
        const size_t n = credits_->make_packets(now, packets);
        look(now, counters);
        return transport::write_flow_control_frame(out, source, packets, n);
    }

    // A frame of `length` bytes at `data` to send at `now` on virtual lane `vl`. False
    // when its VL's queue had no room: the caller frees the frame (its drop is counted).
    bool enqueue(Frame frame, uint8_t* data, uint32_t length, uint64_t now, uint8_t vl,
                 CongestionPointCounters& counters) {
        vl &= 15;
        VlQueueCounters& lane = counters.vls[vl];
        const uint64_t depth = shaper_.queue_bytes(now, vl);
        if (!shaper_.enqueue(frame, length, now, vl)) {
            ++counters.dropped;
            ++lane.dropped;
            return false;
        }
        ++counters.queued;
        ++lane.queued;
        if (marking_) {
            if (depth >= marking_->kmax_bytes)
                ++counters.above_kmax;
            if (marker_.mark(depth, uniform_(rng_)) &&
                transport::mark_congestion_experienced(data, length)) {
                ++counters.marked;
                ++lane.marked;
            }
        }
        look(now, counters);
        return true;
    }

    // The frames that reached the far end of the link by `now`: deliver(frame) each.
    template <typename Deliver>
    size_t release(uint64_t now, CongestionPointCounters& counters, Deliver&& deliver) {
        const size_t n = shaper_.release(now, deliver);
        look(now, counters);
        return n;
    }
    // Whether a VL waits for credits from a peer that answered within the last 10 ms:
    // they are on the way, and the engine should look for them rather than sleep (a peer
    // that went quiet is asked again at the refresh, and the engine may sleep until then).
    bool awaiting_credits(uint64_t now) const {
        return credits_ && credits_->next_refresh() != UINT64_MAX &&
               now - last_flow_control_ns_ < 10'000'000;
    }
    // When the next frame arrives (or a VL waiting for credits asks again), or UINT64_MAX.
    uint64_t next_release() const {
        return std::min(shaper_.next_release(), credits_ ? credits_->next_refresh() : UINT64_MAX);
    }
    size_t held() const { return shaper_.held(); }
    // Bytes queued for the wire at `now` (serialization not ended), all VLs.
    uint64_t queue_bytes(uint64_t now) { return shaper_.queue_bytes(now); }

  private:
    // The queues' depths and what each VL sent, into the counters.
    void look(uint64_t now, CongestionPointCounters& counters) {
        counters.queue_bytes = shaper_.queue_bytes(now);
        counters.peak_queue_bytes = std::max(counters.peak_queue_bytes, counters.queue_bytes);
        for (size_t vl = 0; vl < transport::kVlSlots; ++vl) {
            VlQueueCounters& lane = counters.vls[vl];
            lane.queue_bytes = shaper_.queued(static_cast<uint8_t>(vl));
            lane.peak_queue_bytes = std::max(lane.peak_queue_bytes, lane.queue_bytes);
            lane.sent_bytes = shaper_.sent_bytes()[vl];
            if (credits_ && vl < transport::kCreditDataVls)
                lane.credits = credits_->vl_state(static_cast<uint8_t>(vl));
        }
        if (credits_) {
            counters.credits = true;
            counters.credit_buffer_blocks = credits_->buffer_blocks();
            counters.flow_control_sent = credits_->packets_sent();
            counters.flow_control_received = credits_->packets_received();
            counters.flow_control_bad = credits_->packets_bad();
        }
    }
    LinkShaper<Frame> shaper_;
    // Owned here, at a fixed address the shaper keeps (a CongestionPoint is moved).
    std::unique_ptr<transport::LinkCreditPort> credits_;
    uint64_t last_flow_control_ns_ = 0; // a flow-control frame last came
    std::optional<transport::EcnMarkingParameters> marking_;
    transport::EcnMarker marker_;
    std::mt19937_64 rng_{1};
    std::uniform_real_distribution<double> uniform_{0.0, 1.0};
};

} // namespace softhca::engine
