// One process of the soak (tools/soak.sh): many flows between the two devices of an
// instance, each flow a pair of QPs (RC, UC, UD or XRC initiator to an XRC SRQ), doing
// random operations for a while with every byte and every atomic result checked.
//
//   soak_worker DEV_A DEV_B RC UC UD XRC SECONDS SEED heap|shared
//
// Each flow has one operation in flight; the flows run side by side, woken by completion
// channels (the process sleeps between completions, as the engine does). Operations:
// RC: RDMA write, read, send, write with immediate, fetch-and-add, compare-and-swap
// (matching or not); UC: send and write with immediate; UD: send; XRC: send into a shared
// XRC SRQ. A message carries its flow and sequence number and a pattern derived from
// both, so every receive is checked whole wherever and whenever it lands.
// The reliable transports (RC, XRC) must deliver every operation, in order, with no
// error completion. UC and UD may lose a message under the engine's injected faults
// (they have no retransmission): a message not received within a deadline is counted as
// lost, never as an error, but what is received must be whole and correct.
//
// Prints "ready" once every QP is connected, and at the end one line of figures:
//   soak: pid P qps Q ops O bytes B atomics A unreliable_lost L late R ud_again D errors E
// (late: a UC/UD message received after it was counted lost; ud_again: a UD datagram
// the wire duplicated or reordered, received again or after a newer one).
// Exits 0 when E is 0; the first error is described on stderr.
#include "connect_qp.hpp"

#include <infiniband/verbs.h>

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <random>
#include <string>
#include <sys/mman.h>
#include <unistd.h>
#include <vector>

namespace {

constexpr size_t kSlot = 8192;    // bytes of each flow's every region
constexpr uint32_t kUdMax = 1024; // a UD message fits one packet at MTU 1024
constexpr uint32_t kGrh = 40;     // a UD receive's buffer starts with the GRH
constexpr uint32_t kQkey = 0x50a50a;
constexpr uint32_t kMagic = 0x50a1c0de;
constexpr int kUnreliableWaitMs = 200; // a UC/UD message not received by then is lost
constexpr int kReliableDeadlineS = 60; // an RC/XRC operation stuck this long is an error
constexpr uint32_t kXrcReceives = 4;   // receives per XRC flow in the shared SRQ

enum class Kind { RC, UC, UD, XRC };
enum class Op { Write, Read, Send, WriteImm, FetchAdd, CompareSwap };

struct Header { // at the start of every message and write
    uint32_t magic;
    uint32_t flow;
    uint64_t seq;
    uint32_t length;
    uint32_t pad;
};

uint64_t errors = 0;

void error(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void error(const char* fmt, ...) {
    if (errors++ == 0) {
        std::fprintf(stderr, "soak: pid %d: ", getpid());
        va_list ap;
        va_start(ap, fmt);
        std::vfprintf(stderr, fmt, ap);
        va_end(ap);
        std::fputc('\n', stderr);
    }
}

[[noreturn]] void die(const char* what) {
    std::fprintf(stderr, "soak: pid %d: %s: %s\n", getpid(), what, std::strerror(errno));
    std::exit(2);
}

// Writes the message of (flow, seq) of `length` bytes at `to`: a header, then a pattern.
void fill(uint8_t* to, uint32_t flow, uint64_t seq, uint32_t length) {
    Header h{kMagic, flow, seq, length, 0};
    std::memcpy(to, &h, std::min<size_t>(sizeof(h), length));
    uint64_t x = (uint64_t{flow} << 40) ^ seq ^ 0x9e3779b97f4a7c15ull;
    for (uint32_t i = sizeof(h); i < length; ++i) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        to[i] = static_cast<uint8_t>(x);
    }
}

bool matches(const uint8_t* at, uint32_t flow, uint64_t seq, uint32_t length) {
    static std::vector<uint8_t> expected(kSlot);
    fill(expected.data(), flow, seq, length);
    return std::memcmp(at, expected.data(), length) == 0;
}

uint32_t message_length(std::mt19937_64& rng, uint32_t most) {
    // Mostly short, some up to the most: several packets at MTU 1024.
    const uint32_t least = sizeof(Header);
    return rng() % 4 ? least + static_cast<uint32_t>(rng() % 256)
                     : least + static_cast<uint32_t>(rng() % (most - least + 1));
}

// Memory: the heap (the engine reaches it by cross-memory attach) or a shared memfd
// (the engine maps it).
uint8_t* allocate(size_t bytes, bool shared) {
    if (!shared) {
        void* p = nullptr;
        if (posix_memalign(&p, 4096, bytes) != 0)
            die("posix_memalign");
        std::memset(p, 0, bytes);
        return static_cast<uint8_t*>(p);
    }
    const int fd = memfd_create("softhca-soak", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0)
        die("memfd");
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        die("mmap");
    return static_cast<uint8_t*>(p);
}

struct Side {
    ibv_context* context = nullptr;
    ibv_pd* pd = nullptr;
    ibv_comp_channel* channel = nullptr;
    ibv_cq* cq = nullptr;
    ibv_gid gid{};
    uint8_t* memory = nullptr;
    ibv_mr* mr = nullptr;

