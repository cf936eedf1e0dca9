// The memory room: how the engine reaches application memory. It owns the client's
// pinned identity and memory file (client_process), the mappings of shared MRs
// (shared_mapping, memory_map, memory_guard), the memfds the engine shares with a
// provider (shared_memory), and this file: the one interface the transport reaches
// memory through. It uses only support/; what it needs of a context's MR table comes
// through MemoryKeys (memory_regions.hpp), which the control room implements.
//
// Registered memory of an application process, as the transport reaches it: keys are
// looked up in the owning context's MR table (so a key of another PD or process is
// simply not found), rights and bounds are checked, and bytes move with
// reads and writes of the process's memory file, never one call per packet:
// messages are read ahead (read_message) and writes are queued behind (write-behind)
// and moved in one call per receive burst. The bytes move through the context's
// ClientProcess (client_process.hpp): the address space its process opened it with,
// never whatever process has that PID now.
//
// Write-behind: write() and write_pieces() check the key, rights and bounds at once
// and queue the bytes; a source over 256 bytes (a received frame) must stay valid until
// flush_all_writes() (smaller ones are copied), which the datapath calls at the end of each receive
// burst, before it releases the frames and before any ACK is sent. Anything that could observe the
// memory flushes first: reads and atomics here, and every completion (the engine's CQ code), so no
// one sees a completion before its data.
#include <sys/uio.h>
#pragma once

#include "client_process.hpp"
#include "memory_regions.hpp"
#include "softhca/transport/memory_access.hpp"

#include <atomic>
#include <cstdint>
#include <memory>
#include <sys/types.h>
#include <utility>

namespace softhca::engine {

// Told when queued writes could not be done (the process unmapped registered memory):
// the data was already accepted, so the owner's QP must fail. Called only from
// flush_all_writes(), never from inside a transport call.
class MemoryFaultListener {
  public:
    virtual ~MemoryFaultListener() = default;
    virtual void deferred_memory_fault() = 0;
};

class ProcessMemory : public transport::MemoryAccess {
  public:
    ProcessMemory(MemoryKeys& context, uint32_t pd_handle);
    ~ProcessMemory() override;
    ProcessMemory(const ProcessMemory&) = delete;
    ProcessMemory& operator=(const ProcessMemory&) = delete;
    void set_fault_listener(MemoryFaultListener* listener) { listener_ = listener; }

    // Moves every queued write of every ProcessMemory and reports faults to their
    // listeners.
    static void flush_all_writes();
    // The same from inside a transport call (a completion about to be published): no
    // listener is called; faults wait for the next flush_all_writes().
    static void flush_writes_now();
    // A flush of this memory failed since the last call (for the completion it holds
    // back, which then reports the error).
    bool take_write_fault();
    // The QP this memory serves (type 2 memory windows are bound to one QP).
    void set_qp_num(uint32_t qp_num) { qp_num_ = qp_num; }

    transport::MemoryStatus check(uint32_t key, bool remote, uint32_t rights, uint64_t addr,
                                  uint64_t length) override;
    // Private memory (no mapping) takes a small received SEND through its completion:
    // the provider copies it in poll_cq, which spares a system call per message here.
    // SOFTHCA_STAGE_RECEIVES=0 in the engine's environment turns this off.
    bool stages_receive(uint32_t lkey, uint64_t addr, uint32_t length, uint64_t& place) override;
    transport::MemoryStatus read(uint32_t key, bool remote, uint32_t rights, uint64_t addr,
                                 void* dst, uint32_t length) override;
    transport::MemoryStatus write(uint32_t key, bool remote, uint32_t rights, uint64_t addr,
                                  const void* src, uint32_t length) override;
    // All pieces of a packet move together (one call per run of consecutive addresses).
    transport::MemoryStatus read_pieces(const transport::MemoryPiece* pieces, uint32_t count,
                                        uint8_t* buffer) override;
    transport::MemoryStatus write_pieces(const transport::MemoryPiece* pieces, uint32_t count,
                                         const uint8_t* buffer) override;
    // Reads a message ahead, up to kReadAheadBytes in one read, and serves
    // its next packets from there: one system call per 256 KiB instead of per packet.
    transport::MemoryStatus read_message(uint64_t tag, bool remote, uint32_t rights,
                                         const transport::Sge* sge, uint32_t num_sge,
                                         uint32_t message_length, uint32_t offset, uint8_t* dst,
                                         uint32_t length) override;
    // Placement order (memory-model.md): the last 8 bytes of the message just queued
    // become a write of their own, after the rest.
    void end_message() override;
    void forget_message(uint64_t tag) override;
    transport::MemoryStatus atomic(uint32_t rkey, uint64_t addr, bool compare_swap,
                                   uint64_t compare_add, uint64_t swap,
                                   uint64_t& original) override;
    transport::MemoryStatus bind_window(const transport::WindowBind& bind) override;
    transport::MemoryStatus invalidate(uint32_t rkey, bool remote) override;

