#include "doorbells.hpp"

#include <new>
#include <system_error>

namespace softhca::engine {

namespace di = device_interface;

Doorbells::Doorbells() {
    if (int err = memory_.create("softhca-doorbells", sizeof(di::DoorbellPage)))
        throw std::system_error(err, std::generic_category(), "doorbell page");
    page_ = new (memory_.data()) di::DoorbellPage{};
    page_->magic = di::kDoorbellPageMagic;
    page_->version = di::kDoorbellPageVersion;
    page_->slots = di::kDoorbellSlots;
}

uint32_t Doorbells::assign(Target target) {
    if (!free_.empty()) {
        const uint32_t slot = free_.back();
        free_.pop_back();
        targets_[slot] = target;
        return slot;
    }
    if (targets_.size() >= di::kDoorbellSlots)
        return di::kNoDoorbellSlot;
    targets_.push_back(target);
    return static_cast<uint32_t>(targets_.size() - 1);
}

void Doorbells::release(uint32_t slot) {
    if (slot >= targets_.size())
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
