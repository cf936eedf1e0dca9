// A shaped link at a port's transmitter (like netem with a
// token bucket, but in the engine): a rate limit, a one-way delay and a limit on the
// bytes queued for the wire, with a queue per virtual lane and IBTA's arbiter (7.6.9,
// transport/vl_arbiter.hpp) choosing which VL's head frame goes on the wire next. Off by
// default; it sits behind the fault injector. Sans I/O and generic over the frame handle
// (a DPDK mbuf, a simulated frame): fed frames and time, it says which frames leave when,
// and which it dropped for lack of queue.
//
// The wire is one: when it is free, the arbiter picks among the VLs whose head frame has
// arrived by then, and that frame is serialized at the rate (bits / rate), then arrives
// `delay` later. A VL's queue is its frames whose serialization has not ended: its depth
// in bytes is what a switch's ECN marking and the queue limit (per VL, as a switch's
// per-priority buffers) look at. A frame waiting on one VL never holds back another's.
//
// With link-level credits (use_credits, transport/link_flow_control.hpp) a VL's head
// frame starts on the wire only against the far end's credits, and nothing is dropped
// for lack of queue: the queue limit is the room the data path asks for before it builds
// a frame (room()), so a full VL holds back its senders instead.
#pragma once

#include "softhca/transport/link_flow_control.hpp"
#include "softhca/transport/vl_arbiter.hpp"

#include <array>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>

