#include "mr_directory.hpp"

#include <cerrno>
#include <mutex>

namespace softhca::provider {

void MrDirectory::add(uint32_t lkey, uint64_t iova, uint64_t addr, uint64_t length, bool on_demand,
                      bool local_write, uint32_t pd) {
    std::unique_lock lock(lock_);
    regions_[lkey] = {iova, addr, length, on_demand, local_write, pd};
}

void MrDirectory::remove(uint32_t lkey) {
    std::unique_lock lock(lock_);
    regions_.erase(lkey);
}

const void* MrDirectory::locate(uint32_t lkey, uint64_t iova, uint32_t length, bool* local_write,
                                uint32_t* pd) const {
    std::shared_lock lock(lock_);
    auto it = regions_.find(lkey);
    if (it == regions_.end() || it->second.on_demand)
        return nullptr;
    const Region& r = it->second;
    if (iova < r.iova || iova - r.iova > r.length || r.length - (iova - r.iova) < length)
        return nullptr;
    if (local_write)
        *local_write = r.local_write;
    if (pd)
        *pd = r.pd;
    return reinterpret_cast<const void*>(r.addr + (iova - r.iova));
}

int MrDirectory::locate_on_demand(uint32_t lkey, uint64_t iova, uint64_t length,
                                  uint64_t& addr) const {
    std::shared_lock lock(lock_);
    auto it = regions_.find(lkey);
    if (it == regions_.end() || !it->second.on_demand)
        return EINVAL;
    const Region& r = it->second;
    if (iova < r.iova || iova - r.iova > r.length || r.length - (iova - r.iova) < length)
        return EFAULT;
    addr = r.addr + (iova - r.iova);
    return 0;
}

} // namespace softhca::provider
