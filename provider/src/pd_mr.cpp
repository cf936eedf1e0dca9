// Protection domains and memory regions: the engine validates and keeps them; the
// provider only wraps the handles and keys it returns.
#include "provider.hpp"

#include <cstdlib>
#include <new>
#include <sys/mman.h>
#include <unistd.h>

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
    mr->iova = hca_va;
    mr->addr = reinterpret_cast<uintptr_t>(addr);
    mr->length = length;
    // An on-demand-paging region may cover memory that is not mapped (implicit ODP:
    // all of it): nothing is gathered from it at post time (MrDirectory).
    state_of(ibpd->context)
        .mrs.add(reply.lkey, hca_va, reinterpret_cast<uintptr_t>(addr), length,
                 (access & IBV_ACCESS_ON_DEMAND) != 0, (access & IBV_ACCESS_LOCAL_WRITE) != 0,
                 to_pd(ibpd)->handle);
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
    int page = -1;
    if (int err = state_of(vmr->ibv_mr.context)
                      .control.call(di::Opcode::ReregMr, &request, sizeof(request), &reply,
                                    sizeof(reply), -1, &page)) {
        if (page >= 0)
            ::close(page);
        errno = err;
        return err;
    }
    // Copies another process began into the old region before the engine revoked its
    // grants are waited for, as at deregistration.
    state_of(vmr->ibv_mr.context).grant_pages.wait_for_copies(reply.grant_slot, page);
    if (flags & IBV_REREG_MR_CHANGE_ACCESS)
        vmr->access = access;
    MrDirectory& mrs = state_of(vmr->ibv_mr.context).mrs;
    if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
        // The region now lies at `addr`, which is also its new address (iova).
        mr->addr = mr->iova = reinterpret_cast<uintptr_t>(addr);
        mr->length = length;
    }
    mrs.add(vmr->ibv_mr.lkey, mr->iova, mr->addr, mr->length,
            (vmr->access & IBV_ACCESS_ON_DEMAND) != 0, (vmr->access & IBV_ACCESS_LOCAL_WRITE) != 0,
            to_pd((flags & IBV_REREG_MR_CHANGE_PD) ? pd : vmr->ibv_mr.pd)->handle);
    return 0;
}

int advise_mr(ibv_pd* pd, ibv_advise_mr_advice advice, uint32_t flags, ibv_sge* sg_list,
              uint32_t num_sge) {
    // Prefetch for on-demand-paging regions (ibv_advise_mr(3)). The card reaches their
    // pages through the application's page tables, so a prefetch is what it would
    // make the kernel do: populate them (MADV_POPULATE_READ / _WRITE), never faulting
    // the process for what is not mapped. PREFETCH_NO_FAULT takes only pages already
    // present, which is nothing to do. Without IBV_ADVISE_MR_FLAG_FLUSH the advice is a
    // hint and its failures are not reported.
    if (advice != IBV_ADVISE_MR_ADVICE_PREFETCH && advice != IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE &&
        advice != IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT)
        return EOPNOTSUPP;
    if ((flags & ~static_cast<uint32_t>(IBV_ADVISE_MR_FLAG_FLUSH)) || !sg_list || num_sge == 0)
        return EINVAL;
    const MrDirectory& mrs = state_of(pd->context).mrs;
    const long page = ::sysconf(_SC_PAGESIZE);
    for (uint32_t i = 0; i < num_sge; ++i) {
        uint64_t at = 0;
        if (int err = mrs.locate_on_demand(sg_list[i].lkey, sg_list[i].addr, sg_list[i].length, at))
            return err;
        if (advice == IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT || sg_list[i].length == 0)
            continue;
        const uint64_t first = at & ~static_cast<uint64_t>(page - 1);
        const uint64_t end = at + sg_list[i].length;
        const int how = advice == IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE ? MADV_POPULATE_WRITE
                                                                      : MADV_POPULATE_READ;
        if (::madvise(reinterpret_cast<void*>(first), end - first, how) != 0 &&
            (flags & IBV_ADVISE_MR_FLAG_FLUSH))
            return errno == ENOMEM ? EFAULT : errno;
    }
    return 0;
}

int dereg_mr(verbs_mr* vmr) {
    Mr* mr = reinterpret_cast<Mr*>(vmr);
    // Out of the directory first: from here on no post gathers from this memory.
    state_of(vmr->ibv_mr.context).mrs.remove(vmr->ibv_mr.lkey);
    // A granted MR's slot comes back with the grant page: copies another process began
    // into it before the engine revoked its grants are waited for (single_copy.hpp).
    ContextState& state = state_of(vmr->ibv_mr.context);
    di::HandleRequest request{};
    request.handle = mr->handle;
    di::DeregMrReply reply{};
    int page = -1;
    const int err = state.control.call(di::Opcode::DeregMr, &request, sizeof(request), &reply,
                                       sizeof(reply), -1, &page);
    if (err && err != EIO) { // EIO: gone with the engine, as destroy() takes it
        if (page >= 0)
            ::close(page);
        return err;
    }
    state.grant_pages.wait_for_copies(err ? di::kNoGrantSlot : reply.grant_slot, page);
    std::free(mr);
    return 0;
}

} // namespace softhca::provider
