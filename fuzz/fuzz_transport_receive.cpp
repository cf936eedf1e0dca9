// Fuzz target: the transport's receive path. A QP of the service and in the state the
// first bytes choose, with receives and requests of every kind posted, is fed the
// packets the rest of the input holds (each: two bytes of length, then the IB packet,
// BTH onwards), with time moving and its timers firing. Whatever arrives: no crash, no
// access outside registered memory (the memory is bounds-checked vectors under ASan),
// every packet the QP sends in answer parses, and every completion it makes names a
// work request that was posted.
#include "sim_wire.hpp"

#include <cstdlib>
#include <set>

namespace tp = softhca::transport;

namespace {

void check_output(tp::QueuePair& qp, tp::Nanoseconds now) {
    uint8_t buffer[8192];
    for (int i = 0; i < 64; ++i) {
        const size_t n = qp.transmit(buffer, sizeof(buffer), now);
        if (!n)
            return;
        tp::IbPacket packet;
        if (n > sizeof(buffer) || tp::parse_ib_packet(buffer, n, packet) != tp::PacketError::None)
            std::abort(); // the QP built a packet nobody could parse
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 2)
        return 0;
    static constexpr tp::Service kServices[] = {tp::Service::RC, tp::Service::UC, tp::Service::UD};
    const tp::Service service = kServices[data[0] % 3];
    const unsigned target_state = data[1] % 5; // RTR, RTS, SQD, SQE (UD/UC), ERR
    data += 2;
    size -= 2;

    sim::HostMemory memory;
    sim::Recorder sink;
    const uint32_t all = tp::access::kLocalWrite | tp::access::kRemoteWrite |
                         tp::access::kRemoteRead | tp::access::kRemoteAtomic;
    const uint32_t key = memory.add_region(65536, all);
    const uint32_t read_only = memory.add_region(4096, tp::access::kRemoteRead);
    (void)read_only;
    tp::QueuePair qp(0x11, service, 16, 16, memory, sink);
    tp::QpConfig& at = qp.attributes();
    at.dest_qp = 0x22;
    at.mtu = tp::PathMtu::Mtu1024;
    // The first packet's PSN is the one expected, so the fuzzer starts in sequence.
    uint32_t first_psn = 0;
    if (size >= 2 + sizeof(tp::Bth)) {
        tp::IbPacket first;
        if (tp::parse_ib_packet(data + 2, std::min<size_t>(size - 2, (data[0] << 8) | data[1]),
                                first) == tp::PacketError::None)
            first_psn = first.bth->psn();
    }
    at.rq_psn = first_psn;
    at.sq_psn = (first_psn - 8) & 0xffffff;
    at.timeout = 4;
    at.retry_cnt = 3;
    at.rnr_retry = 3;
    at.min_rnr_timer = 1;
    at.max_rd_atomic = 4;
    at.max_dest_rd_atomic = 4;
    at.access = all;
    at.qkey = 0x1111;
    tp::Nanoseconds now = 1'000'000;
    qp.set_state(tp::QpState::Init, now);
    std::set<uint64_t> recv_ids, send_ids;
    for (uint64_t i = 0; i < 8; ++i) {
        qp.post_recv(sim::one_sge_receive(100 + i, memory, key, 4096, i * 4096));
        recv_ids.insert(100 + i);
    }
    qp.set_state(tp::QpState::Rtr, now);
    if (target_state >= 1) {
        qp.set_state(tp::QpState::Rts, now);
        const tp::WrOpcode kinds[] = {tp::WrOpcode::RdmaWrite, tp::WrOpcode::Send,
                                      tp::WrOpcode::RdmaRead, tp::WrOpcode::AtomicFetchAdd,
                                      tp::WrOpcode::SendWithImm};
        for (uint64_t i = 0; i < 5; ++i) {
            tp::SendWqe w =
                sim::one_sge_request(200 + i, kinds[i], memory, key,
                                     kinds[i] == tp::WrOpcode::AtomicFetchAdd ? 8 : 2048);
            w.signaled = true;
            w.remote_addr = memory.region(key).addr + 32768;
            w.rkey = key;
            w.remote_qpn = 0x22;
            w.remote_qkey = 0x1111;
            if (qp.post_send(w))
                send_ids.insert(200 + i);
        }
        check_output(qp, now); // the requests go out
    }
    if (target_state == 2)
        qp.set_state(tp::QpState::Sqd, now);
    else if (target_state == 3 && service != tp::Service::RC)
        qp.set_state(tp::QpState::Sqe, now);
    else if (target_state == 4)
        qp.set_state(tp::QpState::Error, now);

    while (size >= 2) {
        const size_t length = std::min<size_t>(size - 2, (data[0] << 8) | data[1]);
        // Exactly the packet's bytes, so that ASan sees a read past its end.
        const std::vector<uint8_t> bytes(data + 2, data + 2 + length);
        data += 2 + length;
        size -= 2 + length;
        tp::IbPacket packet;
        if (tp::parse_ib_packet(bytes.data(), bytes.size(), packet) != tp::PacketError::None)
            continue;
        uint8_t grh[tp::kGrhBytes] = {};
        qp.receive(packet, now, packet.deth ? grh : nullptr);
        check_output(qp, now);
        now += 20'000;
        if (qp.next_deadline() <= now) {
            qp.on_timer(now);
            check_output(qp, now);
        }
    }
    for (const tp::Completion& c : sink.recvs)
        if (!recv_ids.count(c.wr_id))
            std::abort();
    for (const tp::Completion& c : sink.sends)
        if (!send_ids.count(c.wr_id))
            std::abort();
    return 0;
}
