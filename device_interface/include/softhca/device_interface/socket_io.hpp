// Sending and receiving one control message, with at most two file descriptors riding
// along as SCM_RIGHTS. Shared by both ends of the control socket.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <functional>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

namespace softhca::device_interface {

// Returns bytes sent or -1 with errno set. Never raises SIGPIPE. `second_fd` goes
// only along with `fd_to_pass`.
inline ssize_t send_message(int sock, const void* data, size_t size, int fd_to_pass = -1,
                            int second_fd = -1) {
    iovec iov{const_cast<void*>(data), size};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))];
    if (fd_to_pass >= 0) {
        const int fds[2] = {fd_to_pass, second_fd};
        const size_t count = second_fd >= 0 ? 2 : 1;
        std::memset(control, 0, sizeof(control));
        msg.msg_control = control;
        msg.msg_controllen = CMSG_SPACE(count * sizeof(int));
        cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
        cmsg->cmsg_level = SOL_SOCKET;
        cmsg->cmsg_type = SCM_RIGHTS;
        cmsg->cmsg_len = CMSG_LEN(count * sizeof(int));
        std::memcpy(CMSG_DATA(cmsg), fds, count * sizeof(int));
    }
    ssize_t rc;
    do {
        rc = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
    } while (rc < 0 && errno == EINTR);
    return rc;
}

struct ReceivedMessage {
    ssize_t size = -1;      // bytes received, 0 on orderly close, -1 on error (errno)
    bool truncated = false; // the message was longer than the buffer
    int fd = -1;            // first passed descriptor, owned by the caller
    int second_fd = -1;     // the second, owned by the caller
};

// Receives one message. Descriptors passed beyond the second go to `dispose` (close by
// default). The room is for as many as one message may carry (the kernel's SCM_MAX_FD,
// 253), so the kernel drops none itself: dropping runs a file's release on the receiving
// thread, which for some files waits (a socket lingering on unsent data), and the engine
// disposes of a client's descriptors where that cannot hold anyone else.
inline ReceivedMessage receive_message(int sock, void* buffer, size_t capacity, int flags = 0,
                                       const std::function<void(int)>& dispose = {}) {
    iovec iov{buffer, capacity};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 253)];
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    ReceivedMessage out;
    do {
        out.size = ::recvmsg(sock, &msg, flags | MSG_CMSG_CLOEXEC);
    } while (out.size < 0 && errno == EINTR);
    if (out.size < 0)
        return out;
    out.truncated = (msg.msg_flags & MSG_TRUNC) != 0;
    for (cmsghdr* cmsg = CMSG_FIRSTHDR(&msg); cmsg; cmsg = CMSG_NXTHDR(&msg, cmsg)) {
        if (cmsg->cmsg_level != SOL_SOCKET || cmsg->cmsg_type != SCM_RIGHTS)
            continue;
        size_t count = (cmsg->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count; ++i) {
            int fd;
            std::memcpy(&fd, CMSG_DATA(cmsg) + i * sizeof(int), sizeof(int));
            if (out.fd < 0)
                out.fd = fd;
            else if (out.second_fd < 0)
                out.second_fd = fd;
            else if (dispose)
                dispose(fd);
            else
                ::close(fd);
        }
    }
    return out;
}

} // namespace softhca::device_interface