    void open(const char* name, int cqe, size_t bytes, bool shared) {
        int n = 0;
        ibv_device** list = ibv_get_device_list(&n);
        for (int i = 0; list && i < n && !context; ++i)
            if (std::strcmp(ibv_get_device_name(list[i]), name) == 0)
                context = ibv_open_device(list[i]);
        if (list)
            ibv_free_device_list(list);
        if (!context)
            die(name);
        pd = ibv_alloc_pd(context);
        channel = ibv_create_comp_channel(context);
        if (!pd || !channel)
            die("pd/channel");
        cq = ibv_create_cq(context, cqe, nullptr, channel, 0);
        if (!cq || ibv_req_notify_cq(cq, 0) != 0)
            die("cq");
        if (ibv_query_gid(context, 1, 0, &gid) != 0)
            die("gid");
        memory = allocate(bytes, shared);
        mr = ibv_reg_mr(pd, memory, bytes,
                        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                            IBV_ACCESS_REMOTE_ATOMIC);
        if (!mr)
            die("reg_mr");
    }
};

struct Flow {
    Kind kind;
    uint32_t index;
    ibv_qp* qp_a = nullptr; // requester side (device A)
    ibv_qp* qp_b = nullptr; // responder side (device B); the XRC target for XRC
    ibv_ah* ah = nullptr;   // UD: A's handle to B
    // Regions (offsets in each side's memory): A's source and A's landing area; B's
    // landing area (writes, reads' source, the atomic counter at its end) and receives.
    size_t a_src = 0, a_dst = 0, b_dst = 0, b_recv = 0;
    // The operation in flight.
    bool busy = false;
    Op op = Op::Send;
    uint64_t seq = 0;
    uint32_t length = 0;
    bool send_done = false, recv_done = false;
    std::chrono::steady_clock::time_point started;
    uint64_t counter = 0;      // the atomic counter's value as it must be
    uint64_t compare_with = 0; // a compare-and-swap's compare operand
    uint64_t swap_or_add = 0;
    uint64_t received_seq = 0; // UC/UD: the last sequence received
};

struct Figures {
    uint64_t ops = 0, bytes = 0, atomics = 0, lost = 0, late = 0, again = 0;
};

class Worker {
  public:
    Worker(const char* dev_a, const char* dev_b, const uint32_t counts[4], bool shared,
           uint64_t seed)
        : rng_(seed) {
        uint32_t total = 0;
        for (int k = 0; k < 4; ++k)
            total += counts[k];
        const int cqe = static_cast<int>(total * 4 + 64);
        a_.open(dev_a, cqe, total * 2 * kSlot, shared);
        b_.open(dev_b, cqe, total * 2 * kSlot + counts[3] * kXrcReceives * kSlot, shared);
        if (counts[3]) {
            ibv_xrcd_init_attr x{};
            x.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
            x.fd = -1;
            x.oflags = O_CREAT;
            xrcd_ = ibv_open_xrcd(b_.context, &x);
            ibv_srq_init_attr_ex s{};
            s.attr = {counts[3] * kXrcReceives, 1, 0};
            s.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ |
                          IBV_SRQ_INIT_ATTR_PD;
            s.srq_type = IBV_SRQT_XRC;
            s.xrcd = xrcd_;
            s.cq = b_.cq;
            s.pd = b_.pd;
            if (!xrcd_ || !(srq_ = ibv_create_srq_ex(b_.context, &s)) ||
                ibv_get_srq_num(srq_, &srqn_) != 0)
                die("XRC domain and SRQ");
        }
        const Kind kinds[4] = {Kind::RC, Kind::UC, Kind::UD, Kind::XRC};
        for (int k = 0; k < 4; ++k)
            for (uint32_t i = 0; i < counts[k]; ++i)
                add_flow(kinds[k]);
        for (uint32_t r = 0; r < counts[3] * kXrcReceives; ++r)
            post_srq_receive(r);
    }

