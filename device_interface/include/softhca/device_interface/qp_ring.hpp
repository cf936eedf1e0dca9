// A queue pair's work queues as the card and the driver share them: one memfd the
// engine creates and both map. Layout: QpRingHeader, the send queue slots, then the
// receive queue slots (offsets in the header). The provider produces work requests and
// advances a producer index, then rings the queue's bit in the context's doorbell page
// (doorbell_page.hpp, slot `doorbell_slot`); the engine consumes the requests and
// advances `completed` as work requests retire, which frees their slots.
// A shared receive queue uses the same layout with no send queue (sq_slots = 0); its
// `rq_completed` counts requests taken by QPs.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace softhca::device_interface {

constexpr uint32_t kQpRingMagic = 0x53485150; // "SHQP"
constexpr uint32_t kQpRingVersion = 10;

struct alignas(64) QpRingHeader {
    uint32_t magic;
    uint32_t version;
    uint32_t sq_slots; // power of two
    uint32_t sq_slot_size;
    uint32_t rq_slots; // power of two
    uint32_t rq_slot_size;
    uint64_t sq_offset; // from the start of the mapping
    uint64_t rq_offset;
    uint32_t doorbell_slot; // this queue's bit in the context's doorbell page
    uint32_t reserved;
    alignas(64) std::atomic<uint64_t> sq_producer;  // provider
    alignas(64) std::atomic<uint64_t> sq_completed; // engine: retired, slot reusable
    alignas(64) std::atomic<uint64_t> rq_producer;  // provider
    alignas(64) std::atomic<uint64_t> rq_completed; // engine
    // Engine: the QP's state (enum ibv_qp_state) as the engine's transport has it, set
    // before `sq_completed` passes a request that changed it. The provider places RDMA
    // WRITEs and READs itself only while it is RTS (kSendPlaced).
    std::atomic<uint32_t> engine_state;
};
static_assert(sizeof(QpRingHeader) == 320);

enum SendFlags : uint8_t {
    kSendSignaled = 1 << 0,
    kSendFence = 1 << 1,
    kSendSolicited = 1 << 2,
    kSendInline = 1 << 3,
    // The SGEs' bytes were copied into the slot at post time (a small SEND or RDMA
    // WRITE from memory the provider saw registered): the engine checks the SGEs as
    // usual but takes the payload from the slot, which spares it a system call per
    // message for memory it cannot map. A request the data of which may not change
    // until it completes (10.8.3.1) reads the same either way.
    kSendGathered = 1 << 4,
    // An RDMA WRITE or READ whose bytes the provider moved itself inside ibv_post_send,
    // under a grant (grant_page.hpp): the engine sends nothing and completes it after the
    // requests before it. The provider posts one only when every earlier request of the
    // QP has retired or was placed too, so it overtakes nothing. An RDMA WRITE with
    // immediate so marked goes as one packet without payload, for the responder's receive
    // and completion, once the QP was granted an rkey (else the engine reads its bytes).
    kSendPlaced = 1 << 6,
};

// Every send slot has this much room beyond its SGEs for gathered bytes.
constexpr uint32_t kSendGatherRoom = 64;

// The operations whose bytes may be gathered (enum ibv_wr_opcode): RDMA WRITE (0),
// WRITE with immediate (1), SEND (2), SEND with immediate (3), SEND with Invalidate (9).
constexpr bool may_gather(uint8_t opcode) {
    return opcode <= 3 || opcode == 9;
}

struct WireSge {
    uint64_t addr;
    uint32_t length;
    uint32_t lkey;
};
static_assert(sizeof(WireSge) == 16);

// A send work request; followed in its slot by num_sge WireSge, or by `length` bytes
// of inline data when kSendInline is set. With kSendGathered the num_sge WireSge are
// followed by the `length` bytes they hold.
struct SendWqeHeader {
    uint64_t wr_id;
    uint8_t opcode; // enum ibv_wr_opcode
    uint8_t flags;  // SendFlags
    uint8_t num_sge;
    uint8_t reserved0;
    uint32_t imm_data; // network order
    uint32_t length;   // total bytes (computed by the provider)
    uint32_t rkey;
    uint64_t remote_addr;
    uint64_t compare_add;
    uint64_t swap;
    // UD: destination QP, Q_Key and the address handle's vector (GRH fields).
    uint32_t remote_qpn;
    uint32_t remote_qkey;
    uint8_t dgid[16];
    uint32_t flow_label;
    uint8_t hop_limit;
    uint8_t traffic_class;
    uint8_t sl;
    uint8_t sgid_index; // the AH's source GID (0 from providers that predate IPv6)
    // XRC: the SRQ number at the target.
    uint32_t remote_srqn;
    // BIND_MW: the window (engine handle), the MR (lkey) and the window's rights; the
    // new rkey is in `rkey`, the window's start and length in remote_addr and
    // compare_add. LOCAL_INV and SEND_WITH_INV carry the rkey to invalidate in `rkey`.
    uint32_t bind_mw_handle;
    uint32_t bind_mr_lkey;
    uint32_t bind_access;
};
static_assert(sizeof(SendWqeHeader) == 96);

// A receive work request; followed in its slot by num_sge WireSge.
struct RecvWqeHeader {
    uint64_t wr_id;
    uint32_t num_sge;
    uint32_t reserved;
};
static_assert(sizeof(RecvWqeHeader) == 16);

inline uint8_t* qp_ring_slot(QpRingHeader* h, bool send, uint64_t index) {
    auto* base = reinterpret_cast<uint8_t*>(h);
    return send ? base + h->sq_offset + (index & (h->sq_slots - 1)) * h->sq_slot_size
                : base + h->rq_offset + (index & (h->rq_slots - 1)) * h->rq_slot_size;
}

} // namespace softhca::device_interface
