// Virtual lane arbitration at a port's transmitter (IBTA Vol 1, 7.6.9): which VL's head
// packet leaves next. VL15 (management) always goes first. The data VLs are served from
// two tables of (VL, weight) entries, high priority and low priority, each in weighted
// round robin: the current entry sends packets from its VL until its weight (in 64-byte
// units) is spent or the VL has nothing to send, then the next entry takes over. A packet
// may start while any weight is left; what it overdraws is taken from the entry's next
// turn (deficit round robin), so that the byte shares follow the weights also where
// packets are longer than a weight. The
// high-priority table is served while it has something to send, except that after
// LimitOfHighPriority x 4 KiB of high-priority bytes a waiting low-priority packet gets
// its turn (a limit of 0 lets one high-priority packet through; 255 has no limit).
//
// Sans I/O: the caller says which VLs have a packet that may go now (credits allowing,
// 7.9.4) and how long it is; pick() answers with the VL and accounts for that packet as
// sent.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace softhca::transport {

constexpr unsigned kDataVls = 8;                  // VL0..VL7 carry data here
constexpr uint8_t kManagementVl = 15;             // VL15: subnet management, never arbitrated
constexpr size_t kVlSlots = 16;                   // VL numbers 0..15
constexpr size_t kMaxArbitrationEntries = 64;     // per table (7.6.9: up to 64 entries)
constexpr uint32_t kArbitrationWeightUnit = 64;   // bytes per unit of weight
constexpr uint32_t kHighPriorityLimitUnit = 4096; // bytes per unit of LimitOfHighPriority
constexpr uint8_t kUnlimitedHighPriority = 255;

struct VlArbitrationEntry {
    uint8_t vl = 0;     // a data VL (0..14); entries naming VL15 are ignored
    uint8_t weight = 0; // 64-byte units; 0: the entry is skipped
    bool operator==(const VlArbitrationEntry&) const = default;
};

struct VlArbitrationTables {
    std::vector<VlArbitrationEntry> high;
    std::vector<VlArbitrationEntry> low;
    uint8_t limit_of_high_priority = 0;

    // Every data VL in the low-priority table with the same weight, nothing in the high
    // one: plain round robin, what a port does before anyone configures it.
    static VlArbitrationTables round_robin(unsigned vls = kDataVls, uint8_t weight = 64);
    // Parses "high=VL:W,VL:W;low=VL:W,...;limit=N" (either table may be absent or empty).
    // Returns an empty string, or what is wrong.
    static std::string parse(const std::string& text, VlArbitrationTables& out);
    std::string to_string() const;
    // Whether an entry of either table with a weight serves `vl` (a VL in neither is
    // never sent, 7.6.9).
    bool serves(uint8_t vl) const;
};

class VlArbiter {
  public:
    explicit VlArbiter(const VlArbitrationTables& tables = VlArbitrationTables::round_robin());

    static constexpr int kNone = -1;
    // head_bytes[vl]: the length of the packet at the head of VL vl that may be sent now,
    // 0 when there is none (or its credits do not allow it). Returns the VL whose packet
    // goes, accounted as sent, or kNone when nothing may go.
    int pick(const std::array<uint32_t, kVlSlots>& head_bytes);

    const VlArbitrationTables& tables() const { return tables_; }
    // High-priority bytes sent since a low-priority packet last went.
    uint64_t high_priority_run() const { return high_run_; }

  private:
    struct Table {
        std::vector<VlArbitrationEntry> entries;
        std::vector<int64_t> overdrawn; // by entry: bytes its next turn owes
        size_t index = 0;
        int64_t remaining = 0; // bytes the current entry may still send
        bool has_work(const std::array<uint32_t, kVlSlots>& head) const;
        int serve(const std::array<uint32_t, kVlSlots>& head);
        void advance();
    };
    VlArbitrationTables tables_;
    Table high_, low_;
    uint64_t high_run_ = 0;
};

} // namespace softhca::transport
