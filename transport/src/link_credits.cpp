#include "softhca/transport/link_credits.hpp"

namespace softhca::transport {

namespace {
constexpr uint16_t mod4096(uint32_t v) {
    return static_cast<uint16_t>(v % kCreditModulus);
}
} // namespace

bool CreditSender::may_send(uint32_t bytes) const {
    // C7-62: (FCCL - (FCTBS + NB)) mod 4096 <= 2048.
    const uint32_t after = fctbs_ + credit_blocks(bytes);
    return mod4096(fccl_ + kCreditModulus - after % kCreditModulus) <= kMaxAdvertisedBlocks;
}

void CreditSender::sent(uint32_t bytes) {
    fctbs_ = mod4096(fctbs_ + credit_blocks(bytes));
}

void CreditSender::on_credit_limit(uint16_t fccl) {
    fccl_ = mod4096(fccl);
}

uint32_t CreditSender::available_blocks() const {
    const uint16_t left = mod4096(fccl_ + kCreditModulus - fctbs_);
    return left <= kMaxAdvertisedBlocks ? left : 0;
}

bool CreditReceiver::on_packet(uint32_t bytes) {
    const uint32_t blocks = credit_blocks(bytes);
    abr_ = mod4096(abr_ + blocks);
    if (used_ + blocks > capacity_)
        return false;
    used_ += blocks;
    return true;
}

void CreditReceiver::released(uint32_t bytes) {
    const uint32_t blocks = credit_blocks(bytes);
    used_ = blocks > used_ ? 0 : used_ - blocks;
}

uint16_t CreditReceiver::credit_limit() const {
    // C7-63: ABR plus the free blocks, no more than 2048 ahead.
    const uint32_t free_blocks = capacity_ > used_ ? capacity_ - used_ : 0;
    return mod4096(abr_ +
                   (free_blocks < kMaxAdvertisedBlocks ? free_blocks : kMaxAdvertisedBlocks));
}

uint16_t link_packet_crc(const uint8_t* data, size_t length) {
    uint16_t crc = 0xffff;
    for (size_t i = 0; i < length; ++i) {
        for (int bit = 0; bit < 8; ++bit) {
            const bool in = ((data[i] >> bit) & 1) != ((crc >> 15) & 1);
            crc = static_cast<uint16_t>(crc << 1);
            if (in)
                crc ^= 0x100b;
        }
    }
    return static_cast<uint16_t>(~crc);
}

void FlowControlPacket::set(uint8_t op, uint16_t fctbs, uint8_t vl, uint16_t fccl) {
    store_be16(bytes, static_cast<uint16_t>((op & 0xf) << 12 | (fctbs & 0x0fff)));
    store_be16(bytes + 2, static_cast<uint16_t>((vl & 0xf) << 12 | (fccl & 0x0fff)));
    store_be16(bytes + 4, link_packet_crc(bytes, 4));
}

bool FlowControlPacket::crc_ok() const {
    return link_packet_crc(bytes, 4) == lpcrc();
}

} // namespace softhca::transport
