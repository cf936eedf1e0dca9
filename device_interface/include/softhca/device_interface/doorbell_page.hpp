// A context's doorbell page, as a card's doorbell registers: one memfd per open device
// context that the engine creates (Opcode::MapDoorbells) and both map. Every work queue
// of the context (QP or SRQ) owns one bit, its slot, which the engine writes into the
// queue's ring header (QpRingHeader::doorbell_slot). After advancing a producer index
// the provider sets the queue's bit and the bit of its word in the summary; the engine
// takes the summary and the words it names each round and pulls only the queues whose
// bits were set, instead of reading every producer index of every queue.
//
// Ordering (every access sequentially consistent): the provider stores the producer,
// then sets (or finds set) the slot bit, then the summary bit; the engine clears a
// summary word, then the words it names, then reads the producers. A post is therefore
// either seen by this round's read of the producer or leaves its bit set for the next.
// The same pairing holds for `armed`: the engine arms, then looks at the summary once
// more before sleeping; the provider sets its bits, then looks at `armed`.
//
// Nothing here is trusted by the engine: a bit is only a hint to look at a queue whose
// ring it checks as always, and a bit with no queue behind it is ignored.
#pragma once

#include <atomic>
#include <cstdint>

namespace softhca::device_interface {

constexpr uint32_t kDoorbellPageMagic = 0x53484442; // "SHDB"
constexpr uint32_t kDoorbellPageVersion = 1;
// Room for every QP and SRQ a device may have (max_qp + max_srq).
constexpr uint32_t kDoorbellSlots = 16384 + 4096;
constexpr uint32_t kDoorbellWords = kDoorbellSlots / 64;
constexpr uint32_t kDoorbellSummaryWords = (kDoorbellWords + 63) / 64;
constexpr uint32_t kNoDoorbellSlot = UINT32_MAX;

struct alignas(64) DoorbellPage {
    uint32_t magic;
    uint32_t version;
    uint32_t slots;
    uint32_t reserved;
    // Set by the engine before it sleeps; a provider that finds it set after ringing
    // clears it and writes the context's doorbell pipe (OpenDeviceReply's fd).
    alignas(64) std::atomic<uint32_t> armed;
    alignas(64) std::atomic<uint64_t> summary[kDoorbellSummaryWords]; // bit w: words[w]
    alignas(64) std::atomic<uint64_t> words[kDoorbellWords];          // bit s % 64 of slot s
};
static_assert(sizeof(DoorbellPage) == 64 * 3 + kDoorbellWords * 8);
static_assert(kDoorbellSlots % 64 == 0);

// Sets the bit of `slot` and of its word in the summary. A bit already set is left
// alone (no write to a line the engine reads, when the engine has not taken it yet).
inline void ring_doorbell_slot(DoorbellPage& page, uint32_t slot) {
    if (slot >= kDoorbellSlots)
        return;
    const uint32_t word = slot / 64;
    const uint64_t bit = uint64_t{1} << (slot % 64);
    if (!(page.words[word].load() & bit))
        page.words[word].fetch_or(bit);
    const uint64_t summary_bit = uint64_t{1} << (word % 64);
    if (!(page.summary[word / 64].load() & summary_bit))
        page.summary[word / 64].fetch_or(summary_bit);
}

} // namespace softhca::device_interface
