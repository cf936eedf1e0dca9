// The opcode table (IBTA 9.2, table 38): one entry per wire opcode, saying which
// extension headers follow the BTH, what kind of operation it is, and where in a
// message the packet sits. Requester, responder and completer consult only this.
#pragma once

#include <cstdint>

namespace softhca::transport {

enum class Service : uint8_t { RC = 0, UC = 1, RD = 2, UD = 3, CNP = 4, XRC = 5 };

enum class OpKind : uint8_t {
    Invalid,
    Send,
    Write,
    ReadRequest,
    ReadResponse,
    Ack,
    AtomicAck,
    CompareSwap,
    FetchAdd,
    CongestionNotification, // RoCEv2's CNP: to the data path's reaction point, no transport
};

enum class Position : uint8_t { Only, First, Middle, Last };

namespace header_flag {
constexpr uint8_t kReth = 1 << 0;
constexpr uint8_t kAeth = 1 << 1;
constexpr uint8_t kAtomicEth = 1 << 2;
constexpr uint8_t kAtomicAckEth = 1 << 3;
constexpr uint8_t kImmDt = 1 << 4;
constexpr uint8_t kIeth = 1 << 5;
constexpr uint8_t kDeth = 1 << 6;
constexpr uint8_t kXrceth = 1 << 7;
} // namespace header_flag

struct OpcodeInfo {
    const char* name = nullptr; // nullptr: not a valid opcode
    Service service = Service::RC;
    OpKind kind = OpKind::Invalid;
    Position position = Position::Only;
    uint8_t headers = 0;  // header_flag bits, in wire order RETH/DETH.., AETH, ...
    bool payload = false; // may carry payload
    bool request = false; // sent by a requester (else a response)

    bool valid() const { return name != nullptr; }
    bool has(uint8_t flag) const { return headers & flag; }
    bool starts_message() const {
        return position == Position::Only || position == Position::First;
    }
    bool ends_message() const { return position == Position::Only || position == Position::Last; }
    // Bytes of extension headers after the BTH.
    uint32_t extension_bytes() const;
};

const OpcodeInfo& opcode_info(uint8_t opcode);

// Opcode numbers within a service (the low five bits), 9.2 table 38.
namespace op {
constexpr uint8_t kSendFirst = 0x00;
constexpr uint8_t kSendMiddle = 0x01;
constexpr uint8_t kSendLast = 0x02;
constexpr uint8_t kSendLastImm = 0x03;
constexpr uint8_t kSendOnly = 0x04;
constexpr uint8_t kSendOnlyImm = 0x05;
constexpr uint8_t kWriteFirst = 0x06;
constexpr uint8_t kWriteMiddle = 0x07;
constexpr uint8_t kWriteLast = 0x08;
constexpr uint8_t kWriteLastImm = 0x09;
constexpr uint8_t kWriteOnly = 0x0a;
constexpr uint8_t kWriteOnlyImm = 0x0b;
constexpr uint8_t kReadRequest = 0x0c;
constexpr uint8_t kReadResponseFirst = 0x0d;
constexpr uint8_t kReadResponseMiddle = 0x0e;
constexpr uint8_t kReadResponseLast = 0x0f;
constexpr uint8_t kReadResponseOnly = 0x10;
constexpr uint8_t kAck = 0x11;
constexpr uint8_t kAtomicAck = 0x12;
constexpr uint8_t kCompareSwap = 0x13;
constexpr uint8_t kFetchAdd = 0x14;
constexpr uint8_t kSendLastInv = 0x16;
constexpr uint8_t kSendOnlyInv = 0x17;

// RoCEv2's Congestion Notification Packet (Annex A17.9.3): a whole opcode, not one of a
// service's; its BTH is followed by 16 reserved bytes.
constexpr uint8_t kCnp = 0x81;

constexpr uint8_t rc(uint8_t code) {
    return code;
}
constexpr uint8_t uc(uint8_t code) {
    return 0x20 | code;
}
constexpr uint8_t ud(uint8_t code) {
    return 0x60 | code;
}
constexpr uint8_t xrc(uint8_t code) {
    return 0xa0 | code;
}
} // namespace op

} // namespace softhca::transport
