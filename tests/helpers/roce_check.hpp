// Checks one captured RoCEv2 frame with the transport's codec: it parses, its ICRC is
// right, and the headers re-encoded from the parsed fields are the bytes captured.
// Shared by the codec unit test (Linux Soft-RoCE captures) and pcap_check (ours).
#pragma once

#include "softhca/transport/ib_packet.hpp"
#include "softhca/transport/roce_frame.hpp"

#include <cstring>
#include <string>
#include <vector>

namespace roce_check {

using namespace softhca::transport;

// Re-encodes the BTH and extension headers from the parsed fields only.
inline std::vector<uint8_t> reencode_ib_headers(const IbPacket& p) {
    const HeaderOffsets o = header_offsets(*p.info);
    std::vector<uint8_t> out(o.payload);
    auto* bth = reinterpret_cast<Bth*>(out.data());
    bth->set(p.bth->opcode(), p.bth->solicited(), p.bth->pad_count(), p.bth->pkey(),
             p.bth->dest_qp(), p.bth->ack_req(), p.bth->psn());
    if (!p.bth->mig_req())
        bth->b[1] &= static_cast<uint8_t>(~0x40);
    if (p.deth)
        reinterpret_cast<Deth*>(out.data() + o.deth)->set(p.deth->qkey(), p.deth->src_qp());
    if (p.reth)
        reinterpret_cast<Reth*>(out.data() + o.reth)
            ->set(p.reth->va(), p.reth->rkey(), p.reth->dma_length());
    if (p.atomic)
        reinterpret_cast<AtomicEth*>(out.data() + o.atomic)
            ->set(p.atomic->va(), p.atomic->rkey(), p.atomic->swap_add(), p.atomic->compare());
    if (p.aeth)
        reinterpret_cast<Aeth*>(out.data() + o.aeth)->set(p.aeth->syndrome(), p.aeth->msn());
    if (p.atomic_ack)
        reinterpret_cast<AtomicAckEth*>(out.data() + o.atomic_ack)->set(p.atomic_ack->original());
    if (p.imm)
        std::memcpy(out.data() + o.imm, p.imm->b, 4);
    if (p.ieth)
        std::memcpy(out.data() + o.ieth, p.ieth->b, 4);
    return out;
}

// Returns "" when the frame passes, else what is wrong. `opcode_name` receives the
// packet's opcode name.
inline std::string check_frame(const std::vector<uint8_t>& bytes, std::string* opcode_name) {
    ParsedFrame frame;
    if (FrameError e = parse_roce_frame(bytes.data(), bytes.size(), frame); e != FrameError::None)
        return "frame error " + std::to_string(static_cast<int>(e));
    IbPacket packet;
    if (PacketError e = parse_ib_packet(frame.ib, frame.ib_length, packet); e != PacketError::None)
        return "packet error " + std::to_string(static_cast<int>(e));
    if (opcode_name)
        *opcode_name = packet.info->name;
    const auto headers = reencode_ib_headers(packet);
    if (std::memcmp(headers.data(), frame.ib, headers.size()) != 0)
        return "IB headers do not re-encode byte for byte";
    std::vector<uint8_t> rebuilt(bytes.size());
    const size_t front = roce_header_bytes(frame.addressing);
    if (front != static_cast<size_t>(frame.ib - bytes.data()))
        return "unexpected header length";
    std::memcpy(rebuilt.data() + front, frame.ib, frame.ib_length);
    const bool v4 = gid_is_ipv4_mapped(frame.addressing.dst_gid);
    const uint16_t ipv4_id = v4 ? load_be16(bytes.data() + 14 + 4) : 0;
    if (finish_roce_frame(rebuilt.data(), frame.addressing, frame.ib_length, ipv4_id) !=
        bytes.size())
        return "frame length differs";
    // The UDP checksum is the one field a sender may fill or leave zero (A17.4.3).
    const size_t udp = 14 + (v4 ? 20 : 40);
    rebuilt[udp + 6] = bytes[udp + 6];
    rebuilt[udp + 7] = bytes[udp + 7];
    if (rebuilt != bytes)
        return "Ethernet/IP/UDP headers or ICRC do not re-encode byte for byte";
    return "";
}

} // namespace roce_check
