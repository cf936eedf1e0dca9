#include "grant_page.hpp"

namespace softhca::engine {

namespace di = device_interface;

di::GrantWord* GrantPage::word(uint32_t slot) const {
    return static_cast<di::GrantWord*>(memory_.data()) + slot;
}

uint32_t GrantPage::allocate() {
    if (!memory_.data()) {
        if (memory_.create("softhca-grants", di::kGrantPageBytes) != 0)
            return di::kNoGrantSlot;
        in_use_.assign(di::kGrantSlots, false);
        static uint64_t next_id = 1; // the control path makes pages, one at a time
        id_ = next_id++;
    }
    uint32_t slot = di::kNoGrantSlot;
    if (!free_.empty()) {
        slot = free_.back();
        free_.pop_back();
    } else if (next_ < di::kGrantSlots) {
        slot = next_++;
    }
    if (slot != di::kNoGrantSlot)
        in_use_[slot] = true;
    return slot;
}

void GrantPage::revoke(uint32_t slot) {
    if (slot < next_)
        word(slot)->fetch_add(di::kGrantGenerationOne, std::memory_order_seq_cst);
}

void GrantPage::release(uint32_t slot) {
    if (slot >= next_ || !in_use_[slot])
        return;
    revoke(slot);
    in_use_[slot] = false;
    // A count of copies left in it (a requester that died mid-copy, or one lying) would
    // hold up every later deregistration of the slot: such a slot is not used again.
    if ((word(slot)->load(std::memory_order_seq_cst) & di::kGrantCopiesMask) == 0)
        free_.push_back(slot);
}

void GrantPage::revoke_all() {
    for (uint32_t slot = 0; slot < next_; ++slot)
        if (in_use_[slot])
            revoke(slot);
}

uint32_t GrantPage::generation(uint32_t slot) const {
    return slot < next_ ? di::grant_generation(word(slot)->load(std::memory_order_seq_cst)) : 0;
}

} // namespace softhca::engine
