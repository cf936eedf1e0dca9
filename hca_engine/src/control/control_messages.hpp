// Helpers the control server's dispatch files share: typed views of a request and the
// header of a reply.
#pragma once

#include "softhca/device_interface/control.hpp"

#include <cstddef>
#include <cstdint>

namespace softhca::engine {

// The request as T when its size is exactly T's, else nullptr (EBADMSG).
template <typename T> const T* as(const void* message, size_t size) {
    return size == sizeof(T) ? static_cast<const T*>(message) : nullptr;
}

inline device_interface::MessageHeader reply_header(const device_interface::MessageHeader& request,
                                                    uint32_t length) {
    device_interface::MessageHeader h{};
    h.magic = device_interface::kControlMagic;
    h.version = device_interface::kControlVersion;
    h.opcode = request.opcode;
    h.length = length;
    h.sequence = request.sequence;
    return h;
}

} // namespace softhca::engine
