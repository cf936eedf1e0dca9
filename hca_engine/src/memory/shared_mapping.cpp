#include "shared_mapping.hpp"

#include "client_process.hpp"
#include "environment.hpp"
#include "memory_map.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include <vector>

namespace softhca::engine {

std::atomic<uint64_t> SharedMapping::live_{0};

namespace {

// Opens the file behind `vma` through the client's /proc/PID/map_files, with its
// file credentials (the caller holds them), and checks that it is the file the maps
// line named: between reading the line and opening, the process may have mapped
// another file at the same place. -1 when it cannot be opened or is another file.
int open_mapped_file(const ClientProcess& client, const MapsEntry& vma, bool writable) {
    char name[64];
    std::snprintf(name, sizeof(name), "map_files/%llx-%llx",
                  static_cast<unsigned long long>(vma.start),
                  static_cast<unsigned long long>(vma.end));
    const int fd =
        ::open(client.proc_path(name).c_str(), (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
    if (fd < 0)
        return -1;
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_ino != vma.inode ||
        major(st.st_dev) != vma.dev_major || minor(st.st_dev) != vma.dev_minor) {
        ::close(fd);
        return -1;
    }
    return fd;
}

// Memory filesystems only: a file of a disk or FUSE filesystem would make the engine's
// one thread wait for its I/O (or for the FUSE daemon, which the client may run) when
// it touches a page that is not in memory; cross-memory access serves those instead.
// Sets `page` to the filesystem's page size (a huge page on hugetlbfs).
bool memory_filesystem(int fd, uint64_t& page) {
    struct statfs fs {};
    if (::fstatfs(fd, &fs) != 0)
        return false;
    if (fs.f_type == HUGETLBFS_MAGIC) {
        page = static_cast<uint64_t>(fs.f_bsize);
        return true;
    }
    return fs.f_type == TMPFS_MAGIC; // memfd, /dev/shm, SysV shm, MAP_SHARED anonymous
}

} // namespace

std::unique_ptr<SharedMapping> SharedMapping::map(const ClientProcess& client, uint64_t addr,
                                                  uint64_t length, bool writable) {
    static const bool enabled = environment_switch_on("SOFTHCA_SHARED_MAPPING");
    if (!enabled || length == 0)
        return nullptr;
    FileCredentials as_client(client);
    if (!as_client.ok())
        return nullptr;
    const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    const uint64_t first = addr & ~(page - 1);
    const uint64_t last = (addr + length + page - 1) & ~(page - 1);
    // The lookups take the client's mm lock (a stall watch touch: in_anonymous_memory).
    const StallWatch::Touch touch(client.stall_owner(), addr);
    ProcessMaps maps(client.proc_path("maps"), client.proc_owner()); // the range's VMAs only
    std::vector<MapsEntry> vmas;                                     // the VMAs holding the range
    uint64_t covered = first;
    while (covered < last) {
        MapsEntry vma;
        if (!maps.covering_or_next(covered, vma))
            return nullptr;
        // A hole, private memory, or anonymous memory with no file that map_files could
        // open: cross-memory access serves it. (memfd, shm, hugetlbfs and MAP_SHARED
        // anonymous memory all have a file.)
        if (vma.start > covered || !vma.shared || !vma.inode || !vma.readable ||
            (writable && !vma.writable))
            return nullptr;
        vmas.push_back(vma);
        covered = vma.end;
    }
    if (covered < last)
        return nullptr;
    // Only the pages of the range (whole huge pages on hugetlbfs) are mapped, not the
    // whole VMAs: a 1-byte MR on a huge region maps one page.
    struct Piece {
        int fd;
        uint64_t start, end, offset; // in the process, and into the file
    };
    std::vector<Piece> pieces;
    auto close_all = [&pieces] {
        for (const Piece& p : pieces)
            ::close(p.fd);
    };
    for (const MapsEntry& vma : vmas) {
        const int fd = open_mapped_file(client, vma, writable);
        uint64_t unit = page;
        if (fd < 0 || !memory_filesystem(fd, unit)) {
            if (fd >= 0)
                ::close(fd);
            close_all();
            return nullptr;
        }
        const uint64_t start = std::max(vma.start, first & ~(unit - 1));
        const uint64_t end = std::min(vma.end, (last + unit - 1) & ~(unit - 1));
        pieces.push_back({fd, start, end, vma.offset + (start - vma.start)});
    }
    // The files came from the address space the context was opened with: had the
    // process exec'd meanwhile, that one is gone.
    if (client.gone()) {
        close_all();
        return nullptr;
    }
    const uint64_t low = pieces.front().start;
    const size_t bytes = pieces.back().end - low;
    void* base =
        ::mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) {
        close_all();
        return nullptr;
    }
    const int prot = PROT_READ | (writable ? PROT_WRITE : 0);
    bool mapped = true;
    for (const Piece& p : pieces) {
        void* at = static_cast<uint8_t*>(base) + (p.start - low);
        mapped = mapped && ::mmap(at, p.end - p.start, prot, MAP_SHARED | MAP_FIXED, p.fd,
                                  static_cast<off_t>(p.offset)) != MAP_FAILED;
    }
    close_all();
    if (!mapped) {
        ::munmap(base, bytes);
        return nullptr;
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
