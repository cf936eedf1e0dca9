// The provider's end of the control socket: one request, one reply, serialized by a
// mutex (verbs may be called from many threads). After the engine is gone every call
// fails with EIO and never blocks.
#pragma once

#include "softhca/device_interface/control.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

namespace softhca::provider {

class ControlChannel {
  public:
    ControlChannel() = default;
    ~ControlChannel();
    ControlChannel(const ControlChannel&) = delete;
    ControlChannel& operator=(const ControlChannel&) = delete;

    // Connects to the engine's socket. Returns 0 or an errno.
    int connect(const std::string& socket_path);

    // Sends `request` (whose header is filled in here from `opcode` and `size`) with an
    // optional descriptor, and receives the reply into `reply` (at least a ReplyHeader,
    // at most reply_capacity bytes). Returns the reply status, or an errno when the
    // exchange itself failed. A descriptor in the reply is stored in *received_fd.
    int call(device_interface::Opcode opcode, void* request, size_t size, void* reply,
             size_t reply_capacity, int fd_to_pass = -1, int* received_fd = nullptr);

    // Destroys the engine object `handle` (DeallocPd, DeregMr, DestroyCq, DestroyQp).
    // Returns 0 when it is gone: destroyed now, or gone with an engine that died (EIO),
    // as destroying succeeds on a disassociated uverbs device so that applications can
    // clean up. Any other error (EBUSY: still in use) leaves the object as it was.
    int destroy(device_interface::Opcode opcode, uint32_t handle);

    int fd() const { return fd_; }
    bool dead() const { return dead_.load(std::memory_order_acquire); }
    void mark_dead() { dead_.store(true, std::memory_order_release); }

  private:
    int fd_ = -1;
    uint32_t sequence_ = 0;
    std::atomic<bool> dead_{false};
    std::mutex mutex_;
};

} // namespace softhca::provider
