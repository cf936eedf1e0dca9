// Work requests and completions as the transport sees them. Enumerations carry the
// numeric values of the verbs API (ibv_wr_opcode, ibv_wc_status, ibv_wc_opcode) so the
// engine passes them through unchanged; the names are the IBTA's.
#pragma once

#include <array>
#include <cstdint>

namespace softhca::transport {

constexpr uint32_t kMaxSge = 16;
constexpr uint32_t kMaxInlineData = 256;
// The most bytes a receive completion can carry to the consumer (Completion::staged).
constexpr uint32_t kStagedReceiveBytes = 56;

enum class WrOpcode : uint8_t {
    RdmaWrite = 0,
    RdmaWriteWithImm = 1,
    Send = 2,
    SendWithImm = 3,
    RdmaRead = 4,
    AtomicCompareSwap = 5,
    AtomicFetchAdd = 6,
    LocalInvalidate = 7,  // a local operation: no packet
    BindMemoryWindow = 8, // a local operation: no packet
    SendWithInvalidate = 9,
};

enum class WcStatus : uint8_t {
    Success = 0,
    LocalLengthError = 1,
    LocalQpOperationError = 2,
    LocalProtectionError = 4,
    WrFlushError = 5,
    MemoryWindowBindError = 6,
    BadResponseError = 7,
    LocalAccessError = 8,
    RemoteInvalidRequestError = 9,
    RemoteAccessError = 10,
    RemoteOperationError = 11,
    RetryExceededError = 12,
    RnrRetryExceededError = 13,
    GeneralError = 21,
};

enum class WcOpcode : uint8_t {
    Send = 0,
    RdmaWrite = 1,
    RdmaRead = 2,
    CompareSwap = 3,
    FetchAdd = 4,
    BindMemoryWindow = 5,
    LocalInvalidate = 6,
    Recv = 128,
    RecvRdmaWithImm = 129,
};

struct Sge {
    uint64_t addr = 0;
    uint32_t length = 0;
    uint32_t lkey = 0;
};

// Where a UD send goes (its address handle): RoCE always has a GRH.
struct AddressVector {
    std::array<uint8_t, 16> dgid{};
    uint32_t flow_label = 0;
    uint8_t hop_limit = 64;
    uint8_t traffic_class = 0;
    uint8_t sl = 0;
    uint8_t sgid_index = 0; // which of the port's GIDs is the source
};

// Bytes a UD receive reserves in front of the data for the GRH (ibv_post_recv(3)).
constexpr uint32_t kGrhBytes = 40;

// What a BIND_MW work request asks (10.6.7.3): window `mw_handle` covers [addr,
// addr + length) of the region `mr_lkey` with `access`, under the rkey `new_rkey`.
// A length of zero unbinds.
struct WindowBind {
    uint32_t mw_handle = 0;
    uint32_t new_rkey = 0;
    uint32_t mr_lkey = 0;
    uint32_t access = 0;
    uint64_t addr = 0;
    uint64_t length = 0;
};

// A send work request's fields, without its scatter/gather list and inline bytes.
struct SendWqeFields {
    uint64_t wr_id = 0;
    WrOpcode opcode = WrOpcode::Send;
    bool signaled = false;
    bool fence = false;
    bool solicited = false;
    // The payload is in inline_bytes, not read from memory. num_sge is 0 for inline
    // data; a request whose SGEs' bytes were gathered at post time keeps its SGEs,
    // which are checked as if they were read.
    bool inline_data = false;
    // An RDMA WRITE or READ whose bytes the initiator moved itself before posting it
    // (single copy between processes of one engine, docs/memory-model.md): it sends
    // nothing and completes in send queue order, as a local operation does. An RDMA
    // WRITE with immediate so placed is one packet with no payload, marked
    // (Bth::placed_by_initiator), which the responder completes as the whole message.
    bool placed = false;
    uint32_t imm_data = 0; // network byte order, as the verbs carry it
    uint64_t remote_addr = 0;
    uint32_t rkey = 0; // RDMA and atomics; LOCAL_INV and SEND_WITH_INV: the rkey to invalidate
    uint64_t compare_add = 0;
    uint64_t swap = 0;
    uint32_t num_sge = 0;
    uint32_t length = 0; // total bytes of the message
    // UD: the destination QP, its Q_Key and the address vector.
    uint32_t remote_qpn = 0;
    uint32_t remote_qkey = 0;
    AddressVector av;
    // XRC: the SRQ at the target that receives the message.
    uint32_t remote_srqn = 0;
    WindowBind bind; // BIND_MW
};

// Only the first num_sge SGEs and the first `length` inline bytes mean anything: a
// request filled in place (QueuePair::prepare_send) leaves the rest as it was.
struct SendWqe : SendWqeFields {
    std::array<Sge, kMaxSge> sge{};
    std::array<uint8_t, kMaxInlineData> inline_bytes{};
};

struct RecvWqe {
    uint64_t wr_id = 0;
    uint32_t num_sge = 0;
    uint32_t length = 0;            // total room
    std::array<Sge, kMaxSge> sge{}; // the first num_sge mean anything
};

// The network header a RoCEv2 datagram came with (Annex A17.4.5.1: for UD the
// completion tells IPv4 from IPv6).
enum class NetworkHeader : uint8_t { None, Ipv4, Ipv6 };

struct Completion {
    uint64_t wr_id = 0;
    WcStatus status = WcStatus::Success;
    WcOpcode opcode = WcOpcode::Send;
    uint32_t byte_len = 0;
    uint32_t imm_data = 0; // network byte order
    bool with_imm = false;
    uint32_t qp_num = 0;
    uint32_t src_qp = 0;
    bool with_grh = false;  // UD: the first 40 bytes of the buffer hold the GRH
    bool solicited = false; // a receive whose message's last packet had the BTH SE bit
    NetworkHeader network_header = NetworkHeader::None; // UD receives
    bool with_invalidate = false; // a SEND with Invalidate: invalidated_rkey is gone
    uint32_t invalidated_rkey = 0;
    uint32_t srq_num = 0; // XRC target: the SRQ the receive came from
    uint8_t sl = 0;
    uint16_t pkey_index = 0;
    // A receive whose payload was not written into memory but travels with the
    // completion (MemoryAccess::stages_receive): staged_length bytes for staged_addr.
    uint32_t staged_length = 0;
    uint64_t staged_addr = 0;
    std::array<uint8_t, kStagedReceiveBytes> staged{};
};

} // namespace softhca::transport
