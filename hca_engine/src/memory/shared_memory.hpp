// A memfd mapped into the engine, to be mapped by a provider as well: the backing of
// completion queues and work queues (the card's memory the driver sees). Sealed at its
// size (F_SEAL_SHRINK, F_SEAL_GROW, F_SEAL_SEAL): the provider maps it and may write
// it, but no client can truncate it under the engine.
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

    int fd() const { return fd_; }
    size_t bytes() const { return bytes_; }
    void* data() const { return data_; }

  private:
    void release();
    int fd_ = -1;
    size_t bytes_ = 0;
    void* data_ = nullptr;
};

} // namespace softhca::engine
