#include "resource_tables.hpp"

#include "device_model.hpp"
#include "engine_qp.hpp"
#include "engine_srq.hpp"
#include "memory_map.hpp"
#include "ports.hpp"
#include "softhca/device_interface/async_event.hpp"
#include "stall_watch.hpp"

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdlib>

namespace softhca::engine {

namespace di = device_interface;

uint32_t KeySpace::next_key() {
    // Index in the upper 24 bits, an 8-bit tag in the lower (as mlx HCAs do), so a stale
    // key is unlikely to name a new region. The tag is random per registration (as rxe
    // makes it): one key a client sees does not tell the keys of others' regions.
    tag_ = arc4random_uniform(256);
    const uint32_t key = (next_index_ << 8) | tag_;
    next_index_ = (next_index_ % 0xffffff) + 1;
    return key;
}

namespace {

// The next 24-bit number from `cursor` on (wrapping to `first`) that no device uses
// yet: a long-lived engine wraps around.
template <typename PerDevice>
uint32_t next_free_number(uint32_t& cursor, uint32_t first, const PerDevice& by_device) {
    for (;;) {
        const uint32_t number = cursor;
        cursor = cursor >= 0xffffff ? first : cursor + 1;
        bool used = false;
        for (const auto& device : by_device)
            used = used || device.count(number);
        if (!used)
            return number;
    }
}

} // namespace

uint32_t KeySpace::next_qp_num() {
    return next_free_number(next_qpn_, kFirstQpn, qps_by_device);
}

uint32_t KeySpace::next_srq_num() {
    return next_free_number(next_srqn_, 1, srqs_by_device); // XRCETH carries 24 bits
}

transport::QpCounters KeySpace::qp_counters_of_device(size_t device) const {
    transport::QpCounters sum = retired_qp_counters_by_device.at(device);
    for (const auto& [number, qp] : qps_by_device.at(device))
        sum += qp->transport().counters();
    return sum;
}

void KeySpace::set_device_count(size_t count) {
    QueueDirectory::set_device_count(count);
    qps_by_device.resize(count);
    retired_qp_counters_by_device.resize(count);
    qp_counter_sets.set_device_count(count);
    dm_bytes_by_device.resize(count);
}

uint32_t cq_slots_for(uint32_t cqe) {
    if (cqe < 1 || cqe > DeviceLimits::kMaxCqe)
        return 0;
    return std::bit_ceil(cqe + 1); // 2^n slots hold 2^n - 1 entries
}

ContextResources::ContextResources(std::shared_ptr<ClientProcess> client, KeySpace& keys,
                                   size_t device)
    : client_(std::move(client)), keys_(keys), device_(device) {
    if (keys_.qps_by_device.size() <= device)
        keys_.set_device_count(device + 1);
    keys_.doorbell_pages_by_device[device].push_back(&doorbells_);
}

ContextResources::~ContextResources() {
    grants_.revoke_all(); // no copy into this context's memory begins from now on
    // QPs go first: they point at this context's CQs and MRs. Handles opened here close,
    // and QPs made here go even if other contexts opened them.
    while (!opened_.empty())
        close_opened(opened_.begin()->first);
    while (!qps_.empty())
        destroy_owned_qp(qps_.begin());
    while (!srqs_.empty())
        destroy_srq(srqs_.begin()->first);
    while (!xrcds_.empty())
        close_xrcd(xrcds_.begin()->first);
    keys_.pds -= static_cast<uint32_t>(pds_.size());
    keys_.mrs -= static_cast<uint32_t>(mrs_.size());
    uncharge_pinned(pinned_);
    keys_.cqs -= static_cast<uint32_t>(cqs_.size());
    for (const auto& [handle, dm] : dms_)
        keys_.dm_bytes_by_device[device_] -= dm.length;
    std::erase(keys_.doorbell_pages_by_device[device_], &doorbells_);
    uncharge(usage_);
}

namespace {
// What one object of each kind adds to its context's usage.
constexpr ResourceUsage kPdUsage{.pds = 1};
constexpr ResourceUsage kMrUsage{.mrs = 1, .bytes = sizeof(MemoryRegion)};
ResourceUsage cq_usage(const CompletionQueue& cq) {
    return {.cqs = 1, .bytes = cq.ring.bytes()};
}
ResourceUsage dm_usage(const DeviceMemory& dm) {
    return {.dm_bytes = dm.length, .bytes = dm.memory.bytes()};
}
} // namespace

ResourceUsage ContextResources::recount() const {
    ResourceUsage u;
    u.qps = qps_.size();
    u.cqs = cqs_.size();
    u.srqs = srqs_.size();
    u.mrs = mrs_.size();
    u.pds = pds_.size();
    u.mws = mws_.size();
    u.attachments = attachments_;
    for (const auto& [handle, qp] : qps_)
        u.bytes += qp->engine_bytes();
    for (const auto& [handle, cq] : cqs_)
        u.bytes += cq.ring.bytes();
    for (const auto& [handle, srq] : srqs_)
        u.bytes += srq->engine_bytes();
    for (const auto& [handle, dm] : dms_) {
        u.bytes += dm.memory.bytes();
        u.dm_bytes += dm.length;
    }
    u.bytes += mrs_.size() * sizeof(MemoryRegion);
    return u;
}

int ContextResources::admit(const ResourceUsage& more) const {
    ResourceUsage mine = usage_;
    mine += more;
    if (mine.exceeds(keys_.limits.context))
        return ENOMEM;
    ResourceUsage user = more;
    if (auto it = keys_.usage_by_user.find(client_->account()); it != keys_.usage_by_user.end())
        user += it->second;
    return user.exceeds(keys_.limits.user) ? ENOMEM : 0;
}

void ContextResources::charge(const ResourceUsage& more) {
    usage_ += more;
    keys_.usage_by_user[client_->account()] += more;
}

void ContextResources::uncharge(ResourceUsage less) {
    usage_ -= less;
    auto it = keys_.usage_by_user.find(client_->account());
    if (it == keys_.usage_by_user.end())
        return;
    it->second -= less;
    if (it->second == ResourceUsage{})
        keys_.usage_by_user.erase(it);
}

int ContextResources::charge_pinned(uint64_t bytes) {
    uint64_t& total = keys_.pinned_by_process[client_->pid()];
    if (bytes > client_->memlock_limit() || total > client_->memlock_limit() - bytes) {
        if (total == 0)
            keys_.pinned_by_process.erase(client_->pid());
        return ENOMEM; // ib_umem_get past RLIMIT_MEMLOCK
    }
    total += bytes;
    pinned_ += bytes;
    return 0;
}

bool ContextResources::fits_pinned(uint64_t bytes) const {
    auto it = keys_.pinned_by_process.find(client_->pid());
    const uint64_t total = it == keys_.pinned_by_process.end() ? 0 : it->second;
    return bytes <= client_->memlock_limit() && total <= client_->memlock_limit() - bytes;
}

void ContextResources::uncharge_pinned(uint64_t bytes) {
    if (!bytes)
        return;
    auto it = keys_.pinned_by_process.find(client_->pid());
    if (it != keys_.pinned_by_process.end() && (it->second -= std::min(it->second, bytes)) == 0)
        keys_.pinned_by_process.erase(it);
    pinned_ -= std::min(pinned_, bytes);
}

namespace {
// The bytes of whole pages [addr, addr + length) covers: what pinning it would charge.
uint64_t pinned_bytes(uint64_t addr, uint64_t length) {
    const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    return ((addr + length + page - 1) & ~(page - 1)) - (addr & ~(page - 1));
}
} // namespace

int ContextResources::alloc_pd(uint32_t& handle) {
    if (keys_.pds >= DeviceLimits::kMaxPd)
        return ENOMEM;
    if (int err = admit(kPdUsage))
        return err;
    handle = next_handle_++;
    pds_.emplace(handle, ProtectionDomain{});
    ++keys_.pds;
    charge(kPdUsage);
    return 0;
}

int ContextResources::dealloc_pd(uint32_t handle) {
    auto it = pds_.find(handle);
    if (it == pds_.end())
        return EINVAL;
    if (it->second.mr_count || it->second.mw_count || it->second.qp_count || it->second.srq_count)
        return EBUSY; // objects still use it (ib_uverbs: ib_dealloc_pd refuses)
    pds_.erase(it);
    --keys_.pds;
    uncharge(kPdUsage);
    return 0;
}

namespace {

// What ibv_reg_mr(3) and ibv_rereg_mr(3) accept as access flags. 0 or an errno.
int check_mr_access(uint32_t access) {
    constexpr uint32_t known = di::kAccessLocalWrite | di::kAccessRemoteWrite |
                               di::kAccessRemoteRead | di::kAccessRemoteAtomic | di::kAccessMwBind |
                               di::kAccessZeroBased | di::kAccessOnDemand | di::kAccessHugetlb |
                               di::kAccessOptionalRange;
    if (access & ~known)
        return EINVAL;
    // ibv_reg_mr(3) and the kernel (ib_check_mr_access): remote write or remote
    // atomic access requires local write.
    if ((access & (di::kAccessRemoteWrite | di::kAccessRemoteAtomic)) &&
        !(access & di::kAccessLocalWrite))
        return EINVAL;
    if (access & di::kAccessZeroBased)
        return EOPNOTSUPP;
    return 0;
}

// An on-demand-paging MR (IBV_ACCESS_ON_DEMAND): its pages need not be mapped until an
// access touches them, and it is reached with cross-memory attach every time (never
// mapped by the engine: the application may map and unmap under it). The implicit
// one (addr 0, length SIZE_MAX) covers the whole address space.
bool on_demand(uint32_t access) {
    return access & di::kAccessOnDemand;
}
bool implicit_on_demand(uint64_t addr, uint64_t length, uint32_t access) {
    return on_demand(access) && addr == 0 && length == UINT64_MAX;
}

bool mr_writable(uint32_t access) {
    return access & (di::kAccessLocalWrite | di::kAccessRemoteWrite | di::kAccessRemoteAtomic);
}

// The memory behind a registration: a sane range, mapped in the owner with the rights
// the access needs (as the kernel pins user pages). 0 or an errno.
int check_mr_memory(const ClientProcess& owner, uint64_t addr, uint64_t length, uint64_t iova,
                    uint32_t access) {
    if (implicit_on_demand(addr, length, access))
        return iova == 0 ? 0 : EINVAL;
    if (length == 0 || length > DeviceLimits::kMaxMrSize)
        return EINVAL;
    if (addr + length < addr || iova + length < iova)
        return EINVAL; // wraps around the address space
    if (on_demand(access))
        return 0; // faulted in when touched; an access to what is never mapped fails then
    if (int err = check_user_range(owner, addr, length, mr_writable(access)))
        return err == ESRCH ? EFAULT : err;
    return 0;
}

} // namespace

int ContextResources::reg_mr(const di::RegMrRequest& request, RegisteredMr& out) {
    auto pd = pds_.find(request.pd_handle);
    if (pd == pds_.end())
        return EINVAL;
    if (int err = check_mr_access(request.access))
        return err;
    if (keys_.mrs >= DeviceLimits::kMaxMr)
        return ENOMEM;
    if (int err = admit(kMrUsage))
        return err;
    // Past RLIMIT_MEMLOCK before the range is looked at, as ib_umem_get checks the pages
    // against it before it pins any: a huge range over many mappings costs nothing then.
    if (!on_demand(request.access) && request.length &&
        request.addr + request.length >= request.addr &&
        !fits_pinned(pinned_bytes(request.addr, request.length)))
        return ENOMEM;
    if (int err =
            check_mr_memory(*client_, request.addr, request.length, request.iova, request.access))
        return err;

    MemoryRegion mr;
    mr.pd_handle = request.pd_handle;
    mr.addr = request.addr;
    mr.length = request.length;
    mr.iova = request.iova;
    mr.access = request.access;
    if (!on_demand(mr.access)) {
        // Pinned memory counts against RLIMIT_MEMLOCK; on-demand memory is not pinned.
        if (int err = charge_pinned(pinned_bytes(mr.addr, mr.length)))
            return err;
        mr.pinned = pinned_bytes(mr.addr, mr.length);
        mr.mapping = SharedMapping::map(*client_, mr.addr, mr.length, mr_writable(mr.access));
    }
    out = add_mr(std::move(mr));
    return 0;
}

RegisteredMr ContextResources::add_mr(MemoryRegion mr) {
    // Its keys (lkey and rkey equal), a handle, and the counts of what it stands on.
    const uint32_t key = keys_.next_key();
    mr.lkey = mr.rkey = key;
    const uint32_t handle = next_handle_++;
    ++pds_.at(mr.pd_handle).mr_count;
    if (mr.dm_handle)
        ++dms_.at(mr.dm_handle).mr_count;
    mrs_by_key_[key] = &mrs_.emplace(handle, std::move(mr)).first->second;
    ++mr_generation_;
    ++keys_.mrs;
    charge(kMrUsage);
    return {handle, key, key};
}

int ContextResources::rereg_mr(const di::ReregMrRequest& request, RegisteredMr& out) {
    auto it = mrs_.find(request.mr_handle);
    if (it == mrs_.end() || !request.flags ||
        (request.flags & ~(di::kReregTranslation | di::kReregPd | di::kReregAccess)))
        return EINVAL;
    MemoryRegion& mr = it->second;
    if (mr.bound_windows)
        return EBUSY; // windows are bound to it
    if (mr.dm_handle)
        return EINVAL; // an MR on device memory is not re-registered (as the kernel's)
    // Everything is checked before anything changes: a failed rereg leaves the MR as
    // it was (ibv_rereg_mr(3) allows either, this is the kinder).
    MemoryRegion next = mr;
    if (request.flags & di::kReregPd) {
        if (!pds_.count(request.pd_handle))
            return EINVAL;
        next.pd_handle = request.pd_handle;
    }
    if (request.flags & di::kReregAccess) {
        if (int err = check_mr_access(request.access))
            return err;
        next.access = request.access;
    }
    if (request.flags & di::kReregTranslation) {
        next.addr = request.addr;
        next.length = request.length;
        next.iova = request.addr;
    }
    if (request.flags & (di::kReregTranslation | di::kReregAccess))
        if (int err = check_mr_memory(*client_, next.addr, next.length, next.iova, next.access))
            return err;
    if (request.flags & (di::kReregTranslation | di::kReregAccess)) {
        next.pinned = on_demand(next.access) ? 0 : pinned_bytes(next.addr, next.length);
        if (next.pinned > mr.pinned)
            if (int err = charge_pinned(next.pinned - mr.pinned))
                return err;
        uncharge_pinned(mr.pinned > next.pinned ? mr.pinned - next.pinned : 0);
        next.mapping = on_demand(next.access) ? nullptr
                                              : SharedMapping::map(*client_, next.addr, next.length,
                                                                   mr_writable(next.access));
    }
    if (next.pd_handle != mr.pd_handle) {
        --pds_.at(mr.pd_handle).mr_count;
        ++pds_.at(next.pd_handle).mr_count;
    }
    grants_.revoke(mr.grant_slot); // what was granted on it named the old region
    mr = next;                     // same keys, same place in mrs_by_key_
    ++mr_generation_;
    out = {request.mr_handle, mr.lkey, mr.rkey, mr.grant_slot};
    return 0;
}

int ContextResources::dereg_mr(uint32_t handle) {
    uint32_t grant_slot;
    return dereg_mr(handle, grant_slot);
}

int ContextResources::dereg_mr(uint32_t handle, uint32_t& grant_slot) {
    grant_slot = di::kNoGrantSlot;
    auto it = mrs_.find(handle);
    if (it == mrs_.end())
        return EINVAL;
    if (it->second.bound_windows)
        return EBUSY; // memory windows are bound to it (ibv_dereg_mr(3))
    --pds_.at(it->second.pd_handle).mr_count;
    if (it->second.dm_handle)
        --dms_.at(it->second.dm_handle).mr_count;
    uncharge_pinned(it->second.pinned);
    grant_slot = it->second.grant_slot;
    if (grant_slot != di::kNoGrantSlot)
        grants_.release(grant_slot);
    mrs_by_key_.erase(it->second.lkey);
    mrs_.erase(it);
    ++mr_generation_;
    --keys_.mrs;
    uncharge(kMrUsage);
    return 0;
}

int ContextResources::alloc_dm(uint64_t length, uint32_t log_align_req, uint32_t& handle,
                               const DeviceMemory*& dm) {
    if (length == 0 || length > di::kDeviceMemoryBytes || log_align_req > di::kMaxDmLogAlign)
        return EINVAL; // the memfd is page-aligned: any alignment up to a page holds
    uint64_t& used = keys_.dm_bytes_by_device[device_];
    if (used + length > di::kDeviceMemoryPoolBytes)
        return ENOMEM;
    const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    if (int err = admit({.dm_bytes = length, .bytes = (length + page - 1) / page * page}))
        return err;
    DeviceMemory memory;
    if (int err = memory.memory.create("softhca-dm", (length + page - 1) / page * page))
        return err;
    memory.length = length;
    used += length;
    handle = next_handle_++;
    dm = &dms_.emplace(handle, std::move(memory)).first->second;
    charge(dm_usage(*dm));
    return 0;
}

int ContextResources::free_dm(uint32_t handle) {
    auto it = dms_.find(handle);
    if (it == dms_.end())
        return EINVAL;
    if (it->second.mr_count)
        return EBUSY; // MRs are registered on it (ibv_free_dm(3))
    keys_.dm_bytes_by_device[device_] -= it->second.length;
    uncharge(dm_usage(it->second));
    dms_.erase(it);
    return 0;
}

int ContextResources::reg_dm_mr(const di::RegDmMrRequest& request, RegisteredMr& out) {
    auto pd = pds_.find(request.pd_handle);
    auto dm = dms_.find(request.dm_handle);
    if (pd == pds_.end() || dm == dms_.end())
        return EINVAL;
    // Zero-based always (the kernel's ib_uverbs_reg_dm_mr requires it); the rights of
    // any MR, and nothing else.
    constexpr uint32_t kAllowed = di::kAccessLocalWrite | di::kAccessRemoteWrite |
                                  di::kAccessRemoteRead | di::kAccessRemoteAtomic |
                                  di::kAccessZeroBased;
    if (!(request.access & di::kAccessZeroBased) || (request.access & ~kAllowed))
        return EINVAL;
    if (int err = check_mr_access(request.access & ~di::kAccessZeroBased))
        return err;
    if (request.offset > dm->second.length || request.length > dm->second.length - request.offset)
        return EINVAL;
    if (keys_.mrs >= DeviceLimits::kMaxMr)
        return ENOMEM;
    if (int err = admit(kMrUsage))
        return err;
    MemoryRegion mr;
    mr.pd_handle = request.pd_handle;
    mr.dm_handle = request.dm_handle;
    mr.addr = 0; // the process's address does not matter: the engine reaches it itself
    mr.length = request.length;
    mr.iova = 0;
    mr.access = request.access;
    const int shared = dm->second.memory.share();
    mr.mapping = shared >= 0 ? SharedMapping::map_file(shared, request.offset, request.length, true)
                             : nullptr;
    if (shared >= 0)
        ::close(shared);
    if (!mr.mapping)
        return ENOMEM;
    out = add_mr(std::move(mr));
    return 0;
}

int ContextResources::create_cq(uint32_t cqe, uint32_t comp_vector, uint64_t user_handle,
                                CompletionChannel channel, uint32_t& handle,
                                const CompletionQueue*& cq, bool timestamps) {
    const uint32_t slots = cq_slots_for(cqe);
    if (!slots || comp_vector >= DeviceLimits::kNumCompVectors)
        return EINVAL;
    if (keys_.cqs >= DeviceLimits::kMaxCq)
        return ENOMEM;
    CompletionQueue queue;
    if (int err = queue.ring.create(slots))
        return err;
    if (int err = admit({.cqs = 1, .bytes = queue.ring.bytes()}))
        return err;
    queue.user_handle = user_handle;
    queue.cqe = slots - 1;
    queue.comp_vector = comp_vector;
    queue.channel = std::move(channel);
    queue.timestamps = timestamps;
    handle = next_handle_++;
    cq = &cqs_.emplace(handle, std::move(queue)).first->second;
    ++keys_.cqs;
    charge(cq_usage(*cq));
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
    if (ring.bytes() > it->second.ring.bytes())
        if (int err = admit({.bytes = ring.bytes() - it->second.ring.bytes()}))
            return err;
    it->second.ring.move_pending_to(ring);
    uncharge(cq_usage(it->second));
    it->second.ring = std::move(ring);
    charge(cq_usage(it->second));
    it->second.cqe = slots - 1;
    cq = &it->second;
    return 0;
}

int ContextResources::destroy_cq(uint32_t handle) {
    auto it = cqs_.find(handle);
    if (it == cqs_.end())
        return EINVAL;
    if (it->second.qp_count)
        return EBUSY; // a QP still completes into it
    uncharge(cq_usage(it->second));
    cqs_.erase(it);
    --keys_.cqs;
    return 0;
}

void ContextResources::raise_event(uint64_t element, uint32_t event_type) const {
    if (async_fd_ < 0)
        return;
    const di::AsyncEventRecord record{element, event_type, 0};
    // Non-blocking: a process that never reads its events cannot stall the card; one
    // whose reader holds the pipe's lock on a FUSE page is the stall watch's.
    const StallWatch::Touch touch(client_->stall_owner());
    [[maybe_unused]] ssize_t n = ::write(async_fd_, &record, sizeof(record));
}

void ContextResources::raise_qp_event(const EngineQp& qp, uint64_t creator_handle,
                                      uint32_t event_type) const {
    raise_event(creator_handle, event_type);
    auto [first, last] = keys_.opened_qps.equal_range(&qp);
    for (auto o = first; o != last; ++o) {
        const ContextResources& opener = *o->second.first;
        if (auto it = opener.opened_.find(o->second.second); it != opener.opened_.end())
            opener.raise_event(it->second.user_handle, event_type);
    }
}

const MemoryRegion* ContextResources::find_mr_by_key(uint32_t key) const {
    auto it = mrs_by_key_.find(key);
    return it == mrs_by_key_.end() ? nullptr : it->second;
}

EngineQp* ContextResources::find_qp(uint32_t handle) {
    if (auto opened = opened_.find(handle); opened != opened_.end())
        return opened->second.qp;
    auto it = qps_.find(handle);
    return it == qps_.end() ? nullptr : it->second.get();
}

int ContextResources::create_qp(const di::CreateQpRequest& request, const PortInfo& port,
                                EngineQp*& qp) {
    using transport::QpType;
    const auto type = static_cast<QpType>(request.qp_type);
    if (type != QpType::RC && type != QpType::UC && type != QpType::UD && type != QpType::XrcSend &&
        type != QpType::XrcRecv)
        return EOPNOTSUPP; // raw packet and driver QPs
    // What each type has (ibv_create_qp_ex(3)): an XRC initiator only sends; an XRC
    // target has no PD, CQs or queues, it receives into the SRQs of its XRC domain.
    const bool sends = type != QpType::XrcRecv;
    const bool receives = type != QpType::XrcSend && type != QpType::XrcRecv;
    QpBinding binding;
    ProtectionDomain* pd = nullptr;
    if (sends) {
        auto found_pd = pds_.find(request.pd_handle);
        auto send_cq = cqs_.find(request.send_cq_handle);
        if (found_pd == pds_.end() || send_cq == cqs_.end())
            return EINVAL;
        pd = &found_pd->second;
        binding.pd_handle = request.pd_handle;
        binding.send_cq = &send_cq->second;
    }
    if (receives) {
        auto recv_cq = cqs_.find(request.recv_cq_handle);
        if (recv_cq == cqs_.end())
            return EINVAL;
        binding.recv_cq = &recv_cq->second;
        if (request.srq_handle) {
            binding.srq = find_srq(request.srq_handle);
            if (!binding.srq || binding.srq->xrc_cq())
                return EINVAL; // no such SRQ, or an XRC SRQ (only XRC targets use those)
        }
    } else if (request.srq_handle) {
        return EINVAL;
    }
    XrcdHandle* xrcd = nullptr;
    if (type == QpType::XrcRecv) {
        auto found = xrcds_.find(request.xrcd_handle);
        if (found == xrcds_.end())
            return EINVAL;
        xrcd = &found->second;
        binding.xrcd_handle = request.xrcd_handle;
        binding.xrc_domain = xrcd->domain;
    }
    const di::QpCaps& asked = request.caps;
    // With an SRQ the receive queue sizes are ignored (ibv_create_qp(3)). A queue asked
    // for with 0 work requests (a QP that only sends, or only receives) gets the least
    // there is, one, reported back in the caps, as kernel drivers accept and round it.
    const bool send_ok = !sends || (asked.max_send_wr <= QpLimits::kMaxQpWr &&
                                    asked.max_send_sge <= QpLimits::kMaxSge &&
                                    asked.max_inline_data <= QpLimits::kMaxInline);
    const bool recv_ok =
        !receives || binding.srq ||
        (asked.max_recv_wr <= QpLimits::kMaxQpWr && asked.max_recv_sge <= QpLimits::kMaxSge);
    if (!send_ok || !recv_ok)
        return EINVAL;
    if (keys_.qps >= QpLimits::kMaxQp)
        return ENOMEM;
    di::QpCaps caps{};
    if (sends) {
        caps.max_send_wr = std::bit_ceil(std::max<uint32_t>(asked.max_send_wr, 1));
        caps.max_send_sge = std::max<uint32_t>(asked.max_send_sge, 1);
        // Inline data shares the slot with the SGEs: report all the room there is.
        caps.max_inline_data =
            std::max<uint32_t>(asked.max_inline_data,
                               std::min<uint32_t>(QpLimits::kMaxInline, caps.max_send_sge * 16));
    }
    if (receives && !binding.srq) {
        caps.max_recv_wr = std::bit_ceil(std::max<uint32_t>(asked.max_recv_wr, 1));
        caps.max_recv_sge = std::max<uint32_t>(asked.max_recv_sge, 1);
    }
    const uint32_t handle = next_handle_++;
    const uint32_t qpn = keys_.next_qp_num();
    auto created = std::make_unique<EngineQp>(handle, qpn, type, device_, *this, binding, caps,
                                              request.sq_sig_all != 0, request.user_handle, port);
    const uint32_t slot = doorbells_.assign(created.get());
    int err = created->create_ring(slot);
    if (!err)
        err = admit({.qps = 1, .bytes = created->engine_bytes()});
    if (err) {
        doorbells_.release(slot);
        return err;
    }
    qp = created.get();
    qps_.emplace(handle, std::move(created));
    keys_.qps_by_device[device_][qpn] = qp;
    keys_.qp_numbers_by_device[device_].insert(qpn, qp);
    if (pd)
        ++pd->qp_count;
    if (binding.send_cq)
        ++binding.send_cq->qp_count;
    if (binding.recv_cq)
        ++binding.recv_cq->qp_count;
    if (binding.srq)
        ++binding.srq->qp_count;
    if (xrcd)
        ++xrcd->users;
    ++keys_.qps;
    charge({.qps = 1, .bytes = qp->engine_bytes()});
    return 0;
}

int ContextResources::destroy_qp(uint32_t handle) {
    if (opened_.count(handle)) {
        close_opened(handle);
        return 0;
    }
    auto it = qps_.find(handle);
    if (it == qps_.end())
        return EINVAL;
    if (keys_.opened_qps.count(it->second.get()))
        return EBUSY; // other contexts still hold it open
    destroy_owned_qp(it);
    return 0;
}

void ContextResources::destroy_owned_qp(
    std::map<uint32_t, std::unique_ptr<EngineQp>>::iterator it) {
    EngineQp& qp = *it->second;
    // Handles others opened go with it.
    auto [first, last] = keys_.opened_qps.equal_range(&qp);
    std::vector<std::pair<ContextResources*, uint32_t>> openers;
    for (auto o = first; o != last; ++o)
        openers.push_back(o->second);
    for (auto [context, opened] : openers)
        context->close_opened(opened);
    const QpBinding& b = qp.binding();
    keys_.retired_qp_counters_by_device[device_] += qp.transport().counters();
    keys_.qp_counter_sets.qp_destroyed(device_, qp.qp_num(), qp.transport().counters());
    keys_.qps_by_device[device_].erase(qp.qp_num());
    keys_.qp_numbers_by_device[device_].erase(qp.qp_num());
    if (b.pd_handle)
        --pds_.at(b.pd_handle).qp_count;
    if (b.send_cq)
        --b.send_cq->qp_count;
    if (b.recv_cq)
        --b.recv_cq->qp_count;
    if (b.srq)
        --b.srq->qp_count;
    if (b.xrcd_handle)
        --xrcds_.at(b.xrcd_handle).users;
    const uint64_t detached =
        std::min(attachments_, keys_.mcast_by_device[device_].detach_all(&qp));
    attachments_ -= detached;
    uncharge({.qps = 1, .attachments = detached, .bytes = qp.engine_bytes()});
    doorbells_.release(qp.doorbell_slot());
    qps_.erase(it);
    --keys_.qps;
}

int ContextResources::open_qp(uint32_t qp_num, uint32_t xrcd_handle, uint64_t user_handle,
                              uint32_t& handle, EngineQp*& qp) {
    auto xrcd = xrcds_.find(xrcd_handle);
    if (xrcd == xrcds_.end())
        return EINVAL;
    const auto& qps = keys_.qps_by_device[device_];
    auto target = qps.find(qp_num);
    // ibv_open_qp(3): an XRC target QP of the same XRC domain.
    if (target == qps.end() || target->second->type() != transport::QpType::XrcRecv ||
        target->second->binding().xrc_domain != xrcd->second.domain)
        return EINVAL;
    qp = target->second;
    handle = next_handle_++;
    opened_[handle] = {qp, xrcd_handle, user_handle};
    ++xrcd->second.users;
    keys_.opened_qps.emplace(qp, std::make_pair(this, handle));
    return 0;
}

void ContextResources::close_opened(uint32_t handle) {
    auto it = opened_.find(handle);
    if (it == opened_.end())
        return;
    auto [first, last] = keys_.opened_qps.equal_range(it->second.qp);
    for (auto o = first; o != last; ++o) {
        if (o->second.first == this && o->second.second == handle) {
            keys_.opened_qps.erase(o);
            break;
        }
    }
    --xrcds_.at(it->second.xrcd_handle).users;
    opened_.erase(it);
}

} // namespace softhca::engine
