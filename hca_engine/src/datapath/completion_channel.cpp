#include "completion_channel.hpp"

#include "client_descriptors.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <utility>

namespace softhca::engine {

CompletionChannel::CompletionChannel(int fd, const StallWatch::Owner& owner)
    : fd_(fd), owner_(owner) {
    // A description of the engine's own (client_descriptors.hpp): no client holds it, so
    // the flag stays.
    if (fd_ >= 0)
        ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) | O_NONBLOCK);
}

CompletionChannel::CompletionChannel(CompletionChannel&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), owner_(other.owner_) {}

CompletionChannel& CompletionChannel::operator=(CompletionChannel&& other) noexcept {
    if (this != &other) {
        if (fd_ >= 0)
            ::close(fd_);
        fd_ = std::exchange(other.fd_, -1);
        owner_ = other.owner_;
    }
    return *this;
}

CompletionChannel::~CompletionChannel() {
    close_client_descriptor(fd_,
                            owner_.account); // a client's pipe: may wait (client_descriptors.hpp)
}

bool CompletionChannel::signal(uint64_t cq_user_handle) const {
    // One 8-byte write into a pipe is atomic (below PIPE_BUF): records never interleave
    // even when several CQs share the channel.
    if (fd_ < 0)
        return false;
    const StallWatch::Touch touch(owner_);
    return ::write(fd_, &cq_user_handle, sizeof(cq_user_handle)) ==
           static_cast<ssize_t>(sizeof(cq_user_handle));
}

} // namespace softhca::engine
