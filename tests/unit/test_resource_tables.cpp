// Engine: resource tables of one context (PD, MR, CQ) and the CQ ring.
#include "cq_ring_owner.hpp"
#include "device_model.hpp"
#include "resource_tables.hpp"
#include "shared_memory.hpp"

#include <catch2/catch.hpp>
#include <cerrno>
#include <filesystem>
#include <set>
#include <sys/mman.h>
#include <unistd.h>
#include <vector>

namespace di = softhca::device_interface;
using namespace softhca::engine;

namespace {

struct Buffer {
    std::vector<char> bytes = std::vector<char>(8192);
    uint64_t addr() const { return reinterpret_cast<uintptr_t>(bytes.data()); }
};

di::RegMrRequest mr_request(uint32_t pd, uint64_t addr, uint64_t length, uint32_t access) {
    di::RegMrRequest r{};
    r.pd_handle = pd;
    r.addr = addr;
    r.iova = addr;
    r.length = length;
    r.access = access;
    return r;
}

} // namespace

TEST_CASE("a PD in use by an MR cannot be deallocated (EBUSY) until the MR is gone") {
    KeySpace keys;
    ContextResources ctx(ClientProcess::self(), keys);
    Buffer buf;
    uint32_t pd = 0;
    REQUIRE(ctx.alloc_pd(pd) == 0);
    RegisteredMr mr{};
    REQUIRE(ctx.reg_mr(mr_request(pd, buf.addr(), 4096, di::kAccessLocalWrite), mr) == 0);
    CHECK(ctx.dealloc_pd(pd) == EBUSY);
    CHECK(ctx.dereg_mr(mr.handle) == 0);
    CHECK(ctx.dereg_mr(mr.handle) == EINVAL);
    CHECK(ctx.dealloc_pd(pd) == 0);
    CHECK(ctx.dealloc_pd(pd) == EINVAL);
}

TEST_CASE("reg_mr validates the PD, the access flags and the range") {
    KeySpace keys;
    ContextResources ctx(ClientProcess::self(), keys);
    Buffer buf;
    uint32_t pd = 0;
    REQUIRE(ctx.alloc_pd(pd) == 0);
    RegisteredMr mr{};
    CHECK(ctx.reg_mr(mr_request(pd + 100, buf.addr(), 64, 0), mr) == EINVAL);
    CHECK(ctx.reg_mr(mr_request(pd, buf.addr(), 64, di::kAccessRemoteWrite), mr) == EINVAL);
    CHECK(ctx.reg_mr(mr_request(pd, buf.addr(), 64, di::kAccessRemoteAtomic), mr) == EINVAL);
    CHECK(ctx.reg_mr(mr_request(pd, buf.addr(), 64, 1u << 15), mr) == EINVAL);
    CHECK(ctx.reg_mr(mr_request(pd, buf.addr(), 64, di::kAccessZeroBased), mr) == EOPNOTSUPP);
    CHECK(ctx.reg_mr(mr_request(pd, buf.addr(), 0, 0), mr) == EINVAL);
    CHECK(ctx.reg_mr(mr_request(pd, ~0ull - 10, 64, 0), mr) == EINVAL);
    CHECK(ctx.reg_mr(mr_request(pd, 0, 4096, 0), mr) == EFAULT);
    CHECK(ctx.mr_count() == 0);
    CHECK(ctx.reg_mr(mr_request(pd, buf.addr(), 64,
                                di::kAccessLocalWrite | di::kAccessRemoteWrite |
                                    di::kAccessRemoteRead | di::kAccessRelaxedOrdering),
                     mr) == 0);
    CHECK(mr.lkey == mr.rkey);
}

