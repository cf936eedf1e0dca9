// Engine: a context's doorbell page (doorbells.hpp, device_interface/doorbell_page.hpp).
// Every work queue gets its own slot, written into its ring header; a slot rung as the
// provider rings it is taken once and names its queue; a freed slot rings nothing.
#include "engine_qp.hpp"
#include "engine_srq.hpp"
#include "ports.hpp"
#include "resource_tables.hpp"
#include "softhca/device_interface/doorbell_page.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <set>
#include <sys/mman.h>
#include <unistd.h>
#include <vector>

namespace di = softhca::device_interface;
using namespace softhca::engine;

namespace {

struct Rung {
    std::vector<EngineQp*> qps;
    std::vector<EngineSrq*> srqs;
};

Rung take(Doorbells& doorbells) {
    Rung rung;
    doorbells.take([&](EngineQp& qp, uint32_t) { rung.qps.push_back(&qp); },
                   [&](EngineSrq& srq, uint32_t) { rung.srqs.push_back(&srq); });
    return rung;
}

// Maps what `fd` (from share(), closed here) holds, as the provider does.
void* map_shared(int fd, size_t bytes) {
    REQUIRE(fd >= 0);
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    REQUIRE(p != MAP_FAILED);
    return p;
}

di::QpRingHeader* map_ring(int fd, size_t bytes) {
    void* p = map_shared(fd, bytes);
    return static_cast<di::QpRingHeader*>(p);
}

} // namespace

TEST_CASE("doorbells: each queue rings its own slot, taken once, a freed slot rings nothing") {
    KeySpace keys;
    ContextResources ctx(ClientProcess::self(), keys);
    Doorbells& doorbells = ctx.doorbells();
    auto* page = static_cast<di::DoorbellPage*>(map_shared(doorbells.share(), doorbells.bytes()));
    CHECK(page->magic == di::kDoorbellPageMagic);
    CHECK(page->slots == di::kDoorbellSlots);
    const auto& pages = keys.doorbell_pages_by_device[0];
    CHECK(std::find(pages.begin(), pages.end(), &doorbells) != pages.end());

    uint32_t pd = 0, cq_handle = 0;
    REQUIRE(ctx.alloc_pd(pd) == 0);
    const CompletionQueue* cq = nullptr;
    REQUIRE(ctx.create_cq(63, 0, 0, {}, cq_handle, cq) == 0);
    PortInfo port;
    std::vector<EngineQp*> qps;
    std::set<uint32_t> slots;
    for (int i = 0; i < 70; ++i) { // more than one word of the page
        di::CreateQpRequest create{};
        create.pd_handle = pd;
        create.send_cq_handle = create.recv_cq_handle = cq_handle;
        create.qp_type = 2; // RC
        create.caps = {4, 4, 1, 1, 0, 0};
        EngineQp* qp = nullptr;
        REQUIRE(ctx.create_qp(create, port, qp) == 0);
        qps.push_back(qp);
        slots.insert(qp->doorbell_slot());
        // The provider learns the slot from the ring header.
        di::QpRingHeader* ring = map_ring(qp->share_ring(), qp->ring_bytes());
        CHECK(ring->doorbell_slot == qp->doorbell_slot());
        munmap(ring, qp->ring_bytes());
    }
    di::CreateSrqRequest srq_request{};
    srq_request.pd_handle = pd;
    srq_request.max_wr = 8;
    srq_request.max_sge = 1;
    EngineSrq* srq = nullptr;
    REQUIRE(ctx.create_srq(srq_request, srq) == 0);
    slots.insert(srq->doorbell_slot());
    CHECK(slots.size() == 71); // every queue its own slot
    CHECK(*slots.rbegin() < di::kDoorbellSlots);

    // Nothing rung: nothing taken.
    CHECK(take(doorbells).qps.empty());

    // Three QPs in two words and the SRQ rung, one of them twice: each is taken once.
    di::ring_doorbell_slot(*page, qps[3]->doorbell_slot());
    di::ring_doorbell_slot(*page, qps[68]->doorbell_slot());
    di::ring_doorbell_slot(*page, qps[3]->doorbell_slot());
    di::ring_doorbell_slot(*page, qps[40]->doorbell_slot());
    di::ring_doorbell_slot(*page, srq->doorbell_slot());
    Rung rung = take(doorbells);
    CHECK(std::set<EngineQp*>(rung.qps.begin(), rung.qps.end()) ==
          std::set<EngineQp*>{qps[3], qps[68], qps[40]});
    CHECK(rung.qps.size() == 3);
    CHECK(rung.srqs == std::vector<EngineSrq*>{srq});
    rung = take(doorbells);
    CHECK((rung.qps.empty() && rung.srqs.empty()));
    CHECK_FALSE(doorbells.any_rung());

    // The engine rings a queue itself (requests left in its ring); arming is seen by
    // the provider's side.
    doorbells.ring(qps[5]->doorbell_slot());
    CHECK(doorbells.any_rung());
    CHECK(take(doorbells).qps == std::vector<EngineQp*>{qps[5]});
    doorbells.arm();
    CHECK(page->armed.load() == 1);

    // A destroyed QP's slot rings nothing; a new QP gets a free slot and rings.
    const uint32_t freed = qps[7]->doorbell_slot();
    REQUIRE(ctx.destroy_qp(qps[7]->handle()) == 0);
    di::ring_doorbell_slot(*page, freed);
    rung = take(doorbells);
    CHECK((rung.qps.empty() && rung.srqs.empty()));
    di::CreateQpRequest create{};
    create.pd_handle = pd;
    create.send_cq_handle = create.recv_cq_handle = cq_handle;
    create.qp_type = 2;
    create.caps = {4, 4, 1, 1, 0, 0};
    EngineQp* fresh = nullptr;
    REQUIRE(ctx.create_qp(create, port, fresh) == 0);
    CHECK(fresh->doorbell_slot() == freed);
    di::ring_doorbell_slot(*page, fresh->doorbell_slot());
    CHECK(take(doorbells).qps == std::vector<EngineQp*>{fresh});

    // Scribbled: every bit of the page set. Only the live queues are named.
    std::memset(static_cast<void*>(&page->summary[0]), 0xff,
                sizeof(page->summary) + sizeof(page->words));
    rung = take(doorbells);
    CHECK(rung.qps.size() == 70);
    CHECK(rung.srqs.size() == 1);
    munmap(page, doorbells.bytes());
}