namespace softhca::engine {

struct ShaperConfig {
    double rate_bps = 0;            // 0: no rate limit
    uint64_t delay_ns = 0;          // one-way
    uint64_t queue_limit_bytes = 0; // per VL; 0: no limit
    bool enabled() const { return rate_bps > 0 || delay_ns > 0 || queue_limit_bytes > 0; }
};

// Parses "rate_mbps=1000,delay_us=50,queue_kb=256" (any subset).
std::optional<ShaperConfig> parse_shaper_config(const std::string& text, std::string& error);
std::string describe(const ShaperConfig& config);

template <typename Frame> class LinkShaper {
  public:
    explicit LinkShaper(const ShaperConfig& config = {},
                        const transport::VlArbitrationTables& arbitration =
                            transport::VlArbitrationTables::round_robin())
        : config_(config), arbiter_(arbitration) {}
    bool enabled() const { return config_.enabled(); }
    const ShaperConfig& config() const { return config_; }

    // From now on frames start only against `credits` (which outlives the shaper), and
    // enqueue() never drops.
    void use_credits(transport::LinkCreditPort* credits) { credits_ = credits; }
    // Runs the wire up to `now` (what crossed it delivered, what may start started).
    void advance(uint64_t now) { settle(now); }
    // Whether `vl`'s queue has room for `bytes` more at `now` (always without a limit).
    bool room(uint64_t now, uint8_t vl, uint32_t bytes) {
        settle(now);
        return !config_.queue_limit_bytes ||
               queued_bytes_[vl & 15] + bytes <= config_.queue_limit_bytes;
    }
    // Changes the credits at `now` (apply() does): the wire runs up to now on the old
    // ones, and a frame they let start starts no earlier than now.
    template <typename Apply> void update_credits(uint64_t now, Apply&& apply) {
        settle(now);
        apply();
        if (wire_free_at_ < now)
            wire_free_at_ = now;
        settle(now);
    }

    // A frame to send at `now` on virtual lane `vl`: false when that VL's queue has no
    // room (the caller frees it and counts the drop).
    bool enqueue(Frame frame, uint32_t bytes, uint64_t now, uint8_t vl = 0) {
        vl &= 15;
        settle(now);
        if (!credits_ && config_.queue_limit_bytes &&
            queued_bytes_[vl] + bytes > config_.queue_limit_bytes) {
            ++dropped_;
            return false;
        }
        waiting_[vl].push_back({frame, bytes, now});
        queued_bytes_[vl] += bytes;
        total_queued_ += bytes;
        ++held_;
        settle(now); // an idle wire takes it at once
        return true;
    }

    // The frames that have arrived by `now`, in the order they left: deliver(frame) each.
    template <typename Deliver> size_t release(uint64_t now, Deliver&& deliver) {
        settle(now);
        size_t n = 0;
        while (!sent_.empty() && sent_.front().arrives <= now) {
            if (credits_)
                credits_->delivered(sent_.front().vl, sent_.front().bytes);
            deliver(sent_.front().frame);
            sent_.pop_front();
            --held_;
            ++n;
        }
        return n;
    }

    // Bytes queued for the wire at `now` (serialization not ended), on all VLs or one.
    uint64_t queue_bytes(uint64_t now) {
        settle(now);
        return total_queued_;
    }
    uint64_t queue_bytes(uint64_t now, uint8_t vl) {
        settle(now);
        return queued_bytes_[vl & 15];
    }
    // One VL's queue as of the last call that took a time.
    uint64_t queued(uint8_t vl) const { return queued_bytes_[vl & 15]; }
    // When the next frame arrives, or UINT64_MAX when none is held. (After settle() a
    // frame waits only while another is on the wire, and that one arrives first.)
    uint64_t next_release() const { return sent_.empty() ? UINT64_MAX : sent_.front().arrives; }
    size_t held() const { return held_; }
    uint64_t dropped() const { return dropped_; }
    // Bytes each VL has put on the wire (serialization begun).
    const std::array<uint64_t, transport::kVlSlots>& sent_bytes() const { return sent_bytes_; }

  private:
    struct Waiting {
        Frame frame;
        uint32_t bytes;
        uint64_t since;
    };
    struct Sent {
        Frame frame;
        uint8_t vl;
        uint32_t bytes;
        uint64_t wire_done; // its serialization ends
        uint64_t arrives;   // at the peer
    };
    // Runs the wire up to `now`: frames whose serialization ended leave their VL's queue;
    // whenever the wire is free, the arbiter starts the next frame among the VLs whose
    // head had arrived by then (and, with credits, has them).
    void settle(uint64_t now) {
        for (;;) {
            while (serializing_ > 0) {
                const Sent& s = sent_[sent_.size() - serializing_];
                if (s.wire_done > now)
                    break;
                queued_bytes_[s.vl] -= s.bytes;
                total_queued_ -= s.bytes;
                --serializing_;
            }
            if (serializing_ > 0 || held_ == sent_.size())
                return; // the wire is busy, or nothing waits
            uint64_t start = UINT64_MAX;
            std::array<bool, transport::kVlSlots> credited{};
            for (size_t vl = 0; vl < transport::kVlSlots; ++vl) {
                if (waiting_[vl].empty())
                    continue;
                const Waiting& w = waiting_[vl].front();
                const auto lane = static_cast<uint8_t>(vl);
                credited[vl] = !credits_ || credits_->may_send(lane, w.bytes);
                if (credits_)
                    credits_->set_waiting(lane, !credited[vl], now);
                if (credited[vl] && w.since < start)
                    start = w.since;
            }
            if (start == UINT64_MAX)
                return; // what waits has no credits
            if (start < wire_free_at_)
                start = wire_free_at_;
            if (start > now)
                return;
            std::array<uint32_t, transport::kVlSlots> head{};
            for (size_t vl = 0; vl < transport::kVlSlots; ++vl)
                if (credited[vl] && waiting_[vl].front().since <= start)
                    head[vl] = waiting_[vl].front().bytes;
            const int vl = arbiter_.pick(head);
            if (vl == transport::VlArbiter::kNone)
                return; // cannot happen: some head has arrived by `start`
            const Waiting w = waiting_[static_cast<size_t>(vl)].front();
            waiting_[static_cast<size_t>(vl)].pop_front();
            const uint64_t wire_ns =
                config_.rate_bps > 0
                    ? static_cast<uint64_t>(static_cast<double>(w.bytes) * 8e9 / config_.rate_bps)
                    : 0;
            if (credits_)
                credits_->started(static_cast<uint8_t>(vl), w.bytes);
            wire_free_at_ = start + wire_ns;
            sent_.push_back({w.frame, static_cast<uint8_t>(vl), w.bytes, wire_free_at_,
                             wire_free_at_ + config_.delay_ns});
            sent_bytes_[static_cast<size_t>(vl)] += w.bytes;
            ++serializing_;
        }
    }
    ShaperConfig config_;
    transport::VlArbiter arbiter_;
    transport::LinkCreditPort* credits_ = nullptr;
    std::array<std::deque<Waiting>, transport::kVlSlots> waiting_;
    std::deque<Sent> sent_;  // on the wire or crossing it, in the order they left
    size_t serializing_ = 0; // the newest this many of sent_ (at most one after settle)
    size_t held_ = 0;        // waiting and sent
    std::array<uint64_t, transport::kVlSlots> queued_bytes_{};
    std::array<uint64_t, transport::kVlSlots> sent_bytes_{};
    uint64_t total_queued_ = 0;
    uint64_t wire_free_at_ = 0;
    uint64_t dropped_ = 0;
};

} // namespace softhca::engine
