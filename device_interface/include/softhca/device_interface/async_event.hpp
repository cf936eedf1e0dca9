// Async events as the driver hands them to libibverbs: records of the kernel uverbs
// layout (struct ib_uverbs_async_event_desc) written into the context's async_fd.
#pragma once

#include <cstdint>

namespace softhca::device_interface {

struct AsyncEventRecord {
    uint64_t element;    // user handle of the CQ/QP/SRQ, or the port number
    uint32_t event_type; // enum ibv_event_type
    uint32_t reserved;
};
static_assert(sizeof(AsyncEventRecord) == 16);

// Values of enum ibv_event_type the engine raises.
enum AsyncEventType : uint32_t {
    kEventCqErr = 0,
    kEventQpFatal = 1,
    kEventQpReqErr = 2,
    kEventQpAccessErr = 3,
    kEventCommEst = 4,
    kEventSqDrained = 5,
    kEventPortActive = 9,
    kEventPortErr = 10,
    kEventDeviceFatal = 8,
    kEventSrqLimitReached = 15,
    kEventQpLastWqeReached = 16,
};

} // namespace softhca::device_interface
