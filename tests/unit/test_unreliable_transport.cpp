// Transport protocol layer: UC and UD queue pairs and shared receive queues, over the
// simulated wire. Unacknowledged services may lose messages, never deliver part of one.
#include "sim_wire.hpp"

#include <catch2/catch.hpp>

using namespace sim;
using namespace softhca::transport;

namespace {

constexpr uint32_t kRights = access::kLocalWrite | access::kRemoteWrite;
constexpr uint32_t kSlot = 16384; // bytes per receive buffer

// A message's bytes: the first 4 carry its number, the rest a pattern of it.
uint8_t pattern(uint32_t message, uint32_t offset) {
    return static_cast<uint8_t>((message * 151 + offset * 13) ^ 0xa5);
}

void fill_message(uint8_t* at, uint32_t message, uint32_t length) {
    std::memcpy(at, &message, 4);
    for (uint32_t i = 4; i < length; ++i)
        at[i] = pattern(message, i);
}

// True when `length` bytes at `at` are exactly one whole message (numbered < limit).
bool whole_message(const uint8_t* at, uint32_t length, uint32_t limit, uint32_t& message) {
    if (length < 4)
        return false;
    std::memcpy(&message, at, 4);
    if (message >= limit)
        return false;
    for (uint32_t i = 4; i < length; ++i)
        if (at[i] != pattern(message, i))
            return false;
    return true;
}

// A wire that keeps order: UC has no way to put packets back in order, so on a
// reordering wire every swap costs a message (that case is covered by loss).
WireFaults in_order() {
    WireFaults faults;
    faults.max_delay = 0;
    return faults;
}

uint32_t message_length(uint32_t message, uint32_t max) {
    return 4 + (message * 2654435761u) % (max - 4);
}

// Writes message `number` into slot number % 64 of region `key` and returns an
// unsignaled SEND of it.
SendWqe message_send(HostMemory& memory, uint32_t key, uint32_t number, uint32_t length) {
    const uint64_t addr = memory.region(key).addr + uint64_t{number % 64} * kSlot;
    fill_message(memory.at(key, addr), number, length);
    SendWqe w = one_sge_request(number, WrOpcode::Send, memory, key, length);
    w.sge[0].addr = addr;
    return w;
}

RecvWqe receive_slot(HostMemory& memory, uint32_t key, uint32_t slot) {
    return one_sge_receive(slot, memory, key, kSlot, uint64_t{slot} * kSlot);
}

// Sends `count` messages A -> B (each up to `max_length` bytes) and checks that every
// receive completion holds one whole, uncorrupted message (after `offset` bytes: the
// GRH for UD). Returns how many arrived.
uint32_t send_and_check(Link& link, uint32_t count, uint32_t max_length, uint32_t offset,
                        uint32_t qkey = 0x1111) {
    auto& a = link.a();
    auto& b = link.b();
    const uint32_t src = a.memory.add_region(size_t{kSlot} * 64, kRights);
    const uint32_t dst = b.memory.add_region(size_t{kSlot} * 64, kRights);
    for (uint32_t slot = 0; slot < 64; ++slot)
        REQUIRE(b.qp.post_recv(receive_slot(b.memory, dst, slot)));
    uint32_t sent = 0, arrived = 0;
    size_t seen = 0;
    while (sent < count || a.qp.send_queue_used()) {
        while (sent < count && a.qp.send_queue_used() < 16) {
            SendWqe w = message_send(a.memory, src, sent, message_length(sent, max_length));
            w.signaled = true;
            w.remote_qpn = b.qp.qp_num();
            w.remote_qkey = qkey;
            REQUIRE(a.qp.post_send(w));
            ++sent;
        }
        link.run(1);
        for (; seen < b.sink.recvs.size(); ++seen) {
            const Completion& c = b.sink.recvs[seen];
            REQUIRE(c.status == WcStatus::Success);
            REQUIRE(c.byte_len >= offset);
            const uint8_t* at =
                b.memory.at(dst, b.memory.region(dst).addr + uint64_t{c.wr_id} * kSlot);
            uint32_t message = 0;
            INFO("receive " << seen << " length " << c.byte_len);
            REQUIRE(whole_message(at + offset, c.byte_len - offset, count, message));
            REQUIRE(c.byte_len - offset == message_length(message, max_length));
            ++arrived;
            REQUIRE(b.qp.post_recv(receive_slot(b.memory, dst, static_cast<uint32_t>(c.wr_id))));
        }
    }
    link.run(100);
    for (; seen < b.sink.recvs.size(); ++seen)
        ++arrived;
    for (const Completion& c : a.sink.sends)
        REQUIRE(c.status == WcStatus::Success);
    REQUIRE(a.sink.sends.size() == count);
    return arrived;
}

} // namespace

