// A shared receive queue inside the engine (ibv_srq): the ring the provider posts
// receive requests to, the transport's ReceiveQueue its QPs take them from, and the
// memory (the SRQ's own protection domain) the buffers live in.
#pragma once

#include "process_memory.hpp"
#include "shared_memory.hpp"
#include "softhca/device_interface/doorbell_page.hpp"
#include "softhca/device_interface/qp_ring.hpp"
#include "softhca/transport/receive_queue.hpp"

#include <cstdint>

namespace softhca::engine {

struct CompletionQueue;
class QueueContext;

struct SrqLimits {
    static constexpr uint32_t kMaxSrq = 4096;
    static constexpr uint32_t kMaxSrqWr = 16384;
    static constexpr uint32_t kMaxSrqSge = transport::kMaxSge;
};

class EngineSrq {
  public:
    // XRC SRQs (xrc_cq set) belong to an XRC domain and complete into their own CQ.
    struct Xrc {
        CompletionQueue* cq = nullptr;
        uint32_t xrcd_handle = 0; // the creating context's handle of the domain
        uint32_t domain = 0;      // KeySpace id
    };
    EngineSrq(uint32_t handle, uint32_t srq_num, QueueContext& context, uint32_t pd_handle,
              uint32_t max_wr, uint32_t max_sge, uint64_t user_handle, const Xrc& xrc);

    // Creates the shared ring, whose bit in the context's doorbell page is
    // `doorbell_slot`; returns 0 or an errno.
    int create_ring(uint32_t doorbell_slot);
    uint32_t doorbell_slot() const { return doorbell_slot_; }
    int share_ring() const { return ring_memory_.share(); } // SharedMemory::share
    // What it costs the engine: its ring and the state per work request.
    uint64_t engine_bytes() const { return engine_bytes_at(max_wr_); }
    // What it would hold resized to `max_wr` (a power of two): its ring and WQE state.
    uint64_t engine_bytes_at(uint32_t max_wr) const;
    size_t ring_bytes() const { return ring_memory_.bytes(); }

    // ibv_modify_srq: IBV_SRQ_MAX_WR (a new, empty ring; what was posted moves into the
    // engine first) and IBV_SRQ_LIMIT. Returns 0 or an errno.
    int modify(uint32_t attr_mask, uint32_t max_wr, uint32_t limit, bool& new_ring);

    // Data path: takes posted requests off the ring. `left_in_ring`: some stay there
    // because the queue is full.
    bool pull_work(bool& left_in_ring);
    // After a round: frees the ring slots of taken requests and raises
    // IBV_EVENT_SRQ_LIMIT_REACHED when the limit fired.
    void sync();

    transport::ReceiveQueue& queue() { return queue_; }
    ProcessMemory& memory() { return memory_; }
    uint32_t handle() const { return handle_; }
    uint32_t srq_num() const { return srq_num_; }
    uint32_t pd_handle() const { return pd_handle_; }
    uint32_t max_wr() const { return max_wr_; }
    uint32_t max_sge() const { return max_sge_; }
    CompletionQueue* xrc_cq() const { return xrc_.cq; }
    const Xrc& xrc() const { return xrc_; }
    uint32_t qp_count = 0; // QPs attached

  private:
    uint32_t handle_;
    uint32_t srq_num_;
    uint32_t pd_handle_;
    uint32_t max_wr_;
    uint32_t max_sge_;
    uint64_t user_handle_;
    Xrc xrc_;
    QueueContext& context_;
    ProcessMemory memory_;
    transport::ReceiveQueue queue_;
    SharedMemory ring_memory_;
    device_interface::QpRingHeader* ring_ = nullptr;
    uint32_t slot_size_ = 0;
    uint32_t doorbell_slot_ = device_interface::kNoDoorbellSlot;
    uint64_t pulled_ = 0;    // from the current ring
    uint64_t published_ = 0; // rq_completed as last written
};

} // namespace softhca::engine
