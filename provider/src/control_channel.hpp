// The provider's end of the control socket: one request, one reply, as one ioctl on a
// uverbs file is. Calls are serialized by a robust process-shared mutex in memory the
// context shares with the processes it is forked into: verbs may be called from many
// threads, and a child forked after ibv_open_device shares the socket as it would share
// the uverbs file, so its calls must not take the parent's replies. After the engine is
// gone every call fails with EIO and never blocks.
#pragma once

#include "softhca/device_interface/control.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <pthread.h>
#include <string>
#include <unistd.h>

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
    // optional descriptor (and a second one), and receives the reply into `reply` (at
    // least a ReplyHeader, at most reply_capacity bytes). Returns the reply status, or
    // an errno when the exchange itself failed. A descriptor in the reply is stored in
    // *received_fd.
    int call(device_interface::Opcode opcode, void* request, size_t size, void* reply,
             size_t reply_capacity, int fd_to_pass = -1, int* received_fd = nullptr,
             int second_fd = -1);

    // Destroys the engine object `handle` (DeallocPd, DeregMr, DestroyCq, DestroyQp).
    // Returns 0 when it is gone: destroyed now, or gone with an engine that died (EIO),
    // as destroying succeeds on a disassociated uverbs device so that applications can
    // clean up. Any other error (EBUSY: still in use) leaves the object as it was.
    int destroy(device_interface::Opcode opcode, uint32_t handle);

    int fd() const { return fd_; }
    bool dead() const { return dead_.load(std::memory_order_acquire); }
    void mark_dead() { dead_.store(true, std::memory_order_release); }

  private:
    // MAP_SHARED: one lock and one sequence for this process and the ones forked from it.
    struct Shared {
        pthread_mutex_t lock;
        uint32_t sequence;
    };
    int lock();
    void unlock();
    int fd_ = -1;
    Shared* shared_ = nullptr;
    std::atomic<bool> dead_{false};
};

// A call whose reply passes the memfd of a new ring (CreateCq, ResizeCq, CreateQp,
// CreateSrq): `map(fd, bytes)` maps it and closes the fd, nullptr when it is not a ring
// of ours. Returns the reply status or an errno, and on success the mapping in `ring`.
// A ring that cannot be mapped is ENOMEM, after `undo` released what the engine made.
// `fd_to_pass`, when not -1, rides along with the request (the engine keeps its copy).
template <typename Request, typename Reply, typename Ring, typename Map, typename Undo>
int call_for_ring(ControlChannel& control, device_interface::Opcode opcode, Request& request,
                  Reply& reply, Ring*& ring, Map map, Undo undo, int fd_to_pass = -1) {
    int fd = -1;
    if (int err = control.call(opcode, &request, sizeof(request), &reply, sizeof(reply), fd_to_pass,
                               &fd)) {
        if (fd >= 0)
            ::close(fd);
        return err;
    }
    ring = map(fd, reply.ring_bytes);
    if (!ring) {
        undo();
        return ENOMEM;
    }
    return 0;
}

} // namespace softhca::provider
