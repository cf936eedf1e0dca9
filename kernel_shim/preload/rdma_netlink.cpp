// NETLINK_RDMA for programs run with `softhca exec`: the kernel's RDMA netlink (rdma_nl),
// answered here from softhca's device tree, so that `rdma dev|link|statistic|system
// show` (iproute2) and libibverbs's device discovery see softhca's devices and not the
// host kernel's (a host with ib_core loaded has its own). The socket is one end of a
// SOCK_SEQPACKET pair: a datagram socket whose reads keep message boundaries and report
// truncation as netlink's do. What the application sends to it is answered at once
// (rdma_netlink_replies.cpp) into the other end, which this library keeps (a dump longer
// than the socket holds waits and follows as the application reads); the calls
// that see netlink addresses (bind, getsockname, recvfrom, recvmsg) and options are
// answered as the kernel would. Without a softhca tree the family is not there, as on a
// host without ib_core.
#include "rdma_netlink.hpp"

#include "device_tree.hpp"
#include "next_symbol.hpp"
#include "rdma_netlink_replies.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <linux/netlink.h>
#include <pthread.h>
#include <string>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace softhca::preload {
namespace {

// One emulated socket per application descriptor below kMaxDescriptors. An entry is
// trusted only while the descriptor is still the socket it was made for (its inode):
// a number closed behind this library's back (dup2, close_range, a raw system call) and
// reused is forgotten, never answered as netlink.
struct Emulated {
    std::atomic<int> kernel{-1};     // our end of the pair; -1: not an emulated socket
    std::atomic<uint32_t> portid{0}; // nl_pid once bound
    ino_t app_inode = 0, kernel_inode = 0;
    dev_t app_device = 0;
    pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; // the answers not yet handed over
    std::vector<std::string>* pending = nullptr;
    size_t pending_head = 0;
};
constexpr int kMaxDescriptors = 4096;
Emulated sockets[kMaxDescriptors];
std::atomic<int> emulated_count{0};
std::atomic<uint32_t> next_portid{0};
// A datagram carries messages up to this many bytes, as the kernel fills a dump's
// (NLMSG_GOODSIZE): libmnl reads into a page, and a longer datagram would be cut.
constexpr size_t kDatagramBytes = 3776;
// Where our end of a pair goes (the lowest free number from here; from 0 if none).
constexpr int kHiddenDescriptor = 1000;

int real_close(int fd) {
    static const auto real = next_symbol<int (*)(int)>("close");
    return real(fd);
}

bool same_file(int fd, ino_t inode, dev_t device) {
    struct stat st {};
    return ::fstat(fd, &st) == 0 && st.st_ino == inode && (device == 0 || st.st_dev == device);
}

void forget(Emulated& e) {
    const int kernel = e.kernel.exchange(-1);
    if (kernel < 0)
        return;
    // Our end is closed only if the number still names it.
    if (same_file(kernel, e.kernel_inode, 0))
        real_close(kernel);
    pthread_mutex_lock(&e.lock);
    delete e.pending;
    e.pending = nullptr;
    e.pending_head = 0;
    pthread_mutex_unlock(&e.lock);
    emulated_count.fetch_sub(1);
}

Emulated* find_emulated(int fd) {
    if (fd < 0 || fd >= kMaxDescriptors || emulated_count.load(std::memory_order_acquire) == 0)
        return nullptr;
    Emulated& e = sockets[fd];
    if (e.kernel.load(std::memory_order_acquire) < 0)
        return nullptr;
    if (!same_file(fd, e.app_inode, e.app_device)) {
        forget(e);
        return nullptr;
    }
    return &e;
}

// The kernel gives a process's first netlink socket the process's id and later ones
// other unique numbers; nl_pid is what a socket asked for, 0 for "choose".
uint32_t choose_portid(uint32_t asked) {
    if (asked)
        return asked;
    const uint32_t n = next_portid.fetch_add(1);
    return n == 0 ? static_cast<uint32_t>(::getpid())
                  : 0x80000000u | (n << 16) | (static_cast<uint32_t>(::getpid()) & 0xffff);
}

// Hands queued answers to the application's end while there is room. A dump longer than
// the socket's buffer waits here, and each read makes room for more (the kernel's dump
// goes on as the reader reads, too). Called with the lock held.
void flush_locked(Emulated& e, int kernel) {
    static const auto real_send = next_symbol<ssize_t (*)(int, const void*, size_t, int)>("send");
    if (!e.pending)
        return;
    while (e.pending_head < e.pending->size()) {
        const std::string& datagram = (*e.pending)[e.pending_head];
        const ssize_t n =
            real_send(kernel, datagram.data(), datagram.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        ++e.pending_head; // sent, or our end is gone: either way not again
    }
    e.pending->clear();
    e.pending_head = 0;
}

void flush(Emulated& e) {
    const int saved = errno;
    const int kernel = e.kernel.load();
    pthread_mutex_lock(&e.lock);
    if (kernel >= 0 && same_file(kernel, e.kernel_inode, 0))
        flush_locked(e, kernel);
    pthread_mutex_unlock(&e.lock);
    errno = saved;
}

// Answers what the application sent (`length` bytes): the messages go into datagrams of
// at most kDatagramBytes, queued behind what is still waiting, then as many as fit are
// handed over.
void answer(Emulated& e, const uint8_t* bytes, size_t length) {
    uint32_t portid = e.portid.load();
    if (!portid) { // sending autobinds, as the kernel does
        portid = choose_portid(0);
        e.portid.store(portid);
    }
    const std::vector<std::string> messages =
        answer_rdma_netlink(device_tree_root(), bytes, length, portid);
    const int kernel = e.kernel.load();
    pthread_mutex_lock(&e.lock);
    if (!e.pending)
        e.pending = new std::vector<std::string>;
    for (const std::string& message : messages) {
        if (e.pending->size() == e.pending_head ||
            e.pending->back().size() + message.size() > kDatagramBytes)
            e.pending->emplace_back();
        e.pending->back() += message;
    }
    if (kernel >= 0 && same_file(kernel, e.kernel_inode, 0))
        flush_locked(e, kernel);
    pthread_mutex_unlock(&e.lock);
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
    if (fd < 0 || fd >= kMaxDescriptors || emulated_count.load(std::memory_order_acquire) == 0)
        return;
    Emulated& e = sockets[fd];
    if (e.kernel.load(std::memory_order_acquire) >= 0)
        forget(e); // whether or not the number is still ours, the entry goes
}

bool rdma_netlink_write(int fd, const void* buffer, size_t count, ssize_t& result) {
    Emulated* e = find_emulated(fd);
    if (!e)
        return false;
    answer(*e, static_cast<const uint8_t*>(buffer), count);
    result = static_cast<ssize_t>(count);
    return true;
}

bool rdma_netlink_before_read(int fd) {
    Emulated* e = find_emulated(fd);
    if (!e)
        return false;
    flush(*e);
    return true;
}

} // namespace softhca::preload

using namespace softhca::preload;

#define SOFTHCA_EXPORT extern "C" __attribute__((visibility("default")))

SOFTHCA_EXPORT int socket(int domain, int type, int protocol) {
    static const auto real = next_symbol<int (*)(int, int, int)>("socket");
    if (domain != AF_NETLINK || protocol != NETLINK_RDMA)
        return real(domain, type, protocol);
    const int kind = type & 0xf;
    if (!device_tree_root() || (kind != SOCK_RAW && kind != SOCK_DGRAM)) {
        errno = EPROTONOSUPPORT;
        return -1;
    }
    int pair[2];
    const int flags = type & (SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | flags, 0, pair) != 0)
        return -1;
    // Our end never reaches a program the application runs, and sits high, out of the
    // way of programs that reuse low numbers.
    int kernel = ::fcntl(pair[1], F_DUPFD_CLOEXEC, kHiddenDescriptor);
    if (kernel < 0)
        kernel = ::fcntl(pair[1], F_DUPFD_CLOEXEC, 0);
    real_close(pair[1]);
    struct stat app {
    }, ours{};
    if (kernel < 0 || pair[0] >= kMaxDescriptors || ::fstat(pair[0], &app) != 0 ||
        ::fstat(kernel, &ours) != 0) {
        real_close(pair[0]);
        if (kernel >= 0)
            real_close(kernel);
        errno = EMFILE;
        return -1;
    }
    Emulated& e = sockets[pair[0]];
    if (e.kernel.load() >= 0)
        forget(e); // a stale entry of a number closed behind our back
    e.portid.store(0);
    e.app_inode = app.st_ino;
    e.app_device = app.st_dev;
    e.kernel_inode = ours.st_ino;
    e.kernel.store(kernel, std::memory_order_release);
    emulated_count.fetch_add(1);
    return pair[0];
}

