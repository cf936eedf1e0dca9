// Issue 40, item 1: memory whose pages a user's FUSE daemon serves, under an MR. Run as
// an unprivileged user:
//   fuse_memory_attack DEVICE MOUNT_DIR [swap|pipe|closes]
// A child enters a user and mount namespace of its own, mounts a FUSE filesystem of its
// own making on MOUNT_DIR (straight through /dev/fuse) and serves it: one 64 KiB file,
// whose READ it never answers. It hands the open file to the parent (SCM_RIGHTS), which
// stays in the original namespaces, maps it privately and shared, and registers each
// mapping on DEVICE. The mount is in no mountinfo the client's process shows.
//
// The engine must refuse both registrations (EOPNOTSUPP): a page not in memory would make
// whichever engine thread touches it wait for the daemon. Then the file itself goes to
// the engine, where a stat, a statfs or a close would ask the daemon (GETATTR, STATFS,
// FLUSH): as an XRC domain's file (ibv_open_xrcd, then ibv_close_xrcd) and as the
// source file of an rdma_cm MIGRATE_ID. Printed:
//   refused: private|shared ERRNO_NAME   a registration failed, as it must
//   REGISTERED: private|shared           it was accepted: an RDMA WRITE from it is then
//                                        posted, which makes the engine read the page
//   xrcd: ERRNO_NAME|0, closed: ...      ibv_open_xrcd over the file, then its close
//   migrate: ERRNO_NAME                  MIGRATE_ID naming the file (EINVAL: no rdma_cm file)
//   holding                              done; the program waits to be killed, keeping
//                                        the daemon and its unanswered requests alive
//   daemon: PID                          first: the FUSE daemon's PID, to be killed after
//                                        this program
// The FUSE daemon prints "fuse: READ asked" and "fuse: FLUSH asked" for the requests it
// never answers.
//
// "closes" mode: the file goes to the engine 2 x kClosesMessages times, two descriptors
// of it with each of kClosesMessages malformed control messages on one connection
// (SOCK_SEQPACKET, as the provider's). The engine answers each with an error and closes
// the descriptors it was given, and each close asks the daemon to FLUSH. Printed:
// "closes: sent N" (the messages the engine's socket took), then "holding".
#include "attack_verbs.hpp"
#include "raw_migrate_id.hpp"
#include "softhca/device_interface/socket_io.hpp"

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <linux/fuse.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <sched.h>
#include <string>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace {

constexpr uint64_t kFileSize = 64 * 1024;
constexpr uint64_t kRootNode = FUSE_ROOT_ID, kFileNode = 2;

void write_file(const char* path, const std::string& text) {
    const int fd = ::open(path, O_WRONLY);
    if (fd < 0 || ::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size()))
        attack::die(path);
    ::close(fd);
}

// The process a thread (a request's pid) belongs to, by /proc/TID/status; 0 if unknown.
pid_t thread_group(pid_t thread) {
    const std::string path = "/proc/" + std::to_string(thread) + "/status";
    FILE* status = std::fopen(path.c_str(), "r");
    if (!status)
        return 0;
    char line[256];
    int group = 0;
    while (std::fgets(line, sizeof(line), status))
        if (std::sscanf(line, "Tgid: %d", &group) == 1)
            break;
    std::fclose(status);
    return group;
}

// The FUSE protocol (include/uapi/linux/fuse.h), the least a mount and an open need.
// FUSE_ALLOW_IDMAP (Linux 6.12, after Debian 12's headers): bit 40 of the INIT flags, 8 of
// flags2. A daemon that answers with it gets requests from users its namespace does not
// map (root's, the engine's among them); without it the kernel refuses them (EOVERFLOW).
constexpr uint32_t kAllowIdmap2 = 1u << (40 - 32);

