#include "memory_guard.hpp"

#include <atomic>
#include <csetjmp>
#include <csignal>
#include <cstring>

namespace softhca::engine {

namespace {

thread_local sigjmp_buf* active_guard = nullptr;

void on_sigbus(int, siginfo_t*, void*) {
    if (sigjmp_buf* guard = active_guard) {
        active_guard = nullptr;
        siglongjmp(*guard, 1); // SA_NODEFER: SIGBUS is not left blocked
    }
    // Not a guarded touch: what SIGBUS does without a handler.
    std::signal(SIGBUS, SIG_DFL);
    std::raise(SIGBUS);
}

void install_once() {
    static const bool installed = [] {
        struct sigaction action {};
        action.sa_sigaction = on_sigbus;
        action.sa_flags = SA_SIGINFO | SA_NODEFER;
        sigemptyset(&action.sa_mask);
        return sigaction(SIGBUS, &action, nullptr) == 0;
    }();
    (void)installed;
}

} // namespace

namespace {

// Runs `touch` so that a SIGBUS inside it returns false here. The jump buffer lives in
// this frame, which stays while `touch` runs.
template <typename Touch> bool guarded(Touch&& touch) {
    install_once();
    sigjmp_buf guard;
    if (sigsetjmp(guard, 0) != 0)
        return false;
    active_guard = &guard;
    // The handler reads active_guard: keep the compiler from moving the stores across
    // the touch (a memcpy does not read it, so they would otherwise be merged away).
    std::atomic_signal_fence(std::memory_order_seq_cst);
    touch();
    std::atomic_signal_fence(std::memory_order_seq_cst);
    active_guard = nullptr;
    return true;
}

} // namespace

bool guarded_copy(void* dst, const void* src, size_t n) {
    return guarded([&] { std::memcpy(dst, src, n); });
}

bool guarded_copy_ascending(void* dst, const void* src, size_t n) {
    return guarded([&] {
        constexpr size_t kTail = 8;
        const size_t body = n > kTail ? n - kTail : 0;
        auto* to = static_cast<uint8_t*>(dst);
        const auto* from = static_cast<const uint8_t*>(src);
        std::memcpy(to, from, body);
        std::atomic_thread_fence(std::memory_order_release);
        // One store per byte: never merged into a wider store that could cross a cache
        // line and become visible in two halves.
        for (size_t i = body; i < n; ++i)
            __atomic_store_n(to + i, from[i], __ATOMIC_RELAXED);
    });
}

bool guarded_atomic(uint64_t* word, bool compare_swap, uint64_t compare_add, uint64_t swap,
                    uint64_t& original) {
    return guarded([&] {
        if (compare_swap) {
            uint64_t expected = compare_add;
            __atomic_compare_exchange_n(word, &expected, swap, false, __ATOMIC_SEQ_CST,
                                        __ATOMIC_SEQ_CST);
            original = expected;
        } else {
            original = __atomic_fetch_add(word, compare_add, __ATOMIC_SEQ_CST);
        }
    });
}

} // namespace softhca::engine
