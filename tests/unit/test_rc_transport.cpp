// Transport protocol layer: RC queue pairs over a simulated wire that drops,
// duplicates, reorders and corrupts. Every byte and every completion is checked.
#include "sim_wire.hpp"
#include "softhca/transport/psn.hpp"

#include <catch2/catch.hpp>
#include <deque>

using namespace sim;
using namespace softhca::transport;

namespace {

constexpr uint32_t kAllRemote = access::kRemoteWrite | access::kRemoteRead | access::kRemoteAtomic;
constexpr uint32_t kRegionRights = access::kLocalWrite | kAllRemote;

uint8_t pattern(uint64_t message, uint64_t offset) {
    return static_cast<uint8_t>((message * 131 + offset * 7 + (offset >> 8)) ^ 0x5a);
}

// The first offset where `bytes` differs from message's pattern, or -1.
int64_t first_mismatch(const uint8_t* bytes, uint64_t message, uint32_t length) {
    for (uint32_t i = 0; i < length; ++i)
        if (bytes[i] != pattern(message, i))
            return i;
    return -1;
}

// Drives mixed traffic from A to B and checks it. Returns the number of messages.
struct MixedTraffic {
    Link& link;
    std::mt19937_64 rng;
    uint32_t a_src, a_dst, b_recv, b_target, b_counter;
    uint64_t expected_counter = 0;
    uint64_t message = 0;
    struct Posted {
        WrOpcode op;
        uint64_t id;
        uint32_t length;
        uint64_t offset; // within the region used
        uint64_t add = 0;
    };
    std::deque<Posted> in_flight;
    std::deque<Posted> recvs_expected;

    MixedTraffic(Link& l, uint64_t seed) : link(l), rng(seed) {
        a_src = link.a().memory.add_region(1 << 20, kRegionRights);
        a_dst = link.a().memory.add_region(1 << 20, kRegionRights);
        b_recv = link.b().memory.add_region(1 << 20, kRegionRights);
        b_target = link.b().memory.add_region(1 << 20, kRegionRights);
        b_counter = link.b().memory.add_region(64, kRegionRights);
    }

    uint64_t addr(HostMemory& m, uint32_t key, uint64_t offset) {
        return m.region(key).addr + offset;
    }

    void post_one(uint32_t max_length) {
        HostMemory& am = link.a().memory;
        HostMemory& bm = link.b().memory;
        std::uniform_int_distribution<uint32_t> pick(0, 99);
        std::uniform_int_distribution<uint32_t> len(0, max_length);
        const uint32_t kind = pick(rng);
        const uint64_t id = ++message;
        const uint64_t slot = (id % 64) * 16384; // distinct buffers per outstanding message
        SendWqe w;
        w.wr_id = id;
        w.signaled = true;
        Posted p{WrOpcode::Send, id, 0, slot};
        if (kind < 8) {
            w.opcode = WrOpcode::AtomicFetchAdd;
            w.compare_add = id;
            w.remote_addr = addr(bm, b_counter, 8);
            w.rkey = b_counter;
            w.length = 8;
            w.num_sge = 1;
            w.sge[0] = {addr(am, a_dst, slot), 8, a_dst};
            p = {w.opcode, id, 8, slot, id};
            expected_counter += id;
        } else {
            const uint32_t length = len(rng);
            p.length = length;
            // Fill the source with this message's pattern, split over up to 3 SGEs.
            for (uint32_t i = 0; i < length; ++i)
                *am.at(a_src, addr(am, a_src, slot + i)) = pattern(id, i);
            w.length = length;
            const uint32_t cut1 = length / 3, cut2 = 2 * length / 3;
            w.num_sge = 3;
            w.sge[0] = {addr(am, a_src, slot), cut1, a_src};
            w.sge[1] = {addr(am, a_src, slot + cut1), cut2 - cut1, a_src};
            w.sge[2] = {addr(am, a_src, slot + cut2), length - cut2, a_src};
            if (kind < 40) {
                w.opcode = kind % 2 ? WrOpcode::SendWithImm : WrOpcode::Send;
                w.imm_data = static_cast<uint32_t>(id);
                RecvWqe r;
                r.wr_id = id;
                r.num_sge = 1;
                r.length = 16384;
                r.sge[0] = {addr(bm, b_recv, slot), 16384, b_recv};
                REQUIRE(link.b().qp.post_recv(r));
                p.op = w.opcode;
                recvs_expected.push_back(p);
            } else if (kind < 75) {
                w.opcode = kind % 5 == 0 ? WrOpcode::RdmaWriteWithImm : WrOpcode::RdmaWrite;
                w.remote_addr = addr(bm, b_target, slot);
                w.rkey = b_target;
                w.imm_data = static_cast<uint32_t>(id);
                if (w.opcode == WrOpcode::RdmaWriteWithImm) {
                    RecvWqe r;
                    r.wr_id = id;
                    REQUIRE(link.b().qp.post_recv(r));
                    p.op = w.opcode;
                    recvs_expected.push_back(p);
                }
            } else {
                // Read back what B holds in its target region.
                w.opcode = WrOpcode::RdmaRead;
                for (uint32_t i = 0; i < length; ++i)
                    *bm.at(b_target, addr(bm, b_target, slot + i)) = pattern(id, i);
                w.remote_addr = addr(bm, b_target, slot);
                w.rkey = b_target;
                w.sge[0] = {addr(am, a_dst, slot), cut1, a_dst};
                w.sge[1] = {addr(am, a_dst, slot + cut1), cut2 - cut1, a_dst};
                w.sge[2] = {addr(am, a_dst, slot + cut2), length - cut2, a_dst};
            }
        }
        p.op = w.opcode;
        REQUIRE(link.a().qp.post_send(w));
        in_flight.push_back(p);
    }

    void check_send_completion(const Completion& c) {
        REQUIRE(!in_flight.empty());
        const Posted p = in_flight.front();
        in_flight.pop_front();
        INFO("message " << p.id << " op " << int(p.op));
        REQUIRE(c.status == WcStatus::Success);
        REQUIRE(c.wr_id == p.id);
        HostMemory& am = link.a().memory;
        HostMemory& bm = link.b().memory;
        switch (p.op) {
        case WrOpcode::RdmaWrite:
        case WrOpcode::RdmaWriteWithImm:
            CHECK(c.opcode == WcOpcode::RdmaWrite);
            REQUIRE(first_mismatch(bm.at(b_target, addr(bm, b_target, p.offset)), p.id, p.length) ==
                    -1);
            break;
        case WrOpcode::RdmaRead:
            CHECK(c.opcode == WcOpcode::RdmaRead);
            CHECK(c.byte_len == p.length);
            REQUIRE(first_mismatch(am.at(a_dst, addr(am, a_dst, p.offset)), p.id, p.length) == -1);
            break;
        case WrOpcode::AtomicFetchAdd: {
            CHECK(c.opcode == WcOpcode::FetchAdd);
            uint64_t original;
            std::memcpy(&original, am.at(a_dst, addr(am, a_dst, p.offset)), 8);
            CHECK(original < expected_counter); // a value the counter really had
            break;
        }
        default:
            CHECK(c.opcode == WcOpcode::Send);
            break;
        }
    }

    void check_recv_completion(const Completion& c) {
        REQUIRE(!recvs_expected.empty());
        const Posted p = recvs_expected.front();
        recvs_expected.pop_front();
        INFO("receive for message " << p.id);
        REQUIRE(c.status == WcStatus::Success);
        REQUIRE(c.wr_id == p.id);
        CHECK(c.src_qp == link.a().qp.qp_num());
        CHECK(c.qp_num == link.b().qp.qp_num());
        const bool imm = p.op == WrOpcode::SendWithImm || p.op == WrOpcode::RdmaWriteWithImm;
        CHECK(c.with_imm == imm);
        if (imm)
            CHECK(c.imm_data == static_cast<uint32_t>(p.id));
        CHECK(c.byte_len == p.length);
        if (p.op == WrOpcode::RdmaWriteWithImm) {
            CHECK(c.opcode == WcOpcode::RecvRdmaWithImm);
            return;
        }
        CHECK(c.opcode == WcOpcode::Recv);
        HostMemory& bm = link.b().memory;
        REQUIRE(first_mismatch(bm.at(b_recv, addr(bm, b_recv, p.offset)), p.id, p.length) == -1);
    }

