// NCCL's IB transport, as its verbs see it, between two processes (the receiver on
// <prefix>0, the sender on <prefix>1), through the system libibverbs: no NCCL and no GPU,
// the same sequence of verbs on host memory (net_ib.cc, NCCL 2.18 to 2.30).
//
// - One RC QP per side with NCCL's attributes: 512 send and 256 receive WRs, one CQ for
//   both, no inline data; the receiver also has a QP connected to itself for the flush.
// - The receiver posts its receives with no SGE, then tells the sender where to write by
//   an RDMA WRITE of a FIFO entry (address, size, rkey, tag, then idx last) into the
//   sender's FIFO slot.
// - The sender polls that slot's idx in memory, not a completion, then reads the other
//   fields, which must already be there (placement order), and checks each.
// - The data goes as a chain of unsignalled RDMA WRITEs (zero-length ones included) ended
//   by a signalled RDMA WRITE with immediate of length 0 carrying the size, which consumes
//   the receiver's 0-SGE receive.
// - The receiver, on that completion, checks the immediate, does NCCL's flush (a 1-byte
//   RDMA READ on the self-connected QP), then checks every byte.
// Buffers come from a MAP_SHARED anonymous mapping (as cudaHostAlloc's) and from
// posix_memalign (NCCL's FIFO and its private structures): the engine's two memory paths.
//   nccl_shaped_test [MESSAGES]   (SOFTHCA_PREFIX names the instance; prints one line)
#include "connect_qp.hpp"

#include <infiniband/verbs.h>

#include <arpa/inet.h>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

constexpr int kSteps = 8; // NCCL_STEPS: FIFO slots
constexpr size_t kMaxMessage = 4 << 20;
constexpr size_t kGuard = 64;
constexpr uint32_t kSendWrs = 512, kRecvWrs = 256;

[[noreturn]] void die(const char* role, const std::string& what) {
    std::fprintf(stderr, "nccl_shaped_test %s: FAIL: %s\n", role, what.c_str());
    std::exit(1);
}

// ncclIbSendFifo: what the receiver tells the sender, idx written last.
struct alignas(64) FifoEntry {
    uint64_t addr;
    uint64_t size;
    uint32_t rkey;
    uint32_t nreqs;
    uint64_t tag;
    uint64_t pad[3];
    uint64_t idx;
};
static_assert(sizeof(FifoEntry) == 64);

void* allocate(size_t bytes, bool shared) {
    if (shared) {
        void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        return p == MAP_FAILED ? nullptr : p;
    }
    void* p = nullptr;
    return posix_memalign(&p, 4096, bytes) == 0 ? p : nullptr;
}

uint8_t pattern(uint64_t message, uint64_t i) {
    return static_cast<uint8_t>((message * 151 + i * 13 + (i >> 12)) ^ 0x3c);
}

struct Endpoint {
    uint32_t qpn;
    ibv_gid gid;
    uint64_t fifo_addr; // the sender's FIFO (the receiver writes it)
    uint32_t fifo_rkey;
};

struct Side {
    const char* role;
    ibv_context* context = nullptr;
    ibv_pd* pd = nullptr;
    ibv_cq* cq = nullptr;
    ibv_qp* qp = nullptr;
    ibv_gid gid{};

