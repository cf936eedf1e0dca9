// A receive queue: the receive work requests of one QP's own RQ, or of a shared
// receive queue that several QPs take from (ibv_create_srq(3)), oldest first, and the
// memory their buffers live in (an SRQ's protection domain need not be its QPs').
// A QP takes the oldest request when a message begins; the SRQ limit (ibv_modify_srq(3)) fires
// once when a take leaves fewer requests than the armed limit.
#pragma once

#include "softhca/transport/memory_access.hpp"
#include "softhca/transport/work_requests.hpp"

#include <cstdint>
#include <vector>

namespace softhca::transport {

class ReceiveQueue {
  public:
    ReceiveQueue(uint32_t depth, MemoryAccess& memory);

    uint32_t size() const { return static_cast<uint32_t>(tail_ - head_); }
    bool empty() const { return head_ == tail_; }
    MemoryAccess& memory() { return memory_; }

    // False when full.
    bool post(const RecvWqe& wqe);
    // In place: the next free slot with its fields reset (the SGEs past num_sge are
    // left as they were), or nullptr when full; post_prepared() posts it.
    RecvWqe* prepare_post();
    void post_prepared() { ++tail_; }
    // The oldest request; only when !empty().
    const RecvWqe& front() const { return ring_[head_ % ring_.size()]; }
    // Removes the oldest request.
    void pop();
    // Drops every request (a reset or a destroyed SRQ: nothing completes).
    void clear() { head_ = tail_; }
    // Changes the depth keeping what is posted; false when more is posted than fits.
    bool resize(uint32_t depth);

    // 0 disarms. The event fires once, on the take that leaves size() < limit.
    void arm_limit(uint32_t limit) { limit_ = limit; }
    uint32_t limit() const { return limit_; }
    // True once after the limit fired.
    bool take_limit_event();

  private:
    std::vector<RecvWqe> ring_;
    uint64_t head_ = 0;
    uint64_t tail_ = 0;
    MemoryAccess& memory_;
    uint32_t limit_ = 0;
    bool limit_fired_ = false;
};

// How an XRC target finds the SRQ a message names in its XRCETH.
class SrqDirectory {
  public:
    virtual ~SrqDirectory() = default;
    // The XRC SRQ numbered `srqn` in the target's XRC domain, or nullptr.
    virtual ReceiveQueue* xrc_srq(uint32_t srqn) = 0;
};

} // namespace softhca::transport
