#include "shared_memory.hpp"

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <utility>

namespace softhca::engine {

namespace {

// Opens the file behind the engine's own mapping of `bytes` at `data` (its VMA ends at
// the next page boundary, which its map_files name says).
int open_own_mapping(const void* data, size_t bytes) {
    char path[64];
    const auto start = reinterpret_cast<uintptr_t>(data);
    const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    bytes = (bytes + page - 1) / page * page;
    std::snprintf(path, sizeof(path), "/proc/self/map_files/%lx-%lx",
                  static_cast<unsigned long>(start), static_cast<unsigned long>(start + bytes));
    return ::open(path, O_RDWR | O_CLOEXEC);
}

} // namespace

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
    bytes_ = bytes;
    data_ = map;
    fd_ = fd;
    // The mapping is enough where it can be reopened (a question of the engine's
    // capabilities, asked of the first mapping once): the descriptor goes.
    static const bool reopens = [this] {
        const int again = open_own_mapping(data_, bytes_);
        if (again >= 0)
            ::close(again);
        return again >= 0;
    }();
    if (reopens) {
        ::close(fd_);
        fd_ = -1;
    }
    return 0;
}

int SharedMemory::share() const {
    if (!data_) {
        errno = EBADF;
        return -1;
    }
    return fd_ >= 0 ? ::fcntl(fd_, F_DUPFD_CLOEXEC, 0) : open_own_mapping(data_, bytes_);
}

} // namespace softhca::engine
