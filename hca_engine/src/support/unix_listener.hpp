// The engine's listening sockets (the control socket, the rdma_cm socket): a
// non-blocking SOCK_SEQPACKET Unix socket at `path`, which any local user may connect
// to, as /dev/infiniband's nodes allow. Throws std::runtime_error on failure.
#pragma once

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

namespace softhca::engine {

inline int listen_seqpacket(const std::string& path) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.size() >= sizeof(addr.sun_path))
        throw std::runtime_error("socket path too long: " + path);
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
    ::unlink(path.c_str());
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::chmod(path.c_str(), 0666) != 0 || ::listen(fd, 64) != 0) {
        const int saved = errno;
        ::close(fd);
        throw std::runtime_error("cannot listen on " + path + ": " + std::strerror(saved));
    }
    return fd;
}

} // namespace softhca::engine
