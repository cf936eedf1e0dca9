// The engine's end of a completion channel: the write end of the pipe the application
// waits on. ibv_get_cq_event reads one struct ib_uverbs_comp_event_desc (the CQ's
// user handle, 8 bytes) per event, as the kernel's uverbs would have written it.
#pragma once

#include "stall_watch.hpp"

#include <cstdint>

namespace softhca::engine {

class CompletionChannel {
  public:
    CompletionChannel() = default;
    // Takes ownership of `fd` and makes writes to it non-blocking; `owner` is whose it is
    // (its reader may hold the pipe's lock on a FUSE page: stall_watch.hpp).
    CompletionChannel(int fd, const StallWatch::Owner& owner);
    CompletionChannel(CompletionChannel&& other) noexcept;
    CompletionChannel& operator=(CompletionChannel&& other) noexcept;
    CompletionChannel(const CompletionChannel&) = delete;
    CompletionChannel& operator=(const CompletionChannel&) = delete;
    ~CompletionChannel();

    bool attached() const { return fd_ >= 0; }

    // Writes one event record. A channel nobody reads (its pipe full) or whose reader
    // is gone loses the event and returns false: the card never waits on a process.
    bool signal(uint64_t cq_user_handle) const;

  private:
    int fd_ = -1;
    StallWatch::Owner owner_;
};

} // namespace softhca::engine
