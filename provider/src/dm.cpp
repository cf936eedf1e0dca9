// Device memory (ibv_alloc_dm(3)): memory of the card's — an engine memfd this process
// maps — that the application copies to and from with ibv_memcpy_to_dm/_from_dm and
// registers with ibv_reg_dm_mr (zero-based). Copies must be 4-byte aligned in offset and
// length, as a ConnectX's, and inside the allocation.
#include "provider.hpp"

#include <cstdlib>
#include <cstring>
#include <new>
#include <sys/mman.h>
#include <unistd.h>

namespace softhca::provider {

namespace di = device_interface;

namespace {

struct Dm {
    ibv_dm ibv; // must be first
    uint8_t* map = nullptr;
    uint64_t bytes = 0;  // mapped
    uint64_t length = 0; // allocated
};

Dm* to_dm(ibv_dm* dm) {
    return reinterpret_cast<Dm*>(dm);
}

bool valid_copy(const Dm& dm, uint64_t offset, size_t length) {
    return offset % 4 == 0 && length % 4 == 0 && offset <= dm.length &&
           length <= dm.length - offset;
}

int memcpy_to_dm(ibv_dm* ibdm, uint64_t offset, const void* host, size_t length) {
    Dm& dm = *to_dm(ibdm);
    if (!valid_copy(dm, offset, length))
        return EINVAL;
    std::memcpy(dm.map + offset, host, length);
    return 0;
}

int memcpy_from_dm(void* host, ibv_dm* ibdm, uint64_t offset, size_t length) {
    Dm& dm = *to_dm(ibdm);
    if (!valid_copy(dm, offset, length))
        return EINVAL;
    std::memcpy(host, dm.map + offset, length);
    return 0;
}

} // namespace

ibv_dm* alloc_dm(ibv_context* context, ibv_alloc_dm_attr* attr) {
    if (!attr || attr->comp_mask)
        return fail_with<ibv_dm>(EINVAL);
    auto* dm = new (std::nothrow) Dm{};
    if (!dm)
        return fail_with<ibv_dm>(ENOMEM);
    di::AllocDmRequest request{};
    request.length = attr->length;
    request.log_align_req = attr->log_align_req;
    di::AllocDmReply reply{};
    int fd = -1;
    ControlChannel& control = state_of(context).control;
    if (int err = control.call(di::Opcode::AllocDm, &request, sizeof(request), &reply,
                               sizeof(reply), -1, &fd)) {
        if (fd >= 0)
            ::close(fd);
        delete dm;
        return fail_with<ibv_dm>(err);
    }
    void* map = fd < 0 || reply.bytes < attr->length
                    ? MAP_FAILED
                    : ::mmap(nullptr, reply.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (fd >= 0)
        ::close(fd);
    if (map == MAP_FAILED) {
        control.destroy(di::Opcode::FreeDm, reply.dm_handle);
        delete dm;
        return fail_with<ibv_dm>(ENOMEM);
    }
    dm->map = static_cast<uint8_t*>(map);
    dm->bytes = reply.bytes;
    dm->length = attr->length;
    dm->ibv.context = context;
    dm->ibv.memcpy_to_dm = memcpy_to_dm;
    dm->ibv.memcpy_from_dm = memcpy_from_dm;
    dm->ibv.handle = reply.dm_handle;
    return &dm->ibv;
}

int free_dm(ibv_dm* ibdm) {
    Dm* dm = to_dm(ibdm);
    if (int err = state_of(ibdm->context).control.destroy(di::Opcode::FreeDm, ibdm->handle))
        return err; // EBUSY while MRs are registered on it
    ::munmap(dm->map, dm->bytes);
    delete dm;
    return 0;
}

ibv_mr* reg_dm_mr(ibv_pd* pd, ibv_dm* ibdm, uint64_t offset, size_t length, unsigned int access) {
    // As reg_mr's: calloc, freed by dereg_mr.
    auto* mr = static_cast<Mr*>(std::calloc(1, sizeof(Mr)));
    if (!mr)
        return fail_with<ibv_mr>(ENOMEM);
    di::RegDmMrRequest request{};
    request.offset = offset;
    request.length = length;
    request.pd_handle = to_pd(pd)->handle;
    request.dm_handle = ibdm->handle;
    request.access = access;
    di::RegMrReply reply{};
    if (int err = state_of(pd->context)
                      .control.call(di::Opcode::RegDmMr, &request, sizeof(request), &reply,
                                    sizeof(reply))) {
        std::free(mr);
        return fail_with<ibv_mr>(err);
    }
    Dm& dm = *to_dm(ibdm);
    mr->handle = reply.mr_handle;
    mr->vmr.mr_type = SOFTHCA_IBV_MR_TYPE_MR;
    mr->vmr.access = static_cast<int>(access);
    mr->vmr.ibv_mr.context = pd->context;
    mr->vmr.ibv_mr.pd = pd;
    mr->vmr.ibv_mr.length = length;
    mr->vmr.ibv_mr.lkey = reply.lkey;
    mr->vmr.ibv_mr.rkey = reply.rkey;
    mr->vmr.ibv_mr.handle = reply.mr_handle;
    // Zero-based: work requests name its bytes from 0; small sends may be gathered
    // from the mapping here.
    mr->iova = 0;
    mr->addr = reinterpret_cast<uintptr_t>(dm.map) + offset;
    mr->length = length;
    state_of(pd->context).mrs.add(reply.lkey, 0, mr->addr, length);
    return &mr->vmr.ibv_mr;
}

} // namespace softhca::provider
