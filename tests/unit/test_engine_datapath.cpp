// The engine's own data path over a simulated lossy wire (sim_ports.hpp): Datapath,
// EngineQp, ProcessMemory and the completion rings, with this test in the provider's
// place. It writes work requests into the QP rings as the provider does, polls the CQ
// rings (landing small receives from their entries as poll_cq does), and checks every byte, on both
// memory paths: private heap memory (cross-memory attach into this very process) and a
// MAP_SHARED memfd (mapped by the engine, touched with memcpy).
#include "engine_bench.hpp"

#include <catch2/catch.hpp>
#include <cstring>
#include <deque>
#include <random>

using namespace engine_bench;

TEST_CASE("engine data path: RC writes, reads and sends over a lossy simulated wire, every byte "
          "checked, on private and on shared memory, with one data path and with one per port") {
    const bool shared = GENERATE(false, true);
    const size_t datapaths = GENERATE(1, 2);
    FaultConfig faults;
    faults.drop = 0.02;
    faults.duplicate = 0.02;
    faults.reorder = 0.02;
    faults.corrupt = 0.01;
    faults.seed = shared ? 11 : 12;
    Bench bench(faults, shared, 0, datapaths);
    Host& a = *bench.a;
    Host& b = *bench.b;
    INFO((shared ? "shared memfd" : "private heap") << ", " << datapaths << " data paths");
    CHECK(a.shared_mapped() == shared);
    CHECK(b.shared_mapped() == shared);

    // A's buffer: [0, 2 MiB) sources and read targets, 16 slots of 64 KiB + 1 KiB.
    // B's buffer: the same layout for write targets, read sources and receives.
    constexpr uint32_t kSlot = 65 * 1024;
    constexpr uint64_t kMessages = 300;
    constexpr uint32_t kOutstanding = 16;
    std::mt19937_64 rng(faults.seed);
    struct Posted {
        uint8_t opcode;
        uint64_t message;
        uint32_t length;
        uint64_t slot;
    };
    std::deque<Posted> in_flight;
    std::deque<Posted> receives;
    uint64_t posted = 0, completed = 0, received = 0;
    uint64_t rounds = 0;
    while (completed < kMessages && rounds < 2'000'000) {
        while (posted < kMessages && in_flight.size() < kOutstanding) {
            const uint64_t m = ++posted;
            const uint64_t slot = (m % kOutstanding) * kSlot;
            const uint32_t sizes[] = {0, 1, 8, 63, 64, 65, 1024, 1025, 4096, 65536};
            const uint32_t length =
                m % 3 == 0 ? sizes[rng() % 10] : static_cast<uint32_t>(rng() % 65537);
            const uint8_t opcode = static_cast<uint8_t>(m % 3 == 0 ? 2 : m % 3 == 1 ? 0 : 4);
            if (opcode == 4) { // READ: B's bytes come to A
                fill(b.buffer.data() + slot, m, length);
                std::memset(a.buffer.data() + slot, 0, length);
            } else {
                fill(a.buffer.data() + slot, m, length);
                std::memset(b.buffer.data() + slot, 0, length);
            }
            if (opcode == 2) {
                b.post_recv(m, slot, kSlot);
                receives.push_back({opcode, m, length, slot});
            }
            a.post_send(m, opcode, slot, length, b.buffer.addr() + slot, b.mr.rkey);
            in_flight.push_back({opcode, m, length, slot});
        }
        bench.round();
        ++rounds;
        di::CompletionEntry e;
        while (a.poll(e)) {
            REQUIRE(!in_flight.empty());
            const Posted p = in_flight.front();
            in_flight.pop_front();
            INFO("message " << p.message << " opcode " << int(p.opcode) << " length " << p.length);
            REQUIRE(e.wr_id == p.message);
            REQUIRE(e.status == 0);
            // RC: a WRITE's completion means its bytes are in B's memory; a READ's, in A's.
            const uint8_t* where = (p.opcode == 4 ? a : b).buffer.data() + p.slot;
            if (p.opcode != 2)
                REQUIRE(first_mismatch(where, p.message, p.length) == -1);
            ++completed;
        }
        while (b.poll(e)) {
            REQUIRE(!receives.empty());
            const Posted p = receives.front();
            receives.pop_front();
            INFO("receive " << p.message << " length " << p.length);
            REQUIRE(e.wr_id == p.message);
            REQUIRE(e.status == 0);
            REQUIRE(e.byte_len == p.length);
            REQUIRE(first_mismatch(b.buffer.data() + p.slot, p.message, p.length) == -1);
            ++received;
        }
    }
    CHECK(completed == kMessages);
    CHECK(received == kMessages / 3);
    // The wire did its worst, and the transport recovered through the engine's glue.
    const auto& counters = a.qp->transport().counters();
    INFO("dropped " << bench.ports.faults(0).dropped << " retransmitted "
                    << counters.retransmitted_packets << " bad icrc "
                    << bench.ports.counters(1).rx_bad_icrc);
    CHECK(bench.ports.faults(0).dropped > 0);
    CHECK(bench.ports.faults(0).duplicated > 0);
    CHECK(bench.ports.faults(0).reordered > 0);
    CHECK(bench.ports.faults(0).corrupted > 0);
    CHECK(counters.retransmitted_packets > 0);
    CHECK(bench.ports.counters(0).rx_bad_icrc + bench.ports.counters(1).rx_bad_icrc > 0);
    if (datapaths == 2) {
        // Each host's QP was scheduled on the data path of its own port: A's sends and
        // B's responses came from different ones.
        CHECK(bench.paths.ports_of(0) == std::vector<size_t>{0});
        CHECK(bench.paths.ports_of(1) == std::vector<size_t>{1});
        CHECK(bench.paths.path(0).qp_visits() > 0);
        CHECK(bench.paths.path(1).qp_visits() > 0);
    }
    // Every frame came back to the pool.
    for (int i = 0; i < 100; ++i)
        bench.round();
    CHECK(bench.ports.frames_in_use() == 0);
}

