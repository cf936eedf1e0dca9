// Attack: reach another process's memory through a context whose process is no longer
// the one that opened it (issue 26, item 1).
//
//   stale_context_attack DEV0 DEV1 exec   the opener forks a child that keeps the
//       context, then execs a target that makes itself non-dumpable (as a setuid
//       program is) and puts a secret at the address of the opener's MR;
//   stale_context_attack DEV0 DEV1 reuse  the opener exits and a new process takes its
//       PID (forced through /proc/sys/kernel/ns_last_pid) with the secret there.
//
// The child then drives RDMA READ and WRITE, from a context of its own, against the
// old context's MR (and its implicit on-demand MR, which covers every address). Every
// one must fail, the target's secret must stay unread and unchanged, and the engine
// must keep serving an honest transfer beside it. Exit 0 when the attack failed.
#include "attack_verbs.hpp"
#include "fork_with_pid.hpp"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <string>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace {

using attack::connect_qp;
using attack::die;
using attack::make_qp;
using attack::open_side;
using attack::Side;

constexpr uint64_t kRegion = 0x5e5e00000000ull; // where the MR and, later, the secret sit
constexpr size_t kBytes = 65536;
constexpr char kSecret[] = "the target's secret: 7f3a9c1e5b2d4086";

uint8_t* map_region() {
    void* p = mmap(reinterpret_cast<void*>(kRegion), kBytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (p != reinterpret_cast<void*>(kRegion))
        die("mmap at the fixed address");
    return static_cast<uint8_t*>(p);
}

// The target: the secret at kRegion, non-dumpable; tells `ready`, waits for `go`, then
// exits 0 if its memory is as it made it, 3 if anything was written into it.
int run_target(int ready, int go) {
    prctl(PR_SET_DUMPABLE, 0);
    munmap(reinterpret_cast<void*>(kRegion), kBytes); // a forked target has the opener's
    uint8_t* region = map_region();
    std::memset(region, 's', kBytes);
    std::memcpy(region, kSecret, sizeof(kSecret));
    [[maybe_unused]] ssize_t w = write(ready, "r", 1);
    char c;
    [[maybe_unused]] ssize_t r = read(go, &c, 1);
    if (std::memcmp(region, kSecret, sizeof(kSecret)) != 0)
        return 3;
    for (size_t i = sizeof(kSecret); i < kBytes; ++i)
        if (region[i] != 's')
            return 3;
    return 0;
}

// One RDMA operation from `qp`; returns its completion status.
ibv_wc_status one_op(const Side& s, ibv_qp* qp, ibv_wr_opcode opcode, ibv_mr* local,
                     void* local_addr, uint32_t length, uint64_t remote, uint32_t rkey) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(local_addr), length, local->lkey};
    ibv_send_wr wr{};
    wr.wr_id = 1;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = opcode;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = remote;
    wr.wr.rdma.rkey = rkey;
    ibv_send_wr* bad = nullptr;
    if (ibv_post_send(qp, &wr, &bad))
        die("post_send");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    ibv_wc wc{};
    while (ibv_poll_cq(s.cq, 1, &wc) == 0) {
        if (std::chrono::steady_clock::now() > deadline) {
            std::fprintf(stderr, "no completion\n");
            std::exit(2);
        }
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    return wc.status;
}

} // namespace

