// Registered memory of an application process, as the transport reaches it: keys are
// looked up in the owning context's MR table (so a key of another PD or process is
// simply not found), rights and bounds are checked, and bytes move with
// process_vm_readv/process_vm_writev (cross-memory attach).
#pragma once

#include "resource_tables.hpp"
#include "softhca/transport/memory_access.hpp"

#include <sys/types.h>

namespace softhca::engine {

class ProcessMemory : public transport::MemoryAccess {
  public:
    ProcessMemory(pid_t pid, ContextResources& context, uint32_t pd_handle)
        : pid_(pid), context_(context), pd_(pd_handle) {}
    // The QP this memory serves (type 2 memory windows are bound to one QP).
    void set_qp_num(uint32_t qp_num) { qp_num_ = qp_num; }

    transport::MemoryStatus check(uint32_t key, bool remote, uint32_t rights, uint64_t addr,
                                  uint64_t length) override;
    transport::MemoryStatus read(uint32_t key, bool remote, uint32_t rights, uint64_t addr,
                                 void* dst, uint32_t length) override;
    transport::MemoryStatus write(uint32_t key, bool remote, uint32_t rights, uint64_t addr,
                                  const void* src, uint32_t length) override;
    // All pieces of a packet move in one process_vm_readv/writev call.
    transport::MemoryStatus read_pieces(const transport::MemoryPiece* pieces, uint32_t count,
                                        uint8_t* buffer) override;
    transport::MemoryStatus write_pieces(const transport::MemoryPiece* pieces, uint32_t count,
                                         const uint8_t* buffer) override;
    transport::MemoryStatus atomic(uint32_t rkey, uint64_t addr, bool compare_swap,
                                   uint64_t compare_add, uint64_t swap,
                                   uint64_t& original) override;
    transport::MemoryStatus bind_window(const transport::WindowBind& bind) override;
    transport::MemoryStatus invalidate(uint32_t rkey, bool remote) override;

    uint64_t faults() const { return faults_; }

  private:
    // Validates and translates a (key, address) range to an address in the process.
    transport::MemoryStatus resolve(uint32_t key, bool remote, uint32_t rights, uint64_t addr,
                                    uint64_t length, uint64_t& process_addr);
    transport::MemoryStatus resolve_window(uint32_t rkey, uint32_t rights, uint64_t addr,
                                           uint64_t length, uint64_t& process_addr);
    transport::MemoryStatus failure();
    transport::MemoryStatus transfer(const transport::MemoryPiece* pieces, uint32_t count,
                                     uint8_t* buffer, bool to_process);
    pid_t pid_;
    bool gone_ = false;
    ContextResources& context_;
    uint32_t pd_;
    uint32_t qp_num_ = 0;
    uint64_t faults_ = 0;
};

} // namespace softhca::engine
