// The kernel UDP socket ports' data path (udp_ports.hpp): completions in, datagrams
// rebuilt into frames, frames stripped into datagrams, one submission per flush.
#include "softhca/transport/byte_order.hpp"
#include "udp_port_uring.hpp"

#include <cstring>
#include <ctime>

namespace softhca::engine {

namespace tp = transport;
using namespace udp_port;

namespace {

// What the ancillary data of a received datagram says.
struct Received {
    uint8_t hop_limit = 64;
    uint8_t traffic_class = 0;
};

Received read_control(io_uring_recvmsg_out* out, msghdr* message) {
    Received r;
    for (cmsghdr* c = io_uring_recvmsg_cmsg_firsthdr(out, message); c;
         c = io_uring_recvmsg_cmsg_nexthdr(out, message, c)) {
        if (c->cmsg_len < CMSG_LEN(1))
            break;
        int value = 0;
        const size_t bytes = c->cmsg_len - CMSG_LEN(0);
        // IP_TOS comes as one byte, the others as an int.
        std::memcpy(&value, CMSG_DATA(c), std::min(bytes, sizeof(value)));
        if (bytes == 1)
            value = *CMSG_DATA(c);
        if ((c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TTL) ||
            (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_HOPLIMIT))
            r.hop_limit = static_cast<uint8_t>(value);
        else if ((c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS) ||
                 (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_TCLASS))
            r.traffic_class = static_cast<uint8_t>(value);
    }
    return r;
}

void add_control(msghdr& message, int level, int type, int value) {
    // Each entry takes CMSG_SPACE bytes, so the next starts where the last ended.
    auto* c = reinterpret_cast<cmsghdr*>(static_cast<uint8_t*>(message.msg_control) +
                                         message.msg_controllen);
    c->cmsg_level = level;
    c->cmsg_type = type;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &value, sizeof(int));
    message.msg_controllen += CMSG_SPACE(sizeof(int));
}

uint64_t realtime_ns() {
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

} // namespace

void UdpPortSet::take_datagram(size_t socket, unsigned id, int bytes) {
    Uring& u = *uring_;
    UdpSocket& s = u.sockets[socket];
    PortInfo& info = ports_[s.port];
    uint8_t* buffer = u.rx_buffer(id);
    io_uring_recvmsg_out* out = io_uring_recvmsg_validate(buffer, bytes, &s.receive_template);
    if (!out) {
        ++info.counters.rx_malformed;
        u.give_buffer(id);
        return;
    }
    auto* payload = static_cast<uint8_t*>(io_uring_recvmsg_payload(out, &s.receive_template));
    const uint32_t length = io_uring_recvmsg_payload_length(out, bytes, &s.receive_template);
    info.counters.rx_bytes += out->payloadlen;
    // A datagram longer than any RoCEv2 packet of ours was cut to the buffer: dropped.
    if ((out->flags & MSG_TRUNC) || out->payloadlen != length || out->namelen > kNameBytes) {
        ++info.counters.rx_malformed;
        ++info.counters.rx_packets;
        u.give_buffer(id);
        return;
    }
    const Received r = read_control(out, &s.receive_template);
    sockaddr_storage from{};
    std::memcpy(&from, io_uring_recvmsg_name(out), out->namelen);
    // The headers the kernel took off, in front of the datagram where the recvmsg header,
    // name and ancillary data were (all read by now).
    const size_t ip_header = s.ipv6 ? tp::kIpv6HeaderBytes : tp::kIpv4HeaderBytes;
    uint8_t* frame = payload - (tp::kEthernetHeaderBytes + ip_header + tp::kUdpHeaderBytes);
    std::memcpy(frame, info.mac.data(), 6);
    std::memset(frame + 6, 0, 6); // the sender's MAC is the kernel's business
    tp::store_be16(frame + 12, s.ipv6 ? tp::kEtherTypeIpv6 : tp::kEtherTypeIpv4);
    uint8_t* ip = frame + tp::kEthernetHeaderBytes;
    uint8_t* udp = ip + ip_header;
    if (s.ipv6) {
        const auto* a = reinterpret_cast<const sockaddr_in6*>(&from);
        tp::store_be32(ip, 0x60000000u | static_cast<uint32_t>(r.traffic_class) << 20);
        tp::store_be16(ip + 4, static_cast<uint16_t>(tp::kUdpHeaderBytes + length));
        ip[6] = 17;
        ip[7] = r.hop_limit;
        std::memcpy(ip + 8, &a->sin6_addr, 16);
        std::memcpy(ip + 24, s.address.data(), 16);
        std::memcpy(udp, &a->sin6_port, 2);
    } else {
        const auto* a = reinterpret_cast<const sockaddr_in*>(&from);
        ip[0] = 0x45;
        ip[1] = r.traffic_class;
        tp::store_be16(ip + 2, static_cast<uint16_t>(ip_header + tp::kUdpHeaderBytes + length));
        tp::store_be16(ip + 4, 0);      // not told: the ICRC check solves for it
        tp::store_be16(ip + 6, 0x4000); // DF, as RoCEv2 senders set it
        ip[8] = r.hop_limit;
        ip[9] = 17;
        tp::store_be16(ip + 10, 0);
        std::memcpy(ip + 12, &a->sin_addr, 4);
        std::memcpy(ip + 16, s.address.data() + 12, 4);
        tp::store_be16(ip + 10, tp::ipv4_header_checksum(ip, ip_header));
        std::memcpy(udp, &a->sin_port, 2);
    }
    tp::store_be16(udp + 2, tp::kRoceV2UdpPort);
    tp::store_be16(udp + 4, static_cast<uint16_t>(tp::kUdpHeaderBytes + length));
    tp::store_be16(udp + 6, 0);
    const auto frame_length = static_cast<uint32_t>(payload + length - frame);
    u.pending[s.port].push_back({frame, frame_length, reinterpret_cast<void*>(uintptr_t{id} + 1)});
}

void UdpPortSet::reap() {
    Uring& u = *uring_;
    io_uring_cqe* cqes[256];
    for (;;) {
        const unsigned n = io_uring_peek_batch_cqe(&u.ring, cqes, 256);
        if (!n)
            break;
        for (unsigned i = 0; i < n; ++i) {
            const io_uring_cqe* c = cqes[i];
            if (c->user_data & kSendTag) {
                const auto slot = static_cast<uint32_t>(c->user_data & ~kSendTag);
                PortInfo& info = ports_[u.tx[slot].port];
                if (c->res < 0)
                    ++info.counters.tx_dropped; // no route, too long for the path, ...
                else
                    ++info.counters.tx_packets;
                u.tx_free.push_back(slot);
                continue;
            }
            const size_t socket = c->user_data;
            if (!(c->flags & IORING_CQE_F_MORE))
                u.sockets[socket].armed = false; // out of buffers or an error: start again
            if (c->flags & IORING_CQE_F_BUFFER)
                take_datagram(socket, c->flags >> IORING_CQE_BUFFER_SHIFT, c->res);
        }
        io_uring_cq_advance(&u.ring, n);
    }
    for (size_t i = 0; i < u.sockets.size(); ++i)
        if (!u.sockets[i].armed)
            u.arm(i);
}

size_t UdpPortSet::receive(size_t index, RxFrame* frames, size_t max) {
    Uring& u = *uring_;
    if (u.pending_head[index] == u.pending[index].size())
        reap();
    std::vector<RxFrame>& queue = u.pending[index];
    size_t& head = u.pending_head[index];
    size_t n = 0;
    while (n < max && head < queue.size())
        frames[n++] = queue[head++];
    if (head == queue.size()) {
        queue.clear();
        head = 0;
    }
    ports_[index].counters.rx_packets += n;
    return n;
}

void UdpPortSet::release(void* handle) {
    uring_->give_buffer(static_cast<unsigned>(reinterpret_cast<uintptr_t>(handle) - 1));
}

bool UdpPortSet::tx_alloc(size_t index, TxFrame& frame) {
    Uring& u = *uring_;
    if (u.tx_free.empty())
        reap(); // sends that completed give their slots back
    if (u.tx_free.empty())
        return false;
    const uint32_t slot = u.tx_free.back();
    u.tx_free.pop_back();
    u.tx[slot].port = index;
    frame = {u.tx[slot].frame, kTxFrameBytes, reinterpret_cast<void*>(uintptr_t{slot} + 1)};
    return true;
}

void UdpPortSet::tx_abort(TxFrame& frame) {
    uring_->tx_free.push_back(static_cast<uint32_t>(reinterpret_cast<uintptr_t>(frame.handle) - 1));
    frame.handle = nullptr;
}

void UdpPortSet::tx_queue(size_t index, TxFrame& frame, uint32_t length) {
    Uring& u = *uring_;
    const auto slot = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(frame.handle) - 1);
    frame.handle = nullptr;
    PortInfo& info = ports_[index];
    info.counters.tx_bytes += length;
    if (PcapWriter* capture = info.capture.get())
        capture->write(u.tx[slot].frame, length, realtime_ns());
    FaultInjector& faults = info.faults;
    if (!faults.enabled()) {
        send_frame(index, slot, length);
        return;
    }
    // Past the Ethernet, IP and UDP headers, so damage is the ICRC's to find.
    const FaultDecision d = faults.decide(length, 14 + 20 + 8);
    if (d.drop) {
        u.tx_free.push_back(slot);
        return;
    }
    if (d.corrupt_at >= 0)
        u.tx[slot].frame[d.corrupt_at] ^= 0x5a;
    if (d.duplicate && !u.tx_free.empty()) {
        const uint32_t copy = u.tx_free.back();
        u.tx_free.pop_back();
        u.tx[copy].port = index;
        std::memcpy(u.tx[copy].frame, u.tx[slot].frame, length);
        send_frame(index, copy, length);
    }
    int64_t& held = u.held[index];
    if (d.hold && held < 0) {
        held = int64_t{slot} | (int64_t{length} << 32); // goes out after the next frame
        return;
    }
    send_frame(index, slot, length);
    if (held >= 0) {
        send_frame(index, static_cast<uint32_t>(held & 0xffffffff),
                   static_cast<uint32_t>(held >> 32));
        held = -1;
    }
}

