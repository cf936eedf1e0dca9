// The stall watch: what keeps a client's FUSE page from holding an engine thread that
// serves others (issue 40, item 1; docs/security.md, "Memory that can wait").
//
// Two kinds of touch can wait on a client: of its memory, and a write into one of its
// event pipes, whose lock a client thread holds while its read copies into a FUSE page.
// Registration refuses memory on a filesystem that may wait on a user (memory_map.cpp),
// but a client can map such a file over a registered range afterwards (mmap MAP_FIXED),
// or reach one through an on-demand MR. The engine touches a client's memory only through
// ClientProcess (memory/client_process.cpp), and its pipes in a few places (event
// records, completion channels, rdma_cm tokens); each such touch is marked in a slot of
// its thread
// (a sequence number, odd while the touch lasts, and whose memory), at the cost of two
// stores. A watch thread looks at the slots every 100 ms and never waits on a client
// itself: a touch seen under way at three looks in a row (200 to 300 ms) is stalled. It
// then aborts the FUSE connections that the client's user mounted and that have
// requests waiting, as `fusectl`'s `abort` file does: the stalled touch fails at once
// (the client's QP fails as for unmapped memory), the daemon that did not answer loses
// its mount, and nobody else waits. A touch stalled on anything else (a disk under load,
// another user's FUSE mount) is reported and left to finish.
//
// Each abort costs every other client up to 300 ms of that thread, and a new FUSE mount
// costs its user milliseconds: the user whose memory it was is then cut off for a
// minute (kPenaltySeconds). The engine touches none of that user's memory (each touch
// fails as for unmapped memory, so its QPs fail) and opens it no device (EAGAIN).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <sys/types.h>

namespace softhca::engine {

class StallWatch {
  public:
    // One thread's current touch of a client's memory.
    struct alignas(64) Slot {
        std::atomic<uint64_t> sequence{0}; // odd: a touch is under way
        std::atomic<int> proc_dir{-1};     // the client's pinned /proc/PID directory
        std::atomic<uint64_t> address{0};  // where in its memory
        std::atomic<uid_t> account{0};     // whose memory it is: its user, charged
        std::atomic<uid_t> uid{0};         // ... and its uid as the engine sees it
        std::atomic<bool> used{false};
        uint32_t depth = 0; // touches under way, nested (the owning thread's alone)
    };

    // Whose a touch is: the client's pinned /proc/PID directory (-1: none at hand, for
    // the log only), the user charged for it (PeerProcess::account) and its uid.
    struct Owner {
        int proc_dir = -1;
        uid_t account = 0;
        uid_t uid = 0;
    };

    // Marks a touch of the memory of the process whose /proc/PID directory is `proc_dir`
    // at `address` (0: one of its pipes), for as long as it lives.
    class Touch {
      public:
        Touch(const Owner& owner, uint64_t address = 0)
            : Touch(owner.proc_dir, address, owner.account, owner.uid) {}
        // Only the owning thread writes its slot: plain stores, no locked instruction.
        // A touch inside another (a look at maps inside a check) leaves the slot to the
        // outer one, so the sequence stays odd exactly while some touch lasts.
        Touch(int proc_dir, uint64_t address, uid_t account, uid_t uid)
            : slot_(slot_of_this_thread()) {
            if (!slot_ || slot_->depth++ != 0)
                return;
            slot_->proc_dir.store(proc_dir, std::memory_order_relaxed);
            slot_->address.store(address, std::memory_order_relaxed);
            slot_->account.store(account, std::memory_order_relaxed);
            slot_->uid.store(uid, std::memory_order_relaxed);
            slot_->sequence.store(slot_->sequence.load(std::memory_order_relaxed) + 1,
                                  std::memory_order_release);
        }
        ~Touch() {
            if (slot_ && --slot_->depth == 0)
                slot_->sequence.store(slot_->sequence.load(std::memory_order_relaxed) + 1,
                                      std::memory_order_release);
        }
        Touch(const Touch&) = delete;
        Touch& operator=(const Touch&) = delete;

      private:
        Slot* slot_;
    };

    // Whether the user `account` (ClientProcess::account) is cut off now (a lock and a
    // clock read), and a count that moves whenever a user is cut off: a data path looks
    // again only when it moved, or while its user is cut off.
    static bool cut_off(uid_t account);
    static uint64_t penalty_epoch() { return penalty_epoch_.load(std::memory_order_acquire); }
    static constexpr uint32_t kPenaltySeconds = 60;

    // Starts the watch thread (once; the engine's main). `stall_ms` is how long a touch
    // may last before it is looked into. Returns false (and the engine goes on without
    // it) when no FUSE control filesystem can be mounted for it.
    static bool start(uint32_t stall_ms = 200);
    // This thread's slot's sequence (odd while a touch is under way), for tests.
    static uint64_t sequence_of_this_thread() {
        const Slot* slot = slot_of_this_thread();
        return slot ? slot->sequence.load(std::memory_order_relaxed) : 0;
    }
    // FUSE connections aborted so far.
    static uint64_t aborted() { return aborted_.load(std::memory_order_relaxed); }

    // The device of the file mapped at `address` by a maps file's text, as the kernel
    // numbers it (major << 20 | minor: a FUSE connection's name under fusectl), or -1
    // when no file is mapped there. Public for the unit tests.
    static int64_t device_at(const std::string& maps_text, uint64_t address);

  private:
    static constexpr size_t kSlots = 256;
    static Slot* slot_of_this_thread();
    static void look_into(Slot& slot, uint64_t sequence, uint32_t stalled_ms);
    static void cut(uid_t account);
    static std::atomic<uint64_t> penalty_epoch_;
    static void run(uint32_t stall_ms);
    static Slot slots_[kSlots];
    static std::atomic<uint64_t> aborted_;
};

} // namespace softhca::engine
