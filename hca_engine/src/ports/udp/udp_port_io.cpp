// The kernel UDP socket ports' data path (udp_ports.hpp): completions in, datagrams
// rebuilt into frames, frames stripped into datagrams, one submission per flush.
#include "softhca/transport/byte_order.hpp"
#include "softhca/transport/icrc_ipv4_id.hpp"
#include "udp_port_uring.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <netinet/udp.h>

namespace softhca::engine {

namespace tp = transport;
using namespace udp_port;

namespace {

ReceivedMeta read_control(io_uring_recvmsg_out* out, msghdr* message) {
    ReceivedMeta r;
    for (cmsghdr* c = io_uring_recvmsg_cmsg_firsthdr(out, message); c;
         c = io_uring_recvmsg_cmsg_nexthdr(out, message, c)) {
        if (c->cmsg_len < CMSG_LEN(1))
            break;
        int value = 0;
        const size_t bytes = c->cmsg_len - CMSG_LEN(0);
        // IP_TOS comes as one byte, UDP_GRO as an int or a u16 (kernels differ), the
        // others as an int.
        std::memcpy(&value, CMSG_DATA(c), std::min(bytes, sizeof(value)));
        if (bytes == 1)
            value = *CMSG_DATA(c);
        else if (bytes == 2) {
            uint16_t small = 0;
            std::memcpy(&small, CMSG_DATA(c), 2);
            value = small;
        }
        if ((c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TTL) ||
            (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_HOPLIMIT))
            r.hop_limit = static_cast<uint8_t>(value);
        else if ((c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS) ||
                 (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_TCLASS))
            r.traffic_class = static_cast<uint8_t>(value);
        else if (c->cmsg_level == IPPROTO_UDP && c->cmsg_type == UDP_GRO && value > 0)
            r.segment = static_cast<uint32_t>(value);
    }
    return r;
}

void add_control(msghdr& message, int level, int type, const void* value, size_t bytes) {
    // Each entry takes CMSG_SPACE bytes, so the next starts where the last ended.
    uint8_t* at = static_cast<uint8_t*>(message.msg_control) + message.msg_controllen;
    cmsghdr header{};
    header.cmsg_level = level;
    header.cmsg_type = type;
    header.cmsg_len = CMSG_LEN(bytes);
    std::memcpy(at, &header, sizeof(header));
    std::memcpy(at + CMSG_LEN(0), value, bytes);
    message.msg_controllen += CMSG_SPACE(bytes);
}

void add_control(msghdr& message, int level, int type, int value) {
    add_control(message, level, type, &value, sizeof(value));
}

// The ICRC at the end of an IPv4 datagram's payload (RoCEv2: BTH ... ICRC), changed
// from the identification it was computed with to the one the datagram will carry.
void renumber_icrc(uint8_t* payload, uint32_t length, uint16_t from, uint16_t to) {
    uint8_t* icrc = payload + length - tp::kIcrcBytes;
    uint32_t value = static_cast<uint32_t>(icrc[0]) | static_cast<uint32_t>(icrc[1]) << 8 |
                     static_cast<uint32_t>(icrc[2]) << 16 | static_cast<uint32_t>(icrc[3]) << 24;
    value = tp::icrc_for_ipv4_id(
        value, tp::kIpv4HeaderBytes + tp::kUdpHeaderBytes + length - tp::kIcrcBytes, from, to);
    for (int i = 0; i < 4; ++i)
        icrc[i] = static_cast<uint8_t>(value >> (8 * i));
}

uint64_t realtime_ns() {
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

} // namespace

void UdpPortSet::land(size_t socket, unsigned id, int bytes) {
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
    Landed landed;
    landed.buffer = id;
    landed.socket = socket;
    landed.payload = payload;
    landed.length = length;
    landed.meta = read_control(out, &s.receive_template);
    if (landed.meta.segment >= length)
        landed.meta.segment = 0; // one datagram
    // Dropped: a datagram (or run) longer than the buffer, which was cut, or whose
    // ancillary data was; and a datagram longer than any RoCEv2 packet (the largest path
    // MTU's), which is not ours.
    if ((out->flags & (MSG_TRUNC | MSG_CTRUNC)) || out->payloadlen != length ||
        out->namelen > kNameBytes || length == 0 ||
        (landed.meta.segment ? landed.meta.segment : length) > kFrameBytes - kMaxHeaders) {
        ++info.counters.rx_malformed;
        ++info.counters.rx_packets;
        u.give_buffer(id);
        return;
    }
    std::memcpy(&landed.from, io_uring_recvmsg_name(out), out->namelen);
    u.pending[s.port].push_back(landed);
}

uint8_t* UdpPortSet::rebuild_headers(const Landed& landed, uint8_t* payload, uint32_t length) {
    const UdpSocket& s = uring_->sockets[landed.socket];
    const PortInfo& info = ports_[s.port];
    const size_t ip_header = s.ipv6 ? tp::kIpv6HeaderBytes : tp::kIpv4HeaderBytes;
    uint8_t* frame = payload - (tp::kEthernetHeaderBytes + ip_header + tp::kUdpHeaderBytes);
    std::memcpy(frame, info.mac.data(), 6);
    std::memset(frame + 6, 0, 6); // the sender's MAC is the kernel's business
    tp::store_be16(frame + 12, s.ipv6 ? tp::kEtherTypeIpv6 : tp::kEtherTypeIpv4);
    uint8_t* ip = frame + tp::kEthernetHeaderBytes;
    uint8_t* udp = ip + ip_header;
    if (s.ipv6) {
        const auto& a = landed.from;
        tp::store_be32(ip, 0x60000000u | static_cast<uint32_t>(landed.meta.traffic_class) << 20);
        tp::store_be16(ip + 4, static_cast<uint16_t>(tp::kUdpHeaderBytes + length));
        ip[6] = 17;
        ip[7] = landed.meta.hop_limit;
        std::memcpy(ip + 8, &a.sin6_addr, 16);
        std::memcpy(ip + 24, s.address.data(), 16);
        std::memcpy(udp, &a.sin6_port, 2);
    } else {
        const auto* a = reinterpret_cast<const sockaddr_in*>(&landed.from);
        ip[0] = 0x45;
        ip[1] = landed.meta.traffic_class;
        tp::store_be16(ip + 2, static_cast<uint16_t>(ip_header + tp::kUdpHeaderBytes + length));
        tp::store_be16(ip + 4, 0);      // not told: the ICRC check solves for it
        tp::store_be16(ip + 6, 0x4000); // DF, as RoCEv2 senders set it
        ip[8] = landed.meta.hop_limit;
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
    return frame;
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
                run_sent(static_cast<uint32_t>(c->user_data & ~kSendTag), c->res);
                continue;
            }
            const size_t socket = c->user_data;
            if (c->user_data == kCancelTag)
                continue; // a cancellation's own completion (remove_port)
            if (!(c->flags & IORING_CQE_F_MORE))
                u.sockets[socket].armed = false; // out of buffers or an error: start again
            if (!(c->flags & IORING_CQE_F_BUFFER))
                continue;
            if (u.sockets[socket].closed)
                u.give_buffer(c->flags >> IORING_CQE_BUFFER_SHIFT); // its port was removed
            else
                land(socket, c->flags >> IORING_CQE_BUFFER_SHIFT, c->res);
        }
        io_uring_cq_advance(&u.ring, n);
    }
    for (size_t i = 0; i < u.sockets.size(); ++i)
        if (!u.sockets[i].armed && !u.sockets[i].closed)
            u.arm(i);
}

