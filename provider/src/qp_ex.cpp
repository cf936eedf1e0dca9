// The work-request API of ibv_qp_ex (ibv_wr_post(3)): ibv_wr_start, one builder call
// per request (ibv_wr_send, ibv_wr_rdma_write, ...) followed by its setters
// (ibv_wr_set_sge, ibv_wr_set_inline_data, ibv_wr_set_ud_addr, ...), then
// ibv_wr_complete posts them all or, on any error, none; ibv_wr_abort drops them.
//
// Requests are staged as ibv_send_wr in memory reserved when the QP was created (the
// data path allocates nothing) and posted through the same path as ibv_post_send, so
// both APIs validate and encode a request the same way. Inline data is copied when it
// is set, as the man page lets the caller reuse the buffer right away.
#include "provider.hpp"

#include <cstring>
#include <new>

namespace softhca::provider {

namespace {

Qp* qp_of(ibv_qp_ex* qpx) {
    return reinterpret_cast<Qp*>(qpx); // ibv_qp_ex is the first member, through verbs_qp
}

WrStaging& staging(ibv_qp_ex* qpx) {
    return *qp_of(qpx)->wr_staging;
}

// Starts the next request; nullptr once the batch has failed (the error is kept for
// ibv_wr_complete) or when it would not fit the send queue.
ibv_send_wr* begin(ibv_qp_ex* qpx, ibv_wr_opcode opcode) {
    WrStaging& s = staging(qpx);
    if (s.error)
        return nullptr;
    if (s.count == s.capacity) {
        s.error = ENOMEM; // more requests than the send queue holds
        return nullptr;
    }
    ibv_send_wr& wr = s.wrs[s.count];
    wr = {};
    wr.wr_id = qpx->wr_id;
    wr.send_flags = qpx->wr_flags;
    wr.opcode = opcode;
    wr.sg_list = &s.sges[size_t{s.count} * s.sge_stride];
    ++s.count;
    return &wr;
}

// The request the setters apply to: the last one begun.
ibv_send_wr* last(ibv_qp_ex* qpx) {
    WrStaging& s = staging(qpx);
    if (s.error)
        return nullptr;
    if (s.count == 0) {
        s.error = EINVAL; // a setter before any builder
        return nullptr;
    }
    return &s.wrs[s.count - 1];
}

void fail(ibv_qp_ex* qpx, int err) {
    WrStaging& s = staging(qpx);
    if (!s.error)
        s.error = err;
}

// Builders.
void wr_send(ibv_qp_ex* qpx) {
    begin(qpx, IBV_WR_SEND);
}
void wr_send_imm(ibv_qp_ex* qpx, __be32 imm_data) {
    if (ibv_send_wr* wr = begin(qpx, IBV_WR_SEND_WITH_IMM))
        wr->imm_data = imm_data;
}
void wr_send_inv(ibv_qp_ex* qpx, uint32_t invalidate_rkey) {
    if (ibv_send_wr* wr = begin(qpx, IBV_WR_SEND_WITH_INV))
        wr->invalidate_rkey = invalidate_rkey;
}
void wr_rdma_write(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr) {
    if (ibv_send_wr* wr = begin(qpx, IBV_WR_RDMA_WRITE))
        wr->wr.rdma = {remote_addr, rkey};
}
void wr_rdma_write_imm(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr, __be32 imm_data) {
    if (ibv_send_wr* wr = begin(qpx, IBV_WR_RDMA_WRITE_WITH_IMM)) {
        wr->wr.rdma = {remote_addr, rkey};
        wr->imm_data = imm_data;
    }
}
void wr_rdma_read(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr) {
    if (ibv_send_wr* wr = begin(qpx, IBV_WR_RDMA_READ))
        wr->wr.rdma = {remote_addr, rkey};
}
void wr_atomic_cmp_swp(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr, uint64_t compare,
                       uint64_t swap) {
    if (ibv_send_wr* wr = begin(qpx, IBV_WR_ATOMIC_CMP_AND_SWP))
        wr->wr.atomic = {remote_addr, compare, swap, rkey};
}
void wr_atomic_fetch_add(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr, uint64_t add) {
    if (ibv_send_wr* wr = begin(qpx, IBV_WR_ATOMIC_FETCH_AND_ADD))
        wr->wr.atomic = {remote_addr, add, 0, rkey};
}
void wr_local_inv(ibv_qp_ex* qpx, uint32_t invalidate_rkey) {
    if (ibv_send_wr* wr = begin(qpx, IBV_WR_LOCAL_INV))
        wr->invalidate_rkey = invalidate_rkey;
}
void wr_bind_mw(ibv_qp_ex* qpx, ibv_mw* mw, uint32_t rkey, const ibv_mw_bind_info* info) {
    if (ibv_send_wr* wr = begin(qpx, IBV_WR_BIND_MW)) {
        wr->bind_mw.mw = mw;
        wr->bind_mw.rkey = rkey;
        if (info)
            wr->bind_mw.bind_info = *info;
    }
}

// Setters.
void wr_set_sge(ibv_qp_ex* qpx, uint32_t lkey, uint64_t addr, uint32_t length) {
    ibv_send_wr* wr = last(qpx);
    if (!wr)
        return;
    if (staging(qpx).max_sge == 0)
        return fail(qpx, EINVAL);
    wr->sg_list[0] = {addr, length, lkey};
    wr->num_sge = 1;
}

void wr_set_sge_list(ibv_qp_ex* qpx, size_t num_sge, const ibv_sge* sg_list) {
    ibv_send_wr* wr = last(qpx);
    if (!wr)
        return;
    if (num_sge > staging(qpx).max_sge)
        return fail(qpx, EINVAL);
    if (num_sge)
        std::memcpy(wr->sg_list, sg_list, num_sge * sizeof(ibv_sge));
    wr->num_sge = static_cast<int>(num_sge);
}

void wr_set_inline_data_list(ibv_qp_ex* qpx, size_t num_buf, const ibv_data_buf* buf_list) {
    ibv_send_wr* wr = last(qpx);
    if (!wr)
        return;
    WrStaging& s = staging(qpx);
    uint8_t* to = &s.inline_bytes[size_t{s.count - 1} * s.max_inline];
    size_t total = 0;
    for (size_t i = 0; i < num_buf; ++i) {
        if (buf_list[i].length > s.max_inline - total)
            return fail(qpx, EINVAL); // more than max_inline_data
        std::memcpy(to + total, buf_list[i].addr, buf_list[i].length);
        total += buf_list[i].length;
    }
    wr->sg_list[0] = {reinterpret_cast<uintptr_t>(to), static_cast<uint32_t>(total), 0};
    wr->num_sge = 1;
    wr->send_flags |= IBV_SEND_INLINE;
}

void wr_set_inline_data(ibv_qp_ex* qpx, void* addr, size_t length) {
    const ibv_data_buf buf{addr, length};
    wr_set_inline_data_list(qpx, 1, &buf);
}

void wr_set_ud_addr(ibv_qp_ex* qpx, ibv_ah* ah, uint32_t remote_qpn, uint32_t remote_qkey) {
    if (ibv_send_wr* wr = last(qpx))
        wr->wr.ud = {ah, remote_qpn, remote_qkey};
}

void wr_set_xrc_srqn(ibv_qp_ex* qpx, uint32_t remote_srqn) {
    if (ibv_send_wr* wr = last(qpx))
        wr->qp_type.xrc.remote_srqn = remote_srqn;
}

// The batch.
void wr_start(ibv_qp_ex* qpx) {
    WrStaging& s = staging(qpx);
    s.lock.lock(); // until complete or abort: one batch at a time per QP
    s.count = 0;
    s.error = 0;
}

int wr_complete(ibv_qp_ex* qpx) {
    WrStaging& s = staging(qpx);
    int err = s.error;
    if (!err && s.count) {
        for (uint32_t i = 0; i + 1 < s.count; ++i)
            s.wrs[i].next = &s.wrs[i + 1];
        s.wrs[s.count - 1].next = nullptr;
        ibv_send_wr* bad = nullptr;
        err = post_send_requests(qp_of(qpx), s.wrs, &bad, kPostAllOrNothing);
    }
    s.count = 0;
    s.lock.unlock();
    return err;
}

void wr_abort(ibv_qp_ex* qpx) {
    WrStaging& s = staging(qpx);
    s.count = 0;
    s.lock.unlock();
}

} // namespace

WrStaging::~WrStaging() {
    delete[] wrs;
    delete[] sges;
    delete[] inline_bytes;
}

int enable_wr_api(Qp& qp, uint64_t send_ops_flags) {
    auto* s = new (std::nothrow) WrStaging;
    if (!s)
        return ENOMEM;
    s->capacity = qp.caps.max_send_wr;
    s->max_sge = qp.caps.max_send_sge;
    s->sge_stride = s->max_sge ? s->max_sge : 1; // an inline request uses one
    s->max_inline = qp.caps.max_inline_data;
    s->wrs = new (std::nothrow) ibv_send_wr[s->capacity];
    s->sges = new (std::nothrow) ibv_sge[size_t{s->capacity} * s->sge_stride];
    s->inline_bytes = new (std::nothrow) uint8_t[size_t{s->capacity} * s->max_inline + 1];
    if (!s->wrs || !s->sges || !s->inline_bytes) {
        delete s;
        return ENOMEM;
    }
    qp.wr_staging.reset(s);
    ibv_qp_ex& x = qp.vqp.qp_ex;
    x.wr_start = wr_start;
    x.wr_complete = wr_complete;
    x.wr_abort = wr_abort;
    x.wr_set_sge = wr_set_sge;
    x.wr_set_sge_list = wr_set_sge_list;
    x.wr_set_inline_data = wr_set_inline_data;
    x.wr_set_inline_data_list = wr_set_inline_data_list;
    x.wr_set_ud_addr = wr_set_ud_addr;
    x.wr_set_xrc_srqn = wr_set_xrc_srqn;
    // The builders the application asked for (IBV_QP_EX_WITH_*); create_qp_ex has
    // refused the ones we do not have.
    if (send_ops_flags & IBV_QP_EX_WITH_SEND)
        x.wr_send = wr_send;
    if (send_ops_flags & IBV_QP_EX_WITH_SEND_WITH_IMM)
        x.wr_send_imm = wr_send_imm;
    if (send_ops_flags & IBV_QP_EX_WITH_SEND_WITH_INV)
        x.wr_send_inv = wr_send_inv;
    if (send_ops_flags & IBV_QP_EX_WITH_RDMA_WRITE)
        x.wr_rdma_write = wr_rdma_write;
    if (send_ops_flags & IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM)
        x.wr_rdma_write_imm = wr_rdma_write_imm;
    if (send_ops_flags & IBV_QP_EX_WITH_RDMA_READ)
        x.wr_rdma_read = wr_rdma_read;
    if (send_ops_flags & IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP)
        x.wr_atomic_cmp_swp = wr_atomic_cmp_swp;
    if (send_ops_flags & IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD)
        x.wr_atomic_fetch_add = wr_atomic_fetch_add;
    if (send_ops_flags & IBV_QP_EX_WITH_LOCAL_INV)
        x.wr_local_inv = wr_local_inv;
    if (send_ops_flags & IBV_QP_EX_WITH_BIND_MW)
        x.wr_bind_mw = wr_bind_mw;
    qp.vqp.comp_mask |= SOFTHCA_VERBS_QP_EX;
    return 0;
}

} // namespace softhca::provider
