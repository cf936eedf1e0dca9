#include "memory_map.hpp"

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace softhca::engine {

int check_range_in_maps(const std::string& maps, uint64_t addr, uint64_t length, bool need_write) {
    const uint64_t end = addr + length;
    uint64_t covered = addr; // everything below this is known good
    std::istringstream in(maps);
    std::string line;
    while (std::getline(in, line)) {
        unsigned long long start = 0, stop = 0;
        char perms[5] = {};
        if (std::sscanf(line.c_str(), "%llx-%llx %4s", &start, &stop, perms) != 3)
            continue;
        if (stop <= covered)
            continue;
        if (start > covered)
            return EFAULT; // a hole before the next mapping
        if (perms[0] != 'r' || (need_write && perms[1] != 'w'))
            return EFAULT;
        covered = stop;
        if (covered >= end)
            return 0;
    }
    return EFAULT;
}

int check_user_range(pid_t pid, uint64_t addr, uint64_t length, bool need_write) {
    std::ifstream file("/proc/" + std::to_string(pid) + "/maps");
    if (!file)
        return ESRCH;
    std::stringstream text;
    text << file.rdbuf();
    return check_range_in_maps(text.str(), addr, length, need_write);
}

} // namespace softhca::engine
