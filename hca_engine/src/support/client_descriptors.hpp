// Descriptors that a client hands the engine (its async event pipe, its rdma_cm event
// pipe). A file description is shared by every descriptor of it, so a client that
// keeps a duplicate could clear O_NONBLOCK on it, fill the pipe and leave the engine's
// one thread blocked in write(), or make it something else than a pipe. The engine
// therefore never writes through the client's description: it checks that the
// descriptor is an anonymous pipe (not a FIFO on disk, nor any other file that a root
// open could widen) and opens the pipe anew through /proc/self/fd, a description of
// its own, non-blocking, that no client holds.
//
// Nothing of a client's descriptor is asked of its filesystem before the engine knows
// the filesystem cannot wait on a user: an fstat of a FUSE file asks the FUSE daemon
// (GETATTR), an fstatfs asks it too (STATFS), and even a close asks it to FLUSH, and the
// daemon may be the client's own, never answering. What a descriptor is, the engine
// learns from the kernel's own tables: its /proc/self/fd link tells a pipe
// ("pipe:[INODE]"), a socket or an anonymous inode from the dentry alone, and its mount
// (the mnt_id of /proc/self/fdinfo) names its filesystem in a mountinfo.
#pragma once

#include "stall_watch.hpp"

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <vector>

namespace softhca::engine {

// The type of the filesystem `fd` lies on (as mountinfo writes it: "proc", "tmpfs",
// "fuse", ...), by the descriptor's mount as `mountinfo` (a /proc/PID/mountinfo path)
// lists it; empty when that mountinfo does not list the mount (another mount
// namespace's, or pipefs and sockfs, which no mountinfo lists). Asks no filesystem.
std::string filesystem_type(int fd, const std::string& mountinfo);

// The device and inode of the file `fd` is open on, from a statx that asks for no
// attribute (the device, which FUSE gives even to a process it refuses) and the "ino:"
// of /proc/self/fdinfo; false when either cannot be had. Asks no filesystem.
bool descriptor_identity(int fd, dev_t& device, ino_t& inode);

// Closes a descriptor a client of `account` handed the engine (-1: nothing) where its
// close holds nobody else: a close may wait as long as the client decides (a FUSE file's
// FLUSH, a socket lingering on unsent data, a pipe whose lock a client thread holds). A
// socket goes to the descriptor sink (descriptor_sink.hpp); anything else to the
// account's own closing threads, so the closes that wait hold only that account's later
// ones.
void close_client_descriptor(int fd, uid_t account);

// Closes a client's connection socket: one the engine is done with, refused, or whose
// process was gone before it was pinned. Messages may still be queued on it (an empty
// message reads as a connection's end, and so does a reset), and the kernel releases the
// descriptors they carry on the thread that drops the socket's last reference, where a
// TCP socket lingering on unsent data among them waits: the socket goes to the
// descriptor sink (descriptor_sink.hpp), or, without one, to the closing threads of
// `account` (-1: the user the socket's credentials name, SO_PEERCRED).
void close_client_socket(int fd, uid_t account = static_cast<uid_t>(-1));

// How many descriptors of `account` wait to be closed or are being closed now. Past
// kMaxClosingPerAccount the servers read no more of that account's connections (each
// message may bring the engine up to 253 descriptors) until they drop below
// kResumeClosingPerAccount: a user whose closes wait cannot fill the engine's descriptor
// table, only stall itself.
size_t client_descriptors_closing(uid_t account);
constexpr size_t kMaxClosingPerAccount = 256;
constexpr size_t kResumeClosingPerAccount = 128;

// What serving a client's connection left it as: open (watched as before), closed (the
// server forgot it), or paused: its account's descriptors wait to be closed past
// kMaxClosingPerAccount, and its input stays unread, and unwatched, until the server
// says it resumes.
enum class Served { Open, Closed, Paused };

// The connections a server rests while their user's closes drain.
class PausedConnections {
  public:
    // True, keeping `fd`, when `account` has kMaxClosingPerAccount descriptors or more
    // waiting to be closed: the server reads no more of it and returns Served::Paused.
    bool pause_if_backed_up(int fd, uid_t account);
    // The paused connections whose user has fewer than kResumeClosingPerAccount waiting
    // now, to be watched again; `account_of` names a connection's user, or nullopt for
    // one the server closed meanwhile (forgotten).
    std::vector<int> resumed(const std::function<std::optional<uid_t>(int)>& account_of);
    bool empty() const { return fds_.empty(); }
    // A paused connection the server closes itself (its device removed): its descriptor
    // number, reused, must not be taken for it.
    void forget(int fd) { std::erase(fds_, fd); }

  private:
    std::vector<int> fds_;
};

// The inode of the anonymous pipe `fd` is, from its /proc/self/fd link; 0 when `fd` is
// anything else. Asks no filesystem.
ino_t anonymous_pipe_inode(int fd);

// Takes `fd` (closing it) and returns the engine's own non-blocking descriptor of the
// same pipe, opened for writing (or for reading and writing with `read_too`); -1 when
// `fd` is not an anonymous pipe or cannot be opened again. The open takes the pipe's
// lock, which a reader of `owner`'s may hold on a FUSE page: a stall watch touch.
int adopt_client_pipe(int fd, const StallWatch::Owner& owner, bool read_too = false);

} // namespace softhca::engine
