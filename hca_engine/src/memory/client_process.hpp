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

#include "memory_map.hpp"
#include "stall_watch.hpp"

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <sys/types.h>
#include <sys/uio.h>
#include <vector>

namespace softhca::engine {

// The peer of a control connection, pinned when it connected: its credentials
// (SO_PEERCRED, SO_PEERGROUPS), a pidfd of it (SO_PEERPIDFD where the kernel has it,
// Linux 6.5; else pidfd_open of its PID at once) and its /proc/PID directory, opened
// while that pidfd showed the process alive. Everything the engine reads of the client
// in /proc goes through that directory: once the process is gone it names nothing,
// whoever gets the PID. The descriptors close with it.
struct PeerProcess {
    pid_t pid = 0;
    uid_t uid = 0;
    gid_t gid = 0;
    // The user its objects are charged to (the caps of resource_limits.hpp): its uid, or,
    // in a user namespace below the engine's, the user that owns the outermost one not
    // owned by root. A user's subordinate IDs (/etc/subuid) are that user's, as the
    // kernel's ucounts charge a namespace's objects to its owner in the parent too.
    uid_t account = 0;
    // It lives in a user namespace below the engine's (a rootless container): the
    // kernel lets a process of another namespace read its /proc files only with
    // CAP_SYS_PTRACE over that namespace, which FileCredentials then lends.
    bool in_user_namespace = false;
    // Who its /proc files must belong to when FileCredentials lends CAP_SYS_PTRACE (in a
    // user namespace: the kernel then checks no longer that it is dumpable; ProcessMaps
    // does), or ProcessMaps::kAnyOwner (the kernel's own check applies).
    uid_t proc_owner() const { return in_user_namespace ? uid : ProcessMaps::kAnyOwner; }
    std::vector<gid_t> groups;
    int pidfd = -1;
    int proc_dir = -1;
    // Pins the peer of `socket`; false when it is already gone or cannot be pinned.
    bool pin(int socket);
    // Process `pid` (unit tests).
    bool pin_process(pid_t pid);
    // "/proc/self/fd/N/NAME": NAME in the pinned /proc/PID directory.
    std::string path(const char* name) const;
    // Whether it is root (uid 0 as the engine sees it) with `capability` in its effective
    // set (its pinned status file): an administrator's request (`rdma link add`, counter
    // modes) asks what the kernel's netlink asks, CAP_NET_ADMIN. Anyone else's CapEff may
    // be its own user namespace's: never trusted.
    bool root_with_capability(int capability) const;
    // When the process started, in clock ticks since boot (/proc/PID/stat, field 22); 0
    // when it cannot be read. With the PID it names one process for good: a process that
    // takes the PID later started later.
    uint64_t start_time() const;
    // Its PID namespace (the inode of /proc/PID/ns/pid; 0 when unreadable) and its PID
    // there (the last of NSpid), for what `softhca status` shows whom.
    void read_pid_namespace(ino_t& pidns, pid_t& ns_pid) const;
    void release();
};

class ClientProcess {
  public:
    // Adopts `mem_fd`, which must be the /proc/PID/mem file of the process, opened for
    // reading and writing, and `peer` (its descriptors pass to the ClientProcess).
    // `probe_addr` and `probe` are 16 bytes the process says it holds at that address:
    // read back through `mem_fd`, they prove the file reaches its memory (and is not
    // some other procfs file of mode 0600 bound at a path ending in "mem"). Returns 0,
    // or EBADF when the file is not such a one (the fd is then the caller's).
    static int adopt(PeerProcess& peer, int mem_fd, uint64_t probe_addr, const uint8_t* probe,
                     std::shared_ptr<ClientProcess>& out);
    // The engine's own process (unit tests).
    static std::shared_ptr<ClientProcess> self();
    // Process `pid` as if a process of `uid`/`gid` had opened a context naming it, with
    // no capabilities unless `uid` is root (unit tests of what the engine refuses).
    static std::shared_ptr<ClientProcess> posing(pid_t pid, uid_t uid, gid_t gid);
    ~ClientProcess();
    ClientProcess(const ClientProcess&) = delete;
    ClientProcess& operator=(const ClientProcess&) = delete;

    pid_t pid() const { return peer_.pid; }
    uid_t uid() const { return peer_.uid; }
    uid_t account() const { return peer_.account; }
    // Whose its touches are, for the stall watch (stall_watch.hpp).
    StallWatch::Owner stall_owner() const { return {peer_.proc_dir, peer_.account, peer_.uid}; }
    bool in_user_namespace() const { return peer_.in_user_namespace; }
    uid_t proc_owner() const { return peer_.proc_owner(); }
    gid_t gid() const { return peer_.gid; }
    const std::vector<gid_t>& groups() const { return peer_.groups; }
    // A file of its /proc/PID directory (maps, map_files/..., status), as a path.
    std::string proc_path(const char* name) const { return peer_.path(name); }
    // Its effective capabilities when it opened the context (CapEff), two 32-bit words.
    const uint32_t* effective_caps() const { return effective_caps_; }
    // What it may register (pin), in bytes: its RLIMIT_MEMLOCK when it opened the
    // context, unlimited with CAP_IPC_LOCK (as ib_umem_get allows).
    uint64_t memlock_limit() const { return memlock_limit_; }

