// Completion queues: the engine produces completions into a shared-memory ring; the
// provider consumes them in poll_cq without any system call.
#include "provider.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

namespace softhca::provider {

namespace di = device_interface;

namespace {

// An application spinning on empty CQs yields the CPU every this many polls (see
// note_empty_poll). Measured with ib_send_lat / ib_write_bw 8 B between the two built-in
// devices on 2 cores (engine and both applications spinning): yielding every 1, 4, 16
// or 64 empty polls gave the same latency within the noise (typical 6.9-8.4 us, heap
// memory, before receives were staged) and 0.96-1.15 M msg/s; never yielding gave a
// typical latency of 270 us and 0.79 M msg/s, because the engine then only runs when
// the scheduler preempts a spinner. 16 keeps the cost of a yield (a system call, ~0.5
// us here) off the polls of a busy CQ.
constexpr uint32_t kEmptyPollsPerYield = 16;

// Maps the ring the engine sent and checks it is one. Returns nullptr on failure.
di::CqRingHeader* map_ring(int fd, size_t bytes) {
    if (fd < 0 || bytes < sizeof(di::CqRingHeader))
        return nullptr;
    void* map = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (map == MAP_FAILED)
        return nullptr;
    auto* ring = static_cast<di::CqRingHeader*>(map);
    if (ring->magic != di::kCqRingMagic || ring->version != di::kCqRingVersion ||
        di::cq_ring_bytes(ring->slots) > bytes) {
        ::munmap(map, bytes);
        return nullptr;
    }
    return ring;
}

} // namespace

void land_staged(const di::CompletionEntry& e) {
    // The engine checked the receive's lkey, rights and bounds; the bytes go where the
    // application's receive said, before it sees the completion.
    if (e.staged_length && e.staged_length <= di::kEntryStagedBytes)
        std::memcpy(reinterpret_cast<void*>(e.staged_addr), e.staged, e.staged_length);
}

void to_wc(const di::CompletionEntry& e, ibv_wc& wc) {
    land_staged(e);
    wc = {};
    wc.wr_id = e.wr_id;
    wc.status = static_cast<ibv_wc_status>(e.status);
    wc.opcode = static_cast<ibv_wc_opcode>(e.opcode);
    wc.vendor_err = e.vendor_err;
    wc.byte_len = e.byte_len;
    wc.imm_data = e.imm_data;
    wc.qp_num = e.qp_num;
    wc.src_qp = e.src_qp;
    wc.wc_flags = e.wc_flags;
    wc.pkey_index = e.pkey_index;
    wc.slid = e.slid;
    wc.sl = wc_sl(e);
    wc.dlid_path_bits = e.dlid_path_bits;
}

uint8_t wc_sl(const di::CompletionEntry& e) {
    // RoCE has no SL on the wire. For a UD receive over RoCE, hardware HCAs (mlx5) report
    // the frame's type in the SL bits instead, the flag Annex A17.4.5.1 puts in the
    // completion: bit 3 set for RoCEv2 (UDP), bits 2..0 the L3 header, 2 IPv4 and 1
    // IPv6. UCX's UD transport reads it to find the destination GID in the GRH area.
    if (e.network_header == di::kNetworkHeaderIpv4)
        return 0x8 | 0x2;
    if (e.network_header == di::kNetworkHeaderIpv6)
        return 0x8 | 0x1;
    return e.sl;
}

Cq* create_completion_queue(ibv_context* context, int cqe, ibv_comp_channel* channel,
                            int comp_vector, bool timestamps) {
    if (cqe < 1 || comp_vector < 0)
        return fail_with<Cq>(EINVAL);
    int channel_writer = -1;
    if (channel && (channel_writer = open_channel_writer(*channel)) < 0)
        return nullptr; // errno from open_channel_writer
    auto* cq = new (std::nothrow) Cq{};
    if (!cq) {
        if (channel_writer >= 0)
            ::close(channel_writer);
        return fail_with<Cq>(ENOMEM);
    }
    di::CreateCqRequest request{};
    request.user_handle = reinterpret_cast<uintptr_t>(&cq->vcq.cq);
    request.cqe = static_cast<uint32_t>(cqe);
    request.comp_vector = static_cast<uint32_t>(comp_vector);
    request.flags =
        (channel ? di::kCreateCqChannel : 0) | (timestamps ? di::kCreateCqTimestamps : 0);
    di::CreateCqReply reply{};
    ControlChannel& control = state_of(context).control;
    const int err = call_for_ring(
        control, di::Opcode::CreateCq, request, reply, cq->ring, map_ring,
        [&] { control.destroy(di::Opcode::DestroyCq, reply.cq_handle); }, channel_writer);
    if (channel_writer >= 0)
        ::close(channel_writer); // the engine holds its own copy now
    if (err) {
        delete cq;
        return fail_with<Cq>(err);
    }
    cq->handle = reply.cq_handle;
    cq->ring_bytes = reply.ring_bytes;
    cq->vcq.cq.cqe = static_cast<int>(reply.cqe);
    return cq;
}

ibv_cq* create_cq(ibv_context* context, int cqe, ibv_comp_channel* channel, int comp_vector) {
    Cq* cq = create_completion_queue(context, cqe, channel, comp_vector);
    return cq ? &cq->vcq.cq : nullptr;
}

int poll_cq(ibv_cq* ibcq, int num_entries, ibv_wc* wc) {
    Cq* cq = to_cq(ibcq);
    std::lock_guard<std::mutex> lock(cq->lock);
    di::CqRingHeader* ring = cq->ring;
    const uint64_t producer = ring->producer.load(std::memory_order_acquire);
    uint64_t consumer = ring->consumer.load(std::memory_order_relaxed);
    const di::CompletionEntry* entries = di::cq_ring_entries(ring);
    int polled = 0;
    while (polled < num_entries && consumer != producer) {
        const di::CompletionEntry& entry = entries[consumer & (ring->slots - 1)];
        ++consumer;
        if (entry.discarded)
            continue;
        to_wc(entry, wc[polled]);
        ++polled;
    }
    ring->consumer.store(consumer, std::memory_order_release);
    note_empty_poll(polled == 0);
    return polled;
}

void discard_completions(Cq& cq, uint32_t qp_num) {
    std::lock_guard<std::mutex> lock(cq.lock);
    di::CqRingHeader* ring = cq.ring;
    const uint64_t producer = ring->producer.load(std::memory_order_acquire);
    di::CompletionEntry* entries = di::cq_ring_entries(ring);
    for (uint64_t i = ring->consumer.load(std::memory_order_relaxed); i != producer; ++i) {
        di::CompletionEntry& entry = entries[i & (ring->slots - 1)];
        if (entry.qp_num == qp_num)
            entry.discarded = 1;
    }
}

void note_empty_poll(bool empty) {
    // The card is a process that shares the CPUs with the application: an application
    // that spins on an empty CQ gives it a turn now and then, or on a machine with few
    // cores it would be polling for completions the engine has no CPU to produce.
    // Counted per thread, over every CQ it polls: a thread that polls four CQs in its
    // progress loop (UCX's rc_verbs and ud_verbs, each a send and a receive CQ) yields
    // as often as one that polls one, not four times as often. Per CQ, UCX's 8 B tag_lat
    // averaged 16.7-19.0 us and Open MPI's 8 B ping-pong 22-24 us; per thread 9.2-9.9 and
    // 15.6-20.1 (2 cores, three runs each), ib_send_lat unchanged.
    thread_local uint32_t empty_polls = 0;
    if (!empty)
        empty_polls = 0;
    else if (++empty_polls % kEmptyPollsPerYield == 0)
        sched_yield();
}

int resize_cq(ibv_cq* ibcq, int cqe) {
    if (cqe < 1)
        return EINVAL;
    Cq* cq = to_cq(ibcq);
    std::lock_guard<std::mutex> lock(cq->lock);
    di::ResizeCqRequest request{};
    request.cq_handle = cq->handle;
    request.cqe = static_cast<uint32_t>(cqe);
    di::CreateCqReply reply{};
    di::CqRingHeader* ring = nullptr;
    if (int err = call_for_ring(state_of(ibcq->context).control, di::Opcode::ResizeCq, request,
                                reply, ring, map_ring, [] {}))
        return err;
    ::munmap(cq->ring, cq->ring_bytes);
    cq->ring = ring;
    cq->ring_bytes = reply.ring_bytes;
    ibcq->cqe = static_cast<int>(reply.cqe);
    return 0;
}

int destroy_cq(ibv_cq* ibcq) {
    Cq* cq = to_cq(ibcq);
    if (int err = state_of(ibcq->context).control.destroy(di::Opcode::DestroyCq, cq->handle))
        return err; // EBUSY while a QP completes into it
    release_channel(*ibcq, cq->ring->events.load(std::memory_order_acquire));
    ::munmap(cq->ring, cq->ring_bytes);
    delete cq;
    return 0;
}

} // namespace softhca::provider