TEST_CASE("doorbells: a context's page is on its device's list, and leaves it with the context") {
    KeySpace keys;
    keys.set_device_count(2);
    {
        ContextResources a(ClientProcess::self(), keys), b(ClientProcess::self(), keys),
            c(ClientProcess::self(), keys, 1);
        CHECK(keys.doorbell_pages_by_device[0].size() == 2);
        // The data-path thread serving device 1 reads only its own device's pages.
        REQUIRE(keys.doorbell_pages_by_device[1].size() == 1);
        CHECK(keys.doorbell_pages_by_device[1].front() == &c.doorbells());
    }
    CHECK(keys.doorbell_pages_by_device[0].empty());
    CHECK(keys.doorbell_pages_by_device[1].empty());
}

TEST_CASE("doorbells: every slot of the page can be given, then none, then a released one") {
    Doorbells doorbells;
    // Queues are only named by take() for rung slots; none is rung here.
    auto* queue = reinterpret_cast<EngineQp*>(alignof(EngineQp));
    std::set<uint32_t> given;
    for (uint32_t i = 0; i < di::kDoorbellSlots; ++i)
        given.insert(doorbells.assign(queue));
    CHECK(given.size() == di::kDoorbellSlots);
    CHECK(*given.rbegin() == di::kDoorbellSlots - 1);
    CHECK(doorbells.assign(queue) == di::kNoDoorbellSlot);
    doorbells.release(1234);
    doorbells.release(di::kDoorbellSlots + 7); // not a slot: ignored
    CHECK(doorbells.assign(queue) == 1234u);
    CHECK(doorbells.assign(queue) == di::kNoDoorbellSlot);
    Rung rung = take(doorbells);
    CHECK(rung.qps.empty());
}
