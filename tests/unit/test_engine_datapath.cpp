// The engine's own data path over a simulated lossy wire (sim_ports.hpp): Datapath,
// EngineQp, ProcessMemory and the completion rings, with this test in the provider's
// place. It writes work requests into the QP rings as the provider does, polls the CQ
// rings (landing staged receives as poll_cq does), and checks every byte, on both
// memory paths: private heap memory (cross-memory attach into this very process) and a
// MAP_SHARED memfd (mapped by the engine, touched with memcpy).
#include "datapath.hpp"
#include "device_model.hpp"
#include "engine_qp.hpp"
#include "process_memory.hpp"
#include "resource_tables.hpp"
#include "sim_ports.hpp"
#include "softhca/device_interface/cq_ring.hpp"
#include "softhca/device_interface/qp_ring.hpp"

#include <catch2/catch.hpp>
#include <cstring>
#include <deque>
#include <random>
#include <sys/mman.h>
#include <unistd.h>

namespace di = softhca::device_interface;
namespace tp = softhca::transport;
using namespace softhca::engine;

namespace {

constexpr uint32_t kIbvAccess = 1 | 2 | 4 | 8; // local write, remote write/read/atomic
constexpr size_t kBufferBytes = 4 << 20;

// Application memory: heap (private) or a MAP_SHARED memfd.
class Buffer {
  public:
    Buffer(size_t bytes, bool shared) : bytes_(bytes) {
        if (shared) {
            fd_ = memfd_create("softhca-unit", MFD_CLOEXEC);
            REQUIRE(fd_ >= 0);
            REQUIRE(ftruncate(fd_, static_cast<off_t>(bytes)) == 0);
            void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
            REQUIRE(p != MAP_FAILED);
            data_ = static_cast<uint8_t*>(p);
        } else {
            heap_.resize(bytes);
            data_ = heap_.data();
        }
    }
    ~Buffer() {
        if (fd_ >= 0) {
            munmap(data_, bytes_);
            close(fd_);
        }
    }
    uint8_t* data() { return data_; }
    uint64_t addr() const { return reinterpret_cast<uint64_t>(data_); }

  private:
    size_t bytes_;
    int fd_ = -1;
    std::vector<uint8_t> heap_;
    uint8_t* data_ = nullptr;
};

void* map_fd(int fd, size_t bytes) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    REQUIRE(p != MAP_FAILED);
    return p;
}

// One process's side on one device: a context with a PD, an MR over its buffer, a CQ
// and an RC QP, and the provider's view of the rings.
struct Host {
    ContextResources ctx;
    Buffer buffer;
    uint32_t pd = 0;
    RegisteredMr mr{};
    const CompletionQueue* cq = nullptr;
    EngineQp* qp = nullptr;
    di::QpRingHeader* ring = nullptr;
    di::CqRingHeader* cq_ring = nullptr;
    uint64_t sq_next = 0, rq_next = 0;
    uint32_t cq_handle = 0;
    size_t ring_bytes = 0;

    Host(KeySpace& keys, size_t device, const PortInfo& port, bool shared)
        : ctx(getpid(), keys, device), buffer(kBufferBytes, shared) {
        REQUIRE(ctx.alloc_pd(pd) == 0);
        di::RegMrRequest reg{};
        reg.addr = reg.iova = buffer.addr();
        reg.length = kBufferBytes;
        reg.pd_handle = pd;
        reg.access = kIbvAccess;
        REQUIRE(ctx.reg_mr(reg, mr) == 0);
        REQUIRE(ctx.create_cq(1023, 0, 0, {}, cq_handle, cq) == 0);
        cq_ring = static_cast<di::CqRingHeader*>(map_fd(cq->ring.fd(), cq->ring.bytes()));
        di::CreateQpRequest create{};
        create.pd_handle = pd;
        create.send_cq_handle = create.recv_cq_handle = cq_handle;
        create.qp_type = 2; // IBV_QPT_RC
        create.caps = {64, 64, 2, 2, 64, 0};
        REQUIRE(ctx.create_qp(create, port, qp) == 0);
        ring_bytes = qp->ring_bytes();
        ring = static_cast<di::QpRingHeader*>(map_fd(qp->ring_fd(), ring_bytes));
    }
    ~Host() {
        munmap(ring, ring_bytes);
        munmap(cq_ring, cq->ring.bytes());
    }

    bool shared_mapped() const { return ctx.find_mr_by_key(mr.lkey)->mapping != nullptr; }

    void modify(uint32_t state, uint32_t mask, const di::QpAttributes& extra,
                const PortInfo& port) {
        di::ModifyQpRequest m{};
        m.attr = extra;
        m.attr.qp_state = state;
        m.attr_mask = mask | tp::qp_attr::kState;
        REQUIRE(qp->modify(m, port, 0) == 0);
    }

