// The process that opened a context, as the engine may reach it. The engine runs as
// root and serves every local user, so it is a trust boundary, as a kernel driver is:
// a context reaches only what its process's own credentials allow.
//
// Memory. A context's memory is the memory of the process that opened it, as it was
// when it opened it: the provider opens its own /proc/self/mem and sends it along with
// OpenDevice. That file holds the process's address space (its mm), not its PID, as
// the kernel's ib_umem_get holds `current->mm`: after the process execs (a setuid
// program included) or exits, the file reaches nothing (reads and writes move 0
// bytes), whoever gets the PID later, and whoever keeps the socket (a forked child).
// The kernel checked the right to open it against the client's own credentials, so a
// client can hand over only memory it could read and write itself. Private memory is
// moved with preadv/pwritev on that file; memory that is already shared is mapped
// (shared_mapping.hpp) by opening /proc/PID/map_files with the client's filesystem
// credentials (FileCredentials below), so the kernel refuses a file the client could
// not open and a process it could not trace.
#pragma once

#include <cstdint>
#include <memory>
#include <sys/types.h>
#include <sys/uio.h>
#include <vector>

namespace softhca::engine {

class ClientProcess {
  public:
    // Adopts `mem_fd`, which must be a /proc/PID/mem file opened for reading and
    // writing. Returns 0, or EBADF when it is not one (the fd is then the caller's).
    static int adopt(pid_t pid, uid_t uid, gid_t gid, std::vector<gid_t> groups, int mem_fd,
                     std::shared_ptr<ClientProcess>& out);
    // The engine's own process (unit tests).
    static std::shared_ptr<ClientProcess> self();
    ~ClientProcess();
    ClientProcess(const ClientProcess&) = delete;
    ClientProcess& operator=(const ClientProcess&) = delete;

    pid_t pid() const { return pid_; }
    uid_t uid() const { return uid_; }
    gid_t gid() const { return gid_; }
    const std::vector<gid_t>& groups() const { return groups_; }

    // Moves bytes between `local` and the process's memory from `far` on (consecutive
    // addresses there). Returns the bytes moved: 0 when the address space is gone (the
    // process exec'd or exited), -1 (EIO) when a page is not mapped.
    ssize_t read(const iovec* local, int count, uint64_t far) const;
    ssize_t write(const iovec* local, int count, uint64_t far) const;
    // The same for pieces each with its own address there (far[i] as long as
    // local[i]): runs of consecutive addresses move in one call each. Returns the
    // bytes moved up to the first piece that could not be moved.
    ssize_t move(bool to_process, const iovec* local, const iovec* far, size_t count) const;
    // The address space the context was opened with is gone.
    bool gone() const;
    // The process has exited (or is a zombie). Its PID may name another process by now:
    // only for telling an exit from an exec on an error path.
    bool exited() const;

  private:
    ClientProcess(pid_t pid, uid_t uid, gid_t gid, int mem_fd);
    pid_t pid_;
    uid_t uid_;
    gid_t gid_;
    std::vector<gid_t> groups_; // supplementary groups, from SO_PEERGROUPS
    int mem_fd_;
};

// While alive, this thread opens files and reads /proc with the client's filesystem
// credentials (fsuid, fsgid, supplementary groups) and without the capabilities that
// override file permissions or ptrace checks; it keeps CAP_SYS_ADMIN and
// CAP_CHECKPOINT_RESTORE, which /proc/PID/map_files asks of whoever opens it. Real and
// effective IDs stay root, so the client cannot signal the engine meanwhile. For a
// root client nothing changes.
class FileCredentials {
  public:
    explicit FileCredentials(const ClientProcess& client);
    ~FileCredentials();
    FileCredentials(const FileCredentials&) = delete;
    FileCredentials& operator=(const FileCredentials&) = delete;

  private:
    bool switched_ = false;
    uint32_t effective_[2] = {0, 0};
    std::vector<gid_t> groups_;
};

} // namespace softhca::engine
