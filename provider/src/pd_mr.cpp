// Protection domains and memory regions: the engine validates and keeps them; the
// provider only wraps the handles and keys it returns.
#include "provider.hpp"

#include <cstdlib>
#include <new>

namespace softhca::provider {

namespace di = device_interface;

ibv_pd* alloc_pd(ibv_context* context) {
    auto* pd = new (std::nothrow) Pd{};
    if (!pd)
        return fail_with<ibv_pd>(ENOMEM);
    di::MessageHeader request{};
    di::HandleReply reply{};
    if (int err = state_of(context).control.call(di::Opcode::AllocPd, &request, sizeof(request),
                                                 &reply, sizeof(reply))) {
        delete pd;
        return fail_with<ibv_pd>(err);
    }
    pd->handle = reply.handle;
    return &pd->ibv;
}

int dealloc_pd(ibv_pd* ibpd) {
    Pd* pd = to_pd(ibpd);
    if (Pd* parent_of = pd->protection_domain) {
        // A parent domain: its PD and thread domain stay (ibv_alloc_parent_domain(3)).
        --parent_of->parent_domains;
        if (pd->td)
            --reinterpret_cast<Td*>(pd->td)->parent_domains;
        delete pd;
        return 0;
    }
    if (pd->parent_domains.load() != 0)
        return EBUSY; // parent domains still stand on it, as MRs and QPs would
    if (int err = state_of(ibpd->context).control.destroy(di::Opcode::DeallocPd, pd->handle))
        return err; // EBUSY while MRs or QPs still use it: the PD stays valid
    delete pd;
    return 0;
}

ibv_pd* alloc_parent_domain(ibv_context* context, ibv_parent_domain_init_attr* attr) {
    constexpr uint32_t kKnown =
        IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
    // Over a plain PD of this context only, with a thread domain of this context.
    if (!attr || (attr->comp_mask & ~kKnown) || !attr->pd || attr->pd->context != context ||
        to_pd(attr->pd)->protection_domain || (attr->td && attr->td->context != context))
        return fail_with<ibv_pd>(EINVAL);
    if ((attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS) && (!attr->alloc || !attr->free))
        return fail_with<ibv_pd>(EINVAL);
    auto* pd = new (std::nothrow) Pd{};
    if (!pd)
        return fail_with<ibv_pd>(ENOMEM);
    Pd* parent_of = to_pd(attr->pd);
    pd->ibv.context = context;
    pd->ibv.handle = parent_of->ibv.handle;
    pd->handle = parent_of->handle;
    pd->protection_domain = parent_of;
    pd->td = attr->td;
    if (attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT)
        pd->pd_context = attr->pd_context;
    ++parent_of->parent_domains;
    if (attr->td)
        ++reinterpret_cast<Td*>(attr->td)->parent_domains;
    return &pd->ibv;
}

ibv_td* alloc_td(ibv_context* context, ibv_td_init_attr* attr) {
    if (!attr || attr->comp_mask)
        return fail_with<ibv_td>(EINVAL);
    auto* td = new (std::nothrow) Td{};
    if (!td)
        return fail_with<ibv_td>(ENOMEM);
    td->ibv.context = context;
    return &td->ibv;
}

int dealloc_td(ibv_td* ibtd) {
    auto* td = reinterpret_cast<Td*>(ibtd);
    if (td->parent_domains.load() != 0)
        return EBUSY; // a parent domain still names it
    delete td;
    return 0;
}

ibv_mr* reg_mr(ibv_pd* ibpd, void* addr, size_t length, uint64_t hca_va, int access) {
    auto* mr = static_cast<Mr*>(std::calloc(1, sizeof(Mr)));
    if (!mr)
        return fail_with<ibv_mr>(ENOMEM);
    di::RegMrRequest request{};
    request.addr = reinterpret_cast<uintptr_t>(addr);
    request.length = length;
    request.iova = hca_va;
    request.pd_handle = to_pd(ibpd)->handle;
    request.access = static_cast<uint32_t>(access);
    di::RegMrReply reply{};
    if (int err = state_of(ibpd->context)
                      .control.call(di::Opcode::RegMr, &request, sizeof(request), &reply,
                                    sizeof(reply))) {
        std::free(mr);
        return fail_with<ibv_mr>(err);
    }
    mr->handle = reply.mr_handle;
    mr->vmr.mr_type = SOFTHCA_IBV_MR_TYPE_MR;
    mr->vmr.access = access;
    mr->vmr.ibv_mr.lkey = reply.lkey;
    mr->vmr.ibv_mr.rkey = reply.rkey;
    mr->vmr.ibv_mr.handle = reply.mr_handle;
    // An on-demand-paging region may cover memory that is not mapped (implicit ODP:
    // all of it): nothing is gathered from it at post time.
    if (!(access & IBV_ACCESS_ON_DEMAND))
        state_of(ibpd->context)
            .mrs.add(reply.lkey, hca_va, reinterpret_cast<uintptr_t>(addr), length);
    return &mr->vmr.ibv_mr;
}

int rereg_mr(verbs_mr* vmr, int flags, ibv_pd* pd, void* addr, size_t length, int access) {
    // libibverbs has checked the flags' combinations and updates mr->pd, addr and
    // length on success; a failure here leaves the MR as it was.
    Mr* mr = reinterpret_cast<Mr*>(vmr);
    di::ReregMrRequest request{};
    request.mr_handle = mr->handle;
    request.flags = static_cast<uint32_t>(flags);
    request.addr = reinterpret_cast<uintptr_t>(addr);
    request.length = length;
    if (flags & IBV_REREG_MR_CHANGE_PD) {
        if (!pd || pd->context != vmr->ibv_mr.context) {
            errno = EINVAL;
            return EINVAL;
        }
        request.pd_handle = to_pd(pd)->handle;
    }
    request.access = static_cast<uint32_t>(access);
    di::RegMrReply reply{};
    if (int err = state_of(vmr->ibv_mr.context)
                      .control.call(di::Opcode::ReregMr, &request, sizeof(request), &reply,
                                    sizeof(reply))) {
        errno = err;
        return err;
    }
    if (flags & IBV_REREG_MR_CHANGE_ACCESS)
        vmr->access = access;
    MrDirectory& mrs = state_of(vmr->ibv_mr.context).mrs;
    if (vmr->access & IBV_ACCESS_ON_DEMAND) {
        mrs.remove(vmr->ibv_mr.lkey);
    } else if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
        // The region now lies at `addr`, which is also its new address (iova).
        mrs.add(vmr->ibv_mr.lkey, reinterpret_cast<uintptr_t>(addr),
                reinterpret_cast<uintptr_t>(addr), length);
    }
    return 0;
}

int dereg_mr(verbs_mr* vmr) {
    Mr* mr = reinterpret_cast<Mr*>(vmr);
    // Out of the directory first: from here on no post gathers from this memory.
    state_of(vmr->ibv_mr.context).mrs.remove(vmr->ibv_mr.lkey);
    if (int err = state_of(vmr->ibv_mr.context).control.destroy(di::Opcode::DeregMr, mr->handle))
        return err;
    std::free(mr);
    return 0;
}

} // namespace softhca::provider
