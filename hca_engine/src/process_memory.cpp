#include "process_memory.hpp"

#include <fstream>
#include <string>
#include <sys/uio.h>

namespace softhca::engine {

using transport::MemoryStatus;

MemoryStatus ProcessMemory::resolve(uint32_t key, bool remote, uint32_t rights, uint64_t addr,
                                    uint64_t length, uint64_t& process_addr) {
    const MemoryRegion* mr = context_.find_mr_by_key(key);
    if (!mr && remote)
        return resolve_window(key, rights, addr, length, process_addr);
    // The key must name an MR of this QP's PD (10.6.3.1); lkey and rkey are equal here.
    if (!mr || mr->pd_handle != pd_)
        return MemoryStatus::BadKey;
    if ((mr->access & rights) != rights)
        return MemoryStatus::NoAccess;
    if (addr < mr->iova || addr + length < addr || addr + length > mr->iova + mr->length)
        return MemoryStatus::OutOfRange;
    (void)remote;
    process_addr = mr->addr + (addr - mr->iova);
    return MemoryStatus::Ok;
}

MemoryStatus ProcessMemory::resolve_window(uint32_t rkey, uint32_t rights, uint64_t addr,
                                           uint64_t length, uint64_t& process_addr) {
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
    // Only on the error path: tell an exited (or exiting, zombie) owner from a bad page.
    // The engine will destroy the QP when it sees the owner's socket close.
    if (!gone_) {
        std::ifstream stat("/proc/" + std::to_string(pid_) + "/stat");
        std::string text;
        std::getline(stat, text);
        const auto paren = text.rfind(')');
        gone_ = !stat || paren == std::string::npos || paren + 2 >= text.size() ||
                text[paren + 2] == 'Z' || text[paren + 2] == 'X';
    }
    ++faults_;
    return gone_ ? MemoryStatus::Gone : MemoryStatus::Fault;
}

MemoryStatus ProcessMemory::check(uint32_t key, bool remote, uint32_t rights, uint64_t addr,
                                  uint64_t length) {
    uint64_t ignored;
    return resolve(key, remote, rights, addr, length, ignored);
}

MemoryStatus ProcessMemory::read(uint32_t key, bool remote, uint32_t rights, uint64_t addr,
                                 void* dst, uint32_t length) {
    uint64_t at = 0;
    if (MemoryStatus s = resolve(key, remote, rights, addr, length, at); s != MemoryStatus::Ok)
        return s;
    iovec local{dst, length};
    iovec far{reinterpret_cast<void*>(at), length};
    if (::process_vm_readv(pid_, &local, 1, &far, 1, 0) != static_cast<ssize_t>(length))
        return failure();
    return MemoryStatus::Ok;
}

MemoryStatus ProcessMemory::write(uint32_t key, bool remote, uint32_t rights, uint64_t addr,
                                  const void* src, uint32_t length) {
    uint64_t at = 0;
    if (MemoryStatus s = resolve(key, remote, rights, addr, length, at); s != MemoryStatus::Ok)
        return s;
    iovec local{const_cast<void*>(src), length};
    iovec far{reinterpret_cast<void*>(at), length};
    if (::process_vm_writev(pid_, &local, 1, &far, 1, 0) != static_cast<ssize_t>(length))
        return failure();
    return MemoryStatus::Ok;
}

MemoryStatus ProcessMemory::transfer(const transport::MemoryPiece* pieces, uint32_t count,
                                     uint8_t* buffer, bool to_process) {
    iovec local[transport::kMaxSge];
    iovec far[transport::kMaxSge];
    ssize_t total = 0;
    const uint32_t rights = to_process ? transport::access::kLocalWrite : 0;
    for (uint32_t i = 0; i < count && i < transport::kMaxSge; ++i) {
        uint64_t at = 0;
        const transport::MemoryPiece& p = pieces[i];
        if (MemoryStatus s = resolve(p.key, false, rights, p.addr, p.length, at);
            s != MemoryStatus::Ok)
            return s;
        local[i] = {buffer + p.buffer_offset, p.length};
        far[i] = {reinterpret_cast<void*>(at), p.length};
        total += p.length;
    }
    const ssize_t moved = to_process ? ::process_vm_writev(pid_, local, count, far, count, 0)
                                     : ::process_vm_readv(pid_, local, count, far, count, 0);
    return moved == total ? MemoryStatus::Ok : failure();
}

MemoryStatus ProcessMemory::read_pieces(const transport::MemoryPiece* pieces, uint32_t count,
                                        uint8_t* buffer) {
    return transfer(pieces, count, buffer, false);
}

MemoryStatus ProcessMemory::write_pieces(const transport::MemoryPiece* pieces, uint32_t count,
                                         const uint8_t* buffer) {
    return transfer(pieces, count, const_cast<uint8_t*>(buffer), true);
}

MemoryStatus ProcessMemory::atomic(uint32_t rkey, uint64_t addr, bool compare_swap,
                                   uint64_t compare_add, uint64_t swap, uint64_t& original) {
    // Atomic with respect to every other operation of this engine, which runs them one
    // at a time (IBV_ATOMIC_HCA), not with respect to the application's CPU accesses.
    uint64_t value = 0;
    if (MemoryStatus s = read(rkey, true, transport::access::kRemoteAtomic, addr, &value, 8);
        s != MemoryStatus::Ok)
        return s;
    original = value;
    value = compare_swap ? (value == compare_add ? swap : value) : value + compare_add;
    if (compare_swap && original != compare_add)
        return MemoryStatus::Ok;
    return write(rkey, true, transport::access::kRemoteAtomic, addr, &value, 8);
}

} // namespace softhca::engine
