// The answers of the kernel's RDMA netlink (rdma_nl, its NLDEV client) for a softhca
// tree: what `rdma dev|link|statistic|system show`, `rdma link add|delete` and `rdma
// statistic qp mode|show|set|bind|unbind` (iproute2) and libibverbs's device discovery
// ask, built from the device tree the engine keeps (SYSFS_PATH) and the engine's status
// document, a link added or deleted and a QP counter's mode or binding changed by asking
// the engine. Message and attribute layout from the kernel's uapi rdma_netlink.h, as the
// kernel's nldev.c fills them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace softhca::preload {

// Answers one request datagram (one or more netlink messages) from process port id
// `portid`: the messages to hand back, in order (the caller packs them into datagrams).
// A request the kernel would refuse gets its error (EINVAL for another client or an
// operation nldev does not have, EOPNOTSUPP for one not offered here, ENODEV for a
// device index); a message that is not a request gets nothing, or its ACK when asked.
// Link add and delete, QP counter changes (and the resource and QP counter requests)
// ask the engine over its control socket, which the tree names: its answer, or EIO when
// it does not answer.
std::vector<std::string> answer_rdma_netlink(const char* tree_root, const uint8_t* request,
                                             size_t length, uint32_t portid);

} // namespace softhca::preload
