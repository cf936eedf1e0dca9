#include "descriptor_sink.hpp"

#include "softhca/device_interface/socket_io.hpp"

#include <atomic>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <deque>
#include <fcntl.h>
#include <linux/close_range.h>
#include <mutex>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <system_error>
#include <thread>
#include <unistd.h>

namespace softhca::engine {

namespace {

std::atomic<int> sink_socket{-1}; // the engine's end

// The sink's side: each descriptor that arrives is closed on a thread of a pool that
// grows while none is idle, up to kMaxThreads; past that, closes wait their turn.
class SinkClosers {
  public:
    void close(int fd) {
        std::lock_guard lock(mutex_);
        queue_.push_back(fd);
        if (idle_ == 0 && threads_ < kMaxThreads) {
            ++threads_;
            try {
                std::thread([this] { run(); }).detach();
            } catch (const std::exception&) {
                --threads_; // the next descriptor tries again
            }
        }
        ready_.notify_one();
    }

  private:
    static constexpr unsigned kMaxThreads = 256;
    void run() {
        for (;;) {
            int fd;
            {
                std::unique_lock lock(mutex_);
                ++idle_;
                ready_.wait(lock, [this] { return !queue_.empty(); });
                --idle_;
                fd = queue_.front();
                queue_.pop_front();
            }
            ::close(fd);
        }
    }
    std::mutex mutex_;
    std::condition_variable ready_;
    std::deque<int> queue_;
    unsigned threads_ = 0, idle_ = 0;
};

[[noreturn]] void run_sink(int sock) {
    ::prctl(PR_SET_NAME, "softhca-sink");
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    // Nothing of the engine's but the channel and the standard streams.
    if (sock != 3) {
        ::dup2(sock, 3);
        sock = 3;
    }
    ::close_range(4, ~0u, 0);
    auto* closers = new SinkClosers; // never destroyed: its threads may be waiting
    for (;;) {
        char byte;
        const auto m = device_interface::receive_message(sock, &byte, sizeof(byte), 0,
                                                         [closers](int fd) { closers->close(fd); });
        if (m.size < 0 && errno == EINTR)
            continue;
        if (m.size <= 0)
            std::_Exit(0); // the engine is gone
        if (m.fd >= 0)
            closers->close(m.fd);
        if (m.second_fd >= 0)
            closers->close(m.second_fd);
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

bool send_to_descriptor_sink(int fd) {
    const int sock = sink_socket.load(std::memory_order_relaxed);
    struct stat st {};
    // fstat of a socket asks sockfs, never a client's filesystem.
    if (sock < 0 || fd < 0 || ::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode))
        return false;
    const char byte = 0;
    if (device_interface::send_message(sock, &byte, sizeof(byte), fd) != sizeof(byte))
        return false;
    ::close(fd); // not the last reference (the message holds one), and sockets have no flush
    return true;
}

} // namespace softhca::engine
