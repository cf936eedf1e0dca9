#include "memory_map.hpp"

#include "client_process.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/ioctl.h>
#include <unistd.h>
#include <utility>
#include <vector>

namespace softhca::engine {

namespace {

// PROCMAP_QUERY (Linux 6.11, include/uapi/linux/fs.h), spelled here: Debian 12's kernel
// headers predate it.
struct ProcmapQuery {
    uint64_t size;
    uint64_t query_flags;
    uint64_t query_addr;
    uint64_t vma_start, vma_end;
    uint64_t vma_flags;
    uint64_t vma_page_size;
    uint64_t vma_offset;
    uint64_t inode;
    uint32_t dev_major, dev_minor;
    uint32_t vma_name_size, build_id_size;
    uint64_t vma_name_addr, build_id_addr;
};
static_assert(sizeof(ProcmapQuery) == 104);
constexpr unsigned long kProcmapQuery = _IOWR('f', 17, ProcmapQuery);
constexpr uint64_t kQueryVmaReadable = 0x01, kQueryVmaWritable = 0x02, kQueryVmaShared = 0x08;
constexpr uint64_t kQueryCoveringOrNext = 0x10;

} // namespace

bool parse_maps_line(const std::string& line, MapsEntry& entry) {
    unsigned long long start = 0, end = 0, offset = 0, inode = 0;
    char perms[5] = {};
    char dev[16] = {};
    const int fields = std::sscanf(line.c_str(), "%llx-%llx %4s %llx %15s %llu", &start, &end,
                                   perms, &offset, dev, &inode);
    if (fields < 3)
        return false;
    entry.start = start;
    entry.end = end;
    entry.offset = offset;
    entry.inode = fields == 6 ? inode : 0;
    unsigned major = 0, minor = 0;
    if (fields >= 5 && std::sscanf(dev, "%x:%x", &major, &minor) == 2) {
        entry.dev_major = major;
        entry.dev_minor = minor;
    }
    entry.readable = perms[0] == 'r';
    entry.writable = perms[1] == 'w';
    entry.shared = perms[3] == 's';
    return true;
}

ProcessMaps::ProcessMaps(const std::string& path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0)
        error_ = errno;
}

ProcessMaps ProcessMaps::from_text(const std::string& text) {
    ProcessMaps maps;
    maps.parse(text);
    return maps;
}

ProcessMaps::~ProcessMaps() {
    if (fd_ >= 0)
        ::close(fd_);
}

ProcessMaps::ProcessMaps(ProcessMaps&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), error_(other.error_), parsed_(other.parsed_),
      vmas_(std::move(other.vmas_)) {}

void ProcessMaps::parse(const std::string& text) {
    parsed_ = true;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
        MapsEntry vma;
        if (parse_maps_line(line, vma))
            vmas_.push_back(vma);
    }
}

bool ProcessMaps::covering_or_next(uint64_t addr, MapsEntry& vma) {
    if (!parsed_) {
        if (fd_ < 0)
            return false;
        ProcmapQuery q{};
        q.size = sizeof(q);
        q.query_flags = kQueryCoveringOrNext;
        q.query_addr = addr;
        if (::ioctl(fd_, kProcmapQuery, &q) == 0) {
            vma = MapsEntry{};
            vma.start = q.vma_start;
            vma.end = q.vma_end;
            vma.offset = q.vma_offset;
            vma.inode = q.inode;
            vma.dev_major = q.dev_major;
            vma.dev_minor = q.dev_minor;
            vma.readable = q.vma_flags & kQueryVmaReadable;
            vma.writable = q.vma_flags & kQueryVmaWritable;
            vma.shared = q.vma_flags & kQueryVmaShared;
            return true;
        }
        if (errno != ENOTTY && errno != EINVAL)
            return false; // ENOENT: nothing at or above addr; ESRCH: the process is gone
        // A kernel without PROCMAP_QUERY: the file, read once.
        std::string text;
        char buffer[65536];
        for (ssize_t got; (got = ::read(fd_, buffer, sizeof(buffer))) > 0;)
            text.append(buffer, static_cast<size_t>(got));
        parse(text);
    }
    auto it = std::upper_bound(vmas_.begin(), vmas_.end(), addr,
                               [](uint64_t a, const MapsEntry& v) { return a < v.end; });
    if (it == vmas_.end())
        return false;
    vma = *it;
    return true;
}

namespace {

// The check of check_user_range over `maps`; the devices of the files behind the range
// go to `files`.
int check_range(ProcessMaps& maps, uint64_t addr, uint64_t length, bool need_write,
                std::vector<std::string>* files) {
    const uint64_t end = addr + length;
    uint64_t covered = addr; // everything below this is known good
    while (covered < end) {
        MapsEntry vma;
        if (!maps.covering_or_next(covered, vma) || vma.start > covered)
            return EFAULT; // a hole (or nothing) where the range goes on
        if (!vma.readable || (need_write && !vma.writable))
            return EFAULT;
        if (files && vma.inode)
            files->push_back(std::to_string(vma.dev_major) + ":" + std::to_string(vma.dev_minor));
        covered = vma.end;
    }
    return 0;
}

} // namespace

int check_range_in_maps(const std::string& text, uint64_t addr, uint64_t length, bool need_write) {
    ProcessMaps maps = ProcessMaps::from_text(text);
    return check_range(maps, addr, length, need_write, nullptr);
}

int check_user_range(const ClientProcess& client, uint64_t addr, uint64_t length, bool need_write) {
    FileCredentials as_client(client);
    if (!as_client.ok())
        return EACCES;
    ProcessMaps maps(client.proc_path("maps"));
    if (maps.error())
        return ESRCH;
    std::vector<std::string> devices;
    if (int err = check_range(maps, addr, length, need_write, &devices))
        return err;
    // A file on FUSE behind the range: the engine's one thread would wait for the FUSE
    // daemon (which the client may run) whenever a page is not in memory. Refused, as
    // memory the device cannot use. The filesystem is found by the mapping's device in
    // the client's mountinfo, without opening the file (an open would ask the daemon).
    if (devices.empty())
        return 0;
    std::ifstream mounts(client.proc_path("mountinfo"));
    for (std::string line; std::getline(mounts, line);) {
        // ID PARENT MAJOR:MINOR ROOT POINT OPTIONS [TAGS] - FSTYPE SOURCE SUPER
        std::istringstream fields(line);
        std::string id, parent, device;
        fields >> id >> parent >> device;
        const size_t dash = line.find(" - ");
        if (dash == std::string::npos ||
            std::find(devices.begin(), devices.end(), device) == devices.end())
            continue;
        if (line.compare(dash + 3, 4, "fuse") == 0)
            return EOPNOTSUPP;
    }
    return 0;
}

} // namespace softhca::engine
