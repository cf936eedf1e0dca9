// What QPs and SRQs share on the provider side: mapping a work queue ring the engine
// created, ringing the doorbell, and writing receive requests into a ring.
#pragma once

#include "../abi/verbs_private_abi34.h"
#include "provider.hpp"
#include "softhca/device_interface/qp_ring.hpp"

#include <cstddef>
#include <cstdint>

namespace softhca::provider {

// Maps (and closes) the ring's fd; nullptr when it is not a ring of our version.
device_interface::QpRingHeader* map_work_ring(int fd, size_t bytes);

// After publishing a producer index: rings the queue's bit in the doorbell page, and
// wakes the engine if it said it sleeps.
void ring_doorbell(device_interface::QpRingHeader* ring, const Doorbell& doorbell);

// Writes receive requests into the ring's receive slots from `next` on and publishes
// them. Returns 0, or EINVAL (too many SGEs) / ENOMEM (full) with *bad_wr set.
int post_receive_requests(device_interface::QpRingHeader* ring, uint64_t& next, uint32_t max_sge,
                          const Doorbell& doorbell, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);

} // namespace softhca::provider