size_t UdpPortSet::receive(size_t index, RxFrame* frames, size_t max) {
    Uring& u = *uring_;
    if (u.pending_head[index] == u.pending[index].size())
        reap();
    std::vector<Landed>& queue = u.pending[index];
    size_t& head = u.pending_head[index];
    size_t n = 0;
    while (n < max && head < queue.size()) {
        Landed& landed = queue[head];
        if (!landed.meta.segment) {
            // One datagram: its headers go where the recvmsg header was (all read by now).
            uint8_t* frame = rebuild_headers(landed, landed.payload, landed.length);
            frames[n++] = {frame, static_cast<uint32_t>(landed.payload + landed.length - frame),
                           reinterpret_cast<void*>(uintptr_t{landed.buffer} + 1)};
            ++head;
            continue;
        }
        // A coalesced run: each datagram is copied out behind headers of its own, and the
        // landing buffer goes back once the last one is.
        while (n < max && landed.offset < landed.length && !u.copies_free.empty()) {
            const uint32_t length = std::min(landed.meta.segment, landed.length - landed.offset);
            const uint32_t copy = u.copies_free.back();
            u.copies_free.pop_back();
            uint8_t* payload = u.copy(copy) + kMaxHeaders;
            std::memcpy(payload, landed.payload + landed.offset, length);
            uint8_t* frame = rebuild_headers(landed, payload, length);
            frames[n++] = {frame, static_cast<uint32_t>(payload + length - frame),
                           reinterpret_cast<void*>((uintptr_t{copy} | kCopyTag) + 1)};
            landed.offset += length;
        }
        if (landed.offset < landed.length)
            break; // the burst is full, or every copy is out until the data path gives some back
        u.give_buffer(landed.buffer);
        ++head;
    }
    if (head == queue.size()) {
        queue.clear();
        head = 0;
    }
    ports_[index].counters.rx_packets += n;
    return n;
}