TEST_CASE("UC: every message arrives whole over a clean wire") {
    Link link(1, in_order(), 64, Service::UC);
    link.connect(PathMtu::Mtu1024, kRights);
    REQUIRE(send_and_check(link, 500, 9000, 0) == 500);
    REQUIRE(link.b().qp.counters().dropped_messages == 0);
}

TEST_CASE("UC: with loss and duplication only whole messages are delivered") {
    for (uint64_t seed = 1; seed <= 5; ++seed) {
        WireFaults faults = in_order();
        faults.drop = 0.01;
        faults.duplicate = 0.01;
        Link link(seed, faults, 64, Service::UC);
        link.connect(PathMtu::Mtu1024, kRights);
        const uint32_t arrived = send_and_check(link, 1000, 9000, 0);
        INFO("seed " << seed << " arrived " << arrived);
        REQUIRE(arrived < 1000); // with ~5 packets a message, 1% loss loses some
        REQUIRE(arrived > 800);
        REQUIRE(link.b().qp.counters().dropped_messages > 0);
    }
}

TEST_CASE("UC: a WRITE with immediate after a SEND dropped midway takes the kept receive and "
          "carries nothing of the SEND") {
    // A UC SEND takes a receive at its first packet; its middle packet is lost, so the
    // message is dropped and the receive kept. A WRITE with immediate then
    // consumes that receive: its completion has the WRITE's length and immediate, and no
    // bytes for the receive buffer (small SENDs into this memory travel in completions).
    Link link(3, in_order(), 64, Service::UC);
    link.connect(PathMtu::Mtu1024, kRights);
    HostMemory& am = link.a().memory;
    HostMemory& bm = link.b().memory;
    bm.stage_receives = true;
    const uint32_t src = am.add_region(8192, kRights);
    const uint32_t dst = bm.add_region(8192, kRights);
    REQUIRE(link.b().qp.post_recv(one_sge_receive(7, bm, dst, 8192)));
    SendWqe send = one_sge_request(1, WrOpcode::Send, am, src, 3000); // three packets
    REQUIRE(link.a().qp.post_send(send));
    SendWqe write = one_sge_request(2, WrOpcode::RdmaWriteWithImm, am, src, 100);
    write.rkey = dst;
    write.remote_addr = bm.region(dst).addr + 4096;
    write.imm_data = 0x01020304;
    REQUIRE(link.a().qp.post_send(write));
    uint8_t out[2048];
    uint32_t index = 0;
    while (size_t length = link.a().qp.transmit(out, sizeof(out), link.now())) {
        IbPacket packet;
        REQUIRE(parse_ib_packet(out, length, packet) == PacketError::None);
        if (index++ != 1) // the SEND's middle packet is lost
            link.b().qp.receive(packet, link.now());
    }
    REQUIRE(link.b().sink.recvs.size() == 1);
    const Completion& c = link.b().sink.recvs[0];
    CHECK(c.wr_id == 7);
    CHECK(c.status == WcStatus::Success);
    CHECK(c.opcode == WcOpcode::RecvRdmaWithImm);
    CHECK(c.byte_len == 100);
    CHECK(c.staged_length == 0); // nothing for the receive buffer
}

