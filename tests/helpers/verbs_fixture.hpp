// What the end-to-end verbs programs share: the two devices of an instance
// (<prefix>0 and <prefix>1) opened once per process with a PD and a CQ each,
// registered buffers, bounded waits for completions and async events, and posting.
#pragma once

#include "connect_qp.hpp"
#include "test_device.hpp"

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <memory>
#include <poll.h>
#include <string>
#include <sys/mman.h>
#include <unistd.h>
#include <vector>

namespace {

inline std::string device_name(int n) {
    const char* prefix = std::getenv("SOFTHCA_PREFIX");
    return std::string(prefix && *prefix ? prefix : "softhca") + std::to_string(n);
}

struct Device {
    ibv_context* context = nullptr;
    ibv_pd* pd = nullptr;
    ibv_cq* cq = nullptr;
    union ibv_gid gid {};
    explicit Device(int n) {
        context = open_test_device(device_name(n));
        REQUIRE(context);
        pd = ibv_alloc_pd(context);
        cq = ibv_create_cq(context, 4096, nullptr, nullptr, 0);
        REQUIRE((pd && cq));
        REQUIRE(ibv_query_gid(context, 1, 0, &gid) == 0);
    }
    ~Device() {
        ibv_destroy_cq(cq);
        ibv_dealloc_pd(pd);
        ibv_close_device(context);
    }
};

inline Device& dev(int n) {
    static std::unique_ptr<Device> devices[2];
    if (!devices[n])
        devices[n] = std::make_unique<Device>(n);
    return *devices[n];
}

// Application memory for a test buffer: from the heap (the engine reaches it with
// cross-memory attach), or, with SOFTHCA_TEST_MEMORY=shared, a MAP_SHARED memfd (the
// engine maps it and copies with memcpy), so each test can run on either memory path.
class TestMemory {
  public:
    explicit TestMemory(size_t size, bool shared = shared_by_default()) : size_(size) {
        if (!shared) {
            heap_.resize(size);
            data_ = heap_.data();
            return;
        }
        const int fd = memfd_create("softhca-test", MFD_CLOEXEC);
        REQUIRE(fd >= 0);
        REQUIRE(ftruncate(fd, static_cast<off_t>(size)) == 0);
        void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        REQUIRE(p != MAP_FAILED);
        data_ = static_cast<uint8_t*>(p);
        mapped_ = true;
    }
    ~TestMemory() {
        if (mapped_)
            munmap(data_, size_);
    }
    TestMemory(const TestMemory&) = delete;
    TestMemory& operator=(const TestMemory&) = delete;
    static bool shared_by_default() {
        const char* kind = std::getenv("SOFTHCA_TEST_MEMORY");
        return kind && std::string(kind) == "shared";
    }
    uint8_t* data() { return data_; }
    const uint8_t* data() const { return data_; }
    size_t size() const { return size_; }
    uint8_t& operator[](size_t i) { return data_[i]; }
    const uint8_t& operator[](size_t i) const { return data_[i]; }
    uint8_t* begin() { return data_; }
    uint8_t* end() { return data_ + size_; }

  private:
    std::vector<uint8_t> heap_;
    uint8_t* data_ = nullptr;
    size_t size_;
    bool mapped_ = false;
};

struct Buffer {
    TestMemory bytes;
    ibv_mr* mr = nullptr;
    Buffer(Device& d, size_t size, int access, bool shared = TestMemory::shared_by_default())
        : bytes(size, shared) {
        mr = ibv_reg_mr(d.pd, bytes.data(), size, access);
        REQUIRE(mr);
    }
    ~Buffer() { ibv_dereg_mr(mr); }
    uint64_t addr(size_t offset = 0) const {
        return reinterpret_cast<uintptr_t>(bytes.data()) + offset;
    }
};

constexpr int kAllAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                           IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

inline uint8_t pattern(uint64_t seed, size_t i) {
    return static_cast<uint8_t>((seed * 131 + i * 7 + (i >> 9)) ^ 0xa5);
}

inline void fill(Buffer& b, uint64_t seed, size_t offset, size_t length) {
    for (size_t i = 0; i < length; ++i)
        b.bytes[offset + i] = pattern(seed, i);
}

inline bool matches(const Buffer& b, uint64_t seed, size_t offset, size_t length) {
    for (size_t i = 0; i < length; ++i)
        if (b.bytes[offset + i] != pattern(seed, i))
            return false;
    return true;
}

// How a connected QP is brought to RTS.
struct Path {
    uint8_t rnr_retry = 7;
    uint8_t retry_cnt = 7;
    uint8_t timeout = 14;
    uint8_t rd_atomic = 4; // max_rd_atomic and max_dest_rd_atomic
    uint8_t sl = 0;
};

// RESET -> INIT -> RTR -> RTS for a connected QP (connect_qp.hpp) towards remote_qpn at
// remote_gid, PSNs near the wrap.
inline void connect(ibv_qp* qp, uint32_t remote_qpn, const ibv_gid& remote_gid, Path path = {}) {
    qp_setup::ConnectedPath p;
    p.psn = 0xfffff0; // near the wrap
    p.sl = path.sl;
    p.rd_atomic = path.rd_atomic;
    p.timeout = path.timeout;
    p.retry_cnt = path.retry_cnt;
    p.rnr_retry = path.rnr_retry;
    const char* failed = qp_setup::connect_qp(qp, remote_qpn, remote_gid, p);
    INFO("the QP did not enter " << (failed ? failed : "-"));
    REQUIRE(failed == nullptr);
}

// A QP of `type` in `d`'s PD with `cap`, completing into `cq` (default: the device's)
// and receiving from `srq` if one is given.
inline ibv_qp* create_qp_on(Device& d, ibv_qp_type type, ibv_qp_cap cap, ibv_cq* cq = nullptr,
                            ibv_srq* srq = nullptr) {
    ibv_qp_init_attr init{};
    init.send_cq = cq ? cq : d.cq;
    init.recv_cq = cq ? cq : d.cq;
    init.srq = srq;
    init.qp_type = type;
    init.cap = cap;
    ibv_qp* qp = ibv_create_qp(d.pd, &init);
    REQUIRE(qp);
    return qp;
}

// The Q_Key the UD tests use.
constexpr uint32_t kQkey = 0x11111111;

// RESET -> INIT -> RTR -> RTS for a UD QP.
inline void ud_ready(ibv_qp* qp, uint32_t qkey = kQkey) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qkey = qkey;
    REQUIRE(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY) ==
            0);
    a = {};
    a.qp_state = IBV_QPS_RTR;
    REQUIRE(ibv_modify_qp(qp, &a, IBV_QP_STATE) == 0);
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = 1;
    REQUIRE(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN) == 0);
}