class FuseDaemon {
  public:
    FuseDaemon(int fd, bool allow_idmap) : fd_(fd), allow_idmap_(allow_idmap) {}
    void serve() {
        std::vector<char> buffer(FUSE_MIN_READ_BUFFER + 128 * 1024);
        for (;;) {
            const ssize_t n = ::read(fd_, buffer.data(), buffer.size());
            if (n < 0 && (errno == EINTR || errno == ENOENT || errno == EAGAIN))
                continue;
            if (n < 0 && errno == ENODEV) {
                std::fprintf(stderr, "fuse: connection aborted\n");
                return;
            }
            if (n < static_cast<ssize_t>(sizeof(fuse_in_header)))
                return; // broken
            const auto* in = reinterpret_cast<const fuse_in_header*>(buffer.data());
            handle(*in, buffer.data() + sizeof(fuse_in_header));
        }
    }

  private:
    void reply(uint64_t unique, int error, const void* data = nullptr, size_t length = 0) {
        fuse_out_header out{};
        out.len = static_cast<uint32_t>(sizeof(out) + length);
        out.error = error;
        out.unique = unique;
        iovec pieces[2] = {{&out, sizeof(out)}, {const_cast<void*>(data), length}};
        (void)::writev(fd_, pieces, length ? 2 : 1);
    }
    static fuse_attr attributes(uint64_t node) {
        fuse_attr attr{};
        attr.ino = node;
        attr.nlink = 1;
        attr.blksize = 4096;
        if (node == kRootNode) {
            attr.mode = S_IFDIR | 0755;
        } else {
            attr.mode = S_IFREG | 0666;
            attr.size = kFileSize;
            attr.blocks = kFileSize / 512;
        }
        return attr;
    }
    void handle(const fuse_in_header& in, const char* body) {
        switch (in.opcode) {
        case FUSE_INIT: {
            const auto* init = reinterpret_cast<const fuse_init_in*>(body);
            fuse_init_out out{};
            out.major = FUSE_KERNEL_VERSION;
            out.minor = FUSE_KERNEL_MINOR_VERSION;
            out.max_readahead = init->max_readahead;
            out.max_write = 4096;
            if (allow_idmap_ && (init->flags & FUSE_INIT_EXT) && (init->flags2 & kAllowIdmap2)) {
                out.flags = FUSE_INIT_EXT;
                out.flags2 = kAllowIdmap2;
                std::fprintf(stderr, "fuse: requests of unmapped users allowed\n");
            }
            reply(in.unique, 0, &out, sizeof(out));
            return;
        }
        case FUSE_LOOKUP: {
            if (in.nodeid != kRootNode || std::strcmp(body, "file") != 0)
                return reply(in.unique, -ENOENT);
            fuse_entry_out out{};
            out.nodeid = kFileNode;
            out.entry_valid = out.attr_valid = 3600;
            out.attr = attributes(kFileNode);
            return reply(in.unique, 0, &out, sizeof(out));
        }
        case FUSE_GETATTR: {
            fuse_attr_out out{};
            out.attr_valid = 3600;
            out.attr = attributes(in.nodeid);
            return reply(in.unique, 0, &out, sizeof(out));
        }
        case FUSE_OPEN: {
            fuse_open_out out{};
            out.fh = 1;
            return reply(in.unique, 0, &out, sizeof(out));
        }
        case FUSE_READ:
            // Never answered: whoever faults the page in waits until the daemon dies.
            std::fprintf(stderr, "fuse: READ asked\n");
            return;
        case FUSE_FLUSH:
            // Answered for this program's own two processes (their exits close the file),
            // never for anyone else: whoever else closes a descriptor of it waits.
            if (const pid_t group = thread_group(static_cast<pid_t>(in.pid));
                group == ::getpid() || group == ::getppid())
                return reply(in.unique, 0);
            std::fprintf(stderr, "fuse: FLUSH asked\n");
            return;
        case FUSE_RELEASE:
            return reply(in.unique, 0);
        case FUSE_FORGET:
        case FUSE_BATCH_FORGET:
        case FUSE_INTERRUPT:
        case FUSE_DESTROY:
            return; // no reply is expected
        default:
            return reply(in.unique, -ENOSYS);
        }
    }
    int fd_;
    bool allow_idmap_;
};

