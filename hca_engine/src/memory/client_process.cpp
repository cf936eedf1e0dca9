#include "client_process.hpp"

#include "client_descriptors.hpp"

#include "environment.hpp"
#include "memory_map.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <linux/capability.h>
#include <linux/magic.h>
#include <linux/nsfs.h>
#include <poll.h>
#include <sstream>
#include <string>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77 // Linux 6.5
#endif

namespace softhca::engine {

namespace {

constexpr size_t kMaxRun = 1024; // IOV_MAX
// A probe address below this could fall inside a small procfs file's text.
constexpr uint64_t kLowestProbe = 1ull << 20;

int pidfd_open(pid_t pid) {
    return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
}

// poll(2) with no wait, again when a signal interrupts it: even a zero timeout fails
// with EINTR when a signal is pending and nothing is ready (a timer's SIGALRM made the
// engine refuse a live client as dead; fuzz_rdma_cm found it).
int poll_now(pollfd& p) {
    int rc;
    do
        rc = ::poll(&p, 1, 0);
    while (rc < 0 && errno == EINTR);
    return rc;
}

// The pidfd's process has not exited (a pidfd turns readable when it does); needs no
// right to signal it.
bool pidfd_alive(int pidfd) {
    pollfd p{pidfd, POLLIN, 0};
    return poll_now(p) == 0;
}

// A procfs regular file of mode 0600, opened for reading and writing, named "mem". Its
// mount must be a proc mount of `peer`'s mount namespace before anything is asked of its
// filesystem: an fstatfs of a FUSE file asks the daemon, which the client may run
// (client_descriptors.hpp).
bool looks_like_memory_file(int fd, const PeerProcess& peer) {
    if (filesystem_type(fd, peer.path("mountinfo")) != "proc")
        return false;
    struct statfs fs {};
    struct stat st {};
    if (::fstatfs(fd, &fs) != 0 || fs.f_type != PROC_SUPER_MAGIC || ::fstat(fd, &st) != 0 ||
        !S_ISREG(st.st_mode) || (st.st_mode & 07777) != 0600)
        return false;
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags < 0 || (flags & O_ACCMODE) != O_RDWR)
        return false;
    char link[64];
    char target[4096];
    std::snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    const ssize_t n = ::readlink(link, target, sizeof(target) - 1);
    if (n < 4 || n >= static_cast<ssize_t>(sizeof(target)) - 1)
        return false;
    target[n] = '\0';
    return std::strcmp(target + n - 4, "/mem") == 0;
}

// CapEff of the process, from its pinned status file.
void read_effective_caps(const PeerProcess& peer, uint32_t caps[2]) {
    std::ifstream status(peer.path("status"));
    for (std::string line; std::getline(status, line);) {
        if (line.rfind("CapEff:", 0) == 0) {
            const uint64_t v = std::strtoull(line.c_str() + 7, nullptr, 16);
            caps[0] = static_cast<uint32_t>(v);
            caps[1] = static_cast<uint32_t>(v >> 32);
        }
    }
}

} // namespace

bool PeerProcess::root_with_capability(int capability) const {
    uint32_t caps[2] = {0, 0};
    if (uid != 0 || proc_dir < 0 || capability < 0 || capability >= 64)
        return false;
    read_effective_caps(*this, caps);
    return (caps[capability / 32] >> (capability % 32)) & 1;
}

