// IBTA transport headers (IBTA Vol 1, 9.2 and 9.3), one struct per header, each a
// byte array with explicit big-endian accessors so its layout is exactly the wire's.
#pragma once

#include "softhca/transport/byte_order.hpp"

#include <cstdint>

namespace softhca::transport {

// Base Transport Header, 9.2.
struct Bth {
    uint8_t b[12];
    uint8_t opcode() const { return b[0]; }
    bool solicited() const { return b[1] & 0x80; }
    bool mig_req() const { return b[1] & 0x40; }
    uint8_t pad_count() const { return (b[1] >> 4) & 0x3; }
    uint8_t tver() const { return b[1] & 0xf; }
    uint16_t pkey() const { return load_be16(b + 2); }
    bool fecn() const { return b[4] & 0x80; }
    bool becn() const { return b[4] & 0x40; }
    uint32_t dest_qp() const { return load_be24(b + 5); }
    bool ack_req() const { return b[8] & 0x80; }
    // The first of the seven reserved bits after AckReq (9.2, transmitted as 0 and
    // ignored by an HCA): softhca's own, on its built-in wire only. It marks a WRITE
    // with immediate whose bytes the initiator already moved (single copy): the packet
    // carries the RETH and ImmDt but no payload. Receivers other than the built-in
    // wire's ignore it, as the IBTA says.
    bool placed_by_initiator() const { return b[8] & 0x40; }
    void set_placed_by_initiator() { b[8] |= 0x40; }
    uint32_t psn() const { return load_be24(b + 9); }

    void set(uint8_t opcode, bool solicited, uint8_t pad, uint16_t pkey, uint32_t dest_qp,
             bool ack_req, uint32_t psn) {
        b[0] = opcode;
        b[1] = static_cast<uint8_t>((solicited ? 0x80 : 0) | 0x40 /* MigReq: migrated */ |
                                    (pad & 3) << 4 /* TVer 0 */);
        store_be16(b + 2, pkey);
        b[4] = 0;
        store_be24(b + 5, dest_qp);
        b[8] = ack_req ? 0x80 : 0;
        store_be24(b + 9, psn);
    }
};
static_assert(sizeof(Bth) == 12);

// RDMA Extended Transport Header, 9.3.3.
struct Reth {
    uint8_t b[16];
    uint64_t va() const { return load_be64(b); }
    uint32_t rkey() const { return load_be32(b + 8); }
    uint32_t dma_length() const { return load_be32(b + 12); }
    void set(uint64_t va, uint32_t rkey, uint32_t length) {
        store_be64(b, va);
        store_be32(b + 8, rkey);
        store_be32(b + 12, length);
    }
};
static_assert(sizeof(Reth) == 16);

// ACK Extended Transport Header, 9.3.5: syndrome and MSN.
struct Aeth {
    uint8_t b[4];
    uint8_t syndrome() const { return b[0]; }
    uint32_t msn() const { return load_be24(b + 1); }
    void set(uint8_t syndrome, uint32_t msn) {
        b[0] = syndrome;
        store_be24(b + 1, msn);
    }
};
static_assert(sizeof(Aeth) == 4);

// AETH syndrome encodings, 9.3.5 table 42.
namespace aeth {
constexpr uint8_t kTypeMask = 0x60;
constexpr uint8_t kAck = 0x00;
constexpr uint8_t kRnrNak = 0x20;
constexpr uint8_t kNak = 0x60;
constexpr uint8_t kValueMask = 0x1f;
constexpr uint8_t kCreditInvalid = 0x1f; // ACK: no end-to-end credit limit
// NAK codes (the value field of a NAK syndrome)
constexpr uint8_t kNakPsnSequenceError = 0;
constexpr uint8_t kNakInvalidRequest = 1;
constexpr uint8_t kNakRemoteAccessError = 2;
constexpr uint8_t kNakRemoteOperationalError = 3;
constexpr uint8_t kNakInvalidRdRequest = 4;
} // namespace aeth

// Atomic Extended Transport Header, 9.3.4.
struct AtomicEth {
    uint8_t b[28];
    uint64_t va() const { return load_be64(b); }
    uint32_t rkey() const { return load_be32(b + 8); }
    uint64_t swap_add() const { return load_be64(b + 12); }
    uint64_t compare() const { return load_be64(b + 20); }
    void set(uint64_t va, uint32_t rkey, uint64_t swap_add, uint64_t compare) {
        store_be64(b, va);
        store_be32(b + 8, rkey);
        store_be64(b + 12, swap_add);
        store_be64(b + 20, compare);
    }
};
static_assert(sizeof(AtomicEth) == 28);

// Atomic Acknowledge Extended Transport Header, 9.3.6.
struct AtomicAckEth {
    uint8_t b[8];
    uint64_t original() const { return load_be64(b); }
    void set(uint64_t original) { store_be64(b, original); }
};
static_assert(sizeof(AtomicAckEth) == 8);

// Immediate Data Extended Transport Header, 9.3.7 (carried as opaque network-order bytes).
struct ImmDt {
    uint8_t b[4];
};
static_assert(sizeof(ImmDt) == 4);

// Invalidate Extended Transport Header, 9.3.8.
struct Ieth {
    uint8_t b[4];
    uint32_t rkey() const { return load_be32(b); }
    void set(uint32_t rkey) { store_be32(b, rkey); }
};
static_assert(sizeof(Ieth) == 4);

// XRC Extended Transport Header (IBTA Annex A14, XRC): the target's XRC SRQ number,
// 24 bits, right after the BTH of every XRC request.
struct Xrceth {
    uint8_t b[4];
    uint32_t srqn() const { return load_be24(b + 1); }
    void set(uint32_t srqn) {
        b[0] = 0;
        store_be24(b + 1, srqn);
    }
};
static_assert(sizeof(Xrceth) == 4);

// Datagram Extended Transport Header, 9.3.2.
struct Deth {
    uint8_t b[8];
    uint32_t qkey() const { return load_be32(b); }
    uint32_t src_qp() const { return load_be24(b + 5); }
    void set(uint32_t qkey, uint32_t src_qp) {
        store_be32(b, qkey);
        b[4] = 0;
        store_be24(b + 5, src_qp);
    }
};
static_assert(sizeof(Deth) == 8);

// The default P_Key, full membership (10.9.1.2).
constexpr uint16_t kDefaultPkey = 0xffff;

} // namespace softhca::transport
