// Address handles and multicast attachment: the UD side of addressing. RoCE needs a
// GRH in every address (IBTA A17.3.1), from one of the port's GIDs (IPv4 and IPv6).
#include "provider.hpp"

#include <cstring>
#include <new>

namespace softhca::provider {

namespace di = device_interface;

ibv_ah* create_ah(ibv_pd* pd, ibv_ah_attr* attr) {
    if (!attr)
        return fail_with<ibv_ah>(EINVAL);
    if (!attr->is_global || attr->port_num != 1)
        return fail_with<ibv_ah>(EINVAL);
    // The source GID must be in the port's table and of the destination's family: an
    // IPv4-mapped source (::ffff:a.b.c.d) sends IPv4 to an IPv4-mapped destination,
    // any other sends IPv6 (A17.4.5), as the kernel checks the GID's network type.
    ibv_gid sgid{};
    if (ibv_query_gid(pd->context, 1, attr->grh.sgid_index, &sgid) != 0)
        return fail_with<ibv_ah>(EINVAL);
    static constexpr uint8_t kMappedPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    const bool ipv4_source = std::memcmp(sgid.raw, kMappedPrefix, sizeof(kMappedPrefix)) == 0;
    const bool ipv4_destination =
        std::memcmp(attr->grh.dgid.raw, kMappedPrefix, sizeof(kMappedPrefix)) == 0;
    const ibv_gid none{};
    if (std::memcmp(sgid.raw, none.raw, sizeof(none.raw)) == 0 || ipv4_source != ipv4_destination)
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
