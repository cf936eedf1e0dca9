// The engine's hold on a client (client_process.hpp): its memory through its own memory
// file, and the file credentials lent to the engine's thread while it opens the
// client's files, which must really take (and be given back) or open nothing.
#include "client_process.hpp"
#include "memory_map.hpp"
#include "shared_mapping.hpp"

#include <catch2/catch.hpp>
#include <cerrno>
#include <csignal>
#include <fcntl.h>
#include <linux/capability.h>
#include <string>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

using softhca::engine::check_user_range;
using softhca::engine::ClientProcess;
using softhca::engine::FileCredentials;
using softhca::engine::SharedMapping;

namespace {

uid_t fsuid_now() {
    return static_cast<uid_t>(::syscall(SYS_setfsuid, -1));
}

uint64_t effective_caps() {
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2]{};
    REQUIRE(::syscall(SYS_capget, &header, data) == 0);
    return data[0].effective | (uint64_t{data[1].effective} << 32);
}

} // namespace

TEST_CASE("the client's memory moves through its memory file, address by address") {
    const auto self = ClientProcess::self();
    std::string text = "0123456789abcdef";
    char got[16] = {};
    iovec local{got, sizeof(got)};
    REQUIRE(self->read(&local, 1, reinterpret_cast<uintptr_t>(text.data())) == 16);
    CHECK(std::string(got, 16) == text);
    const char put[4] = {'W', 'X', 'Y', 'Z'};
    iovec from{const_cast<char*>(put), 4};
    REQUIRE(self->write(&from, 1, reinterpret_cast<uintptr_t>(text.data()) + 4) == 4);
    CHECK(text == "0123WXYZ89abcdef");
    CHECK_FALSE(self->gone());
}

TEST_CASE("a live client is pinned while signals keep interrupting the engine") {
    // Even poll(2) with no wait fails with EINTR when a signal is pending and nothing is
    // ready: a liveness check that took that for "exited" refused live clients whenever a
    // timer fired at the wrong moment (about 1 in 100 fuzz runs, under libFuzzer's
    // SIGALRM). Here a timer fires every 50 us through 20000 pins of a live peer.
    using softhca::engine::PeerProcess;
    int pair[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) == 0);
    struct sigaction action {};
    action.sa_handler = [](int) {};
    struct sigaction old {};
    REQUIRE(::sigaction(SIGALRM, &action, &old) == 0); // no SA_RESTART, as libFuzzer's
    const itimerval every{{0, 50}, {0, 50}};
    REQUIRE(::setitimer(ITIMER_REAL, &every, nullptr) == 0);
    int refused = 0;
    for (int i = 0; i < 20000; ++i) {
        PeerProcess peer;
        if (!peer.pin(pair[0]))
            ++refused;
        peer.release();
    }
    const itimerval off{};
    ::setitimer(ITIMER_REAL, &off, nullptr);
    ::sigaction(SIGALRM, &old, nullptr);
    ::close(pair[0]);
    ::close(pair[1]);
    CHECK(refused == 0);
}

TEST_CASE("file credentials lent for another user take, hold no override, and are given back") {
    if (::geteuid() != 0) {
        WARN("not root: the engine's credential switch cannot be tried");
        return;
    }
    const uint64_t caps_before = effective_caps();
    const auto nobody = ClientProcess::posing(::getpid(), 65534, 65534);
    {
        FileCredentials as_nobody(*nobody);
        REQUIRE(as_nobody.ok());
        CHECK(fsuid_now() == 65534);
        CHECK(static_cast<gid_t>(::syscall(SYS_setfsgid, -1)) == 65534);
        const uint64_t caps = effective_caps();
        CHECK((caps & (1ull << CAP_DAC_OVERRIDE)) == 0);
        CHECK((caps & (1ull << CAP_SYS_PTRACE)) == 0);
        CHECK((caps & (1ull << CAP_SYS_ADMIN)) == 0);
        // Root's files are closed to it, and so is a root process's memory map.
        errno = 0;
        CHECK(::open("/etc/shadow", O_RDONLY | O_CLOEXEC) == -1);
        CHECK(errno == EACCES);
    }
    CHECK(fsuid_now() == 0);
    CHECK(effective_caps() == caps_before);
    const int shadow = ::open("/etc/shadow", O_RDONLY | O_CLOEXEC);
    CHECK(shadow >= 0);
    if (shadow >= 0)
        ::close(shadow);
}

TEST_CASE("a client of another user naming a root process gets neither its maps nor its files") {
    if (::geteuid() != 0) {
        WARN("not root: the engine's credential switch cannot be tried");
        return;
    }
    // A root process with shared memory (a child of this test); a context of nobody's
    // naming it reaches neither its maps nor a mapping of that memory, root's does.
    const long page = ::sysconf(_SC_PAGESIZE);
    const int fd = ::memfd_create("softhca-unit", MFD_CLOEXEC);
    REQUIRE(fd >= 0);
    REQUIRE(::ftruncate(fd, page) == 0);
    void* p = ::mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    REQUIRE(p != MAP_FAILED);
    int hold[2];
    REQUIRE(::pipe(hold) == 0);
    const pid_t root_process = ::fork();
    if (root_process == 0) {
        char c;
        [[maybe_unused]] ssize_t r = ::read(hold[0], &c, 1);
        ::_exit(0);
    }
    const auto addr = reinterpret_cast<uintptr_t>(p);
    {
        const auto nobody = ClientProcess::posing(root_process, 65534, 65534);
        CHECK(check_user_range(*nobody, addr, page, true) != 0);
        CHECK(SharedMapping::map(*nobody, addr, page, true) == nullptr);
        const auto root = ClientProcess::posing(root_process, 0, 0);
        CHECK(check_user_range(*root, addr, page, true) == 0);
    }
    [[maybe_unused]] ssize_t w = ::write(hold[1], "x", 1);
    ::waitpid(root_process, nullptr, 0);
    ::close(hold[0]);
    ::close(hold[1]);
    ::munmap(p, page);
    ::close(fd);
}