TEST_CASE("UC: RDMA WRITE with immediate lands and completes, no ACK is ever sent") {
    Link link(3, in_order(), 64, Service::UC);
    link.connect(PathMtu::Mtu1024, kRights);
    auto& a = link.a();
    auto& b = link.b();
    const uint32_t src = a.memory.add_region(8192, kRights);
    const uint32_t target = b.memory.add_region(8192, kRights);
    const uint32_t recv = b.memory.add_region(64, kRights);
    fill_message(a.memory.region(src).bytes.data(), 7, 5000);
    RecvWqe r;
    r.wr_id = 1;
    REQUIRE(b.qp.post_recv(r));
    SendWqe w = one_sge_request(9, WrOpcode::RdmaWriteWithImm, a.memory, src, 5000);
    w.signaled = true;
    w.remote_addr = b.memory.region(target).addr;
    w.rkey = target;
    w.imm_data = 0x01020304;
    REQUIRE(a.qp.post_send(w));
    link.run(50);
    REQUIRE(a.sink.sends.size() == 1);
    REQUIRE(a.sink.sends[0].status == WcStatus::Success);
    REQUIRE(b.sink.recvs.size() == 1);
    CHECK(b.sink.recvs[0].opcode == WcOpcode::RecvRdmaWithImm);
    CHECK(b.sink.recvs[0].imm_data == 0x01020304);
    CHECK(b.sink.recvs[0].byte_len == 5000);
    uint32_t message = 0;
    CHECK(whole_message(b.memory.region(target).bytes.data(), 5000, 8, message));
    CHECK(b.qp.counters().packets_sent == 0); // nothing answers on UC
    (void)recv;
}

TEST_CASE("UC: a write with a bad rkey is dropped silently and later messages arrive") {
    Link link(4, in_order(), 64, Service::UC);
    link.connect(PathMtu::Mtu1024, kRights);
    auto& a = link.a();
    auto& b = link.b();
    const uint32_t src = a.memory.add_region(4096, kRights);
    const uint32_t target = b.memory.add_region(4096, kRights);
    SendWqe bad = one_sge_request(1, WrOpcode::RdmaWrite, a.memory, src, 3000);
    bad.remote_addr = b.memory.region(target).addr;
    bad.rkey = target + 1;
    bad.signaled = true;
    SendWqe good = bad;
    good.wr_id = 2;
    good.rkey = target;
    fill_message(a.memory.region(src).bytes.data(), 3, 3000);
    REQUIRE(a.qp.post_send(bad));
    REQUIRE(a.qp.post_send(good));
    link.run(50);
    REQUIRE(a.sink.sends.size() == 2); // the requester cannot know
    CHECK(b.qp.counters().dropped_messages == 1);
    CHECK(b.qp.state() == QpState::Rts);
    uint32_t message = 0;
    CHECK(whole_message(b.memory.region(target).bytes.data(), 3000, 8, message));
}

TEST_CASE("UD: datagrams arrive behind a 40-byte GRH with the sender's QPN") {
    Link link(5, {}, 64, Service::UD);
    link.connect(PathMtu::Mtu4096, kRights);
    REQUIRE(send_and_check(link, 300, 4096, kGrhBytes) == 300);
    for (const Completion& c : link.b().sink.recvs) {
        CHECK(c.with_grh);
        CHECK(c.src_qp == link.a().qp.qp_num());
        CHECK(c.opcode == WcOpcode::Recv);
        // The frames are IPv4: the completion says so (A17.4.5.1), for UCX and ibv_wc.sl.
        CHECK(c.network_header == NetworkHeader::Ipv4);
        CHECK_FALSE(c.solicited);
    }
}