    size_t qps() const { return flows_.size() * 2; }

    // Runs operations for `seconds`, then lets the ones in flight finish.
    void run(int seconds) {
        const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
        for (Flow& f : flows_)
            start(f);
        for (;;) {
            const auto now = std::chrono::steady_clock::now();
            bool any_busy = false;
            for (Flow& f : flows_) {
                if (f.busy)
                    check_deadline(f, now);
                if (!f.busy && now < end && errors == 0)
                    start(f);
                any_busy |= f.busy;
            }
            if (!any_busy || errors)
                return;
            wait_and_poll();
        }
    }

    const Figures& figures() const { return figures_; }

    // Everything destroyed in order (the other half of the runs just exit).
    void destroy() {
        for (Flow& f : flows_) {
            if (f.ah)
                ibv_destroy_ah(f.ah);
            ibv_destroy_qp(f.qp_a);
            ibv_destroy_qp(f.qp_b);
        }
        if (srq_)
            ibv_destroy_srq(srq_);
        if (xrcd_)
            ibv_close_xrcd(xrcd_);
        for (Side* s : {&a_, &b_}) {
            ibv_dereg_mr(s->mr);
            ibv_destroy_cq(s->cq);
            ibv_destroy_comp_channel(s->channel);
            ibv_dealloc_pd(s->pd);
            ibv_close_device(s->context);
        }
    }

  private:
    void add_flow(Kind kind) {
        Flow f;
        f.kind = kind;
        f.index = static_cast<uint32_t>(flows_.size());
        f.a_src = f.index * 2 * kSlot;
        f.a_dst = f.a_src + kSlot;
        f.b_dst = f.index * 2 * kSlot;
        f.b_recv = f.b_dst + kSlot;
        const ibv_qp_type type = kind == Kind::RC   ? IBV_QPT_RC
                                 : kind == Kind::UC ? IBV_QPT_UC
                                                    : IBV_QPT_UD;
        if (kind == Kind::XRC) {
            ibv_qp_init_attr_ex i{};
            i.qp_type = IBV_QPT_XRC_SEND;
            i.send_cq = a_.cq;
            i.cap.max_send_wr = 4;
            i.cap.max_send_sge = 1;
            i.comp_mask = IBV_QP_INIT_ATTR_PD;
            i.pd = a_.pd;
            f.qp_a = ibv_create_qp_ex(a_.context, &i);
            ibv_qp_init_attr_ex t{};
            t.qp_type = IBV_QPT_XRC_RECV;
            t.comp_mask = IBV_QP_INIT_ATTR_XRCD;
            t.xrcd = xrcd_;
            f.qp_b = ibv_create_qp_ex(b_.context, &t);
        } else {
            f.qp_a = create_qp(a_, type);
            f.qp_b = create_qp(b_, type);
        }
        if (!f.qp_a || !f.qp_b)
            die("create_qp");
        if (kind == Kind::UD) {
            ud_ready(f.qp_a);
            ud_ready(f.qp_b);
            ibv_ah_attr ah{};
            ah.is_global = 1;
            ah.grh.dgid = b_.gid;
            ah.grh.hop_limit = 64;
            ah.port_num = 1;
            if (!(f.ah = ibv_create_ah(a_.pd, &ah)))
                die("create_ah");
        } else {
            // One starting PSN for the flow: each end's send PSN is the other's receive PSN.
            const uint32_t psn = static_cast<uint32_t>(rng_() & 0xffffff);
            connect(f.qp_a, f.qp_b->qp_num, b_.gid, psn);
            connect(f.qp_b, f.qp_a->qp_num, a_.gid, psn);
        }
        flows_.push_back(f);
        if (kind != Kind::XRC)
            post_receive(flows_.back());
    }

