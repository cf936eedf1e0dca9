// Attacks on the engine's memory (issue 26, item 6): floods of QPs, CQs, MRs and deep
// queues, and registrations past RLIMIT_MEMLOCK. Run as an unprivileged user against an
// engine of its own started with
//   --limits context_qps=64,context_cqs=64,context_mrs=256,context_mb=64,user_mb=96
// Each flood must stop with ENOMEM at the cap, the engine's resident memory must stay
// within the user's cap, and what is freed must be usable again.
#define CATCH_CONFIG_MAIN
#include "test_device.hpp"

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <string>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>
#include <vector>

namespace {

constexpr size_t kContextQps = 64, kContextCqs = 64, kContextMrs = 256;
constexpr uint64_t kUserBytes = 96ull << 20;
constexpr rlim_t kMemlock = 4u << 20;

// RLIMIT_MEMLOCK as a user would set it with `ulimit -l`, before any device is opened
// (the engine reads it when a context opens).
const bool memlock_set = [] {
    rlimit limit{kMemlock, kMemlock};
    return setrlimit(RLIMIT_MEMLOCK, &limit) == 0;
}();

struct Context {
    ibv_context* context = open_test_device(test_device_name());
    ibv_pd* pd = context ? ibv_alloc_pd(context) : nullptr;
    ibv_cq* cq = context ? ibv_create_cq(context, 16, nullptr, nullptr, 0) : nullptr;
    Context() { REQUIRE((context && pd && cq)); }
    ~Context() {
        ibv_destroy_cq(cq);
        ibv_dealloc_pd(pd);
        ibv_close_device(context);
    }
    ibv_qp* qp(uint32_t depth) {
        ibv_qp_init_attr init{};
        init.send_cq = init.recv_cq = cq;
        init.qp_type = IBV_QPT_RC;
        init.cap = {depth, depth, 1, 1, 0};
        return ibv_create_qp(pd, &init);
    }
};

} // namespace

TEST_CASE("a QP flood stops at the context's cap with ENOMEM, and a freed QP makes room") {
    Context c;
    std::vector<ibv_qp*> qps;
    errno = 0;
    for (ibv_qp* qp; qps.size() < 10 * kContextQps && (qp = c.qp(16));)
        qps.push_back(qp);
    CHECK(qps.size() == kContextQps);
    CHECK(errno == ENOMEM);
    REQUIRE(ibv_destroy_qp(qps.back()) == 0);
    qps.back() = c.qp(16);
    CHECK(qps.back() != nullptr);
    for (ibv_qp* qp : qps)
        if (qp)
            ibv_destroy_qp(qp);
}

TEST_CASE("a CQ flood stops at the context's cap with ENOMEM") {
    Context c; // its own CQ counts
    std::vector<ibv_cq*> cqs;
    errno = 0;
    for (ibv_cq* cq;
         cqs.size() < 10 * kContextCqs && (cq = ibv_create_cq(c.context, 16, nullptr, nullptr, 0));)
        cqs.push_back(cq);
    CHECK(cqs.size() == kContextCqs - 1);
    CHECK(errno == ENOMEM);
    for (ibv_cq* cq : cqs)
        ibv_destroy_cq(cq);
}

TEST_CASE("an MR flood stops at the context's cap with ENOMEM") {
    Context c;
    std::vector<char> memory(4096);
    std::vector<ibv_mr*> mrs;
    errno = 0;
    for (ibv_mr* mr; mrs.size() < 10 * kContextMrs &&
                     (mr = ibv_reg_mr(c.pd, memory.data(), memory.size(), IBV_ACCESS_LOCAL_WRITE));)
        mrs.push_back(mr);
    CHECK(mrs.size() == kContextMrs);
    CHECK(errno == ENOMEM);
    for (ibv_mr* mr : mrs)
        ibv_dereg_mr(mr);
}