inline ibv_ah* make_ah(Device& from, const ibv_gid& to, uint8_t traffic_class = 0, uint8_t sl = 0) {
    ibv_ah_attr attr{};
    attr.is_global = 1;
    attr.grh.dgid = to;
    attr.grh.hop_limit = 64;
    attr.grh.traffic_class = traffic_class;
    attr.sl = sl;
    attr.port_num = 1;
    ibv_ah* ah = ibv_create_ah(from.pd, &attr);
    REQUIRE(ah);
    return ah;
}

// Polls until `count` completions arrived on `cq` (bounded in time).
inline std::vector<ibv_wc> wait_completions(ibv_cq* cq, size_t count, int seconds = 30) {
    std::vector<ibv_wc> out;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    while (out.size() < count && std::chrono::steady_clock::now() < deadline) {
        ibv_wc wc[32];
        const int n = ibv_poll_cq(cq, 32, wc);
        REQUIRE(n >= 0);
        out.insert(out.end(), wc, wc + n);
    }
    REQUIRE(out.size() == count);
    return out;
}

// ... on the device's CQ.
inline std::vector<ibv_wc> wait_completions(Device& d, size_t count, int seconds = 30) {
    return wait_completions(d.cq, count, seconds);
}

// Waits (bounded) for the next async event of a device and checks it.
inline void expect_async_event(Device& d, ibv_event_type type, const void* element) {
    pollfd pfd{d.context->async_fd, POLLIN, 0};
    REQUIRE(poll(&pfd, 1, 5000) == 1);
    ibv_async_event event{};
    REQUIRE(ibv_get_async_event(d.context, &event) == 0);
    CHECK(event.event_type == type);
    if (type == IBV_EVENT_CQ_ERR)
        CHECK(event.element.cq == element);
    else if (type == IBV_EVENT_SRQ_LIMIT_REACHED || type == IBV_EVENT_SRQ_ERR)
        CHECK(event.element.srq == element);
    else
        CHECK(event.element.qp == element);
    ibv_ack_async_event(&event);
}

// A signaled work request of `opcode` over `num_sge` SGEs at `sge`; the caller adds the
// remote address, immediate data, atomic operands or UD address.
// Whether a sender's completion is the status `expected` of an error the responder
// answers with a fatal NAK. Under injected loss (SOFTHCA_TEST_LOSSY) the NAK itself may
// be lost: the requester then retries into a responder already in the error state and
// runs out of retries (RETRY_EXC_ERR), as on a real fabric.
inline bool fatal_nak_status(int status, int expected) {
    return status == expected ||
           (std::getenv("SOFTHCA_TEST_LOSSY") && status == IBV_WC_RETRY_EXC_ERR);
}

inline ibv_send_wr signaled_wr(ibv_wr_opcode opcode, ibv_sge* sge, int num_sge = 1,
                               uint64_t id = 0) {
    ibv_send_wr wr{};
    wr.wr_id = id;
    wr.opcode = opcode;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = sge;
    wr.num_sge = num_sge;
    return wr;
}

inline void post(ibv_qp* qp, ibv_send_wr& wr) {
    ibv_send_wr* bad = nullptr;
    REQUIRE(ibv_post_send(qp, &wr, &bad) == 0);
}

inline void post_recv(ibv_qp* qp, uint64_t id, ibv_sge* sge, int num_sge) {
    ibv_recv_wr wr{};
    wr.wr_id = id;
    wr.sg_list = sge;
    wr.num_sge = num_sge;
    ibv_recv_wr* bad = nullptr;
    REQUIRE(ibv_post_recv(qp, &wr, &bad) == 0);
}

} // namespace