TEST_CASE("UD and RC: a receive is solicited when the message's last packet had SE") {
    for (Service service : {Service::UD, Service::RC}) {
        Link link(6, {}, 64, service);
        link.connect(PathMtu::Mtu1024, kRights);
        HostMemory& am = link.a().memory;
        HostMemory& bm = link.b().memory;
        const uint32_t src = am.add_region(4096, kRights);
        const uint32_t dst = bm.add_region(8192, kRights);
        REQUIRE(link.b().qp.post_recv(one_sge_receive(1, bm, dst, 4096)));
        REQUIRE(link.b().qp.post_recv(one_sge_receive(2, bm, dst, 4096, 4096)));
        const uint32_t length = service == Service::UD ? 1000 : 3000; // RC: 3 packets
        SendWqe plain = one_sge_request(1, WrOpcode::Send, am, src, length);
        if (service == Service::UD) {
            plain.remote_qpn = link.b().qp.qp_num();
            plain.remote_qkey = link.b().qp.attributes().qkey;
        }
        SendWqe solicited = plain;
        solicited.wr_id = 2;
        solicited.solicited = true;
        solicited.length = solicited.sge[0].length = length - 100; // told apart by length
        REQUIRE(link.a().qp.post_send(plain));
        REQUIRE(link.a().qp.post_send(solicited));
        REQUIRE(link.run_until([&] { return link.b().sink.recvs.size() == 2; }));
        // The simulated wire reorders: UD datagrams may arrive either way round.
        const uint32_t grh = service == Service::UD ? kGrhBytes : 0;
        for (const Completion& c : link.b().sink.recvs) {
            CHECK(c.solicited == (c.byte_len == length - 100 + grh));
            CHECK(c.network_header ==
                  (service == Service::UD ? NetworkHeader::Ipv4 : NetworkHeader::None));
        }
    }
}

TEST_CASE("UD: with loss only whole datagrams arrive") {
    WireFaults faults;
    faults.drop = 0.02;
    faults.duplicate = 0.01;
    Link link(6, faults, 64, Service::UD);
    link.connect(PathMtu::Mtu1024, kRights);
    const uint32_t arrived = send_and_check(link, 1000, 1024, kGrhBytes);
    CHECK(arrived < 1000 + 30); // duplicates may arrive twice, whole
    CHECK(arrived > 900);
}

TEST_CASE("UD: a wrong Q_Key is dropped and counted, a high-bit Q_Key uses the QP's own") {
    Link link(7, {}, 64, Service::UD);
    link.connect(PathMtu::Mtu1024, kRights);
    REQUIRE(send_and_check(link, 10, 512, kGrhBytes, 0x2222) == 0);
    CHECK(link.b().qp.counters().qkey_violations == 10);
    // 0x80000000 and up: the sender's QP Q_Key (0x1111) goes in the DETH (C10-15).
    Link link2(8, {}, 64, Service::UD);
    link2.connect(PathMtu::Mtu1024, kRights);
    REQUIRE(send_and_check(link2, 10, 512, kGrhBytes, 0x80000000u) == 10);
}

TEST_CASE("UD: a send larger than the path MTU fails with LOC_LEN_ERR and SQE, RTS resumes") {
    Link link(9, {}, 64, Service::UD);
    link.connect(PathMtu::Mtu1024, kRights);
    auto& a = link.a();
    const uint32_t src = a.memory.add_region(4096, kRights);
    SendWqe big = one_sge_request(1, WrOpcode::Send, a.memory, src, 1025);
    big.remote_qpn = link.b().qp.qp_num();
    big.remote_qkey = 0x1111;
    SendWqe after = big;
    after.wr_id = 2;
    after.length = after.sge[0].length = 100;
    REQUIRE(a.qp.post_send(big));
    REQUIRE(a.qp.post_send(after));
    link.run(10);
    REQUIRE(a.sink.sends.size() == 2);
    CHECK(a.sink.sends[0].status == WcStatus::LocalLengthError);
    CHECK(a.sink.sends[1].status == WcStatus::WrFlushError);
    CHECK(a.qp.state() == QpState::Sqe);
    REQUIRE(modify_qp_allowed(QpType::UD, QpState::Sqe, QpState::Rts, qp_attr::kState));
    a.qp.set_state(QpState::Rts, link.now());
    RecvWqe r = receive_slot(link.b().memory, link.b().memory.add_region(kSlot, kRights), 0);
    REQUIRE(link.b().qp.post_recv(r));
    after.wr_id = 3;
    after.signaled = true;
    REQUIRE(a.qp.post_send(after));
    link.run(10);
    REQUIRE(a.sink.sends.size() == 3);
    CHECK(a.sink.sends[2].status == WcStatus::Success);
    REQUIRE(link.b().sink.recvs.size() == 1);
    CHECK(link.b().sink.recvs[0].byte_len == kGrhBytes + 100);
}