    Side(const char* r, int device) : role(r) {
        int count = 0;
        ibv_device** list = ibv_get_device_list(&count);
        const char* prefix = std::getenv("SOFTHCA_PREFIX");
        const std::string name = std::string(prefix ? prefix : "softhca") + std::to_string(device);
        for (int i = 0; i < count && !context; ++i)
            if (name == ibv_get_device_name(list[i]))
                context = ibv_open_device(list[i]);
        ibv_free_device_list(list);
        if (!context)
            die(role, "cannot open " + name);
        pd = ibv_alloc_pd(context);
        cq = ibv_create_cq(context, 2 * kSendWrs + kRecvWrs, nullptr, nullptr, 0);
        if (!pd || !cq || ibv_query_gid(context, 1, 0, &gid) != 0)
            die(role, "PD, CQ or GID");
        qp = make_qp();
    }
    ibv_qp* make_qp() {
        ibv_qp_init_attr a{};
        a.send_cq = cq;
        a.recv_cq = cq;
        a.qp_type = IBV_QPT_RC;
        a.cap = {kSendWrs, kRecvWrs, 1, 1, 0};
        ibv_qp* q = ibv_create_qp(pd, &a);
        if (!q)
            die(role, "ibv_create_qp with NCCL's 512/256 WRs");
        return q;
    }
    ibv_mr* reg(void* at, size_t bytes, int access) {
        // NCCL registers with relaxed ordering where the device takes it.
        ibv_mr* mr = ibv_reg_mr_iova2(pd, at, bytes, reinterpret_cast<uintptr_t>(at),
                                      access | IBV_ACCESS_RELAXED_ORDERING);
        if (!mr)
            die(role, "ibv_reg_mr_iova2");
        return mr;
    }
    void connect(ibv_qp* q, uint32_t remote_qpn, const ibv_gid& remote_gid) {
        qp_setup::ConnectedPath path;
        path.access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_LOCAL_WRITE;
        path.mtu = IBV_MTU_4096;
        path.hop_limit = 255;
        path.min_rnr_timer = 12;
        path.rd_atomic = 1;
        path.timeout = 14; // NCCL_IB_TIMEOUT 20 is ~4 s a retry; tests want less
        if (const char* state = qp_setup::connect_qp(q, remote_qpn, remote_gid, path))
            die(role, state);
    }
    ibv_wc wait_one() {
        ibv_wc wc{};
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        while (ibv_poll_cq(cq, 1, &wc) == 0)
            if (std::chrono::steady_clock::now() > deadline)
                die(role, "no completion in 60 s");
        if (wc.status != IBV_WC_SUCCESS)
            die(role, std::string("completion ") + ibv_wc_status_str(wc.status));
        return wc;
    }
    void post(ibv_qp* q, ibv_send_wr& wr) {
        ibv_send_wr* bad = nullptr;
        if (ibv_post_send(q, &wr, &bad))
            die(role, "ibv_post_send");
    }
};

void exchange(int fd, const Endpoint& mine, Endpoint& theirs) {
    if (write(fd, &mine, sizeof(mine)) != sizeof(mine) ||
        read(fd, &theirs, sizeof(theirs)) != sizeof(theirs))
        die("bootstrap", "socket exchange");
}

// The size of message m: zero, small, one packet, many, up to 4 MiB.
size_t size_of(int m) {
    const size_t sizes[] = {0, 1, 8, 63, 4096, 4097, 65536, 1 << 20, 200000, kMaxMessage};
    return sizes[m % 10];
}