// The child: its own namespaces, the mount, the daemon; the open file goes to `channel`.
[[noreturn]] void run_filesystem(const char* mount_dir, int channel, bool allow_idmap) {
    const uid_t uid = ::getuid();
    const gid_t gid = ::getgid();
    if (::unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0)
        attack::die("unshare(CLONE_NEWUSER | CLONE_NEWNS)");
    write_file("/proc/self/setgroups", "deny");
    write_file("/proc/self/uid_map", "0 " + std::to_string(uid) + " 1");
    write_file("/proc/self/gid_map", "0 " + std::to_string(gid) + " 1");
    // The daemon goes with the attack (the test kills that, by its PID).
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() == 1)
        attack::die("tie the daemon to its parent");
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
        attack::die("make / private");
    const int fuse = ::open("/dev/fuse", O_RDWR | O_CLOEXEC);
    if (fuse < 0)
        attack::die("open /dev/fuse");
    // Unmapped users' requests need the kernel's own permission checks (default_permissions).
    const std::string options = "fd=" + std::to_string(fuse) +
                                ",rootmode=40000,user_id=0,group_id=0" +
                                (allow_idmap ? ",default_permissions" : "");
    if (::mount("softhca-attack", mount_dir, "fuse", MS_NOSUID | MS_NODEV, options.c_str()) != 0)
        attack::die("mount fuse");
    FuseDaemon daemon(fuse, allow_idmap);
    std::thread server([&daemon] { daemon.serve(); });
    const int file = ::open((std::string(mount_dir) + "/file").c_str(), O_RDWR);
    if (file < 0)
        attack::die("open the FUSE file");
    const char byte = 0;
    if (softhca::device_interface::send_message(channel, &byte, 1, file) != 1)
        attack::die("send the FUSE file");
    ::close(file); // only the parent holds it now: the daemon's own exit flushes nothing
    server.join();
    std::_Exit(0);
}

int receive_file(int channel) {
    char byte = 0;
    const auto m = softhca::device_interface::receive_message(channel, &byte, 1);
    if (m.size != 1 || m.fd < 0)
        attack::die("receive the FUSE file (the child failed)");
    return m.fd;
}

// Two RC QPs of `side`, connected to each other.
void connected_pair(const attack::Side& side, ibv_qp*& a, ibv_qp*& b) {
    a = attack::make_qp(side);
    b = attack::make_qp(side);
    attack::connect_qp(a, b->qp_num, side.gid);
    attack::connect_qp(b, a->qp_num, side.gid);
}

// A receive into `target` on `receiver` (wr_id 1), then a signaled SEND of `source` from
// `sender` (wr_id 2).
void post_send_into(ibv_qp* receiver, ibv_sge target, ibv_qp* sender, ibv_sge source) {
    ibv_recv_wr receive{};
    ibv_recv_wr* bad_receive = nullptr;
    receive.wr_id = 1;
    receive.sg_list = &target;
    receive.num_sge = 1;
    ibv_send_wr send{};
    ibv_send_wr* bad_send = nullptr;
    send.wr_id = 2;
    send.sg_list = &source;
    send.num_sge = 1;
    send.opcode = IBV_WR_SEND;
    send.send_flags = IBV_SEND_SIGNALED;
    if (ibv_post_recv(receiver, &receive, &bad_receive) != 0 ||
        ibv_post_send(sender, &send, &bad_send) != 0)
        attack::die("post a receive and a SEND");
}

