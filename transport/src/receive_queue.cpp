#include "softhca/transport/receive_queue.hpp"

#include <algorithm>

namespace softhca::transport {

ReceiveQueue::ReceiveQueue(uint32_t depth, MemoryAccess& memory)
    : ring_(std::max<uint32_t>(depth, 1)), memory_(memory) {}

bool ReceiveQueue::post(const RecvWqe& wqe) {
    if (size() >= ring_.size())
        return false;
    ring_[tail_++ % ring_.size()] = wqe;
    return true;
}

RecvWqe* ReceiveQueue::prepare_post() {
    if (size() >= ring_.size())
        return nullptr;
    RecvWqe& slot = ring_[tail_ % ring_.size()];
    slot.wr_id = 0;
    slot.num_sge = 0;
    slot.length = 0;
    return &slot;
}

void ReceiveQueue::pop() {
    if (empty())
        return;
    ++head_;
    if (limit_ && size() < limit_) {
        // ibv_modify_srq(3): the limit event is one-shot; the application re-arms it.
        limit_ = 0;
        limit_fired_ = true;
    }
}

bool ReceiveQueue::resize(uint32_t depth) {
    depth = std::max<uint32_t>(depth, 1);
    if (depth < size())
        return false;
    std::vector<RecvWqe> ring(depth);
    for (uint64_t i = head_; i != tail_; ++i)
        ring[(i - head_) % depth] = ring_[i % ring_.size()];
    tail_ -= head_;
    head_ = 0;
    ring_ = std::move(ring);
    return true;
}

bool ReceiveQueue::take_limit_event() {
    const bool fired = limit_fired_;
    limit_fired_ = false;
    return fired;
}

} // namespace softhca::transport
