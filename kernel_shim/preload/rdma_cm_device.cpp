// /dev/infiniband/rdma_cm for programs run with `softhca exec`: what the kernel's
// rdma_ucm module is to librdmacm. open(2) of the device path gives a pipe that is the
// file's event doorbell (see device_interface/rdma_cm.hpp) and a connection to the
// engine that carries every write(2) librdmacm makes; fstat(2) reports a character
// device, as librdmacm checks; close(2) ends the connection, and with it the file's ids,
// as closing the kernel's file does. Without a softhca tree, open falls through and
// fails as it does on a machine without rdma_ucm.
#include "rdma_cm_device.hpp"

#include "next_symbol.hpp"
#include "rdma_netlink.hpp"
#include "softhca/device_interface/rdma_cm.hpp"
#include "softhca/device_interface/socket_io.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rdma_user_cm.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

namespace softhca::preload {
namespace {

namespace di = device_interface;

// The misc device number the kernel's rdma_cm node has on common systems (misc major
// 10); librdmacm only checks that it is a character device when the ABI version comes
// from sysfs.
constexpr unsigned kMiscMajor = 10;
constexpr unsigned kRdmaCmMinor = 58;

struct OpenFile {
    std::atomic<int> fd{-1}; // the application's descriptor (the pipe)
    int engine = -1;         // the connection to the engine
    uint32_t sequence = 0;
    pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; // one exchange at a time
};

constexpr size_t kMaxFiles = 64;
OpenFile files[kMaxFiles];
std::atomic<int> open_files{0};
pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;

OpenFile* find(int fd) {
    if (fd < 0 || open_files.load(std::memory_order_acquire) == 0)
        return nullptr;
    for (auto& f : files)
        if (f.fd.load(std::memory_order_acquire) == fd)
            return &f;
    return nullptr;
}

bool engine_socket_path(char (&out)[sizeof(sockaddr_un::sun_path)]) {
    const char* root = std::getenv("SYSFS_PATH");
    if (!root || !*root)
        return false;
    char path[PATH_MAX];
    std::snprintf(path, sizeof(path), "%s/%s", root, di::kRdmaCmSocketFile);
    static const auto real_open = next_symbol<int (*)(const char*, int, ...)>("open");
    const int fd = real_open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    const ssize_t n = ::read(fd, out, sizeof(out) - 1);
    ::close(fd);
    if (n <= 0)
        return false;
    out[n] = '\0';
    out[std::strcspn(out, "\n")] = '\0';
    return out[0] != '\0';
}

int connect_engine(const char* socket_path) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    const size_t length = std::strlen(socket_path);
    if (length >= sizeof(addr.sun_path)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    std::memcpy(addr.sun_path, socket_path, length + 1);
    const int sock = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (sock < 0)
        return -1;
    if (::connect(sock, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
        const int saved = errno;
        ::close(sock);
        errno = saved;
        return -1;
    }
    return sock;
}

// One request and its reply; the response bytes go where the engine says. Returns what
// write(2) returns.
ssize_t exchange(OpenFile& file, const void* request, size_t size, bool& wait_again,
                 int fd_to_pass = -1) {
    alignas(8) char reply_buffer[di::kMaxRdmaCmMessage];
    pthread_mutex_lock(&file.lock);
    ssize_t sent = di::send_message(file.engine, request, size, fd_to_pass);
    di::ReceivedMessage m{};
    if (sent == static_cast<ssize_t>(size))
        m = di::receive_message(file.engine, reply_buffer, sizeof(reply_buffer));
    pthread_mutex_unlock(&file.lock);
    if (m.fd >= 0)
        ::close(m.fd);
    di::RdmaCmReply reply{};
    if (m.size < static_cast<ssize_t>(sizeof(reply)) || m.truncated) {
        errno = ENODEV; // the engine is gone, as after the device was removed
        return -1;
    }
    std::memcpy(&reply, reply_buffer, sizeof(reply));
    wait_again = reply.wait_again != 0;
    if (reply.result < 0) {
        errno = -reply.result;
        return -1;
    }
    const size_t bytes = std::min<size_t>(reply.response_bytes, m.size - sizeof(reply));
    if (bytes && !wait_again) {
        // Into the caller's response buffer, checked as copy_to_user would: a bad
        // pointer is EFAULT, not a crash.
        iovec local{reply_buffer + sizeof(reply), bytes};
        iovec remote{reinterpret_cast<void*>(static_cast<uintptr_t>(reply.response_address)),
                     bytes};
        if (::process_vm_writev(::getpid(), &local, 1, &remote, 1, 0) !=
            static_cast<ssize_t>(bytes)) {
            errno = EFAULT;
            return -1;
        }
    }
    return reply.result;
}

// Copies from the caller's memory as copy_from_user would: false (EFAULT) when it
// cannot be read.
bool copy_in(void* to, const void* from, size_t bytes) {
    if (!bytes)
        return true;
    iovec local{to, bytes};
    iovec remote{const_cast<void*>(from), bytes};
    return ::process_vm_readv(::getpid(), &local, 1, &remote, 1, 0) == static_cast<ssize_t>(bytes);
}

// GET_EVENT blocks in write(2) until an event is queued, or fails with EAGAIN on a
// non-blocking file.
bool wait_for_event(int fd) {
    const bool nonblocking = (::fcntl(fd, F_GETFL) & O_NONBLOCK) != 0;
    pollfd p{fd, POLLIN, 0};
    const int n = ::poll(&p, 1, nonblocking ? 0 : -1);
    if (n == 0) {
        errno = EAGAIN;
        return false;
    }
    return n > 0; // -1: EINTR, as an interrupted wait in the kernel gives
}

} // namespace

bool open_rdma_cm(const char* path, int flags, int& result) {
    if (!path || std::strcmp(path, di::kRdmaCmDevicePath) != 0)
        return false;
    char socket_path[sizeof(sockaddr_un::sun_path)];
    if (!engine_socket_path(socket_path))
        return false; // no softhca instance: the real open says ENOENT
    result = -1;
    static const auto real_open = next_symbol<int (*)(const char*, int, ...)>("open");
    int pipe_fds[2];
    if (::pipe2(pipe_fds, O_CLOEXEC) != 0)
        return true;
    char proc_path[48];
    std::snprintf(proc_path, sizeof(proc_path), "/proc/self/fd/%d", pipe_fds[0]);
    // Both are the same pipe, each end readable and writable: the application's keeps
    // the open flags it asked for, the engine's is non-blocking.
    const int app = real_open(proc_path, O_RDWR | (flags & (O_CLOEXEC | O_NONBLOCK)));
    const int engine_end = real_open(proc_path, O_RDWR | O_NONBLOCK | O_CLOEXEC);
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    const int sock = app >= 0 && engine_end >= 0 ? connect_engine(socket_path) : -1;
    bool opened = false;
    if (sock >= 0) {
        di::RdmaCmOpen open{};
        open.header.magic = di::kRdmaCmMagic;
        open.header.version = di::kRdmaCmVersion;
        open.header.op = static_cast<uint16_t>(di::RdmaCmOp::Open);
        open.header.length = sizeof(open);
        di::RdmaCmReply reply{};
        const bool sent = di::send_message(sock, &open, sizeof(open), engine_end) == sizeof(open);
        // A refused open (a user at its cap of files) is answered, then closed with the
        // Open unread: the kernel reports that reset before the answer, which still waits.
        // A send that failed may have met the same close.
        ssize_t got = ::recv(sock, &reply, sizeof(reply), sent ? 0 : MSG_DONTWAIT);
        if (got < 0 && errno == ECONNRESET)
            got = ::recv(sock, &reply, sizeof(reply), MSG_DONTWAIT);
        opened = sent && got == sizeof(reply) && reply.result == 0;
        if (!opened)
            errno = reply.result < 0 ? -reply.result : ENODEV;
    }
    const int saved = errno;
    if (engine_end >= 0)
        ::close(engine_end);
    pthread_mutex_lock(&table_lock);
    OpenFile* slot = nullptr;
    for (auto& f : files)
        if (!slot && f.fd.load() < 0)
            slot = &f;
    if (opened && slot) {
        slot->engine = sock;
        slot->sequence = 0;
        slot->fd.store(app, std::memory_order_release);
        open_files.fetch_add(1);
        result = app;
    }
    pthread_mutex_unlock(&table_lock);
    if (result < 0) {
        if (sock >= 0)
            ::close(sock);
        if (app >= 0)
            ::close(app);
        errno = opened ? EMFILE : saved;
    }
    return true;
}

bool rdma_cm_write(int fd, const void* buffer, size_t count, ssize_t& result) {
    OpenFile* file = find(fd);
    if (!file)
        return false;
    result = -1;
    rdma_ucm_cmd_hdr hdr{};
    alignas(8) char request[di::kMaxRdmaCmMessage];
    auto* command = reinterpret_cast<di::RdmaCmCommand*>(request);
    const size_t room = sizeof(request) - sizeof(*command);
    if (count < sizeof(hdr) || count > room) {
        errno = EINVAL;
        return true;
    }
    char* body = request + sizeof(*command);
    if (!copy_in(body, buffer, count)) {
        errno = EFAULT;
        return true;
    }
    std::memcpy(&hdr, body, sizeof(hdr));
    size_t extra = 0;
    if (hdr.cmd == RDMA_USER_CM_CMD_SET_OPTION &&
        count >= sizeof(hdr) + sizeof(rdma_ucm_set_option)) {
        rdma_ucm_set_option option{};
        std::memcpy(&option, body + sizeof(hdr), sizeof(option));
        // The kernel refuses option values this large with EINVAL; so does the engine.
        extra = std::min<size_t>(option.optlen, room - count);
        if (!copy_in(body + count, reinterpret_cast<void*>(static_cast<uintptr_t>(option.optval)),
                     extra)) {
            errno = EFAULT;
            return true;
        }
    }
    // MIGRATE_ID: the descriptor the caller holds at the number it names goes along, as
    // the kernel takes the source file from the caller's own table (fdget). A number
    // that names nothing passes nothing: the engine answers ENOENT, as ucma_migrate_id
    // does when fdget fails.
    int source_file = -1;
    if (hdr.cmd == RDMA_USER_CM_CMD_MIGRATE_ID &&
        count >= sizeof(hdr) + sizeof(rdma_ucm_migrate_id)) {
        rdma_ucm_migrate_id migrate{};
        std::memcpy(&migrate, body + sizeof(hdr), sizeof(migrate));
        const int named = static_cast<int>(migrate.fd);
        if (named >= 0 && ::fcntl(named, F_GETFD) >= 0)
            source_file = named;
    }
    command->header.magic = di::kRdmaCmMagic;
    command->header.version = di::kRdmaCmVersion;
    command->header.op = static_cast<uint16_t>(di::RdmaCmOp::Command);
    command->header.length = static_cast<uint32_t>(sizeof(*command) + count + extra);
    command->write_bytes = static_cast<uint32_t>(count);
    command->extra_bytes = static_cast<uint32_t>(extra);
    for (;;) {
        if (hdr.cmd == RDMA_USER_CM_CMD_GET_EVENT && !wait_for_event(fd))
            return true;
        command->header.sequence = ++file->sequence;
        bool wait_again = false;
        result = exchange(*file, request, command->header.length, wait_again, source_file);
        if (!wait_again)
            return true;
    }
}

namespace {

bool rdma_cm_close(int fd) {
    OpenFile* file = find(fd);
    if (!file)
        return false;
    pthread_mutex_lock(&table_lock);
    if (file->fd.load() == fd) {
        file->fd.store(-1, std::memory_order_release);
        pthread_mutex_lock(&file->lock);
        ::close(file->engine); // the engine destroys the file's ids
        file->engine = -1;
        pthread_mutex_unlock(&file->lock);
        open_files.fetch_sub(1);
    }
    pthread_mutex_unlock(&table_lock);
    return true;
}

void rdma_cm_fstat(int fd, struct stat* st) {
    if (st && find(fd)) {
        st->st_mode = S_IFCHR | 0666;
        st->st_rdev = makedev(kMiscMajor, kRdmaCmMinor);
    }
}

} // namespace
} // namespace softhca::preload

using namespace softhca::preload;

extern "C" __attribute__((visibility("default"))) int close(int fd) {
    static const auto real = next_symbol<int (*)(int)>("close");
    rdma_cm_close(fd);
    rdma_netlink_close(fd);
    return real(fd);
}

extern "C" __attribute__((visibility("default"))) int fstat(int fd, struct stat* st) {
    static const auto real = next_symbol<int (*)(int, struct stat*)>("fstat");
    const int rc = real(fd, st);
    if (rc == 0)
        rdma_cm_fstat(fd, st);
    return rc;
}

extern "C" __attribute__((visibility("default"))) int fstat64(int fd, struct stat64* st) {
    static const auto real = next_symbol<int (*)(int, struct stat64*)>("fstat64");
    const int rc = real(fd, st);
    if (rc == 0)
        rdma_cm_fstat(fd, reinterpret_cast<struct stat*>(st));
    return rc;
}