    ibv_qp* create_qp(Side& s, ibv_qp_type type) {
        ibv_qp_init_attr i{};
        i.send_cq = i.recv_cq = s.cq;
        i.qp_type = type;
        i.cap = {4, 4, 1, 1, 0};
        return ibv_create_qp(s.pd, &i);
    }

    static void modify(ibv_qp* qp, ibv_qp_attr& a, int mask) {
        if (ibv_modify_qp(qp, &a, mask) != 0)
            die("modify_qp");
    }

    static void ud_ready(ibv_qp* qp) {
        ibv_qp_attr a{};
        a.qp_state = IBV_QPS_INIT;
        a.port_num = 1;
        a.qkey = kQkey;
        modify(qp, a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
        a = {};
        a.qp_state = IBV_QPS_RTR;
        modify(qp, a, IBV_QP_STATE);
        a.qp_state = IBV_QPS_RTS;
        a.sq_psn = 1;
        modify(qp, a, IBV_QP_STATE | IBV_QP_SQ_PSN);
    }

    static void connect(ibv_qp* qp, uint32_t remote_qpn, const ibv_gid& remote_gid, uint32_t psn) {
        qp_setup::ConnectedPath path;
        path.psn = psn;
        path.timeout = 12;
        if (qp_setup::connect_qp(qp, remote_qpn, remote_gid, path))
            die("modify_qp");
    }

    // wr_id: flow index << 8 | what (0 send side, 1 receive, 2 SRQ receive by buffer).
    static uint64_t wr_id(uint32_t index, uint32_t what) { return uint64_t{index} << 8 | what; }

    void post_receive(Flow& f) {
        const uint32_t room = f.kind == Kind::UD ? kUdMax + kGrh : kSlot;
        ibv_sge sge{reinterpret_cast<uintptr_t>(b_.memory + f.b_recv), room, b_.mr->lkey};
        ibv_recv_wr wr{};
        wr.wr_id = wr_id(f.index, 1);
        wr.sg_list = &sge;
        wr.num_sge = 1;
        ibv_recv_wr* bad = nullptr;
        if (ibv_post_recv(f.qp_b, &wr, &bad) != 0)
            die("post_recv");
    }

    size_t srq_buffer(uint32_t r) const { return flows_.size() * 2 * kSlot + r * kSlot; }

    void post_srq_receive(uint32_t r) {
        ibv_sge sge{reinterpret_cast<uintptr_t>(b_.memory + srq_buffer(r)), kSlot, b_.mr->lkey};
        ibv_recv_wr wr{};
        wr.wr_id = wr_id(r, 2);
        wr.sg_list = &sge;
        wr.num_sge = 1;
        ibv_recv_wr* bad = nullptr;
        if (ibv_post_srq_recv(srq_, &wr, &bad) != 0)
            die("post_srq_recv");
    }

    Op choose(Kind kind) {
        switch (kind) {
        case Kind::RC:
            return static_cast<Op>(rng_() % 6);
        case Kind::UC:
            return rng_() % 2 ? Op::Send : Op::WriteImm;
        default:
            return Op::Send;
        }
    }

    void start(Flow& f) {
        f.op = choose(f.kind);
        f.seq++;
        f.busy = true;
        f.send_done = false;
        f.started = std::chrono::steady_clock::now();
        const bool needs_receive = f.op == Op::Send || f.op == Op::WriteImm;
        f.recv_done = !needs_receive;
        f.length = message_length(rng_, f.kind == Kind::UD ? kUdMax
                                        : f.kind == Kind::UC && f.op == Op::WriteImm
                                            ? kSlot / 2
                                            : kSlot - 8); // not over the counter
        ibv_sge sge{reinterpret_cast<uintptr_t>(a_.memory + f.a_src), f.length, a_.mr->lkey};
        ibv_send_wr wr{};
        wr.wr_id = wr_id(f.index, 0);
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.send_flags = IBV_SEND_SIGNALED;
        const uint64_t remote = reinterpret_cast<uintptr_t>(b_.memory + f.b_dst);
        const uint64_t counter_at = remote + kSlot - 8;
        switch (f.op) {
        case Op::Write:
        case Op::WriteImm:
            fill(a_.memory + f.a_src, f.index, f.seq, f.length);
            wr.opcode = f.op == Op::Write ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_WRITE_WITH_IMM;
            wr.imm_data = htonl(static_cast<uint32_t>(f.seq));
            // UC alternates halves, so a write received late is not overwritten by the next.
            wr.wr.rdma.remote_addr = remote + (f.kind == Kind::UC ? (f.seq % 2) * kSlot / 2 : 0);
            wr.wr.rdma.rkey = b_.mr->rkey;
            break;
        case Op::Read:
            fill(b_.memory + f.b_dst, f.index, f.seq, f.length);
            sge.addr = reinterpret_cast<uintptr_t>(a_.memory + f.a_dst);
            wr.opcode = IBV_WR_RDMA_READ;
            wr.wr.rdma.remote_addr = remote;
            wr.wr.rdma.rkey = b_.mr->rkey;
            break;
        case Op::Send:
            fill(a_.memory + f.a_src, f.index, f.seq, f.length);
            wr.opcode = IBV_WR_SEND;
            if (f.kind == Kind::UD) {
                wr.wr.ud.ah = f.ah;
                wr.wr.ud.remote_qpn = f.qp_b->qp_num;
                wr.wr.ud.remote_qkey = kQkey;
            } else if (f.kind == Kind::XRC) {
                wr.qp_type.xrc.remote_srqn = srqn_;
            }
            break;
        case Op::FetchAdd:
        case Op::CompareSwap:
            f.length = 8;
            sge.length = 8;
            sge.addr = reinterpret_cast<uintptr_t>(a_.memory + f.a_dst);
            wr.opcode =
                f.op == Op::FetchAdd ? IBV_WR_ATOMIC_FETCH_AND_ADD : IBV_WR_ATOMIC_CMP_AND_SWP;
            wr.wr.atomic.remote_addr = counter_at;
            wr.wr.atomic.rkey = b_.mr->rkey;
            f.swap_or_add = rng_();
            // One in four compare-and-swaps compares with a wrong value: no swap.
            f.compare_with = f.op == Op::CompareSwap && rng_() % 4 == 0 ? ~f.counter : f.counter;
            wr.wr.atomic.compare_add = f.op == Op::FetchAdd ? f.swap_or_add : f.compare_with;
            wr.wr.atomic.swap = f.swap_or_add;
            break;
        }
        ibv_send_wr* bad = nullptr;
        if (ibv_post_send(f.qp_a, &wr, &bad) != 0) {
            error("flow %u: post_send: %s", f.index, std::strerror(errno));
            f.busy = false;
        }
    }

    void check_deadline(Flow& f, std::chrono::steady_clock::time_point now) {
        const bool unreliable = f.kind == Kind::UC || f.kind == Kind::UD;
        if (unreliable && f.send_done && !f.recv_done &&
            now - f.started > std::chrono::milliseconds(kUnreliableWaitMs)) {
            figures_.lost++; // the fault injector dropped part of it: UC/UD do not retry
            f.busy = false;
        } else if (now - f.started > std::chrono::seconds(kReliableDeadlineS)) {
            error("flow %u (%s): operation %" PRIu64 " did not complete in %d s", f.index,
                  name(f.kind), f.seq, kReliableDeadlineS);
            f.busy = false;
        }
    }

    static const char* name(Kind k) {
        return k == Kind::RC ? "RC" : k == Kind::UC ? "UC" : k == Kind::UD ? "UD" : "XRC";
    }

    void wait_and_poll() {
        pollfd fds[2] = {{a_.channel->fd, POLLIN, 0}, {b_.channel->fd, POLLIN, 0}};
        // Drain first: a completion may have come before the CQ was armed again.
        if (!drain(a_) && !drain(b_))
            ::poll(fds, 2, 20);
        for (Side* s : {&a_, &b_}) {
            pollfd one{s->channel->fd, POLLIN, 0};
            if (::poll(&one, 1, 0) == 1) {
                ibv_cq* cq = nullptr;
                void* ctx = nullptr;
                if (ibv_get_cq_event(s->channel, &cq, &ctx) == 0)
                    ibv_ack_cq_events(cq, 1);
            }
            ibv_req_notify_cq(s->cq, 0);
            drain(*s);
        }
    }

    bool drain(Side& s) {
        ibv_wc wc[32];
        bool any = false;
        for (int n; (n = ibv_poll_cq(s.cq, 32, wc)) > 0;) {
            any = true;
            for (int i = 0; i < n; ++i)
                completion(wc[i]);
        }
        return any;
    }

    void completion(const ibv_wc& wc) {
        const uint32_t what = wc.wr_id & 0xff;
        const uint32_t index = static_cast<uint32_t>(wc.wr_id >> 8);
        if (what == 2) { // an XRC SRQ receive: its buffer says which flow
            srq_completion(wc, index);
            return;
        }
        if (index >= flows_.size()) {
            error("a completion with an unknown wr_id %" PRIx64, wc.wr_id);
            return;
        }
        Flow& f = flows_[index];
        if (wc.status != IBV_WC_SUCCESS) {
            error("flow %u (%s) op %d seq %" PRIu64 ": %s completion %s", f.index, name(f.kind),
                  static_cast<int>(f.op), f.seq, what ? "receive" : "send",
                  ibv_wc_status_str(wc.status));
            return;
        }
        if (what == 0)
            send_completion(f);
        else
            receive_completion(f, wc);
    }

    void send_completion(Flow& f) {
        if (!f.busy || f.send_done) {
            error("flow %u: a send completion for no operation", f.index);
            return;
        }
        f.send_done = true;
        const uint8_t* b_dst = b_.memory + f.b_dst;
        switch (f.op) {
        case Op::Write: // an RC write's completion says it is in B's memory
            if (!matches(b_dst, f.index, f.seq, f.length))
                error("flow %u: RDMA write %" PRIu64 " of %u bytes did not land whole", f.index,
                      f.seq, f.length);
            break;
        case Op::Read:
            if (!matches(a_.memory + f.a_dst, f.index, f.seq, f.length))
                error("flow %u: RDMA read %" PRIu64 " of %u bytes came back wrong", f.index, f.seq,
                      f.length);
            break;
        case Op::FetchAdd:
        case Op::CompareSwap: {
            uint64_t original, now;
            std::memcpy(&original, a_.memory + f.a_dst, 8);
            std::memcpy(&now, b_dst + kSlot - 8, 8);
            if (original != f.counter)
                error("flow %u: atomic %" PRIu64 " returned %" PRIx64 ", the counter was %" PRIx64,
                      f.index, f.seq, original, f.counter);
            if (f.op == Op::FetchAdd)
                f.counter += f.swap_or_add;
            else if (f.compare_with == f.counter)
                f.counter = f.swap_or_add;
            if (now != f.counter)
                error("flow %u: after atomic %" PRIu64 " the counter is %" PRIx64 ", not %" PRIx64,
                      f.index, f.seq, now, f.counter);
            figures_.atomics++;
            break;
        }
        default:
            break;
        }
        finish_if_done(f);
    }

    void receive_completion(Flow& f, const ibv_wc& wc) {
        const uint8_t* at = b_.memory + f.b_recv;
        uint32_t length = wc.byte_len;
        if (f.kind == Kind::UD) {
            at += kGrh;
            length -= kGrh;
        }
        uint64_t seq = 0;
        if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
            seq = ntohl(wc.imm_data);
            at = b_.memory + f.b_dst + (f.kind == Kind::UC ? (seq % 2) * kSlot / 2 : 0);
            // The immediate holds the low 32 bits of the sequence.
            seq = (f.seq & ~uint64_t{0xffffffff}) | seq;
        } else {
            Header h;
            std::memcpy(&h, at, sizeof(h));
            seq = h.seq;
        }
        check_message(f, at, length, seq);
        post_receive(f);
    }

