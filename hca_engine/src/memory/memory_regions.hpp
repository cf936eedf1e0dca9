// Memory regions and memory windows as the data path reaches them: what one key names
// (IBTA 10.6), and the lookup of one context's keys. The control room's resource tables
// (control/resource_tables.hpp) register and deregister them and implement MemoryKeys;
// the memory room (process_memory.hpp) checks every access against them.
#pragma once

#include "client_process.hpp"
#include "shared_mapping.hpp"
#include "softhca/transport/memory_access.hpp"
#include "softhca/transport/work_requests.hpp"

#include <cstdint>
#include <memory>

namespace softhca::engine {

struct MemoryRegion {
    uint32_t pd_handle = 0;
    uint64_t addr = 0;
    uint64_t length = 0;
    uint64_t iova = 0;
    uint32_t access = 0;
    uint32_t lkey = 0;
    uint32_t rkey = 0;
    uint32_t bound_windows = 0; // deregistering is EBUSY while windows are bound to it
    uint32_t dm_handle = 0;     // on device memory (ibv_reg_dm_mr), or 0
    uint64_t pinned = 0;        // bytes charged to the process's RLIMIT_MEMLOCK
    // Its word in its context's grant page once a grant named it (grant_page.hpp).
    uint32_t grant_slot = UINT32_MAX;
    // Shared memory mapped into the engine (shared_mapping.hpp), or none: reached with
    // cross-memory attach.
    std::shared_ptr<SharedMapping> mapping;
    uint8_t* local(uint64_t at_iova) const {
        return mapping ? mapping->local() + (at_iova - iova) : nullptr;
    }
};

// A memory window (10.6.7, ibv_alloc_mw(3)): an rkey onto part of an MR, bound and
// invalidated by work requests. Its index (the rkey's upper 24 bits) stays; each bind
// gives it a new rkey.
struct MemoryWindow {
    uint32_t pd_handle = 0;
    uint32_t type = 1; // 1 or 2
    uint32_t rkey = 0;
    bool bound = false;
    uint32_t mr_lkey = 0;
    uint64_t addr = 0;
    uint64_t length = 0;
    uint32_t access = 0;
    uint32_t qp_num = 0; // type 2: the QP it was bound on, the only one it serves
};

// One context's keys: its MRs and windows, and the process whose memory they name.
class MemoryKeys {
  public:
    // The process the context was opened by (client_process.hpp).
    virtual const ClientProcess& client() const = 0;
    // The MR whose lkey or rkey is `key`; nullptr if none.
    virtual const MemoryRegion* find_mr_by_key(uint32_t key) const = 0;
    // The bound window whose current rkey is `rkey`; nullptr if none.
    virtual const MemoryWindow* find_window(uint32_t rkey) const = 0;
    // A BIND_MW work request of the QP `qp_num` in PD `pd_handle`; 0 or an errno.
    virtual int bind_mw(const transport::WindowBind& bind, uint32_t pd_handle, uint32_t qp_num) = 0;
    // LOCAL_INV (remote false) or SEND with Invalidate (remote true) of `rkey`.
    virtual int invalidate_mw(uint32_t rkey, uint32_t pd_handle, uint32_t qp_num, bool remote) = 0;
    // Changes whenever an MR is registered, re-registered or deregistered: a pointer
    // find_mr_by_key gave stays good while this does not change. Not virtual: the data
    // path asks it on every access.
    uint64_t mr_generation() const { return mr_generation_; }

  protected:
    MemoryKeys() = default;
    ~MemoryKeys() = default;
    MemoryKeys(const MemoryKeys&) = delete;
    MemoryKeys& operator=(const MemoryKeys&) = delete;
    uint64_t mr_generation_ = 0;
};

} // namespace softhca::engine
