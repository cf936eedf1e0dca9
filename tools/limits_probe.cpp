// softhca-limits-probe: what this machine allows, measured the way the engine moves bytes,
// for tools/bench.sh to print beside its figures:
//   memcpy           one copy in one thread (what a mapped or staged path costs per byte)
//   memory file      one preadv/pwritev of another process's /proc/PID/mem (how the engine
//                    reaches a non-root client's private memory)
//   cross-memory     one process_vm_readv/writev call: how the engine reaches a root
//                    client's private memory, and the bound of single copy (an RDMA WRITE
//                    or READ between two processes of one engine, one call per message,
//                    docs/memory-model.md); skipped without the right to attach (not root)
//   relay latency    a cache-line ping-pong between two processes relayed through a third
//                    (two applications and the engine), one way; each yields while it
//                    waits, so that three fit on two cores
// Each bandwidth at 64 KiB and 1 MiB per call, the best of several rounds (the machines are
// shared: the best is the machine, the rest is its neighbours).
//
//   softhca-limits-probe [--quick]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <new>
#include <sched.h>
#include <string>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
}

// A child that holds `bytes` of private memory and waits until killed: the other process
// whose memory is read and written.
struct Peer {
    pid_t pid = -1;
    uint8_t* remote = nullptr;
    explicit Peer(size_t bytes) {
        // Allocated before the fork: the same address in the child, private (copy on write,
        // touched by the child so it owns its pages).
        remote = static_cast<uint8_t*>(std::malloc(bytes));
        std::memset(remote, 1, bytes);
        int ready[2];
        if (pipe(ready) != 0)
            std::exit(1);
        pid = fork();
        if (pid == 0) {
            std::memset(remote, 2, bytes);
            const char c = 1;
            [[maybe_unused]] ssize_t n = write(ready[1], &c, 1);
            for (;;)
                pause();
        }
        char c;
        [[maybe_unused]] ssize_t n = read(ready[0], &c, 1);
        close(ready[0]);
        close(ready[1]);
    }
    ~Peer() {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
        std::free(remote);
    }
};

// GB/s of `op` moving `size` bytes per call, best of `rounds` rounds of `calls` calls.
template <typename Op> double best_rate(size_t size, int rounds, int calls, Op op) {
    double best = 0;
    for (int r = 0; r < rounds; ++r) {
        const auto start = Clock::now();
        for (int i = 0; i < calls; ++i)
            if (!op())
                return -1;
        best = std::max(best, double(size) * calls / seconds_since(start) / 1e9);
    }
    return best;
}

void print_rate(const char* what, size_t size, double gbs) {
    if (gbs < 0)
        std::printf("%-32s %4zu KiB  -\n", what, size / 1024);
    else
        std::printf("%-32s %4zu KiB  %.1f GB/s\n", what, size / 1024, gbs);
}

