// Transport protocol layer: XRC (Annex A14). An initiator names the target's XRC SRQ in
// every request; the target receives into that SRQ and checks remote access in its
// protection domain. Over the simulated wire, with loss.
#include "sim_wire.hpp"

#include <catch2/catch.hpp>

using namespace sim;
using namespace softhca::transport;

namespace {

constexpr uint32_t kXrcRights = access::kLocalWrite | access::kRemoteWrite;

// The target's XRC domain: SRQs by number, each with its own memory (its PD).
struct Domain : SrqDirectory {
    std::map<uint32_t, ReceiveQueue*> srqs;
    ReceiveQueue* xrc_srq(uint32_t srqn) override {
        auto it = srqs.find(srqn);
        return it == srqs.end() ? nullptr : it->second;
    }
};

} // namespace

TEST_CASE("XRC: each message lands in the SRQ it names, in order, despite loss") {
    WireFaults faults;
    faults.drop = 0.01;
    faults.duplicate = 0.01;
    Link link(21, faults, 128, Service::XRC);
    HostMemory five_memory, nine_memory;
    ReceiveQueue five(64, five_memory), nine(64, nine_memory);
    Domain domain;
    domain.srqs = {{5, &five}, {9, &nine}};
    link.b().qp.use_srq_directory(domain);
    link.connect(PathMtu::Mtu1024, kXrcRights);
    const uint32_t five_key = five_memory.add_region(64 * 4096, kXrcRights);
    const uint32_t nine_key = nine_memory.add_region(64 * 4096, kXrcRights);
    for (uint32_t i = 0; i < 64; ++i) {
        REQUIRE(five.post(one_sge_receive(i, five_memory, five_key, 4096, uint64_t{i} * 4096)));
        REQUIRE(nine.post(one_sge_receive(i, nine_memory, nine_key, 4096, uint64_t{i} * 4096)));
    }
    auto& a = link.a();
    const uint32_t src = a.memory.add_region(4096, kXrcRights);
    for (uint32_t i = 0; i < 90; ++i) {
        SendWqe w = one_sge_request(i, WrOpcode::Send, a.memory, src, 100 + i * 30);
        w.signaled = true;
        w.remote_srqn = i % 3 == 0 ? 9 : 5;
        REQUIRE(a.qp.post_send(w));
    }
    REQUIRE(link.run_until([&] { return link.b().sink.recvs.size() == 90; }));
    for (uint32_t i = 0; i < 90; ++i) {
        const Completion& c = link.b().sink.recvs[i];
        INFO("message " << i);
        CHECK(c.status == WcStatus::Success);
        CHECK(c.byte_len == 100 + i * 30);
        CHECK(c.srq_num == (i % 3 == 0 ? 9u : 5u));
    }
    CHECK(five.size() == 4); // 60 of its 64 taken
    CHECK(nine.size() == 34);
    for (const Completion& c : link.a().sink.sends)
        CHECK(c.status == WcStatus::Success);
}

TEST_CASE("XRC: remote access is checked in the named SRQ's domain, an unknown SRQN fails") {
    Link link(22, {}, 64, Service::XRC);
    HostMemory srq_memory;
    ReceiveQueue srq(8, srq_memory);
    Domain domain;
    domain.srqs = {{5, &srq}};
    link.b().qp.use_srq_directory(domain);
    link.connect(PathMtu::Mtu1024, kXrcRights);
    // The region lives in the SRQ's PD only: the target QP has none of its own.
    const uint32_t target = srq_memory.add_region(4096, kXrcRights);
    auto& a = link.a();
    const uint32_t src = a.memory.add_region(4096, kXrcRights);
    a.memory.region(src).bytes.assign(4096, 0x3c);
    SendWqe write = one_sge_request(1, WrOpcode::RdmaWrite, a.memory, src, 3000);
    write.signaled = true;
    write.remote_addr = srq_memory.region(target).addr;
    write.rkey = target;
    write.remote_srqn = 5;
    REQUIRE(a.qp.post_send(write));
    link.run(50);
    REQUIRE(a.sink.sends.size() == 1);
    CHECK(a.sink.sends[0].status == WcStatus::Success);
    CHECK(srq_memory.region(target).bytes[2999] == 0x3c);

    SendWqe stray = one_sge_request(2, WrOpcode::Send, a.memory, src, 10);
    stray.remote_srqn = 6; // no such SRQ in the target's domain
    REQUIRE(a.qp.post_send(stray));
    link.run(50);
    REQUIRE(a.sink.sends.size() == 2);
    CHECK(a.sink.sends[1].status == WcStatus::RemoteInvalidRequestError);
    CHECK(link.b().qp.state() == QpState::Error);
    REQUIRE(link.b().sink.errors.size() == 1);
    CHECK(link.b().sink.errors[0] == WcStatus::RemoteInvalidRequestError);
}

TEST_CASE("XRC QPs: initiators need no receive attributes, targets no send ones") {
    using namespace qp_attr;
    CHECK(modify_qp_allowed(QpType::XrcSend, QpState::Reset, QpState::Init,
                            kState | kPkeyIndex | kPort));
    CHECK(modify_qp_allowed(QpType::XrcSend, QpState::Init, QpState::Rtr,
                            kState | kAv | kPathMtu | kDestQpn | kRqPsn));
    CHECK_FALSE(modify_qp_allowed(QpType::XrcRecv, QpState::Reset, QpState::Init,
                                  kState | kPkeyIndex | kPort)); // targets need access flags
    CHECK(
        modify_qp_allowed(QpType::XrcRecv, QpState::Rtr, QpState::Rts, kState | kTimeout | kSqPsn));
    CHECK_FALSE(modify_qp_allowed(QpType::XrcSend, QpState::Rtr, QpState::Rts,
                                  kState | kTimeout | kSqPsn)); // initiators need retries
    CHECK_FALSE(modify_qp_allowed(QpType::XrcSend, QpState::Rts, QpState::Sqe, kState));
}
