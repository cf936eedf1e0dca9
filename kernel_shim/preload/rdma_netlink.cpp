// NETLINK_RDMA for programs run with `softhca exec`: the kernel's RDMA netlink (rdma_nl),
// answered here from softhca's device tree, so that `rdma dev|link|statistic|system
// show` (iproute2) and libibverbs's device discovery see softhca's devices and not the
// host kernel's (a host with ib_core loaded has its own). The socket is one end of a
// SOCK_SEQPACKET pair: a datagram socket whose reads keep message boundaries and report
// truncation as netlink's do. What the application sends to it is answered at once
// (rdma_netlink_replies.cpp) into the other end, which this library keeps; the calls
// that see netlink addresses (bind, getsockname, recvfrom, recvmsg) and options are
// answered as the kernel would. Without a softhca tree the family is not there, as on a
// host without ib_core.
#include "rdma_netlink.hpp"

#include "next_symbol.hpp"
#include "rdma_netlink_replies.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <linux/netlink.h>
#include <string>
#include <sys/socket.h>
#include <unistd.h>

namespace softhca::preload {
namespace {

// The tree `softhca exec` pointed the program at (SYSFS_PATH), or nullptr.
const char* tree_root() {
    static const char* root = [] {
        const char* value = std::getenv("SYSFS_PATH");
        return value && *value && std::strcmp(value, "/sys") != 0 ? value : nullptr;
    }();
    return root;
}

// One emulated socket per application descriptor below kMaxDescriptors.
struct Emulated {
    std::atomic<int> kernel{-1};     // our end of the pair; -1: not an emulated socket
    std::atomic<uint32_t> portid{0}; // nl_pid once bound
};
constexpr int kMaxDescriptors = 4096;
Emulated sockets[kMaxDescriptors];
std::atomic<int> emulated_count{0};
std::atomic<uint32_t> next_portid{0};

Emulated* find(int fd) {
    if (fd < 0 || fd >= kMaxDescriptors || emulated_count.load(std::memory_order_acquire) == 0)
        return nullptr;
    Emulated& e = sockets[fd];
    return e.kernel.load(std::memory_order_acquire) >= 0 ? &e : nullptr;
}

// The kernel gives a process's first netlink socket the process's id and later ones
// other unique numbers; nl_pid is what a socket asked for, 0 for "choose".
uint32_t choose_portid(uint32_t asked) {
    if (asked)
        return asked;
    const uint32_t n = next_portid.fetch_add(1);
    return n == 0 ? static_cast<uint32_t>(::getpid())
                  : 0x80000000u | (n << 16) | (::getpid() & 0xffff);
}

// Answers what the application sent (`length` bytes) into our end.
void answer(Emulated& e, const uint8_t* bytes, size_t length) {
    const char* root = tree_root();
    uint32_t portid = e.portid.load();
    if (!portid) { // sending autobinds, as the kernel does
        portid = choose_portid(0);
        e.portid.store(portid);
    }
    // A reader that lets its queue fill loses answers, as a netlink socket does (ENOBUFS).
    static const auto real_send = next_symbol<ssize_t (*)(int, const void*, size_t, int)>("send");
    for (const std::string& datagram : answer_rdma_netlink(root, bytes, length, portid))
        real_send(e.kernel.load(), datagram.data(), datagram.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
}

void fill_kernel_address(sockaddr* address, socklen_t* length) {
    if (!address || !length)
        return;
    sockaddr_nl nl{};
    nl.nl_family = AF_NETLINK; // from the kernel: port 0, no groups
    std::memcpy(address, &nl, std::min<size_t>(*length, sizeof(nl)));
    *length = sizeof(nl);
}

} // namespace

void rdma_netlink_close(int fd) {
    Emulated* e = find(fd);
    if (!e)
        return;
    const int kernel = e->kernel.exchange(-1);
    if (kernel >= 0) {
        static const auto real_close = next_symbol<int (*)(int)>("close");
        real_close(kernel);
        emulated_count.fetch_sub(1);
    }
}

} // namespace softhca::preload

using namespace softhca::preload;

#define SOFTHCA_EXPORT extern "C" __attribute__((visibility("default")))

SOFTHCA_EXPORT int socket(int domain, int type, int protocol) {
    static const auto real = next_symbol<int (*)(int, int, int)>("socket");
    if (domain != AF_NETLINK || protocol != NETLINK_RDMA)
        return real(domain, type, protocol);
    const int kind = type & 0xf;
    if (!tree_root() || (kind != SOCK_RAW && kind != SOCK_DGRAM)) {
        errno = EPROTONOSUPPORT;
        return -1;
    }
    int pair[2];
    const int flags = type & (SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | flags, 0, pair) != 0)
        return -1;
    // Our end never blocks the application and never reaches a program it runs.
    static const auto real_close = next_symbol<int (*)(int)>("close");
    const int kernel = ::fcntl(pair[1], F_DUPFD_CLOEXEC, 0);
    real_close(pair[1]);
    if (kernel < 0 || pair[0] >= kMaxDescriptors) {
        real_close(pair[0]);
        if (kernel >= 0)
            real_close(kernel);
        errno = EMFILE;
        return -1;
    }
    Emulated& e = sockets[pair[0]];
    e.portid.store(0);
    e.kernel.store(kernel, std::memory_order_release);
    emulated_count.fetch_add(1);
    return pair[0];
}

