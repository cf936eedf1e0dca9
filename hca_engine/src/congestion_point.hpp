// A port's congestion point (issue 14): the shaped link of link_shaper.hpp and, on its
// queue, what a switch's egress does under congestion: RED marking of ECN Congestion
// Experienced on ECN-capable frames (RFC 3168; RoCEv2 A17.9.1), and drops when the
// queue is full. Sans I/O and generic over the frame handle, as LinkShaper: the port
// code (dpdk_ports.cpp) gives it frames and time and sends what it releases.
//
// Without a shaped link there is no queue here (the engine hands every frame to the
// wire at once), so nothing is marked: the shaped link is where congestion forms.
#pragma once

#include "link_shaper.hpp"
#include "softhca/transport/congestion_control.hpp"
#include "softhca/transport/roce_frame.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <random>

namespace softhca::engine {

struct CongestionPointConfig {
    ShaperConfig shaper;                                        // off: no queue, nothing below
    std::optional<transport::EcnMarkingParameters> ecn_marking; // off unless configured
    // Which VL's frame goes on the wire next (transport/vl_arbiter.hpp).
    transport::VlArbitrationTables arbitration = transport::VlArbitrationTables::round_robin();
};

// One VL's queue at the congestion point.
struct VlQueueCounters {
    uint64_t queued = 0;           // frames that joined it
    uint64_t dropped = 0;          // found it full
    uint64_t marked = 0;           // ECN Congestion Experienced set
    uint64_t sent_bytes = 0;       // put on the wire
    uint64_t queue_bytes = 0;      // when last looked at
    uint64_t peak_queue_bytes = 0; // the most it held
};

struct CongestionPointCounters {
    uint64_t queued = 0;           // frames that joined a queue
    uint64_t dropped = 0;          // found it full (the queue limit)
    uint64_t marked = 0;           // ECN Congestion Experienced set
    uint64_t above_kmax = 0;       // found their VL's queue at or above the marking's kmax
    uint64_t queue_bytes = 0;      // all VLs, when last looked at
    uint64_t peak_queue_bytes = 0; // the most they held
    std::array<VlQueueCounters, transport::kVlSlots> vls{};
};

template <typename Frame> class CongestionPoint {
  public:
    CongestionPoint() = default;
    CongestionPoint(const CongestionPointConfig& config, uint64_t seed)
        : shaper_(config.shaper, config.arbitration), marking_(config.ecn_marking), rng_(seed) {
        if (marking_)
            marker_ = transport::EcnMarker(*marking_);
    }
    bool enabled() const { return shaper_.enabled(); }

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
    // When the next frame arrives, or UINT64_MAX.
    uint64_t next_release() const { return shaper_.next_release(); }
    size_t held() const { return shaper_.held(); }

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
        }
    }
    LinkShaper<Frame> shaper_;
    std::optional<transport::EcnMarkingParameters> marking_;
    transport::EcnMarker marker_;
    std::mt19937_64 rng_{1};
    std::uniform_real_distribution<double> uniform_{0.0, 1.0};
};

} // namespace softhca::engine