TEST_CASE("engine data path: only active QPs are visited, and timers fire from the heap") {
    Bench bench({}, false);
    Host& a = *bench.a;
    Host& b = *bench.b;
    // 100 more QPs that never have anything to do.
    std::vector<EngineQp*> idle;
    for (int i = 0; i < 100; ++i) {
        di::CreateQpRequest create{};
        create.pd_handle = a.pd;
        create.send_cq_handle = create.recv_cq_handle = a.cq_handle;
        create.qp_type = 2;
        create.caps = {16, 16, 1, 1, 0, 0};
        EngineQp* qp = nullptr;
        REQUIRE(a.ctx.create_qp(create, bench.ports.info(0), qp) == 0);
        idle.push_back(qp);
    }
    auto run_until_completion = [&](di::CompletionEntry& e, uint64_t limit) {
        for (uint64_t i = 0; i < limit; ++i) {
            bench.round();
            if (a.poll(e))
                return true;
        }
        return false;
    };

    // A first message, so that each side has the other's MAC (ARP) before any cut.
    {
        a.post_send(100, 0, 0, 64, b.buffer.addr(), b.mr.rkey);
        di::CompletionEntry e{};
        REQUIRE(run_until_completion(e, 10000));
        REQUIRE(e.status == 0);
        for (int i = 0; i < 10; ++i)
            bench.round();
    }

    SECTION("traffic visits the two QPs that carry it, an idle engine none") {
        const uint64_t visits_before = bench.datapath.qp_visits();
        uint64_t rounds = 0;
        for (uint64_t m = 1; m <= 50; ++m) {
            fill(a.buffer.data(), m, 4096);
            a.post_send(m, 0, 0, 4096, b.buffer.addr(), b.mr.rkey);
            di::CompletionEntry e{};
            uint64_t r = 0;
            while (!a.poll(e) && r < 10000) {
                bench.round();
                ++r;
            }
            REQUIRE(r < 10000);
            REQUIRE(e.status == 0);
            REQUIRE(first_mismatch(b.buffer.data(), m, 4096) == -1);
            rounds += r;
        }
        // At most once per QP per round, and only the two that carry traffic.
        CHECK(bench.datapath.qp_visits() - visits_before <= 2 * rounds);
        for (int i = 0; i < 10; ++i)
            bench.round(); // ACKs and timers settle
        const uint64_t settled = bench.datapath.qp_visits();
        for (int i = 0; i < 1000; ++i)
            bench.round();
        CHECK(bench.datapath.qp_visits() == settled);
        // Everything is acknowledged: no timer is left.
        CHECK(bench.datapath.next_deadline() == UINT64_MAX);
    }

    SECTION("only queues whose doorbells rang are looked at for new work requests") {
        for (int i = 0; i < 10; ++i)
            bench.round();
        const uint64_t pulls = bench.datapath.queue_pulls();
        for (int i = 0; i < 1000; ++i)
            bench.round();
        CHECK(bench.datapath.queue_pulls() == pulls); // 102 QPs, none rung: none read
        // A request published without ringing its doorbell is not seen...
        fill(a.buffer.data(), 11, 512);
        a.post_send(11, 0, 0, 512, b.buffer.addr(), b.mr.rkey);
        const uint32_t slot = a.ring->doorbell_slot;
        CHECK(a.doorbells->words[slot / 64].exchange(0) != 0); // as if the post never rang
        a.doorbells->summary[slot / 64 / 64].store(0);
        di::CompletionEntry e{};
        CHECK_FALSE(run_until_completion(e, 1000));
        CHECK(bench.datapath.queue_pulls() == pulls);
        // ... until it rings: then that one queue is read, once.
        di::ring_doorbell_slot(*a.doorbells, slot);
        REQUIRE(run_until_completion(e, 10000));
        CHECK(e.wr_id == 11);
        CHECK(e.status == 0);
        CHECK(first_mismatch(b.buffer.data(), 11, 512) == -1);
        CHECK(bench.datapath.queue_pulls() == pulls + 1);
    }

    SECTION("a cut wire: the local ACK timer fires from the heap until the retries run out") {
        bench.ports.cut = true;
        fill(a.buffer.data(), 7, 1024);
        a.post_send(7, 0, 0, 1024, b.buffer.addr(), b.mr.rkey);
        const uint64_t visits_before = bench.datapath.qp_visits();
        di::CompletionEntry e{};
        REQUIRE(run_until_completion(e, 100000));
        CHECK(e.wr_id == 7);
        CHECK(e.status == 12);                             // IBV_WC_RETRY_EXC_ERR
        CHECK(a.qp->transport().counters().timeouts == 8); // retry_cnt 7: 1 + 7 tries
        // One visit to post, one per timeout (plus the turn each resend takes): a few
        // dozen, not one per round of the ~100 rounds of each 65 us timeout.
        CHECK(bench.datapath.qp_visits() - visits_before <= 3 * 8 + 4);
        CHECK(bench.datapath.timer_entries() <= 2);
    }

    SECTION("a destroyed QP leaves the active list and the heap") {
        bench.ports.cut = true;
        a.post_send(9, 0, 0, 1024, b.buffer.addr(), b.mr.rkey);
        bench.round(); // a's QP sent and waits for its ACK: a timer entry
        CHECK(bench.datapath.timer_entries() == 1);
        // A state change puts a QP on the active list (the control path's activate).
        for (EngineQp* qp : idle) {
            di::ModifyQpRequest m{};
            m.attr.qp_state = 1;
            m.attr.port_num = 1;
            m.attr_mask = tp::qp_attr::kState | tp::qp_attr::kPkeyIndex | tp::qp_attr::kPort |
                          tp::qp_attr::kAccessFlags;
            REQUIRE(qp->modify(m, bench.ports.info(0), 0) == 0);
        }
        CHECK(bench.datapath.active_qps() == 100);
        for (EngineQp* qp : idle)
            REQUIRE(a.ctx.destroy_qp(qp->handle()) == 0);
        CHECK(bench.datapath.active_qps() == 0);
        REQUIRE(a.ctx.destroy_qp(a.qp->handle()) == 0);
        CHECK(bench.datapath.timer_entries() == 0);
        for (int i = 0; i < 100; ++i)
            bench.round(); // nothing refers to them any more
        CHECK(bench.datapath.qp_visits() > 0);
    }
}