void UdpPortSet::release(void* handle) {
    const uintptr_t value = reinterpret_cast<uintptr_t>(handle) - 1;
    if (value & kCopyTag)
        uring_->copies_free.push_back(static_cast<uint32_t>(value & ~kCopyTag));
    else
        uring_->give_buffer(static_cast<unsigned>(value));
}

bool UdpPortSet::tx_alloc(size_t index, TxFrame& frame) {
    Uring& u = *uring_;
    if (ports_[index].removed)
        return false;
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
    uint8_t* frame = u.tx[slot].frame;
    const uint16_t ethertype = length >= 14 ? tp::load_be16(frame + 12) : 0;
    const bool ipv6 = ethertype == tp::kEtherTypeIpv6;
    const size_t ip_header = ipv6 ? tp::kIpv6HeaderBytes : tp::kIpv4HeaderBytes;
    const size_t headers = tp::kEthernetHeaderBytes + ip_header + tp::kUdpHeaderBytes;
    const int socket = u.socket_of_port[index][ipv6 ? 1 : 0];
    const uint8_t* ip = frame + tp::kEthernetHeaderBytes;
    // Only RoCEv2 goes out here (the kernel resolves neighbours itself), and only from an
    // address the port has a socket for; an IPv4 header of ours has no options.
    if ((ethertype != tp::kEtherTypeIpv4 && !ipv6) || length <= headers + tp::kIcrcBytes ||
        socket < 0 || ip[ipv6 ? 6 : 9] != 17 || (!ipv6 && ip[0] != 0x45)) {
        ++ports_[index].counters.tx_dropped;
        u.tx_free.push_back(slot);
        return;
    }
    // The hop limit and traffic class the data path chose (its route's, its AV's).
    const uint8_t hop_limit = ipv6 ? ip[7] : ip[8];
    const uint8_t traffic_class =
        ipv6 ? static_cast<uint8_t>((tp::load_be32(ip) >> 20) & 0xff) : ip[1];
    sockaddr_storage to{};
    if (ipv6) {
        auto* a = reinterpret_cast<sockaddr_in6*>(&to);
        a->sin6_family = AF_INET6;
        std::memcpy(&a->sin6_addr, ip + 24, 16);
        std::memcpy(&a->sin6_port, ip + ip_header + 2, 2);
    } else {
        auto* a = reinterpret_cast<sockaddr_in*>(&to);
        a->sin_family = AF_INET;
        std::memcpy(&a->sin_addr, ip + 16, 4);
        std::memcpy(&a->sin_port, ip + ip_header + 2, 2);
    }
    const socklen_t to_length = ipv6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
    uint8_t* payload = frame + headers;
    const auto payload_length = static_cast<uint32_t>(length - headers);

    // Continue the port's open run: same socket, destination, hop limit and traffic
    // class, the run's size (or shorter, which ends it), room left.
    int64_t& open = u.open_run[index];
    if (open >= 0) {
        TxRun& run = u.runs[static_cast<size_t>(open)];
        if (u.sockets[static_cast<size_t>(run.socket)].gso && run.socket == socket && !run.ended &&
            run.count < kMaxSegments && payload_length <= run.segment &&
            run.bytes + payload_length <= kMaxRunBytes && run.hop_limit == hop_limit &&
            run.traffic_class == traffic_class && std::memcmp(&run.to, &to, to_length) == 0) {
            // Datagram k of a segmented send leaves with IPv4 identification k.
            if (!ipv6)
                renumber_icrc(payload, payload_length, 0, static_cast<uint16_t>(run.count));
            run.payloads[run.count] = {payload, payload_length};
            run.slots[run.count++] = slot;
            run.bytes += payload_length;
            run.ended = payload_length < run.segment;
            return;
        }
        close_run(index);
    }
    start_run(index, slot, payload, payload_length, to, socket, hop_limit, traffic_class);
}

