#include "cq_ring_owner.hpp"

#include <cerrno>
#include <new>
#include <sys/mman.h>
#include <unistd.h>
#include <utility>

namespace softhca::engine {

namespace di = device_interface;

CqRingOwner::~CqRingOwner() {
    release();
}

CqRingOwner::CqRingOwner(CqRingOwner&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), bytes_(std::exchange(other.bytes_, 0)),
      header_(std::exchange(other.header_, nullptr)) {}

CqRingOwner& CqRingOwner::operator=(CqRingOwner&& other) noexcept {
    if (this != &other) {
        release();
        fd_ = std::exchange(other.fd_, -1);
        bytes_ = std::exchange(other.bytes_, 0);
        header_ = std::exchange(other.header_, nullptr);
    }
    return *this;
}

void CqRingOwner::release() {
    if (header_)
        ::munmap(header_, bytes_);
    if (fd_ >= 0)
        ::close(fd_);
    header_ = nullptr;
    fd_ = -1;
    bytes_ = 0;
}

int CqRingOwner::create(uint32_t slots) {
    release();
    const size_t bytes = di::cq_ring_bytes(slots);
    int fd = ::memfd_create("softhca-cq", MFD_CLOEXEC);
    if (fd < 0)
        return errno;
    if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
        int err = errno;
        ::close(fd);
        return err;
    }
    void* map = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
        int err = errno;
        ::close(fd);
        return err;
    }
    fd_ = fd;
    bytes_ = bytes;
    header_ = new (map) di::CqRingHeader{};
    header_->magic = di::kCqRingMagic;
    header_->version = di::kCqRingVersion;
    header_->slots = slots;
    header_->entry_size = sizeof(di::CompletionEntry);
    return 0;
}

uint64_t CqRingOwner::pending() const {
    if (!header_)
        return 0;
    return header_->producer.load(std::memory_order_acquire) -
           header_->consumer.load(std::memory_order_acquire);
}

void CqRingOwner::move_pending_to(CqRingOwner& target) {
    const uint64_t consumer = header_->consumer.load(std::memory_order_acquire);
    const uint64_t producer = header_->producer.load(std::memory_order_acquire);
    const di::CompletionEntry* from = di::cq_ring_entries(header_);
    for (uint64_t i = consumer; i != producer; ++i)
        target.push(from[i & (header_->slots - 1)]);
}

bool CqRingOwner::push(const di::CompletionEntry& entry) {
    const uint64_t producer = header_->producer.load(std::memory_order_relaxed);
    if (producer - header_->consumer.load(std::memory_order_acquire) >= header_->slots) {
        header_->overrun.store(1, std::memory_order_release);
        return false;
    }
    di::cq_ring_entries(header_)[producer & (header_->slots - 1)] = entry;
    header_->producer.store(producer + 1, std::memory_order_release);
    return true;
}

} // namespace softhca::engine
