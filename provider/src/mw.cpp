// Memory windows (ibv_alloc_mw(3), ibv_bind_mw(3)): the engine allocates them and keeps
// their state; binding is a work request on a QP's send queue (type 1 through
// ibv_bind_mw, type 2 through ibv_post_send), executed by the engine in queue order.
#include "provider.hpp"

#include <cstdlib>

namespace softhca::provider {

namespace di = device_interface;

ibv_mw* alloc_mw(ibv_pd* pd, ibv_mw_type type) {
    if (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2)
        return fail_with<ibv_mw>(EINVAL);
    auto* mw = static_cast<ibv_mw*>(std::calloc(1, sizeof(ibv_mw)));
    if (!mw)
        return fail_with<ibv_mw>(ENOMEM);
    di::AllocMwRequest request{};
    request.pd_handle = to_pd(pd)->handle;
    request.type = type;
    di::AllocMwReply reply{};
    if (int err = state_of(pd->context)
                      .control.call(di::Opcode::AllocMw, &request, sizeof(request), &reply,
                                    sizeof(reply))) {
        std::free(mw);
        return fail_with<ibv_mw>(err);
    }
    mw->context = pd->context;
    mw->pd = pd;
    mw->rkey = reply.rkey;
    mw->handle = reply.mw_handle;
    mw->type = type;
    return mw;
}

int dealloc_mw(ibv_mw* mw) {
    if (int err = state_of(mw->context).control.destroy(di::Opcode::DeallocMw, mw->handle))
        return err;
    std::free(mw);
    return 0;
}

int bind_mw(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* mw_bind) {
    // ibv_bind_mw(3): a type 1 window gets the next rkey (ibv_inc_rkey) with the bind;
    // the application reads it from mw->rkey as soon as the request is posted.
    ibv_send_wr wr{};
    wr.wr_id = mw_bind->wr_id;
    wr.opcode = IBV_WR_BIND_MW;
    wr.send_flags = mw_bind->send_flags;
    wr.bind_mw.mw = mw;
    wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
    wr.bind_mw.bind_info = mw_bind->bind_info;
    ibv_send_wr* bad = nullptr;
    if (int err = post_send_requests(reinterpret_cast<Qp*>(qp), &wr, &bad, kPostType1Bind))
        return err;
    mw->rkey = wr.bind_mw.rkey;
    return 0;
}

} // namespace softhca::provider