namespace {

// RLIMIT_MEMLOCK of the process (its soft limit, from its pinned limits file, which
// needs no capability to read), or unlimited with CAP_IPC_LOCK.
uint64_t read_memlock_limit(const PeerProcess& peer, const uint32_t caps[2]) {
    if ((caps[0] >> CAP_IPC_LOCK) & 1)
        return UINT64_MAX;
    std::ifstream limits(peer.path("limits"));
    for (std::string line; std::getline(limits, line);) {
        if (line.rfind("Max locked memory", 0) != 0)
            continue;
        const std::string soft = line.substr(26, line.find(' ', 26) - 26);
        return soft == "unlimited" ? UINT64_MAX : std::strtoull(soft.c_str(), nullptr, 10);
    }
    return UINT64_MAX;
}

// Whether [addr, addr + length) lies in one anonymous mapping of the peer (no file
// behind it: its pages come from memory or swap, never from a filesystem).
bool in_anonymous_memory(const PeerProcess& peer, uint64_t addr, uint64_t length) {
    // A lookup takes the process's mm lock, which a client thread stuck on its own FUSE
    // page can keep behind a queued writer: a stall watch touch.
    const StallWatch::Touch touch({peer.proc_dir, peer.account, peer.uid}, addr);
    ProcessMaps maps(peer.path("maps"), peer.proc_owner()); // one lookup (memory_map.hpp)
    MapsEntry vma;
    return maps.covering_or_next(addr, vma) && vma.start <= addr && addr + length <= vma.end &&
           vma.inode == 0 && vma.dev_major == 0 && vma.dev_minor == 0 && vma.readable;
}

// PeerProcess::account for the pinned process: walks out from its user namespace to the
// engine's (NS_GET_PARENT, at most 32 levels, as namespaces nest), keeping the last owner
// (NS_GET_OWNER_UID, in the engine's terms) that is not root. Root-owned namespaces are
// an administrator's choice of IDs (a container runtime's): their users stay users of
// their own. A namespace not below the engine's (the walk never reaches it: its owners
// are not the engine's to name) is charged by uid and read as before. False when the
// walk cannot be made (the process is gone): the connection is refused, never charged
// to its bare uid, which would let a user's subordinate ID escape the user's caps.
bool find_account(PeerProcess& peer) {
    peer.account = peer.uid;
    peer.in_user_namespace = false;
    struct stat own {};
    if (::stat("/proc/self/ns/user", &own) != 0)
        return errno == ENOENT; // a kernel without user namespaces: every peer is in ours
    int ns = ::openat(peer.proc_dir, "ns/user", O_RDONLY | O_CLOEXEC);
    if (ns < 0)
        return false;
    uid_t account = peer.uid;
    bool below = false, walked = false; // walked: to ours, or to a namespace not below it
    for (int level = 0; level <= 33; ++level) {
        struct stat st {};
        if (::fstat(ns, &st) != 0)
            break;
        if (st.st_dev == own.st_dev && st.st_ino == own.st_ino) {
            below = level > 0;
            walked = true;
            break;
        }
        uid_t owner = 0;
        if (::ioctl(ns, NS_GET_OWNER_UID, &owner) != 0)
            break;
        if (owner != 0)
            account = owner;
        const int parent = ::ioctl(ns, NS_GET_PARENT);
        if (parent < 0) {
            walked = errno == EPERM; // outside ours: not below the engine's
            break;
        }
        ::close(ns);
        ns = parent;
    }
    ::close(ns);
    if (!walked)
        return false;
    if (below) {
        peer.account = account;
        peer.in_user_namespace = true;
    }
    return true;
}

} // namespace

