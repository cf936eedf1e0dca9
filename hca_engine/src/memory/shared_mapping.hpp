// The fast path for memory that is already shared: when every page of a registered
// range belongs to a shared mapping of a file (memfd, /dev/shm, SysV shm — perftest
// --use_hugepages — hugetlbfs, or MAP_SHARED anonymous memory, which the kernel backs
// with a file too), the engine maps the same pages into its own address space, through
// /proc/PID/map_files, and touches them with memcpy and real CPU atomics: no system
// call per access, and atomics are atomic against the application's CPU. The files are
// opened with the client's own file credentials (client_process.hpp) and must be the
// files the maps line names (device and inode) on a memory filesystem (tmpfs,
// hugetlbfs); only the pages of the range are mapped. A touch of a page the client
// truncated away is caught (memory_guard.hpp) and fails that operation.
//
// The mapping holds the pages as a real HCA's pinning does: if the application unmaps
// its range while registered, the MR keeps reaching the pages it was registered with.
// It is undone when the MR is deregistered (or its context ends). Private memory (the
// heap, MAP_PRIVATE) gets no mapping and is reached with cross-memory attach instead.
// SOFTHCA_SHARED_MAPPING=0 in the engine's environment turns this path off.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <sys/types.h>

namespace softhca::engine {

class ClientProcess;

class SharedMapping {
  public:
    // Maps [addr, addr + length) of `pid`, or returns nullptr when some page of it is
    // not a shared file mapping there (or the path is off, or mapping fails).
    static std::unique_ptr<SharedMapping> map(const ClientProcess& client, uint64_t addr,
                                              uint64_t length, bool writable);
    // Maps [offset, offset + length) of the engine's own file `fd` (device memory an
    // MR is registered on); nullptr when mapping fails.
    static std::unique_ptr<SharedMapping> map_file(int fd, uint64_t offset, uint64_t length,
                                                   bool writable);
    ~SharedMapping();
    SharedMapping(const SharedMapping&) = delete;
    SharedMapping& operator=(const SharedMapping&) = delete;

    // The engine's address of the application's `addr`.
    uint8_t* local() const { return local_; }

    // Mappings alive now, for `softhca status` and tests.
    static uint64_t live() { return live_.load(std::memory_order_relaxed); }

  private:
    SharedMapping(void* base, size_t bytes, uint8_t* local)
        : base_(base), bytes_(bytes), local_(local) {}
    void* base_;
    size_t bytes_;
    uint8_t* local_;
    static std::atomic<uint64_t> live_; // made and dropped by every data-path thread's QPs
};

} // namespace softhca::engine
