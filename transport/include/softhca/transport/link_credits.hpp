// Link-level credit-based flow control per virtual lane (IBTA Vol 1, 7.9.4), sans I/O.
// Credits count 64-byte blocks. The sender keeps FCTBS, the total blocks it has sent on
// the VL, and FCCL, the credit limit the receiver last advertised; it may send a packet
// of NB blocks when (FCCL - (FCTBS + NB)) mod 4096 <= 2048 (C7-62). The receiver keeps
// ABR, the blocks it has received (set to the sender's FCTBS whenever a flow-control
// packet brings it, which repairs what a lost packet took), and advertises
// FCCL = ABR + the blocks its buffer has free (at most 2048) (C7-63). With it on, a
// sender never sends what the receiver has no room for: a full receive buffer holds the
// sender back instead of dropping.
//
// FlowControlPacket is the 6-byte flow-control packet of 7.9.4.1 (Op, FCTBS, VL, FCCL
// and the link packet CRC); softhca carries it between its own ports only (not as
// RoCEv2, so that no foreign peer takes it for a transport packet).
#pragma once

#include "softhca/transport/byte_order.hpp"

#include <cstddef>
#include <cstdint>

namespace softhca::transport {

constexpr uint32_t kCreditBlockBytes = 64;
constexpr uint32_t kCreditModulus = 4096; // FCTBS, ABR and FCCL are 12-bit counters
constexpr uint32_t kMaxAdvertisedBlocks = 2048;

constexpr uint32_t credit_blocks(uint32_t bytes) {
    return (bytes + kCreditBlockBytes - 1) / kCreditBlockBytes;
}

class CreditSender {
  public:
    // Whether a packet of `bytes` may go now.
    bool may_send(uint32_t bytes) const;
    // It went.
    void sent(uint32_t bytes);
    // A flow-control packet from the receiver advertised `fccl`.
    void on_credit_limit(uint16_t fccl);
    // Blocks that may still be sent (0 before the receiver has advertised any).
    uint32_t available_blocks() const;
    uint16_t fctbs() const { return fctbs_; }
    uint16_t fccl() const { return fccl_; }

  private:
    uint16_t fctbs_ = 0;
    uint16_t fccl_ = 0; // nothing may be sent before the first advertisement
};

class CreditReceiver {
  public:
    explicit CreditReceiver(uint32_t buffer_blocks) : capacity_(buffer_blocks) {}
    // A packet of `bytes` arrived: true when the buffer had room (a sender that keeps to
    // its credits always finds room; false is counted as an overrun by the caller).
    bool on_packet(uint32_t bytes);
    // A packet left the buffer (delivered onward): its blocks are free again.
    void released(uint32_t bytes);
    // A flow-control packet from the sender brought its FCTBS.
    void on_sender_total(uint16_t fctbs) { abr_ = fctbs % kCreditModulus; }
    // The limit to advertise now.
    uint16_t credit_limit() const;
    uint32_t used_blocks() const { return used_; }
    uint16_t abr() const { return abr_; }
    uint32_t capacity_blocks() const { return capacity_; }

  private:
    uint32_t capacity_;
    uint32_t used_ = 0;
    uint16_t abr_ = 0;
};

// 7.9.4.1: Op (4 bits: 0 normal, 1 initialization), FCTBS (12), VL (4), FCCL (12), then a
// 16-bit link packet CRC over the first four bytes.
struct FlowControlPacket {
    uint8_t bytes[6];

    static constexpr uint8_t kOpNormal = 0;
    static constexpr uint8_t kOpInit = 1;

    uint8_t op() const { return bytes[0] >> 4; }
    uint16_t fctbs() const { return static_cast<uint16_t>((load_be16(bytes) & 0x0fff)); }
    uint8_t vl() const { return bytes[2] >> 4; }
    uint16_t fccl() const { return static_cast<uint16_t>(load_be16(bytes + 2) & 0x0fff); }
    uint16_t lpcrc() const { return load_be16(bytes + 4); }

    // Fills every field and the CRC.
    void set(uint8_t op, uint16_t fctbs, uint8_t vl, uint16_t fccl);
    // Whether the CRC matches the first four bytes.
    bool crc_ok() const;
};
static_assert(sizeof(FlowControlPacket) == 6);

// The link packet CRC: a CRC-16 with the VCRC's polynomial (0x100B), all-ones seed, the
// result inverted, each byte taken least significant bit first. Only softhca's own ports
// exchange flow-control packets, so only they need to agree on it.
uint16_t link_packet_crc(const uint8_t* data, size_t length);

} // namespace softhca::transport
