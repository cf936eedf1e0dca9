// Engine: registration range checks against a process's mappings.
#include "client_process.hpp"
#include "memory_map.hpp"

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstdio>
#include <sstream>
#include <string>
#include <sys/mman.h>
#include <unistd.h>

using softhca::engine::check_range_in_maps;
using softhca::engine::check_user_range;
using softhca::engine::ClientProcess;
using softhca::engine::MapsEntry;
using softhca::engine::parse_maps_line;

namespace {
const char* kMaps = "00400000-00401000 r-xp 00000000 08:01 1 /bin/x\n"
                    "00401000-00403000 rw-p 00000000 00:00 0\n"
                    "00403000-00404000 ---p 00000000 00:00 0\n"
                    "00500000-00502000 r--p 00000000 00:00 0\n";
}

TEST_CASE("a range inside one readable mapping is accepted") {
    CHECK(check_range_in_maps(kMaps, 0x401000, 0x2000, true) == 0);
    CHECK(check_range_in_maps(kMaps, 0x400800, 0x100, false) == 0);
}

TEST_CASE("a range spanning adjacent mappings is accepted when all allow it") {
    CHECK(check_range_in_maps(kMaps, 0x400800, 0x1000, false) == 0);
    CHECK(check_range_in_maps(kMaps, 0x400800, 0x1000, true) == EFAULT); // r-x part
}

TEST_CASE("holes, PROT_NONE and missing write rights are EFAULT") {
    CHECK(check_range_in_maps(kMaps, 0x404000, 0x10, false) == EFAULT);     // unmapped
    CHECK(check_range_in_maps(kMaps, 0x402f00, 0x200, false) == EFAULT);    // into ---p
    CHECK(check_range_in_maps(kMaps, 0x403ff0, 0x200000, false) == EFAULT); // across a hole
    CHECK(check_range_in_maps(kMaps, 0x500000, 0x1000, true) == EFAULT);    // read-only
    CHECK(check_range_in_maps(kMaps, 0x500000, 0x1000, false) == 0);
    CHECK(check_range_in_maps(kMaps, 0x501000, 0x2000, false) == EFAULT); // runs past the end
}

