// Engine: the caps of one context and one user (--limits), below the engine's maxima.
#include "device_model.hpp"
#include "engine_qp.hpp"
#include "engine_srq.hpp"
#include "multicast_groups.hpp"
#include "ports.hpp"
#include "resource_limits.hpp"
#include "resource_tables.hpp"
#include "softhca/device_interface/control.hpp"

#include <catch2/catch.hpp>
#include <cerrno>
#include <memory>
#include <unistd.h>
#include <vector>

namespace di = softhca::device_interface;
using namespace softhca::engine;

TEST_CASE("the engine's maxima are the device's, and every default cap of a user is below") {
    const ResourceUsage& m = kEngineMaxima.objects;
    CHECK(m.qps == QpLimits::kMaxQp);
    CHECK(m.cqs == DeviceLimits::kMaxCq);
    CHECK(m.srqs == SrqLimits::kMaxSrq);
    CHECK(m.mrs == DeviceLimits::kMaxMr);
    CHECK(m.pds == DeviceLimits::kMaxPd);
    CHECK(m.mws == DeviceLimits::kMaxMw);
    CHECK(m.dm_bytes == di::kDeviceMemoryPoolBytes);
    // One allocation of max_dm_size is what a user may hold.
    CHECK(ResourceLimits{}.user.dm_bytes == di::kDeviceMemoryBytes);
    CHECK(m.attachments ==
          uint64_t{MulticastGroups::kMaxGroups} * MulticastGroups::kMaxQpsPerGroup);
    const ResourceLimits defaults;
    // Half of each maximum at most: a user at every cap leaves at least as much to others.
    const ResourceUsage& u = defaults.user;
    CHECK(u.qps * 2 <= m.qps);
    CHECK(u.cqs * 2 <= m.cqs);
    CHECK(u.srqs * 2 <= m.srqs);
    CHECK(u.mrs * 2 <= m.mrs);
    CHECK(u.pds * 2 <= m.pds);
    CHECK(u.mws * 2 <= m.mws);
    CHECK(u.dm_bytes * 2 <= m.dm_bytes);
    CHECK(u.attachments * 2 <= m.attachments);
    CHECK(defaults.user_connections * 2 <= kEngineMaxima.connections);
    CHECK(defaults.user_cm_files * 2 <= kEngineMaxima.cm_files);
    CHECK(defaults.user_cm_ids * 2 <= kEngineMaxima.cm_ids);
    // A context's caps do not exceed its user's.
    CHECK_FALSE(defaults.context.exceeds(defaults.user));
}

TEST_CASE(
    "every cap is set by --limits, and a user's cap at or above the engine's maximum is refused") {
    ResourceLimits limits;
    REQUIRE(ResourceLimits::parse("context_pds=10,user_mws=20,user_dm_kb=64,context_attachments=3,"
                                  "user_connections=5,user_cm_files=6,user_cm_ids=7,user_mb=100",
                                  limits) == "");
    CHECK(limits.context.pds == 10);
    CHECK(limits.user.mws == 20);
    CHECK(limits.user.dm_bytes == 64 << 10);
    CHECK(limits.context.attachments == 3);
    CHECK(limits.user_connections == 5);
    CHECK(limits.user_cm_files == 6);
    CHECK(limits.user_cm_ids == 7);
    CHECK(limits.user.bytes == 100ull << 20);
    ResourceLimits other;
    CHECK(ResourceLimits::parse("user_qps=16384", other).find("user_qps must be below") == 0);
    CHECK(ResourceLimits::parse("user_cm_ids=65536", other).find("user_cm_ids") == 0);
    CHECK(ResourceLimits::parse("user_dm_kb=1024", other).find("user_dm_kb") == 0);
    CHECK(ResourceLimits::parse("user_pds=65535", other).empty());
    CHECK_FALSE(ResourceLimits::parse("context_cm_ids=5", other).empty());
    CHECK_FALSE(ResourceLimits::parse("user_bogus=5", other).empty());
}

TEST_CASE("PDs, MWs and device memory stop at a context's caps with ENOMEM") {
    KeySpace keys;
    keys.set_device_count(1);
    REQUIRE(ResourceLimits::parse("context_pds=3,context_mws=2,context_dm_kb=8,"
                                  "context_attachments=1",
                                  keys.limits) == "");
    ContextResources ctx(ClientProcess::self(), keys);
    uint32_t pd = 0;
    for (int i = 0; i < 3; ++i)
        REQUIRE(ctx.alloc_pd(pd) == 0);
    uint32_t extra = 0;
    CHECK(ctx.alloc_pd(extra) == ENOMEM);
    CHECK(keys.pds == 3);
    REQUIRE(ctx.dealloc_pd(pd) == 0);
    CHECK(ctx.alloc_pd(pd) == 0); // a freed one is room again

    uint32_t mw = 0, rkey = 0;
    REQUIRE(ctx.alloc_mw(pd, 1, mw, rkey) == 0);
    REQUIRE(ctx.alloc_mw(pd, 2, mw, rkey) == 0);
    CHECK(ctx.alloc_mw(pd, 1, mw, rkey) == ENOMEM);
    CHECK(keys.mws == 2);

    uint32_t dm = 0;
    const DeviceMemory* memory = nullptr;
    REQUIRE(ctx.alloc_dm(4096, 0, dm, memory) == 0);
    REQUIRE(ctx.alloc_dm(4096, 0, dm, memory) == 0);
    CHECK(ctx.alloc_dm(64, 0, dm, memory) == ENOMEM);
    CHECK(keys.dm_bytes_by_device[0] == 8192);
}