TEST_CASE("on-demand paging: pages need not be mapped at registration, the implicit MR covers "
          "everything, and neither is mapped by the engine") {
    KeySpace keys;
    ContextResources ctx(ClientProcess::self(), keys);
    uint32_t pd = 0;
    REQUIRE(ctx.alloc_pd(pd) == 0);
    // An address range nothing is mapped at: EFAULT without ODP, accepted with it.
    void* hole = mmap(nullptr, 1 << 20, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(hole != MAP_FAILED);
    REQUIRE(munmap(hole, 1 << 20) == 0);
    const uint64_t at = reinterpret_cast<uintptr_t>(hole);
    constexpr uint32_t kOdp = di::kAccessLocalWrite | di::kAccessOnDemand;
    RegisteredMr mr{};
    CHECK(ctx.reg_mr(mr_request(pd, at, 1 << 20, di::kAccessLocalWrite), mr) == EFAULT);
    REQUIRE(ctx.reg_mr(mr_request(pd, at, 1 << 20, kOdp), mr) == 0);
    const MemoryRegion* explicit_mr = ctx.find_mr_by_key(mr.lkey);
    REQUIRE(explicit_mr);
    CHECK(explicit_mr->mapping == nullptr); // reached with cross-memory attach
    // Still a sane range: no wrap, not empty.
    CHECK(ctx.reg_mr(mr_request(pd, ~0ull - 10, 64, kOdp), mr) == EINVAL);
    CHECK(ctx.reg_mr(mr_request(pd, at, 0, kOdp), mr) == EINVAL);
    // Implicit: address 0, length SIZE_MAX, iova 0.
    di::RegMrRequest implicit = mr_request(pd, 0, UINT64_MAX, kOdp);
    REQUIRE(ctx.reg_mr(implicit, mr) == 0);
    const MemoryRegion* whole = ctx.find_mr_by_key(mr.lkey);
    REQUIRE(whole);
    CHECK(whole->length == UINT64_MAX);
    CHECK(whole->mapping == nullptr);
    implicit.iova = 4096;
    CHECK(ctx.reg_mr(implicit, mr) == EINVAL);
    // Without ODP the whole address space is not a region.
    CHECK(ctx.reg_mr(mr_request(pd, 0, UINT64_MAX, di::kAccessLocalWrite), mr) == EINVAL);
    CHECK(ctx.mr_count() == 2);
}

TEST_CASE("MR keys are unique across contexts") {
    KeySpace keys;
    ContextResources a(ClientProcess::self(), keys), b(ClientProcess::self(), keys);
    Buffer buf;
    uint32_t pda = 0, pdb = 0;
    REQUIRE(a.alloc_pd(pda) == 0);
    REQUIRE(b.alloc_pd(pdb) == 0);
    std::set<uint32_t> seen;
    for (int i = 0; i < 200; ++i) {
        RegisteredMr mr{};
        ContextResources& ctx = i % 2 ? a : b;
        REQUIRE(ctx.reg_mr(mr_request(i % 2 ? pda : pdb, buf.addr(), 128, 0), mr) == 0);
        CHECK(seen.insert(mr.lkey).second);
    }
    CHECK(keys.mrs == 200);
}

TEST_CASE("destroying a context releases its share of the device limits") {
    KeySpace keys;
    {
        ContextResources ctx(ClientProcess::self(), keys);
        uint32_t pd = 0, cq = 0;
        const CompletionQueue* q = nullptr;
        REQUIRE(ctx.alloc_pd(pd) == 0);
        REQUIRE(ctx.create_cq(10, 0, 0, {}, cq, q) == 0);
        CHECK(keys.pds == 1);
        CHECK(keys.cqs == 1);
    }
    CHECK(keys.pds == 0);
    CHECK(keys.cqs == 0);
}

TEST_CASE("CQ sizes round up to 2^n - 1 and are bounded") {
    CHECK(cq_slots_for(1) == 2);
    CHECK(cq_slots_for(15) == 16);
    CHECK(cq_slots_for(16) == 32);
    CHECK(cq_slots_for(0) == 0);
    CHECK(cq_slots_for(DeviceLimits::kMaxCqe) == DeviceLimits::kMaxCqe + 1);
    CHECK(cq_slots_for(DeviceLimits::kMaxCqe + 1) == 0);

    KeySpace keys;
    ContextResources ctx(ClientProcess::self(), keys);
    uint32_t handle = 0;
    const CompletionQueue* cq = nullptr;
    CHECK(ctx.create_cq(0, 0, 0, {}, handle, cq) == EINVAL);
    CHECK(ctx.create_cq(10, 1, 0, {}, handle, cq) == EINVAL); // comp_vector out of range
    REQUIRE(ctx.create_cq(100, 0, 0, {}, handle, cq) == 0);
    CHECK(cq->cqe == 127);
    CHECK(cq->ring.bytes() == di::cq_ring_bytes(128));
}

TEST_CASE("resize keeps unpolled completions and refuses to drop any") {
    KeySpace keys;
    ContextResources ctx(ClientProcess::self(), keys);
    uint32_t handle = 0;
    const CompletionQueue* cq = nullptr;
    REQUIRE(ctx.create_cq(7, 0, 0, {}, handle, cq) == 0);
    auto& ring = const_cast<CqRingOwner&>(cq->ring);
    for (uint64_t i = 0; i < 7; ++i) {
        di::CompletionEntry e{};
        e.wr_id = 1000 + i;
        REQUIRE(ring.push(e));
    }
    CHECK(ctx.resize_cq(handle, 3, cq) == EINVAL);
    REQUIRE(ctx.resize_cq(handle, 20, cq) == 0);
    CHECK(cq->cqe == 31);
    CHECK(cq->ring.pending() == 7);

    // Read the new ring as the provider would, through its own mapping.
    const int fd = cq->ring.share();
    REQUIRE(fd >= 0);
    void* map = mmap(nullptr, cq->ring.bytes(), PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    REQUIRE(map != MAP_FAILED);
    auto* header = static_cast<di::CqRingHeader*>(map);
    CHECK(header->magic == di::kCqRingMagic);
    CHECK(header->slots == 32);
    for (uint64_t i = 0; i < 7; ++i)
        CHECK(di::cq_ring_entries(header)[i].wr_id == 1000 + i);
    munmap(map, cq->ring.bytes());
}

TEST_CASE("a full CQ ring refuses a completion and flags the overrun") {
    CqRingOwner ring;
    REQUIRE(ring.create(4) == 0);
    di::CompletionEntry e{};
    for (int i = 0; i < 4; ++i)
        REQUIRE(ring.push(e));
    CHECK_FALSE(ring.push(e));
    CHECK(ring.pending() == 4);
}

TEST_CASE("a CQ arm gives one notification and solicited-only waits for a solicited one") {
    CqRingOwner ring;
    REQUIRE(ring.create(16) == 0);
    // The provider's view of the ring, where ibv_req_notify_cq writes the arm.
    const int fd = ring.share();
    REQUIRE(fd >= 0);
    void* map = mmap(nullptr, ring.bytes(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    REQUIRE(map != MAP_FAILED);
    auto* shared = static_cast<di::CqRingHeader*>(map);
    CHECK(shared->version == di::kCqRingVersion);
    di::CompletionEntry e{};
    REQUIRE(ring.push(e));
    CHECK_FALSE(ring.take_notification(true)); // not armed
    shared->notify.store(di::kNotifyNext);
    REQUIRE(ring.push(e));
    CHECK(ring.take_notification(false));
    CHECK(shared->notify.load() == di::kNotifyNone);
    REQUIRE(ring.push(e));
    CHECK_FALSE(ring.take_notification(false)); // one event per arm
    shared->notify.store(di::kNotifySolicited);
    CHECK_FALSE(ring.take_notification(false)); // unsolicited: the arm stays
    CHECK(shared->notify.load() == di::kNotifySolicited);
    CHECK(ring.take_notification(true)); // solicited (or an error completion)
    // A resize carries the arm over to the new ring.
    shared->notify.store(di::kNotifyNext);
    CqRingOwner bigger;
    REQUIRE(bigger.create(32) == 0);
    ring.move_pending_to(bigger);
    CHECK(bigger.pending() == 3);
    CHECK(bigger.take_notification(false));
    munmap(map, ring.bytes());
}

TEST_CASE("the QP number table finds each QP by its 24-bit number and nothing else") {
    QpNumberTable table;
    auto* a = reinterpret_cast<EngineQp*>(uintptr_t{0x1000});
    auto* b = reinterpret_cast<EngineQp*>(uintptr_t{0x2000});
    CHECK(table.find(0x11) == nullptr);
    table.insert(0x11, a);
    table.insert(0xffffff, b);
    CHECK(table.find(0x11) == a);
    CHECK(table.find(0xffffff) == b);
    CHECK(table.find(0x12) == nullptr);
    CHECK(table.find(0x1011) == nullptr); // same offset, another page
    CHECK(table.find(0xfff011) == nullptr);
    table.erase(0x11);
    CHECK(table.find(0x11) == nullptr);
    CHECK(table.find(0xffffff) == b);
    table.erase(0x500000); // a page never made: nothing happens
    CHECK(table.find(0x500000) == nullptr);
}

TEST_CASE("rings cost the engine no descriptor each where it may reopen its own mappings") {
    auto open_descriptors = [] {
        size_t n = 0;
        for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd"))
            n += entry.path().filename() != ".";
        return n;
    };
    const size_t before = open_descriptors();
    std::vector<CqRingOwner> rings(50);
    for (CqRingOwner& ring : rings)
        REQUIRE(ring.create(16) == 0);
    SharedMemory probe;
    REQUIRE(probe.create("softhca-test", 4096) == 0);
    // Root (CAP_SYS_ADMIN, as the engine runs) reopens through /proc/self/map_files: no
    // descriptor is kept; anyone else keeps one per ring.
    const size_t kept = probe.holds_descriptor() ? rings.size() + 1 : 0;
    CHECK(open_descriptors() == before + kept);
    // What a client gets is the ring itself, each time a new descriptor.
    const int a = rings[0].share(), b = rings[0].share();
    REQUIRE((a >= 0 && b >= 0 && a != b));
    void* map = mmap(nullptr, rings[0].bytes(), PROT_READ, MAP_SHARED, a, 0);
    REQUIRE(map != MAP_FAILED);
    CHECK(static_cast<di::CqRingHeader*>(map)->magic == di::kCqRingMagic);
    munmap(map, rings[0].bytes());
    close(a);
    close(b);
    if (geteuid() == 0)
        CHECK_FALSE(probe.holds_descriptor());
}