SOFTHCA_EXPORT int bind(int fd, const sockaddr* address, socklen_t length) {
    static const auto real = next_symbol<int (*)(int, const sockaddr*, socklen_t)>("bind");
    Emulated* e = find(fd);
    if (!e)
        return real(fd, address, length);
    sockaddr_nl nl{};
    if (!address || length < sizeof(nl)) {
        errno = EINVAL;
        return -1;
    }
    std::memcpy(&nl, address, sizeof(nl));
    if (nl.nl_family != AF_NETLINK) {
        errno = EINVAL;
        return -1;
    }
    if (nl.nl_groups) { // RDMA netlink has no multicast groups for these commands
        errno = EINVAL;
        return -1;
    }
    e->portid.store(choose_portid(nl.nl_pid));
    return 0;
}

SOFTHCA_EXPORT int getsockname(int fd, sockaddr* address, socklen_t* length) {
    static const auto real = next_symbol<int (*)(int, sockaddr*, socklen_t*)>("getsockname");
    Emulated* e = find(fd);
    if (!e)
        return real(fd, address, length);
    if (!address || !length) {
        errno = EFAULT;
        return -1;
    }
    sockaddr_nl nl{};
    nl.nl_family = AF_NETLINK;
    nl.nl_pid = e->portid.load();
    std::memcpy(address, &nl, std::min<size_t>(*length, sizeof(nl)));
    *length = sizeof(nl);
    return 0;
}

SOFTHCA_EXPORT int setsockopt(int fd, int level, int name, const void* value, socklen_t length) {
    static const auto real =
        next_symbol<int (*)(int, int, int, const void*, socklen_t)>("setsockopt");
    if (level == SOL_NETLINK && find(fd))
        return 0; // extended acks, strict checking, cap acks: our answers need none
    return real(fd, level, name, value, length);
}

SOFTHCA_EXPORT int getsockopt(int fd, int level, int name, void* value, socklen_t* length) {
    static const auto real = next_symbol<int (*)(int, int, int, void*, socklen_t*)>("getsockopt");
    Emulated* e = find(fd);
    if (e && level == SOL_NETLINK && value && length && *length >= sizeof(int)) {
        const int off = 0;
        std::memcpy(value, &off, sizeof(off));
        *length = sizeof(off);
        return 0;
    }
    if (e && level == SOL_SOCKET && (name == SO_PROTOCOL || name == SO_DOMAIN) && value && length &&
        *length >= sizeof(int)) {
        const int v = name == SO_PROTOCOL ? NETLINK_RDMA : AF_NETLINK;
        std::memcpy(value, &v, sizeof(v));
        *length = sizeof(v);
        return 0;
    }
    return real(fd, level, name, value, length);
}

SOFTHCA_EXPORT ssize_t sendto(int fd, const void* buffer, size_t length, int flags,
                              const sockaddr* address, socklen_t address_length) {
    static const auto real =
        next_symbol<ssize_t (*)(int, const void*, size_t, int, const sockaddr*, socklen_t)>(
            "sendto");
    Emulated* e = find(fd);
    if (!e)
        return real(fd, buffer, length, flags, address, address_length);
    answer(*e, static_cast<const uint8_t*>(buffer), length);
    return static_cast<ssize_t>(length);
}

SOFTHCA_EXPORT ssize_t send(int fd, const void* buffer, size_t length, int flags) {
    static const auto real = next_symbol<ssize_t (*)(int, const void*, size_t, int)>("send");
    Emulated* e = find(fd);
    if (!e)
        return real(fd, buffer, length, flags);
    answer(*e, static_cast<const uint8_t*>(buffer), length);
    return static_cast<ssize_t>(length);
}

SOFTHCA_EXPORT ssize_t sendmsg(int fd, const msghdr* message, int flags) {
    static const auto real = next_symbol<ssize_t (*)(int, const msghdr*, int)>("sendmsg");
    Emulated* e = find(fd);
    if (!e)
        return real(fd, message, flags);
    if (!message) {
        errno = EFAULT;
        return -1;
    }
    std::string bytes; // one datagram, gathered
    for (size_t i = 0; i < message->msg_iovlen; ++i)
        bytes.append(static_cast<const char*>(message->msg_iov[i].iov_base),
                     message->msg_iov[i].iov_len);
    answer(*e, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    return static_cast<ssize_t>(bytes.size());
}

SOFTHCA_EXPORT ssize_t recvmsg(int fd, msghdr* message, int flags) {
    static const auto real = next_symbol<ssize_t (*)(int, msghdr*, int)>("recvmsg");
    if (!find(fd) || !message)
        return real(fd, message, flags);
    // The pair's own address must not show: the sender is the kernel's port 0.
    sockaddr* name = static_cast<sockaddr*>(message->msg_name);
    socklen_t name_length = message->msg_namelen;
    message->msg_name = nullptr;
    message->msg_namelen = 0;
    const ssize_t n = real(fd, message, flags);
    message->msg_name = name;
    message->msg_namelen = name_length;
    if (n >= 0 && name)
        fill_kernel_address(name, &message->msg_namelen);
    return n;
}

SOFTHCA_EXPORT ssize_t recvfrom(int fd, void* buffer, size_t length, int flags, sockaddr* address,
                                socklen_t* address_length) {
    static const auto real =
        next_symbol<ssize_t (*)(int, void*, size_t, int, sockaddr*, socklen_t*)>("recvfrom");
    if (!find(fd))
        return real(fd, buffer, length, flags, address, address_length);
    const ssize_t n = real(fd, buffer, length, flags, nullptr, nullptr);
    if (n >= 0)
        fill_kernel_address(address, address_length);
    return n;
}
