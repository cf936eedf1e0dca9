#include "memory_map.hpp"

#include "client_process.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

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
    // memory the device cannot use. The filesystem is found by the mapping's device in
    // the client's mountinfo, without opening the file (an open would ask the daemon).
    std::vector<std::string> devices;
    std::istringstream lines(text.str());
    for (std::string line; std::getline(lines, line);) {
        MapsEntry vma;
        if (parse_maps_line(line, vma) && vma.end > addr && vma.start < addr + length && vma.inode)
            devices.push_back(std::to_string(vma.dev_major) + ":" + std::to_string(vma.dev_minor));
    }
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
