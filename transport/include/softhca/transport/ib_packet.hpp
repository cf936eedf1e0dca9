// An IB transport packet as it travels inside RoCEv2's UDP payload: BTH, extension
// headers in wire order (9.2: DETH or XRCETH, RETH or AtomicETH, AETH, AtomicAckETH, ImmDt or
// IETH), payload, pad to a multiple of four bytes. The ICRC is not part of this view.
#pragma once

#include "softhca/transport/headers.hpp"
#include "softhca/transport/opcodes.hpp"

#include <cstddef>
#include <cstdint>

namespace softhca::transport {

struct IbPacket {
    const OpcodeInfo* info = nullptr;
    const Bth* bth = nullptr;
    const Deth* deth = nullptr;
    const Xrceth* xrceth = nullptr;
    const Reth* reth = nullptr;
    const AtomicEth* atomic = nullptr;
    const Aeth* aeth = nullptr;
    const AtomicAckEth* atomic_ack = nullptr;
    const ImmDt* imm = nullptr;
    const Ieth* ieth = nullptr;
    const uint8_t* payload = nullptr;
    uint32_t payload_length = 0; // without pad
    // The SL it came on, for the receive completion: the LRH's on InfiniBand; on RoCEv2
    // the frame's priority tag (0 untagged), which the frame's receiver sets (not
    // parse_ib_packet).
    uint8_t sl = 0;
    // A WRITE with immediate whose bytes the initiator placed itself (Bth's
    // placed_by_initiator), honoured only where the frame came over the built-in wire,
    // which only the engine's own requesters feed; its receiver sets it.
    bool placed = false;
};

enum class PacketError : uint8_t {
    None,
    TooShort,      // shorter than its headers and pad
    BadOpcode,     // not a valid IBTA opcode
    BadVersion,    // TVer != 0 (9.6.1.1 C9-7... the packet is silently dropped)
    PayloadOnNone, // payload where the opcode carries none
};

// Parses `length` bytes starting at the BTH (the ICRC already removed).
PacketError parse_ib_packet(const uint8_t* data, size_t length, IbPacket& out);

// Header bytes (BTH plus extension headers) of an opcode.
inline uint32_t ib_header_bytes(const OpcodeInfo& info) {
    return 12 + info.extension_bytes();
}

// Offsets of each extension header within a packet of this opcode (from the BTH), for
// writers. Only meaningful for headers the opcode carries.
struct HeaderOffsets {
    uint32_t deth = 0, xrceth = 0, reth = 0, atomic = 0, aeth = 0, atomic_ack = 0, imm = 0,
             ieth = 0, payload = 0;
};
HeaderOffsets header_offsets(const OpcodeInfo& info);

} // namespace softhca::transport
