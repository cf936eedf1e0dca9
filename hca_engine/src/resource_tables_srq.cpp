// ContextResources: shared receive queues and multicast attachment.
#include "engine_qp.hpp"
#include "engine_srq.hpp"
#include "resource_tables.hpp"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>

namespace softhca::engine {

namespace di = device_interface;

int ContextResources::create_srq(const di::CreateSrqRequest& request, EngineSrq*& srq) {
    constexpr uint32_t kSrqBasic = 0;
    if (request.srq_type != kSrqBasic)
        return EOPNOTSUPP; // XRC SRQs need an XRC domain
    auto pd = pds_.find(request.pd_handle);
    if (pd == pds_.end())
        return EINVAL;
    if (request.max_wr < 1 || request.max_wr > SrqLimits::kMaxSrqWr ||
        request.max_sge > SrqLimits::kMaxSrqSge)
        return EINVAL;
    const uint32_t max_wr = std::bit_ceil(request.max_wr);
    if (request.srq_limit > max_wr)
        return EINVAL;
    if (keys_.srqs >= SrqLimits::kMaxSrq)
        return ENOMEM;
    const uint32_t handle = next_handle_++;
    auto created = std::make_unique<EngineSrq>(
        handle, keys_.next_srq_num(), owner_, *this, request.pd_handle, max_wr,
        std::max<uint32_t>(request.max_sge, 1), request.user_handle, nullptr);
    if (int err = created->create_ring())
        return err;
    created->queue().arm_limit(request.srq_limit);
    srq = created.get();
    srqs_.emplace(handle, std::move(created));
    keys_.srqs_by_device[device_][srq->srq_num()] = srq;
    ++pd->second.srq_count;
    ++keys_.srqs;
    return 0;
}

int ContextResources::modify_srq(const di::ModifySrqRequest& request, EngineSrq*& srq,
                                 bool& new_ring) {
    srq = find_srq(request.srq_handle);
    if (!srq)
        return EINVAL;
    return srq->modify(request.attr_mask, request.max_wr, request.srq_limit, new_ring);
}

int ContextResources::destroy_srq(uint32_t handle) {
    auto it = srqs_.find(handle);
    if (it == srqs_.end())
        return EINVAL;
    EngineSrq& srq = *it->second;
    if (srq.qp_count)
        return EBUSY; // QPs still receive from it (ib_destroy_srq refuses)
    keys_.srqs_by_device[device_].erase(srq.srq_num());
    --pds_.at(srq.pd_handle()).srq_count;
    if (srq.xrc_cq())
        --srq.xrc_cq()->qp_count;
    srqs_.erase(it);
    --keys_.srqs;
    return 0;
}

EngineSrq* ContextResources::find_srq(uint32_t handle) {
    auto it = srqs_.find(handle);
    return it == srqs_.end() ? nullptr : it->second.get();
}

int ContextResources::attach_mcast(uint32_t qp_handle, const uint8_t* gid) {
    EngineQp* qp = find_qp(qp_handle);
    if (!qp || qp->type() != transport::QpType::UD)
        return EINVAL;
    transport::Gid g;
    std::memcpy(g.data(), gid, g.size());
    return keys_.mcast_by_device[device_].attach(g, qp);
}

int ContextResources::detach_mcast(uint32_t qp_handle, const uint8_t* gid) {
    EngineQp* qp = find_qp(qp_handle);
    if (!qp)
        return EINVAL;
    transport::Gid g;
    std::memcpy(g.data(), gid, g.size());
    return keys_.mcast_by_device[device_].detach(g, qp);
}

} // namespace softhca::engine
