#include "engine_srq.hpp"

#include "completion_queue.hpp"
#include "queue_context.hpp"
#include "softhca/device_interface/async_event.hpp"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <new>

namespace softhca::engine {

namespace di = device_interface;
namespace tp = transport;

EngineSrq::EngineSrq(uint32_t handle, uint32_t srq_num, QueueContext& context, uint32_t pd_handle,
                     uint32_t max_wr, uint32_t max_sge, uint64_t user_handle, const Xrc& xrc)
    : handle_(handle), srq_num_(srq_num), pd_handle_(pd_handle), max_wr_(max_wr), max_sge_(max_sge),
      user_handle_(user_handle), xrc_(xrc), context_(context), memory_(context, pd_handle),
      queue_(max_wr, memory_) {}

namespace {
// A receive slot of the ring: the header and `max_sge` SGEs, in cache lines.
uint32_t slot_bytes(uint32_t max_sge) {
    return (sizeof(di::RecvWqeHeader) + max_sge * sizeof(di::WireSge) + 63) / 64 * 64;
}
} // namespace

uint64_t EngineSrq::engine_bytes_at(uint32_t max_wr) const {
    return sizeof(di::QpRingHeader) + uint64_t{slot_bytes(max_sge_)} * max_wr +
           uint64_t{max_wr} * sizeof(tp::RecvWqe);
}

int EngineSrq::create_ring(uint32_t doorbell_slot) {
    SharedMemory memory;
    const uint32_t slot = slot_bytes(max_sge_);
    const uint64_t offset = sizeof(di::QpRingHeader);
    if (int err = memory.create("softhca-srq", offset + uint64_t{slot} * max_wr_))
        return err;
    auto* ring = new (memory.data()) di::QpRingHeader{};
    ring->magic = di::kQpRingMagic;
    ring->version = di::kQpRingVersion;
    ring->sq_slots = 0;
    ring->rq_slots = max_wr_;
    ring->rq_slot_size = slot;
    ring->sq_offset = offset;
    ring->rq_offset = offset;
    ring->doorbell_slot = doorbell_slot;
    doorbell_slot_ = doorbell_slot;
    ring_memory_ = std::move(memory);
    ring_ = ring;
    slot_size_ = slot;
    pulled_ = 0;
    published_ = 0; // what the new ring holds
    sync();
    return 0;
}

int EngineSrq::modify(uint32_t attr_mask, uint32_t max_wr, uint32_t limit, bool& new_ring) {
    constexpr uint32_t kMaxWr = 1, kLimit = 2; // enum ibv_srq_attr_mask
    new_ring = false;
    if (attr_mask & ~(kMaxWr | kLimit))
        return EINVAL;
    uint32_t granted = max_wr_;
    if (attr_mask & kMaxWr) {
        if (max_wr < 1 || max_wr > SrqLimits::kMaxSrqWr)
            return EINVAL;
        granted = std::bit_ceil(max_wr);
        bool left_in_ring = false;
        pull_work(left_in_ring); // everything posted so far counts
        // ibv_modify_srq(3): never below what is outstanding, and an invalid attribute
        // changes nothing.
        if (granted < queue_.size())
            return EINVAL;
    }
    if ((attr_mask & kLimit) && limit > granted)
        return EINVAL;
    if ((attr_mask & kMaxWr) && granted != max_wr_) {
        queue_.resize(granted);
        const uint32_t old = max_wr_;
        max_wr_ = granted;
        if (int err = create_ring(doorbell_slot_)) {
            max_wr_ = old;
            queue_.resize(old);
            return err;
        }
        new_ring = true;
    }
    if (attr_mask & kLimit)
        queue_.arm_limit(limit);
    return 0;
}

bool EngineSrq::pull_work(bool& left_in_ring) {
    bool any = false;
    left_in_ring = false;
    const uint64_t producer = ring_->rq_producer.load(std::memory_order_acquire);
    const auto* base = static_cast<const uint8_t*>(ring_memory_.data()) + sizeof(di::QpRingHeader);
    while (pulled_ != producer && producer - pulled_ <= max_wr_) {
        const uint8_t* slot = base + (pulled_ & (max_wr_ - 1)) * slot_size_;
        di::RecvWqeHeader h;
        std::memcpy(&h, slot, sizeof(h));
        tp::RecvWqe* r = queue_.prepare_post(); // filled in place
        if (!r) {
            left_in_ring = true;
            break;
        }
        r->wr_id = h.wr_id;
        r->num_sge = std::min<uint32_t>(h.num_sge, max_sge_);
        uint64_t total = 0;
        for (uint32_t i = 0; i < r->num_sge; ++i) {
            di::WireSge s;
            std::memcpy(&s, slot + sizeof(h) + i * sizeof(s), sizeof(s));
            r->sge[i] = {s.addr, s.length, s.lkey};
            total += s.length;
        }
        r->length = static_cast<uint32_t>(std::min<uint64_t>(total, 1ull << 31));
        queue_.post_prepared();
        ++pulled_;
        any = true;
    }
    return any;
}

void EngineSrq::sync() {
    // The provider counts producer - completed as posted and not yet taken: the
    // requests still in the ring plus those queued in the engine (after a resize, some
    // of those came from the old ring, so this wraps below zero; modulo 2^64 it holds).
    const uint64_t completed = pulled_ - queue_.size();
    if (completed != published_) { // a cache line the provider reads: written on change
        ring_->rq_completed.store(completed, std::memory_order_release);
        published_ = completed;
    }
    if (queue_.take_limit_event())
        context_.raise_event(user_handle_, di::kEventSrqLimitReached);
}

} // namespace softhca::engine