TEST_CASE("one user's caps hold over all of its contexts") {
    KeySpace keys;
    REQUIRE(ResourceLimits::parse("user_pds=4", keys.limits) == "");
    ContextResources a(ClientProcess::self(), keys), b(ClientProcess::self(), keys);
    uint32_t pd = 0;
    REQUIRE(a.alloc_pd(pd) == 0);
    REQUIRE(a.alloc_pd(pd) == 0);
    REQUIRE(b.alloc_pd(pd) == 0);
    REQUIRE(b.alloc_pd(pd) == 0);
    CHECK(a.alloc_pd(pd) == ENOMEM);
    CHECK(b.alloc_pd(pd) == ENOMEM);
}

TEST_CASE("a user's usage is kept as objects come and go, and equals a count of them") {
    KeySpace keys;
    keys.set_device_count(1);
    const uid_t me = ::getuid();
    auto a = std::make_unique<ContextResources>(ClientProcess::self(), keys);
    ContextResources b(ClientProcess::self(), keys);
    uint32_t pd = 0, cq_handle = 0, mw = 0, rkey = 0, dm = 0;
    REQUIRE(a->alloc_pd(pd) == 0);
    const CompletionQueue* cq = nullptr;
    REQUIRE(a->create_cq(63, 0, 0, {}, cq_handle, cq) == 0);
    REQUIRE(a->resize_cq(cq_handle, 1000, cq) == 0); // a bigger ring is charged instead
    REQUIRE(a->alloc_mw(pd, 1, mw, rkey) == 0);
    const DeviceMemory* memory = nullptr;
    REQUIRE(a->alloc_dm(5000, 0, dm, memory) == 0);
    PortInfo port;
    std::vector<uint32_t> qps;
    for (uint32_t type : {2u, 4u}) { // RC, UD
        di::CreateQpRequest create{};
        create.pd_handle = pd;
        create.send_cq_handle = create.recv_cq_handle = cq_handle;
        create.qp_type = type;
        create.caps = {16, 8, 1, 1, 0, 0};
        EngineQp* qp = nullptr;
        REQUIRE(a->create_qp(create, port, qp) == 0);
        qps.push_back(qp->handle());
    }
    const uint8_t group[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 239, 0, 0, 1};
    REQUIRE(a->attach_mcast(qps[1], group) == 0);
    di::CreateSrqRequest srq_request{};
    srq_request.pd_handle = pd;
    srq_request.max_wr = 8;
    srq_request.max_sge = 1;
    EngineSrq* srq = nullptr;
    REQUIRE(a->create_srq(srq_request, srq) == 0);
    uint32_t other_pd = 0;
    REQUIRE(b.alloc_pd(other_pd) == 0);

    CHECK(a->usage() == a->recount());
    CHECK(a->usage().qps == 2);
    CHECK(a->usage().attachments == 1);
    CHECK(a->usage().dm_bytes == 5000);
    ResourceUsage both = a->usage();
    both += b.usage();
    CHECK(keys.usage_by_user.at(me) == both);

    // Destroyed one by one, then the rest with the context: nothing stays charged.
    REQUIRE(a->destroy_qp(qps[1]) == 0); // its attachment goes with it
    REQUIRE(a->destroy_srq(srq->handle()) == 0);
    REQUIRE(a->dealloc_mw(mw) == 0);
    CHECK(a->usage() == a->recount());
    CHECK(a->usage().attachments == 0);
    a.reset();
    CHECK(keys.usage_by_user.at(me) == b.usage());
    REQUIRE(b.dealloc_pd(other_pd) == 0);
    CHECK(keys.usage_by_user.count(me) == 0);
}

TEST_CASE("an SRQ resized past the bytes cap fails ENOMEM and stays as it was") {
    KeySpace keys;
    keys.set_device_count(1);
    REQUIRE(ResourceLimits::parse("context_mb=1", keys.limits) == "");
    ContextResources ctx(ClientProcess::self(), keys);
    uint32_t pd = 0;
    REQUIRE(ctx.alloc_pd(pd) == 0);
    di::CreateSrqRequest create{};
    create.pd_handle = pd;
    create.max_wr = 16;
    create.max_sge = 16;
    EngineSrq* srq = nullptr;
    REQUIRE(ctx.create_srq(create, srq) == 0);
    const ResourceUsage before = ctx.usage();
    di::ModifySrqRequest resize{};
    resize.srq_handle = srq->handle();
    resize.attr_mask = 1;  // IBV_SRQ_MAX_WR
    resize.max_wr = 16384; // some 5 MB of ring
    bool new_ring = false;
    CHECK(ctx.modify_srq(resize, srq, new_ring) == ENOMEM);
    CHECK_FALSE(new_ring);
    CHECK(srq->max_wr() == 16);
    CHECK(ctx.usage() == before);
    resize.max_wr = 64; // within it
    CHECK(ctx.modify_srq(resize, srq, new_ring) == 0);
    CHECK(new_ring);
    CHECK(ctx.usage() == ctx.recount());
}