    uint64_t faults() const { return faults_; }

    static constexpr uint32_t kReadAheadBytes = 256 * 1024;
    static constexpr uint32_t kMaxQueuedWrites = 128;
    // Messages up to this size are read piece by piece, as they are asked for.
    static constexpr uint32_t kReadAheadMinimum = 8 * 1024;

  private:
    // Validates and translates a (key, address) range to an address in the process.
    // `local` (if asked) is set to the engine's address of it when the MR is mapped
    // (shared_mapping.hpp), else to nullptr.
    transport::MemoryStatus resolve(uint32_t key, bool remote, uint32_t rights, uint64_t addr,
                                    uint64_t length, uint64_t& process_addr, uint8_t** local);
    transport::MemoryStatus resolve_window(uint32_t rkey, uint32_t rights, uint64_t addr,
                                           uint64_t length, uint64_t& process_addr,
                                           uint8_t** local);
    // The pieces of a transfer, each resolved: its address in the process, and in the
    // engine where its MR is mapped (`mapped`: all of them are).
    struct ResolvedPieces {
        uint32_t count = 0;
        bool mapped = true;
        uint64_t bytes = 0;
        uint64_t process[transport::kMaxSge];
        uint8_t* local[transport::kMaxSge];
    };
    transport::MemoryStatus resolve_pieces(const transport::MemoryPiece* pieces, uint32_t count,
                                           bool remote, uint32_t rights, ResolvedPieces& out);
    transport::MemoryStatus failure();
    // Moves pieces between `buffer` and the process: mapped ones with memcpy, the rest
    // with one read per run, or queued behind when writing.
    transport::MemoryStatus transfer(const transport::MemoryPiece* pieces, uint32_t count,
                                     uint8_t* buffer, bool to_process, bool remote,
                                     uint32_t rights);
    // One read of private memory (after the queued writes); false on failure.
    bool read_process(uint64_t at, void* dst, uint32_t length);
    // Bytes [begin, end) of the message `tag`, read ahead (two: a QP may stream a
    // request and a read response at once). The buffers are allocated on first use.
    struct ReadAhead {
        uint64_t tag = 0;
        bool valid = false;
        uint64_t generation = 0; // the context's MR table when read: a change re-reads
        uint32_t begin = 0, end = 0;
        std::unique_ptr<uint8_t[]> bytes;
    };
    ReadAhead ahead_[2];

    // Write-behind (see the top of this file).
    void queue_write(void* far, const void* local, size_t length);
    bool flush_writes(); // false on a fault
    void clear_queue();
    // Moves the queued writes of every dirty ProcessMemory, one call per process.
    static void flush_dirty();
    static constexpr size_t kJointWrites = 1024; // IOV_MAX
    iovec queued_local_[kMaxQueuedWrites];
    iovec queued_far_[kMaxQueuedWrites];
    // A message's last bytes (end_message): the memory file writes them in a call of their
    // own, after the run before them.
    uint8_t queued_starts_run_[kMaxQueuedWrites];
    static constexpr size_t kOrderedTail = 8;
    bool last_write_queued_ = false; // the last write()/write_pieces() ended in the queue
    static constexpr uint32_t kSmallWrite = 256;
    static constexpr uint32_t kSmallArena = 8192;
    uint8_t small_[kSmallArena]; // copies of small sources (see queue_write)
    uint32_t small_used_ = 0;
    uint32_t queued_ = 0;
    ssize_t queued_bytes_ = 0;
    bool dirty_ = false;       // on the dirty list
    bool write_fault_ = false; // a flush failed, not yet taken by a completion
    bool fault_to_report_ = false;
    ProcessMemory* next_dirty_ = nullptr;
    // Each data-path thread's own list: a ProcessMemory serves one QP or SRQ, whose
    // device one thread serves, and that thread flushes its list before every round ends
    // (Datapath::poll), so a QP destroyed between rounds is on no other thread's list.
    static thread_local ProcessMemory* dirty_head_;
    MemoryFaultListener* listener_ = nullptr;
    unsigned ahead_victim_ = 0; // the read-ahead buffer to reuse next

    // The MR the last key named, while the context's MR table has not changed: the
    // packets of a message name the same key, and need no hash lookup.
    uint32_t cached_key_ = 0;
    uint64_t cached_generation_ = UINT64_MAX;
    const MemoryRegion* cached_mr_ = nullptr;

    const ClientProcess& client_;
    bool gone_ = false;
    MemoryKeys& context_;
    uint32_t pd_;
    uint32_t qp_num_ = 0;
    uint64_t faults_ = 0;
};

} // namespace softhca::engine