bool PeerProcess::pin(int socket) {
    ucred cred{};
    socklen_t len = sizeof(cred);
    if (::getsockopt(socket, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
        return false;
    pid = cred.pid;
    uid = cred.uid;
    gid = cred.gid;
    groups.resize(64);
    for (;;) {
        socklen_t bytes = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
        if (::getsockopt(socket, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &bytes) == 0) {
            groups.resize(bytes / sizeof(gid_t));
            break;
        }
        if (errno != ERANGE || bytes <= groups.size() * sizeof(gid_t)) {
            groups.clear();
            break;
        }
        groups.resize(bytes / sizeof(gid_t));
    }
    len = sizeof(pidfd);
    if (::getsockopt(socket, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &len) != 0) {
        // Before Linux 6.5: the PID, taken at once. Any other failure (the peer is gone)
        // refuses: its PID may already name another process.
        if (errno != ENOPROTOOPT)
            return false;
        pidfd = pidfd_open(pid);
    }
    if (pidfd < 0)
        return false;
    const std::string dir = "/proc/" + std::to_string(pid);
    proc_dir = ::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    // Still alive after the directory was opened: it is the pidfd's process's.
    if (proc_dir < 0 || !pidfd_alive(pidfd)) {
        release();
        return false;
    }
    if (!find_account(*this) || !pidfd_alive(pidfd)) {
        release();
        return false;
    }
    return true;
}

bool PeerProcess::pin_process(pid_t process) {
    pid = process;
    uid = account = ::getuid();
    gid = ::getgid();
    pidfd = pidfd_open(pid);
    proc_dir = ::open(("/proc/" + std::to_string(pid)).c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    return pidfd >= 0 && proc_dir >= 0;
}

std::string PeerProcess::path(const char* name) const {
    return "/proc/self/fd/" + std::to_string(proc_dir) + "/" + name;
}

uint64_t PeerProcess::start_time() const {
    const int fd = ::openat(proc_dir, "stat", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    char text[1024];
    const ssize_t got = ::read(fd, text, sizeof(text) - 1);
    ::close(fd);
    if (got <= 0)
        return 0;
    text[got] = '\0';
    // "PID (COMM) STATE ..." where COMM may hold spaces and parentheses: the fields
    // start after the last ')'; starttime is the 20th field after it (proc(5)).
    const char* at = std::strrchr(text, ')');
    if (!at)
        return 0;
    for (int field = 0; field < 20 && at; ++field)
        at = std::strchr(at + 1, ' ');
    return at ? std::strtoull(at + 1, nullptr, 10) : 0;
}

void PeerProcess::read_pid_namespace(ino_t& pidns, pid_t& ns_pid) const {
    struct stat st {};
    pidns = ::stat(path("ns/pid").c_str(), &st) == 0 ? st.st_ino : 0;
    ns_pid = pid;
    std::ifstream status(path("status"));
    for (std::string line; std::getline(status, line);) {
        if (line.rfind("NSpid:", 0) != 0)
            continue;
        std::istringstream fields(line.substr(6));
        for (pid_t p; fields >> p;)
            ns_pid = p;
        break;
    }
}

void PeerProcess::release() {
    if (pidfd >= 0)
        ::close(pidfd);
    if (proc_dir >= 0)
        ::close(proc_dir);
    pidfd = proc_dir = -1;
}

ClientProcess::ClientProcess(PeerProcess& peer, int mem_fd) : peer_(peer), mem_fd_(mem_fd) {
    peer.pidfd = peer.proc_dir = -1; // ours now
    // Capabilities are trusted only for root (uid 0 as the engine sees it). Anyone else's
    // CapEff may be its own user namespace's (unshare -Ur shows them all), or belong to
    // a set-ID program the process exec'd into while a forked child keeps the socket:
    // a non-root client is taken to have none (RLIMIT_MEMLOCK always applies to it).
    if (peer_.uid == 0)
        read_effective_caps(peer_, effective_caps_);
    memlock_limit_ = read_memlock_limit(peer_, effective_caps_);
    static const bool allowed = environment_switch_on("SOFTHCA_CROSS_MEMORY");
    cross_memory_ = allowed && peer_.uid == 0 && ((effective_caps_[0] >> CAP_SYS_PTRACE) & 1);
}

ClientProcess::~ClientProcess() {
    if (mem_fd_ >= 0)
        ::close(mem_fd_);
    peer_.release();
}

int ClientProcess::adopt(PeerProcess& peer, int mem_fd, uint64_t probe_addr, const uint8_t* probe,
                         std::shared_ptr<ClientProcess>& out) {
    if (mem_fd < 0 || peer.proc_dir < 0 || !looks_like_memory_file(mem_fd, peer))
        return EBADF;
    // A user whose memory held an engine thread on FUSE is cut off for a while.
    if (StallWatch::cut_off(peer.account))
        return EAGAIN;
    // The file reads the process's memory: 16 bytes it holds at an address of its own,
    // in anonymous memory (a file's page could make the read wait, on FUSE for its
    // daemon, which the client may run). The pinned process's maps are read with its own
    // rights: a process that exec'd a set-ID program (not dumpable) keeps them from its
    // user, so a forked child holding the connection learns nothing of that program's
    // address space from the answer (issue 40, item 8); the memory file it sends must
    // then be the pinned process's own to pass the probe.
    uint8_t seen[16];
    bool anonymous = false;
    {
        FileCredentials as_peer(peer);
        anonymous = as_peer.ok() && in_anonymous_memory(peer, probe_addr, sizeof(seen));
    }
    if (probe_addr < kLowestProbe || !anonymous)
        return EBADF;
    ssize_t read = 0;
    {
        // The client may map a FUSE file there after the look at its maps.
        const StallWatch::Touch touch(peer.proc_dir, probe_addr, peer.account, peer.uid);
        read = ::pread(mem_fd, seen, sizeof(seen), static_cast<off_t>(probe_addr));
    }
    if (read != static_cast<ssize_t>(sizeof(seen)) || std::memcmp(seen, probe, sizeof(seen)) != 0)
        return EBADF;
    out.reset(new ClientProcess(peer, mem_fd));
    return 0;
}

std::shared_ptr<ClientProcess> ClientProcess::self() {
    PeerProcess peer;
    peer.pin_process(::getpid());
    const int fd = ::open("/proc/self/mem", O_RDWR | O_CLOEXEC);
    return std::shared_ptr<ClientProcess>(new ClientProcess(peer, fd));
}

std::shared_ptr<ClientProcess> ClientProcess::posing(pid_t pid, uid_t uid, gid_t gid) {
    PeerProcess peer;
    peer.pin_process(pid);
    peer.uid = peer.account = uid;
    peer.gid = gid;
    const int fd = ::open(("/proc/" + std::to_string(pid) + "/mem").c_str(), O_RDWR | O_CLOEXEC);
    std::shared_ptr<ClientProcess> process(new ClientProcess(peer, fd));
    if (uid != 0)
        process->effective_caps_[0] = process->effective_caps_[1] = 0;
    return process;
}

ssize_t ClientProcess::read(const iovec* local, int count, uint64_t far) const {
    return contiguous(false, local, count, far);
}

ssize_t ClientProcess::write(const iovec* local, int count, uint64_t far) const {
    return contiguous(true, local, count, far);
}

ssize_t ClientProcess::contiguous(bool to_process, const iovec* local, int count,
                                  uint64_t far) const {
    if (cross_memory_) {
        size_t bytes = 0;
        for (int i = 0; i < count; ++i)
            bytes += local[i].iov_len;
        const iovec remote{reinterpret_cast<void*>(far), bytes};
        return move(to_process, local, static_cast<size_t>(count), &remote, 1);
    }
    if (cut_off()) {
        errno = EIO;
        return -1;
    }
    const StallWatch::Touch touch(peer_.proc_dir, far, peer_.account, peer_.uid);
    ssize_t n;
    do {
        n = to_process ? ::pwritev(mem_fd_, local, count, static_cast<off_t>(far))
                       : ::preadv(mem_fd_, local, count, static_cast<off_t>(far));
    } while (n < 0 && errno == EINTR);
    return n;
}

bool ClientProcess::cut_off() const {
    // The epoch last looked at and what it said, in one word (epoch << 1 | cut off): two
    // data paths looking at once cannot leave a new epoch paired with an old answer.
    const uint64_t epoch = StallWatch::penalty_epoch();
    const uint64_t seen = penalty_seen_.load(std::memory_order_relaxed);
    if (seen == epoch << 1)
        return false;
    const bool cut = StallWatch::cut_off(peer_.account);
    penalty_seen_.store(epoch << 1 | (cut ? 1 : 0), std::memory_order_relaxed);
    return cut;
}

bool ClientProcess::alive_this_round() const {
    const uint64_t round = round_.load(std::memory_order_relaxed);
    if (seen_alive_round_.load(std::memory_order_relaxed) == round)
        return true;
    if (!pidfd_alive(peer_.pidfd))
        return false;
    seen_alive_round_.store(round, std::memory_order_relaxed);
    return true;
}

ssize_t ClientProcess::move(bool to_process, const iovec* local, size_t local_count,
                            const iovec* far, size_t far_count) const {
    // Cross-memory attach: one call (the kernel takes up to IOV_MAX of each), and a look
    // at the pidfd once per data-path round (a system call; it was one per call, 4% of
    // the engine's time in a 64 KiB ib_send_bw). A write looks before: alive, the PID
    // names this process (a PID is given again only once its process is gone, reaped and
    // the kernel's PIDs have come round: pid_max allocations later), so nothing is
    // written elsewhere. A read looks after. Within one round (microseconds) a PID cannot
    // come round again; and only root clients use cross-memory attach.
    if (to_process && !alive_this_round())
        return 0;
    ssize_t total = 0;
    for (size_t l = 0, f = 0; l < local_count && f < far_count;) {
        const size_t ln = std::min(local_count - l, kMaxRun), fn = std::min(far_count - f, kMaxRun);
        if (cut_off())
            return total;
        const StallWatch::Touch touch(peer_.proc_dir, reinterpret_cast<uint64_t>(far[f].iov_base),
                                      peer_.account, peer_.uid);
        const ssize_t n = to_process ? ::process_vm_writev(peer_.pid, local + l, ln, far + f, fn, 0)
                                     : ::process_vm_readv(peer_.pid, local + l, ln, far + f, fn, 0);
        if (!to_process && !alive_this_round())
            return 0; // gone: what was read is not the client's
        if (n <= 0)
            return total;
        total += n;
        if (ln == local_count - l && fn == far_count - f)
            break;
        // More than IOV_MAX pieces (only the joint writes have so many, one local piece
        // per far piece): go on with the next ones.
        l += ln;
        f += fn;
    }
    return total;
}

ssize_t ClientProcess::move(bool to_process, const iovec* local, const iovec* far, size_t count,
                            const uint8_t* starts_run) const {
    if (cross_memory_)
        return move(to_process, local, count, far, count);
    ssize_t total = 0;
    for (size_t i = 0; i < count;) {
        // A run: pieces whose addresses in the process follow each other.
        size_t end = i + 1;
        uint64_t next = reinterpret_cast<uint64_t>(far[i].iov_base) + far[i].iov_len;
        ssize_t bytes = static_cast<ssize_t>(far[i].iov_len);
        while (end < count && end - i < kMaxRun && !(starts_run && starts_run[end]) &&
               reinterpret_cast<uint64_t>(far[end].iov_base) == next) {
            next += far[end].iov_len;
            bytes += static_cast<ssize_t>(far[end].iov_len);
            ++end;
        }
        const uint64_t at = reinterpret_cast<uint64_t>(far[i].iov_base);
        const int pieces = static_cast<int>(end - i);
        const ssize_t n = contiguous(to_process, local + i, pieces, at);
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
    return ::pread(mem_fd_, &byte, 1, 0) == 0 || (cross_memory_ && !pidfd_alive(peer_.pidfd));
}

bool ClientProcess::abandoned() const {
    pollfd p{connection_, POLLRDHUP, 0};
    return connection_ < 0 ||
           (poll_now(p) == 1 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR)) != 0);
}

FileCredentials::FileCredentials(const ClientProcess& client) {
    switch_to(client.uid(), client.gid(), client.groups(), client.effective_caps(),
              client.in_user_namespace());
}

FileCredentials::FileCredentials(const PeerProcess& peer) {
    uint32_t caps[2] = {0, 0};
    if (peer.uid == 0)
        read_effective_caps(peer, caps);
    switch_to(peer.uid, peer.gid, peer.groups, caps, peer.in_user_namespace);
}

void FileCredentials::switch_to(uid_t uid, gid_t gid, const std::vector<gid_t>& groups,
                                const uint32_t caps[2], bool in_user_namespace) {
    if (::geteuid() != 0)
        return; // an engine that is not root has nobody's rights to lend or drop
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2]{};
    if (::syscall(SYS_capget, &header, data) != 0) {
        ok_ = false;
        return;
    }
    effective_[0] = data[0].effective;
    effective_[1] = data[1].effective;
    groups_.resize(static_cast<size_t>(std::max(::getgroups(0, nullptr), 0)));
    if (::getgroups(static_cast<int>(groups_.size()), groups_.data()) < 0)
        groups_.clear();
    switched_ = true;
    // The IDs first, while CAP_SETUID and CAP_SETGID are effective; per thread: the
    // system calls themselves, not glibc's wrappers that change every thread. Each is
    // read back: a switch that did not take must not open anything.
    const bool groups_set = ::syscall(SYS_setgroups, groups.size(), groups.data()) == 0;
    ::syscall(SYS_setfsgid, gid);
    ::syscall(SYS_setfsuid, uid);
    const auto fsgid = static_cast<gid_t>(::syscall(SYS_setfsgid, -1));
    const auto fsuid = static_cast<uid_t>(::syscall(SYS_setfsuid, -1));
    // Then the capabilities: the client's own effective ones (what it could do itself)
    // and CAP_CHECKPOINT_RESTORE, which map_files asks of whoever opens it.
    data[0].effective &= caps[0];
    data[1].effective &= caps[1];
    data[1].effective |= CAP_TO_MASK(CAP_CHECKPOINT_RESTORE) & data[1].permitted;
    // A process in a user namespace below the engine's: its /proc files need
    // CAP_SYS_PTRACE over that namespace even for its own user (commoncap's rule for
    // another namespace). The files opened so are the client's own /proc entries, and
    // ProcessMaps refuses one whose process is not dumpable (its owner is not the user).
    if (in_user_namespace)
        data[0].effective |= CAP_TO_MASK(CAP_SYS_PTRACE) & data[0].permitted;
    const bool caps_set = ::syscall(SYS_capset, &header, data) == 0;
    ok_ = groups_set && caps_set && fsuid == uid && fsgid == gid;
}

FileCredentials::~FileCredentials() {
    if (!switched_)
        return;
    // The capabilities first: setting the IDs back needs CAP_SETUID and CAP_SETGID.
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2]{};
    if (::syscall(SYS_capget, &header, data) == 0) {
        data[0].effective = effective_[0];
        data[1].effective = effective_[1];
        ::syscall(SYS_capset, &header, data);
    }
    ::syscall(SYS_setfsuid, 0);
    ::syscall(SYS_setfsgid, 0);
    ::syscall(SYS_setgroups, groups_.size(), groups_.data());
}

} // namespace softhca::engine
