// The completion queue as the card and the driver share it: a memfd the engine creates
// and both map. The engine is the only producer and the provider the only consumer.
// Layout: CqRingHeader, then `slots` CompletionEntry records (slots is a power of two).
// An entry at index i (mod slots) is valid when i < producer; the provider advances
// consumer after reading, which gives the slot back to the engine.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace softhca::device_interface {

constexpr uint32_t kCqRingMagic = 0x53484351; // "SHCQ"
constexpr uint32_t kCqRingVersion = 7;

// Values of CqRingHeader::notify: what ibv_req_notify_cq asked for. The provider sets
// it; the engine takes it back (exchange to kNotifyNone) when it adds a completion that
// satisfies it and writes one event into the CQ's completion channel.
constexpr uint32_t kNotifyNone = 0;
constexpr uint32_t kNotifyNext = 1;      // the next completion of any kind
constexpr uint32_t kNotifySolicited = 2; // the next solicited or unsuccessful completion

struct alignas(64) CqRingHeader {
    uint32_t magic;
    uint32_t version;
    uint32_t slots; // power of two
    uint32_t entry_size;
    alignas(64) std::atomic<uint64_t> producer; // written by the engine
    alignas(64) std::atomic<uint64_t> consumer; // written by the provider
    alignas(64) std::atomic<uint32_t> overrun;  // engine sets when it found the ring full
    std::atomic<uint32_t> notify;               // kNotify*: the arm, see above
    std::atomic<uint32_t> events; // completion events the engine wrote into the channel
};
static_assert(sizeof(CqRingHeader) == 256);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

constexpr uint8_t kNetworkHeaderNone = 0;
constexpr uint8_t kNetworkHeaderIpv4 = 1;
constexpr uint8_t kNetworkHeaderIpv6 = 2;

// One work completion, in the fields of struct ibv_wc.
struct CompletionEntry {
    uint64_t wr_id;
    uint32_t status; // enum ibv_wc_status
    uint32_t opcode; // enum ibv_wc_opcode
    uint32_t vendor_err;
    uint32_t byte_len;
    uint32_t imm_data; // network order, as ibv_wc carries it
    uint32_t qp_num;
    uint32_t src_qp;
    uint32_t wc_flags;
    uint16_t pkey_index;
    uint16_t slid;
    uint8_t sl;
    uint8_t dlid_path_bits;
    uint8_t network_header; // kNetworkHeader*: what a UD receive came over
    // Written by the provider only (the engine writes 0): the entry's QP was reset or
    // destroyed before the entry was polled, and polling skips it, as an HCA driver
    // cleans a CQ of such a QP's completions (libmlx5's __mlx5_cq_clean).
    uint8_t discarded;
    // A small received message that travels in the entry (docs/memory-model.md: the
    // provider copies it into the receive buffer inside poll_cq, before it returns the
    // completion): staged_length bytes (at most kEntryStagedBytes) of `staged` go to
    // staged_addr. 0: the engine wrote the buffer.
    uint64_t staged_addr;
    uint32_t staged_length;
    uint32_t reserved;
    uint8_t staged[56];
    // On a CQ created with kCreateCqTimestamps (0 otherwise): when the engine made the
    // completion, on the card's free-running clock — CLOCK_MONOTONIC in nanoseconds, so
    // hca_core_clock is 1 GHz and the provider converts to wall-clock time itself.
    uint64_t completion_ns;
};
static_assert(sizeof(CompletionEntry) == 128);
constexpr uint32_t kEntryStagedBytes = sizeof(CompletionEntry::staged);

constexpr size_t cq_ring_bytes(uint32_t slots) {
    return sizeof(CqRingHeader) + size_t{slots} * sizeof(CompletionEntry);
}

inline CompletionEntry* cq_ring_entries(CqRingHeader* header) {
    return reinterpret_cast<CompletionEntry*>(reinterpret_cast<char*>(header) +
                                              sizeof(CqRingHeader));
}

} // namespace softhca::device_interface
