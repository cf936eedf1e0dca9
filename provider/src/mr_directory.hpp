// The memory regions this context registered, by lkey, as the application sees them
// (virtual address and length). The send path asks it whether a small send's SGEs lie
// inside regions registered here before it copies their bytes into the work request
// at post time (qp.cpp): only memory that was mapped and registered is touched, so a
// bad lkey or an address outside its region is never read here and reaches the engine,
// which reports it as a real HCA does (LOC_PROT_ERR).
#pragma once

#include <cstdint>
#include <shared_mutex>
#include <unordered_map>

namespace softhca::provider {

class MrDirectory {
  public:
    // `iova` is the address work requests name the region by; `addr` where it lies here.
    // An on-demand-paging region may cover memory that is not mapped (implicit ODP: all
    // of it): locate never names it, locate_on_demand only it.
    // `local_write`: it was registered with
    // IBV_ACCESS_LOCAL_WRITE (an RDMA READ may land in it); `pd` the engine's handle of
    // its PD.
    void add(uint32_t lkey, uint64_t iova, uint64_t addr, uint64_t length, bool on_demand = false,
             bool local_write = false, uint32_t pd = 0);
    void remove(uint32_t lkey);
    // Where [iova, iova + length) of region `lkey` lies in this process, or nullptr
    // when `lkey` is not a region registered here or the range is not inside it.
    // `local_write`, if asked, tells whether it may be written, `pd` its PD.
    const void* locate(uint32_t lkey, uint64_t iova, uint32_t length, bool* local_write = nullptr,
                       uint32_t* pd = nullptr) const;
    // ibv_advise_mr: 0 and where [iova, iova + length) of on-demand region `lkey` lies,
    // EINVAL when `lkey` is no on-demand region of this context, EFAULT when the range
    // is not inside it.
    int locate_on_demand(uint32_t lkey, uint64_t iova, uint64_t length, uint64_t& addr) const;

  private:
    struct Region {
        uint64_t iova;
        uint64_t addr;
        uint64_t length;
        bool on_demand;
        bool local_write;
        uint32_t pd;
    };
    mutable std::shared_mutex lock_;
    std::unordered_map<uint32_t, Region> regions_;
};

} // namespace softhca::provider
