// The stall watch (stall_watch.hpp): slots, the watch thread, and what it does about a
// touch of a client's memory that does not end.
#include "stall_watch.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <dirent.h>
#include <fcntl.h>
#include <mutex>
#include <sched.h>
#include <string_view>
#include <sys/mount.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace softhca::engine {

StallWatch::Slot StallWatch::slots_[StallWatch::kSlots];
std::atomic<uint64_t> StallWatch::aborted_{0};
std::atomic<uint64_t> StallWatch::penalty_epoch_{0};

namespace {

// Where the watch thread mounts the FUSE control filesystem, in a mount namespace of its
// own (the kernel makes this directory when the fuse module loads).
constexpr const char* kFuseControl = "/sys/fs/fuse/connections";
constexpr uint32_t kLookMs = 100;

// Users cut off, and until when (steady clock).
struct CutOff {
    uid_t account;
    std::chrono::steady_clock::time_point until;
};
// Never destroyed: the detached watch thread and data paths may use them during exit.
std::mutex& cut_off_lock = *new std::mutex;
std::vector<CutOff>& cut_off_users = *new std::vector<CutOff>;

// A thread's slot goes back when the thread ends.
struct SlotHolder {
    StallWatch::Slot* slot = nullptr;
    ~SlotHolder() {
        if (slot)
            slot->used.store(false, std::memory_order_release);
    }
};
thread_local SlotHolder this_thread_slot;

std::string read_text(const std::string& path) {
    std::string text;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return text;
    char buffer[65536];
    for (;;) {
        const ssize_t n = ::read(fd, buffer, sizeof(buffer));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        text.append(buffer, static_cast<size_t>(n));
    }
    ::close(fd);
    return text;
}

bool is_directory(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The FUSE control filesystem, mounted once in this thread's own mount namespace (so
// nothing of it shows outside the engine; where the host has it mounted already, the
// mount is the same filesystem). Without the fuse module there is no FUSE to abort.
void mount_fuse_control() {
    static bool tried = false;
    if (tried || !is_directory(kFuseControl))
        return;
    tried = true;
    if (::mount("fusectl", kFuseControl, "fusectl", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0)
        std::fprintf(stderr, "softhca-engine: stall watch: mount fusectl: %s\n",
                     std::strerror(errno));
}

} // namespace

StallWatch::Slot* StallWatch::slot_of_this_thread() {
    if (this_thread_slot.slot)
        return this_thread_slot.slot;
    for (Slot& slot : slots_) {
        bool expected = false;
        if (!slot.used.load(std::memory_order_relaxed) &&
            slot.used.compare_exchange_strong(expected, true, std::memory_order_acq_rel)) {
            // An even sequence: a slot taken back from an ended thread is never mistaken
            // for a touch still under way.
            if (slot.sequence.load(std::memory_order_relaxed) & 1)
                slot.sequence.fetch_add(1, std::memory_order_release);
            slot.depth = 0;
            this_thread_slot.slot = &slot;
            return &slot;
        }
    }
    return nullptr; // more threads than slots: this one goes unwatched
}

void StallWatch::cut(uid_t account) {
    const auto now = std::chrono::steady_clock::now();
    std::lock_guard lock(cut_off_lock);
    std::erase_if(cut_off_users,
                  [&](const CutOff& c) { return c.until <= now || c.account == account; });
    cut_off_users.push_back({account, now + std::chrono::seconds(kPenaltySeconds)});
    penalty_epoch_.fetch_add(1, std::memory_order_release);
}

bool StallWatch::cut_off(uid_t account) {
    const auto now = std::chrono::steady_clock::now();
    std::lock_guard lock(cut_off_lock);
    for (const CutOff& c : cut_off_users)
        if (c.account == account && c.until > now)
            return true;
    return false;
}

void StallWatch::look_into(Slot& slot, uint64_t sequence, uint32_t stalled_ms) {
    // One snapshot of the touch, taken while its sequence stood still: what the watch
    // acts on is that touch's, never the next one's.
    const int proc_dir = slot.proc_dir.load(std::memory_order_relaxed);
    const uint64_t address = slot.address.load(std::memory_order_relaxed);
    const uid_t account = slot.account.load(std::memory_order_relaxed);
    const uid_t uid = slot.uid.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (slot.sequence.load(std::memory_order_relaxed) != sequence)
        return;
    // The client's maps are not read: the touch may wait for the client's mm lock, and a
    // read of its maps would wait behind it too. The connections aborted are those the
    // client's user mounted (fusectl gives a connection's directory the mount's user_id,
    // which an unprivileged mount can only set to its own user) with requests waiting:
    // the page the touch waits for, or the one a client thread holding its mm lock waits
    // for. Nobody else's mount is touched, however long its daemon takes.
    mount_fuse_control();
    std::string aborted_names;
    if (DIR* connections = ::opendir(kFuseControl)) {
        while (const dirent* entry = ::readdir(connections)) {
            if (entry->d_name[0] == '.')
                continue;
            const std::string connection = std::string(kFuseControl) + "/" + entry->d_name;
            struct stat st {};
            if (::stat(connection.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) ||
                (st.st_uid != account && st.st_uid != uid) ||
                std::atoi(read_text(connection + "/waiting").c_str()) <= 0)
                continue;
            const int fd = ::open((connection + "/abort").c_str(), O_WRONLY | O_CLOEXEC);
            if (fd >= 0 && ::write(fd, "1", 1) == 1) {
                aborted_names += (aborted_names.empty() ? "" : " ") + std::string(entry->d_name);
                aborted_.fetch_add(1, std::memory_order_relaxed);
            }
            if (fd >= 0)
                ::close(fd);
        }
        ::closedir(connections);
    }
    const pid_t pid = static_cast<pid_t>(
        std::atoi(read_text("/proc/self/fd/" + std::to_string(proc_dir) + "/stat").c_str()));
    if (aborted_names.empty()) {
        std::fprintf(stderr,
                     "softhca-engine: a touch of pid %d's memory at 0x%" PRIx64
                     " has waited %u ms; uid %u has no FUSE connection waiting: left to finish\n",
                     static_cast<int>(pid), address, stalled_ms, static_cast<unsigned>(account));
        return;
    }
    cut(account);
    std::fprintf(stderr,
                 "softhca-engine: a touch of pid %d's memory at 0x%" PRIx64
                 " waited %u ms; aborted uid %u's waiting FUSE connections (%s); the user is "
                 "cut off for %u s\n",
                 static_cast<int>(pid), address, stalled_ms, static_cast<unsigned>(account),
                 aborted_names.c_str(), kPenaltySeconds);
}

void StallWatch::run(uint32_t stall_ms) {
    const uint32_t looks_to_stall = stall_ms / kLookMs + 1;
    uint64_t seen[kSlots] = {};
    uint32_t looks[kSlots] = {};
    for (;;) {
        const timespec pause{0, static_cast<long>(kLookMs) * 1000000};
        ::nanosleep(&pause, nullptr);
        for (size_t i = 0; i < kSlots; ++i) {
            Slot& slot = slots_[i];
            const uint64_t sequence = slot.sequence.load(std::memory_order_acquire);
            if (!(sequence & 1) || sequence != seen[i]) {
                seen[i] = sequence;
                looks[i] = sequence & 1;
                continue;
            }
            if (++looks[i] == looks_to_stall)
                look_into(slot, sequence, (looks[i] - 1) * kLookMs);
        }
    }
}

bool StallWatch::start(uint32_t stall_ms) {
    static std::atomic<bool> started{false};
    if (started.exchange(true))
        return true;
    std::atomic<int> ready{0}; // 1, or minus the errno
    std::thread watch([&ready, stall_ms] {
        // A mount namespace of this thread's own, private, for the FUSE control
        // filesystem: nothing mounted here reaches the host's.
        const bool own = ::unshare(CLONE_NEWNS) == 0 &&
                         ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0;
        ready.store(own ? 1 : -(errno ? errno : EPERM), std::memory_order_release);
        if (!own)
            return;
        run(stall_ms);
    });
    while (ready.load(std::memory_order_acquire) == 0)
        std::this_thread::yield();
    const int result = ready.load(std::memory_order_acquire);
    const bool ok = result == 1;
    watch.detach();
    if (!ok)
        std::fprintf(stderr,
                     "softhca-engine: no stall watch (a mount namespace of its own: %s): "
                     "a FUSE page under an MR can hold the engine\n",
                     std::strerror(-result));
    return ok;
}

} // namespace softhca::engine