int receiver(int fd, int messages, bool shared) {
    Side s("receiver", 0);
    auto* data = static_cast<uint8_t*>(allocate(kMaxMessage + kGuard, shared));
    auto* fifo_out = static_cast<FifoEntry*>(allocate(sizeof(FifoEntry) * kSteps, false));
    auto* flush_target = static_cast<uint8_t*>(allocate(64, false));
    if (!data || !fifo_out || !flush_target)
        die(s.role, "memory");
    ibv_mr* data_mr =
        s.reg(data, kMaxMessage,
              IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    ibv_mr* fifo_mr = s.reg(fifo_out, sizeof(FifoEntry) * kSteps, IBV_ACCESS_LOCAL_WRITE);
    ibv_mr* flush_mr = s.reg(flush_target, 64, IBV_ACCESS_LOCAL_WRITE);
    Endpoint theirs{};
    exchange(fd, {s.qp->qp_num, s.gid, 0, 0}, theirs);
    s.connect(s.qp, theirs.qpn, theirs.gid);
    // The GDR flush QP, connected to itself (ncclIbGdrFlush).
    ibv_qp* flush_qp = s.make_qp();
    s.connect(flush_qp, flush_qp->qp_num, s.gid);
    for (int m = 0; m < messages; ++m) {
        const size_t size = size_of(m);
        std::memset(data, 0, size + kGuard); // and past it: nothing may land there
        // A receive with no SGE, for the sender's WRITE_WITH_IMM.
        ibv_recv_wr rwr{};
        rwr.wr_id = 1000 + m;
        ibv_recv_wr* bad = nullptr;
        if (int err = ibv_post_recv(s.qp, &rwr, &bad))
            die(s.role, "ibv_post_recv with no SGE: " + std::string(strerror(err)));
        // The FIFO entry, idx last, by RDMA WRITE into the sender's slot.
        FifoEntry& e = fifo_out[m % kSteps];
        e = {};
        e.addr = reinterpret_cast<uintptr_t>(data);
        e.size = size;
        e.rkey = data_mr->rkey;
        e.nreqs = 1;
        e.tag = 0x7a6000000ull + m;
        e.idx = m + 1;
        ibv_sge sge{reinterpret_cast<uintptr_t>(&e), sizeof(e), fifo_mr->lkey};
        ibv_send_wr wr{};
        wr.wr_id = 2000 + m;
        wr.opcode = IBV_WR_RDMA_WRITE;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.wr.rdma.remote_addr = theirs.fifo_addr + (m % kSteps) * sizeof(FifoEntry);
        wr.wr.rdma.rkey = theirs.fifo_rkey;
        s.post(s.qp, wr);
        // Two completions on the one CQ: the FIFO WRITE's and the receive's.
        bool received = false, written = false;
        while (!received || !written) {
            const ibv_wc wc = s.wait_one();
            if (wc.opcode == IBV_WC_RDMA_WRITE) {
                written = true;
            } else if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
                if (wc.wr_id != 1000u + m || ntohl(wc.imm_data) != size)
                    die(s.role, "message " + std::to_string(m) + ": immediate " +
                                    std::to_string(ntohl(wc.imm_data)) + ", want " +
                                    std::to_string(size));
                received = true;
            } else {
                die(s.role, "unexpected completion opcode " + std::to_string(wc.opcode));
            }
        }
        // NCCL's flush: a 1-byte READ of the data on the QP connected to itself.
        ibv_sge fsge{reinterpret_cast<uintptr_t>(flush_target), 1, flush_mr->lkey};
        ibv_send_wr fwr{};
        fwr.opcode = IBV_WR_RDMA_READ;
        fwr.send_flags = IBV_SEND_SIGNALED;
        fwr.sg_list = &fsge;
        fwr.num_sge = 1;
        fwr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(data);
        fwr.wr.rdma.rkey = data_mr->rkey;
        ibv_send_wr* fbad = nullptr;
        if (ibv_post_send(flush_qp, &fwr, &fbad))
            die(s.role, "flush READ");
        if (s.wait_one().opcode != IBV_WC_RDMA_READ)
            die(s.role, "flush completion");
        for (size_t i = 0; i < size; ++i)
            if (data[i] != pattern(m, i))
                die(s.role, "message " + std::to_string(m) + " of " + std::to_string(size) +
                                " B: byte " + std::to_string(i) + " wrong");
        for (size_t i = size; i < size + kGuard; ++i)
            if (data[i] != 0)
                die(s.role, "message " + std::to_string(m) + ": a byte written past its end");
    }
    std::printf("nccl_shaped_test: %d messages received on %s memory, every byte checked\n",
                messages, shared ? "MAP_SHARED" : "posix_memalign");
    std::fflush(stdout); // before the next fork copies the buffer
    ibv_destroy_qp(flush_qp);
    return 0;
}