void UdpPortSet::send_frame(size_t index, uint32_t slot, uint32_t length) {
    Uring& u = *uring_;
    TxSlot& t = u.tx[slot];
    const uint8_t* frame = t.frame;
    const uint16_t ethertype = length >= 14 ? tp::load_be16(frame + 12) : 0;
    const bool ipv6 = ethertype == tp::kEtherTypeIpv6;
    const size_t ip_header = ipv6 ? tp::kIpv6HeaderBytes : tp::kIpv4HeaderBytes;
    const size_t headers = tp::kEthernetHeaderBytes + ip_header + tp::kUdpHeaderBytes;
    const int socket = u.socket_of_port[index][ipv6 ? 1 : 0];
    const uint8_t* ip = frame + tp::kEthernetHeaderBytes;
    // Only RoCEv2 goes out here (the kernel resolves neighbours itself), and only from an
    // address the port has a socket for.
    if ((ethertype != tp::kEtherTypeIpv4 && !ipv6) || length <= headers || socket < 0 ||
        ip[ipv6 ? 6 : 9] != 17) {
        ++ports_[index].counters.tx_dropped;
        u.tx_free.push_back(slot);
        return;
    }
    t.message = {};
    t.to = {};
    if (ipv6) {
        auto* to = reinterpret_cast<sockaddr_in6*>(&t.to);
        to->sin6_family = AF_INET6;
        std::memcpy(&to->sin6_addr, ip + 24, 16);
        std::memcpy(&to->sin6_port, ip + ip_header + 2, 2);
        t.message.msg_namelen = sizeof(*to);
    } else {
        auto* to = reinterpret_cast<sockaddr_in*>(&t.to);
        to->sin_family = AF_INET;
        std::memcpy(&to->sin_addr, ip + 16, 4);
        std::memcpy(&to->sin_port, ip + ip_header + 2, 2);
        t.message.msg_namelen = sizeof(*to);
    }
    t.payload = {const_cast<uint8_t*>(frame) + headers, length - headers};
    t.message.msg_name = &t.to;
    t.message.msg_iov = &t.payload;
    t.message.msg_iovlen = 1;
    t.message.msg_control = t.control;
    t.message.msg_controllen = 0;
    // The hop limit and traffic class the data path chose (its route's, its AV's).
    if (ipv6) {
        add_control(t.message, IPPROTO_IPV6, IPV6_HOPLIMIT, ip[7]);
        add_control(t.message, IPPROTO_IPV6, IPV6_TCLASS,
                    static_cast<int>((tp::load_be32(ip) >> 20) & 0xff));
    } else {
        add_control(t.message, IPPROTO_IP, IP_TTL, ip[8]);
        add_control(t.message, IPPROTO_IP, IP_TOS, ip[1]);
    }
    io_uring_sqe* entry = u.sqe();
    if (!entry) {
        ++ports_[index].counters.tx_dropped;
        u.tx_free.push_back(slot);
        return;
    }
    io_uring_prep_sendmsg(entry, u.sockets[static_cast<size_t>(socket)].fd, &t.message, 0);
    io_uring_sqe_set_data64(entry, kSendTag | slot);
}

size_t UdpPortSet::flush() {
    Uring& u = *uring_;
    const unsigned queued = u.queued;
    if (queued) {
        io_uring_submit(&u.ring);
        u.queued = 0;
    }
    return queued;
}

} // namespace softhca::engine
