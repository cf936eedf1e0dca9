#include "resource_tables.hpp"

#include "device_model.hpp"
#include "memory_map.hpp"

#include <cerrno>

namespace softhca::engine {

namespace di = device_interface;

uint32_t KeySpace::next_key() {
    // Index in the upper 24 bits, a rolling 8-bit tag in the lower (as mlx HCAs do),
    // so a stale key is unlikely to name a new region.
    tag_ = (tag_ * 37 + 11) & 0xff;
    const uint32_t key = (next_index_ << 8) | tag_;
    next_index_ = (next_index_ % 0xffffff) + 1;
    return key;
}

uint32_t cq_slots_for(uint32_t cqe) {
    if (cqe < 1 || cqe > DeviceLimits::kMaxCqe)
        return 0;
    uint32_t slots = 2;
    while (slots - 1 < cqe)
        slots <<= 1;
    return slots;
}

ContextResources::~ContextResources() {
    keys_.pds -= static_cast<uint32_t>(pds_.size());
    keys_.mrs -= static_cast<uint32_t>(mrs_.size());
    keys_.cqs -= static_cast<uint32_t>(cqs_.size());
}

int ContextResources::alloc_pd(uint32_t& handle) {
    if (keys_.pds >= DeviceLimits::kMaxPd)
        return ENOMEM;
    handle = next_handle_++;
    pds_.emplace(handle, ProtectionDomain{});
    ++keys_.pds;
    return 0;
}

int ContextResources::dealloc_pd(uint32_t handle) {
    auto it = pds_.find(handle);
    if (it == pds_.end())
        return EINVAL;
    if (it->second.mr_count)
        return EBUSY; // objects still use it (ib_uverbs: ib_dealloc_pd refuses)
    pds_.erase(it);
    --keys_.pds;
    return 0;
}

int ContextResources::reg_mr(const di::RegMrRequest& request, RegisteredMr& out) {
    auto pd = pds_.find(request.pd_handle);
    if (pd == pds_.end())
        return EINVAL;
    constexpr uint32_t known = di::kAccessLocalWrite | di::kAccessRemoteWrite |
                               di::kAccessRemoteRead | di::kAccessRemoteAtomic | di::kAccessMwBind |
                               di::kAccessZeroBased | di::kAccessOnDemand | di::kAccessHugetlb |
                               di::kAccessOptionalRange;
    if (request.access & ~known)
        return EINVAL;
    // ibv_reg_mr(3) and the kernel (ib_check_mr_access): remote write or remote
    // atomic access requires local write.
    if ((request.access & (di::kAccessRemoteWrite | di::kAccessRemoteAtomic)) &&
        !(request.access & di::kAccessLocalWrite))
        return EINVAL;
    if (request.access & (di::kAccessOnDemand | di::kAccessZeroBased))
        return EOPNOTSUPP;
    if (request.length == 0 || request.length > DeviceLimits::kMaxMrSize)
        return EINVAL;
    if (request.addr + request.length < request.addr ||
        request.iova + request.length < request.iova)
        return EINVAL; // wraps around the address space
    if (keys_.mrs >= DeviceLimits::kMaxMr)
        return ENOMEM;
    const bool writable =
        request.access & (di::kAccessLocalWrite | di::kAccessRemoteWrite | di::kAccessRemoteAtomic);
    if (int err = check_user_range(owner_, request.addr, request.length, writable))
        return err == ESRCH ? EFAULT : err;

    MemoryRegion mr;
    mr.pd_handle = request.pd_handle;
    mr.addr = request.addr;
    mr.length = request.length;
    mr.iova = request.iova;
    mr.access = request.access;
    mr.lkey = keys_.next_key();
    mr.rkey = mr.lkey;
    const uint32_t handle = next_handle_++;
    mrs_.emplace(handle, mr);
    ++pd->second.mr_count;
    ++keys_.mrs;
    out = {handle, mr.lkey, mr.rkey};
    return 0;
}

int ContextResources::dereg_mr(uint32_t handle) {
    auto it = mrs_.find(handle);
    if (it == mrs_.end())
        return EINVAL;
    --pds_.at(it->second.pd_handle).mr_count;
    mrs_.erase(it);
    --keys_.mrs;
    return 0;
}

int ContextResources::create_cq(uint32_t cqe, uint32_t comp_vector, uint64_t user_handle,
                                uint32_t& handle, const CompletionQueue*& cq) {
    const uint32_t slots = cq_slots_for(cqe);
    if (!slots || comp_vector >= DeviceLimits::kNumCompVectors)
        return EINVAL;
    if (keys_.cqs >= DeviceLimits::kMaxCq)
        return ENOMEM;
    CompletionQueue queue;
    if (int err = queue.ring.create(slots))
        return err;
    queue.user_handle = user_handle;
    queue.cqe = slots - 1;
    queue.comp_vector = comp_vector;
    handle = next_handle_++;
    cq = &cqs_.emplace(handle, std::move(queue)).first->second;
    ++keys_.cqs;
    return 0;
}

int ContextResources::resize_cq(uint32_t handle, uint32_t cqe, const CompletionQueue*& cq) {
    auto it = cqs_.find(handle);
    if (it == cqs_.end())
        return EINVAL;
    const uint32_t slots = cq_slots_for(cqe);
    if (!slots || cqe < it->second.ring.pending())
        return EINVAL; // would lose completions not yet polled
    CqRingOwner ring;
    if (int err = ring.create(slots))
        return err;
    it->second.ring.move_pending_to(ring);
    it->second.ring = std::move(ring);
    it->second.cqe = slots - 1;
    cq = &it->second;
    return 0;
}

int ContextResources::destroy_cq(uint32_t handle) {
    if (!cqs_.erase(handle))
        return EINVAL;
    --keys_.cqs;
    return 0;
}

} // namespace softhca::engine
