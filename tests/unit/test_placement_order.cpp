// Placement order on private memory (memory-model.md): the engine places an RDMA WRITE's
// and a READ response's bytes in this process's heap with the kernel's copies
// (process_vm_writev as root, the memory file's pwritev otherwise), which promise an
// order only from one element, or one call, to the next. So the last 8 bytes of each
// message must reach the process in a copy of their own, after every other byte of it:
// a CPU polling the last byte then sees the whole message, as on an HCA. The test
// watches those calls (this executable provides them, recording, then passes them on to
// the C library's) while the engine's data path moves messages between two QPs of this
// process over the simulated wire.
#include "engine_bench.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <dlfcn.h>
#include <mutex>
#include <sys/uio.h>
#include <vector>

namespace {

// One copy the kernel was asked to make into this process: [begin, end).
struct Copy {
    uint64_t begin;
    uint64_t end;
};

std::mutex copies_lock;
bool recording = false;
std::vector<Copy> copies;

void record(uint64_t begin, uint64_t length) {
    std::lock_guard<std::mutex> hold(copies_lock);
    if (recording && length)
        copies.push_back({begin, begin + length});
}

template <typename Function> Function next_definition(const char* name) {
    return reinterpret_cast<Function>(dlsym(RTLD_NEXT, name));
}

} // namespace

extern "C" ssize_t process_vm_writev(pid_t pid, const iovec* local, unsigned long local_count,
                                     const iovec* remote, unsigned long remote_count,
                                     unsigned long flags) {
    using Fn =
        ssize_t (*)(pid_t, const iovec*, unsigned long, const iovec*, unsigned long, unsigned long);
    static const Fn next = next_definition<Fn>("process_vm_writev");
    for (unsigned long i = 0; i < remote_count; ++i) // one copy per element, in order
        record(reinterpret_cast<uint64_t>(remote[i].iov_base), remote[i].iov_len);
    return next(pid, local, local_count, remote, remote_count, flags);
}

extern "C" ssize_t pwritev(int fd, const iovec* iov, int count, off_t offset) {
    using Fn = ssize_t (*)(int, const iovec*, int, off_t);
    static const Fn next = next_definition<Fn>("pwritev");
    uint64_t length = 0;
    for (int i = 0; i < count; ++i)
        length += iov[i].iov_len;
    record(static_cast<uint64_t>(offset), length); // one run, copied as one
    return next(fd, iov, count, offset);
}

using namespace engine_bench;

namespace {

// The copies that touched [begin, end), in the order they were asked for.
std::vector<Copy> copies_into(uint64_t begin, uint64_t end) {
    std::lock_guard<std::mutex> hold(copies_lock);
    std::vector<Copy> found;
    for (const Copy& c : copies)
        if (c.begin < end && c.end > begin)
            found.push_back(c);
    return found;
}

} // namespace

TEST_CASE("placement order on private memory: a message's last 8 bytes reach the process in a "
          "copy of their own, after the rest, for RDMA WRITE and READ responses, by cross-memory "
          "attach and by the memory file") {
    const bool memory_file = GENERATE(false, true);
    std::shared_ptr<ClientProcess> client =
        memory_file ? ClientProcess::posing(getpid(), 65534, 65534) : ClientProcess::self();
    if (!memory_file && !client->cross_memory()) {
        WARN("not run: cross-memory attach needs root with CAP_SYS_PTRACE");
        return;
    }
    REQUIRE(client->cross_memory() == !memory_file);
    // 2 MiB each: what two hosts pin stays within the default RLIMIT_MEMLOCK (8 MiB) of
    // the unprivileged user the memory-file client poses as.
    Bench bench(FaultConfig{}, false, 0, 1, client, 2 << 20);
    Host& a = *bench.a;
    Host& b = *bench.b;
    REQUIRE(!a.shared_mapped());

    const uint32_t sizes[] = {9, 100, 1000, 1024, 1025, 5000, 65536};
    uint64_t message = 0;
    for (const uint8_t opcode : {uint8_t{0}, uint8_t{4}}) { // IBV_WR_RDMA_WRITE, IBV_WR_RDMA_READ
        for (const uint32_t length : sizes) {
            ++message;
            INFO((memory_file ? "memory file" : "cross-memory attach")
                 << (opcode == 0 ? ", RDMA WRITE of " : ", READ of ") << length << " bytes");
            Host& source = opcode == 0 ? a : b;
            Host& target = opcode == 0 ? b : a;
            const uint64_t offset = message * 128 * 1024;
            fill(source.buffer.data() + offset, message, length);
            std::memset(target.buffer.data() + offset, 0, length);
            {
                std::lock_guard<std::mutex> hold(copies_lock);
                copies.clear();
                recording = true;
            }
            a.post_send(message, opcode, offset, length, b.buffer.addr() + offset, b.mr.rkey);
            di::CompletionEntry e{};
            bool done = false;
            for (int round = 0; round < 100'000 && !done; ++round) {
                bench.round();
                done = a.poll(e);
            }
            {
                std::lock_guard<std::mutex> hold(copies_lock);
                recording = false;
            }
            REQUIRE(done);
            REQUIRE(e.status == 0);
            CHECK(first_mismatch(target.buffer.data() + offset, message, length) == -1);

            const uint64_t begin = target.buffer.addr() + offset, end = begin + length;
            const std::vector<Copy> into = copies_into(begin, end);
            REQUIRE(into.size() >= 2);
            // The last copy is the message's last 8 bytes, or fewer when its last packet
            // holds fewer; nothing before it reached into them.
            const Copy tail = into.back();
            CHECK(tail.end == end);
            CHECK(tail.begin >= end - 8);
            CHECK(tail.begin == std::max(end - 8, begin + (length - 1) / 1024 * 1024));
            uint64_t placed = tail.end - tail.begin;
            for (size_t i = 0; i + 1 < into.size(); ++i) {
                CHECK(into[i].end <= tail.begin);
                placed += into[i].end - into[i].begin;
            }
            CHECK(placed == length); // each byte once: no fault, nothing sent twice
        }
    }
}
