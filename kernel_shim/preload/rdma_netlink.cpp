// libibverbs asks the kernel for the RDMA devices over NETLINK_RDMA first and reads the
// device tree under SYSFS_PATH only when that fails. On a host whose kernel has ib_core
// loaded it would list the kernel's devices instead of softhca's, so for a process run
// with this library the RDMA netlink family is not there, as on a host without ib_core.
#include "next_symbol.hpp"

#include <cerrno>
#include <linux/netlink.h>
#include <sys/socket.h>

extern "C" __attribute__((visibility("default"))) int socket(int domain, int type, int protocol) {
    using namespace softhca::preload;
    static const auto real = next_symbol<int (*)(int, int, int)>("socket");
    if (domain == AF_NETLINK && protocol == NETLINK_RDMA) {
        errno = EPROTONOSUPPORT;
        return -1;
    }
    return real(domain, type, protocol);
}
