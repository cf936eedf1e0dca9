#include "client_descriptors.hpp"

#include "descriptor_sink.hpp"
#include "mountinfo.hpp"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fcntl.h>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <system_error>
#include <thread>
#include <unistd.h>

namespace softhca::engine {

namespace {

// The value of the field `name` (with its colon) in /proc/self/fdinfo/FD; empty when
// there is none.
std::string fdinfo_field(int fd, std::string_view name) {
    std::ifstream fdinfo("/proc/self/fdinfo/" + std::to_string(fd));
    for (std::string line; std::getline(fdinfo, line);)
        if (line.starts_with(name)) {
            std::string value;
            std::istringstream(line.substr(name.size())) >> value;
            return value;
        }
    return {};
}

// The threads that close client descriptors (close_client_descriptor). A close may wait
// as long as the client decides (a FUSE file's FLUSH its daemon never answers, a socket
// lingering on unsent data, a pipe whose lock a client thread holds while it faults on
// such a file), so each close runs on a thread that serves nobody else. Each account has
// a lane of its own: a queue and at most kThreadsPerAccount threads, started when a close
// finds none idle and ended after kIdleSeconds without work. A user whose closes wait
// holds only its own later closes; past kMaxClosingPerAccount of them, the servers stop
// reading its connections (client_descriptors.hpp). The lanes are never destroyed while
// a thread may wait in one.
class Closer {
  public:
    static Closer& instance() {
        static Closer* closer = new Closer; // never destroyed: its threads may be waiting
        return *closer;
    }
    void close(int fd, uid_t account) {
        std::lock_guard lock(mutex_);
        Lane& lane = lanes_[account];
        lane.queue.push_back(fd);
        ++lane.closing;
        // A thread woken for an earlier close still counts as idle until it takes it.
        if (lane.queue.size() > lane.idle && lane.threads < kThreadsPerAccount) {
            ++lane.threads;
            try {
                std::thread([this, account] { run(account); }).detach();
            } catch (const std::exception&) {
                --lane.threads; // no thread now: the next close of this account starts one
            }
        }
        lane.ready.notify_one();
    }
    size_t closing(uid_t account) {
        std::lock_guard lock(mutex_);
        const auto it = lanes_.find(account);
        return it == lanes_.end() ? 0 : it->second.closing;
    }

  private:
    static constexpr unsigned kThreadsPerAccount = 4;
    static constexpr auto kIdleSeconds = std::chrono::seconds(10);
    struct Lane {
        std::deque<int> queue;
        std::condition_variable ready;
        unsigned threads = 0, idle = 0;
        size_t closing = 0; // queued, or being closed now
    };
    void run(uid_t account) {
        for (;;) {
            int fd;
            {
                std::unique_lock lock(mutex_);
                Lane& lane = lanes_[account];
                ++lane.idle;
                const bool work = lane.ready.wait_for(lock, kIdleSeconds,
                                                      [&lane] { return !lane.queue.empty(); });
                --lane.idle;
                if (!work) {
                    if (--lane.threads == 0 && lane.closing == 0)
                        lanes_.erase(account);
                    return;
                }
                fd = lane.queue.front();
                lane.queue.pop_front();
            }
            ::close(fd);
            std::lock_guard lock(mutex_);
            --lanes_[account].closing;
        }
    }
    std::mutex mutex_;
    std::map<uid_t, Lane> lanes_;
};

} // namespace

std::string filesystem_type(int fd, const std::string& mountinfo) {
    const std::string mount_id = fdinfo_field(fd, "mnt_id:");
    if (mount_id.empty())
        return {};
    std::ifstream mounts(mountinfo);
    for (std::string line; std::getline(mounts, line);) {
        MountinfoLine mount;
        if (parse_mountinfo_line(line, mount) && mount.id == mount_id)
            return std::string(mount.type);
    }
    return {};
}

bool descriptor_identity(int fd, dev_t& device, ino_t& inode) {
    struct statx sx {};
    if (::statx(fd, "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC, 0, &sx) != 0)
        return false;
    const unsigned long long number = std::strtoull(fdinfo_field(fd, "ino:").c_str(), nullptr, 10);
    if (number == 0)
        return false;
    device = makedev(sx.stx_dev_major, sx.stx_dev_minor);
    inode = static_cast<ino_t>(number);
    return true;
}

void close_client_descriptor(int fd, uid_t account) {
    // A socket goes to the descriptor sink, which holds whatever its release waits for;
    // anything else to the account's closing threads (a FUSE file's close asks its
    // daemon to FLUSH on the thread that closes).
    if (fd >= 0 && !send_to_descriptor_sink(fd, account))
        Closer::instance().close(fd, account);
}

void close_client_socket(int fd, uid_t account) {
    if (fd < 0)
        return;
    if (account == static_cast<uid_t>(-1)) {
        // Credentials that cannot be read share a lane of their own, never root's.
        ucred credentials{};
        socklen_t length = sizeof(credentials);
        account = ::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) == 0
                      ? credentials.uid
                      : static_cast<uid_t>(-2);
    }
    if (!send_to_descriptor_sink(fd, account))
        Closer::instance().close(fd, account);
}

size_t client_descriptors_closing(uid_t account) {
    return Closer::instance().closing(account);
}

bool PausedConnections::pause_if_backed_up(int fd, uid_t account) {
    if (client_descriptors_closing(account) < kMaxClosingPerAccount)
        return false;
    fds_.push_back(fd);
    return true;
}

std::vector<int>
PausedConnections::resumed(const std::function<std::optional<uid_t>(int)>& account_of) {
    std::vector<int> resumed;
    std::erase_if(fds_, [&](int fd) {
        const std::optional<uid_t> account = account_of(fd);
        if (account && client_descriptors_closing(*account) >= kResumeClosingPerAccount)
            return false;
        if (account)
            resumed.push_back(fd);
        return true;
    });
    return resumed;
}

ino_t anonymous_pipe_inode(int fd) {
    char path[64], link[64];
    std::snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    const ssize_t n = ::readlink(path, link, sizeof(link) - 1);
    if (n <= 0)
        return 0;
    link[n] = '\0';
    unsigned long long inode = 0;
    char end = 0;
    // A pipe's link is "pipe:[INODE]"; a named FIFO's is its path.
    if (std::sscanf(link, "pipe:[%llu%c", &inode, &end) != 2 || end != ']')
        return 0;
    return static_cast<ino_t>(inode);
}

int adopt_client_pipe(int fd, const StallWatch::Owner& owner, bool read_too) {
    if (fd < 0)
        return -1;
    int own = -1;
    // Only pipefs names a descriptor "pipe:[INODE]": an anonymous pipe, not a FIFO on disk.
    if (anonymous_pipe_inode(fd) != 0) {
        char path[64];
        std::snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        const StallWatch::Touch touch(owner);
        own = ::open(path, (read_too ? O_RDWR : O_WRONLY) | O_NONBLOCK | O_CLOEXEC);
    }
    close_client_descriptor(fd, owner.account);
    return own;
}

} // namespace softhca::engine