    void srq_completion(const ibv_wc& wc, uint32_t buffer) {
        if (wc.status != IBV_WC_SUCCESS) {
            error("XRC SRQ receive: %s", ibv_wc_status_str(wc.status));
            return;
        }
        const uint8_t* at = b_.memory + srq_buffer(buffer);
        Header h;
        std::memcpy(&h, at, sizeof(h));
        if (h.magic != kMagic || h.flow >= flows_.size() || flows_[h.flow].kind != Kind::XRC)
            error("XRC SRQ receive of %u bytes names no XRC flow", wc.byte_len);
        else
            check_message(flows_[h.flow], at, wc.byte_len, h.seq);
        post_srq_receive(buffer);
    }

    // A message received for flow f: whole and correct; for RC/XRC the one in flight.
    void check_message(Flow& f, const uint8_t* at, uint32_t length, uint64_t seq) {
        const bool reliable = f.kind == Kind::RC || f.kind == Kind::XRC;
        if (reliable && (!f.busy || f.recv_done || seq != f.seq)) {
            error("flow %u (%s): received sequence %" PRIu64 " while %" PRIu64 " is in flight",
                  f.index, name(f.kind), seq, f.seq);
            return;
        }
        // UC checks PSNs: a message arrives at most once and in order (9.7.5.1). UD does
        // not: a datagram the wire duplicated or reordered arrives so (counted).
        const bool again = seq <= f.received_seq;
        if (seq > f.seq || (f.kind == Kind::UC && again)) {
            error("flow %u (%s): received sequence %" PRIu64 " %s", f.index, name(f.kind), seq,
                  again ? "twice or out of order" : "before it was sent");
            return;
        }
        if (again)
            figures_.again++;
        // The message's own length: the one in flight, or a late one's from its header.
        uint32_t expected = f.length;
        if (seq != f.seq || again) {
            Header h;
            std::memcpy(&h, at, sizeof(h));
            expected = h.length;
            if (!again)
                figures_.late++;
        }
        if (length != expected || !matches(at, f.index, seq, length)) {
            error("flow %u (%s): message %" PRIu64 " arrived with %u bytes, not whole (%u)",
                  f.index, name(f.kind), seq, length, expected);
            return;
        }
        f.received_seq = std::max(f.received_seq, seq);
        if (seq == f.seq && f.busy && !f.recv_done) {
            f.recv_done = true;
            finish_if_done(f);
        }
    }

