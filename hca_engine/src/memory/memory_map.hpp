// Checks that a range of another process's address space is mapped with the rights a
// memory registration needs, as the kernel's pinning of user pages would (ib_umem_get:
// EFAULT for unmapped or inaccessible pages, write access needed for writable MRs).
#pragma once

#include <cstdint>
#include <string>
#include <sys/types.h>
#include <vector>

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

// A process's mappings, found one at a time: the one that covers an address or, past it,
// the next. Where the kernel has PROCMAP_QUERY (Linux 6.11) each is one ioctl on the
// open maps file, a lookup in the process's VMA tree, and nothing else of the file is
// made or read: a process split into 64,000 mappings costs a registration what one of
// a few mappings costs. Elsewhere the file is read and parsed once, on the first lookup.
// The file is opened with the calling thread's file credentials (FileCredentials), as
// the kernel checks them at open.
class ProcessMaps {
  public:
    // The maps of a process. With `owner` (PeerProcess::proc_owner), EACCES unless the
    // file belongs to that user: the kernel gives a process's /proc files to root when it
    // is not dumpable (it exec'd a set-ID program), which its user could not read. It is
    // looked up again after each answer (an exec between the open and the answer makes
    // the answer the new program's, and by then its files are root's): no answer is
    // given of a process that was not the user's throughout.
    static constexpr uid_t kAnyOwner = static_cast<uid_t>(-1);
    ProcessMaps(const std::string& path, uid_t owner);
    // Over a maps text (the format of /proc/PID/maps), for tests.
    static ProcessMaps from_text(const std::string& text);
    ~ProcessMaps();
    ProcessMaps(ProcessMaps&& other) noexcept;
    ProcessMaps(const ProcessMaps&) = delete;
    ProcessMaps& operator=(const ProcessMaps&) = delete;
    ProcessMaps& operator=(ProcessMaps&&) = delete;

    // 0 when the file opened, else its errno (EACCES, ENOENT: the process is gone).
    int error() const { return error_; }
    // The mapping that covers `addr`, or the lowest one above it; false when there is
    // none, or the process is gone.
    bool covering_or_next(uint64_t addr, MapsEntry& vma);
    // Whether the lookups are the kernel's (PROCMAP_QUERY), for tests.
    bool queried() const { return fd_ >= 0 && !parsed_; }

  private:
    ProcessMaps() = default;
    void parse(const std::string& text);
    // The file still belongs to `owner_` (a fresh lookup refreshes its owner); else the
    // file is closed, EACCES.
    bool still_owned();
    std::string path_;
    uid_t owner_ = kAnyOwner;
    int fd_ = -1;
    int error_ = 0;
    bool parsed_ = false; // the file was read whole: vmas_ holds it
    std::vector<MapsEntry> vmas_;
};

// Returns 0, or EFAULT when some page of [addr, addr+length) is unmapped, not
// readable, or (need_write) not writable; ESRCH when the process is gone.
// /proc/PID/maps is read with the client's file credentials (client_process.hpp).
// EOPNOTSUPP when a file behind the range is on a filesystem that may wait on a user
// (FUSE, a network filesystem) or on one the client's mountinfo does not show.
int check_user_range(const ClientProcess& client, uint64_t addr, uint64_t length, bool need_write);

// The same check against a maps text (the format of /proc/PID/maps), for tests.
int check_range_in_maps(const std::string& maps, uint64_t addr, uint64_t length, bool need_write);

} // namespace softhca::engine