TEST_CASE("engine data path: a deregistered MR's rkey is refused at once, though the packets "
          "before named it") {
    const bool shared = GENERATE(false, true);
    Bench bench({}, shared);
    Host& a = *bench.a;
    Host& b = *bench.b;
    auto complete = [&](di::CompletionEntry& e) {
        for (int i = 0; i < 10000; ++i) {
            bench.round();
            if (a.poll(e))
                return true;
        }
        return false;
    };
    fill(a.buffer.data(), 1, 8192);
    a.post_send(1, 0, 0, 8192, b.buffer.addr(), b.mr.rkey); // 8 packets, one rkey
    di::CompletionEntry e{};
    REQUIRE(complete(e));
    REQUIRE(e.status == 0);
    REQUIRE(first_mismatch(b.buffer.data(), 1, 8192) == -1);
    REQUIRE(b.ctx.dereg_mr(b.mr.handle) == 0);
    std::memset(b.buffer.data(), 0, 8192);
    a.post_send(2, 0, 0, 8192, b.buffer.addr(), b.mr.rkey);
    REQUIRE(complete(e));
    CHECK(e.wr_id == 2);
    CHECK(e.status == 10); // IBV_WC_REM_ACCESS_ERR
    CHECK(b.buffer.data()[0] == 0);
    CHECK(b.buffer.data()[8191] == 0);
}

