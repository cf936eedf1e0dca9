// A shaped link at a port's transmitter (issue 14's "shaped link"; like netem with a
// token bucket, but in the engine): a rate limit, a one-way delay and a limit on the
// bytes queued for the wire. Off by default; it sits behind the fault injector. Sans I/O
// and generic over the frame handle (a DPDK mbuf, a simulated frame): fed frames and
// time, it says which frames leave when, and which it dropped for lack of queue.
//
// A frame is serialized at the rate after the frames before it (its wire time ends at
// max(now, the previous frame's end) + bits / rate), then arrives `delay` later. The
// queue is the frames whose serialization has not ended: its depth in bytes is what a
// switch's ECN marking and the queue limit look at.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>

namespace softhca::engine {

struct ShaperConfig {
    double rate_bps = 0;            // 0: no rate limit
    uint64_t delay_ns = 0;          // one-way
    uint64_t queue_limit_bytes = 0; // 0: no limit
    bool enabled() const { return rate_bps > 0 || delay_ns > 0 || queue_limit_bytes > 0; }
};

// Parses "rate_mbps=1000,delay_us=50,queue_kb=256" (any subset).
std::optional<ShaperConfig> parse_shaper_config(const std::string& text, std::string& error);
std::string describe(const ShaperConfig& config);

template <typename Frame> class LinkShaper {
  public:
    explicit LinkShaper(const ShaperConfig& config = {}) : config_(config) {}
    bool enabled() const { return config_.enabled(); }
    const ShaperConfig& config() const { return config_; }

    // A frame to send at `now`: false when the queue has no room (the caller frees it and
    // counts the drop).
    bool enqueue(Frame frame, uint32_t bytes, uint64_t now) {
        settle(now);
        if (config_.queue_limit_bytes && queued_bytes_ + bytes > config_.queue_limit_bytes) {
            ++dropped_;
            return false;
        }
        const uint64_t start = wire_free_at_ > now ? wire_free_at_ : now;
        const uint64_t wire_ns =
            config_.rate_bps > 0
                ? static_cast<uint64_t>(static_cast<double>(bytes) * 8e9 / config_.rate_bps)
                : 0;
        wire_free_at_ = start + wire_ns;
        frames_.push_back({frame, bytes, wire_free_at_, wire_free_at_ + config_.delay_ns});
        queued_bytes_ += bytes;
        ++serializing_;
        return true;
    }

    // The frames that have arrived by `now`, oldest first: calls deliver(frame) for each.
    template <typename Deliver> size_t release(uint64_t now, Deliver&& deliver) {
        settle(now);
        size_t n = 0;
        while (!frames_.empty() && frames_.front().arrives <= now) {
            deliver(frames_.front().frame);
            frames_.pop_front(); // arrived, so serialized: settle() counted it out
            ++n;
        }
        return n;
    }

    // Bytes queued for the wire at `now` (serialization not ended).
    uint64_t queue_bytes(uint64_t now) {
        settle(now);
        return queued_bytes_;
    }
    // When the next frame arrives, or UINT64_MAX when none is held.
    uint64_t next_release() const { return frames_.empty() ? UINT64_MAX : frames_.front().arrives; }
    size_t held() const { return frames_.size(); }
    uint64_t dropped() const { return dropped_; }

  private:
    struct Held {
        Frame frame;
        uint32_t bytes;
        uint64_t wire_done; // its serialization ends
        uint64_t arrives;   // at the peer
    };
    // Frames whose serialization ended leave the queue's depth (they are on the wire).
    void settle(uint64_t now) {
        while (serializing_ > 0) {
            const Held& h = frames_[frames_.size() - serializing_];
            if (h.wire_done > now)
                break;
            queued_bytes_ -= h.bytes;
            --serializing_;
        }
    }
    ShaperConfig config_;
    std::deque<Held> frames_;
    size_t serializing_ = 0; // the newest this many frames of frames_
    uint64_t queued_bytes_ = 0;
    uint64_t wire_free_at_ = 0;
    uint64_t dropped_ = 0;
};

} // namespace softhca::engine
