// The emulated NETLINK_RDMA socket's hook into the interposed close (rdma_netlink.cpp).
#pragma once

namespace softhca::preload {

// close(2) of an emulated RDMA netlink socket: drops this library's end of it.
void rdma_netlink_close(int fd);

} // namespace softhca::preload
