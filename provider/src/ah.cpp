// Address handles and multicast attachment: the UD side of addressing. RoCE needs a
// GRH in every address (IBTA A17.3.1); our GID table has one entry per port.
#include "provider.hpp"

#include <cstring>
#include <new>

namespace softhca::provider {

namespace di = device_interface;

ibv_ah* create_ah(ibv_pd* pd, ibv_ah_attr* attr) {
    if (!attr)
        return fail_with<ibv_ah>(EINVAL);
    if (!attr->is_global || attr->grh.sgid_index != 0 || attr->port_num != 1)
        return fail_with<ibv_ah>(EINVAL);
    // Our ports carry IPv4: the destination must be an IPv4-mapped GID (::ffff:a.b.c.d),
    // as modify_qp requires of a connected QP's path.
    static constexpr uint8_t kMappedPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (std::memcmp(attr->grh.dgid.raw, kMappedPrefix, sizeof(kMappedPrefix)) != 0)
        return fail_with<ibv_ah>(EINVAL);
    auto* ah = new (std::nothrow) Ah{};
    if (!ah)
        return fail_with<ibv_ah>(ENOMEM);
    ah->attr = *attr;
    ah->ibv.context = pd->context;
    ah->ibv.pd = pd;
    return &ah->ibv;
}

int destroy_ah(ibv_ah* ah) {
    delete to_ah(ah);
    return 0;
}

namespace {

int mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t lid, di::Opcode opcode) {
    if (!gid)
        return EINVAL;
    di::McastRequest request{};
    request.qp_handle = reinterpret_cast<Qp*>(qp)->handle;
    request.lid = lid;
    std::memcpy(request.gid, gid->raw, sizeof(request.gid));
    di::ReplyHeader reply{};
    return state_of(qp->context)
        .control.call(opcode, &request, sizeof(request), &reply, sizeof(reply));
}

} // namespace

int attach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t lid) {
    return mcast(qp, gid, lid, di::Opcode::AttachMcast);
}

int detach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t lid) {
    return mcast(qp, gid, lid, di::Opcode::DetachMcast);
}

} // namespace softhca::provider
