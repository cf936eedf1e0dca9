#include "doorbells.hpp"

#include <new>
#include <sys/epoll.h>
#include <system_error>
#include <unistd.h>

namespace softhca::engine {

namespace di = device_interface;

void drain_doorbell_pipes(int pipes) {
    epoll_event ready[64];
    const int n = ::epoll_wait(pipes, ready, 64, 0);
    for (int i = 0; i < n; ++i) {
        uint8_t bytes[512];
        // Non-blocking, and a description only the engine holds: a client that fills
        // its own pipe costs the engine one read of it per wake-up.
        [[maybe_unused]] ssize_t r = ::read(ready[i].data.fd, bytes, sizeof(bytes));
    }
}

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
