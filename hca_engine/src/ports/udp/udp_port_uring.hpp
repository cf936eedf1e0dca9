// What the kernel UDP socket ports (udp_ports.hpp) share between their setup
// (udp_ports.cpp) and their data path (udp_port_io.cpp): the io_uring, the sockets, the
// provided receive buffers and the transmit slots.
#pragma once

#include "softhca/transport/roce_address.hpp"
#include "softhca/transport/roce_frame.hpp"
#include "udp_ports.hpp"

#include <array>
#include <cstdint>
#include <liburing.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <vector>

namespace softhca::engine {

namespace udp_port {

constexpr unsigned kSqEntries = 1024;
constexpr unsigned kCqEntries = 8192;
constexpr unsigned kRxBuffers = 2048; // a power of two (the provided-buffer ring)
constexpr uint16_t kBufferGroup = 0;
// A receive buffer holds the recvmsg header, the peer's address, the ancillary data and
// the datagram; the largest RoCEv2 packet of a 4096-byte path MTU is ~4150 bytes. The
// headers rebuilt in front of the datagram (at most 62 bytes) take the place of the
// recvmsg header, name and ancillary data (at least 16 + 28 + 64 bytes).
constexpr uint32_t kNameBytes = sizeof(sockaddr_in6);
constexpr uint32_t kControlBytes = 64;
constexpr uint32_t kRxBufferBytes = 4608;
constexpr unsigned kTxSlots = 1024;
constexpr uint32_t kTxFrameBytes = 4608;
constexpr uint64_t kSendTag = 1ull << 63; // user_data of sends: the tag and the slot
constexpr size_t kMaxHeaders =
    transport::kEthernetHeaderBytes + transport::kIpv6HeaderBytes + transport::kUdpHeaderBytes;
static_assert(sizeof(io_uring_recvmsg_out) + kNameBytes + kControlBytes >= kMaxHeaders);

} // namespace udp_port

struct UdpSocket {
    int fd = -1;
    size_t port = 0;
    bool ipv6 = false;
    transport::Gid address{};
    msghdr receive_template{}; // name and control sizes for the multishot recvmsg
    bool armed = false;
};

struct TxSlot {
    alignas(64) uint8_t frame[udp_port::kTxFrameBytes];
    msghdr message{};
    iovec payload{};
    sockaddr_storage to{};
    alignas(cmsghdr) uint8_t control[64];
    size_t port = 0;
};

struct UdpPortSet::Uring {
    io_uring ring{};
    bool ring_up = false;
    int eventfd = -1;
    int ioctl_fd = -1;
    std::vector<UdpSocket> sockets;
    std::vector<std::array<int, 2>> socket_of_port; // [IPv4, IPv6] index into sockets, -1
    io_uring_buf_ring* buffers = nullptr;
    size_t buffers_bytes = 0;
    std::vector<uint8_t> rx_memory;
    std::vector<TxSlot> tx;
    std::vector<uint32_t> tx_free;
    std::vector<std::vector<RxFrame>> pending; // per port: rebuilt frames for receive()
    std::vector<size_t> pending_head;
    std::vector<int64_t> held; // per port: a slot the fault injector holds back, or -1
    unsigned queued = 0;       // SQEs not yet submitted

    uint8_t* rx_buffer(unsigned id) {
        return rx_memory.data() + size_t{id} * udp_port::kRxBufferBytes;
    }

    void give_buffer(unsigned id) {
        io_uring_buf_ring_add(buffers, rx_buffer(id), udp_port::kRxBufferBytes,
                              static_cast<uint16_t>(id),
                              io_uring_buf_ring_mask(udp_port::kRxBuffers), 0);
        io_uring_buf_ring_advance(buffers, 1);
    }

    io_uring_sqe* sqe() {
        io_uring_sqe* s = io_uring_get_sqe(&ring);
        if (!s) { // the submission queue is full: hand it over and take a fresh one
            io_uring_submit(&ring);
            queued = 0;
            s = io_uring_get_sqe(&ring);
        }
        if (s)
            ++queued;
        return s;
    }

    void arm(size_t index) {
        UdpSocket& s = sockets[index];
        io_uring_sqe* entry = sqe();
        if (!entry)
            return;
        io_uring_prep_recvmsg_multishot(entry, s.fd, &s.receive_template, MSG_TRUNC);
        entry->flags |= IOSQE_BUFFER_SELECT;
        entry->buf_group = udp_port::kBufferGroup;
        io_uring_sqe_set_data64(entry, index);
        s.armed = true;
    }
};

} // namespace softhca::engine