// One way, microseconds: A writes a sequence number, the relay copies it to B, B answers,
// the relay copies the answer back; the relay yields whenever it finds nothing to do.
double relay_latency(int rounds) {
    struct alignas(64) Line {
        std::atomic<uint64_t> value{0};
    };
    auto* lines = static_cast<Line*>(
        mmap(nullptr, 4 * sizeof(Line), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
    if (lines == MAP_FAILED)
        return -1;
    new (lines) Line[4];
    Line &a_out = lines[0], &b_in = lines[1], &b_out = lines[2], &a_in = lines[3];
    const uint64_t stop = UINT64_MAX;
    const pid_t relay = fork();
    if (relay == 0) {
        uint64_t seen_a = 0, seen_b = 0;
        for (;;) {
            bool any = false;
            if (const uint64_t v = a_out.value.load(std::memory_order_acquire); v != seen_a) {
                seen_a = v;
                b_in.value.store(v, std::memory_order_release);
                any = true;
                if (v == stop)
                    _exit(0);
            }
            if (const uint64_t v = b_out.value.load(std::memory_order_acquire); v != seen_b) {
                seen_b = v;
                a_in.value.store(v, std::memory_order_release);
                any = true;
            }
            if (!any)
                sched_yield();
        }
    }
    const pid_t b = fork();
    if (b == 0) {
        uint64_t seen = 0;
        for (;;) {
            const uint64_t v = b_in.value.load(std::memory_order_acquire);
            if (v == seen) {
                sched_yield();
                continue;
            }
            if (v == stop)
                _exit(0);
            seen = v;
            b_out.value.store(v, std::memory_order_release);
        }
    }
    double best = 1e9;
    constexpr int kTrips = 2000;
    uint64_t seq = 0;
    for (int r = 0; r < rounds; ++r) {
        const auto start = Clock::now();
        for (int i = 0; i < kTrips; ++i) {
            a_out.value.store(++seq, std::memory_order_release);
            while (a_in.value.load(std::memory_order_acquire) != seq)
                sched_yield();
        }
        best = std::min(best, seconds_since(start) / kTrips / 2 * 1e6);
    }
    a_out.value.store(stop, std::memory_order_release);
    waitpid(relay, nullptr, 0);
    kill(b, SIGKILL); // it may have missed the stop behind the relay
    waitpid(b, nullptr, 0);
    munmap(lines, 4 * sizeof(Line));
    return best;
}

} // namespace

int main(int argc, char** argv) {
    const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
    const int rounds = quick ? 3 : 7;
    const size_t sizes[] = {64 * 1024, 1024 * 1024};
    constexpr size_t kSpan = 16 * 1024 * 1024; // calls walk this much memory
    std::vector<uint8_t> local(kSpan), other(kSpan);
    Peer peer(kSpan);
    const std::string mem_path = "/proc/" + std::to_string(peer.pid) + "/mem";
    const int mem = open(mem_path.c_str(), O_RDWR);

    std::printf("Limits of this machine (softhca-limits-probe, best of %d rounds)\n", rounds);
    for (size_t size : sizes) {
        const int calls = int(kSpan / size) * (quick ? 2 : 8);
        size_t at = 0;
        auto next = [&] {
            at = (at + size) % kSpan;
            return at;
        };
        print_rate("memcpy", size, best_rate(size, rounds, calls, [&] {
                       const size_t o = next();
                       std::memcpy(local.data() + o, other.data() + o, size);
                       return true;
                   }));
        print_rate("memory file preadv (non-root)", size, best_rate(size, rounds, calls, [&] {
                       const size_t o = next();
                       return mem >= 0 && pread(mem, local.data() + o, size,
                                                off_t(uintptr_t(peer.remote + o))) == ssize_t(size);
                   }));
        print_rate("memory file pwritev (non-root)", size, best_rate(size, rounds, calls, [&] {
                       const size_t o = next();
                       return mem >= 0 &&
                              pwrite(mem, local.data() + o, size,
                                     off_t(uintptr_t(peer.remote + o))) == ssize_t(size);
                   }));
        print_rate("process_vm_readv (one copy)", size, best_rate(size, rounds, calls, [&] {
                       const size_t o = next();
                       iovec l{local.data() + o, size}, r{peer.remote + o, size};
                       return process_vm_readv(peer.pid, &l, 1, &r, 1, 0) == ssize_t(size);
                   }));
        print_rate("process_vm_writev (one copy)", size, best_rate(size, rounds, calls, [&] {
                       const size_t o = next();
                       iovec l{local.data() + o, size}, r{peer.remote + o, size};
                       return process_vm_writev(peer.pid, &l, 1, &r, 1, 0) == ssize_t(size);
                   }));
    }
    if (mem >= 0)
        close(mem);
    const double latency = relay_latency(rounds);
    if (latency < 0)
        std::printf("%-32s           -\n", "relay latency, one way");
    else
        std::printf("%-32s           %.2f us\n", "relay latency, one way", latency);
    return 0;
}