    // Posts `count` messages keeping up to `window` outstanding, checking as they complete.
    void run(uint64_t count, uint32_t window, uint32_t max_length) {
        uint64_t posted = 0;
        size_t sends_seen = 0, recvs_seen = 0;
        auto& sends = link.a().sink.sends;
        auto& recvs = link.b().sink.recvs;
        while (posted < count || !in_flight.empty()) {
            while (posted < count && in_flight.size() < window) {
                post_one(max_length);
                ++posted;
            }
            const size_t before = sends.size();
            REQUIRE(link.run_until([&] { return sends.size() > before; }));
            for (; sends_seen < sends.size(); ++sends_seen)
                check_send_completion(sends[sends_seen]);
            for (; recvs_seen < recvs.size(); ++recvs_seen)
                check_recv_completion(recvs[recvs_seen]);
        }
        REQUIRE(link.run_until([&] { return recvs.size() == recvs_seen + recvs_expected.size(); }));
        for (; recvs_seen < recvs.size(); ++recvs_seen)
            check_recv_completion(recvs[recvs_seen]);
        uint64_t counter;
        std::memcpy(&counter, link.b().memory.at(b_counter, addr(link.b().memory, b_counter, 8)),
                    8);
        CHECK(counter == expected_counter);
        CHECK(link.a().sink.errors.empty());
        CHECK(link.b().sink.errors.empty());
    }
};

} // namespace

TEST_CASE("RC: mixed traffic over a clean wire completes in order with every byte right") {
    Link link(1, {0, 0, 0, 0});
    link.connect(PathMtu::Mtu1024, kAllRemote);
    MixedTraffic traffic(link, 1);
    traffic.run(2000, 16, 5000);
    const QpCounters& c = link.a().qp.counters();
    INFO("timeouts " << c.timeouts << " naks " << c.naks_received << " rnr " << c.rnr_naks_received
                     << " ooo " << c.out_of_sequence << " b.dup "
                     << link.b().qp.counters().duplicates);
    CHECK(c.retransmitted_packets == 0);
    CHECK(c.retries == 0);
}

TEST_CASE("RC: 100000 messages over lossy, duplicating, reordering, corrupting wires") {
    uint64_t total = 0, retransmits = 0, rejected = 0, retries = 0;
    for (uint64_t seed = 1; seed <= 20; ++seed) {
        INFO("seed " << seed);
        WireFaults faults{0.01 * static_cast<double>(seed % 4), 0.02, 0.005, 1500};
        Link link(seed, faults);
        const PathMtu mtus[] = {PathMtu::Mtu256, PathMtu::Mtu1024, PathMtu::Mtu4096};
        link.connect(mtus[seed % 3], kAllRemote, static_cast<uint8_t>(1 + seed % 8));
        MixedTraffic traffic(link, seed * 7919);
        const uint32_t max_length = seed % 3 == 0 ? 1500 : seed % 2 ? 600 : 9000;
        traffic.run(5000, 1 + static_cast<uint32_t>(seed % 24), max_length);
        total += 5000;
        retransmits += link.a().qp.counters().retransmitted_packets;
        retries += link.a().qp.counters().retries;
        rejected += link.rejected_frames;
    }
    CHECK(total == 100000);
    CHECK(retransmits > 0);
    CHECK(retries > 0);
    CHECK(retries <= retransmits); // a retry resends one packet at least
    CHECK(rejected > 0);           // corrupted frames were caught by the ICRC, never delivered
}

TEST_CASE("RC: a receive too small gives LOC_LEN_ERR there and REM_INV_REQ_ERR here") {
    Link link(3, {});
    link.connect(PathMtu::Mtu1024, kAllRemote);
    HostMemory& am = link.a().memory;
    HostMemory& bm = link.b().memory;
    const uint32_t src = am.add_region(4096, kRegionRights);
    const uint32_t dst = bm.add_region(4096, kRegionRights);
    RecvWqe r = one_sge_receive(9, bm, dst, 100);
    REQUIRE(link.b().qp.post_recv(r));
    SendWqe w = one_sge_request(1, WrOpcode::Send, am, src, 2000);
    SendWqe w2 = w;
    w2.wr_id = 2;
    REQUIRE(link.a().qp.post_send(w));
    REQUIRE(link.a().qp.post_send(w2));
    REQUIRE(link.run_until([&] { return link.a().sink.sends.size() == 2; }));
    CHECK(link.a().sink.sends[0].status == WcStatus::RemoteInvalidRequestError);
    CHECK(link.a().sink.sends[1].status == WcStatus::WrFlushError);
    REQUIRE(link.b().sink.recvs.size() == 1);
    CHECK(link.b().sink.recvs[0].status == WcStatus::LocalLengthError);
    CHECK(link.a().qp.state() == QpState::Error);
    CHECK(link.b().qp.state() == QpState::Error);
}

TEST_CASE("RC: a bad rkey, a read-only target and a bad lkey give the IBTA statuses") {
    Link link(4, {});
    link.connect(PathMtu::Mtu1024, kAllRemote);
    HostMemory& am = link.a().memory;
    HostMemory& bm = link.b().memory;
    const uint32_t src = am.add_region(4096, kRegionRights);
    const uint32_t read_only = bm.add_region(4096, access::kRemoteRead);
    SendWqe w = one_sge_request(1, WrOpcode::RdmaWrite, am, src, 64);
    w.signaled = true;

    SECTION("bad rkey") {
        w.rkey = 0xdead;
        w.remote_addr = bm.region(read_only).addr;
    }
    SECTION("write into a read-only MR") {
        w.rkey = read_only;
        w.remote_addr = bm.region(read_only).addr;
    }
    REQUIRE(link.a().qp.post_send(w));
    REQUIRE(link.run_until([&] { return !link.a().sink.sends.empty(); }));
    CHECK(link.a().sink.sends[0].status == WcStatus::RemoteAccessError);
    CHECK(link.a().qp.state() == QpState::Error);
}

TEST_CASE("RC: a bad lkey is a local protection error") {
    Link link(5, {});
    link.connect(PathMtu::Mtu1024, kAllRemote);
    HostMemory& bm = link.b().memory;
    const uint32_t dst = bm.add_region(4096, kRegionRights);
    SendWqe w;
    w.wr_id = 1;
    w.opcode = WrOpcode::RdmaWrite;
    w.length = 64;
    w.num_sge = 1;
    w.sge[0] = {0x1234, 64, 0xbad};
    w.rkey = dst;
    w.remote_addr = bm.region(dst).addr;
    REQUIRE(link.a().qp.post_send(w));
    REQUIRE(link.run_until([&] { return !link.a().sink.sends.empty(); }));
    CHECK(link.a().sink.sends[0].status == WcStatus::LocalProtectionError);
}

TEST_CASE("RC: bytes gathered at post time are sent as posted, their SGEs are still checked") {
    // A request whose payload came with it (inline_bytes) but which keeps its SGEs: what
    // the provider sends when it gathered a small send at post time.
    Link link(5, {});
    link.connect(PathMtu::Mtu1024, kAllRemote);
    HostMemory& am = link.a().memory;
    HostMemory& bm = link.b().memory;
    const uint32_t src = am.add_region(4096, kRegionRights);
    const uint32_t dst = bm.add_region(4096, kRegionRights);
    // Memory holds other bytes than those gathered: what arrives shows which was sent.
    std::fill_n(am.region(src).bytes.data(), 4096, uint8_t{0x11});
    SendWqe w = one_sge_request(1, WrOpcode::RdmaWrite, am, src, 48);
    w.signaled = true;
    w.rkey = dst;
    w.remote_addr = bm.region(dst).addr;
    w.inline_data = true;
    for (uint32_t i = 0; i < 48; ++i)
        w.inline_bytes[i] = pattern(1, i);

    SECTION("valid SGEs: the gathered bytes arrive, memory is not read") {
        REQUIRE(link.a().qp.post_send(w));
        REQUIRE(link.run_until([&] { return !link.a().sink.sends.empty(); }));
        CHECK(link.a().sink.sends[0].status == WcStatus::Success);
        CHECK(first_mismatch(bm.region(dst).bytes.data(), 1, 48) == -1);
    }
    SECTION("a bad lkey: LOC_PROT_ERR and nothing sent") {
        w.sge[0].lkey = 0xbad;
        REQUIRE(link.a().qp.post_send(w));
        REQUIRE(link.run_until([&] { return !link.a().sink.sends.empty(); }));
        CHECK(link.a().sink.sends[0].status == WcStatus::LocalProtectionError);
        CHECK(bm.region(dst).bytes[0] == 0);
    }
    SECTION("an SGE past the end of its region: LOC_PROT_ERR") {
        w.sge[0].addr = am.region(src).addr + 4096 - 16;
        REQUIRE(link.a().qp.post_send(w));
        REQUIRE(link.run_until([&] { return !link.a().sink.sends.empty(); }));
        CHECK(link.a().sink.sends[0].status == WcStatus::LocalProtectionError);
    }
}