int sender(int fd, int messages, bool shared) {
    Side s("sender", 1);
    auto* data = static_cast<uint8_t*>(allocate(kMaxMessage, shared));
    auto* fifo = static_cast<FifoEntry*>(allocate(sizeof(FifoEntry) * kSteps, false));
    if (!data || !fifo)
        die(s.role, "memory");
    std::memset(fifo, 0, sizeof(FifoEntry) * kSteps);
    ibv_mr* data_mr = s.reg(data, kMaxMessage, IBV_ACCESS_LOCAL_WRITE);
    ibv_mr* fifo_mr =
        s.reg(fifo, sizeof(FifoEntry) * kSteps,
              IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    Endpoint theirs{};
    exchange(fd, {s.qp->qp_num, s.gid, reinterpret_cast<uintptr_t>(fifo), fifo_mr->rkey}, theirs);
    s.connect(s.qp, theirs.qpn, theirs.gid);
    for (int m = 0; m < messages; ++m) {
        const size_t size = size_of(m);
        for (size_t i = 0; i < size; ++i)
            data[i] = pattern(m, i);
        // Poll the slot's idx in memory, then read the rest of the entry.
        volatile FifoEntry& slot = fifo[m % kSteps];
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        while (__atomic_load_n(&slot.idx, __ATOMIC_ACQUIRE) != static_cast<uint64_t>(m + 1))
            if (std::chrono::steady_clock::now() > deadline)
                die(s.role, "FIFO slot " + std::to_string(m % kSteps) + " never got idx " +
                                std::to_string(m + 1));
        const uint64_t addr = slot.addr, want = slot.size, tag = slot.tag;
        const uint32_t rkey = slot.rkey, nreqs = slot.nreqs;
        if (want != size || tag != 0x7a6000000ull + m || nreqs != 1 || !addr || !rkey)
            die(s.role, "FIFO entry " + std::to_string(m) +
                            " seen with its idx but not its "
                            "fields: size " +
                            std::to_string(want) + " tag " + std::to_string(tag));
        // A chain of WRITEs (the first of zero length), then a zero-length
        // WRITE_WITH_IMM carrying the size: only the last is signalled.
        constexpr int kChunks = 3;
        ibv_sge sges[kChunks + 1];
        ibv_send_wr wrs[kChunks + 2]{};
        size_t at = 0;
        for (int c = 0; c <= kChunks; ++c) {
            const size_t part = c == 0 ? 0 : (c == kChunks ? size - at : size / kChunks);
            sges[c] = {reinterpret_cast<uintptr_t>(data + at), static_cast<uint32_t>(part),
                       data_mr->lkey};
            ibv_send_wr& w = wrs[c];
            w.wr_id = 3000 + m;
            w.opcode = IBV_WR_RDMA_WRITE;
            w.sg_list = part ? &sges[c] : nullptr;
            w.num_sge = part ? 1 : 0;
            w.wr.rdma.remote_addr = addr + at;
            w.wr.rdma.rkey = rkey;
            w.next = &wrs[c + 1];
            at += part;
        }
        ibv_send_wr& last = wrs[kChunks + 1];
        last.wr_id = 4000 + m;
        last.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
        last.send_flags = IBV_SEND_SIGNALED;
        last.imm_data = htonl(static_cast<uint32_t>(size));
        last.wr.rdma.remote_addr = addr;
        last.wr.rdma.rkey = rkey;
        s.post(s.qp, wrs[0]);
        const ibv_wc wc = s.wait_one();
        if (wc.opcode != IBV_WC_RDMA_WRITE || wc.wr_id != 4000u + m)
            die(s.role, "the WRITE_WITH_IMM's completion");
    }
    return 0;
}

} // namespace

int main(int argc, char** argv) {
    const int messages = argc > 1 ? std::atoi(argv[1]) : 60;
    for (const bool shared : {true, false}) {
        int fds[2];
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds))
            die("bootstrap", "socketpair");
        const pid_t child = fork();
        if (child == 0) {
            close(fds[0]);
            std::exit(sender(fds[1], messages, shared));
        }
        close(fds[1]);
        const int rc = receiver(fds[0], messages, shared);
        int status = 0;
        waitpid(child, &status, 0);
        if (rc != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
            die("main", "the sender failed");
        close(fds[0]);
    }
    return 0;
}
