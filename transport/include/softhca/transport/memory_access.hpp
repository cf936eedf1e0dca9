// How the transport touches registered memory: through this interface only, so the
// transport does no I/O itself. The engine implements it over other processes' memory;
// tests implement it over local buffers. Every call checks the key, the rights and the
// bounds (IBTA 10.6, memory protection) before touching anything.
#pragma once

#include "softhca/transport/work_requests.hpp"

#include <cstdint>

namespace softhca::transport {

enum class MemoryStatus : uint8_t {
    Ok,
    BadKey,     // no such key, or a key of another PD
    NoAccess,   // the region lacks the rights asked for
    OutOfRange, // outside the region
    Fault,      // the memory behind the region is gone
    Gone,       // the process owning the memory has exited: the QP is going away too
    Misaligned, // an atomic's address in the memory (not only its iova) is not 8-aligned
};

// Rights asked for, numerically the verbs access flags.
namespace access {
constexpr uint32_t kLocalWrite = 1;
constexpr uint32_t kRemoteWrite = 2;
constexpr uint32_t kRemoteRead = 4;
constexpr uint32_t kRemoteAtomic = 8;
} // namespace access

// One contiguous piece of a scatter/gather transfer: `length` bytes at `addr` of the
// region `key`, to or from `buffer_offset` in the packet's buffer.
struct MemoryPiece {
    uint32_t key;
    uint32_t length;
    uint64_t addr;
    uint32_t buffer_offset;
};

class MemoryAccess {
  public:
    virtual ~MemoryAccess() = default;
    // `remote` selects rkey (true) or lkey (false) lookup.
    virtual MemoryStatus check(uint32_t key, bool remote, uint32_t rights, uint64_t addr,
                               uint64_t length) = 0;
    virtual MemoryStatus read(uint32_t key, bool remote, uint32_t rights, uint64_t addr, void* dst,
                              uint32_t length) = 0;
    virtual MemoryStatus write(uint32_t key, bool remote, uint32_t rights, uint64_t addr,
                               const void* src, uint32_t length) = 0;
    // Local (lkey) transfers of several pieces at once, so an implementation can move
    // them in one operation. The defaults do one read()/write() per piece.
    virtual MemoryStatus read_pieces(const MemoryPiece* pieces, uint32_t count, uint8_t* buffer);
    virtual MemoryStatus write_pieces(const MemoryPiece* pieces, uint32_t count,
                                      const uint8_t* buffer);
    // Part of a message that is read whole, piece after piece: the requester's packets
    // of one send or write (local keys, `remote` false), a responder's read response
    // packets (one rkey). `tag` names the message among those in progress; the piece is
    // [offset, offset + length) of the `message_length` bytes `sge` lists. An
    // implementation may read further ahead in one operation and serve later pieces of
    // the same tag from what it read, until forget_message(tag): the data of a request
    // cannot legally change while it is outstanding. The default reads just the piece.
    virtual MemoryStatus read_message(uint64_t tag, bool remote, uint32_t rights, const Sge* sge,
                                      uint32_t num_sge, uint32_t message_length, uint32_t offset,
                                      uint8_t* dst, uint32_t length);
    // Whether a small received message (all of it for [addr, addr + length) of region
    // `lkey`, at most kStagedReceiveBytes) should travel in its completion, to be copied
    // into place by whoever consumes it, instead of being written now. Answers true only
    // when that range is valid for a local write, and then sets `place` to where the
    // consumer must copy it (the address in its own address space of `addr`, which an MR
    // registered at another IOVA names differently). The default writes at once.
    virtual bool stages_receive(uint32_t /*lkey*/, uint64_t /*addr*/, uint32_t /*length*/,
                                uint64_t& /*place*/) {
        return false;
    }
    // The write just made placed the last bytes of a message: an RDMA WRITE's, a READ
    // response's, a received SEND's. An HCA places a packet's bytes in ascending address
    // order, packet after packet, so a CPU that polls a message's last byte sees every
    // other (perftest's write_lat, NCCL's FIFO). An implementation that places bytes
    // later, or with copies that promise no order, must make the last 8 visible after the
    // rest of the message. The default writes at once, in order: nothing to do.
    virtual void end_message() {}
    // kEveryMessage forgets them all (the QP was reset or flushed).
    virtual void forget_message(uint64_t /*tag*/) {}
    static constexpr uint64_t kEveryMessage = ~0ull;
    // 8-byte atomic at an 8-byte aligned remote address; returns the original value.
    virtual MemoryStatus atomic(uint32_t rkey, uint64_t addr, bool compare_swap,
                                uint64_t compare_add, uint64_t swap, uint64_t& original) = 0;
    // Memory windows (10.6.7). bind_window executes a BIND_MW work request of this QP;
    // invalidate a LOCAL_INV (remote false) or, at the responder, the rkey a SEND with
    // Invalidate names (remote true). Memory without windows refuses both (BadKey).
    virtual MemoryStatus bind_window(const WindowBind& bind);
    virtual MemoryStatus invalidate(uint32_t rkey, bool remote);
};

// Splits [offset, offset + length) of a scatter/gather list into at most kMaxSge pieces.
// Returns the number of pieces, or -1 when the list is shorter than that.
int split_pieces(const Sge* sge, uint32_t num_sge, uint64_t offset, uint32_t length,
                 MemoryPiece* pieces);

// Copies `length` bytes starting `offset` bytes into a scatter/gather list.
MemoryStatus gather(MemoryAccess& memory, const Sge* sge, uint32_t num_sge, uint64_t offset,
                    uint8_t* dst, uint32_t length);
MemoryStatus scatter(MemoryAccess& memory, const Sge* sge, uint32_t num_sge, uint64_t offset,
                     const uint8_t* src, uint32_t length);

} // namespace softhca::transport