TEST_CASE("RC: RNR with rnr_retry 0 fails with RNR_RETRY_EXC_ERR, with 7 it waits") {
    Link link(6, {});
    link.connect(PathMtu::Mtu1024, kAllRemote);
    HostMemory& am = link.a().memory;
    HostMemory& bm = link.b().memory;
    const uint32_t src = am.add_region(4096, kRegionRights);
    const uint32_t dst = bm.add_region(4096, kRegionRights);
    SendWqe w = one_sge_request(1, WrOpcode::Send, am, src, 64);
    w.signaled = true;

    SECTION("rnr_retry 7 waits for the receive") {
        REQUIRE(link.a().qp.post_send(w));
        link.run(3000);
        CHECK(link.a().sink.sends.empty());
        CHECK(link.a().qp.counters().rnr_naks_received > 3);
        CHECK(link.a().qp.counters().retries == 0); // an RNR NAK's wait is no retry
        RecvWqe r = one_sge_receive(5, bm, dst, 64);
        REQUIRE(link.b().qp.post_recv(r));
        REQUIRE(link.run_until([&] { return !link.a().sink.sends.empty(); }));
        CHECK(link.a().sink.sends[0].status == WcStatus::Success);
        CHECK(link.a().qp.counters().sends_completed == 1);
        CHECK(link.b().qp.counters().receives_completed == 1); // rdma_recvs
    }
    SECTION("rnr_retry 0") {
        link.a().qp.attributes().rnr_retry = 0;
        link.a().qp.set_state(QpState::Rts, link.now()); // RTS -> RTS keeps counters
        REQUIRE(link.a().qp.post_send(w));
        REQUIRE(link.run_until([&] { return !link.a().sink.sends.empty(); }));
        CHECK(link.a().sink.sends[0].status == WcStatus::RnrRetryExceededError);
        CHECK(link.a().qp.counters().rnr_retries_exceeded == 1); // rxe's retry_rnr_exceeded_err
        CHECK(link.a().qp.counters().retries_exceeded == 0);
        CHECK(link.a().qp.counters().sends_completed == 1); // rdma_sends: in error too
    }
}

TEST_CASE("RC: the RNR retry budget counts consecutive RNR NAKs: an accepted message gives it "
          "back (9.7.5.2.8)") {
    Link link(17, {});
    link.connect(PathMtu::Mtu1024, kAllRemote, 4, 1); // rnr_retry 1: one retry per RNR NAK
    HostMemory& am = link.a().memory;
    HostMemory& bm = link.b().memory;
    const uint32_t src = am.add_region(4096, kRegionRights);
    const uint32_t dst = bm.add_region(4096, kRegionRights);
    // Five messages, each sent before its receive is posted: each meets one RNR NAK,
    // then its retry finds the receive. Every one succeeds.
    for (uint64_t id = 1; id <= 5; ++id) {
        SendWqe w = one_sge_request(id, WrOpcode::Send, am, src, 64);
        w.signaled = true;
        REQUIRE(link.a().qp.post_send(w));
        REQUIRE(
            link.run_until([&] { return link.a().qp.counters().rnr_naks_received == id; }, 1000));
        REQUIRE(link.b().qp.post_recv(one_sge_receive(100 + id, bm, dst, 64)));
        REQUIRE(link.run_until([&] { return link.a().sink.sends.size() == id; }));
        CHECK(link.a().sink.sends.back().wr_id == id);
        CHECK(link.a().sink.sends.back().status == WcStatus::Success);
    }
    CHECK(link.b().sink.recvs.size() == 5);
}

TEST_CASE("RC: RESET forgets every role's state: an RNR wait does not outlive it") {
    Link link(16, {});
    link.connect(PathMtu::Mtu1024, kAllRemote);
    link.b().qp.attributes().min_rnr_timer = 0; // 655.36 ms, the longest RNR wait
    HostMemory& am = link.a().memory;
    HostMemory& bm = link.b().memory;
    const uint32_t src = am.add_region(4096, kRegionRights);
    const uint32_t dst = bm.add_region(4096, kRegionRights);
    SendWqe w = one_sge_request(1, WrOpcode::Send, am, src, 64);
    w.signaled = true;
    REQUIRE(link.a().qp.post_send(w));
    REQUIRE(link.run_until([&] { return link.a().qp.counters().rnr_naks_received == 1; }, 1000));
    // The requester now waits 655 ms before it tries again; RESET must end that wait.
    link.a().qp.set_state(QpState::Error, link.now());
    REQUIRE(link.a().sink.sends.size() == 1);
    CHECK(link.a().sink.sends[0].status == WcStatus::WrFlushError);
    link.run(10); // whatever was on the wire arrives
    link.a().qp.set_state(QpState::Reset, link.now());
    link.b().qp.set_state(QpState::Error, link.now());
    link.b().qp.set_state(QpState::Reset, link.now());
    link.connect(PathMtu::Mtu1024, kAllRemote);
    CHECK(link.a().qp.counters().rnr_naks_received == 0);
    REQUIRE(link.b().qp.post_recv(one_sge_receive(5, bm, dst, 64)));
    w.wr_id = 2;
    REQUIRE(link.a().qp.post_send(w));
    // 5 ms of simulated time: far less than the old wait, plenty for one message.
    REQUIRE(link.run_until([&] { return link.a().sink.sends.size() == 2; }, 5000));
    CHECK(link.a().sink.sends[1].wr_id == 2);
    CHECK(link.a().sink.sends[1].status == WcStatus::Success);
    CHECK(link.a().qp.counters().rnr_naks_received == 0);
    REQUIRE(link.b().sink.recvs.size() == 1);
    CHECK(link.b().sink.recvs[0].status == WcStatus::Success);
}

TEST_CASE("RC: a request prepared in place starts from reset fields, whatever its slot held") {
    Link link(17, {}, 1); // one send queue entry: every request reuses it
    link.connect(PathMtu::Mtu1024, kAllRemote);
    HostMemory& am = link.a().memory;
    HostMemory& bm = link.b().memory;
    const uint32_t src = am.add_region(4096, kRegionRights);
    const uint32_t dst = bm.add_region(4096, kRegionRights);
    SendWqe* w = link.a().qp.prepare_send();
    REQUIRE(w);
    w->wr_id = 1;
    w->opcode = WrOpcode::RdmaWrite;
    w->signaled = true;
    w->fence = true;
    w->solicited = true;
    w->inline_data = true;
    w->length = 100;
    w->remote_addr = bm.region(dst).addr;
    w->rkey = dst;
    w->remote_srqn = 9;
    std::fill_n(w->inline_bytes.begin(), 100, uint8_t{0xab});
    link.a().qp.post_prepared_send();
    CHECK(link.a().qp.prepare_send() == nullptr); // the queue is full
    REQUIRE(link.run_until([&] { return link.a().sink.sends.size() == 1; }));
    REQUIRE(link.a().sink.sends[0].status == WcStatus::Success);
    CHECK(bm.region(dst).bytes[99] == 0xab);

    w = link.a().qp.prepare_send();
    REQUIRE(w);
    CHECK(w->wr_id == 0);
    CHECK(w->opcode == WrOpcode::Send);
    CHECK(!w->signaled);
    CHECK(!w->fence);
    CHECK(!w->solicited);
    CHECK(!w->inline_data);
    CHECK(w->length == 0);
    CHECK(w->num_sge == 0);
    CHECK(w->remote_srqn == 0);
    // A one-SGE SEND in the same entry: none of the old inline bytes go out.
    w->wr_id = 2;
    w->signaled = true;
    w->num_sge = 1;
    w->length = 16;
    w->sge[0] = {am.region(src).addr, 16, src};
    std::fill_n(am.region(src).bytes.begin(), 16, uint8_t{0x11});
    link.a().qp.post_prepared_send();
    REQUIRE(link.b().qp.post_recv(one_sge_receive(5, bm, dst, 64)));
    REQUIRE(link.run_until([&] { return link.a().sink.sends.size() == 2; }));
    CHECK(link.a().sink.sends[1].status == WcStatus::Success);
    REQUIRE(link.b().sink.recvs.size() == 1);
    CHECK(link.b().sink.recvs[0].byte_len == 16);
    CHECK(bm.region(dst).bytes[0] == 0x11);
    CHECK(bm.region(dst).bytes[15] == 0x11);
    CHECK(bm.region(dst).bytes[16] == 0xab); // the receive wrote 16 bytes, no more
}