    void finish_if_done(Flow& f) {
        if (!f.busy || !f.send_done || !f.recv_done)
            return;
        f.busy = false;
        figures_.ops++;
        figures_.bytes += f.length;
    }

    std::mt19937_64 rng_;
    Side a_, b_;
    ibv_xrcd* xrcd_ = nullptr;
    ibv_srq* srq_ = nullptr;
    uint32_t srqn_ = 0;
    std::vector<Flow> flows_;
    Figures figures_;
};

} // namespace

int main(int argc, char** argv) {
    if (argc != 10) {
        std::fprintf(stderr, "usage: soak_worker DEV_A DEV_B RC UC UD XRC SECONDS SEED "
                             "heap|shared\n");
        return 2;
    }
    const uint32_t counts[4] = {
        static_cast<uint32_t>(std::atoi(argv[3])), static_cast<uint32_t>(std::atoi(argv[4])),
        static_cast<uint32_t>(std::atoi(argv[5])), static_cast<uint32_t>(std::atoi(argv[6]))};
    const int seconds = std::atoi(argv[7]);
    const uint64_t seed = std::strtoull(argv[8], nullptr, 0);
    const bool shared = std::string(argv[9]) == "shared";
    Worker worker(argv[1], argv[2], counts, shared, seed);
    std::printf("ready\n");
    std::fflush(stdout);
    worker.run(seconds);
    const Figures& f = worker.figures();
    std::printf("soak: pid %d qps %zu ops %" PRIu64 " bytes %" PRIu64 " atomics %" PRIu64
                " unreliable_lost %" PRIu64 " late %" PRIu64 " ud_again %" PRIu64 " errors %" PRIu64
                "\n",
                getpid(), worker.qps(), f.ops, f.bytes, f.atomics, f.lost, f.late, f.again, errors);
    if (seed % 2)
        worker.destroy();
    return errors ? 1 : 0;
}
