#include "control_channel.hpp"

#include "softhca/device_interface/socket_io.hpp"

#include <cerrno>
#include <cstring>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

namespace softhca::provider {

namespace di = device_interface;

ControlChannel::~ControlChannel() {
    if (fd_ >= 0)
        ::close(fd_);
    if (shared_)
        ::munmap(shared_, sizeof(Shared));
}

int ControlChannel::connect(const std::string& socket_path) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (socket_path.size() >= sizeof(addr.sun_path))
        return ENAMETOOLONG;
    std::strcpy(addr.sun_path, socket_path.c_str());
    void* map =
        ::mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED)
        return errno;
    shared_ = static_cast<Shared*>(map);
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&shared_->lock, &attr);
    pthread_mutexattr_destroy(&attr);
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

// The engine's refusal of this connection (a reply of sequence 0, control.hpp) if one is
// waiting: its errno, else 0. A reset the kernel reports first is passed over.
int take_refusal(int fd) {
    for (int attempt = 0; attempt < 2; ++attempt) {
        di::ReplyHeader refusal{};
        di::ReceivedMessage m = di::receive_message(fd, &refusal, sizeof(refusal), MSG_DONTWAIT);
        if (m.fd >= 0)
            ::close(m.fd);
        if (m.size == static_cast<ssize_t>(sizeof(refusal)))
            return refusal.header.sequence == 0 && refusal.status > 0 ? refusal.status : 0;
        if (m.size >= 0 || errno != ECONNRESET)
            return 0;
    }
    return 0;
}
} // namespace

int ControlChannel::lock() {
    const int rc = pthread_mutex_lock(&shared_->lock);
    if (rc == EOWNERDEAD) {
        // A process died inside a call: its reply, if one came, is read and dropped by
        // the next call (a sequence that is not its own).
        pthread_mutex_consistent(&shared_->lock);
        return 0;
    }
    return rc;
}

void ControlChannel::unlock() {
    pthread_mutex_unlock(&shared_->lock);
}

int ControlChannel::call(di::Opcode opcode, void* request, size_t size, void* reply,
                         size_t reply_capacity, int fd_to_pass, int* received_fd, int second_fd) {
    if (received_fd)
        *received_fd = -1;
    if (dead() || fd_ < 0 || !shared_ || lock() != 0)
        return failed(EIO);
    struct Unlock {
        ControlChannel* channel;
        ~Unlock() { channel->unlock(); }
    } unlock_at_return{this};
    auto* header = static_cast<di::MessageHeader*>(request);
    header->magic = di::kControlMagic;
    header->version = di::kControlVersion;
    header->opcode = static_cast<uint16_t>(opcode);
    header->reserved = 0;
    header->length = static_cast<uint32_t>(size);
    header->sequence = ++shared_->sequence;
    if (header->sequence == 0) // 0 is the engine's refusal (control.hpp)
        header->sequence = ++shared_->sequence;
    if (di::send_message(fd_, request, size, fd_to_pass, second_fd) != static_cast<ssize_t>(size)) {
        // The engine may have refused the connection and closed it before this request:
        // its refusal is still there to read.
        const int refused = take_refusal(fd_);
        mark_dead();
        return failed(refused ? refused : EIO);
    }
    const auto* r = static_cast<const di::ReplyHeader*>(reply);
    di::ReceivedMessage m;
    for (;;) {
        m = di::receive_message(fd_, reply, reply_capacity);
        if (m.size < static_cast<ssize_t>(sizeof(di::ReplyHeader))) {
            if (m.fd >= 0)
                ::close(m.fd);
            // A refusal and the close after it, our request unread: the kernel reports the
            // reset first, the refusal is read after it.
            const int refused = m.size < 0 && errno == ECONNRESET ? take_refusal(fd_) : 0;
            if (m.size <= 0)
                mark_dead(); // the engine is gone
            return failed(refused ? refused : EIO);
        }
        if (r->header.sequence == header->sequence)
            break;
        if (r->header.sequence == 0 && r->status > 0) { // the engine refuses this connection
            if (m.fd >= 0)
                ::close(m.fd);
            mark_dead();
            return failed(r->status);
        }
        // An older reply (to a call whose process died waiting): not ours.
        if (m.fd >= 0)
            ::close(m.fd);
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