int main(int argc, char** argv) {
    if (argc == 4 && std::string(argv[1]) == "--target")
        return run_target(std::atoi(argv[2]), std::atoi(argv[3]));
    if (argc != 4)
        die("usage: stale_context_attack DEV0 DEV1 exec|reuse");
    const std::string mode = argv[3];
    const bool exec_mode = mode == "exec";

    // The opener: a context on DEV0 with an MR on private memory at kRegion, an implicit
    // on-demand MR over its whole address space (if the device has them), and a QP.
    Side victim = open_side(argv[1]);
    uint8_t* region = map_region();
    std::memset(region, 'a', kBytes);
    constexpr int kRemote =
        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
    ibv_mr* mr = ibv_reg_mr(victim.pd, region, kBytes, kRemote);
    if (!mr)
        die("reg_mr");
    ibv_mr* implicit = ibv_reg_mr(victim.pd, nullptr, SIZE_MAX, kRemote | IBV_ACCESS_ON_DEMAND);
    int ready[2], go[2];
    if (pipe(ready) || pipe(go))
        die("pipe");
    const pid_t opener = getpid();

    const pid_t attacker = fork();
    if (attacker < 0)
        die("fork");
    if (attacker > 0) {
        // The opener: becomes the target (exec), or exits and leaves its PID (reuse).
        if (exec_mode) {
            const std::string r = std::to_string(ready[1]), g = std::to_string(go[0]);
            execl("/proc/self/exe", argv[0], "--target", r.c_str(), g.c_str(), nullptr);
            die("exec");
        }
        _exit(0);
    }

    // The attacker: the child that kept the opener's context.
    pid_t target = 0;
    if (!exec_mode) {
        // Wait for the opener to be gone (reaped by our parent, the shell), then take
        // its PID for the target.
        while (kill(opener, 0) == 0)
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        target = softhca::test::fork_with_pid(opener);
        if (target < 0)
            die("fork target");
        if (target == 0)
            _exit(run_target(ready[1], go[0]));
        if (target != opener) {
            // Another process forked in between and took the PID (the test runs alone
            // to avoid it): the attack could not be set up.
            std::fprintf(stderr, "stale_context_attack: the target got pid %d, not %d\n", target,
                         opener);
            kill(target, SIGKILL);
            return 2;
        }
    }
    char c;
    if (read(ready[0], &c, 1) != 1)
        die("target not ready");
    std::printf("target ready at pid %d (the opener's)\n", opener);

    Side mine = open_side(argv[2]);
    std::vector<uint8_t> buffer(kBytes, 'x');
    ibv_mr* local = ibv_reg_mr(mine.pd, buffer.data(), kBytes, kRemote);
    if (!local)
        die("reg_mr of my own");
    int failures = 0;
    auto attempt = [&](const char* what, ibv_wr_opcode opcode, uint32_t rkey) {
        ibv_qp* theirs = make_qp(victim); // in the stale context, through the kept socket
        ibv_qp* ours = make_qp(mine);
        connect_qp(theirs, ours->qp_num, mine.gid);
        connect_qp(ours, theirs->qp_num, victim.gid);
        if (opcode == IBV_WR_RDMA_WRITE)
            std::memcpy(buffer.data(), "PWNED PWNED PWNED", 17);
        else
            std::memset(buffer.data(), 'x', kBytes);
        const ibv_wc_status status =
            one_op(mine, ours, opcode, local, buffer.data(), 4096, kRegion, rkey);
        const bool leaked =
            opcode == IBV_WR_RDMA_READ && std::memcmp(buffer.data(), kSecret, sizeof(kSecret)) == 0;
        std::printf("%-28s %s (%s)%s\n", what, status == IBV_WC_SUCCESS ? "SUCCEEDED" : "failed",
                    ibv_wc_status_str(status), leaked ? ": READ THE SECRET" : "");
        if (status == IBV_WC_SUCCESS || leaked)
            ++failures;
        ibv_destroy_qp(ours);
        ibv_destroy_qp(theirs);
        ibv_wc drain;
        while (ibv_poll_cq(victim.cq, 1, &drain) > 0) {
        }
    };
    attempt("RDMA READ through the MR", IBV_WR_RDMA_READ, mr->rkey);
    attempt("RDMA WRITE through the MR", IBV_WR_RDMA_WRITE, mr->rkey);
    if (implicit) {
        attempt("RDMA READ, implicit ODP MR", IBV_WR_RDMA_READ, implicit->rkey);
        attempt("RDMA WRITE, implicit ODP MR", IBV_WR_RDMA_WRITE, implicit->rkey);
    } else {
        std::printf("implicit on-demand MR not offered (%s): skipped\n", std::strerror(errno));
    }

    // The target checks its memory; an honest transfer on fresh contexts still works.
    [[maybe_unused]] ssize_t w = write(go[1], "g", 1);
    // (The exec'd target is our parent: its exit code, its verdict, goes to the shell.)
    int status = 0;
    if (!exec_mode &&
        (waitpid(target, &status, 0) != target || !WIFEXITED(status) || WEXITSTATUS(status) != 0)) {
        std::printf("the target's memory was changed\n");
        ++failures;
    }
    Side honest_a = open_side(argv[1]);
    std::vector<uint8_t> theirs(kBytes, 0);
    ibv_mr* honest_mr = ibv_reg_mr(honest_a.pd, theirs.data(), kBytes, kRemote);
    ibv_qp* qa = make_qp(honest_a);
    ibv_qp* qb = make_qp(mine);
    connect_qp(qa, qb->qp_num, mine.gid);
    connect_qp(qb, qa->qp_num, honest_a.gid);
    std::memset(buffer.data(), 'h', kBytes);
    const ibv_wc_status honest =
        one_op(mine, qb, IBV_WR_RDMA_WRITE, local, buffer.data(), kBytes,
               reinterpret_cast<uintptr_t>(theirs.data()), honest_mr->rkey);
    const bool intact = honest == IBV_WC_SUCCESS && theirs[0] == 'h' && theirs[kBytes - 1] == 'h';
    std::printf("honest RDMA WRITE beside it: %s\n", intact ? "ok" : "FAILED");
    if (!intact)
        ++failures;
    std::printf("%s\n", failures ? "ATTACK SUCCEEDED" : "attack failed: PASS");
    return failures ? 1 : 0;
}