    // Whether its private memory moves by cross-memory attach (see below).
    bool cross_memory() const { return cross_memory_; }

    // Moves bytes between `local` and the process's memory from `far` on (consecutive
    // addresses there). Returns the bytes moved: 0 when the address space is gone (the
    // process exec'd or exited), -1 (EIO) when a page is not mapped.
    //
    // A client that could reach any process's memory itself (root with CAP_SYS_PTRACE
    // when it opened the context) gets cross-memory attach instead of its memory file:
    // process_vm_readv/writev on its pinned PID, about twice as fast for large transfers
    // (the memory file copies through a kernel page), and one call for scattered pieces.
    // Its pidfd is checked once per data-path round and control request (before a write,
    // after a read), so once the process has exited nothing is reached whoever gets the
    // PID (a PID comes back only after pid_max others); unlike the memory file it follows
    // an exec, which gives such a client nothing it did not have (docs/security.md).
    ssize_t read(const iovec* local, int count, uint64_t far) const;
    ssize_t write(const iovec* local, int count, uint64_t far) const;
    // The same for pieces each with its own address there (far[i] as long as
    // local[i]): runs of consecutive addresses move in one call each. Returns the
    // bytes moved up to the first piece that could not be moved. A piece with
    // `starts_run[i]` set begins a new run (a message's last bytes, placed after the rest).
    ssize_t move(bool to_process, const iovec* local, const iovec* far, size_t count,
                 const uint8_t* starts_run = nullptr) const;
    // Cross-memory attach of `local` to `far` pieces (counts may differ).
    ssize_t move(bool to_process, const iovec* local, size_t local_count, const iovec* far,
                 size_t far_count) const;
    // The address space the context was opened with is gone.
    bool gone() const;
    // A data path begins a round (Datapath::poll): cross-memory attach looks at each
    // client's pidfd once per round, not once per call (see move()).
    static void next_round() { round_.fetch_add(1, std::memory_order_relaxed); }
    // The connection that opened the context, and whether every holder of its other end
    // has closed it (the process exited and no forked child keeps it): the context is
    // about to be destroyed.
    void set_connection(int fd) { connection_ = fd; }
    bool abandoned() const;

  private:
    ClientProcess(PeerProcess& peer, int mem_fd);
    // read() and write(): one run of consecutive addresses in the process.
    ssize_t contiguous(bool to_process, const iovec* local, int count, uint64_t far) const;
    // Its pidfd shows it alive: asked once per round (the round it was last seen alive).
    bool alive_this_round() const;
    // Its user is cut off (stall_watch.hpp): its memory is not touched.
    bool cut_off() const;
    mutable std::atomic<uint64_t> penalty_seen_{0};
    static inline std::atomic<uint64_t> round_{1};
    mutable std::atomic<uint64_t> seen_alive_round_{0};
    PeerProcess peer_;
    uint32_t effective_caps_[2] = {0, 0};
    uint64_t memlock_limit_ = UINT64_MAX;
    bool cross_memory_ = false;
    int mem_fd_;
    int connection_ = -1; // not owned
};

// While alive, this thread opens files and reads /proc with the client's filesystem
// credentials (fsuid, fsgid, supplementary groups) and only the client's own effective
// capabilities, plus CAP_CHECKPOINT_RESTORE, which /proc/PID/map_files asks of whoever
// opens it: a client without CAP_DAC_OVERRIDE or CAP_SYS_PTRACE gets no file or process
// it could not open or trace itself. Real and effective IDs stay root, so the client
// cannot signal the engine meanwhile. ok() is false when the switch did not take (then
// nothing may be opened on the client's behalf).
class FileCredentials {
  public:
    explicit FileCredentials(const ClientProcess& client);
    // A process pinned but not yet adopted as a client: its IDs and groups, and the
    // effective capabilities trusted of it (root's only, as ClientProcess takes them).
    explicit FileCredentials(const PeerProcess& peer);
    ~FileCredentials();
    FileCredentials(const FileCredentials&) = delete;
    FileCredentials& operator=(const FileCredentials&) = delete;
    bool ok() const { return ok_; }

  private:
    void switch_to(uid_t uid, gid_t gid, const std::vector<gid_t>& groups, const uint32_t caps[2],
                   bool in_user_namespace);
    bool switched_ = false;
    bool ok_ = true;
    uint32_t effective_[2] = {0, 0};
    std::vector<gid_t> groups_;
};

} // namespace softhca::engine