TEST_CASE("engine data path: on a port with ICRC offload (the built-in wire) frames carry no "
          "ICRC and every byte still arrives, on any other port every frame has its ICRC") {
    const bool offload = GENERATE(false, true);
    INFO((offload ? "offloaded" : "computed"));
    Bench bench({}, false);
    if (offload)
        bench.ports.offload_icrc();
    uint64_t frames = 0, valid_icrc = 0;
    bench.ports.tap = [&](size_t, const uint8_t* f, uint32_t length) {
        if (f[12] != 0x08 || f[13] != 0x00)
            return; // ARP
        ++frames;
        tp::ParsedFrame parsed;
        valid_icrc += tp::parse_roce_frame(f, length, parsed) == tp::FrameError::None;
    };
    Host& a = *bench.a;
    Host& b = *bench.b;
    constexpr uint32_t kLength = 65536;
    fill(a.buffer.data(), 1, kLength);
    a.post_send(1, 0, 0, kLength, b.buffer.addr(), b.mr.rkey); // RDMA WRITE, 16 packets
    fill(b.buffer.data() + kLength, 2, kLength);
    a.post_send(2, 4, kLength, kLength, b.buffer.addr() + kLength, b.mr.rkey); // READ
    di::CompletionEntry e;
    int completed = 0;
    for (int round = 0; round < 10000 && completed < 2; ++round) {
        bench.round();
        while (a.poll(e)) {
            REQUIRE(e.status == 0);
            ++completed;
        }
    }
    REQUIRE(completed == 2);
    CHECK(first_mismatch(b.buffer.data(), 1, kLength) == -1);
    CHECK(first_mismatch(a.buffer.data() + kLength, 2, kLength) == -1);
    CHECK(frames > 0);
    CHECK(valid_icrc == (offload ? 0 : frames));
    CHECK(bench.ports.counters(0).rx_bad_icrc + bench.ports.counters(1).rx_bad_icrc == 0);
}
