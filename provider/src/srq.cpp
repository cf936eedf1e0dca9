// Shared receive queues: the engine owns the queue QPs take from; the provider writes
// receive requests into the SRQ's ring as it does for a QP's own receive queue.
#include "provider.hpp"
#include "work_queue.hpp"

#include <new>
#include <sys/mman.h>
#include <unistd.h>

namespace softhca::provider {

namespace di = device_interface;

namespace {

// Creates a basic SRQ (xrcd and cq null) or an XRC SRQ in the engine and maps its
// ring. What was granted goes back into `attr`.
ibv_srq* create_shared_queue(ibv_pd* pd, ibv_xrcd* xrcd, ibv_cq* cq, void* srq_context,
                             ibv_srq_attr& attr) {
    ibv_context* context = pd->context;
    if ((xrcd && xrcd->context != context) || (cq && cq->context != context))
        return fail_with<ibv_srq>(EINVAL);
    ContextState& state = state_of(context);
    auto* srq = new (std::nothrow) Srq{};
    if (!srq)
        return fail_with<ibv_srq>(ENOMEM);
    di::CreateSrqRequest request{};
    request.user_handle = reinterpret_cast<uintptr_t>(&srq->ibv);
    request.pd_handle = to_pd(pd)->handle;
    request.max_wr = attr.max_wr;
    request.max_sge = attr.max_sge;
    request.srq_limit = attr.srq_limit;
    request.srq_type = xrcd ? IBV_SRQT_XRC : IBV_SRQT_BASIC;
    request.xrcd_handle = xrcd ? to_xrcd(xrcd)->vxrcd.handle : 0;
    request.cq_handle = cq ? to_cq(cq)->handle : 0;
    di::CreateSrqReply reply{};
    if (int err = call_for_ring(
            state.control, di::Opcode::CreateSrq, request, reply, srq->ring, map_work_ring,
            [&] { state.control.destroy(di::Opcode::DestroySrq, reply.srq_handle); })) {
        delete srq;
        return fail_with<ibv_srq>(err);
    }
    srq->handle = reply.srq_handle;
    srq->srq_num = reply.srq_num;
    srq->max_sge = reply.max_sge;
    srq->ring_bytes = reply.ring_bytes;
    srq->doorbell = state.doorbell;
    attr.max_wr = reply.max_wr; // what was granted
    attr.max_sge = reply.max_sge;
    // ibv_create_srq fills these itself; ibv_create_srq_ex leaves them to us.
    ibv_srq& q = srq->ibv;
    q.context = context;
    q.srq_context = srq_context;
    q.pd = pd;
    q.handle = reply.srq_handle;
    q.events_completed = 0;
    pthread_mutex_init(&q.mutex, nullptr);
    pthread_cond_init(&q.cond, nullptr);
    return &q;
}

} // namespace

ibv_srq* create_srq(ibv_pd* pd, ibv_srq_init_attr* attr) {
    if (!attr)
        return fail_with<ibv_srq>(EINVAL);
    return create_shared_queue(pd, nullptr, nullptr, attr->srq_context, attr->attr);
}

ibv_srq* create_srq_ex(ibv_context* context, ibv_srq_init_attr_ex* attr) {
    if (!attr)
        return fail_with<ibv_srq>(EINVAL);
    constexpr uint32_t kKnown = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
                                IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
    const uint32_t mask = attr->comp_mask;
    const ibv_srq_type type = mask & IBV_SRQ_INIT_ATTR_TYPE ? attr->srq_type : IBV_SRQT_BASIC;
    if ((mask & ~kKnown) || (type != IBV_SRQT_BASIC && type != IBV_SRQT_XRC))
        return fail_with<ibv_srq>(EOPNOTSUPP); // tag matching
    // ibv_create_srq_ex(3): every SRQ has a PD; an XRC SRQ also its XRCD and CQ.
    const bool xrc = type == IBV_SRQT_XRC;
    if (!(mask & IBV_SRQ_INIT_ATTR_PD) || !attr->pd || attr->pd->context != context ||
        (xrc && (!(mask & IBV_SRQ_INIT_ATTR_XRCD) || !attr->xrcd ||
                 !(mask & IBV_SRQ_INIT_ATTR_CQ) || !attr->cq)))
        return fail_with<ibv_srq>(EINVAL);
    return create_shared_queue(attr->pd, xrc ? attr->xrcd : nullptr, xrc ? attr->cq : nullptr,
                               attr->srq_context, attr->attr);
}

int get_srq_num(ibv_srq* srq, uint32_t* srq_num) {
    *srq_num = to_srq(srq)->srq_num;
    return 0;
}

int modify_srq(ibv_srq* ibsrq, ibv_srq_attr* attr, int attr_mask) {
    Srq* srq = to_srq(ibsrq);
    di::ModifySrqRequest request{};
    request.srq_handle = srq->handle;
    request.attr_mask = static_cast<uint32_t>(attr_mask);
    request.max_wr = attr->max_wr;
    request.srq_limit = attr->srq_limit;
    di::ModifySrqReply reply{};
    int ring_fd = -1;
    // No post may run while the engine swaps the ring (a resize hands us a new one).
    std::lock_guard<std::mutex> lock(srq->lock);
    if (int err = state_of(ibsrq->context)
                      .control.call(di::Opcode::ModifySrq, &request, sizeof(request), &reply,
                                    sizeof(reply), -1, &ring_fd)) {
        if (ring_fd >= 0)
            ::close(ring_fd);
        return err;
    }
    if (ring_fd >= 0) {
        di::QpRingHeader* ring = map_work_ring(ring_fd, reply.ring_bytes);
        if (!ring)
            return ENOMEM;
        ::munmap(srq->ring, srq->ring_bytes);
        srq->ring = ring;
        srq->ring_bytes = reply.ring_bytes;
        srq->next = 0;
        attr->max_wr = reply.max_wr;
    }
    return 0;
}

int query_srq(ibv_srq* ibsrq, ibv_srq_attr* attr) {
    di::HandleRequest request{};
    request.handle = to_srq(ibsrq)->handle;
    di::QuerySrqReply reply{};
    if (int err = state_of(ibsrq->context)
                      .control.call(di::Opcode::QuerySrq, &request, sizeof(request), &reply,
                                    sizeof(reply)))
        return err;
    attr->max_wr = reply.max_wr;
    attr->max_sge = reply.max_sge;
    attr->srq_limit = reply.srq_limit;
    return 0;
}

int destroy_srq(ibv_srq* ibsrq) {
    Srq* srq = to_srq(ibsrq);
    if (int err = state_of(ibsrq->context).control.destroy(di::Opcode::DestroySrq, srq->handle))
        return err;
    ::munmap(srq->ring, srq->ring_bytes);
    delete srq;
    return 0;
}

int post_srq_recv(ibv_srq* ibsrq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
    Srq* srq = to_srq(ibsrq);
    std::lock_guard<std::mutex> lock(srq->lock);
    return post_receive_requests(srq->ring, srq->next, srq->max_sge, srq->doorbell, wr, bad_wr);
}

} // namespace softhca::provider