TEST_CASE("RC: retries run out when the peer is gone: RETRY_EXC_ERR") {
    Link link(7, {1.0, 0, 0, 0}); // everything dropped
    link.connect(PathMtu::Mtu1024, kAllRemote);
    HostMemory& am = link.a().memory;
    const uint32_t src = am.add_region(4096, kRegionRights);
    SendWqe w = one_sge_request(1, WrOpcode::RdmaWrite, am, src, 64);
    REQUIRE(link.a().qp.post_send(w));
    REQUIRE(link.run_until([&] { return !link.a().sink.sends.empty(); }));
    CHECK(link.a().sink.sends[0].status == WcStatus::RetryExceededError);
    CHECK(link.a().qp.counters().timeouts == 8);         // retry_cnt 7: first try + 7 retries
    CHECK(link.a().qp.counters().retries == 7);          // rxe's completer_retry_err
    CHECK(link.a().qp.counters().retries_exceeded == 1); // rxe's retry_exceeded_err
    CHECK(link.a().qp.counters().sends_completed == 0);
}

TEST_CASE("RC: an atomic on an unaligned address is a remote invalid request") {
    Link link(8, {});
    link.connect(PathMtu::Mtu1024, kAllRemote);
    HostMemory& am = link.a().memory;
    HostMemory& bm = link.b().memory;
    const uint32_t local = am.add_region(64, kRegionRights);
    const uint32_t remote = bm.add_region(64, kRegionRights);
    SendWqe w = one_sge_request(1, WrOpcode::AtomicCompareSwap, am, local, 8);
    w.remote_addr = bm.region(remote).addr + 4;
    w.rkey = remote;
    REQUIRE(link.a().qp.post_send(w));
    REQUIRE(link.run_until([&] { return !link.a().sink.sends.empty(); }));
    CHECK(link.a().sink.sends[0].status == WcStatus::RemoteInvalidRequestError);
}

TEST_CASE("RC: entering ERR flushes every outstanding work request") {
    Link link(9, {1.0, 0, 0, 0});
    link.connect(PathMtu::Mtu1024, kAllRemote);
    for (uint64_t i = 0; i < 5; ++i) {
        SendWqe w;
        w.wr_id = i;
        w.opcode = WrOpcode::Send; // unsignaled: flushes are reported all the same
        REQUIRE(link.a().qp.post_send(w));
        RecvWqe r;
        r.wr_id = 100 + i;
        REQUIRE(link.a().qp.post_recv(r));
    }
    link.run(10);
    link.a().qp.set_state(QpState::Error, link.now());
    REQUIRE(link.a().sink.sends.size() == 5);
    REQUIRE(link.a().sink.recvs.size() == 5);
    for (uint64_t i = 0; i < 5; ++i) {
        CHECK(link.a().sink.sends[i].wr_id == i);
        CHECK(link.a().sink.sends[i].status == WcStatus::WrFlushError);
        CHECK(link.a().sink.recvs[i].wr_id == 100 + i);
        CHECK(link.a().sink.recvs[i].status == WcStatus::WrFlushError);
    }
    CHECK(link.a().sink.retired == 5);
}

TEST_CASE("QP state transitions follow the IBTA table") {
    using namespace qp_attr;
    const uint32_t init = kState | kPkeyIndex | kPort | kAccessFlags;
    const uint32_t rtr =
        kState | kAv | kPathMtu | kDestQpn | kRqPsn | kMaxDestRdAtomic | kMinRnrTimer;
    const uint32_t rts = kState | kSqPsn | kTimeout | kRetryCnt | kRnrRetry | kMaxQpRdAtomic;
    CHECK(modify_qp_allowed(QpType::RC, QpState::Reset, QpState::Init, init));
    CHECK_FALSE(modify_qp_allowed(QpType::RC, QpState::Reset, QpState::Init, init & ~kPort));
    CHECK_FALSE(modify_qp_allowed(QpType::RC, QpState::Reset, QpState::Rtr, rtr));
    CHECK(modify_qp_allowed(QpType::RC, QpState::Init, QpState::Rtr, rtr));
    CHECK_FALSE(modify_qp_allowed(QpType::RC, QpState::Init, QpState::Rtr, rtr & ~kDestQpn));
    CHECK_FALSE(modify_qp_allowed(QpType::RC, QpState::Init, QpState::Rtr, rtr | kSqPsn));
    CHECK(modify_qp_allowed(QpType::RC, QpState::Rtr, QpState::Rts, rts));
    CHECK_FALSE(modify_qp_allowed(QpType::RC, QpState::Rtr, QpState::Rts, rts & ~kTimeout));
    CHECK(modify_qp_allowed(QpType::UC, QpState::Rtr, QpState::Rts, kState | kSqPsn));
    CHECK(modify_qp_allowed(QpType::RC, QpState::Rts, QpState::Error, kState));
    CHECK(modify_qp_allowed(QpType::RC, QpState::Error, QpState::Reset, kState));
    CHECK_FALSE(modify_qp_allowed(QpType::RC, QpState::Error, QpState::Rts, kState));
    CHECK(modify_qp_allowed(QpType::RC, QpState::Rts, QpState::Sqd, kState));
    CHECK(modify_qp_allowed(QpType::RC, QpState::Rts, QpState::Rts, kAccessFlags));
    CHECK(modify_qp_allowed(QpType::UD, QpState::Reset, QpState::Init,
                            kState | kPkeyIndex | kPort | kQkey));
}

TEST_CASE("RC: end-to-end credits hold sends back while the responder has no receive") {
    Link link(10, {0, 0, 0, 0});
    link.connect(PathMtu::Mtu1024, kAllRemote);
    HostMemory& am = link.a().memory;
    HostMemory& bm = link.b().memory;
    const uint32_t src = am.add_region(4096, kRegionRights);
    const uint32_t dst = bm.add_region(65536, kRegionRights);
    auto post_recv = [&](uint64_t id) {
        RecvWqe r = one_sge_receive(id, bm, dst, 1024, id * 1024);
        REQUIRE(link.b().qp.post_recv(r));
    };
    auto send = [&](uint64_t id) {
        SendWqe w = one_sge_request(id, WrOpcode::Send, am, src, 64);
        w.signaled = true;
        REQUIRE(link.a().qp.post_send(w));
    };
    // One message acknowledged with "no receive WQE left" (credit 0).
    post_recv(0);
    send(0);
    REQUIRE(link.run_until([&] { return link.a().sink.sends.size() == 1; }));
    const uint64_t sent_before = link.a().qp.counters().packets_sent;
    // Five sends now: only one at a time may probe while there is no credit.
    for (uint64_t i = 1; i <= 5; ++i)
        send(i);
    link.run(2000);
    const uint64_t probes = link.a().qp.counters().packets_sent - sent_before;
    CHECK(link.a().sink.sends.size() == 1);
    CHECK(probes < 2000 / 10); // a single message retried on RNR, not five at once
    CHECK(link.b().qp.counters().rnr_naks_sent == probes);
    // Receives arrive: credits flow back in the ACKs and everything completes.
    for (uint64_t i = 1; i <= 5; ++i)
        post_recv(i);
    REQUIRE(link.run_until([&] { return link.a().sink.sends.size() == 6; }));
    for (const auto& c : link.a().sink.sends)
        CHECK(c.status == WcStatus::Success);
}

TEST_CASE("RC: a fenced request waits until earlier reads have completed") {
    Link link(11, {0, 0, 0, 0});
    link.connect(PathMtu::Mtu1024, kAllRemote);
    HostMemory& am = link.a().memory;
    HostMemory& bm = link.b().memory;
    const uint32_t local = am.add_region(65536, kRegionRights);
    const uint32_t remote = bm.add_region(65536, kRegionRights);
    RecvWqe r = one_sge_receive(7, bm, remote, 1024);
    REQUIRE(link.b().qp.post_recv(r));
    SendWqe read;
    read.wr_id = 1;
    read.signaled = true;
    read.opcode = WrOpcode::RdmaRead;
    read.length = 32768; // 32 response packets: takes several steps
    read.num_sge = 1;
    read.sge[0] = {am.region(local).addr, 32768, local};
    read.remote_addr = bm.region(remote).addr;
    read.rkey = remote;
    SendWqe send;
    send.wr_id = 2;
    send.signaled = true;
    send.fence = true;
    send.opcode = WrOpcode::Send;
    send.length = 16;
    send.num_sge = 1;
    send.sge[0] = {am.region(local).addr, 16, local};
    REQUIRE(link.a().qp.post_send(read));
    REQUIRE(link.a().qp.post_send(send));
    // Until the read completes at A, B must not have seen the send.
    bool read_done_first = false;
    for (int i = 0; i < 100000 && link.b().sink.recvs.empty(); ++i) {
        link.run(1);
        if (!link.a().sink.sends.empty())
            read_done_first = true;
    }
    REQUIRE(link.b().sink.recvs.size() == 1);
    CHECK(read_done_first);
    REQUIRE(link.run_until([&] { return link.a().sink.sends.size() == 2; }));
    CHECK(link.a().sink.sends[0].wr_id == 1);
    CHECK(link.a().sink.sends[1].wr_id == 2);
}

