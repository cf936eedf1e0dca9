#include "shared_memory.hpp"

#include <cerrno>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <utility>

namespace softhca::engine {

SharedMemory::~SharedMemory() {
    release();
}

SharedMemory::SharedMemory(SharedMemory&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), bytes_(std::exchange(other.bytes_, 0)),
      data_(std::exchange(other.data_, nullptr)) {}

SharedMemory& SharedMemory::operator=(SharedMemory&& other) noexcept {
    if (this != &other) {
        release();
        fd_ = std::exchange(other.fd_, -1);
        bytes_ = std::exchange(other.bytes_, 0);
        data_ = std::exchange(other.data_, nullptr);
    }
    return *this;
}

void SharedMemory::release() {
    if (data_)
        ::munmap(data_, bytes_);
    if (fd_ >= 0)
        ::close(fd_);
    data_ = nullptr;
    fd_ = -1;
    bytes_ = 0;
}

int SharedMemory::create(const char* name, size_t bytes) {
    release();
    int fd = ::memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return errno;
    // Sealed at its size: a client that holds the fd cannot shrink it under the engine
    // (whose next touch would be a SIGBUS) nor grow it.
    if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0 ||
        ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
        const int err = errno;
        ::close(fd);
        return err;
    }
    void* map = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
        const int err = errno;
        ::close(fd);
        return err;
    }
    fd_ = fd;
    bytes_ = bytes;
    data_ = map;
    return 0;
}

} // namespace softhca::engine
