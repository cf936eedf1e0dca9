#include "softhca/transport/opcodes.hpp"

#include <array>

namespace softhca::transport {

namespace {

using namespace header_flag;

struct Row {
    uint8_t code; // low five bits
    const char* name;
    OpKind kind;
    Position position;
    uint8_t headers;
    bool payload;
    bool request;
};

// The operations of a connected service (RC, and the subset UC allows), 9.2 table 38.
constexpr Row kConnectedRows[] = {
    {op::kSendFirst, "SEND_FIRST", OpKind::Send, Position::First, 0, true, true},
    {op::kSendMiddle, "SEND_MIDDLE", OpKind::Send, Position::Middle, 0, true, true},
    {op::kSendLast, "SEND_LAST", OpKind::Send, Position::Last, 0, true, true},
    {op::kSendLastImm, "SEND_LAST_WITH_IMMEDIATE", OpKind::Send, Position::Last, kImmDt, true,
     true},
    {op::kSendOnly, "SEND_ONLY", OpKind::Send, Position::Only, 0, true, true},
    {op::kSendOnlyImm, "SEND_ONLY_WITH_IMMEDIATE", OpKind::Send, Position::Only, kImmDt, true,
     true},
    {op::kWriteFirst, "RDMA_WRITE_FIRST", OpKind::Write, Position::First, kReth, true, true},
    {op::kWriteMiddle, "RDMA_WRITE_MIDDLE", OpKind::Write, Position::Middle, 0, true, true},
    {op::kWriteLast, "RDMA_WRITE_LAST", OpKind::Write, Position::Last, 0, true, true},
    {op::kWriteLastImm, "RDMA_WRITE_LAST_WITH_IMMEDIATE", OpKind::Write, Position::Last, kImmDt,
     true, true},
    {op::kWriteOnly, "RDMA_WRITE_ONLY", OpKind::Write, Position::Only, kReth, true, true},
    {op::kWriteOnlyImm, "RDMA_WRITE_ONLY_WITH_IMMEDIATE", OpKind::Write, Position::Only,
     kReth | kImmDt, true, true},
    {op::kReadRequest, "RDMA_READ_REQUEST", OpKind::ReadRequest, Position::Only, kReth, false,
     true},
    {op::kReadResponseFirst, "RDMA_READ_RESPONSE_FIRST", OpKind::ReadResponse, Position::First,
     kAeth, true, false},
    {op::kReadResponseMiddle, "RDMA_READ_RESPONSE_MIDDLE", OpKind::ReadResponse, Position::Middle,
     0, true, false},
    {op::kReadResponseLast, "RDMA_READ_RESPONSE_LAST", OpKind::ReadResponse, Position::Last, kAeth,
     true, false},
    {op::kReadResponseOnly, "RDMA_READ_RESPONSE_ONLY", OpKind::ReadResponse, Position::Only, kAeth,
     true, false},
    {op::kAck, "ACKNOWLEDGE", OpKind::Ack, Position::Only, kAeth, false, false},
    {op::kAtomicAck, "ATOMIC_ACKNOWLEDGE", OpKind::AtomicAck, Position::Only, kAeth | kAtomicAckEth,
     false, false},
    {op::kCompareSwap, "CMP_SWAP", OpKind::CompareSwap, Position::Only, kAtomicEth, false, true},
    {op::kFetchAdd, "FETCH_ADD", OpKind::FetchAdd, Position::Only, kAtomicEth, false, true},
    {op::kSendLastInv, "SEND_LAST_WITH_INVALIDATE", OpKind::Send, Position::Last, kIeth, true,
     true},
    {op::kSendOnlyInv, "SEND_ONLY_WITH_INVALIDATE", OpKind::Send, Position::Only, kIeth, true,
     true},
};

// UC carries sends and writes only (9.2 table 38, "UC" column).
constexpr bool uc_allows(uint8_t code) {
    return code <= op::kWriteOnlyImm;
}

constexpr std::array<OpcodeInfo, 256> build_table() {
    std::array<OpcodeInfo, 256> table{};
    for (const Row& row : kConnectedRows) {
        OpcodeInfo info{row.name,    Service::RC, row.kind,   row.position,
                        row.headers, row.payload, row.request};
        table[op::rc(row.code)] = info;
        if (uc_allows(row.code)) {
            OpcodeInfo uc = info;
            uc.service = Service::UC;
            table[op::uc(row.code)] = uc;
        }
        // XRC has every RC operation; its requests carry an XRCETH (Annex A14).
        info.service = Service::XRC;
        if (row.request)
            info.headers |= kXrceth;
        table[op::xrc(row.code)] = info;
    }
    // UD: SEND_ONLY and SEND_ONLY_WITH_IMMEDIATE, each with a DETH (9.2 table 38).
    table[op::ud(op::kSendOnly)] = {"UD_SEND_ONLY", Service::UD, OpKind::Send, Position::Only,
                                    kDeth,          true,        true};
    table[op::ud(op::kSendOnlyImm)] = {"UD_SEND_ONLY_WITH_IMMEDIATE",
                                       Service::UD,
                                       OpKind::Send,
                                       Position::Only,
                                       kDeth | kImmDt,
                                       true,
                                       true};
    // The CNP (A17.9.3): the 16 reserved bytes after its BTH are its payload.
    table[op::kCnp] = {"CNP", Service::CNP, OpKind::CongestionNotification, Position::Only, 0,
                       true,  false};
    return table;
}

constexpr std::array<OpcodeInfo, 256> kTable = build_table();

} // namespace

uint32_t OpcodeInfo::extension_bytes() const {
    uint32_t bytes = 0;
    if (has(kReth))
        bytes += 16;
    if (has(kDeth))
        bytes += 8;
    if (has(kXrceth))
        bytes += 4;
    if (has(kAeth))
        bytes += 4;
    if (has(kAtomicEth))
        bytes += 28;
    if (has(kAtomicAckEth))
        bytes += 8;
    if (has(kImmDt))
        bytes += 4;
    if (has(kIeth))
        bytes += 4;
    return bytes;
}

const OpcodeInfo& opcode_info(uint8_t opcode) {
    return kTable[opcode];
}

} // namespace softhca::transport
