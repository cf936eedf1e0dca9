#include "cq_ring_owner.hpp"

#include <new>

namespace softhca::engine {

namespace di = device_interface;

int CqRingOwner::create(uint32_t slots) {
    if (int err = memory_.create("softhca-cq", di::cq_ring_bytes(slots)))
        return err;
    header_ = new (memory_.data()) di::CqRingHeader{};
    header_->magic = di::kCqRingMagic;
    header_->version = di::kCqRingVersion;
    header_->slots = slots;
    slots_ = slots;
    header_->entry_size = sizeof(di::CompletionEntry);
    return 0;
}

uint64_t CqRingOwner::pending() const {
    if (!header_)
        return 0;
    return header_->producer.load(std::memory_order_acquire) -
           header_->consumer.load(std::memory_order_acquire);
}

void CqRingOwner::move_pending_to(CqRingOwner& target) {
    const uint64_t consumer = header_->consumer.load(std::memory_order_acquire);
    const uint64_t producer = header_->producer.load(std::memory_order_acquire);
    const di::CompletionEntry* from = di::cq_ring_entries(header_);
    // At most one ring's worth, whatever the (shared, writable) indices claim.
    for (uint64_t i = consumer, n = 0; i != producer && n < slots_; ++i, ++n)
        target.push(from[i & (slots_ - 1)]);
    target.header_->notify.store(header_->notify.load(std::memory_order_acquire),
                                 std::memory_order_release);
    target.header_->events.store(header_->events.load(std::memory_order_acquire),
                                 std::memory_order_release);
}

bool CqRingOwner::push(const di::CompletionEntry& entry) {
    const uint64_t producer = header_->producer.load(std::memory_order_relaxed);
    if (producer - header_->consumer.load(std::memory_order_acquire) >= slots_) {
        header_->overrun.store(1, std::memory_order_release);
        return false;
    }
    di::cq_ring_entries(header_)[producer & (slots_ - 1)] = entry;
    header_->producer.store(producer + 1, std::memory_order_release);
    return true;
}

bool CqRingOwner::take_notification(bool solicited_or_error) {
    // The provider arms and then polls; the engine publishes and then reads the arm. The
    // fence (paired with one in the provider) means one of the two sees the other's
    // write, so a completion is either polled after the arm or raises the event.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    uint32_t armed = header_->notify.load(std::memory_order_relaxed);
    if (armed == di::kNotifyNone || (armed == di::kNotifySolicited && !solicited_or_error))
        return false;
    // The provider may re-arm in between: whichever value is there now is consumed.
    while (!header_->notify.compare_exchange_weak(armed, di::kNotifyNone)) {
        if (armed == di::kNotifyNone || (armed == di::kNotifySolicited && !solicited_or_error))
            return false;
    }
    return true;
}

} // namespace softhca::engine
