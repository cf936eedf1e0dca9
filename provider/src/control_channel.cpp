#include "control_channel.hpp"

#include "softhca/device_interface/socket_io.hpp"

#include <cerrno>
#include <cstring>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

namespace softhca::provider {

namespace di = device_interface;

ControlChannel::~ControlChannel() {
    if (fd_ >= 0)
        ::close(fd_);
}

int ControlChannel::connect(const std::string& socket_path) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (socket_path.size() >= sizeof(addr.sun_path))
        return ENAMETOOLONG;
    std::strcpy(addr.sun_path, socket_path.c_str());
    fd_ = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd_ < 0)
        return errno;
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
        int err = errno;
        ::close(fd_);
        fd_ = -1;
        return err == ENOENT || err == ECONNREFUSED ? ENODEV : err;
    }
    return 0;
}

namespace {
// A verb that fails leaves its errno in errno too, as a failed write() to the kernel's
// uverbs does for kernel drivers: callers (qperf, libibverbs' own helpers) print it.
int failed(int err) {
    errno = err;
    return err;
}
} // namespace

int ControlChannel::call(di::Opcode opcode, void* request, size_t size, void* reply,
                         size_t reply_capacity, int fd_to_pass, int* received_fd) {
    if (received_fd)
        *received_fd = -1;
    if (dead() || fd_ < 0)
        return failed(EIO);
    std::lock_guard<std::mutex> lock(mutex_);
    auto* header = static_cast<di::MessageHeader*>(request);
    header->magic = di::kControlMagic;
    header->version = di::kControlVersion;
    header->opcode = static_cast<uint16_t>(opcode);
    header->reserved = 0;
    header->length = static_cast<uint32_t>(size);
    header->sequence = ++sequence_;
    if (di::send_message(fd_, request, size, fd_to_pass) != static_cast<ssize_t>(size)) {
        mark_dead();
        return failed(EIO);
    }
    di::ReceivedMessage m = di::receive_message(fd_, reply, reply_capacity);
    if (m.size < static_cast<ssize_t>(sizeof(di::ReplyHeader))) {
        if (m.fd >= 0)
            ::close(m.fd);
        if (m.size <= 0)
            mark_dead(); // the engine is gone
        return failed(EIO);
    }
    const auto* r = static_cast<const di::ReplyHeader*>(reply);
    if (r->header.sequence != header->sequence) {
        if (m.fd >= 0)
            ::close(m.fd);
        return failed(EIO);
    }
    if (received_fd)
        *received_fd = m.fd;
    else if (m.fd >= 0)
        ::close(m.fd);
    return r->status ? failed(r->status) : 0;
}

int ControlChannel::destroy(di::Opcode opcode, uint32_t handle) {
    di::HandleRequest request{};
    request.handle = handle;
    di::ReplyHeader reply{};
    const int err = call(opcode, &request, sizeof(request), &reply, sizeof(reply));
    return err == EIO ? 0 : err;
}

} // namespace softhca::provider
