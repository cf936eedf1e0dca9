// XRC domains (ibv_open_xrcd): the engine keeps them, shared by every process that opens
// the same file; the provider holds a handle.
#include "provider.hpp"

#include <new>

namespace softhca::provider {

namespace di = device_interface;

ibv_xrcd* open_xrcd(ibv_context* context, ibv_xrcd_init_attr* attr) {
    // ibv_open_xrcd(3): fd and oflags must both be given; fd -1 makes a domain of its own.
    if (!attr || !(attr->comp_mask & IBV_XRCD_INIT_ATTR_FD) ||
        !(attr->comp_mask & IBV_XRCD_INIT_ATTR_OFLAGS))
        return fail_with<ibv_xrcd>(EINVAL);
    if (attr->comp_mask & ~(IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS))
        return fail_with<ibv_xrcd>(EOPNOTSUPP);
    auto* xrcd = new (std::nothrow) Xrcd{};
    if (!xrcd)
        return fail_with<ibv_xrcd>(ENOMEM);
    di::OpenXrcdRequest request{};
    request.oflags = static_cast<uint32_t>(attr->oflags);
    request.with_fd = attr->fd >= 0 ? 1 : 0;
    di::HandleReply reply{};
    if (int err = state_of(context).control.call(di::Opcode::OpenXrcd, &request, sizeof(request),
                                                 &reply, sizeof(reply), attr->fd)) {
        delete xrcd;
        return fail_with<ibv_xrcd>(err);
    }
    xrcd->vxrcd.xrcd.context = context;
    xrcd->vxrcd.comp_mask = SOFTHCA_VERBS_XRCD_HANDLE;
    xrcd->vxrcd.handle = reply.handle;
    return &xrcd->vxrcd.xrcd;
}

int close_xrcd(ibv_xrcd* ibxrcd) {
    Xrcd* xrcd = to_xrcd(ibxrcd);
    if (int err =
            state_of(ibxrcd->context).control.destroy(di::Opcode::CloseXrcd, xrcd->vxrcd.handle))
        return err; // EBUSY while SRQs or target QPs are in it
    delete xrcd;
    return 0;
}

} // namespace softhca::provider
