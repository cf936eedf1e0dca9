#include "work_queue.hpp"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <sys/mman.h>
#include <unistd.h>

namespace softhca::provider {

namespace di = device_interface;

di::QpRingHeader* map_work_ring(int fd, size_t bytes) {
    if (fd < 0 || bytes < sizeof(di::QpRingHeader))
        return nullptr;
    void* map = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (map == MAP_FAILED)
        return nullptr;
    auto* ring = static_cast<di::QpRingHeader*>(map);
    // The queues the header describes lie inside the mapping, as cq_ring_bytes checks a
    // CQ's.
    const auto inside = [bytes](uint64_t offset, uint64_t slots, uint64_t slot_size) {
        return offset <= bytes && (slot_size == 0 || slots <= (bytes - offset) / slot_size);
    };
    if (ring->magic != di::kQpRingMagic || ring->version != di::kQpRingVersion ||
        !inside(ring->sq_offset, ring->sq_slots, ring->sq_slot_size) ||
        !inside(ring->rq_offset, ring->rq_slots, ring->rq_slot_size)) {
        ::munmap(map, bytes);
        return nullptr;
    }
    return ring;
}

void ring_doorbell(di::QpRingHeader* ring, const Doorbell& doorbell) {
    // Publish, ring the queue's bit, then look whether the engine sleeps: the fence and
    // the page's sequentially consistent accesses pair with the engine's take-then-read
    // and arm-then-look-again (doorbell_page.hpp), so a post is never left unseen.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    di::DoorbellPage& page = *doorbell.page;
    di::ring_doorbell_slot(page, ring->doorbell_slot);
    if (page.armed.load() && page.armed.exchange(0)) {
        const uint64_t one = 1;
        [[maybe_unused]] ssize_t n = ::write(doorbell.fd, &one, sizeof(one));
    }
}

int post_receive_requests(di::QpRingHeader* ring, uint64_t& next, uint32_t max_sge,
                          const Doorbell& doorbell, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
    const uint64_t completed = ring->rq_completed.load(std::memory_order_acquire);
    int err = 0;
    for (; wr; wr = wr->next) {
        if (wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > max_sge) {
            err = EINVAL;
            break;
        }
        if (next - completed >= ring->rq_slots) {
            err = ENOMEM; // the queue is full
            break;
        }
        uint8_t* slot = di::qp_ring_slot(ring, false, next);
        di::RecvWqeHeader h{wr->wr_id, static_cast<uint32_t>(wr->num_sge), 0};
        std::memcpy(slot, &h, sizeof(h));
        for (int i = 0; i < wr->num_sge; ++i) {
            const di::WireSge s{wr->sg_list[i].addr, wr->sg_list[i].length, wr->sg_list[i].lkey};
            std::memcpy(slot + sizeof(h) + i * sizeof(s), &s, sizeof(s));
        }
        ++next;
    }
    ring->rq_producer.store(next, std::memory_order_release);
    ring_doorbell(ring, doorbell);
    if (err)
        *bad_wr = wr;
    return err;
}

} // namespace softhca::provider
