#include "client_process.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <linux/capability.h>
#include <linux/magic.h>
#include <string>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace softhca::engine {

namespace {

constexpr size_t kMaxRun = 1024; // IOV_MAX

// A /proc/PID/mem file opened for reading and writing: on procfs, a regular file of
// mode 0600 named "mem". Nothing else is accepted, since the engine writes into it as
// root: a procfs file that checks its writer's rights at write time (oom_score_adj)
// would be written with the engine's.
bool is_process_memory_file(int fd) {
    struct statfs fs {};
    struct stat st {};
    if (::fstatfs(fd, &fs) != 0 || fs.f_type != PROC_SUPER_MAGIC || ::fstat(fd, &st) != 0 ||
        !S_ISREG(st.st_mode) || (st.st_mode & 07777) != 0600)
        return false;
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags < 0 || (flags & O_ACCMODE) != O_RDWR)
        return false;
    char link[64];
    char target[256];
    std::snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    const ssize_t n = ::readlink(link, target, sizeof(target) - 1);
    if (n < 4)
        return false;
    target[n] = '\0';
    return std::strcmp(target + n - 4, "/mem") == 0;
}

} // namespace

ClientProcess::ClientProcess(pid_t pid, uid_t uid, gid_t gid, int mem_fd)
    : pid_(pid), uid_(uid), gid_(gid), mem_fd_(mem_fd) {}

ClientProcess::~ClientProcess() {
    if (mem_fd_ >= 0)
        ::close(mem_fd_);
}

int ClientProcess::adopt(pid_t pid, uid_t uid, gid_t gid, std::vector<gid_t> groups, int mem_fd,
                         std::shared_ptr<ClientProcess>& out) {
    if (mem_fd < 0 || !is_process_memory_file(mem_fd))
        return EBADF;
    out.reset(new ClientProcess(pid, uid, gid, mem_fd));
    out->groups_ = std::move(groups);
    return 0;
}

std::shared_ptr<ClientProcess> ClientProcess::self() {
    const int fd = ::open("/proc/self/mem", O_RDWR | O_CLOEXEC);
    std::shared_ptr<ClientProcess> process(
        new ClientProcess(::getpid(), ::getuid(), ::getgid(), fd));
    return process;
}

ssize_t ClientProcess::read(const iovec* local, int count, uint64_t far) const {
    ssize_t n;
    do {
        n = ::preadv(mem_fd_, local, count, static_cast<off_t>(far));
    } while (n < 0 && errno == EINTR);
    return n;
}

ssize_t ClientProcess::write(const iovec* local, int count, uint64_t far) const {
    ssize_t n;
    do {
        n = ::pwritev(mem_fd_, local, count, static_cast<off_t>(far));
    } while (n < 0 && errno == EINTR);
    return n;
}

ssize_t ClientProcess::move(bool to_process, const iovec* local, const iovec* far,
                            size_t count) const {
    ssize_t total = 0;
    for (size_t i = 0; i < count;) {
        // A run: pieces whose addresses in the process follow each other.
        size_t end = i + 1;
        uint64_t next = reinterpret_cast<uint64_t>(far[i].iov_base) + far[i].iov_len;
        ssize_t bytes = static_cast<ssize_t>(far[i].iov_len);
        while (end < count && end - i < kMaxRun &&
               reinterpret_cast<uint64_t>(far[end].iov_base) == next) {
            next += far[end].iov_len;
            bytes += static_cast<ssize_t>(far[end].iov_len);
            ++end;
        }
        const uint64_t at = reinterpret_cast<uint64_t>(far[i].iov_base);
        const int pieces = static_cast<int>(end - i);
        const ssize_t n = to_process ? write(local + i, pieces, at) : read(local + i, pieces, at);
        if (n > 0)
            total += n;
        if (n != bytes)
            return total;
        i = end;
    }
    return total;
}

bool ClientProcess::gone() const {
    // A read from a live address space fails (address 0 is not mapped) or moves the
    // byte; from one whose process exec'd or exited it moves nothing.
    uint8_t byte;
    return ::pread(mem_fd_, &byte, 1, 0) == 0;
}

bool ClientProcess::exited() const {
    std::ifstream stat("/proc/" + std::to_string(pid_) + "/stat");
    std::string text;
    std::getline(stat, text);
    const auto paren = text.rfind(')');
    return !stat || paren == std::string::npos || paren + 2 >= text.size() ||
           text[paren + 2] == 'Z' || text[paren + 2] == 'X';
}

FileCredentials::FileCredentials(const ClientProcess& client) {
    if (::geteuid() != 0 || client.uid() == 0)
        return;
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2]{};
    if (::syscall(SYS_capget, &header, data) != 0)
        return;
    effective_[0] = data[0].effective;
    effective_[1] = data[1].effective;
    groups_.resize(static_cast<size_t>(std::max(::getgroups(0, nullptr), 0)));
    if (::getgroups(static_cast<int>(groups_.size()), groups_.data()) < 0)
        groups_.clear();
    // Keep only what map_files needs (checkpoint_restore_ns_capable); no DAC override,
    // no CAP_SYS_PTRACE (which would pass a non-dumpable, e.g. setuid, process).
    data[0].effective &= CAP_TO_MASK(CAP_SYS_ADMIN);
    data[1].effective &= CAP_TO_MASK(CAP_CHECKPOINT_RESTORE);
    if (::syscall(SYS_capset, &header, data) != 0)
        return;
    switched_ = true;
    // Per thread: the system calls themselves, not glibc's wrappers that change every
    // thread of the process.
    ::syscall(SYS_setgroups, client.groups().size(), client.groups().data());
    ::syscall(SYS_setfsgid, client.gid());
    ::syscall(SYS_setfsuid, client.uid());
}

FileCredentials::~FileCredentials() {
    if (!switched_)
        return;
    ::syscall(SYS_setfsuid, 0);
    ::syscall(SYS_setfsgid, 0);
    ::syscall(SYS_setgroups, groups_.size(), groups_.data());
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2]{};
    if (::syscall(SYS_capget, &header, data) == 0) {
        data[0].effective = effective_[0];
        data[1].effective = effective_[1];
        ::syscall(SYS_capset, &header, data);
    }
}

} // namespace softhca::engine