void UdpPortSet::start_run(size_t index, uint32_t slot, uint8_t* payload, uint32_t length,
                           const sockaddr_storage& to, int socket, uint8_t hop_limit,
                           uint8_t traffic_class) {
    Uring& u = *uring_;
    if (u.runs_free.empty()) { // cannot happen: every run holds a slot at least
        ++ports_[index].counters.tx_dropped;
        u.tx_free.push_back(slot);
        return;
    }
    const uint32_t id = u.runs_free.back();
    u.runs_free.pop_back();
    u.open_run[index] = id;
    TxRun& run = u.runs[id];
    run.to = to;
    run.message = {};
    run.message.msg_namelen = to.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
    run.payloads[0] = {payload, length};
    run.slots[0] = slot;
    run.count = 1;
    run.segment = length;
    run.bytes = length;
    run.ended = false;
    run.port = index;
    run.socket = socket;
    run.hop_limit = hop_limit;
    run.traffic_class = traffic_class;
}

void UdpPortSet::close_run(size_t index) {
    Uring& u = *uring_;
    int64_t& open = u.open_run[index];
    if (open < 0)
        return;
    const auto id = static_cast<uint32_t>(open);
    open = -1;
    TxRun& run = u.runs[id];
    const bool ipv6 = run.to.ss_family == AF_INET6;
    run.message.msg_name = &run.to;
    run.message.msg_iov = run.payloads;
    run.message.msg_iovlen = run.count;
    run.message.msg_control = run.control;
    run.message.msg_controllen = 0;
    if (ipv6) {
        add_control(run.message, IPPROTO_IPV6, IPV6_HOPLIMIT, run.hop_limit);
        add_control(run.message, IPPROTO_IPV6, IPV6_TCLASS, run.traffic_class);
    } else {
        add_control(run.message, IPPROTO_IP, IP_TTL, run.hop_limit);
        add_control(run.message, IPPROTO_IP, IP_TOS, run.traffic_class);
    }
    if (run.count > 1) {
        const auto segment = static_cast<uint16_t>(run.segment);
        add_control(run.message, IPPROTO_UDP, UDP_SEGMENT, &segment, sizeof(segment));
    }
    io_uring_sqe* entry = u.sqe();
    if (!entry) {
        ports_[run.port].counters.tx_dropped += run.count;
        free_run(id);
        return;
    }
    io_uring_prep_sendmsg(entry, u.sockets[static_cast<size_t>(run.socket)].fd, &run.message, 0);
    io_uring_sqe_set_data64(entry, kSendTag | id);
}

void UdpPortSet::run_sent(uint32_t id, int result) {
    Uring& u = *uring_;
    TxRun& run = u.runs[id];
    PortInfo& info = ports_[run.port];
    UdpSocket& s = u.sockets[static_cast<size_t>(run.socket)];
    if (run.count > 1 && (result == -EIO || result == -EINVAL)) {
        // The kernel refused the segmented send itself (EIO: a transform or no checksum
        // help on the route; EINVAL: what it will not segment): the socket sends datagram
        // by datagram from now on, starting with these (numbered 0 again), and so do the
        // runs already on their way when it said so.
        if (s.gso)
            std::fprintf(stderr,
                         "softhca-engine: udp port %s: the kernel refused UDP segmentation "
                         "(%s); sending datagram by datagram\n",
                         info.netdev.c_str(), std::strerror(-result));
        s.gso = false;
        const bool ipv6 = run.to.ss_family == AF_INET6;
        const TxRun copy = run;
        run.count = 0; // its slots go out again, one run each
        u.runs_free.push_back(id);
        close_run(copy.port); // whatever the port had open goes first
        for (unsigned k = 0; k < copy.count; ++k) {
            auto* payload = static_cast<uint8_t*>(copy.payloads[k].iov_base);
            const auto length = static_cast<uint32_t>(copy.payloads[k].iov_len);
            if (!ipv6)
                renumber_icrc(payload, length, static_cast<uint16_t>(k), 0);
            start_run(copy.port, copy.slots[k], payload, length, copy.to, copy.socket,
                      copy.hop_limit, copy.traffic_class);
            close_run(copy.port);
        }
        return;
    }
    // Other errors (no route, too long for the path, a full buffer) are the datagrams',
    // not the segmentation's: dropped, as one would be.
    if (result >= 0)
        info.counters.tx_packets += run.count;
    else
        info.counters.tx_dropped += run.count;
    free_run(id);
}

void UdpPortSet::free_run(uint32_t id) {
    Uring& u = *uring_;
    TxRun& run = u.runs[id];
    for (unsigned k = 0; k < run.count; ++k)
        u.tx_free.push_back(run.slots[k]);
    run.count = 0;
    u.runs_free.push_back(id);
}

size_t UdpPortSet::flush() {
    Uring& u = *uring_;
    for (size_t i = 0; i < ports_.size(); ++i)
        close_run(i);
    const unsigned queued = u.queued;
    if (queued) {
        io_uring_submit(&u.ring);
        u.queued = 0;
    }
    return queued;
}

} // namespace softhca::engine
