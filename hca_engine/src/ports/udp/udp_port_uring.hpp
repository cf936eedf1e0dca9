// What the kernel UDP socket ports (udp_ports.hpp) share between their setup
// (udp_ports.cpp) and their data path (udp_port_io.cpp): the io_uring, the sockets, the
// provided receive buffers and the transmit slots.
#pragma once

#include "softhca/transport/roce_address.hpp"
#include "softhca/transport/roce_frame.hpp"
#include "udp_ports.hpp"

#include <array>
#include <cstdint>
#include <deque>
#include <liburing.h>
#include <memory>
#include <netinet/in.h>
#include <sys/socket.h>
#include <vector>

namespace softhca::engine {

namespace udp_port {

constexpr unsigned kSqEntries = 1024;
constexpr unsigned kCqEntries = 8192;
// Landing buffers (a power of two: the provided-buffer ring). Each holds the recvmsg
// header, the peer's address, the ancillary data and a datagram, or with UDP_GRO a run
// of them coalesced (at most 64 KiB). The headers rebuilt in front of a lone datagram
// (at most 62 bytes) take the place of the recvmsg header, name and ancillary data (at
// least 16 + 28 + 128 bytes). The ring hands them out in turn, so all of them are
// touched once traffic flows (17 MiB).
constexpr unsigned kRxBuffers = 256;
constexpr uint16_t kBufferGroup = 0;
constexpr uint32_t kNameBytes = sizeof(sockaddr_in6);
// The ancillary data: hop limit, traffic class and (a coalesced run) UDP_GRO's segment
// size, 24 bytes each; cut short, the traffic class (ECN) would be lost.
constexpr uint32_t kControlBytes = 128;
constexpr uint32_t kRxBufferBytes = 65536 + 512;
// A frame: the largest RoCEv2 packet of a 4096-byte path MTU (~4150 bytes) and headers.
constexpr uint32_t kFrameBytes = 4608;
// Frames copied out of a coalesced run, with their headers in front: the data path holds
// a burst of frames at a time, so a few bursts' worth is enough.
constexpr unsigned kRxCopies = 256;
constexpr unsigned kTxSlots = 1024;
constexpr uint32_t kTxFrameBytes = kFrameBytes;
// One UDP_SEGMENT send: at most UDP_MAX_SEGMENTS datagrams (64 before Linux 6.8), and
// what one IP packet's length can carry before the kernel segments it.
constexpr unsigned kMaxSegments = 64;
constexpr uint32_t kMaxRunBytes = 65000;
constexpr uint64_t kSendTag = 1ull << 63;   // user_data of sends: the tag and the run
constexpr uint64_t kCancelTag = 1ull << 62; // user_data of a cancellation (remove_port)
// Frame handles: a landing buffer's id + 1, or a copy's index + 1 with this bit.
constexpr uintptr_t kCopyTag = uintptr_t{1} << 20;
static_assert(kRxBuffers < kCopyTag && kRxCopies < kCopyTag);
constexpr size_t kMaxHeaders =
    transport::kEthernetHeaderBytes + transport::kIpv6HeaderBytes + transport::kUdpHeaderBytes;
static_assert(sizeof(io_uring_recvmsg_out) + kNameBytes + kControlBytes >= kMaxHeaders);
static_assert(kMaxHeaders + 4096 + 64 <= kFrameBytes);

} // namespace udp_port

struct UdpSocket {
    int fd = -1;
    size_t port = 0;
    bool ipv6 = false;
    bool gso = false; // sends runs of datagrams with UDP_SEGMENT
    transport::Gid address{};
    msghdr receive_template{}; // name and control sizes for the multishot recvmsg
    bool armed = false;
    bool closed = false; // its port was removed: never armed again, what lands goes back
};

// What a received datagram's ancillary data says.
struct ReceivedMeta {
    uint8_t hop_limit = 64;
    uint8_t traffic_class = 0;
    uint32_t segment = 0; // UDP_GRO: the size of each coalesced datagram (the last may be less)
};

// A datagram, or a coalesced run of them, in a landing buffer: handed out as frames.
struct Landed {
    unsigned buffer = 0;
    size_t socket = 0;
    uint8_t* payload = nullptr;
    uint32_t length = 0;
    uint32_t offset = 0; // of the run: where the next datagram starts
    ReceivedMeta meta;
    sockaddr_in6 from{}; // or a sockaddr_in
};

struct TxSlot {
    alignas(64) uint8_t frame[udp_port::kTxFrameBytes];
    size_t port = 0;
};

// One sendmsg: a datagram, or a run of equal-size ones (the last may be shorter) to one
// destination that the kernel segments (UDP_SEGMENT).
struct TxRun {
    msghdr message{};
    sockaddr_storage to{};
    alignas(cmsghdr) uint8_t control[3 * CMSG_SPACE(sizeof(int))]; // hop, class, segment
    iovec payloads[udp_port::kMaxSegments];
    uint32_t slots[udp_port::kMaxSegments];
    unsigned count = 0;
    uint32_t segment = 0; // the first datagram's size: the run's segment size
    uint32_t bytes = 0;
    bool ended = false; // a shorter datagram closed it
    size_t port = 0;
    int socket = -1;
    uint8_t hop_limit = 0;
    uint8_t traffic_class = 0;
};

struct UdpPortSet::Uring {
    PortsConfig config; // what every port is made with (add_port too)
    io_uring ring{};
    bool ring_up = false;
    int eventfd = -1;
    int ioctl_fd = -1;
    // Never moved (a deque grows at its end in place): the kernel reads each one's receive
    // template while its receive is armed.
    std::deque<UdpSocket> sockets;
    std::vector<std::array<int, 2>> socket_of_port; // [IPv4, IPv6] index into sockets, -1
    io_uring_buf_ring* buffers = nullptr;
    size_t buffers_bytes = 0;
    std::unique_ptr<uint8_t[]> rx_memory;   // kRxBuffers landing buffers
    std::unique_ptr<uint8_t[]> copy_memory; // kRxCopies frames
    std::vector<uint32_t> copies_free;
    std::vector<TxSlot> tx;
    std::vector<uint32_t> tx_free;
    std::vector<TxRun> runs;
    std::vector<uint32_t> runs_free;
    std::vector<int64_t> open_run;            // per port: the run being filled, or -1
    std::vector<std::vector<Landed>> pending; // per port: landed datagrams for receive()
    std::vector<size_t> pending_head;
    std::vector<int64_t> held; // per port: a slot the fault injector holds back, or -1
    unsigned queued = 0;       // SQEs not yet submitted

    uint8_t* rx_buffer(unsigned id) {
        return rx_memory.get() + size_t{id} * udp_port::kRxBufferBytes;
    }
    uint8_t* copy(uint32_t index) {
        return copy_memory.get() + size_t{index} * udp_port::kFrameBytes;
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