// An RDMA WRITE from `source` over a QP connected to another of the same context: the
// engine reads the source's pages to send them.
void write_from(const attack::Side& side, ibv_mr* source) {
    void* target_memory =
        ::mmap(nullptr, kFileSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ibv_mr* target = ibv_reg_mr(side.pd, target_memory, kFileSize,
                                IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (!target)
        attack::die("register the target");
    ibv_qp* a = nullptr;
    ibv_qp* b = nullptr;
    connected_pair(side, a, b);
    ibv_sge sge{reinterpret_cast<uint64_t>(source->addr), static_cast<uint32_t>(kFileSize),
                source->lkey};
    ibv_send_wr wr{};
    ibv_send_wr* bad = nullptr;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = reinterpret_cast<uint64_t>(target_memory);
    wr.wr.rdma.rkey = target->rkey;
    if (ibv_post_send(a, &wr, &bad) != 0)
        attack::die("post the WRITE");
}

// The file mapped over registered memory afterwards (the "swap" mode): 64 KiB of
// anonymous memory registered as a receive buffer, the FUSE file mapped over it
// privately (MAP_FIXED), and a 64 KiB SEND into it from another QP of the same context.
// The engine writes the received bytes there, and the write asks the daemon for the
// page first. Printed: "swapped: receive STATUS after N ms", or "swapped: no completion"
// after 20 s.
void swap_and_receive(const attack::Side& side, int file) {
    const int access = IBV_ACCESS_LOCAL_WRITE;
    void* target = ::mmap(nullptr, kFileSize, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    void* source = ::mmap(nullptr, kFileSize, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (target == MAP_FAILED || source == MAP_FAILED)
        attack::die("map anonymous memory");
    ibv_mr* target_mr = ibv_reg_mr(side.pd, target, kFileSize, access);
    ibv_mr* source_mr = ibv_reg_mr(side.pd, source, kFileSize, access);
    if (!target_mr || !source_mr)
        attack::die("register anonymous memory");
    if (::mmap(target, kFileSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, file, 0) !=
        target)
        attack::die("map the FUSE file over the registered memory");
    ibv_qp* receiver = nullptr;
    ibv_qp* sender = nullptr;
    connected_pair(side, receiver, sender);
    const auto posted = std::chrono::steady_clock::now();
    post_send_into(receiver, {reinterpret_cast<uint64_t>(target), kFileSize, target_mr->lkey},
                   sender, {reinterpret_cast<uint64_t>(source), kFileSize, source_mr->lkey});
    std::printf("swapped: posted\n");
    std::fflush(stdout);
    while (std::chrono::steady_clock::now() - posted < std::chrono::seconds(20)) {
        ibv_wc wc{};
        const int n = ibv_poll_cq(side.cq, 1, &wc);
        if (n < 0)
            attack::die("poll the CQ");
        if (n == 0) {
            ::usleep(1000);
            continue;
        }
        if (wc.wr_id != 1)
            continue;
        const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::steady_clock::now() - posted)
                            .count();
        std::printf("swapped: receive %s after %lld ms\n", ibv_wc_status_str(wc.status),
                    static_cast<long long>(ms));
        return;
    }
    std::printf("swapped: no completion\n");
}

// One 8-byte SEND from `sender` into `receiver`'s posted receive, and its two completions
// taken from `cq` (at most 5 s).
void exchange(ibv_qp* receiver, ibv_qp* sender, ibv_mr* mr, ibv_cq* cq) {
    const ibv_sge sge{reinterpret_cast<uint64_t>(mr->addr), 8, mr->lkey};
    post_send_into(receiver, sge, sender, sge);
    const auto posted = std::chrono::steady_clock::now();
    for (int done = 0; done < 2;) {
        ibv_wc wc{};
        const int n = ibv_poll_cq(cq, 1, &wc);
        if (n < 0 || std::chrono::steady_clock::now() - posted > std::chrono::seconds(5))
            attack::die("complete an exchange");
        done += n;
    }
}

// The "closes" mode: kClosesMessages messages of 8 bytes (no valid request) on a raw
// control connection of DEVICE's engine, each with two descriptors of `file`.
constexpr int kClosesMessages = 1000;
void send_closes(const char* device, int file) {
    const char* sysfs = std::getenv("SYSFS_PATH");
    if (!sysfs)
        attack::die("SYSFS_PATH (run under softhca exec)");
    FILE* in = std::fopen(
        (std::string(sysfs) + "/class/infiniband/" + device + "/softhca_engine_socket").c_str(),
        "r");
    char path[sizeof(sockaddr_un::sun_path)] = {};
    if (!in || !std::fgets(path, sizeof(path), in))
        attack::die("the engine's socket path");
    std::fclose(in);
    path[std::strcspn(path, "\n")] = '\0';
    const int engine = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::memcpy(address.sun_path, path, sizeof(path));
    if (engine < 0 ||
        ::connect(engine, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0)
        attack::die("connect to the engine");
    // The engine's replies are never read; its socket takes what it will, each send
    // waits at most a second for room.
    const timeval second{1, 0};
    ::setsockopt(engine, SOL_SOCKET, SO_SNDTIMEO, &second, sizeof(second));
    const uint64_t garbage = 0;
    int sent = 0;
    while (sent < kClosesMessages &&
           softhca::device_interface::send_message(engine, &garbage, sizeof(garbage), file, file) ==
               sizeof(garbage))
        ++sent;
    std::printf("closes: sent %d\n", sent);
}

// The "pipe" mode: a completion channel whose reader holds the pipe's lock on a FUSE page.
// One event waits in the channel; a thread reads it into the FUSE file mapped privately,
// and the copy asks the daemon for the page with the pipe's lock held. The CQ is armed
// again and a second completion made: the engine's write of its event waits for that
// lock. Printed: "pipe: posted", then "pipe: reader got N (ERRNO) after M ms" when the
// reader's read returns (counted from the second exchange), or "pipe: reader still
// held" after 20 s.
void hold_channel(const attack::Side& side, int file) {
    ibv_comp_channel* channel = ibv_create_comp_channel(side.context);
    if (!channel)
        attack::die("ibv_create_comp_channel");
    attack::Side own = side;
    own.cq = ibv_create_cq(side.context, 16, nullptr, channel, 0);
    if (!own.cq)
        attack::die("ibv_create_cq");
    void* memory = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    ibv_mr* mr = ibv_reg_mr(side.pd, memory, 4096, IBV_ACCESS_LOCAL_WRITE);
    if (!mr)
        attack::die("register the exchange buffer");
    ibv_qp* receiver = nullptr;
    ibv_qp* sender = nullptr;
    connected_pair(own, receiver, sender);
    if (ibv_req_notify_cq(own.cq, 0) != 0)
        attack::die("ibv_req_notify_cq");
    exchange(receiver, sender, mr, own.cq);
    pollfd ready{channel->fd, POLLIN, 0};
    if (::poll(&ready, 1, 5000) != 1)
        attack::die("the first event never came");
    void* page = ::mmap(nullptr, kFileSize, PROT_READ | PROT_WRITE, MAP_PRIVATE, file, 0);
    if (page == MAP_FAILED)
        attack::die("map the FUSE file");
    std::atomic<bool> returned{false};
    ssize_t got = 0;
    int got_errno = 0;
    std::thread reader([&] {
        got = ::read(channel->fd, page, 8);
        got_errno = got < 0 ? errno : 0;
        returned.store(true);
    });
    ::usleep(500 * 1000); // the reader is in the daemon's hands, the pipe's lock held
    if (returned.load())
        attack::die("the reader was not held");
    if (ibv_req_notify_cq(own.cq, 0) != 0)
        attack::die("ibv_req_notify_cq again");
    std::printf("pipe: posted\n");
    std::fflush(stdout);
    const auto posted = std::chrono::steady_clock::now();
    exchange(receiver, sender, mr, own.cq);
    while (!returned.load() && std::chrono::steady_clock::now() - posted < std::chrono::seconds(20))
        ::usleep(1000);
    if (!returned.load()) {
        std::printf("pipe: reader still held\n");
        std::fflush(stdout);
        reader.detach();
        return;
    }
    reader.join();
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::steady_clock::now() - posted)
                        .count();
    std::printf("pipe: reader got %zd (%s) after %lld ms\n", got,
                got_errno ? strerrorname_np(got_errno) : "0", static_cast<long long>(ms));
}

} // namespace

int main(int argc, char** argv) {
    const bool swap = argc == 4 && std::strcmp(argv[3], "swap") == 0;
    const bool pipe = argc == 4 && std::strcmp(argv[3], "pipe") == 0;
    const bool closes = argc == 4 && std::strcmp(argv[3], "closes") == 0;
    if (argc != 3 && !swap && !pipe && !closes) {
        std::fprintf(stderr, "usage: %s DEVICE MOUNT_DIR [swap|pipe|closes]\n", argv[0]);
        return 2;
    }
    int channel[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, channel) != 0)
        attack::die("socketpair");
    const pid_t child = ::fork();
    if (child < 0)
        attack::die("fork");
    if (child == 0) {
        ::close(channel[0]);
        run_filesystem(argv[2], channel[1], swap);
    }
    ::close(channel[1]);
    // The daemon is killed after this program when the test ends (by this PID): this
    // program's exit closes the file, whose FLUSH the daemon answers to it alone.
    std::printf("daemon: %d\n", static_cast<int>(child));
    std::fflush(stdout);
    const int file = receive_file(channel[0]);
    if (closes) {
        send_closes(argv[1], file);
        std::printf("holding\n");
        std::fflush(stdout);
        for (;;)
            ::pause();
    }
    const attack::Side side = attack::open_side(argv[1]);
    if (swap || pipe) {
        if (swap)
            swap_and_receive(side, file);
        else
            hold_channel(side, file);
        std::printf("holding\n");
        std::fflush(stdout);
        for (;;)
            ::pause();
    }
    const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    for (const int sharing : {MAP_PRIVATE, MAP_SHARED}) {
        const char* name = sharing == MAP_PRIVATE ? "private" : "shared";
        void* memory = ::mmap(nullptr, kFileSize, PROT_READ | PROT_WRITE, sharing, file, 0);
        if (memory == MAP_FAILED)
            attack::die("map the FUSE file");
        if (ibv_mr* mr = ibv_reg_mr(side.pd, memory, kFileSize, access)) {
            std::printf("REGISTERED: %s\n", name);
            std::fflush(stdout);
            write_from(side, mr);
        } else {
            std::printf("refused: %s %s\n", name, strerrorname_np(errno));
        }
    }
    // The file handed to the engine as an XRC domain's.
    ibv_xrcd_init_attr xrcd_attr{};
    xrcd_attr.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
    xrcd_attr.fd = file;
    xrcd_attr.oflags = O_CREAT;
    ibv_xrcd* xrcd = ibv_open_xrcd(side.context, &xrcd_attr);
    const int open_errno = xrcd ? 0 : errno;
    const int closed = xrcd ? ibv_close_xrcd(xrcd) : -1;
    std::printf("xrcd: %s, closed: %s\n", open_errno ? strerrorname_np(open_errno) : "0",
                xrcd ? (closed == 0 ? "0" : strerrorname_np(closed)) : "-");
    // ... and as the source file of MIGRATE_ID (written as librdmacm writes it).
    rdma_event_channel* cm_file = rdma_create_event_channel();
    if (!cm_file)
        attack::die("rdma_create_event_channel");
    const bool moved = raw_cm::migrate_id(cm_file->fd, 0, file);
    std::printf("migrate: %s\n", moved ? "0" : strerrorname_np(errno));
    std::printf("holding\n");
    std::fflush(stdout);
    for (;;)
        ::pause();
}
