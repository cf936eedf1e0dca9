#include "softhca/transport/ib_packet.hpp"

namespace softhca::transport {

HeaderOffsets header_offsets(const OpcodeInfo& info) {
    using namespace header_flag;
    HeaderOffsets o;
    uint32_t at = 12;
    auto place = [&](uint8_t flag, uint32_t size, uint32_t& where) {
        if (info.has(flag)) {
            where = at;
            at += size;
        }
    };
    place(kDeth, 8, o.deth);
    place(kXrceth, 4, o.xrceth);
    place(kReth, 16, o.reth);
    place(kAtomicEth, 28, o.atomic);
    place(kAeth, 4, o.aeth);
    place(kAtomicAckEth, 8, o.atomic_ack);
    place(kImmDt, 4, o.imm);
    place(kIeth, 4, o.ieth);
    o.payload = at;
    return o;
}

PacketError parse_ib_packet(const uint8_t* data, size_t length, IbPacket& out) {
    if (length < sizeof(Bth))
        return PacketError::TooShort;
    const auto* bth = reinterpret_cast<const Bth*>(data);
    const OpcodeInfo& info = opcode_info(bth->opcode());
    if (!info.valid())
        return PacketError::BadOpcode;
    if (bth->tver() != 0)
        return PacketError::BadVersion;
    const HeaderOffsets o = header_offsets(info);
    const size_t pad = bth->pad_count();
    if (length < o.payload + pad)
        return PacketError::TooShort;
    out = IbPacket{};
    out.info = &info;
    out.bth = bth;
    using namespace header_flag;
    if (info.has(kDeth))
        out.deth = reinterpret_cast<const Deth*>(data + o.deth);
    if (info.has(kXrceth))
        out.xrceth = reinterpret_cast<const Xrceth*>(data + o.xrceth);
    if (info.has(kReth))
        out.reth = reinterpret_cast<const Reth*>(data + o.reth);
    if (info.has(kAtomicEth))
        out.atomic = reinterpret_cast<const AtomicEth*>(data + o.atomic);
    if (info.has(kAeth))
        out.aeth = reinterpret_cast<const Aeth*>(data + o.aeth);
    if (info.has(kAtomicAckEth))
        out.atomic_ack = reinterpret_cast<const AtomicAckEth*>(data + o.atomic_ack);
    if (info.has(kImmDt))
        out.imm = reinterpret_cast<const ImmDt*>(data + o.imm);
    if (info.has(kIeth))
        out.ieth = reinterpret_cast<const Ieth*>(data + o.ieth);
    out.payload = data + o.payload;
    out.payload_length = static_cast<uint32_t>(length - o.payload - pad);
    if (!info.payload && (out.payload_length || pad))
        return PacketError::PayloadOnNone;
    return PacketError::None;
}

} // namespace softhca::transport
