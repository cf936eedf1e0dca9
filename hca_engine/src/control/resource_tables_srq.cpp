// ContextResources: shared receive queues, XRC domains and multicast attachment.
#include "client_descriptors.hpp"
#include "engine_qp.hpp"
#include "engine_srq.hpp"
#include "resource_tables.hpp"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

namespace softhca::engine {

namespace di = device_interface;

int ContextResources::create_srq(const di::CreateSrqRequest& request, EngineSrq*& srq) {
    constexpr uint32_t kSrqBasic = 0, kSrqXrc = 1; // enum ibv_srq_type
    if (request.srq_type != kSrqBasic && request.srq_type != kSrqXrc)
        return EOPNOTSUPP; // tag matching
    auto pd = pds_.find(request.pd_handle);
    if (pd == pds_.end())
        return EINVAL;
    // An XRC SRQ belongs to an XRC domain and completes into a CQ of its own.
    EngineSrq::Xrc xrc;
    XrcdHandle* xrcd = nullptr;
    if (request.srq_type == kSrqXrc) {
        auto found_xrcd = xrcds_.find(request.xrcd_handle);
        auto cq = cqs_.find(request.cq_handle);
        if (found_xrcd == xrcds_.end() || cq == cqs_.end())
            return EINVAL;
        xrcd = &found_xrcd->second;
        xrc = {&cq->second, request.xrcd_handle, xrcd->domain};
    }
    if (request.max_wr < 1 || request.max_wr > SrqLimits::kMaxSrqWr ||
        request.max_sge > SrqLimits::kMaxSrqSge)
        return EINVAL;
    const uint32_t max_wr = std::bit_ceil(request.max_wr);
    if (request.srq_limit > max_wr)
        return EINVAL;
    if (keys_.srqs >= SrqLimits::kMaxSrq)
        return ENOMEM;
    const uint32_t handle = next_handle_++;
    auto created = std::make_unique<EngineSrq>(
        handle, keys_.next_srq_num(), *this, request.pd_handle, max_wr,
        std::max<uint32_t>(request.max_sge, 1), request.user_handle, xrc);
    const uint32_t slot = doorbells_.assign(created.get());
    int err = created->create_ring(slot);
    if (!err)
        err = admit({.srqs = 1, .bytes = created->engine_bytes()});
    if (err) {
        doorbells_.release(slot);
        return err;
    }
    created->queue().arm_limit(request.srq_limit);
    srq = created.get();
    srqs_.emplace(handle, std::move(created));
    keys_.srqs_by_device[device_][srq->srq_num()] = srq;
    ++pd->second.srq_count;
    if (xrcd) {
        ++xrcd->users;
        ++xrc.cq->qp_count;
    }
    ++keys_.srqs;
    charge({.srqs = 1, .bytes = srq->engine_bytes()});
    return 0;
}

int ContextResources::modify_srq(const di::ModifySrqRequest& request, EngineSrq*& srq,
                                 bool& new_ring) {
    srq = find_srq(request.srq_handle);
    if (!srq)
        return EINVAL;
    // A resize's new ring is charged in place of the old, and must fit the caps first
    // (ENOMEM, nothing changed), as a CQ's resize.
    const uint64_t before = srq->engine_bytes();
    constexpr uint32_t kMaxWr = 1; // IBV_SRQ_MAX_WR
    if ((request.attr_mask & kMaxWr) && request.max_wr >= 1 &&
        request.max_wr <= SrqLimits::kMaxSrqWr) {
        const uint64_t after = srq->engine_bytes_at(std::bit_ceil(request.max_wr));
        if (after > before)
            if (int err = admit({.bytes = after - before}))
                return err;
    }
    const int err = srq->modify(request.attr_mask, request.max_wr, request.srq_limit, new_ring);
    uncharge({.bytes = before});
    charge({.bytes = srq->engine_bytes()});
    return err;
}

int ContextResources::destroy_srq(uint32_t handle) {
    auto it = srqs_.find(handle);
    if (it == srqs_.end())
        return EINVAL;
    EngineSrq& srq = *it->second;
    if (srq.qp_count)
        return EBUSY; // QPs still receive from it (ib_destroy_srq refuses)
    keys_.srqs_by_device[device_].erase(srq.srq_num());
    --pds_.at(srq.pd_handle()).srq_count;
    if (srq.xrc_cq()) {
        --srq.xrc_cq()->qp_count;
        --xrcds_.at(srq.xrc().xrcd_handle).users;
        // XRC targets of any context may be in a message into it: they let go first.
        for (auto& [qpn, qp] : keys_.qps_by_device[device_])
            if (qp->type() == transport::QpType::XrcRecv)
                qp->transport().forget_srq(srq.queue());
    }
    uncharge({.srqs = 1, .bytes = srq.engine_bytes()});
    doorbells_.release(srq.doorbell_slot());
    srqs_.erase(it);
    --keys_.srqs;
    return 0;
}

EngineSrq* ContextResources::find_srq(uint32_t handle) {
    auto it = srqs_.find(handle);
    return it == srqs_.end() ? nullptr : it->second.get();
}

int ContextResources::attach_mcast(uint32_t qp_handle, const uint8_t* gid) {
    EngineQp* qp = find_qp(qp_handle);
    if (!qp || qp->type() != transport::QpType::UD)
        return EINVAL;
    transport::Gid g;
    std::memcpy(g.data(), gid, g.size());
    if (int err = admit({.attachments = 1}))
        return err;
    const int err = keys_.mcast_by_device[device_].attach(g, qp);
    if (err == 0) {
        ++attachments_;
        charge({.attachments = 1});
    }
    return err;
}

int ContextResources::detach_mcast(uint32_t qp_handle, const uint8_t* gid) {
    EngineQp* qp = find_qp(qp_handle);
    if (!qp)
        return EINVAL;
    transport::Gid g;
    std::memcpy(g.data(), gid, g.size());
    const int err = keys_.mcast_by_device[device_].detach(g, qp);
    if (err == 0 && attachments_) {
        --attachments_;
        uncharge({.attachments = 1});
    }
    return err;
}

int KeySpace::open_xrc_domain(size_t device, int fd, uint32_t oflags, uid_t account,
                              uint32_t& domain) {
    // The file's identity (device and inode) from what the kernel holds, asking the file
    // nothing (client_descriptors.hpp): an fstat of a FUSE file would ask its daemon,
    // which the client may run and never answer, or be refused to the engine, which is
    // not of the mount's user namespace. The kernel's ib_uverbs_open_xrcd asks the file
    // nothing either.
    struct stat st {};
    if (fd >= 0 && !descriptor_identity(fd, st.st_dev, st.st_ino))
        return EBADF;
    // The kernel's ib_uverbs_open_xrcd takes the file with fdget, which refuses an O_PATH
    // descriptor (EBADF): one can be had for a file its holder may not open, and it
    // would let them into a domain of that file's owner.
    if (fd >= 0) {
        const int status = ::fcntl(fd, F_GETFL);
        if (status < 0 || (status & O_PATH))
            return EBADF;
    }
    if (fd >= 0) {
        for (auto& [id, d] : xrc_domains_) {
            if (d.device != device || !d.has_inode || d.dev != st.st_dev || d.ino != st.st_ino)
                continue;
            if (oflags & O_EXCL)
                return EINVAL; // ibv_open_xrcd(3): O_EXCL fails on an existing domain
            ++d.opened;
            domain = id;
            return 0;
        }
        if (!(oflags & O_CREAT))
            return EINVAL; // none yet, and not asked to create one
    }
    XrcDomain d;
    d.device = device;
    d.has_inode = fd >= 0;
    d.dev = st.st_dev;
    d.ino = st.st_ino;
    // Hold the file while the domain lives: an inode number names the file only while
    // the inode exists; once the file were deleted and the number reused, another
    // user's new file would join this domain.
    d.file = fd >= 0 ? ::fcntl(fd, F_DUPFD_CLOEXEC, 0) : -1;
    if (fd >= 0 && d.file < 0)
        return ENFILE;
    d.opened = 1;
    d.account = account;
    domain = next_xrc_domain_++;
    xrc_domains_.emplace(domain, d);
    return 0;
}

void KeySpace::close_xrc_domain(uint32_t domain) {
    auto it = xrc_domains_.find(domain);
    if (it != xrc_domains_.end() && --it->second.opened == 0) {
        close_client_descriptor(it->second.file, it->second.account); // the file (-1: none)
        xrc_domains_.erase(it);
    }
}

int ContextResources::open_xrcd(int fd, uint32_t oflags, uint32_t& handle) {
    uint32_t domain = 0;
    if (int err =
            keys_.open_xrc_domain(device_, fd, oflags, client_->stall_owner().account, domain))
        return err;
    handle = next_handle_++;
    xrcds_.emplace(handle, XrcdHandle{domain, 0});
    return 0;
}

int ContextResources::close_xrcd(uint32_t handle) {
    auto it = xrcds_.find(handle);
    if (it == xrcds_.end())
        return EINVAL;
    if (it->second.users)
        return EBUSY; // SRQs or target QPs still in it
    keys_.close_xrc_domain(it->second.domain);
    xrcds_.erase(it);
    return 0;
}

EngineSrq* ContextResources::find_xrc_srq(uint32_t srqn, uint32_t domain) const {
    const auto& srqs = keys_.srqs_by_device[device_];
    auto it = srqs.find(srqn);
    if (it == srqs.end() || !it->second->xrc_cq() || it->second->xrc().domain != domain)
        return nullptr; // no such SRQ, a basic one, or one of another domain
    return it->second;
}

} // namespace softhca::engine
