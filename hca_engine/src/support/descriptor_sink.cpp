#include "descriptor_sink.hpp"

#include "client_descriptors.hpp"
#include "softhca/device_interface/socket_io.hpp"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <fcntl.h>
#include <linux/capability.h>
#include <mutex>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <unordered_map>
#include <utility>
#include <vector>

namespace softhca::engine {

namespace {

// One message from the engine to the sink: a socket (with its descriptor, SCM_RIGHTS) or
// word that the engine's own descriptor of socket `id` is closed.
struct SinkMessage {
    enum Kind : uint32_t { kSocket = 1, kEngineClosed = 2 };
    uint32_t kind;
    uint32_t account; // kSocket: whose closing threads close it
    uint64_t id;
};

std::atomic<int> sink_socket{-1}; // the engine's end
std::atomic<uint64_t> next_id{1};
// The words kEngineClosed the sink could not take when they were sent, sent again before
// the next socket (the sink holds those sockets until then).
std::mutex unsent_lock;
std::vector<uint64_t> unsent_closed;

bool send_closed(int sock, uint64_t id) {
    const SinkMessage word{SinkMessage::kEngineClosed, 0, id};
    return ::send(sock, &word, sizeof(word), MSG_DONTWAIT | MSG_NOSIGNAL) ==
           static_cast<ssize_t>(sizeof(word));
}

// Drops every capability: the sink only closes what it is given.
void drop_capabilities() {
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2] = {};
    ::syscall(SYS_capset, &header, data);
}

[[noreturn]] void run_sink(int sock) {
    ::prctl(PR_SET_NAME, "softhca-sink");
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    // Nothing of the engine's but the channel and the standard streams.
    if (sock != 3) {
        ::dup2(sock, 3);
        sock = 3;
    }
    ::close_range(4, ~0u, 0);
    if (::getppid() == 1)
        std::_Exit(0); // the engine died before the line above
    drop_capabilities();
    // A socket is held until the engine says its own descriptor is closed: until then
    // the engine's close could otherwise be the one that drops the last reference. Then
    // it goes to its account's closing threads (client_descriptors.hpp: this process
    // has no sink of its own), so one user's sockets that wait hold no other user's.
    std::unordered_map<uint64_t, std::pair<int, uid_t>> held;
    for (;;) {
        SinkMessage m{};
        const auto r = device_interface::receive_message(sock, &m, sizeof(m), 0,
                                                         [](int extra) { ::close(extra); });
        if (r.size < 0 && errno == EINTR)
            continue;
        if (r.size == 0)
            std::_Exit(0); // the engine is gone
        if (r.size < 0) {
            std::perror("softhca-sink: receive");
            std::_Exit(1);
        }
        if (r.second_fd >= 0)
            ::close(r.second_fd); // never sent: no socket of a client's
        if (r.size != sizeof(m)) {
            if (r.fd >= 0)
                ::close(r.fd);
            continue;
        }
        if (m.kind == SinkMessage::kSocket && r.fd >= 0) {
            held.emplace(m.id, std::pair{r.fd, static_cast<uid_t>(m.account)});
        } else if (m.kind == SinkMessage::kEngineClosed) {
            if (auto it = held.find(m.id); it != held.end()) {
                close_client_descriptor(it->second.first, it->second.second);
                held.erase(it);
            }
        } else if (r.fd >= 0) {
            ::close(r.fd);
        }
    }
}

} // namespace

void start_descriptor_sink() {
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
        std::perror("softhca-engine: descriptor sink");
        return;
    }
    const pid_t child = ::fork();
    if (child < 0) {
        std::perror("softhca-engine: descriptor sink");
        ::close(pair[0]);
        ::close(pair[1]);
        return;
    }
    if (child == 0) {
        ::close(pair[0]);
        run_sink(pair[1]);
    }
    ::close(pair[1]);
    // Never waits: a sink that cannot take a socket now leaves it to the caller.
    ::fcntl(pair[0], F_SETFL, ::fcntl(pair[0], F_GETFL) | O_NONBLOCK);
    // Room for many sockets in flight, should the sink fall behind for a moment.
    const int room = 4 << 20;
    if (::setsockopt(pair[0], SOL_SOCKET, SO_SNDBUFFORCE, &room, sizeof(room)) != 0)
        ::setsockopt(pair[0], SOL_SOCKET, SO_SNDBUF, &room, sizeof(room));
    sink_socket.store(pair[0]);
}

bool send_to_descriptor_sink(int fd, uid_t account) {
    const int sock = sink_socket.load(std::memory_order_relaxed);
    int domain = 0;
    socklen_t length = sizeof(domain);
    // Is it a socket? SO_DOMAIN asks the socket layer only (ENOTSOCK for anything else);
    // an fstat of a FUSE file could ask its daemon.
    if (sock < 0 || fd < 0 || ::getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &length) != 0)
        return false;
    {
        std::lock_guard lock(unsent_lock);
        std::erase_if(unsent_closed, [sock](uint64_t id) { return send_closed(sock, id); });
    }
    const uint64_t id = next_id.fetch_add(1, std::memory_order_relaxed);
    const SinkMessage message{SinkMessage::kSocket, static_cast<uint32_t>(account), id};
    if (device_interface::send_message(sock, &message, sizeof(message), fd) !=
        static_cast<ssize_t>(sizeof(message)))
        return false;
    // Not the last reference: the message, then the sink, holds one until it hears that
    // this close has returned. A socket has no flush.
    ::close(fd);
    if (!send_closed(sock, id)) {
        std::lock_guard lock(unsent_lock);
        unsent_closed.push_back(id);
    }
    return true;
}

} // namespace softhca::engine