    void connect(const Host& peer, uint32_t peer_ip, const PortInfo& port) {
        using namespace tp::qp_attr;
        di::QpAttributes a{};
        a.port_num = 1;
        a.qp_access_flags = 2 | 4 | 8;
        modify(1, kPkeyIndex | kPort | kAccessFlags, a, port); // INIT
        a = {};
        a.path_mtu = 3; // 1024
        a.dest_qp_num = peer.qp->qp_num();
        a.rq_psn = 0xfffff0; // near the wrap
        a.max_dest_rd_atomic = 4;
        a.min_rnr_timer = 1;
        a.is_global = 1;
        a.hop_limit = 64;
        const tp::Gid gid = tp::gid_from_ipv4(peer_ip);
        std::memcpy(a.dgid, gid.data(), 16);
        modify(2, kAv | kPathMtu | kDestQpn | kRqPsn | kMaxDestRdAtomic | kMinRnrTimer, a,
               port); // RTR
        a = {};
        a.sq_psn = 0xfffff0;
        a.timeout = 4; // 65 us of simulated time
        a.retry_cnt = 7;
        a.rnr_retry = 7;
        a.max_rd_atomic = 4;
        modify(3, kSqPsn | kTimeout | kRetryCnt | kRnrRetry | kMaxQpRdAtomic, a, port); // RTS
    }

    // As the provider's post_send: header and SGE into the next slot, then the producer.
    void post_send(uint64_t wr_id, uint8_t opcode, uint64_t offset, uint32_t length,
                   uint64_t remote_addr, uint32_t rkey) {
        uint8_t* slot = di::qp_ring_slot(ring, true, sq_next);
        di::SendWqeHeader h{};
        h.wr_id = wr_id;
        h.opcode = opcode;
        h.flags = di::kSendSignaled;
        h.num_sge = 1;
        h.length = length;
        h.remote_addr = remote_addr;
        h.rkey = rkey;
        const di::WireSge sge{buffer.addr() + offset, length, mr.lkey};
        std::memcpy(slot, &h, sizeof(h));
        std::memcpy(slot + sizeof(h), &sge, sizeof(sge));
        ring->sq_producer.store(++sq_next, std::memory_order_release);
    }

    void post_recv(uint64_t wr_id, uint64_t offset, uint32_t length) {
        uint8_t* slot = di::qp_ring_slot(ring, false, rq_next);
        const di::RecvWqeHeader h{wr_id, 1, 0};
        const di::WireSge sge{buffer.addr() + offset, length, mr.lkey};
        std::memcpy(slot, &h, sizeof(h));
        std::memcpy(slot + sizeof(h), &sge, sizeof(sge));
        ring->rq_producer.store(++rq_next, std::memory_order_release);
    }

    // As poll_cq: staged bytes land before the completion is returned.
    bool poll(di::CompletionEntry& e) {
        const uint64_t consumer = cq_ring->consumer.load(std::memory_order_relaxed);
        if (consumer == cq_ring->producer.load(std::memory_order_acquire))
            return false;
        e = di::cq_ring_entries(cq_ring)[consumer & (cq_ring->slots - 1)];
        if (e.staged_length)
            std::memcpy(reinterpret_cast<void*>(e.staged_addr), e.staged, e.staged_length);
        cq_ring->consumer.store(consumer + 1, std::memory_order_release);
        return true;
    }
};

uint8_t pattern(uint64_t message, uint64_t offset) {
    return static_cast<uint8_t>((message * 131 + offset * 7 + (offset >> 8)) ^ 0x5a);
}

void fill(uint8_t* at, uint64_t message, uint32_t length) {
    for (uint32_t i = 0; i < length; ++i)
        at[i] = pattern(message, i);
}

int64_t first_mismatch(const uint8_t* at, uint64_t message, uint32_t length) {
    for (uint32_t i = 0; i < length; ++i)
        if (at[i] != pattern(message, i))
            return i;
    return -1;
}

KeySpace two_devices() {
    KeySpace keys;
    keys.set_device_count(2);
    return keys;
}

// Two devices on the simulated wire, host A on port 0 and host B on port 1.
struct Bench {
    sim::SimulatedPortSet ports;
    KeySpace keys;
    std::vector<Device> devices;
    Datapath datapath;
    std::unique_ptr<Host> a, b;
    uint64_t now = 1'000'000;

    Bench(const FaultConfig& faults, bool shared)
        : ports(faults), keys(two_devices()), devices{{"sim0", 0, 1}, {"sim1", 1, 2}},
          datapath(ports, devices, keys) {
        a = std::make_unique<Host>(keys, 0, ports.info(0), shared);
        b = std::make_unique<Host>(keys, 1, ports.info(1), shared);
        a->connect(*b, ports.info(1).ipv4, ports.info(0));
        b->connect(*a, ports.info(0).ipv4, ports.info(1));
    }

    // One polling round per 5 us of simulated time.
    void round() {
        now += 5000;
        datapath.poll(now);
    }
};

} // namespace

TEST_CASE("engine data path: RC writes, reads and sends over a lossy simulated wire, every byte "
          "checked, on private and on shared memory") {
    const bool shared = GENERATE(false, true);
    FaultConfig faults;
    faults.drop = 0.02;
    faults.duplicate = 0.02;
    faults.reorder = 0.02;
    faults.corrupt = 0.01;
    faults.seed = shared ? 11 : 12;
    Bench bench(faults, shared);
    Host& a = *bench.a;
    Host& b = *bench.b;
    INFO((shared ? "shared memfd" : "private heap"));
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