TEST_CASE("deep queues stop at the engine memory of the context and of the user, and the "
          "engine's resident memory stays within the user's cap") {
    const uint64_t rss_before = test_engine_memory("VmRSS");
    REQUIRE(rss_before > 0);
    uint64_t rss_peak = rss_before;
    Context a, b;
    std::vector<ibv_qp*> in_a, in_b;
    errno = 0;
    for (ibv_qp* qp; in_a.size() < 1000 && (qp = a.qp(4096));) {
        in_a.push_back(qp);
        rss_peak = std::max(rss_peak, test_engine_memory("VmRSS"));
    }
    CHECK(errno == ENOMEM);
    errno = 0;
    for (ibv_qp* qp; in_b.size() < 1000 && (qp = b.qp(4096));) {
        in_b.push_back(qp);
        rss_peak = std::max(rss_peak, test_engine_memory("VmRSS"));
    }
    CHECK(errno == ENOMEM);
    INFO("deep QPs: " << in_a.size() << " in one context, " << in_b.size()
                      << " in another of the same user; engine RSS " << rss_before << " -> "
                      << rss_peak);
    REQUIRE(in_a.size() >= 2);
    // The second context is held back by the user's cap (96 MiB), below its own (64).
    CHECK(in_b.size() < in_a.size());
    CHECK(rss_peak - rss_before <= kUserBytes + (16u << 20));
    for (ibv_qp* qp : in_a)
        ibv_destroy_qp(qp);
    for (ibv_qp* qp : in_b)
        ibv_destroy_qp(qp);
}

TEST_CASE("registrations past RLIMIT_MEMLOCK fail with ENOMEM; deregistering gives room back; "
          "on-demand MRs are not charged") {
    REQUIRE(memlock_set);
    REQUIRE(geteuid() != 0); // root (CAP_IPC_LOCK) is not limited
    Context c;
    std::vector<char> three(3u << 20), two(2u << 20), eight(8u << 20);
    ibv_mr* first = ibv_reg_mr(c.pd, three.data(), three.size(), IBV_ACCESS_LOCAL_WRITE);
    REQUIRE(first);
    errno = 0;
    CHECK(ibv_reg_mr(c.pd, two.data(), two.size(), IBV_ACCESS_LOCAL_WRITE) == nullptr);
    CHECK(errno == ENOMEM);
    // Another context of the same process shares the process's limit.
    {
        Context other;
        errno = 0;
        CHECK(ibv_reg_mr(other.pd, two.data(), two.size(), IBV_ACCESS_LOCAL_WRITE) == nullptr);
        CHECK(errno == ENOMEM);
    }
    REQUIRE(ibv_dereg_mr(first) == 0);
    ibv_mr* second = ibv_reg_mr(c.pd, two.data(), two.size(), IBV_ACCESS_LOCAL_WRITE);
    CHECK(second != nullptr);
    ibv_mr* odp =
        ibv_reg_mr(c.pd, eight.data(), eight.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND);
    CHECK(odp != nullptr);
    if (odp)
        ibv_dereg_mr(odp);
    if (second)
        ibv_dereg_mr(second);
}

TEST_CASE("an unprivileged client's own shared memory is still mapped by the engine") {
    // The fast path works with the client's own file rights: its memfd is mapped (the
    // engine's count of mapped MRs goes up while the MR lives).
    auto mapped = [] {
        const std::string command = std::string(std::getenv("SOFTHCA")) + " status --json";
        FILE* p = popen(command.c_str(), "r");
        REQUIRE(p);
        std::string doc;
        char chunk[4096];
        for (size_t n; (n = fread(chunk, 1, sizeof(chunk), p)) > 0;)
            doc.append(chunk, n);
        pclose(p);
        const size_t at = doc.find("\"mapped_mr\":");
        REQUIRE(at != std::string::npos);
        return std::stoul(doc.substr(at + 12));
    };
    Context c;
    const size_t size = 1 << 16;
    const int fd = memfd_create("softhca-mine", MFD_CLOEXEC);
    REQUIRE(fd >= 0);
    REQUIRE(ftruncate(fd, size) == 0);
    void* memory = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    REQUIRE(memory != MAP_FAILED);
    const unsigned long before = mapped();
    ibv_mr* mr = ibv_reg_mr(c.pd, memory, size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    REQUIRE(mr);
    CHECK(mapped() == before + 1);
    ibv_dereg_mr(mr);
    munmap(memory, size);
    close(fd);
}
