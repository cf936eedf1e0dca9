#include "memory_map.hpp"

#include "client_process.hpp"

#include <cerrno>
#include <cstdio>
#include <fcntl.h>
#include <fstream>
#include <linux/magic.h>
#include <sstream>
#include <sys/statfs.h>
#include <unistd.h>

namespace softhca::engine {

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

int check_range_in_maps(const std::string& maps, uint64_t addr, uint64_t length, bool need_write) {
    const uint64_t end = addr + length;
    uint64_t covered = addr; // everything below this is known good
    std::istringstream in(maps);
    std::string line;
    while (std::getline(in, line)) {
        MapsEntry vma;
        if (!parse_maps_line(line, vma) || vma.end <= covered)
            continue;
        if (vma.start > covered)
            return EFAULT; // a hole before the next mapping
        if (!vma.readable || (need_write && !vma.writable))
            return EFAULT;
        covered = vma.end;
        if (covered >= end)
            return 0;
    }
    return EFAULT;
}

int check_user_range(const ClientProcess& client, uint64_t addr, uint64_t length, bool need_write) {
    FileCredentials as_client(client);
    if (!as_client.ok())
        return EACCES;
    std::ifstream file(client.proc_path("maps"));
    if (!file)
        return ESRCH;
    std::stringstream text;
    text << file.rdbuf();
    if (int err = check_range_in_maps(text.str(), addr, length, need_write))
        return err;
    // A file on FUSE behind the range: the engine's one thread would wait for the FUSE
    // daemon (which the client may run) whenever a page is not in memory. Refused, as
    // memory the device cannot use (the file is opened as the client, for its type only).
    std::istringstream lines(text.str());
    for (std::string line; std::getline(lines, line);) {
        MapsEntry vma;
        if (!parse_maps_line(line, vma) || vma.end <= addr || vma.start >= addr + length ||
            !vma.inode)
            continue;
        char name[64];
        std::snprintf(name, sizeof(name), "map_files/%llx-%llx",
                      static_cast<unsigned long long>(vma.start),
                      static_cast<unsigned long long>(vma.end));
        const int fd = ::open(client.proc_path(name).c_str(), O_RDONLY | O_CLOEXEC);
        struct statfs fs {};
        const bool fuse = fd >= 0 && ::fstatfs(fd, &fs) == 0 && fs.f_type == FUSE_SUPER_MAGIC;
        if (fd >= 0)
            ::close(fd);
        if (fuse)
            return EOPNOTSUPP;
    }
    return 0;
}

} // namespace softhca::engine