namespace {
// Feeds B a hand-made request.
void feed_request(Link& link, uint8_t opcode, uint32_t psn, uint64_t va, uint32_t rkey,
                  uint32_t dma_length, uint32_t payload) {
    uint8_t packet[4096 + 64] = {};
    const OpcodeInfo& info = opcode_info(opcode);
    const HeaderOffsets o = header_offsets(info);
    reinterpret_cast<Bth*>(packet)->set(opcode, false, 0, kDefaultPkey, link.b().qp.qp_num(), true,
                                        psn);
    if (info.has(header_flag::kReth))
        reinterpret_cast<Reth*>(packet + o.reth)->set(va, rkey, dma_length);
    IbPacket parsed;
    REQUIRE(parse_ib_packet(packet, o.payload + payload, parsed) == PacketError::None);
    link.b().qp.receive(parsed, link.now());
}

// The AETH syndrome of what B sends next (0xff when B sends nothing).
uint8_t answer(Link& link) {
    uint8_t out[4096 + 64];
    const size_t n = link.b().qp.transmit(out, sizeof(out), link.now());
    if (!n)
        return 0xff;
    IbPacket response;
    REQUIRE(parse_ib_packet(out, n, response) == PacketError::None);
    return response.aeth ? response.aeth->syndrome() : 0xfe;
}

// Feeds B a hand-made request and returns the AETH syndrome of what B answers.
uint8_t answer_to(Link& link, uint8_t opcode, uint32_t psn, uint64_t va, uint32_t rkey,
                  uint32_t dma_length, uint32_t payload) {
    feed_request(link, opcode, psn, va, rkey, dma_length, payload);
    return answer(link);
}
} // namespace

TEST_CASE("RC responder: memory that fails after the request was accepted is NAKed, not ACKed") {
    // The engine writes behind and learns of a fault after accepting the packet; the
    // requester must hear a fatal remote operational error, as for a write that fails
    // at once, and the QP ends in the error state after sending it.
    Link link(13, {0, 0, 0, 0});
    link.connect(PathMtu::Mtu1024, kAllRemote);
    const uint32_t epsn = 0xfffff0;
    HostMemory& bm = link.b().memory;
    const uint32_t region = bm.add_region(4096, kRegionRights);
    feed_request(link, op::rc(op::kWriteOnly), epsn, bm.region(region).addr, region, 8, 8);
    link.b().qp.memory_fault();
    CHECK(answer(link) == (aeth::kNak | aeth::kNakRemoteOperationalError));
    CHECK(link.b().qp.state() == QpState::Error);
    CHECK(link.b().qp.counters().naks_sent == 1);
}

TEST_CASE("RC responder: a memory fault under a SEND in progress fails its receive") {
    // The first packet of a SEND was accepted into a receive; the rest may never come.
    // The receive completes with LOC_PROT_ERR (not a flush), then the fatal NAK.
    Link link(14, {0, 0, 0, 0});
    link.connect(PathMtu::Mtu1024, kAllRemote);
    HostMemory& bm = link.b().memory;
    const uint32_t region = bm.add_region(4096, kRegionRights);
    RecvWqe r = one_sge_receive(21, bm, region, 4096);
    REQUIRE(link.b().qp.post_recv(r));
    feed_request(link, op::rc(op::kSendFirst), 0xfffff0, 0, 0, 0, 1024);
    link.b().qp.memory_fault();
    REQUIRE(link.b().sink.recvs.size() == 1);
    CHECK(link.b().sink.recvs[0].wr_id == 21);
    CHECK(link.b().sink.recvs[0].status == WcStatus::LocalProtectionError);
    CHECK(answer(link) == (aeth::kNak | aeth::kNakRemoteOperationalError));
    CHECK(link.b().qp.state() == QpState::Error);
}

TEST_CASE("RC responder: crafted requests are NAKed, never executed") {
    const uint8_t invalid = aeth::kNak | aeth::kNakInvalidRequest;
    const uint8_t access_error = aeth::kNak | aeth::kNakRemoteAccessError;
    Link link(12, {0, 0, 0, 0});
    link.connect(PathMtu::Mtu1024, kAllRemote);
    const uint32_t epsn = 0xfffff0; // B's first expected PSN (connect())
    HostMemory& bm = link.b().memory;
    const uint32_t region = bm.add_region(4096, kRegionRights);
    const uint64_t va = bm.region(region).addr;

    SECTION("a read longer than the largest message") {
        CHECK(answer_to(link, op::rc(op::kReadRequest), epsn, va, region, 0x80000001u, 0) ==
              invalid);
    }
    SECTION("a middle packet with no first") {
        CHECK(answer_to(link, op::rc(op::kSendMiddle), epsn, 0, 0, 0, 1024) == invalid);
    }
    SECTION("a write-only carrying more than its DMA length") {
        CHECK(answer_to(link, op::rc(op::kWriteOnly), epsn, va, region, 16, 64) == invalid);
    }
    SECTION("a write past the end of the region") {
        CHECK(answer_to(link, op::rc(op::kWriteOnly), epsn, va + 4090, region, 64, 64) ==
              access_error);
    }
    SECTION("a payload larger than the path MTU") {
        CHECK(answer_to(link, op::rc(op::kSendOnly), epsn, 0, 0, 0, 2048) == invalid);
    }
    SECTION("a PSN from the future draws one sequence NAK, then silence") {
        CHECK(answer_to(link, op::rc(op::kWriteOnly), psn_add(epsn, 5), va, region, 8, 8) ==
              (aeth::kNak | aeth::kNakPsnSequenceError));
        CHECK(answer_to(link, op::rc(op::kWriteOnly), psn_add(epsn, 6), va, region, 8, 8) == 0xff);
    }
}

TEST_CASE("RC: COMM_EST on the first packet in RTR, SQ_DRAINED once SQD has drained") {
    Link link(13, {0, 0, 0, 0});
    link.connect(PathMtu::Mtu1024, kAllRemote);
    // connect() took B to RTS: bring it back to a fresh RTR to see the event.
    CHECK(link.b().sink.established == 0);
    HostMemory& am = link.a().memory;
    HostMemory& bm = link.b().memory;
    const uint32_t src = am.add_region(65536, kRegionRights);
    const uint32_t dst = bm.add_region(65536, kRegionRights);
    link.b().qp.set_state(QpState::Reset, link.now());
    link.b().qp.set_state(QpState::Init, link.now());
    link.b().qp.set_state(QpState::Rtr, link.now());
    SendWqe w = one_sge_request(1, WrOpcode::RdmaWrite, am, src, 60000);
    w.signaled = true;
    w.remote_addr = bm.region(dst).addr;
    w.rkey = dst;
    REQUIRE(link.a().qp.post_send(w));
    link.run(1); // the first packets are on their way
    link.a().qp.set_state(QpState::Sqd, link.now());
    CHECK(link.a().sink.drained == 0); // the write is still in flight
    SendWqe later = w;
    later.wr_id = 2;
    REQUIRE(link.a().qp.post_send(later)); // queued, not started while in SQD
    REQUIRE(link.run_until([&] { return link.a().sink.drained == 1; }));
    CHECK(link.b().sink.established == 1);
    CHECK(link.a().sink.sends.size() == 1);
    link.a().qp.set_state(QpState::Rts, link.now());
    REQUIRE(link.run_until([&] { return link.a().sink.sends.size() == 2; }));
    CHECK(link.a().sink.drained == 1);
    CHECK(link.b().sink.established == 1); // once
}

