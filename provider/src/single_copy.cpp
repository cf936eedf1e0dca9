#include "single_copy.hpp"

#include "provider.hpp"
#include "work_queue.hpp"

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

namespace softhca::provider {

namespace di = device_interface;

namespace {

di::GrantWord* map_page(int fd) {
    struct stat st {};
    if (::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < di::kGrantPageBytes)
        return nullptr;
    void* at = ::mmap(nullptr, di::kGrantPageBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    return at == MAP_FAILED ? nullptr : static_cast<di::GrantWord*>(at);
}

uint64_t now_ns() {
    timespec t{};
    ::clock_gettime(CLOCK_MONOTONIC, &t);
    return uint64_t(t.tv_sec) * 1'000'000'000 + uint64_t(t.tv_nsec);
}

uint64_t now_ms() {
    return now_ns() / 1'000'000;
}

// A request at least this large, behind earlier requests of the QP that the engine has
// not finished, waits for them inside ibv_post_send rather than go the engine's way, for
// about what one copy of it takes (a byte a nanosecond over 8, 20 us at least, 500 us at
// most): the engine's way costs two copies on the engine's core, while the earlier ones
// (a rendezvous's small SENDs, an atomic) usually retire within the engine's next rounds,
// or its wake-up. The wait ends as soon as they have; what is still outstanding then goes
// the engine's way, as before.
constexpr uint64_t kPlaceWaitBytes = 64 * 1024;
uint64_t place_wait_ns(uint64_t total) {
    return std::clamp<uint64_t>(total / 8, 20'000, 500'000);
}

// Whether every request before the QP's engine_tail has retired, waiting for that as
// said above when `may_wait`. `completed` is the ring's sq_completed as the caller read
// it. The requests this post wrote before the current one are published first (the engine
// cannot retire what it has not seen), as an HCA starts on a list's first requests before
// the post returns.
bool earlier_requests_done(Qp& qp, uint64_t completed, uint64_t total, bool may_wait) {
    const uint64_t tail = qp.grants.engine_tail;
    if (completed >= tail)
        return true;
    if (total < kPlaceWaitBytes || !may_wait)
        return false;
    if (qp.ring->sq_producer.load(std::memory_order_relaxed) < qp.sq_next) {
        qp.ring->sq_producer.store(qp.sq_next, std::memory_order_release);
        ring_doorbell(qp.ring, qp.doorbell);
    }
    const uint64_t deadline = now_ns() + place_wait_ns(total);
    for (uint32_t spin = 1;; ++spin) {
        if (qp.ring->sq_completed.load(std::memory_order_acquire) >= tail)
            return true;
        if (now_ns() >= deadline)
            return false;
        if (spin % 16 == 0)
            ::sched_yield(); // on few cores the engine needs this one to retire them
    }
}

// The grant of `rkey` for `access`: from the cache, or asked of the engine. nullptr when
// there is none (the request goes the engine's way).
QpGrants::Grant* find_grant(Qp& qp, uint32_t rkey, uint32_t access) {
    QpGrants& g = qp.grants;
    for (QpGrants::Grant& grant : g.cache) {
        if (grant.refused && grant.rkey == rkey && grant.access == access)
            return nullptr;
        if (grant.valid && grant.rkey == rkey && (grant.access & access))
            return &grant;
    }
    ContextState& state = state_of(qp.vqp.qp.context);
    di::GrantRequest request{};
    request.qp_handle = qp.handle;
    request.rkey = rkey;
    request.access = access;
    di::GrantReply reply{};
    int fd = -1;
    const int err = state.control.call(di::Opcode::GrantRemoteMemory, &request, sizeof(request),
                                       &reply, sizeof(reply), -1, &fd);
    if (err) {
        if (fd >= 0)
            ::close(fd);
        // EACCES and ENOSPC are for this rkey: the engine's way reports what an HCA would.
        if (err == EOPNOTSUPP || err == EPERM || err == EIO ||
            ++g.refusals > QpGrants::kMostRefusals)
            g.off = true;
        if (err == EACCES) { // keys are not reused: this one stays refused (until modify_qp)
            QpGrants::Grant& refused = g.cache[g.next_victim++ % g.cache.size()];
            refused = {};
            refused.rkey = rkey;
            refused.access = access;
            refused.refused = true;
        }
        return nullptr;
    }
    // The page comes once to a context; later grants name it by id.
    di::GrantWord* page = state.grant_pages.page(reply.page_id, fd);
    if (!page || reply.mr_slot >= di::kGrantSlots || reply.qp_slot >= di::kGrantSlots ||
        reply.pid <= 0) {
        g.off = true;
        return nullptr;
    }
    QpGrants::Grant& grant = g.cache[g.next_victim++ % g.cache.size()];
    grant = {rkey,
             reply.access,
             reply.iova,
             reply.length,
             reply.addr,
             reply.pid,
             page + reply.mr_slot,
             page + reply.qp_slot,
             reply.mr_generation,
             reply.qp_generation,
             true};
    return (grant.access & access) ? &grant : nullptr;
}

} // namespace

GrantPages::~GrantPages() {
    for (auto& [id, page] : pages_)
        ::munmap(page, di::kGrantPageBytes);
    if (own_)
        ::munmap(own_, di::kGrantPageBytes);
}

di::GrantWord* GrantPages::page(uint64_t id, int fd) {
    std::lock_guard<std::mutex> guard(lock_);
    if (auto it = pages_.find(id); it != pages_.end()) {
        if (fd >= 0)
            ::close(fd);
        return it->second;
    }
    if (fd < 0)
        return nullptr;
    di::GrantWord* page = pages_.size() < kMostPages ? map_page(fd) : nullptr;
    ::close(fd);
    if (page)
        pages_.emplace(id, page);
    return page;
}

void GrantPages::wait_for_copies(uint32_t slot, int fd) {
    if (fd < 0)
        return;
    if (slot == di::kNoGrantSlot) {
        ::close(fd);
        return;
    }
    di::GrantWord* own = nullptr;
    {
        std::lock_guard<std::mutex> guard(lock_);
        if (!own_)
            own_ = map_page(fd);
        own = own_;
    }
    ::close(fd);
    if (!own || slot >= di::kGrantSlots)
        return;
    // The generation is raised: no copy begins any more. Those that began before have
    // their count in the word until they are done.
    const uint64_t deadline = now_ms() + di::kDeregWaitMs;
    while ((own[slot].load(std::memory_order_seq_cst) & di::kGrantCopiesMask) != 0 &&
           now_ms() < deadline)
        ::sched_yield();
}

bool place_rdma(Qp& qp, const ibv_send_wr& wr, uint64_t total, uint64_t completed, bool may_wait) {
    static const bool enabled = switch_on("SOFTHCA_SINGLE_COPY");
    QpGrants& g = qp.grants;
    const bool write = wr.opcode == IBV_WR_RDMA_WRITE || wr.opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
    if (!enabled || g.off || (!write && wr.opcode != IBV_WR_RDMA_READ) ||
        qp.vqp.qp.qp_type != IBV_QPT_RC || total == 0 || wr.num_sge > kMostSges)
        return false;
    // The engine has the QP in RTS; a small request behind unfinished ones goes the
    // engine's way at once (a large one may wait for them, below, once it has a grant).
    if (qp.ring->engine_state.load(std::memory_order_acquire) != IBV_QPS_RTS ||
        (completed < g.engine_tail && total < kPlaceWaitBytes))
        return false;
    // The local side, which an HCA checks first (LOC_PROT_ERR otherwise: the engine's).
    iovec local[kMostSges];
    int pieces = 0;
    const MrDirectory& mrs = state_of(qp.vqp.qp.context).mrs;
    const uint32_t qp_pd = to_pd(qp.vqp.qp.pd)->handle;
    for (int i = 0; i < wr.num_sge; ++i) {
        const ibv_sge& sge = wr.sg_list[i];
        if (!sge.length)
            continue;
        bool writable = false;
        uint32_t pd = 0;
        const void* at = mrs.locate(sge.lkey, sge.addr, sge.length, &writable, &pd);
        if (!at || (!write && !writable) || pd != qp_pd)
            return false;
        local[pieces++] = {const_cast<void*>(at), sge.length};
    }
    const uint32_t access = write ? di::kGrantWrite : di::kGrantRead;
    QpGrants::Grant* grant = find_grant(qp, wr.wr.rdma.rkey, access);
    if (!grant)
        return false;
    // The remote range, inside the MR granted (the engine NAKs what is not).
    const uint64_t at = wr.wr.rdma.remote_addr;
    if (at < grant->iova || at - grant->iova > grant->length ||
        grant->length - (at - grant->iova) < total)
        return false;
    const uint64_t far = grant->addr + (at - grant->iova);
    // In order: every earlier request the engine moves has retired (its responder has
    // executed it), and none of them failed: a QP that went to error (or was reset or
    // drained) meanwhile says so in the ring before sq_completed passes them.
    if (!earlier_requests_done(qp, completed, total, may_wait) ||
        qp.ring->engine_state.load(std::memory_order_acquire) != IBV_QPS_RTS)
        return false;
    // A copy under way is counted in the MR's word; the generations say whether the
    // grant still holds (grant_page.hpp).
    const uint64_t word = grant->mr_word->fetch_add(1, std::memory_order_seq_cst);
    bool moved = false;
    if (di::grant_generation(word) == grant->mr_generation &&
        di::grant_generation(grant->qp_word->load(std::memory_order_seq_cst)) ==
            grant->qp_generation) {
        // A WRITE's last 8 bytes go in a copy of their own, after the rest: a poller of
        // the last word sees the whole message (docs/memory-model.md, placement order).
        iovec remote[2];
        int remote_count = 1;
        remote[0] = {reinterpret_cast<void*>(far), total};
        if (write && total > 8) {
            remote[0].iov_len = total - 8;
            remote[1] = {reinterpret_cast<void*>(far + total - 8), 8};
            remote_count = 2;
        }
        const ssize_t n =
            write ? ::process_vm_writev(grant->pid, local, pieces, remote, remote_count, 0)
                  : ::process_vm_readv(grant->pid, local, pieces, remote, remote_count, 0);
        moved = n == static_cast<ssize_t>(total);
        if (n < 0 && (errno == EPERM || errno == ESRCH))
            g.off = true; // the kernel says no, or the process is gone: the engine's way
    } else {
        grant->valid = false; // revoked: asked again next time
    }
    grant->mr_word->fetch_sub(1, std::memory_order_seq_cst);
    return moved;
}

} // namespace softhca::provider
