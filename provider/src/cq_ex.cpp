// The extended CQ (ibv_create_cq_ex(3)): ibv_start_poll / ibv_next_poll / ibv_end_poll
// walk the same shared ring as ibv_poll_cq, one completion at a time, and the
// ibv_wc_read_* accessors read the fields the application asked for. A CQ made this way
// can be polled either way.
#include "provider.hpp"

namespace softhca::provider {

namespace di = device_interface;

namespace {

// What we can report (ibv_create_cq_ex(3) wc_flags). VLANs, flow tags and tag matching
// are not: asking for them is EOPNOTSUPP.
constexpr uint64_t kTimestampWcFlags =
    IBV_WC_EX_WITH_COMPLETION_TIMESTAMP | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;
constexpr uint64_t kSupportedWcFlags =
    IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_SRC_QP |
    IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL | IBV_WC_EX_WITH_DLID_PATH_BITS | kTimestampWcFlags;

const di::CompletionEntry& current(ibv_cq_ex* ibcq) {
    return *to_cq(ibv_cq_ex_to_cq(ibcq))->current;
}

// Makes the entry at the batch position current, if the engine has produced it.
bool load_current(Cq& cq) {
    di::CqRingHeader* ring = cq.ring;
    const uint64_t producer = ring->producer.load(std::memory_order_acquire);
    // Entries of a QP reset or destroyed since they were made are skipped (and their
    // slots given back).
    const uint64_t first = cq.batch_consumer;
    while (cq.batch_consumer != producer &&
           di::cq_ring_entries(ring)[cq.batch_consumer & (ring->slots - 1)].discarded)
        ++cq.batch_consumer;
    if (cq.batch_consumer != first)
        ring->consumer.store(cq.batch_consumer, std::memory_order_release);
    if (cq.batch_consumer == producer) {
        cq.current = nullptr;
        return false;
    }
    cq.current = &di::cq_ring_entries(ring)[cq.batch_consumer & (ring->slots - 1)];
    land_staged(*cq.current);
    cq.vcq.cq_ex.status = static_cast<ibv_wc_status>(cq.current->status);
    cq.vcq.cq_ex.wr_id = cq.current->wr_id;
    return true;
}

// The current entry is read: its slot goes back to the engine.
void consume_current(Cq& cq) {
    if (!cq.current)
        return;
    ++cq.batch_consumer;
    cq.ring->consumer.store(cq.batch_consumer, std::memory_order_release);
    cq.current = nullptr;
}

int start_poll(ibv_cq_ex* ibcq, ibv_poll_cq_attr* attr) {
    if (attr && attr->comp_mask)
        return EINVAL;
    Cq& cq = *to_cq(ibv_cq_ex_to_cq(ibcq));
    cq.lock.lock(); // held until end_poll, as the man page allows only one poller
    cq.batch_consumer = cq.ring->consumer.load(std::memory_order_relaxed);
    if (!load_current(cq)) {
        note_empty_poll(true);
        cq.lock.unlock(); // ENOENT: the application does not call end_poll
        return ENOENT;
    }
    note_empty_poll(false);
    return 0;
}

int next_poll(ibv_cq_ex* ibcq) {
    Cq& cq = *to_cq(ibv_cq_ex_to_cq(ibcq));
    consume_current(cq);
    return load_current(cq) ? 0 : ENOENT;
}

void end_poll(ibv_cq_ex* ibcq) {
    Cq& cq = *to_cq(ibv_cq_ex_to_cq(ibcq));
    consume_current(cq);
    cq.lock.unlock();
}

ibv_wc_opcode read_opcode(ibv_cq_ex* cq) {
    return static_cast<ibv_wc_opcode>(current(cq).opcode);
}
uint32_t read_vendor_err(ibv_cq_ex* cq) {
    return current(cq).vendor_err;
}
uint32_t read_byte_len(ibv_cq_ex* cq) {
    return current(cq).byte_len;
}
__be32 read_imm_data(ibv_cq_ex* cq) {
    return current(cq).imm_data;
}
uint32_t read_qp_num(ibv_cq_ex* cq) {
    return current(cq).qp_num;
}
uint32_t read_src_qp(ibv_cq_ex* cq) {
    return current(cq).src_qp;
}
unsigned int read_wc_flags(ibv_cq_ex* cq) {
    return current(cq).wc_flags;
}
uint32_t read_slid(ibv_cq_ex* cq) {
    return current(cq).slid;
}
uint8_t read_sl(ibv_cq_ex* cq) {
    return wc_sl(current(cq));
}
uint8_t read_dlid_path_bits(ibv_cq_ex* cq) {
    return current(cq).dlid_path_bits;
}
// The engine stamps completions with the card's free-running clock, CLOCK_MONOTONIC in
// nanoseconds (hca_core_clock 1 GHz); wall-clock time is that plus how far
// CLOCK_REALTIME is ahead of it now.
uint64_t read_completion_ts(ibv_cq_ex* cq) {
    return current(cq).completion_ns;
}
uint64_t read_completion_wallclock_ns(ibv_cq_ex* cq) {
    return current(cq).completion_ns + realtime_offset_ns();
}

} // namespace

ibv_cq_ex* create_cq_ex(ibv_context* context, ibv_cq_init_attr_ex* attr) {
    if (attr->wc_flags & ~kSupportedWcFlags)
        return fail_with<ibv_cq_ex>(EOPNOTSUPP);
    // Of the flags only the single-threaded hint is known (and changes nothing: the lock
    // is uncontended then). A parent domain given must be one of this context.
    if (attr->comp_mask &
        ~static_cast<uint32_t>(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD))
        return fail_with<ibv_cq_ex>(EOPNOTSUPP);
    if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) &&
        (!attr->parent_domain || attr->parent_domain->context != context ||
         !to_pd(attr->parent_domain)->protection_domain))
        return fail_with<ibv_cq_ex>(EINVAL);
    if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
        (attr->flags & ~static_cast<uint32_t>(IBV_CREATE_CQ_ATTR_SINGLE_THREADED)))
        return fail_with<ibv_cq_ex>(EOPNOTSUPP);
    if (attr->cqe > static_cast<uint32_t>(INT32_MAX))
        return fail_with<ibv_cq_ex>(EINVAL);
    Cq* cq = create_completion_queue(context, static_cast<int>(attr->cqe), attr->channel,
                                     static_cast<int>(attr->comp_vector),
                                     (attr->wc_flags & kTimestampWcFlags) != 0);
    if (!cq)
        return nullptr;
    ibv_cq_ex& ex = cq->vcq.cq_ex;
    ex.start_poll = start_poll;
    ex.next_poll = next_poll;
    ex.end_poll = end_poll;
    ex.read_opcode = read_opcode;
    ex.read_vendor_err = read_vendor_err;
    ex.read_byte_len = read_byte_len;
    ex.read_imm_data = read_imm_data;
    ex.read_qp_num = read_qp_num;
    ex.read_src_qp = read_src_qp;
    ex.read_wc_flags = read_wc_flags;
    ex.read_slid = read_slid;
    ex.read_sl = read_sl;
    ex.read_dlid_path_bits = read_dlid_path_bits;
    ex.read_completion_ts = read_completion_ts;
    ex.read_completion_wallclock_ns = read_completion_wallclock_ns;
    return &ex;
}

} // namespace softhca::provider