TEST_CASE("RC: SEND with Invalidate invalidates the rkey at the responder before completing") {
    Link link(8, {});
    link.connect(PathMtu::Mtu1024, kAllRemote);
    HostMemory& am = link.a().memory;
    HostMemory& bm = link.b().memory;
    const uint32_t src = am.add_region(8192, kRegionRights);
    const uint32_t dst = bm.add_region(8192, kRegionRights);
    const uint32_t window = bm.add_region(4096, kRegionRights); // stands for a bound window
    REQUIRE(link.b().qp.post_recv(one_sge_receive(7, bm, dst, 8192)));
    SendWqe w = one_sge_request(1, WrOpcode::SendWithInvalidate, am, src, 3000); // 3 packets
    w.signaled = true;
    w.rkey = window;
    REQUIRE(link.a().qp.post_send(w));
    REQUIRE(link.run_until([&] { return !link.a().sink.sends.empty(); }));
    CHECK(link.a().sink.sends[0].status == WcStatus::Success);
    CHECK(link.a().sink.sends[0].opcode == WcOpcode::Send);
    REQUIRE(link.b().sink.recvs.size() == 1);
    const Completion& r = link.b().sink.recvs[0];
    CHECK(r.status == WcStatus::Success);
    CHECK(r.byte_len == 3000);
    CHECK(r.with_invalidate);
    CHECK(r.invalidated_rkey == window);
    REQUIRE(bm.invalidated.size() == 1);
    CHECK(bm.invalidated[0] == std::make_pair(window, true));

    // The rkey grants nothing now: a WRITE through it is a remote access error.
    SendWqe write = one_sge_request(2, WrOpcode::RdmaWrite, am, src, 8);
    write.signaled = true;
    write.rkey = window;
    write.remote_addr = 0x1000;
    REQUIRE(link.a().qp.post_send(write));
    REQUIRE(link.run_until([&] { return link.a().sink.sends.size() == 2; }));
    CHECK(link.a().sink.sends[1].status == WcStatus::RemoteAccessError);
}

TEST_CASE("RC: SEND with Invalidate of an rkey that is not ours is an invalid request") {
    Link link(9, {});
    link.connect(PathMtu::Mtu1024, kAllRemote);
    HostMemory& am = link.a().memory;
    HostMemory& bm = link.b().memory;
    const uint32_t src = am.add_region(4096, kRegionRights);
    const uint32_t dst = bm.add_region(4096, kRegionRights);
    REQUIRE(link.b().qp.post_recv(one_sge_receive(7, bm, dst, 4096)));
    SendWqe w = one_sge_request(1, WrOpcode::SendWithInvalidate, am, src, 100);
    w.signaled = true;
    w.rkey = 0xbad00;
    REQUIRE(link.a().qp.post_send(w));
    REQUIRE(link.run_until([&] { return !link.a().sink.sends.empty(); }));
    CHECK(link.a().sink.sends[0].status == WcStatus::RemoteInvalidRequestError);
    REQUIRE(link.b().sink.recvs.size() == 1);
    CHECK(link.b().sink.recvs[0].status == WcStatus::RemoteInvalidRequestError);
    CHECK(bm.invalidated.empty());
}

TEST_CASE("RC: binds and local invalidations run in send queue order and send nothing") {
    Link link(10, {});
    link.connect(PathMtu::Mtu1024, kAllRemote);
    HostMemory& am = link.a().memory;
    HostMemory& bm = link.b().memory;
    const uint32_t src = am.add_region(4096, kRegionRights);
    const uint32_t dst = bm.add_region(65536, kRegionRights);
    // A long WRITE, then a bind and an invalidation behind it: they complete after it.
    SendWqe write = one_sge_request(1, WrOpcode::RdmaWrite, am, src, 4096);
    write.signaled = true;
    write.rkey = dst;
    write.remote_addr = bm.region(dst).addr;
    SendWqe bind;
    bind.wr_id = 2;
    bind.opcode = WrOpcode::BindMemoryWindow;
    bind.signaled = true;
    bind.bind = {1, 0x4200, src, access::kRemoteRead, am.region(src).addr, 1024};
    SendWqe inv;
    inv.wr_id = 3;
    inv.opcode = WrOpcode::LocalInvalidate;
    inv.signaled = true;
    inv.rkey = 0x4200;
    REQUIRE(link.a().qp.post_send(write));
    REQUIRE(link.a().qp.post_send(bind));
    REQUIRE(link.a().qp.post_send(inv));
    REQUIRE(link.run_until([&] { return link.a().sink.sends.size() == 3; }));
    const auto& s = link.a().sink.sends;
    CHECK(s[0].wr_id == 1);
    CHECK(s[1].wr_id == 2);
    CHECK(s[1].opcode == WcOpcode::BindMemoryWindow);
    CHECK(s[2].wr_id == 3);
    CHECK(s[2].opcode == WcOpcode::LocalInvalidate);
    for (const Completion& c : s)
        CHECK(c.status == WcStatus::Success);
    REQUIRE(am.invalidated.size() == 1);
    CHECK(am.invalidated[0] == std::make_pair(0x4200u, false));

    // Invalidating it again fails: LOC_QP_OP_ERR, and what follows flushes.
    SendWqe again = inv;
    again.wr_id = 4;
    SendWqe after = one_sge_request(5, WrOpcode::RdmaWrite, am, src, 8);
    after.rkey = dst;
    after.remote_addr = bm.region(dst).addr;
    REQUIRE(link.a().qp.post_send(again));
    REQUIRE(link.a().qp.post_send(after));
    REQUIRE(link.run_until([&] { return link.a().sink.sends.size() == 5; }));
    CHECK(s[3].status == WcStatus::LocalQpOperationError);
    CHECK(s[4].status == WcStatus::WrFlushError);
    CHECK(link.a().qp.state() == QpState::Error);
}

TEST_CASE("RC: a message that takes longer to send than the local ACK timeout does not time out") {
    // 16 MiB at 16 packets per simulated microsecond takes ~256 us; the timeout (code 4)
    // is ~65 us. ACKs asked for every kAckReqEvery packets restart the timer on the way.
    Link link(21, {0, 0, 0, 0});
    link.connect(PathMtu::Mtu4096, kAllRemote);
    HostMemory& am = link.a().memory;
    HostMemory& bm = link.b().memory;
    const uint32_t length = 16u << 20;
    const uint32_t src = am.add_region(length, kRegionRights);
    const uint32_t dst = bm.add_region(length, kRegionRights);
    for (uint32_t i = 0; i < length; ++i)
        am.region(src).bytes[i] = pattern(3, i);
    SendWqe w = one_sge_request(1, WrOpcode::RdmaWrite, am, src, length);
    w.signaled = true;
    w.rkey = dst;
    w.remote_addr = bm.region(dst).addr;
    const Nanoseconds start = link.now();
    REQUIRE(link.a().qp.post_send(w));
    REQUIRE(link.run_until([&] { return !link.a().sink.sends.empty(); }));
    CHECK(link.now() - start > 2 * ack_timeout_ns(link.a().qp.attributes().timeout));
    CHECK(link.a().sink.sends[0].status == WcStatus::Success);
    CHECK(link.a().qp.counters().timeouts == 0);
    CHECK(link.a().qp.counters().retransmitted_packets == 0);
    CHECK(first_mismatch(bm.region(dst).bytes.data(), 3, length) == -1);
}

TEST_CASE("RC: the requester asks for an ACK every kAckReqEvery packets and keeps at most "
          "kMaxUnackedPackets outstanding") {
    Link link(22, {0, 0, 0, 0});
    link.connect(PathMtu::Mtu1024, kAllRemote);
    HostMemory& am = link.a().memory;
    HostMemory& bm = link.b().memory;
    const uint32_t packets = 2 * kMaxUnackedPackets;
    const uint32_t src = am.add_region(packets * 1024, kRegionRights);
    const uint32_t dst = bm.add_region(packets * 1024, kRegionRights);
    SendWqe w = one_sge_request(1, WrOpcode::RdmaWrite, am, src, packets * 1024);
    w.signaled = true;
    w.rkey = dst;
    w.remote_addr = bm.region(dst).addr;
    REQUIRE(link.a().qp.post_send(w));
    // Sends what A will send now; B receives it. Returns how many packets there were.
    std::vector<uint32_t> asked; // the packet indexes that asked for an ACK
    uint32_t sent = 0;
    auto send_all = [&] {
        uint32_t n = 0;
        uint8_t out[1024 + 64];
        while (size_t length = link.a().qp.transmit(out, sizeof(out), link.now())) {
            IbPacket packet;
            REQUIRE(parse_ib_packet(out, length, packet) == PacketError::None);
            if (packet.bth->ack_req())
                asked.push_back(sent);
            link.b().qp.receive(packet, link.now());
            ++sent;
            ++n;
        }
        return n;
    };
    CHECK(send_all() == kMaxUnackedPackets); // the window is full: A waits
    REQUIRE(asked.size() == kMaxUnackedPackets / kAckReqEvery);
    for (size_t i = 0; i < asked.size(); ++i)
        CHECK(asked[i] == (i + 1) * kAckReqEvery - 1);
    CHECK(link.a().qp.transmit(nullptr, 0, link.now()) == 0);
    // B's coalesced ACK covers all it received; it reopens the whole window.
    uint8_t ack[64];
    const size_t n = link.b().qp.transmit(ack, sizeof(ack), link.now());
    REQUIRE(n);
    IbPacket packet;
    REQUIRE(parse_ib_packet(ack, n, packet) == PacketError::None);
    REQUIRE(packet.aeth);
    link.a().qp.receive(packet, link.now());
    CHECK(send_all() == kMaxUnackedPackets); // the rest, the last packet asking too
    CHECK(asked.back() == packets - 1);
    CHECK(link.a().sink.sends.empty()); // not acknowledged yet
    REQUIRE(link.run_until([&] { return !link.a().sink.sends.empty(); }));
    CHECK(link.a().sink.sends[0].status == WcStatus::Success);
    CHECK(link.a().qp.counters().timeouts == 0);
}

