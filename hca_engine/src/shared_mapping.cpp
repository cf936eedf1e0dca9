#include "shared_mapping.hpp"

#include <algorithm>
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

bool parse_shared_maps_line(const std::string& line, uint64_t& start, uint64_t& end,
                            uint64_t& offset, bool& writable) {
    unsigned long long s = 0, e = 0, off = 0, inode = 0;
    char perms[5] = {};
    char dev[16] = {};
    if (std::sscanf(line.c_str(), "%llx-%llx %4s %llx %15s %llu", &s, &e, perms, &off, dev,
                    &inode) != 6)
        return false;
    start = s;
    end = e;
    offset = off;
    writable = perms[1] == 'w';
    // 's': a shared mapping; an inode: backed by a file (memfd, shm, hugetlbfs and
    // shared anonymous memory all are), which map_files can open.
    return perms[0] == 'r' && perms[3] == 's' && inode != 0;
}

namespace {

bool enabled() {
    const char* v = std::getenv("SOFTHCA_SHARED_MAPPING");
    return !v || std::strcmp(v, "0") != 0;
}

struct Piece {
    uint64_t start, end;         // the part of one VMA inside the range
    uint64_t offset;             // the VMA's file offset
    uint64_t vma_start, vma_end; // the whole VMA
};

} // namespace

std::unique_ptr<SharedMapping> SharedMapping::map(pid_t pid, uint64_t addr, uint64_t length,
                                                  bool writable) {
    if (!enabled() || length == 0)
        return nullptr;
    const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    const uint64_t first = addr & ~(page - 1);
    const uint64_t last = (addr + length + page - 1) & ~(page - 1);
    std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
    std::string line;
    std::vector<Piece> pieces;
    uint64_t covered = first;
    while (covered < last && std::getline(maps, line)) {
        uint64_t start = 0, end = 0, offset = 0;
        bool vma_writable = false;
        const bool shared = parse_shared_maps_line(line, start, end, offset, vma_writable);
        if (end <= covered)
            continue;
        if (start > covered || !shared || (writable && !vma_writable))
            return nullptr; // a hole, or private memory: cross-memory attach serves it
        const uint64_t stop = std::min(end, last);
        pieces.push_back({covered, stop, offset, start, end});
        covered = stop;
    }
    if (covered < last)
        return nullptr;
    // Whole VMAs are mapped, so that huge pages (hugetlbfs, SHM_HUGETLB) stay aligned.
    const uint64_t low = pieces.front().vma_start;
    const uint64_t high = pieces.back().vma_end;
    const size_t bytes = high - low;
    void* base =
        ::mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED)
        return nullptr;
    const int prot = PROT_READ | (writable ? PROT_WRITE : 0);
    for (const Piece& p : pieces) {
        char path[96];
        std::snprintf(path, sizeof(path), "/proc/%d/map_files/%llx-%llx", static_cast<int>(pid),
                      static_cast<unsigned long long>(p.vma_start),
                      static_cast<unsigned long long>(p.vma_end));
        const int fd = ::open(path, (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
        void* at = static_cast<uint8_t*>(base) + (p.vma_start - low);
        void* got = fd < 0 ? MAP_FAILED
                           : ::mmap(at, p.vma_end - p.vma_start, prot, MAP_SHARED | MAP_FIXED, fd,
                                    static_cast<off_t>(p.offset));
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

SharedMapping::~SharedMapping() {
    ::munmap(base_, bytes_);
    --live_;
}

} // namespace softhca::engine