TEST_CASE("the live check sees this process's own mappings") {
    const long page = sysconf(_SC_PAGESIZE);
    const auto self = ClientProcess::self();
    auto* p = static_cast<char*>(
        mmap(nullptr, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    REQUIRE(p != MAP_FAILED);
    const auto addr = reinterpret_cast<uintptr_t>(p);
    CHECK(check_user_range(*self, addr, 3 * page, true) == 0);
    REQUIRE(mprotect(p + page, page, PROT_NONE) == 0);
    CHECK(check_user_range(*self, addr, 3 * page, false) == EFAULT);
    REQUIRE(mprotect(p + page, page, PROT_READ) == 0);
    CHECK(check_user_range(*self, addr, 3 * page, false) == 0);
    CHECK(check_user_range(*self, addr, 3 * page, true) == EFAULT);
    // A hole: the middle page unmapped. (Not the whole range: reading /proc/self/maps
    // allocates, and under ASan a fresh mapping may land where the range was.)
    REQUIRE(munmap(p + page, page) == 0);
    CHECK(check_user_range(*self, addr, 3 * page, false) == EFAULT);
    CHECK(check_user_range(*self, addr, page, false) == 0);
    munmap(p, page);
    munmap(p + 2 * page, page);
}

TEST_CASE("maps lines: shared file mappings are told from private and fileless memory") {
    MapsEntry e;
    REQUIRE(parse_maps_line("7f0000001000-7f0000003000 rw-s 00002000 00:01 4242 "
                            "/memfd:buf (deleted)",
                            e));
    CHECK(e.start == 0x7f0000001000);
    CHECK(e.end == 0x7f0000003000);
    CHECK(e.offset == 0x2000);
    CHECK(e.inode == 4242);
    CHECK((e.readable && e.writable && e.shared));
    REQUIRE(parse_maps_line("7f0000004000-7f0000005000 r--s 00000000 00:01 17 /SYSV00000000 "
                            "(deleted)",
                            e));
    CHECK((e.shared && !e.writable && e.inode == 17));
    REQUIRE(parse_maps_line("00401000-00403000 rw-p 00000000 00:00 0", e));
    CHECK((!e.shared && e.inode == 0));
    REQUIRE(parse_maps_line("00400000-00401000 r-xp 00000000 08:01 1 /bin/x", e));
    CHECK((!e.shared && !e.writable && e.inode == 1));
    CHECK_FALSE(parse_maps_line("not a maps line", e));
}

TEST_CASE("mappings are looked up one at a time, and agree with the maps file") {
    using softhca::engine::ProcessMaps;
    const long page = sysconf(_SC_PAGESIZE);
    // Three pages: read-write, a hole, read-only.
    auto* p = static_cast<char*>(
        mmap(nullptr, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    REQUIRE(p != MAP_FAILED);
    REQUIRE(munmap(p + page, page) == 0);
    REQUIRE(mprotect(p + 2 * page, page, PROT_READ) == 0);
    const auto addr = reinterpret_cast<uint64_t>(p);
    ProcessMaps live("/proc/self/maps", ::getuid()); // its own user owns it
    REQUIRE(live.error() == 0);
    // Where the kernel has PROCMAP_QUERY (6.11 on) the lookups are its own.
    INFO("PROCMAP_QUERY: " << live.queried());
    MapsEntry vma;
    REQUIRE(live.covering_or_next(addr + 10, vma));
    CHECK(vma.start <= addr);
    CHECK(vma.end == addr + page);
    CHECK((vma.readable && vma.writable && !vma.shared && vma.inode == 0));
    REQUIRE(live.covering_or_next(addr + page + 1, vma)); // in the hole: the next one
    CHECK(vma.start == addr + 2 * page);
    CHECK((vma.readable && !vma.writable));
    // Every mapping the file lists is the one a lookup of its start finds.
    std::string text;
    {
        FILE* f = fopen("/proc/self/maps", "r");
        REQUIRE(f != nullptr);
        char line[4096];
        while (fgets(line, sizeof(line), f))
            text += line;
        fclose(f);
    }
    ProcessMaps parsed = ProcessMaps::from_text(text);
    CHECK_FALSE(parsed.queried());
    size_t compared = 0;
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
        MapsEntry listed, found;
        REQUIRE(parse_maps_line(line, listed));
        if (listed.start >= 0x800000000000ull)
            continue; // [vsyscall]: not a VMA the tree holds
        REQUIRE(parsed.covering_or_next(listed.start, found));
        CHECK(found.start == listed.start);
        CHECK(found.end == listed.end);
        if (listed.start == addr + 2 * page) {
            ProcessMaps again("/proc/self/maps", ::getuid());
            REQUIRE(again.covering_or_next(listed.start, found));
            CHECK((found.start == listed.start && found.end == listed.end &&
                   found.inode == listed.inode && found.readable == listed.readable &&
                   found.writable == listed.writable));
        }
        ++compared;
    }
    CHECK(compared > 3);
    munmap(p, page);
    munmap(p + 2 * page, page);
}

TEST_CASE("maps owned by another user than the one named are refused, before any answer") {
    using softhca::engine::ProcessMaps;
    ProcessMaps mine("/proc/self/maps", ::getuid());
    CHECK(mine.error() == 0);
    MapsEntry vma;
    CHECK(mine.covering_or_next(0, vma));
    // A process whose files the kernel gives another user (one not dumpable: root's).
    ProcessMaps other("/proc/self/maps", ::getuid() + 1);
    CHECK(other.error() == EACCES);
    CHECK_FALSE(other.covering_or_next(0, vma));
    // Without an owner, the kernel's own check is all there is.
    ProcessMaps any("/proc/self/maps", ProcessMaps::kAnyOwner);
    CHECK(any.error() == 0);
}
