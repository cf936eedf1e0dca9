// End to end through the system libibverbs: the provider's control channel
// (provider/src/control_channel.cpp) shared as a uverbs file is shared. Verbs called from
// many threads at once, and from processes forked after ibv_open_device, each get their
// own reply; a process killed in the middle of a call (holding the channel's lock, or
// with its reply still unread on the socket) leaves the channel usable: the next call
// takes the lock back (EOWNERDEAD) and passes over the dead call's reply.
#define CATCH_CONFIG_MAIN
#include "verbs_fixture.hpp"

#include <atomic>
#include <catch2/catch.hpp>
#include <csignal>
#include <random>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace {

// One round of calls whose replies differ by kind and size: a reply taken by the wrong
// caller fails it (a CQ reply carries a ring, a PD reply does not; the CQ's size is the
// one asked for).
bool calls_round(ibv_context* context, int cqe) {
    ibv_pd* pd = ibv_alloc_pd(context);
    ibv_cq* cq = ibv_create_cq(context, cqe, nullptr, nullptr, 0);
    const bool ok = pd && cq && cq->cqe >= cqe && cq->cqe < 2 * cqe + 64;
    if (cq && ibv_destroy_cq(cq) != 0)
        return false;
    if (pd && ibv_dealloc_pd(pd) != 0)
        return false;
    return ok;
}

} // namespace

TEST_CASE("control channel: eight threads calling at once each get their own replies") {
    ibv_context* context = open_test_device(device_name(0));
    REQUIRE(context);
    std::atomic<int> failures{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t)
        threads.emplace_back([&, t] {
            for (int i = 0; i < 150; ++i)
                if (!calls_round(context, 16 + 32 * t + i % 7))
                    failures++;
        });
    for (auto& thread : threads)
        thread.join();
    CHECK(failures == 0);
    ibv_close_device(context);
}

TEST_CASE("control channel: processes forked from a context share it, each its replies") {
    ibv_context* context = open_test_device(device_name(0));
    REQUIRE(context);
    std::vector<pid_t> children;
    for (int c = 0; c < 4; ++c) {
        const pid_t pid = fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            int bad = 0;
            for (int i = 0; i < 150; ++i)
                bad += !calls_round(context, 100 + 40 * c + i % 5);
            _exit(bad ? 1 : 0);
        }
        children.push_back(pid);
    }
    int parent_bad = 0;
    for (int i = 0; i < 150; ++i)
        parent_bad += !calls_round(context, 30 + i % 3);
    CHECK(parent_bad == 0);
    for (pid_t pid : children) {
        int status = 0;
        REQUIRE(waitpid(pid, &status, 0) == pid);
        CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
    }
    ibv_close_device(context);
}

TEST_CASE("control channel: a forked process killed in the middle of calls leaves the "
          "channel usable, its reply not taken by anyone") {
    ibv_context* context = open_test_device(device_name(0));
    REQUIRE(context);
    std::mt19937 random(42);
    int parent_bad = 0;
    for (int round = 0; round < 40; ++round) {
        const pid_t pid = fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            // Calls as fast as it can: a kill lands inside one nearly every time, before
            // its request went (lock held) or after (its reply left on the socket).
            for (;;)
                calls_round(context, 50);
        }
        ::usleep(200 + random() % 3000);
        ::kill(pid, SIGKILL);
        int status = 0;
        REQUIRE(waitpid(pid, &status, 0) == pid);
        // The next calls here must work and must not be answered by the dead one's reply.
        for (int i = 0; i < 3; ++i)
            parent_bad += !calls_round(context, 200 + round);
    }
    CHECK(parent_bad == 0);
    ibv_close_device(context);
}
