// The one uverbs command libibverbs sends to the kernel that a softhca program needs:
// IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL (ibv_create_comp_channel). libibverbs writes it
// to the device's cmd_fd and expects the kernel to fill the response in place during
// that write(2); softhca's cmd_fd is /dev/full (every write fails with ENOSPC), so
// without this library the verb fails and everything else keeps working.
//
// The channel made here is a pipe, reopened read-write through /proc so that the single
// fd the application holds keeps it open: ibv_get_cq_event reads one 8-byte
// ib_uverbs_comp_event_desc per event from it, and it works with O_NONBLOCK, poll and
// epoll. The provider opens a write end for the engine from the same /proc path when a
// CQ is created on the channel, and the engine writes the events.
#include "next_symbol.hpp"
#include "rdma_cm_device.hpp"
#include "rdma_netlink.hpp"
#include "softhca/device_interface/registration.hpp"

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <rdma/ib_user_verbs.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

namespace softhca::preload {
namespace {

struct CreateCompChannelCommand {
    ib_uverbs_cmd_hdr header;
    ib_uverbs_create_comp_channel body;
};
static_assert(sizeof(CreateCompChannelCommand) == 16);

// Only the exact shape libibverbs writes is looked at further; every other write goes
// straight through at the cost of two comparisons.
bool looks_like_create_comp_channel(const void* buffer, size_t count) {
    if (count != sizeof(CreateCompChannelCommand) || !buffer)
        return false;
    CreateCompChannelCommand command;
    std::memcpy(&command, buffer, sizeof(command));
    return command.header.command == IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL &&
           command.header.in_words * 4u == sizeof(command) &&
           command.header.out_words * 4u == sizeof(ib_uverbs_create_comp_channel_resp);
}

// A softhca device's cmd_fd: the node the engine's registration made under
// /dev/infiniband (device_interface/registration.hpp).
bool is_softhca_cmd_fd(int fd) {
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISCHR(st.st_mode) ||
        st.st_rdev != makedev(device_interface::kCmdDeviceMajor, device_interface::kCmdDeviceMinor))
        return false;
    char link[64];
    char target[256];
    std::snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    const ssize_t n = ::readlink(link, target, sizeof(target) - 1);
    constexpr char kCdevDir[] = "/dev/infiniband/";
    return n > 0 && std::strncmp(target, kCdevDir, sizeof(kCdevDir) - 1) == 0;
}

// Returns the channel fd, or -1 with errno.
int make_channel() {
    int pipe_fds[2];
    if (::pipe2(pipe_fds, O_CLOEXEC) != 0)
        return -1;
    char path[48];
    std::snprintf(path, sizeof(path), "/proc/self/fd/%d", pipe_fds[0]);
    const int channel = ::open(path, O_RDWR | O_CLOEXEC);
    const int saved = errno;
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    errno = saved;
    return channel;
}

ssize_t create_comp_channel(const void* buffer, size_t count) {
    CreateCompChannelCommand command;
    std::memcpy(&command, buffer, sizeof(command));
    auto* response = reinterpret_cast<ib_uverbs_create_comp_channel_resp*>(
        static_cast<uintptr_t>(command.body.response));
    if (!response) {
        errno = EFAULT;
        return -1;
    }
    const int channel = make_channel();
    if (channel < 0)
        return -1;
    response->fd = static_cast<uint32_t>(channel);
    return static_cast<ssize_t>(count);
}

} // namespace
} // namespace softhca::preload

extern "C" __attribute__((visibility("default"))) ssize_t write(int fd, const void* buffer,
                                                                size_t count) {
    using namespace softhca::preload;
    static const auto real = next_symbol<ssize_t (*)(int, const void*, size_t)>("write");
    if (looks_like_create_comp_channel(buffer, count) && is_softhca_cmd_fd(fd))
        return create_comp_channel(buffer, count);
    if (ssize_t written; rdma_cm_write(fd, buffer, count, written))
        return written;
    if (ssize_t written; rdma_netlink_write(fd, buffer, count, written))
        return written;
    return real(fd, buffer, count);
}
