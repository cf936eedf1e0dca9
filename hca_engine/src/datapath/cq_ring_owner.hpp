// The engine's side of a completion queue ring: the memfd it creates, maps, and hands
// to the provider (layout in device_interface/cq_ring.hpp).
#pragma once

#include "shared_memory.hpp"
#include "softhca/device_interface/cq_ring.hpp"

#include <cstddef>
#include <cstdint>

namespace softhca::engine {

class CqRingOwner {
  public:
    // Creates a ring with `slots` entries (a power of two). Returns 0 or an errno.
    int create(uint32_t slots);

    int share() const { return memory_.share(); } // SharedMemory::share
    size_t bytes() const { return memory_.bytes(); }
    uint32_t slots() const { return slots_; }
    uint64_t pending() const;

    // Moves the entries the consumer has not read yet into `target` (which must be new
    // and large enough). Used by resize.
    void move_pending_to(CqRingOwner& target);

    // Appends one completion; returns false (and marks overrun) when the ring is full.
    bool push(const device_interface::CompletionEntry& entry);

    // After a push: whether the completion just added satisfies the arm the provider set
    // with ibv_req_notify_cq (11.4.2.2: the next completion, or with solicited-only the
    // next solicited or unsuccessful one). Taking it disarms the CQ, so one arm gives at
    // most one event.
    bool take_notification(bool solicited_or_error);
    // Counts an event written into the CQ's channel (the provider's destroy_cq waits
    // until the application has acknowledged every one it read).
    void count_event() { header_->events.fetch_add(1, std::memory_order_release); }

  private:
    SharedMemory memory_;
    device_interface::CqRingHeader* header_ = nullptr;
    // The provider can write the shared header: sizes are never read back from it.
    uint32_t slots_ = 0;
};

} // namespace softhca::engine