namespace {
// A connected pair whose B owes A a 32-packet READ response: A's request (32 KiB at MTU
// 1024) is handed to B, and nothing else has been sent. `a_region` and `b_region` are
// 64 KiB each.
struct ReadOwed {
    Link link;
    uint32_t a_region = 0, b_region = 0;
    explicit ReadOwed(uint64_t seed) : link(seed, {0, 0, 0, 0}) {
        link.connect(PathMtu::Mtu1024, kAllRemote);
        HostMemory& am = link.a().memory;
        HostMemory& bm = link.b().memory;
        a_region = am.add_region(65536, kRegionRights);
        b_region = bm.add_region(65536, kRegionRights);
        SendWqe read = one_sge_request(1, WrOpcode::RdmaRead, am, a_region, 32768);
        read.rkey = b_region;
        read.remote_addr = bm.region(b_region).addr;
        REQUIRE(link.a().qp.post_send(read));
        uint8_t out[1024 + 64];
        const size_t n = link.a().qp.transmit(out, sizeof(out), link.now());
        REQUIRE(n);
        IbPacket packet;
        REQUIRE(parse_ib_packet(out, n, packet) == PacketError::None);
        link.b().qp.receive(packet, link.now());
    }
};
} // namespace

TEST_CASE("RC: the responder and the requester take turns: a long READ response does not hold "
          "back the QP's own requests") {
    ReadOwed pair(23);
    Link& link = pair.link;
    // Meanwhile B has two SENDs of its own for A.
    for (uint64_t id = 7; id < 9; ++id) {
        RecvWqe r = one_sge_receive(id, link.a().memory, pair.a_region, 1024);
        REQUIRE(link.a().qp.post_recv(r));
        REQUIRE(link.b().qp.post_send(
            one_sge_request(id, WrOpcode::Send, link.b().memory, pair.b_region, 16)));
    }
    std::vector<uint8_t> opcodes;
    uint8_t out[1024 + 64];
    while (const size_t n = link.b().qp.transmit(out, sizeof(out), link.now())) {
        IbPacket packet;
        REQUIRE(parse_ib_packet(out, n, packet) == PacketError::None);
        opcodes.push_back(packet.bth->opcode());
    }
    // The responder's turn (16 packets), the first SEND, the rest of the response, the
    // second SEND: 34 packets.
    REQUIRE(opcodes.size() == 34);
    CHECK(opcodes[0] == op::kReadResponseFirst);
    for (size_t i = 1; i < 16; ++i)
        CHECK(opcodes[i] == op::kReadResponseMiddle);
    CHECK(opcodes[16] == op::kSendOnly);
    CHECK(opcodes[32] == op::kReadResponseLast);
    CHECK(opcodes[33] == op::kSendOnly);
}

TEST_CASE("RC: a request that fails on its turn ends the connection: no response follows it") {
    ReadOwed pair(24);
    Link& link = pair.link;
    // B's own SEND names a local key it does not have.
    SendWqe bad = one_sge_request(2, WrOpcode::Send, link.b().memory, pair.b_region, 64);
    bad.sge[0].lkey = 0xbad;
    REQUIRE(link.b().qp.post_send(bad));
    size_t sent = 0;
    uint8_t out[1024 + 64];
    while (link.b().qp.transmit(out, sizeof(out), link.now()) != 0)
        ++sent;
    // The responder's turn, then the SEND fails: the QP is in error and sends nothing more.
    CHECK(sent == 16);
    CHECK(link.b().qp.state() == QpState::Error);
    REQUIRE_FALSE(link.b().sink.sends.empty());
    CHECK(link.b().sink.sends[0].status == WcStatus::LocalProtectionError);
}

TEST_CASE("RC: a small SEND into memory that stages receives travels with its completion") {
    Link link(23, {0, 0, 0, 0});
    link.connect(PathMtu::Mtu1024, kAllRemote);
    HostMemory& am = link.a().memory;
    HostMemory& bm = link.b().memory;
    bm.stage_receives = true;
    const uint32_t src = am.add_region(4096, kRegionRights);
    const uint32_t dst = bm.add_region(4096, kRegionRights);
    for (uint32_t i = 0; i < 4096; ++i)
        am.region(src).bytes[i] = pattern(5, i);
    auto send = [&](uint64_t id, uint32_t length, RecvWqe r) {
        REQUIRE(link.b().qp.post_recv(r));
        SendWqe w = one_sge_request(id, WrOpcode::Send, am, src, length);
        w.signaled = true;
        REQUIRE(link.a().qp.post_send(w));
        REQUIRE(link.run_until([&] { return link.b().sink.recvs.size() == id; }));
        return link.b().sink.recvs.back();
    };
    // At most kStagedReceiveBytes, all in the first SGE: staged, memory untouched.
    const Completion staged = send(1, kStagedReceiveBytes, one_sge_receive(1, bm, dst, 128, 8));
    CHECK(staged.status == WcStatus::Success);
    CHECK(staged.byte_len == kStagedReceiveBytes);
    REQUIRE(staged.staged_length == kStagedReceiveBytes);
    CHECK(staged.staged_addr == bm.region(dst).addr + 8);
    CHECK(first_mismatch(staged.staged.data(), 5, kStagedReceiveBytes) == -1);
    CHECK(bm.region(dst).bytes[8] == 0);
    // One byte more: written into memory as always.
    const Completion written =
        send(2, kStagedReceiveBytes + 1, one_sge_receive(2, bm, dst, 128, 1024));
    CHECK(written.status == WcStatus::Success);
    CHECK(written.staged_length == 0);
    CHECK(first_mismatch(bm.region(dst).bytes.data() + 1024, 5, kStagedReceiveBytes + 1) == -1);
    // A receive with a bad lkey is not staged: it fails as a write would.
    RecvWqe bad = one_sge_receive(3, bm, dst, 128);
    bad.sge[0].lkey = 0xbad;
    const Completion failed = send(3, 16, bad);
    CHECK(failed.status == WcStatus::LocalProtectionError);
    CHECK(failed.staged_length == 0);
}

