// Memory windows (IBTA 10.6.7; ibv_alloc_mw(3), ibv_bind_mw(3)): allocated by the
// control path, bound and invalidated by work requests of the data path (through the
// QP's ProcessMemory), looked up by rkey when a remote request names one.
#include "device_model.hpp"
#include "resource_tables.hpp"

#include <cerrno>

namespace softhca::engine {

namespace di = device_interface;

int ContextResources::alloc_mw(uint32_t pd_handle, uint32_t type, uint32_t& handle,
                               uint32_t& rkey) {
    auto pd = pds_.find(pd_handle);
    if (pd == pds_.end() || (type != 1 && type != 2))
        return EINVAL;
    if (keys_.mws >= DeviceLimits::kMaxMw)
        return ENOMEM;
    if (int err = admit({.mws = 1}))
        return err;
    MemoryWindow mw;
    mw.pd_handle = pd_handle;
    mw.type = type;
    mw.rkey = keys_.next_key(); // free: the key grants nothing until bound
    handle = next_handle_++;
    MemoryWindow& stored = mws_.emplace(handle, mw).first->second;
    mws_by_index_[mw.rkey >> 8] = &stored;
    ++pd->second.mw_count;
    ++keys_.mws;
    charge({.mws = 1});
    rkey = mw.rkey;
    return 0;
}

int ContextResources::dealloc_mw(uint32_t handle) {
    auto it = mws_.find(handle);
    if (it == mws_.end())
        return EINVAL;
    MemoryWindow& mw = it->second;
    if (mw.bound)
        if (auto mr = mrs_by_key_.find(mw.mr_lkey); mr != mrs_by_key_.end())
            --mr->second->bound_windows;
    --pds_.at(mw.pd_handle).mw_count;
    mws_by_index_.erase(mw.rkey >> 8);
    mws_.erase(it);
    --keys_.mws;
    uncharge({.mws = 1});
    ++mr_generation_; // what was read ahead through it is stale (process_memory.hpp)
    return 0;
}

int ContextResources::bind_mw(const transport::WindowBind& bind, uint32_t pd_handle,
                              uint32_t qp_num) {
    auto it = mws_.find(bind.mw_handle);
    if (it == mws_.end())
        return EINVAL;
    MemoryWindow& mw = it->second;
    // The window and the QP share a PD, and a bind keeps the window's index: only the
    // low 8 bits of the rkey are the consumer's (10.6.7.3, ibv_inc_rkey(3)).
    if (mw.pd_handle != pd_handle || (bind.new_rkey >> 8) != (mw.rkey >> 8))
        return EINVAL;
    // A type 2 window is bound once, then invalidated before it is bound again
    // (10.6.7.2.2); a type 1 window may be rebound at any time.
    if (mw.type == 2 && mw.bound)
        return EINVAL;
    // A window grants remote rights only; local write among its flags (rdma-core's tests
    // pass it) means nothing and is ignored, as rxe and mlx5 ignore it. Zero-based
    // windows are not supported.
    constexpr uint32_t kWindowAccess =
        di::kAccessRemoteWrite | di::kAccessRemoteRead | di::kAccessRemoteAtomic;
    if (bind.access & ~(kWindowAccess | di::kAccessLocalWrite))
        return EINVAL;
    MemoryRegion* mr = nullptr;
    if (bind.length || mw.type == 2) {
        auto found = mrs_by_key_.find(bind.mr_lkey);
        if (found == mrs_by_key_.end())
            return EINVAL;
        mr = found->second;
        // The MR: same PD, registered with MW_BIND, covering the window, and writable
        // locally when the window grants remote writes or atomics (ibv_bind_mw(3)).
        if (mr->pd_handle != pd_handle || !(mr->access & di::kAccessMwBind) ||
            bind.addr < mr->iova || bind.addr + bind.length < bind.addr ||
            bind.addr + bind.length > mr->iova + mr->length)
            return EINVAL;
        if ((bind.access & (di::kAccessRemoteWrite | di::kAccessRemoteAtomic)) &&
            !(mr->access & di::kAccessLocalWrite))
            return EINVAL;
    }
    if (mw.bound)
        if (auto old = mrs_by_key_.find(mw.mr_lkey); old != mrs_by_key_.end())
            --old->second->bound_windows;
    mw.rkey = bind.new_rkey;
    // A type 1 bind of length zero unbinds the window (ibv_bind_mw(3)).
    mw.bound = mr != nullptr;
    mw.mr_lkey = mr ? mr->lkey : 0;
    mw.addr = bind.addr;
    mw.length = bind.length;
    mw.access = bind.access & kWindowAccess;
    mw.qp_num = mw.type == 2 ? qp_num : 0;
    if (mr)
        ++mr->bound_windows;
    ++mr_generation_;
    return 0;
}

int ContextResources::invalidate_mw(uint32_t rkey, uint32_t pd_handle, uint32_t qp_num,
                                    bool remote) {
    auto it = mws_by_index_.find(rkey >> 8);
    if (it == mws_by_index_.end())
        return EINVAL;
    MemoryWindow& mw = *it->second;
    // Only a bound type 2 window of this PD is invalidated, and a SEND with Invalidate
    // only from the QP the window was bound on (10.6.7.2.2).
    if (mw.rkey != rkey || mw.type != 2 || !mw.bound || mw.pd_handle != pd_handle ||
        (remote && mw.qp_num != qp_num))
        return EINVAL;
    if (auto mr = mrs_by_key_.find(mw.mr_lkey); mr != mrs_by_key_.end())
        --mr->second->bound_windows;
    mw.bound = false;
    ++mr_generation_;
    return 0;
}

const MemoryWindow* ContextResources::find_window(uint32_t rkey) const {
    auto it = mws_by_index_.find(rkey >> 8);
    if (it == mws_by_index_.end() || it->second->rkey != rkey || !it->second->bound)
        return nullptr;
    return it->second;
}

} // namespace softhca::engine
