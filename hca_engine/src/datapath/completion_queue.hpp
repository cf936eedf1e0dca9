// A completion queue as the engine keeps it: the ring the provider polls, the channel its
// events go to, and what its QPs need to know of it. Made and destroyed by the control
// room (control/resource_tables.hpp); completions are pushed by the QPs that use it.
#pragma once

#include "completion_channel.hpp"
#include "cq_ring_owner.hpp"

#include <cstdint>

namespace softhca::engine {

struct CompletionQueue {
    uint64_t user_handle = 0;
    uint32_t cqe = 0;
    uint32_t comp_vector = 0;
    uint32_t qp_count = 0; // QPs (and XRC SRQs) that complete into it
    bool overrun_reported = false;
    bool timestamps = false; // completions carry their time (kCreateCqTimestamps)
    CqRingOwner ring;
    CompletionChannel channel; // not attached when created without one
};

} // namespace softhca::engine