TEST_CASE("RC: a placed WRITE or READ sends nothing, completes after the requests before it, "
          "and a placed request in RTR's responder raises COMM_EST once") {
    // Single copy (SendWqe::placed): the initiator moved the bytes itself. The requester
    // runs it as a local operation: no PSN, no packet, its completion in send queue order.
    Link link(14, {0, 0, 0, 0});
    link.connect(PathMtu::Mtu1024, kAllRemote);
    HostMemory& am = link.a().memory;
    HostMemory& bm = link.b().memory;
    const uint32_t src = am.add_region(65536, kRegionRights);
    const uint32_t dst = bm.add_region(65536, kRegionRights);
    SendWqe read = one_sge_request(1, WrOpcode::RdmaRead, am, src, 60000);
    read.signaled = true;
    read.remote_addr = bm.region(dst).addr;
    read.rkey = dst;
    REQUIRE(link.a().qp.post_send(read)); // the engine's way: packets
    SendWqe placed = one_sge_request(2, WrOpcode::RdmaWrite, am, src, 30000);
    placed.signaled = true;
    placed.placed = true;
    placed.remote_addr = bm.region(dst).addr;
    placed.rkey = dst;
    REQUIRE(link.a().qp.post_send(placed));
    SendWqe placed_read = placed;
    placed_read.wr_id = 3;
    placed_read.opcode = WrOpcode::RdmaRead;
    placed_read.length = 100;
    placed_read.sge[0].length = 100;
    REQUIRE(link.a().qp.post_send(placed_read));
    REQUIRE(link.run_until([&] { return link.a().sink.sends.size() == 3; }));
    const auto& sends = link.a().sink.sends;
    CHECK(sends[0].wr_id == 1);
    CHECK(sends[1].wr_id == 2);
    CHECK(sends[1].opcode == WcOpcode::RdmaWrite);
    CHECK(sends[1].byte_len == 30000);
    CHECK(sends[2].wr_id == 3);
    CHECK(sends[2].opcode == WcOpcode::RdmaRead);
    for (const auto& c : sends)
        CHECK(c.status == WcStatus::Success);
    // The READ's one request packet, and nothing for the placed ones.
    CHECK(link.a().qp.counters().packets_sent == 1);
    CHECK(link.a().qp.counters().placed_messages == 2);
    CHECK(link.a().qp.counters().placed_bytes == 30100);
    CHECK(link.b().qp.counters().packets_received == 1);

    // A responder in RTR hears of placed requests as of a first packet: COMM_EST, once.
    link.b().qp.set_state(QpState::Reset, link.now());
    link.b().qp.set_state(QpState::Init, link.now());
    link.b().qp.set_state(QpState::Rtr, link.now());
    link.b().qp.requests_placed();
    link.b().qp.requests_placed();
    CHECK(link.b().sink.established == 1);
}

TEST_CASE("RC: a placed WRITE with immediate is one packet without payload that takes a "
          "receive, completes with the RETH's length, and waits out an RNR NAK") {
    // Single copy of a WRITE with immediate: the bytes are in place already; the request
    // still consumes the responder's receive, in PSN order, as one marked packet.
    Link link(15, {0, 0, 0, 0});
    link.connect(PathMtu::Mtu1024, kAllRemote);
    HostMemory& am = link.a().memory;
    HostMemory& bm = link.b().memory;
    const uint32_t src = am.add_region(65536, kRegionRights);
    const uint32_t dst = bm.add_region(65536, kRegionRights);
    for (size_t i = 0; i < 65536; ++i)
        am.region(src).bytes[i] = static_cast<uint8_t>(i * 7);
    SendWqe w = one_sge_request(1, WrOpcode::RdmaWriteWithImm, am, src, 50000);
    w.signaled = true;
    w.placed = true;
    w.imm_data = 0x12345678;
    w.remote_addr = bm.region(dst).addr;
    w.rkey = dst;
    REQUIRE(link.a().qp.post_send(w));
    // No receive yet: RNR NAKs until one is posted, then it completes.
    link.run(2000);
    CHECK(link.a().sink.sends.empty());
    CHECK(link.a().qp.counters().rnr_naks_received > 0);
    REQUIRE(link.b().qp.post_recv(one_sge_receive(9, bm, dst, 0)));
    REQUIRE(link.run_until([&] { return !link.a().sink.sends.empty(); }));
    CHECK(link.a().sink.sends[0].status == WcStatus::Success);
    CHECK(link.a().sink.sends[0].opcode == WcOpcode::RdmaWrite);
    REQUIRE(link.b().sink.recvs.size() == 1);
    const Completion& r = link.b().sink.recvs[0];
    CHECK(r.status == WcStatus::Success);
    CHECK(r.opcode == WcOpcode::RecvRdmaWithImm);
    CHECK(r.byte_len == 50000);
    CHECK(r.with_imm);
    CHECK(r.imm_data == 0x12345678);
    CHECK(r.wr_id == 9);
    // The bytes were the initiator's to move: nothing was carried, nothing written.
    CHECK(bm.region(dst).bytes[0] == 0);
    CHECK(bm.region(dst).bytes[49999] == 0);
    CHECK(link.a().qp.counters().placed_messages == 1);
    CHECK(link.a().qp.counters().placed_bytes == 50000);
    // Every transmission was the one packet (again after each RNR NAK).
    CHECK(link.a().qp.counters().packets_sent == link.a().qp.counters().rnr_naks_received + 1);
    CHECK(link.b().qp.counters().receives_completed == 1);

    // Unplaced, the same request carries its bytes in 49 packets.
    w.placed = false;
    w.wr_id = 2;
    REQUIRE(link.b().qp.post_recv(one_sge_receive(10, bm, dst, 0)));
    const uint64_t sent = link.a().qp.counters().packets_sent;
    REQUIRE(link.a().qp.post_send(w));
    REQUIRE(link.run_until([&] { return link.b().sink.recvs.size() == 2; }));
    CHECK(link.b().sink.recvs[1].byte_len == 50000);
    CHECK(link.a().qp.counters().packets_sent - sent == 49);
    CHECK(bm.region(dst).bytes[49999] == static_cast<uint8_t>(49999 * 7));
}

TEST_CASE("RC: a WRITE with immediate marked placed where the mark is not honoured is an "
          "invalid request") {
    // The mark counts only where the frame's receiver says it came over the built-in
    // wire (IbPacket::placed); elsewhere the packet is a WRITE ONLY whose payload is
    // shorter than its RETH says (9.7.5.1.4).
    Link link(16, {0, 0, 0, 0});
    link.connect(PathMtu::Mtu1024, kAllRemote);
    HostMemory& am = link.a().memory;
    HostMemory& bm = link.b().memory;
    const uint32_t src = am.add_region(4096, kRegionRights);
    const uint32_t dst = bm.add_region(4096, kRegionRights);
    link.a().qp.attributes().retry_cnt = 0;
    SendWqe w = one_sge_request(1, WrOpcode::RdmaWriteWithImm, am, src, 100);
    w.signaled = true;
    w.placed = true;
    w.remote_addr = bm.region(dst).addr;
    w.rkey = dst;
    REQUIRE(link.a().qp.post_send(w));
    uint8_t frame[256];
    const AddressVector* to = nullptr;
    const size_t n = link.a().qp.transmit(frame, sizeof(frame), link.now(), &to);
    REQUIRE(n > 0);
    IbPacket packet;
    REQUIRE(parse_ib_packet(frame, n, packet) == PacketError::None);
    CHECK(packet.bth->placed_by_initiator());
    CHECK(packet.payload_length == 0);
    REQUIRE(packet.reth);
    CHECK(packet.reth->dma_length() == 100);
    REQUIRE(link.b().qp.post_recv(one_sge_receive(9, bm, dst, 0)));
    link.b().qp.receive(packet, link.now(), nullptr); // packet.placed: false
    REQUIRE(link.b().sink.recvs.empty());
    CHECK(link.b().qp.counters().naks_sent == 1);
}

TEST_CASE("RC: requests pipelined behind a SEND answered with an RNR NAK leave that RNR NAK "
          "standing: with rnr_retry 0 the SEND fails RNR_RETRY_EXC_ERR, the rest flush") {
    // The responder takes the whole burst before it answers: the SEND without a receive
    // (RNR NAK), then the WRITE's packets past the PSN it expects. The gap they make is
    // the RNR NAK's consequence; answering it with a sequence-error NAK in its place would
    // have the requester resend at once and fail on retry_cnt instead (9.7.5.2.8).
    Link link(17, {0, 0, 0, 0});
    link.connect(PathMtu::Mtu1024, kAllRemote, 4, 0); // rnr_retry 0
    HostMemory& am = link.a().memory;
    HostMemory& bm = link.b().memory;
    const uint32_t src = am.add_region(65536, kRegionRights);
    const uint32_t dst = bm.add_region(65536, kRegionRights);
    SendWqe send = one_sge_request(1, WrOpcode::Send, am, src, 8);
    send.signaled = true;
    SendWqe write = one_sge_request(2, WrOpcode::RdmaWrite, am, src, 60000);
    write.signaled = true;
    write.remote_addr = bm.region(dst).addr;
    write.rkey = dst;
    REQUIRE(link.a().qp.post_send(send));
    REQUIRE(link.a().qp.post_send(write));
    REQUIRE(link.run_until([&] { return link.a().sink.sends.size() == 2; }));
    CHECK(link.a().sink.sends[0].status == WcStatus::RnrRetryExceededError);
    CHECK(link.a().sink.sends[1].status == WcStatus::WrFlushError);
    CHECK(link.a().qp.counters().rnr_retries_exceeded == 1);
    CHECK(link.a().qp.counters().retries_exceeded == 0);
    CHECK(link.b().qp.counters().out_of_sequence > 0); // the WRITE's packets came
    CHECK(bm.region(dst).bytes[59999] == 0);           // and none was written
}
