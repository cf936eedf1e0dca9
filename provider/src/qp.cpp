// Queue pairs: the engine owns the transport state; the provider writes work requests
// into the shared work queues and rings the doorbell, with no system call unless the
// engine has said it sleeps.
#include "provider.hpp"
#include "work_queue.hpp"

#include "softhca/device_interface/qp_ring.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <sys/mman.h>
#include <unistd.h>

namespace softhca::provider {

namespace di = device_interface;

namespace {

Qp* to_qp(ibv_qp* qp) {
    return reinterpret_cast<Qp*>(qp);
}

// The opcodes each service carries (IBTA 9.2 table 38): RC and XRC all of ours, UC
// sends and writes, UD sends; an XRC target sends nothing.
bool supported_send_opcode(ibv_qp_type type, ibv_wr_opcode opcode) {
    if (type == IBV_QPT_XRC_RECV)
        return false;
    switch (opcode) {
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
        return true;
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
        return type != IBV_QPT_UD;
    case IBV_WR_RDMA_READ:
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
    case IBV_WR_SEND_WITH_INV: // the IETH is in RC and XRC only
        return type == IBV_QPT_RC || type == IBV_QPT_XRC_SEND;
    case IBV_WR_BIND_MW:
    case IBV_WR_LOCAL_INV:
        return type != IBV_QPT_UD;
    default:
        return false;
    }
}

// A BIND_MW request (ibv_post_send(3), ibv_bind_mw(3)): a window of this device, of type
// 2 unless ibv_bind_mw posts it, and an MR of this device unless a type 1 window is
// being unbound (length zero). The engine checks PDs, ranges and rights.
int validate_bind(const Qp& qp, const ibv_send_wr& wr, bool type1_bind) {
    const ibv_mw* mw = wr.bind_mw.mw;
    const ibv_mw_bind_info& info = wr.bind_mw.bind_info;
    if (!mw || mw->context != qp.vqp.qp.context ||
        mw->type != (type1_bind ? IBV_MW_TYPE_1 : IBV_MW_TYPE_2))
        return EINVAL;
    if (info.mr)
        return info.mr->context == qp.vqp.qp.context ? 0 : EINVAL;
    // Without an MR a bind only unbinds, and only a type 1 window.
    return mw->type == IBV_MW_TYPE_1 && info.length == 0 ? 0 : EINVAL;
}

// Checks one send work request against the QP; returns 0 or the errno to report.
int validate_send(const Qp& qp, const ibv_send_wr& wr, bool type1_bind) {
    if (!supported_send_opcode(qp.vqp.qp.qp_type, wr.opcode) || wr.num_sge < 0)
        return EINVAL;
    if (wr.opcode == IBV_WR_BIND_MW)
        return validate_bind(qp, wr, type1_bind);
    if (wr.opcode == IBV_WR_LOCAL_INV)
        return 0; // nothing but the rkey
    if (qp.vqp.qp.qp_type == IBV_QPT_UD &&
        (!wr.wr.ud.ah || wr.wr.ud.ah->context != qp.vqp.qp.context))
        return EINVAL; // a datagram needs an address handle of this device
    const bool atomic =
        wr.opcode == IBV_WR_ATOMIC_CMP_AND_SWP || wr.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
    if (wr.send_flags & IBV_SEND_INLINE) {
        if (wr.opcode == IBV_WR_RDMA_READ || atomic)
            return EINVAL; // nothing to send inline
        uint64_t total = 0;
        for (int i = 0; i < wr.num_sge; ++i)
            total += wr.sg_list[i].length;
        if (total > qp.caps.max_inline_data)
            return EINVAL;
        return 0;
    }
    if (static_cast<uint32_t>(wr.num_sge) > qp.caps.max_send_sge)
        return EINVAL;
    if (atomic && (wr.num_sge != 1 || wr.sg_list[0].length != 8))
        return EINVAL; // an atomic returns exactly 8 bytes into one SGE
    return 0;
}

void fill_attributes(const ibv_qp_attr& in, int mask, di::QpAttributes& out) {
    out = {};
    out.qp_state = in.qp_state;
    out.cur_qp_state = in.cur_qp_state;
    out.path_mtu = in.path_mtu;
    out.qkey = in.qkey;
    out.rq_psn = in.rq_psn;
    out.sq_psn = in.sq_psn;
    out.dest_qp_num = in.dest_qp_num;
    out.qp_access_flags = static_cast<uint32_t>(in.qp_access_flags);
    out.pkey_index = in.pkey_index;
    out.port_num = in.port_num;
    out.max_rd_atomic = in.max_rd_atomic;
    out.max_dest_rd_atomic = in.max_dest_rd_atomic;
    out.min_rnr_timer = in.min_rnr_timer;
    out.timeout = in.timeout;
    out.retry_cnt = in.retry_cnt;
    out.rnr_retry = in.rnr_retry;
    out.en_sqd_async_notify = in.en_sqd_async_notify;
    if (mask & IBV_QP_AV) {
        std::memcpy(out.dgid, in.ah_attr.grh.dgid.raw, 16);
        out.flow_label = in.ah_attr.grh.flow_label;
        out.sgid_index = in.ah_attr.grh.sgid_index;
        out.hop_limit = in.ah_attr.grh.hop_limit;
        out.traffic_class = in.ah_attr.grh.traffic_class;
        out.sl = in.ah_attr.sl;
        out.is_global = in.ah_attr.is_global;
        out.ah_port_num = in.ah_attr.port_num;
        out.dlid = in.ah_attr.dlid;
    }
}

} // namespace

namespace {

// Asks the engine for a QP handle (CreateQp or OpenQp; `request` gets the new ibv_qp as
// its user handle, the element of its async events), maps its work queues and fills the
// ibv_qp fields every QP has. nullptr, errno set, on failure.
template <typename Request>
Qp* engine_qp(ibv_context* context, di::Opcode opcode, Request& request, ibv_qp_type type) {
    ContextState& state = state_of(context);
    auto* qp = new (std::nothrow) Qp{};
    if (!qp)
        return fail_with<Qp>(ENOMEM);
    request.user_handle = reinterpret_cast<uintptr_t>(&qp->vqp.qp);
    di::CreateQpReply reply{};
    if (int err =
            call_for_ring(state.control, opcode, request, reply, qp->ring, map_work_ring,
                          [&] { state.control.destroy(di::Opcode::DestroyQp, reply.qp_handle); })) {
        delete qp;
        return fail_with<Qp>(err);
    }
    qp->handle = reply.qp_handle;
    qp->ring_bytes = reply.ring_bytes;
    qp->caps = reply.caps;
    qp->doorbell = state.doorbell;
    ibv_qp& q = qp->vqp.qp;
    q.context = context;
    q.handle = reply.qp_handle;
    q.qp_num = reply.qp_num;
    q.state = IBV_QPS_RESET;
    q.qp_type = type;
    pthread_mutex_init(&q.mutex, nullptr);
    pthread_cond_init(&q.cond, nullptr);
    q.events_completed = 0;
    return qp;
}

// Creates a QP of any type in the engine and maps its work queues. `pd` is null for an
// XRC target, `xrcd` null for every other type. What was granted goes back into
// attr.cap, as the verbs do.
ibv_qp* create_queue_pair(ibv_context* context, ibv_pd* pd, ibv_xrcd* xrcd,
                          ibv_qp_init_attr_ex& attr) {
    const bool sends = attr.qp_type != IBV_QPT_XRC_RECV;
    const bool receives = attr.qp_type != IBV_QPT_XRC_RECV && attr.qp_type != IBV_QPT_XRC_SEND;
    auto foreign = [&](auto* object) { return object && object->context != context; };
    if ((sends && (!pd || !attr.send_cq)) || (receives && !attr.recv_cq) ||
        (attr.qp_type == IBV_QPT_XRC_RECV && !xrcd) || foreign(pd) || foreign(attr.send_cq) ||
        foreign(attr.recv_cq) || foreign(attr.srq) || foreign(xrcd))
        return fail_with<ibv_qp>(EINVAL);
    di::CreateQpRequest request{};
    request.pd_handle = pd ? to_pd(pd)->handle : 0;
    request.send_cq_handle = sends ? to_cq(attr.send_cq)->handle : 0;
    request.recv_cq_handle = receives ? to_cq(attr.recv_cq)->handle : 0;
    request.qp_type = attr.qp_type;
    request.sq_sig_all = attr.sq_sig_all ? 1 : 0;
    request.srq_handle = attr.srq ? to_srq(attr.srq)->handle : 0;
    request.xrcd_handle = xrcd ? to_xrcd(xrcd)->vxrcd.handle : 0;
    request.caps = {attr.cap.max_send_wr,  attr.cap.max_recv_wr,     attr.cap.max_send_sge,
                    attr.cap.max_recv_sge, attr.cap.max_inline_data, 0};
    Qp* qp = engine_qp(context, di::Opcode::CreateQp, request, attr.qp_type);
    if (!qp)
        return nullptr;
    attr.cap.max_send_wr = qp->caps.max_send_wr;
    attr.cap.max_send_sge = qp->caps.max_send_sge;
    if (!attr.srq) {
        attr.cap.max_recv_wr = qp->caps.max_recv_wr;
        attr.cap.max_recv_sge = qp->caps.max_recv_sge;
    }
    attr.cap.max_inline_data = qp->caps.max_inline_data;
    ibv_qp& q = qp->vqp.qp;
    q.qp_context = attr.qp_context;
    q.pd = pd;
    q.send_cq = attr.send_cq;
    q.recv_cq = attr.recv_cq;
    q.srq = attr.srq;
    if (xrcd) {
        qp->vqp.comp_mask = SOFTHCA_VERBS_QP_XRCD;
        qp->vqp.xrcd = &to_xrcd(xrcd)->vxrcd;
    }
    return &q;
}

bool supported_qp_type(ibv_qp_type type) {
    return type == IBV_QPT_RC || type == IBV_QPT_UC || type == IBV_QPT_UD ||
           type == IBV_QPT_XRC_SEND || type == IBV_QPT_XRC_RECV;
}

} // namespace

ibv_qp* create_qp(ibv_pd* pd, ibv_qp_init_attr* attr) {
    // ibv_create_qp, and ibv_create_qp_ex with only a PD (libibverbs routes that here).
    if (!attr)
        return fail_with<ibv_qp>(EINVAL);
    if (!supported_qp_type(attr->qp_type) || attr->qp_type == IBV_QPT_XRC_RECV)
        return fail_with<ibv_qp>(EOPNOTSUPP); // XRC targets have an XRCD, not a PD
    ibv_qp_init_attr_ex ex{};
    std::memcpy(&ex, attr, sizeof(*attr)); // the leading fields of the _ex form
    ibv_qp* qp = create_queue_pair(pd->context, pd, nullptr, ex);
    if (qp)
        attr->cap = ex.cap;
    return qp;
}

ibv_qp* create_qp_ex(ibv_context* context, ibv_qp_init_attr_ex* attr) {
    if (!attr)
        return fail_with<ibv_qp>(EINVAL);
    constexpr uint32_t kKnown = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_XRCD |
                                IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    if ((attr->comp_mask & ~kKnown) ||
        ((attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && attr->create_flags))
        return fail_with<ibv_qp>(EOPNOTSUPP); // no create flags (scatter FCS, ...) here
    // The ibv_wr_* builders we have; TSO, flush and atomic write are not.
    constexpr uint64_t kSendOps = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
                                  IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
                                  IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
                                  IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_LOCAL_INV |
                                  IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_SEND_WITH_INV;
    const uint64_t send_ops =
        attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS ? attr->send_ops_flags : 0;
    if (send_ops & ~kSendOps)
        return fail_with<ibv_qp>(EOPNOTSUPP);
    if (!supported_qp_type(attr->qp_type))
        return fail_with<ibv_qp>(EOPNOTSUPP);
    ibv_pd* pd = attr->comp_mask & IBV_QP_INIT_ATTR_PD ? attr->pd : nullptr;
    ibv_xrcd* xrcd = attr->comp_mask & IBV_QP_INIT_ATTR_XRCD ? attr->xrcd : nullptr;
    if ((attr->qp_type == IBV_QPT_XRC_RECV) != (xrcd != nullptr))
        return fail_with<ibv_qp>(EINVAL); // an XRCD for XRC targets, and for them only
    ibv_qp* qp = create_queue_pair(context, pd, xrcd, *attr);
    if (qp && send_ops) {
        if (int err = enable_wr_api(*to_qp(qp), send_ops)) {
            destroy_qp(qp);
            return fail_with<ibv_qp>(err);
        }
    }
    return qp;
}

ibv_qp* open_qp(ibv_context* context, ibv_qp_open_attr* attr) {
    // ibv_open_qp(3): another handle to an XRC target QP of one of our XRC domains.
    constexpr uint32_t kRequired =
        IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
    if (!attr || (attr->comp_mask & kRequired) != kRequired || !attr->xrcd ||
        attr->xrcd->context != context)
        return fail_with<ibv_qp>(EINVAL);
    if ((attr->comp_mask & ~(kRequired | IBV_QP_OPEN_ATTR_CONTEXT)) ||
        attr->qp_type != IBV_QPT_XRC_RECV)
        return fail_with<ibv_qp>(EOPNOTSUPP);
    di::OpenQpRequest request{};
    request.qp_num = attr->qp_num;
    request.xrcd_handle = to_xrcd(attr->xrcd)->vxrcd.handle;
    Qp* qp = engine_qp(context, di::Opcode::OpenQp, request, IBV_QPT_XRC_RECV);
    if (!qp)
        return nullptr;
    ibv_qp& q = qp->vqp.qp;
    q.qp_context = attr->comp_mask & IBV_QP_OPEN_ATTR_CONTEXT ? attr->qp_context : nullptr;
    qp->vqp.comp_mask = SOFTHCA_VERBS_QP_XRCD;
    qp->vqp.xrcd = &to_xrcd(attr->xrcd)->vxrcd;
    // The QP may be anywhere in its life already.
    ibv_qp_attr now{};
    ibv_qp_init_attr init{};
    q.state = query_qp(&q, &now, IBV_QP_STATE, &init) == 0 ? now.qp_state : IBV_QPS_UNKNOWN;
    return &q;
}

namespace {

void forget_completions(ibv_qp& qp) {
    // A QP reset or destroyed leaves nothing of its own in its CQs: its completions not
    // yet polled (the flush errors of its error state, say) are not reported after it
    // starts again, as HCA drivers clean the CQs (libmlx5's __mlx5_cq_clean). The engine
    // makes none for it once the modify or destroy has returned.
    if (qp.send_cq)
        discard_completions(*to_cq(qp.send_cq), qp.qp_num);
    if (qp.recv_cq && qp.recv_cq != qp.send_cq)
        discard_completions(*to_cq(qp.recv_cq), qp.qp_num);
}

} // namespace

int modify_qp(ibv_qp* ibqp, ibv_qp_attr* attr, int attr_mask) {
    Qp* qp = to_qp(ibqp);
    di::ModifyQpRequest request{};
    request.qp_handle = qp->handle;
    request.attr_mask = static_cast<uint32_t>(attr_mask);
    fill_attributes(*attr, attr_mask, request.attr);
    di::ReplyHeader reply{};
    const int err =
        state_of(ibqp->context)
            .control.call(di::Opcode::ModifyQp, &request, sizeof(request), &reply, sizeof(reply));
    if (!err) {
        // Another connection, or none: grants are asked for again (single_copy.hpp).
        std::lock_guard<std::mutex> lock(qp->sq_lock);
        qp->grants.forget();
    }
    if (!err && (attr_mask & IBV_QP_STATE) && attr->qp_state == IBV_QPS_RESET)
        forget_completions(*ibqp);
    return err;
}

int query_qp(ibv_qp* ibqp, ibv_qp_attr* attr, int /*attr_mask*/, ibv_qp_init_attr* init_attr) {
    Qp* qp = to_qp(ibqp);
    di::QueryQpRequest request{};
    request.qp_handle = qp->handle;
    di::QueryQpReply reply{};
    if (int err = state_of(ibqp->context)
                      .control.call(di::Opcode::QueryQp, &request, sizeof(request), &reply,
                                    sizeof(reply)))
        return err;
    const di::QpAttributes& a = reply.attr;
    *attr = {};
    attr->qp_state = static_cast<ibv_qp_state>(a.qp_state);
    attr->cur_qp_state = static_cast<ibv_qp_state>(a.cur_qp_state);
    attr->path_mtu = static_cast<ibv_mtu>(a.path_mtu);
    attr->path_mig_state = IBV_MIG_MIGRATED;
    attr->qkey = a.qkey;
    attr->rq_psn = a.rq_psn;
    attr->sq_psn = a.sq_psn;
    attr->dest_qp_num = a.dest_qp_num;
    attr->qp_access_flags = static_cast<int>(a.qp_access_flags);
    attr->cap = {reply.caps.max_send_wr, reply.caps.max_recv_wr, reply.caps.max_send_sge,
                 reply.caps.max_recv_sge, reply.caps.max_inline_data};
    if (ibqp->srq || ibqp->qp_type == IBV_QPT_XRC_SEND || ibqp->qp_type == IBV_QPT_XRC_RECV)
        attr->cap.max_recv_wr = attr->cap.max_recv_sge = 0; // no receive queue of its own
    attr->en_sqd_async_notify = a.en_sqd_async_notify;
    std::memcpy(attr->ah_attr.grh.dgid.raw, a.dgid, 16);
    attr->ah_attr.grh.flow_label = a.flow_label;
    attr->ah_attr.grh.sgid_index = a.sgid_index;
    attr->ah_attr.grh.hop_limit = a.hop_limit;
    attr->ah_attr.grh.traffic_class = a.traffic_class;
    attr->ah_attr.is_global = a.is_global;
    attr->ah_attr.sl = a.sl;
    attr->ah_attr.port_num = a.ah_port_num;
    attr->ah_attr.dlid = a.dlid;
    attr->pkey_index = a.pkey_index;
    attr->sq_draining = a.sq_draining;
    attr->max_rd_atomic = a.max_rd_atomic;
    attr->max_dest_rd_atomic = a.max_dest_rd_atomic;
    attr->min_rnr_timer = a.min_rnr_timer;
    attr->port_num = a.port_num ? a.port_num : 1;
    attr->timeout = a.timeout;
    attr->retry_cnt = a.retry_cnt;
    attr->rnr_retry = a.rnr_retry;
    if (init_attr) {
        *init_attr = {};
        init_attr->qp_context = ibqp->qp_context;
        init_attr->send_cq = ibqp->send_cq;
        init_attr->recv_cq = ibqp->recv_cq;
        init_attr->srq = ibqp->srq;
        init_attr->cap = attr->cap;
        init_attr->qp_type = ibqp->qp_type;
        init_attr->sq_sig_all = static_cast<int>(reply.sq_sig_all);
    }
    return 0;
}

int destroy_qp(ibv_qp* ibqp) {
    Qp* qp = to_qp(ibqp);
    if (int err = state_of(ibqp->context).control.destroy(di::Opcode::DestroyQp, qp->handle))
        return err;
    forget_completions(*ibqp);
    ::munmap(qp->ring, qp->ring_bytes);
    delete qp;
    return 0;
}

bool switch_on(const char* name) {
    const char* value = std::getenv(name);
    return !value || std::strcmp(value, "0") != 0;
}

namespace {

// Where the bytes of a SEND's or RDMA WRITE's SGEs lie in this process: true when every
// non-empty SGE is inside a region this context registered (otherwise nothing is read
// here; the engine reports the bad SGE).
bool locate_sges(const Qp& qp, const ibv_send_wr& wr, const void* (&from)[kMostSges]) {
    if (!di::may_gather(static_cast<uint8_t>(wr.opcode)) || wr.num_sge > kMostSges)
        return false;
    const MrDirectory& mrs = state_of(qp.vqp.qp.context).mrs;
    for (int i = 0; i < wr.num_sge; ++i) {
        const ibv_sge& sge = wr.sg_list[i];
        if (!sge.length)
            continue;
        if (!(from[i] = mrs.locate(sge.lkey, sge.addr, sge.length)))
            return false;
    }
    return true;
}

void copy_sges(const ibv_send_wr& wr, const void* const (&from)[kMostSges], uint8_t* to) {
    for (int i = 0; i < wr.num_sge; ++i) {
        if (wr.sg_list[i].length)
            std::memcpy(to, from[i], wr.sg_list[i].length);
        to += wr.sg_list[i].length;
    }
}

// A small SEND or RDMA WRITE has its bytes copied into the slot now, behind its SGEs
// (kSendGathered), when every SGE lies in a region this context registered: the
// engine then needs no system call to read them. The data may not change until the
// request completes, so copying now or later reads the same. Returns whether it did.
// SOFTHCA_GATHER_AT_POST=0 turns it off.
bool gather_at_post(const Qp& qp, const ibv_send_wr& wr, uint64_t total, uint8_t* to) {
    static const bool enabled = switch_on("SOFTHCA_GATHER_AT_POST");
    const size_t used = sizeof(di::SendWqeHeader) + size_t(wr.num_sge) * sizeof(di::WireSge);
    const void* from[kMostSges];
    if (!enabled || total == 0 || used + total > qp.ring->sq_slot_size ||
        !locate_sges(qp, wr, from))
        return false;
    copy_sges(wr, from, to);
    return true;
}

} // namespace

int post_send(ibv_qp* ibqp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
    return post_send_requests(to_qp(ibqp), wr, bad_wr, 0);
}

int post_send_requests(Qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr, unsigned mode) {
    const bool all_or_nothing = mode & kPostAllOrNothing;
    ibv_qp* ibqp = &qp->vqp.qp;
    // Sends are accepted from RTS on (and queue while the send queue is drained; in
    // SQE and ERR they complete as flushed).
    if (ibqp->state != IBV_QPS_RTS && ibqp->state != IBV_QPS_SQD && ibqp->state != IBV_QPS_ERR &&
        ibqp->state != IBV_QPS_SQE) {
        *bad_wr = wr;
        return EINVAL;
    }
    std::lock_guard<std::mutex> lock(qp->sq_lock);
    di::QpRingHeader* ring = qp->ring;
    const uint64_t completed = ring->sq_completed.load(std::memory_order_acquire);
    const uint64_t first = qp->sq_next;
    int err = 0;
    for (; wr; wr = wr->next) {
        if ((err = validate_send(*qp, *wr, mode & kPostType1Bind)))
            break;
        if (qp->sq_next - completed >= ring->sq_slots) {
            err = ENOMEM; // the send queue is full
            break;
        }
        uint8_t* slot = di::qp_ring_slot(ring, true, qp->sq_next);
        di::SendWqeHeader h{};
        h.wr_id = wr->wr_id;
        h.opcode = static_cast<uint8_t>(wr->opcode);
        h.flags =
            static_cast<uint8_t>(((wr->send_flags & IBV_SEND_SIGNALED) ? di::kSendSignaled : 0) |
                                 ((wr->send_flags & IBV_SEND_FENCE) ? di::kSendFence : 0) |
                                 ((wr->send_flags & IBV_SEND_SOLICITED) ? di::kSendSolicited : 0) |
                                 ((wr->send_flags & IBV_SEND_INLINE) ? di::kSendInline : 0));
        h.imm_data = wr->imm_data;
        if (wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP || wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
            h.remote_addr = wr->wr.atomic.remote_addr;
            h.rkey = wr->wr.atomic.rkey;
            h.compare_add = wr->wr.atomic.compare_add;
            h.swap = wr->wr.atomic.swap;
        } else if (ibqp->qp_type == IBV_QPT_UD) {
            const ibv_ah_attr& av = to_ah(wr->wr.ud.ah)->attr;
            h.remote_qpn = wr->wr.ud.remote_qpn;
            h.remote_qkey = wr->wr.ud.remote_qkey;
            std::memcpy(h.dgid, av.grh.dgid.raw, 16);
            h.flow_label = av.grh.flow_label;
            h.hop_limit = av.grh.hop_limit;
            h.traffic_class = av.grh.traffic_class;
            h.sl = av.sl;
            h.sgid_index = av.grh.sgid_index;
        } else if (wr->opcode == IBV_WR_BIND_MW) {
            const ibv_mw_bind_info& info = wr->bind_mw.bind_info;
            h.rkey = wr->bind_mw.rkey;
            h.remote_addr = info.addr;
            h.compare_add = info.length;
            h.bind_mw_handle = wr->bind_mw.mw->handle;
            h.bind_mr_lkey = info.mr ? info.mr->lkey : 0;
            h.bind_access = info.mw_access_flags;
        } else if (wr->opcode == IBV_WR_LOCAL_INV || wr->opcode == IBV_WR_SEND_WITH_INV) {
            h.rkey = wr->invalidate_rkey;
        } else {
            h.remote_addr = wr->wr.rdma.remote_addr;
            h.rkey = wr->wr.rdma.rkey;
        }
        if (ibqp->qp_type == IBV_QPT_XRC_SEND)
            h.remote_srqn = wr->qp_type.xrc.remote_srqn;
        uint8_t* payload = slot + sizeof(h);
        if (wr->opcode == IBV_WR_BIND_MW || wr->opcode == IBV_WR_LOCAL_INV) {
            // Local operations carry no data.
        } else if (wr->send_flags & IBV_SEND_INLINE) {
            // Inline data is copied now: the buffer may be reused as soon as we return.
            uint32_t at = 0;
            for (int i = 0; i < wr->num_sge; ++i) {
                std::memcpy(payload + at, reinterpret_cast<const void*>(wr->sg_list[i].addr),
                            wr->sg_list[i].length);
                at += wr->sg_list[i].length;
            }
            h.length = at;
        } else {
            h.num_sge = static_cast<uint8_t>(wr->num_sge);
            uint64_t total = 0;
            for (int i = 0; i < wr->num_sge; ++i) {
                const di::WireSge s{wr->sg_list[i].addr, wr->sg_list[i].length,
                                    wr->sg_list[i].lkey};
                std::memcpy(payload + i * sizeof(s), &s, sizeof(s));
                total += s.length;
            }
            if (total > (1ull << 31)) {
                err = EINVAL; // larger than a message may be (max_msg_sz)
                break;
            }
            h.length = static_cast<uint32_t>(total);
            // A fenced request's bytes are read only once the READs and atomics before it
            // are done (10.8.3.3): a READ may be filling them now, so they are not copied
            // at post time. (Placing waits for every earlier request anyway.)
            const bool fenced = wr->send_flags & IBV_SEND_FENCE;
            // A WRITE small enough to gather goes the engine's way, which batches the
            // writes of many messages into one system call: cheaper than one
            // process_vm_writev each (8 B: 1.49 against 0.31 M writes/s, 2 cores).
            if (!fenced &&
                gather_at_post(*qp, *wr, total, payload + wr->num_sge * sizeof(di::WireSge))) {
                h.flags |= di::kSendGathered;
            } else if (place_rdma(*qp, *wr, total, completed, !all_or_nothing)) {
                h.flags |= di::kSendPlaced; // moved already: the engine completes it
            }
        }
        // Later ones may not overtake what the engine sends: everything not placed, and a
        // placed WRITE with immediate (its packet consumes the responder's receive).
        if (!(h.flags & di::kSendPlaced) || wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM)
            qp->grants.engine_tail = qp->sq_next + 1;
        std::memcpy(slot, &h, sizeof(h));
        ++qp->sq_next;
    }
    if (err && all_or_nothing) {
        // The slots written stay unpublished. (What was placed stays placed: the verbs
        // leave a failed post's memory effects undefined.)
        qp->sq_next = first;
    }
    ring->sq_producer.store(qp->sq_next, std::memory_order_release);
    ring_doorbell(ring, qp->doorbell);
    if (err)
        *bad_wr = wr;
    return err;
}

int post_recv(ibv_qp* ibqp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
    Qp* qp = to_qp(ibqp);
    if (ibqp->state == IBV_QPS_RESET || qp->caps.max_recv_wr == 0) {
        *bad_wr = wr;
        return EINVAL; // from INIT on, to a QP's own queue (not an SRQ's, not XRC)
    }
    std::lock_guard<std::mutex> lock(qp->rq_lock);
    return post_receive_requests(qp->ring, qp->rq_next, qp->caps.max_recv_sge, qp->doorbell, wr,
                                 bad_wr);
}

} // namespace softhca::provider
