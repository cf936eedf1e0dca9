#include "memory_map.hpp"

#include "client_process.hpp"
#include "mountinfo.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
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

ProcessMaps::ProcessMaps(const std::string& path, uid_t owner) : path_(path), owner_(owner) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0)
        error_ = errno;
    else
        still_owned();
}

bool ProcessMaps::still_owned() {
    struct stat st {};
    if (owner_ == kAnyOwner || (::stat(path_.c_str(), &st) == 0 && st.st_uid == owner_))
        return true;
    if (fd_ >= 0)
        ::close(fd_);
    fd_ = -1;
    error_ = EACCES;
    vmas_.clear();
    return false;
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
    : path_(std::move(other.path_)), owner_(other.owner_), fd_(std::exchange(other.fd_, -1)),
      error_(other.error_), parsed_(other.parsed_), vmas_(std::move(other.vmas_)) {}

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
            return still_owned();
        }
        if (errno != ENOTTY && errno != EINVAL)
            return false; // ENOENT: nothing at or above addr; ESRCH: the process is gone
        // A kernel without PROCMAP_QUERY: the file, read once.
        std::string text;
        char buffer[65536];
        for (ssize_t got; (got = ::read(fd_, buffer, sizeof(buffer))) > 0;)
            text.append(buffer, static_cast<size_t>(got));
        parse(text);
        if (!still_owned())
            return false;
    }
    auto it = std::upper_bound(vmas_.begin(), vmas_.end(), addr,
                               [](uint64_t a, const MapsEntry& v) { return a < v.end; });
    if (it == vmas_.end())
        return false;
    vma = *it;
    return true;
}

namespace {

// "MAJOR:MINOR", as maps and mountinfo write a device.
std::string device_name(unsigned major_number, unsigned minor_number) {
    return std::to_string(major_number) + ":" + std::to_string(minor_number);
}

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
        // A file's mapping has its device (a FUSE daemon may give its file inode 0);
        // anonymous memory is 00:00 with inode 0.
        if (files && (vma.inode || vma.dev_major || vma.dev_minor))
            files->push_back(device_name(vma.dev_major, vma.dev_minor));
        covered = vma.end;
    }
    return 0;
}

} // namespace

int check_range_in_maps(const std::string& text, uint64_t addr, uint64_t length, bool need_write) {
    ProcessMaps maps = ProcessMaps::from_text(text);
    return check_range(maps, addr, length, need_write, nullptr);
}

namespace {

// The devices of the kernel's own memory mounts, which no mountinfo lists: shmem's (memfds,
// MAP_SHARED anonymous memory, SysV shared memory) and hugetlbfs's for the default, 2 MiB
// and 1 GiB huge pages (memfds with MFD_HUGETLB). Learned once, from memfds of the engine's
// own. (The page size goes in bits 26 and up of the flags, as linux/memfd.h encodes it.)
const std::vector<std::string>& kernel_memory_devices() {
    static const std::vector<std::string> devices = [] {
        std::vector<std::string> found;
        for (const unsigned flags :
             {0u, MFD_HUGETLB, MFD_HUGETLB | (21u << 26), MFD_HUGETLB | (30u << 26)}) {
            const int fd = ::memfd_create("softhca-probe", MFD_CLOEXEC | flags);
            if (fd < 0)
                continue;
            struct stat st {};
            if (::fstat(fd, &st) == 0)
                found.push_back(device_name(major(st.st_dev), minor(st.st_dev)));
            ::close(fd);
        }
        return found;
    }();
    return devices;
}

// Filesystems whose pages the kernel brings in without waiting on anything a user runs:
// memory filesystems and local disk ones. FUSE (whose daemon a user may run), network
// filesystems and every kind not named here may make a reader wait as long as someone
// else decides.
bool never_waits_on_a_user(std::string_view type) {
    static constexpr std::string_view kTypes[] = {"tmpfs", "hugetlbfs", "ramfs", "ext2", "ext3",
                                                  "ext4",  "xfs",       "btrfs", "f2fs", "vfat",
                                                  "exfat", "squashfs",  "erofs"};
    return std::find(std::begin(kTypes), std::end(kTypes), type) != std::end(kTypes);
}

} // namespace

int check_user_range(const ClientProcess& client, uint64_t addr, uint64_t length, bool need_write) {
    FileCredentials as_client(client);
    if (!as_client.ok())
        return EACCES;
    // The lookups take the client's mm lock (a stall watch touch: in_anonymous_memory).
    const StallWatch::Touch touch(client.stall_owner(), addr);
    ProcessMaps maps(client.proc_path("maps"), client.proc_owner());
    if (maps.error())
        return ESRCH;
    std::vector<std::string> devices;
    if (int err = check_range(maps, addr, length, need_write, &devices))
        return err;
    // Files behind the range. An engine thread that touches a page not in memory waits
    // for the file's filesystem to bring it, so a registration is refused (as memory the
    // device cannot use) unless every file lies on the kernel's own memory mounts or on a
    // filesystem that never waits on a user, by the client's mountinfo. A device that
    // mountinfo does not list is refused too: a FUSE mount in a mount namespace of the
    // user's own (whose daemon it runs) shows in that namespace's mountinfo only. The
    // files are not opened, nor their filesystems asked (an open or a statfs would ask
    // the daemon). What is mapped over the range after this check is not seen here
    // (docs/security.md).
    const auto& kernel_memory = kernel_memory_devices();
    std::erase_if(devices, [&](const std::string& device) {
        return std::find(kernel_memory.begin(), kernel_memory.end(), device) != kernel_memory.end();
    });
    if (devices.empty())
        return 0;
    std::ifstream mounts(client.proc_path("mountinfo"));
    for (std::string line; std::getline(mounts, line) && !devices.empty();) {
        MountinfoLine mount;
        if (!parse_mountinfo_line(line, mount) ||
            std::find(devices.begin(), devices.end(), mount.device) == devices.end())
            continue;
        if (!never_waits_on_a_user(mount.type))
            return EOPNOTSUPP;
        std::erase(devices, mount.device);
    }
    return devices.empty() ? 0 : EOPNOTSUPP;
}

} // namespace softhca::engine
