#include "process_memory.hpp"

#include "environment.hpp"
#include "memory_guard.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <sys/uio.h>

namespace softhca::engine {

using transport::MemoryStatus;

ProcessMemory::ProcessMemory(MemoryKeys& context, uint32_t pd_handle)
    : client_(context.client()), context_(context), pd_(pd_handle) {}

MemoryStatus ProcessMemory::resolve(uint32_t key, bool remote, uint32_t rights, uint64_t addr,
                                    uint64_t length, uint64_t& process_addr, uint8_t** local) {
    if (key != cached_key_ || context_.mr_generation() != cached_generation_) {
        cached_key_ = key;
        cached_generation_ = context_.mr_generation();
        cached_mr_ = context_.find_mr_by_key(key);
    }
    const MemoryRegion* mr = cached_mr_;
    if (!mr && remote)
        return resolve_window(key, rights, addr, length, process_addr, local);
    // The key must name an MR of this QP's PD (10.6.3.1); lkey and rkey are equal here.
    if (!mr || mr->pd_handle != pd_)
        return MemoryStatus::BadKey;
    if ((mr->access & rights) != rights)
        return MemoryStatus::NoAccess;
    if (addr < mr->iova || addr + length < addr || addr + length > mr->iova + mr->length)
        return MemoryStatus::OutOfRange;
    (void)remote;
    process_addr = mr->addr + (addr - mr->iova);
    if (local)
        *local = mr->local(addr);
    return MemoryStatus::Ok;
}

MemoryStatus ProcessMemory::resolve_window(uint32_t rkey, uint32_t rights, uint64_t addr,
                                           uint64_t length, uint64_t& process_addr,
                                           uint8_t** local) {
    // A memory window (10.6.7): bound, of this QP's PD, and a type 2 window only on the
    // QP it was bound on; the window's own rights and bounds, then its MR's memory.
    const MemoryWindow* mw = context_.find_window(rkey);
    if (!mw || mw->pd_handle != pd_ || (mw->type == 2 && mw->qp_num != qp_num_))
        return MemoryStatus::BadKey;
    if ((mw->access & rights) != rights)
        return MemoryStatus::NoAccess;
    if (addr < mw->addr || addr + length < addr || addr + length > mw->addr + mw->length)
        return MemoryStatus::OutOfRange;
    const MemoryRegion* mr = context_.find_mr_by_key(mw->mr_lkey);
    if (!mr)
        return MemoryStatus::BadKey;
    process_addr = mr->addr + (addr - mr->iova);
    if (local)
        *local = mr->local(addr);
    return MemoryStatus::Ok;
}

MemoryStatus ProcessMemory::bind_window(const transport::WindowBind& bind) {
    return context_.bind_mw(bind, pd_, qp_num_) == 0 ? MemoryStatus::Ok : MemoryStatus::BadKey;
}

MemoryStatus ProcessMemory::invalidate(uint32_t rkey, bool remote) {
    return context_.invalidate_mw(rkey, pd_, qp_num_, remote) == 0 ? MemoryStatus::Ok
                                                                   : MemoryStatus::BadKey;
}

MemoryStatus ProcessMemory::failure() {
    // Only on the error path. An address space gone with nothing left holding the
    // context (the process exited, its socket hung up): the engine destroys its QPs when
    // it reads that hang-up, and meanwhile nothing answers, as from a destroyed QP
    // (Gone). An address space gone while the context is held on (the process exec'd,
    // or a forked child keeps the socket), or a bad page: the access fails, the QP
    // errors and the peer gets a NAK (Fault).
    if (!gone_)
        gone_ = client_.gone() && client_.abandoned();
    ++faults_;
    return gone_ ? MemoryStatus::Gone : MemoryStatus::Fault;
}

MemoryStatus ProcessMemory::check(uint32_t key, bool remote, uint32_t rights, uint64_t addr,
                                  uint64_t length) {
    uint64_t ignored;
    return resolve(key, remote, rights, addr, length, ignored, nullptr);
}

bool ProcessMemory::stages_receive(uint32_t lkey, uint64_t addr, uint32_t length, uint64_t& place) {
    static const bool enabled = environment_switch_on("SOFTHCA_STAGE_RECEIVES");
    uint8_t* mapped = nullptr;
    return enabled &&
           resolve(lkey, false, transport::access::kLocalWrite, addr, length, place, &mapped) ==
               transport::MemoryStatus::Ok &&
           !mapped;
}

bool ProcessMemory::read_process(uint64_t at, void* dst, uint32_t length) {
    flush_writes_now(); // reads see every write accepted before them
    iovec local{dst, length};
    return client_.read(&local, 1, at) == static_cast<ssize_t>(length);
}

MemoryStatus ProcessMemory::read(uint32_t key, bool remote, uint32_t rights, uint64_t addr,
                                 void* dst, uint32_t length) {
    uint64_t at = 0;
    uint8_t* mapped = nullptr;
    if (MemoryStatus s = resolve(key, remote, rights, addr, length, at, &mapped);
        s != MemoryStatus::Ok)
        return s;
    if (mapped ? !guarded_copy(dst, mapped, length) : !read_process(at, dst, length))
        return failure();
    return MemoryStatus::Ok;
}

MemoryStatus ProcessMemory::write(uint32_t key, bool remote, uint32_t rights, uint64_t addr,
                                  const void* src, uint32_t length) {
    uint64_t at = 0;
    uint8_t* mapped = nullptr;
    if (MemoryStatus s = resolve(key, remote, rights, addr, length, at, &mapped);
        s != MemoryStatus::Ok)
        return s;
    last_write_queued_ = false;
    if (mapped) {
        if (!guarded_copy_ascending(mapped, src, length))
            return failure();
    } else if (length) {
        queue_write(reinterpret_cast<void*>(at), src, length);
        last_write_queued_ = true;
    }
    return MemoryStatus::Ok;
}

MemoryStatus ProcessMemory::resolve_pieces(const transport::MemoryPiece* pieces, uint32_t count,
                                           bool remote, uint32_t rights, ResolvedPieces& out) {
    out.count = std::min(count, transport::kMaxSge);
    out.mapped = true;
    out.bytes = 0;
    for (uint32_t i = 0; i < out.count; ++i) {
        const transport::MemoryPiece& p = pieces[i];
        if (MemoryStatus s =
                resolve(p.key, remote, rights, p.addr, p.length, out.process[i], &out.local[i]);
            s != MemoryStatus::Ok)
            return s;
        out.mapped = out.mapped && out.local[i];
        out.bytes += p.length;
    }
    return MemoryStatus::Ok;
}

MemoryStatus ProcessMemory::transfer(const transport::MemoryPiece* pieces, uint32_t count,
                                     uint8_t* buffer, bool to_process, bool remote,
                                     uint32_t rights) {
    ResolvedPieces r;
    if (MemoryStatus s = resolve_pieces(pieces, count, remote, rights, r); s != MemoryStatus::Ok)
        return s;
    if (to_process || r.mapped) {
        // Shared memory is touched directly (a page the client truncated away fails the
        // transfer); writes to the rest are queued.
        last_write_queued_ = false;
        for (uint32_t i = 0; i < r.count; ++i) {
            uint8_t* packet = buffer + pieces[i].buffer_offset;
            last_write_queued_ = !r.local[i] && pieces[i].length;
            if (!r.local[i])
                queue_write(reinterpret_cast<void*>(r.process[i]), packet, pieces[i].length);
            else if (to_process ? !guarded_copy_ascending(r.local[i], packet, pieces[i].length)
                                : !guarded_copy(packet, r.local[i], pieces[i].length))
                return failure();
        }
        return MemoryStatus::Ok;
    }
    iovec local[transport::kMaxSge];
    iovec far[transport::kMaxSge];
    for (uint32_t i = 0; i < r.count; ++i) {
        local[i] = {buffer + pieces[i].buffer_offset, pieces[i].length};
        far[i] = {reinterpret_cast<void*>(r.process[i]), pieces[i].length};
    }
    flush_writes_now();
    const ssize_t moved = client_.move(false, local, far, r.count);
    if (moved != static_cast<ssize_t>(r.bytes))
        return failure();
    return MemoryStatus::Ok;
}

MemoryStatus ProcessMemory::read_pieces(const transport::MemoryPiece* pieces, uint32_t count,
                                        uint8_t* buffer) {
    return transfer(pieces, count, buffer, false, false, 0);
}

MemoryStatus ProcessMemory::write_pieces(const transport::MemoryPiece* pieces, uint32_t count,
                                         const uint8_t* buffer) {
    return transfer(pieces, count, const_cast<uint8_t*>(buffer), true, false,
                    transport::access::kLocalWrite);
}

MemoryStatus ProcessMemory::read_message(uint64_t tag, bool remote, uint32_t rights,
                                         const transport::Sge* sge, uint32_t num_sge,
                                         uint32_t message_length, uint32_t offset, uint8_t* dst,
                                         uint32_t length) {
    if (message_length <= kReadAheadMinimum)
        return MemoryAccess::read_message(tag, remote, rights, sge, num_sge, message_length, offset,
                                          dst, length);
    for (ReadAhead& a : ahead_) {
        // Bytes read ahead serve only while no MR was deregistered or re-registered
        // since: a READ response must not go on from memory whose key is gone.
        if (a.valid && a.tag == tag && offset >= a.begin && offset + length <= a.end &&
            a.generation == context_.mr_generation()) {
            std::memcpy(dst, a.bytes.get() + (offset - a.begin), length);
            return MemoryStatus::Ok;
        }
    }
    // Not read yet: from `offset` as far ahead as a buffer holds.
    const uint32_t span = std::min(kReadAheadBytes, message_length - offset);
    transport::MemoryPiece pieces[transport::kMaxSge];
    const int count =
        span < length ? -1 : transport::split_pieces(sge, num_sge, offset, span, pieces);
    if (count < 0)
        return MemoryStatus::OutOfRange;
    ResolvedPieces r;
    if (MemoryStatus s = resolve_pieces(pieces, static_cast<uint32_t>(count), remote, rights, r);
        s != MemoryStatus::Ok)
        return s;
    if (r.mapped) {
        // Shared memory needs no reading ahead: copy just this piece.
        for (uint32_t i = 0; i < r.count && pieces[i].buffer_offset < length; ++i)
            if (!guarded_copy(dst + pieces[i].buffer_offset, r.local[i],
                              std::min(pieces[i].length, length - pieces[i].buffer_offset)))
                return failure();
        return MemoryStatus::Ok;
    }
    // One read into the buffer this tag had, or the one used less recently.
    ReadAhead* slot = nullptr;
    for (ReadAhead& a : ahead_)
        if (a.valid && a.tag == tag)
            slot = &a;
    if (!slot) {
        slot = &ahead_[ahead_victim_];
        ahead_victim_ ^= 1;
    }
    slot->valid = false;
    if (!slot->bytes)
        slot->bytes.reset(new uint8_t[kReadAheadBytes]);
    if (MemoryStatus s = transfer(pieces, static_cast<uint32_t>(count), slot->bytes.get(), false,
                                  remote, rights);
        s != MemoryStatus::Ok)
        return s;
    slot->tag = tag;
    slot->generation = context_.mr_generation();
    slot->begin = offset;
    slot->end = offset + span;
    slot->valid = true;
    std::memcpy(dst, slot->bytes.get(), length);
    return MemoryStatus::Ok;
}

thread_local ProcessMemory* ProcessMemory::dirty_head_ = nullptr;

ProcessMemory::~ProcessMemory() {
    flush_writes();
    for (ProcessMemory** link = &dirty_head_; *link; link = &(*link)->next_dirty_) {
        if (*link == this) {
            *link = next_dirty_;
            break;
        }
    }
}

void ProcessMemory::queue_write(void* far, const void* local, size_t length) {
    const bool small = length <= kSmallWrite;
    // One place stays free for end_message() to split this write in two.
    if (queued_ + 1 >= kMaxQueuedWrites || (small && small_used_ + length > kSmallArena))
        flush_writes();
    if (small) {
        // Small sources (an atomic's result, a GRH) may live on the caller's stack:
        // copy them. Larger ones are received frames, valid until the flush.
        uint8_t* copy = small_ + small_used_;
        std::memcpy(copy, local, length);
        small_used_ += static_cast<uint32_t>(length);
        // A small write right behind the previous one, in the process and in the arena
        // (a stream of small RDMA WRITEs to consecutive addresses), extends it: the kernel
        // pins a page per element, so one element instead of many is most of the cost.
        if (queued_) {
            iovec& last_local = queued_local_[queued_ - 1];
            iovec& last_far = queued_far_[queued_ - 1];
            if (static_cast<uint8_t*>(last_local.iov_base) + last_local.iov_len == copy &&
                static_cast<uint8_t*>(last_far.iov_base) + last_far.iov_len == far) {
                last_local.iov_len += length;
                last_far.iov_len += length;
                queued_bytes_ += static_cast<ssize_t>(length);
                return; // already on the dirty list
            }
        }
        local = copy;
    }
    queued_far_[queued_] = {far, length};
    queued_local_[queued_] = {const_cast<void*>(local), length};
    queued_starts_run_[queued_] = 0;
    ++queued_;
    queued_bytes_ += static_cast<ssize_t>(length);
    if (!dirty_) {
        dirty_ = true;
        next_dirty_ = dirty_head_;
        dirty_head_ = this;
    }
}

void ProcessMemory::end_message() {
    // Placement order: the kernel places each element of a cross-memory write in a copy
    // of its own, in order, and the memory file each run of consecutive addresses; within
    // one copy x86 promises no order for a string copy's stores. So the message's last 8
    // bytes go last, in an element (and a run) of their own: a CPU that polls them sees
    // the rest of the message, as on an HCA.
    if (!last_write_queued_ || !queued_)
        return;
    last_write_queued_ = false;
    const uint32_t last = queued_ - 1;
    iovec& local = queued_local_[last];
    iovec& far = queued_far_[last];
    if (far.iov_len > kOrderedTail) { // queue_write left room for this
        local.iov_len -= kOrderedTail;
        far.iov_len -= kOrderedTail;
        queued_local_[queued_] = {static_cast<uint8_t*>(local.iov_base) + local.iov_len,
                                  kOrderedTail};
        queued_far_[queued_] = {static_cast<uint8_t*>(far.iov_base) + far.iov_len, kOrderedTail};
        ++queued_;
    }
    queued_starts_run_[queued_ - 1] = 1;
}

bool ProcessMemory::flush_writes() {
    if (!queued_)
        return true;
    const ssize_t moved =
        client_.move(true, queued_local_, queued_far_, queued_, queued_starts_run_);
    const bool ok = moved == queued_bytes_;
    clear_queue();
    if (!ok && failure() == MemoryStatus::Fault) {
        write_fault_ = true;
        fault_to_report_ = true;
    }
    return ok;
}

void ProcessMemory::clear_queue() {
    queued_ = 0;
    queued_bytes_ = 0;
    small_used_ = 0;
}

void ProcessMemory::flush_dirty() {
    // One pass per process, not per QP: a burst that lands in 16 QPs of one program
    // moves its consecutive runs together. If the joint call falls short (some QP's memory is
    // gone), each member flushes alone, so that the fault is its own; writing again what
    // the joint call already wrote puts the same bytes in the same place.
    thread_local iovec local[kJointWrites];
    thread_local iovec far[kJointWrites];
    thread_local uint8_t starts_run[kJointWrites];
    thread_local ProcessMemory* members[kJointWrites];
    for (ProcessMemory* lead = dirty_head_; lead; lead = lead->next_dirty_) {
        if (!lead->queued_)
            continue;
        size_t count = 0, joined = 0;
        ssize_t bytes = 0;
        for (ProcessMemory* m = lead; m; m = m->next_dirty_) {
            if (!m->queued_ || &m->client_ != &lead->client_ || count + m->queued_ > kJointWrites)
                continue;
            std::copy_n(m->queued_local_, m->queued_, local + count);
            std::copy_n(m->queued_far_, m->queued_, far + count);
            std::copy_n(m->queued_starts_run_, m->queued_, starts_run + count);
            count += m->queued_;
            bytes += m->queued_bytes_;
            members[joined++] = m;
        }
        if (joined == 1) {
            lead->flush_writes();
            continue;
        }
        const bool ok = lead->client_.move(true, local, far, count, starts_run) == bytes;
        for (size_t i = 0; i < joined; ++i) {
            if (ok)
                members[i]->clear_queue();
            else
                members[i]->flush_writes();
        }
    }
}

void ProcessMemory::flush_all_writes() {
    flush_dirty();
    while (ProcessMemory* m = dirty_head_) {
        dirty_head_ = m->next_dirty_;
        m->dirty_ = false;
        if (m->fault_to_report_) {
            m->fault_to_report_ = false;
            if (m->listener_)
                m->listener_->deferred_memory_fault();
        }
    }
}

void ProcessMemory::flush_writes_now() {
    flush_dirty();
}

bool ProcessMemory::take_write_fault() {
    const bool fault = write_fault_;
    write_fault_ = false;
    return fault;
}

void ProcessMemory::forget_message(uint64_t tag) {
    for (ReadAhead& a : ahead_)
        if (tag == kEveryMessage || a.tag == tag)
            a.valid = false;
}

MemoryStatus ProcessMemory::atomic(uint32_t rkey, uint64_t addr, bool compare_swap,
                                   uint64_t compare_add, uint64_t swap, uint64_t& original) {
    uint64_t at = 0;
    uint8_t* mapped = nullptr;
    if (MemoryStatus s =
            resolve(rkey, true, transport::access::kRemoteAtomic, addr, 8, at, &mapped);
        s != MemoryStatus::Ok)
        return s;
    // The address the atomic lands on, not just its iova, must be aligned (an MR whose
    // iova and address differ mod 8 would split a locked cmpxchg over cache lines; rxe
    // checks the translated address too).
    if (at % 8 != 0)
        return MemoryStatus::Misaligned;
    if (mapped) {
        // Shared memory: a CPU atomic, atomic against the application too.
        return guarded_atomic(reinterpret_cast<uint64_t*>(mapped), compare_swap, compare_add, swap,
                              original)
                   ? MemoryStatus::Ok
                   : failure();
    }
    // Private memory: atomic with respect to every other operation of this engine, which
    // runs them one at a time (IBV_ATOMIC_HCA), not to the application's CPU accesses.
    if (!read_process(at, &original, 8))
        return failure();
    if (compare_swap && original != compare_add)
        return MemoryStatus::Ok;
    const uint64_t value = compare_swap ? swap : original + compare_add;
    queue_write(reinterpret_cast<void*>(at), &value, 8); // small: copied
    return MemoryStatus::Ok;
}

} // namespace softhca::engine
