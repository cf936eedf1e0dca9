// Checks that a range of another process's address space is mapped with the rights a
// memory registration needs, as the kernel's pinning of user pages would (ib_umem_get:
// EFAULT for unmapped or inaccessible pages, write access needed for writable MRs).
#pragma once

#include <cstdint>
#include <string>
#include <sys/types.h>

namespace softhca::engine {

class ClientProcess;

// One line of /proc/PID/maps.
struct MapsEntry {
    uint64_t start = 0, end = 0;
    uint64_t offset = 0;                   // into the file behind it
    uint64_t inode = 0;                    // 0: anonymous memory with no file behind it
    uint32_t dev_major = 0, dev_minor = 0; // the device of the file's filesystem
    bool readable = false, writable = false;
    bool shared = false; // MAP_SHARED ('s'), not private ('p')
};
// False when the line is not one (a malformed line).
bool parse_maps_line(const std::string& line, MapsEntry& entry);

// Returns 0, or EFAULT when some page of [addr, addr+length) is unmapped, not
// readable, or (need_write) not writable; ESRCH when the process is gone.
// /proc/PID/maps is read with the client's file credentials (client_process.hpp).
// EOPNOTSUPP when a file on FUSE lies behind the range.
int check_user_range(const ClientProcess& client, uint64_t addr, uint64_t length, bool need_write);

// The same check against a maps text (the format of /proc/PID/maps), for tests.
int check_range_in_maps(const std::string& maps, uint64_t addr, uint64_t length, bool need_write);

} // namespace softhca::engine