TEST_CASE("UD: a receive too small for GRH and data completes with LOC_LEN_ERR") {
    Link link(10, {}, 64, Service::UD);
    link.connect(PathMtu::Mtu1024, kRights);
    auto& a = link.a();
    auto& b = link.b();
    const uint32_t src = a.memory.add_region(4096, kRights);
    const uint32_t dst = b.memory.add_region(4096, kRights);
    RecvWqe r = one_sge_receive(5, b.memory, dst, 100);
    REQUIRE(b.qp.post_recv(r));
    SendWqe w = one_sge_request(1, WrOpcode::Send, a.memory, src, 100);
    w.remote_qpn = b.qp.qp_num();
    w.remote_qkey = 0x1111;
    REQUIRE(a.qp.post_send(w));
    link.run(10);
    REQUIRE(b.sink.recvs.size() == 1);
    CHECK(b.sink.recvs[0].status == WcStatus::LocalLengthError);
}

TEST_CASE("SRQ: RC over a shared receive queue delivers everything despite loss") {
    WireFaults faults;
    faults.drop = 0.01;
    faults.duplicate = 0.01;
    Link link(11, faults, 64, Service::RC);
    ReceiveQueue srq(64, link.b().memory);
    link.b().qp.use_srq(srq);
    link.connect(PathMtu::Mtu1024, kRights);
    // send_and_check posts through post_recv, which an SRQ QP refuses: post here.
    auto& b = link.b();
    const uint32_t dst = b.memory.add_region(size_t{kSlot} * 64, kRights);
    RecvWqe probe;
    REQUIRE_FALSE(b.qp.post_recv(probe));
    for (uint32_t slot = 0; slot < 64; ++slot)
        REQUIRE(srq.post(receive_slot(b.memory, dst, slot)));
    auto& a = link.a();
    const uint32_t src = a.memory.add_region(size_t{kSlot} * 64, kRights);
    uint32_t sent = 0;
    size_t seen = 0;
    while (seen < 400) {
        while (sent < 400 && a.qp.send_queue_used() < 16 && sent - seen < 60) {
            REQUIRE(a.qp.post_send(message_send(a.memory, src, sent, message_length(sent, 9000))));
            ++sent;
        }
        link.run(1);
        for (; seen < b.sink.recvs.size(); ++seen) {
            const Completion& c = b.sink.recvs[seen];
            REQUIRE(c.status == WcStatus::Success);
            uint32_t message = 0;
            const uint8_t* at =
                b.memory.at(dst, b.memory.region(dst).addr + uint64_t{c.wr_id} * kSlot);
            REQUIRE(whole_message(at, c.byte_len, 400, message));
            REQUIRE(message == seen); // RC: in order, none lost
            REQUIRE(srq.post(receive_slot(b.memory, dst, static_cast<uint32_t>(c.wr_id))));
        }
        REQUIRE(link.now() < 60'000'000'000ull);
    }
}

TEST_CASE("SRQ: the limit fires once when fewer remain, LAST_WQE_REACHED on error") {
    HostMemory memory;
    ReceiveQueue srq(8, memory);
    for (int i = 0; i < 4; ++i)
        REQUIRE(srq.post(RecvWqe{}));
    srq.arm_limit(3);
    srq.pop(); // 3 left: not below the limit
    CHECK_FALSE(srq.take_limit_event());
    srq.pop(); // 2 < 3
    CHECK(srq.take_limit_event());
    CHECK_FALSE(srq.take_limit_event()); // one-shot
    CHECK(srq.limit() == 0);
    // A resize may not drop posted requests.
    CHECK_FALSE(srq.resize(1));
    CHECK(srq.resize(16));
    CHECK(srq.size() == 2);

    Link link(12, {}, 64, Service::RC);
    ReceiveQueue shared(8, link.b().memory);
    link.b().qp.use_srq(shared);
    link.connect(PathMtu::Mtu1024, kRights);
    REQUIRE(shared.post(RecvWqe{}));
    link.b().qp.set_state(QpState::Error, link.now());
    CHECK(link.b().sink.last_wqe == 1);
    CHECK(shared.size() == 1); // the SRQ keeps its requests for other QPs
    CHECK(link.b().sink.recvs.empty());
}
