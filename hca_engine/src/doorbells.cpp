#include "doorbells.hpp"

#include <new>
#include <system_error>

namespace softhca::engine {

namespace di = device_interface;

Doorbells::Doorbells() : targets_(di::kDoorbellSlots, Target{nullptr, nullptr}) {
    if (int err = memory_.create("softhca-doorbells", sizeof(di::DoorbellPage)))
        throw std::system_error(err, std::generic_category(), "doorbell page");
    page_ = new (memory_.data()) di::DoorbellPage{};
    page_->magic = di::kDoorbellPageMagic;
    page_->version = di::kDoorbellPageVersion;
    page_->slots = di::kDoorbellSlots;
    free_.reserve(di::kDoorbellSlots);
    for (uint32_t slot = di::kDoorbellSlots; slot-- > 0;)
        free_.push_back(slot);
}

uint32_t Doorbells::assign(Target target) {
    if (free_.empty())
        return di::kNoDoorbellSlot;
    const uint32_t slot = free_.back();
    free_.pop_back();
    targets_[slot] = target;
    return slot;
}

void Doorbells::release(uint32_t slot) {
    if (slot >= di::kDoorbellSlots)
        return;
    targets_[slot] = {nullptr, nullptr};
    free_.push_back(slot);
}

bool Doorbells::any_rung() const {
    for (const auto& summary : page_->summary)
        if (summary.load() != 0)
            return true;
    return false;
}

} // namespace softhca::engine
