// The emulated NETLINK_RDMA socket's hook into the interposed close (rdma_netlink.cpp).
#pragma once

#include <cstddef>
#include <sys/types.h>

namespace softhca::preload {

// close(2) of an emulated RDMA netlink socket: drops this library's end of it.
void rdma_netlink_close(int fd);
// write(2) to one: a request, as send(2). True when `fd` is one (`result` is what write
// returns).
bool rdma_netlink_write(int fd, const void* buffer, size_t count, ssize_t& result);
// Before a read of any kind: hands over answers that waited for room. True when `fd` is
// an emulated socket.
bool rdma_netlink_before_read(int fd);

} // namespace softhca::preload
