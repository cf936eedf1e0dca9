// A memfd mapped into the engine, to be mapped by a provider as well: the backing of
// completion queues and work queues (the card's memory the driver sees). Sealed at its
// size (F_SEAL_SHRINK, F_SEAL_GROW, F_SEAL_SEAL): the provider maps it and may write
// it, but no client can truncate it under the engine. The engine keeps only the mapping:
// where it may reopen its own mappings (/proc/self/map_files: CAP_SYS_ADMIN or
// CAP_CHECKPOINT_RESTORE, as a root engine has) the memfd's descriptor is closed once
// mapped, so a client's queues cost the engine no descriptor each; share() opens one to
// hand over.
#pragma once

#include <cstddef>

namespace softhca::engine {

class SharedMemory {
  public:
    SharedMemory() = default;
    ~SharedMemory();
    SharedMemory(SharedMemory&& other) noexcept;
    SharedMemory& operator=(SharedMemory&& other) noexcept;
    SharedMemory(const SharedMemory&) = delete;
    SharedMemory& operator=(const SharedMemory&) = delete;

    // Creates and maps `bytes` of zeroed shared memory. Returns 0 or an errno.
    int create(const char* name, size_t bytes);

    // A descriptor of the memory for a client, or -1 with errno: a new one each call,
    // which the caller closes once it is sent.
    int share() const;
    // Whether the engine keeps a descriptor of it (it cannot reopen its own mappings).
    bool holds_descriptor() const { return fd_ >= 0; }
    size_t bytes() const { return bytes_; }
    void* data() const { return data_; }

  private:
    void release();
    int fd_ = -1;
    size_t bytes_ = 0;
    void* data_ = nullptr;
};

} // namespace softhca::engine
