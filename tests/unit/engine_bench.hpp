// A bench for the engine's data path over the simulated wire (sim_ports.hpp): two
// devices, one host on each with a context, a PD, an MR over its buffer (heap or a shared
// memfd), a CQ and a connected RC QP, driven as the provider drives the rings. Used by
// the data-path tests (test_engine_datapath.cpp, test_engine_neighbors.cpp).
#pragma once

#include "datapath.hpp"
#include "datapath_threads.hpp"
#include "device_model.hpp"
#include "engine_qp.hpp"
#include "process_memory.hpp"
#include "resource_tables.hpp"
#include "sim_ports.hpp"
#include "softhca/device_interface/cq_ring.hpp"
#include "softhca/device_interface/doorbell_page.hpp"
#include "softhca/device_interface/qp_ring.hpp"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <sys/mman.h>
#include <unistd.h>
#include <vector>

namespace engine_bench {

namespace di = softhca::device_interface;
namespace tp = softhca::transport;
using namespace softhca::engine;

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

// Maps what `fd` holds (a descriptor from share(), closed here), as the provider does.
inline void* map_fd(int fd, size_t bytes) {
    REQUIRE(fd >= 0);
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
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
    di::DoorbellPage* doorbells = nullptr;
    uint64_t sq_next = 0, rq_next = 0;
    uint32_t cq_handle = 0;
    size_t ring_bytes = 0;

    // `client`: the process as the engine reaches it; by default this one with its own
    // rights (cross-memory attach when it runs as root).
    Host(KeySpace& keys, size_t device, const PortInfo& port, bool shared,
         std::shared_ptr<ClientProcess> client = nullptr, size_t buffer_bytes = kBufferBytes)
        : ctx(client ? client : ClientProcess::self(), keys, device), buffer(buffer_bytes, shared) {
        doorbells = static_cast<di::DoorbellPage*>(
            map_fd(ctx.doorbells().share(), ctx.doorbells().bytes()));
        REQUIRE(ctx.alloc_pd(pd) == 0);
        di::RegMrRequest reg{};
        reg.addr = reg.iova = buffer.addr();
        reg.length = buffer_bytes;
        reg.pd_handle = pd;
        reg.access = kIbvAccess;
        REQUIRE(ctx.reg_mr(reg, mr) == 0);
        REQUIRE(ctx.create_cq(1023, 0, 0, {}, cq_handle, cq) == 0);
        cq_ring = static_cast<di::CqRingHeader*>(map_fd(cq->ring.share(), cq->ring.bytes()));
        di::CreateQpRequest create{};
        create.pd_handle = pd;
        create.send_cq_handle = create.recv_cq_handle = cq_handle;
        create.qp_type = 2; // IBV_QPT_RC
        create.caps = {64, 64, 2, 2, 64, 0};
        REQUIRE(ctx.create_qp(create, port, qp) == 0);
        ring_bytes = qp->ring_bytes();
        ring = static_cast<di::QpRingHeader*>(map_fd(qp->share_ring(), ring_bytes));
    }
    ~Host() {
        munmap(ring, ring_bytes);
        munmap(cq_ring, cq->ring.bytes());
        munmap(doorbells, ctx.doorbells().bytes());
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
        connect(peer, tp::gid_from_ipv4(peer_ip), 0, port);
    }

    // Connects to the peer's QP at `dgid` from the port's GID `sgid_index`.
    void connect(const Host& peer, const tp::Gid& dgid, uint32_t sgid_index, const PortInfo& port) {
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
        a.sgid_index = sgid_index;
        std::memcpy(a.dgid, dgid.data(), 16);
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

    // As the provider's post_send: header and SGE into the next slot, then the producer,
    // then the QP's doorbell.
    void post_send(uint64_t wr_id, uint8_t opcode, uint64_t offset, uint32_t length,
                   uint64_t remote_addr, uint32_t rkey, uint8_t flags = di::kSendSignaled) {
        uint8_t* slot = di::qp_ring_slot(ring, true, sq_next);
        di::SendWqeHeader h{};
        h.wr_id = wr_id;
        h.opcode = opcode;
        h.flags = flags;
        h.num_sge = 1;
        h.length = length;
        h.remote_addr = remote_addr;
        h.rkey = rkey;
        const di::WireSge sge{buffer.addr() + offset, length, mr.lkey};
        std::memcpy(slot, &h, sizeof(h));
        std::memcpy(slot + sizeof(h), &sge, sizeof(sge));
        ring->sq_producer.store(++sq_next, std::memory_order_release);
        di::ring_doorbell_slot(*doorbells, ring->doorbell_slot);
    }

    void post_recv(uint64_t wr_id, uint64_t offset, uint32_t length) {
        uint8_t* slot = di::qp_ring_slot(ring, false, rq_next);
        const di::RecvWqeHeader h{wr_id, 1, 0};
        const di::WireSge sge{buffer.addr() + offset, length, mr.lkey};
        std::memcpy(slot, &h, sizeof(h));
        std::memcpy(slot + sizeof(h), &sge, sizeof(sge));
        ring->rq_producer.store(++rq_next, std::memory_order_release);
        di::ring_doorbell_slot(*doorbells, ring->doorbell_slot);
    }

    // As poll_cq: a small receive's bytes that travel in its entry land before the
    // completion is returned.
    bool poll(di::CompletionEntry& e) {
        const uint64_t consumer = cq_ring->consumer.load(std::memory_order_relaxed);
        if (consumer == cq_ring->producer.load(std::memory_order_acquire))
            return false;
        e = di::cq_ring_entries(cq_ring)[consumer & (cq_ring->slots - 1)];
        REQUIRE(e.staged_length <= di::kEntryStagedBytes);
        if (e.staged_length)
            std::memcpy(reinterpret_cast<void*>(e.staged_addr), e.staged, e.staged_length);
        cq_ring->consumer.store(consumer + 1, std::memory_order_release);
        return true;
    }
};

inline uint8_t pattern(uint64_t message, uint64_t offset) {
    return static_cast<uint8_t>((message * 131 + offset * 7 + (offset >> 8)) ^ 0x5a);
}

inline void fill(uint8_t* at, uint64_t message, uint32_t length) {
    for (uint32_t i = 0; i < length; ++i)
        at[i] = pattern(message, i);
}

inline int64_t first_mismatch(const uint8_t* at, uint64_t message, uint32_t length) {
    for (uint32_t i = 0; i < length; ++i)
        if (at[i] != pattern(message, i))
            return i;
    return -1;
}

inline KeySpace two_devices() {
    KeySpace keys;
    keys.set_device_count(2);
    return keys;
}

// Two devices on the simulated wire, host A on port 0 and host B on port 1, served by one
// data path, or by two (`datapaths`: A's port and device by the first, B's by the
// second, as two engine threads would, polled here one after the other).
struct Bench {
    sim::SimulatedPortSet ports;
    KeySpace keys;
    std::vector<Device> devices;
    DatapathThreads paths;
    Datapath& datapath; // the first
    std::unique_ptr<Host> a, b;
    uint64_t now = 1'000'000;

    // The QPs connect through GID `gid_index` of each port: 0 is IPv4 (198.18.0.1 and
    // .2), 1 the link-local IPv6 address, 2 the global one (2001:2::1 and ::2).
    Bench(const FaultConfig& faults, bool shared, uint32_t gid_index = 0, size_t datapaths = 1,
          std::shared_ptr<ClientProcess> client = nullptr, size_t buffer_bytes = kBufferBytes)
        : ports(faults), keys(two_devices()), devices{{"sim0", 0, 1}, {"sim1", 1, 2}},
          paths(ports, devices, keys, datapaths), datapath(paths.main()) {
        a = std::make_unique<Host>(keys, 0, ports.info(0), shared, client, buffer_bytes);
        b = std::make_unique<Host>(keys, 1, ports.info(1), shared, client, buffer_bytes);
        a->connect(*b, ports.info(1).gids.at(gid_index), gid_index, ports.info(0));
        b->connect(*a, ports.info(0).gids.at(gid_index), gid_index, ports.info(1));
    }

    // One polling round per 5 us of simulated time.
    void round() {
        now += 5000;
        paths.poll_all(now);
    }
};

} // namespace engine_bench
