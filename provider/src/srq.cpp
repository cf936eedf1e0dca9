// Shared receive queues: the engine owns the queue QPs take from; the provider writes
// receive requests into the SRQ's ring as it does for a QP's own receive queue.
#include "provider.hpp"
#include "work_queue.hpp"

#include <new>
#include <sys/mman.h>
#include <unistd.h>

namespace softhca::provider {

namespace di = device_interface;

ibv_srq* create_srq(ibv_pd* pd, ibv_srq_init_attr* attr) {
    if (!attr)
        return fail_with<ibv_srq>(EINVAL);
    ContextState& state = state_of(pd->context);
    auto* srq = new (std::nothrow) Srq{};
    if (!srq)
        return fail_with<ibv_srq>(ENOMEM);
    di::CreateSrqRequest request{};
    request.user_handle = reinterpret_cast<uintptr_t>(&srq->ibv);
    request.pd_handle = to_pd(pd)->handle;
    request.max_wr = attr->attr.max_wr;
    request.max_sge = attr->attr.max_sge;
    request.srq_limit = attr->attr.srq_limit;
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
    srq->doorbell_fd = state.doorbell_fd;
    attr->attr.max_wr = reply.max_wr; // what was granted
    attr->attr.max_sge = reply.max_sge;
    srq->ibv.handle = reply.srq_handle;
    return &srq->ibv;
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
    return post_receive_requests(srq->ring, srq->next, srq->max_sge, srq->doorbell_fd, wr, bad_wr);
}

} // namespace softhca::provider
