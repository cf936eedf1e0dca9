#include "shared_mapping.hpp"

#include <algorithm>

#include "engine_config.hpp"
#include "memory_map.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sys/mman.h>
#include <unistd.h>
#include <vector>

namespace softhca::engine {

uint64_t SharedMapping::live_ = 0;

std::unique_ptr<SharedMapping> SharedMapping::map(pid_t pid, uint64_t addr, uint64_t length,
                                                  bool writable) {
    static const bool enabled = environment_switch_on("SOFTHCA_SHARED_MAPPING");
    if (!enabled || length == 0)
        return nullptr;
    const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    const uint64_t first = addr & ~(page - 1);
    const uint64_t last = (addr + length + page - 1) & ~(page - 1);
    std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
    std::string line;
    std::vector<MapsEntry> vmas; // the VMAs holding the range
    uint64_t covered = first;
    while (covered < last && std::getline(maps, line)) {
        MapsEntry vma;
        if (!parse_maps_line(line, vma) || vma.end <= covered)
            continue;
        // A hole, private memory, or anonymous memory with no file that map_files could
        // open: cross-memory attach serves it. (memfd, shm, hugetlbfs and MAP_SHARED
        // anonymous memory all have a file.)
        if (vma.start > covered || !vma.shared || !vma.inode || !vma.readable ||
            (writable && !vma.writable))
            return nullptr;
        vmas.push_back(vma);
        covered = vma.end;
    }
    if (covered < last)
        return nullptr;
    // Whole VMAs are mapped, so that huge pages (hugetlbfs, SHM_HUGETLB) stay aligned.
    const uint64_t low = vmas.front().start;
    const uint64_t high = vmas.back().end;
    const size_t bytes = high - low;
    void* base =
        ::mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED)
        return nullptr;
    const int prot = PROT_READ | (writable ? PROT_WRITE : 0);
    for (const MapsEntry& vma : vmas) {
        char path[96];
        std::snprintf(path, sizeof(path), "/proc/%d/map_files/%llx-%llx", static_cast<int>(pid),
                      static_cast<unsigned long long>(vma.start),
                      static_cast<unsigned long long>(vma.end));
        const int fd = ::open(path, (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
        void* at = static_cast<uint8_t*>(base) + (vma.start - low);
        void* got = fd < 0 ? MAP_FAILED
                           : ::mmap(at, vma.end - vma.start, prot, MAP_SHARED | MAP_FIXED, fd,
                                    static_cast<off_t>(vma.offset));
        if (fd >= 0)
            ::close(fd);
        if (got == MAP_FAILED) {
            ::munmap(base, bytes);
            return nullptr;
        }
    }
    ++live_;
    return std::unique_ptr<SharedMapping>(
        new SharedMapping(base, bytes, static_cast<uint8_t*>(base) + (addr - low)));
}

std::unique_ptr<SharedMapping> SharedMapping::map_file(int fd, uint64_t offset, uint64_t length,
                                                       bool writable) {
    const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    const uint64_t first = offset & ~(page - 1);
    const size_t bytes = std::max<uint64_t>(offset + length - first, 1);
    void* base = ::mmap(nullptr, bytes, PROT_READ | (writable ? PROT_WRITE : 0), MAP_SHARED, fd,
                        static_cast<off_t>(first));
    if (base == MAP_FAILED)
        return nullptr;
    ++live_;
    return std::unique_ptr<SharedMapping>(
        new SharedMapping(base, bytes, static_cast<uint8_t*>(base) + (offset - first)));
}

SharedMapping::~SharedMapping() {
    ::munmap(base_, bytes_);
    --live_;
}

} // namespace softhca::engine