SOFTHCA_EXPORT int bind(int fd, const sockaddr* address, socklen_t length) {
    static const auto real = next_symbol<int (*)(int, const sockaddr*, socklen_t)>("bind");
    Emulated* e = find_emulated(fd);
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
    // Multicast groups (rdma monitor, ibacm) are accepted; nothing is ever sent to them.
    e->portid.store(choose_portid(nl.nl_pid));
    return 0;
}

SOFTHCA_EXPORT int getsockname(int fd, sockaddr* address, socklen_t* length) {
    static const auto real = next_symbol<int (*)(int, sockaddr*, socklen_t*)>("getsockname");
    Emulated* e = find_emulated(fd);
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
    if (level == SOL_NETLINK && find_emulated(fd))
        return 0; // extended acks, strict checking, cap acks: our answers need none
    return real(fd, level, name, value, length);
}

SOFTHCA_EXPORT int getsockopt(int fd, int level, int name, void* value, socklen_t* length) {
    static const auto real = next_symbol<int (*)(int, int, int, void*, socklen_t*)>("getsockopt");
    Emulated* e = find_emulated(fd);
    if (e && level == SOL_NETLINK && value && length && *length >= sizeof(int)) {
        const int off = 0;
        std::memcpy(value, &off, sizeof(off));
        *length = sizeof(off);
        return 0;
    }
    if (e && level == SOL_SOCKET && (name == SO_PROTOCOL || name == SO_DOMAIN || name == SO_TYPE) &&
        value && length && *length >= sizeof(int)) {
        const int v = name == SO_PROTOCOL ? NETLINK_RDMA
                      : name == SO_DOMAIN ? AF_NETLINK
                                          : SOCK_RAW;
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
    Emulated* e = find_emulated(fd);
    if (!e)
        return real(fd, buffer, length, flags, address, address_length);
    answer(*e, static_cast<const uint8_t*>(buffer), length);
    return static_cast<ssize_t>(length);
}

SOFTHCA_EXPORT ssize_t send(int fd, const void* buffer, size_t length, int flags) {
    static const auto real = next_symbol<ssize_t (*)(int, const void*, size_t, int)>("send");
    Emulated* e = find_emulated(fd);
    if (!e)
        return real(fd, buffer, length, flags);
    answer(*e, static_cast<const uint8_t*>(buffer), length);
    return static_cast<ssize_t>(length);
}

SOFTHCA_EXPORT ssize_t sendmsg(int fd, const msghdr* message, int flags) {
    static const auto real = next_symbol<ssize_t (*)(int, const msghdr*, int)>("sendmsg");
    Emulated* e = find_emulated(fd);
    if (!e)
        return real(fd, message, flags);
    if (!message) {
        errno = EFAULT;
        return -1;
    }
    std::string bytes; // one datagram, gathered
    for (size_t i = 0; i < message->msg_iovlen; ++i) {
        if (!message->msg_iov || (!message->msg_iov[i].iov_base && message->msg_iov[i].iov_len)) {
            errno = EFAULT;
            return -1;
        }
        bytes.append(static_cast<const char*>(message->msg_iov[i].iov_base),
                     message->msg_iov[i].iov_len);
    }
    answer(*e, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    return static_cast<ssize_t>(bytes.size());
}

SOFTHCA_EXPORT ssize_t recvmsg(int fd, msghdr* message, int flags) {
    static const auto real = next_symbol<ssize_t (*)(int, msghdr*, int)>("recvmsg");
    if (!rdma_netlink_before_read(fd) || !message)
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
    if (!rdma_netlink_before_read(fd))
        return real(fd, buffer, length, flags, address, address_length);
    const ssize_t n = real(fd, buffer, length, flags, nullptr, nullptr);
    if (n >= 0)
        fill_kernel_address(address, address_length);
    return n;
}

SOFTHCA_EXPORT ssize_t recv(int fd, void* buffer, size_t length, int flags) {
    static const auto real = next_symbol<ssize_t (*)(int, void*, size_t, int)>("recv");
    rdma_netlink_before_read(fd);
    return real(fd, buffer, length, flags);
}

SOFTHCA_EXPORT ssize_t read(int fd, void* buffer, size_t length) {
    static const auto real = next_symbol<ssize_t (*)(int, void*, size_t)>("read");
    rdma_netlink_before_read(fd);
    return real(fd, buffer, length);
}
