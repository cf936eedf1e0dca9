// Single copy between processes of one engine (device_interface/grant_page.hpp): the
// responder's half of a grant. What an HCA checks of an arriving RDMA WRITE or READ
// before it touches memory is checked here once, for every request the grant will
// cover: the rkey names an MR (not a window, not device memory; 10.6.3.2, o10-38), of
// the responder QP's PD (o9-20), whose access and the QP's both allow the operation
// (10.6.3.1, 9.7.5.1.4). Bounds are the requester's to check against the range granted,
// request by request; it sends whatever falls outside to the engine, which NAKs it.
#include "engine_qp.hpp"
#include "resource_tables.hpp"

#include <cerrno>

namespace softhca::engine {

namespace di = device_interface;
namespace tp = transport;

int ContextResources::grant(EngineQp& responder, uint32_t rkey, uint32_t wanted,
                            di::GrantReply& reply) {
    const auto it = mrs_by_key_.find(rkey);
    if (it == mrs_by_key_.end())
        return EACCES; // a window's rkey, or nothing: the engine answers each request
    MemoryRegion& mr = *it->second;
    const uint32_t qp_access = responder.transport().attributes().access;
    if (mr.rkey != rkey || mr.dm_handle || mr.pd_handle != responder.binding().pd_handle)
        return EACCES;
    const uint32_t allowed =
        ((mr.access & qp_access & tp::access::kRemoteWrite) ? di::kGrantWrite : 0u) |
        ((mr.access & qp_access & tp::access::kRemoteRead) ? di::kGrantRead : 0u);
    if (!(allowed & wanted))
        return EACCES;
    if (mr.grant_slot == di::kNoGrantSlot &&
        (mr.grant_slot = grants_.allocate()) == di::kNoGrantSlot)
        return ENOSPC;
    if (responder.grant_slot() == di::kNoGrantSlot) {
        const uint32_t slot = grants_.allocate();
        if (slot == di::kNoGrantSlot)
            return ENOSPC;
        responder.set_grant_slot(grants_, slot);
    }
    reply.page_id = grants_.id();
    reply.iova = mr.iova;
    reply.length = mr.length;
    reply.addr = mr.addr;
    reply.access = allowed;
    reply.mr_slot = mr.grant_slot;
    reply.mr_generation = grants_.generation(mr.grant_slot);
    reply.qp_slot = responder.grant_slot();
    reply.qp_generation = grants_.generation(responder.grant_slot());
    return 0;
}

} // namespace softhca::engine
