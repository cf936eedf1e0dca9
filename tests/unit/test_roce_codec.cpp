// Wire-codec layer: every packet Linux Soft-RoCE put on the wire (tests/vectors)
// parses, its ICRC is reproduced, and its headers re-encode byte for byte.
#include "pcap_reader.hpp"
#include "roce_check.hpp"
#include "softhca/transport/byte_order.hpp"
#include "softhca/transport/congestion_control.hpp"
#include "softhca/transport/ib_packet.hpp"
#include "softhca/transport/icrc_ipv4_id.hpp"
#include "softhca/transport/roce_frame.hpp"

#include <catch2/catch.hpp>
#include <cstring>
#include <map>
#include <string>

using namespace softhca::transport;

#ifndef SOFTHCA_VECTORS_DIR
#error "SOFTHCA_VECTORS_DIR must name tests/vectors"
#endif

namespace {

void check_vector_file(const std::string& name, std::map<std::string, int>& seen) {
    const auto frames = read_pcap(std::string(SOFTHCA_VECTORS_DIR) + "/" + name);
    REQUIRE(!frames.empty());
    for (size_t i = 0; i < frames.size(); ++i) {
        INFO(name << " frame " << i);
        std::string opcode;
        CHECK(roce_check::check_frame(frames[i].bytes, &opcode) == "");
        ++seen[opcode];
    }
}

// Addressing from 198.18.0.1 to 198.18.0.2 (IPv4-mapped GIDs), or between two IPv6 GIDs.
FrameAddressing addressing_between_two_gids(bool v4) {
    FrameAddressing a;
    if (v4) {
        a.src_gid = gid_from_ipv4(0xc6120001);
        a.dst_gid = gid_from_ipv4(0xc6120002);
    } else {
        a.src_gid = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
        a.dst_gid = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
    }
    return a;
}

} // namespace

TEST_CASE("Soft-RoCE captures parse, reproduce their ICRC and re-encode byte for byte") {
    std::map<std::string, int> seen;
    for (const char* file : {"rxe-rc-uc-ud-ipv4.pcap", "rxe-ipv6-and-pingpong.pcap",
                             "rxe-cas-write-read-only.pcap", "rxe-rc-3pct-loss.pcap"})
        check_vector_file(file, seen);
    for (const auto& [name, count] : seen)
        UNSCOPED_INFO(name << ": " << count);
    // The captures hold every RC opcode family the transport speaks.
    for (const char* name :
         {"RDMA_WRITE_FIRST", "RDMA_WRITE_MIDDLE", "RDMA_WRITE_LAST", "RDMA_WRITE_ONLY",
          "RDMA_READ_REQUEST", "RDMA_READ_RESPONSE_FIRST", "RDMA_READ_RESPONSE_LAST",
          "RDMA_READ_RESPONSE_ONLY", "SEND_ONLY", "SEND_FIRST", "ACKNOWLEDGE", "FETCH_ADD",
          "CMP_SWAP", "ATOMIC_ACKNOWLEDGE", "UD_SEND_ONLY"})
        CHECK(seen[name] > 0);
}

TEST_CASE("an IPv4 header rebuilt without its identification still checks the ICRC") {
    // What a kernel UDP socket port sees of a packet: no identification, no flags. It
    // rebuilds the header with identification 0 and DF set; the ICRC names the rest.
    size_t frames_checked = 0, nonzero_ids = 0;
    for (const char* file : {"rxe-rc-uc-ud-ipv4.pcap", "rxe-rc-3pct-loss.pcap"}) {
        for (const auto& captured : read_pcap(std::string(SOFTHCA_VECTORS_DIR) + "/" + file)) {
            auto bytes = captured.bytes;
            if (bytes.size() < 14 + 20 + 8 || load_be16(bytes.data() + 12) != kEtherTypeIpv4)
                continue;
            uint8_t* ip = bytes.data() + 14;
            nonzero_ids += load_be16(ip + 4) != 0;
            store_be16(ip + 4, 0);
            store_be16(ip + 6, 0x4000);
            store_be16(ip + 10, 0);
            store_be16(ip + 10, ipv4_header_checksum(ip, 20));
            ParsedFrame frame;
            INFO(file << " frame of " << bytes.size() << " bytes");
            if (load_be16(captured.bytes.data() + 14 + 4) != 0)
                CHECK(parse_roce_frame(bytes.data(), bytes.size(), frame) == FrameError::BadIcrc);
            REQUIRE(parse_roce_frame(bytes.data(), bytes.size(), frame, Icrc::Ipv4IdUnknown) ==
                    FrameError::None);
            // Damage elsewhere is still found.
            auto corrupted = bytes;
            corrupted[corrupted.size() - 8] ^= 0x21; // in the IB packet, before the ICRC
            CHECK(parse_roce_frame(corrupted.data(), corrupted.size(), frame,
                                   Icrc::Ipv4IdUnknown) == FrameError::BadIcrc);
            ++frames_checked;
        }
    }
    CHECK(frames_checked > 400);
    CHECK(nonzero_ids > 400); // rxe numbers its packets
}

TEST_CASE("an ICRC carried to another IPv4 identification is the packet's ICRC with it") {
    // What a udp port sending one UDP GSO run does: every datagram built with
    // identification 0, and the ICRC of datagram k changed to identification k, the number
    // the kernel gives it when it segments the run.
    size_t frames_checked = 0;
    for (const auto& captured :
         read_pcap(std::string(SOFTHCA_VECTORS_DIR) + "/rxe-rc-uc-ud-ipv4.pcap")) {
        auto bytes = captured.bytes;
        if (bytes.size() < 14 + 20 + 8 + 12 + 4 || load_be16(bytes.data() + 12) != kEtherTypeIpv4)
            continue;
        uint8_t* ip = bytes.data() + 14;
        const size_t ip_length = load_be16(ip + 2) - kIcrcBytes;
        const uint16_t carried_id = load_be16(ip + 4);
        const uint32_t carried = compute_icrc(ip, ip_length);
        INFO("frame of " << bytes.size() << " bytes, identification " << carried_id);
        for (const uint16_t id : {uint16_t{0}, uint16_t{1}, uint16_t{2}, uint16_t{63},
                                  uint16_t{0x8000}, uint16_t{0xffff}, uint16_t(carried_id + 1)}) {
            store_be16(ip + 4, id);
            CHECK(icrc_for_ipv4_id(carried, ip_length, carried_id, id) ==
                  compute_icrc(ip, ip_length));
        }
        store_be16(ip + 4, carried_id);
        CHECK(icrc_for_ipv4_id(carried, ip_length, carried_id, carried_id) == carried);
        ++frames_checked;
    }
    CHECK(frames_checked > 100);
}

TEST_CASE("a corrupted byte anywhere in the IB packet fails the ICRC") {
    const auto frames = read_pcap(std::string(SOFTHCA_VECTORS_DIR) + "/rxe-rc-uc-ud-ipv4.pcap");
    REQUIRE(!frames.empty());
    auto bytes = frames.front().bytes;
    ParsedFrame frame;
    REQUIRE(parse_roce_frame(bytes.data(), bytes.size(), frame) == FrameError::None);
    for (size_t at = 14 + 20 + 8; at < bytes.size(); at += 97) {
        auto corrupted = bytes;
        corrupted[at] ^= 0x10;
        CHECK(parse_roce_frame(corrupted.data(), corrupted.size(), frame) == FrameError::BadIcrc);
    }
    // The masked fields may change in flight without failing it (A17.4.2): TTL here,
    // with the IPv4 header checksum fixed up as a router would.
    auto hop = bytes;
    hop[14 + 8] -= 1;
    store_be16(hop.data() + 14 + 10, 0);
    store_be16(hop.data() + 14 + 10, ipv4_header_checksum(hop.data() + 14, 20));
    CHECK(parse_roce_frame(hop.data(), hop.size(), frame) == FrameError::None);
}

TEST_CASE("an offloaded ICRC is sent as zero and passes only where it is offloaded") {
    FrameAddressing a;
    a.src_mac = {2, 0, 0, 0, 0, 1};
    a.dst_mac = {2, 0, 0, 0, 0, 2};
    a.src_gid = gid_from_ipv4(0xc6120001);
    a.dst_gid = gid_from_ipv4(0xc6120002);
    a.udp_src_port = 0xc000;
    a.hop_limit = 64;
    std::vector<uint8_t> frame(256, 0);
    auto* bth = reinterpret_cast<Bth*>(frame.data() + roce_header_bytes(a));
    bth->set(op::rc(op::kSendOnly), false, 0, 0xffff, 0x11, true, 7);
    const size_t ib_length = sizeof(Bth) + 64;
    const size_t length = finish_roce_frame(frame.data(), a, ib_length, 9, Icrc::Offloaded);
    ParsedFrame parsed;
    CHECK(load_be32(frame.data() + length - 4) == 0);
    CHECK(parse_roce_frame(frame.data(), length, parsed, Icrc::Offloaded) == FrameError::None);
    CHECK(parsed.ib_length == ib_length);
    CHECK(parse_roce_frame(frame.data(), length, parsed) == FrameError::BadIcrc);
    // The IPv4 header checksum is still there and still checked.
    frame[14 + 8] ^= 1;
    CHECK(parse_roce_frame(frame.data(), length, parsed, Icrc::Offloaded) ==
          FrameError::BadChecksum);
    frame[14 + 8] ^= 1;
    // Built with its ICRC, the same frame passes everywhere.
    CHECK(finish_roce_frame(frame.data(), a, ib_length, 9) == length);
    CHECK(load_be32(frame.data() + length - 4) != 0);
    CHECK(parse_roce_frame(frame.data(), length, parsed) == FrameError::None);
    CHECK(parse_roce_frame(frame.data(), length, parsed, Icrc::Offloaded) == FrameError::None);
}

TEST_CASE("malformed frames are rejected, not read past their end") {
    const auto frames = read_pcap(std::string(SOFTHCA_VECTORS_DIR) + "/rxe-rc-uc-ud-ipv4.pcap");
    REQUIRE(!frames.empty());
    const auto& bytes = frames.front().bytes;
    ParsedFrame frame;
    for (size_t cut = 0; cut < bytes.size(); cut += 7)
        CHECK(parse_roce_frame(bytes.data(), cut, frame) != FrameError::None);
    std::vector<uint8_t> arp(60, 0);
    store_be16(arp.data() + 12, kEtherTypeArp);
    CHECK(parse_roce_frame(arp.data(), arp.size(), frame) == FrameError::NotRoce);
}

TEST_CASE("IB packets: unknown opcodes, short packets and stray payload are errors") {
    uint8_t packet[64] = {};
    IbPacket p;
    auto* bth = reinterpret_cast<Bth*>(packet);
    bth->set(0x1f, false, 0, kDefaultPkey, 5, false, 1); // reserved RC opcode
    CHECK(parse_ib_packet(packet, 12, p) == PacketError::BadOpcode);
    bth->set(op::rc(op::kWriteOnly), false, 0, kDefaultPkey, 5, false, 1);
    CHECK(parse_ib_packet(packet, 20, p) == PacketError::TooShort); // RETH cut
    CHECK(parse_ib_packet(packet, 28, p) == PacketError::None);
    CHECK(p.payload_length == 0);
    bth->set(op::rc(op::kAck), false, 0, kDefaultPkey, 5, false, 1);
    CHECK(parse_ib_packet(packet, 20, p) == PacketError::PayloadOnNone);
    bth->set(op::rc(op::kSendOnly), false, 3, kDefaultPkey, 5, false, 1);
    CHECK(parse_ib_packet(packet, 12 + 8, p) == PacketError::None);
    CHECK(p.payload_length == 5); // pad removed
    packet[1] |= 0x01;            // TVer 1
    CHECK(parse_ib_packet(packet, 20, p) == PacketError::BadVersion);
}

TEST_CASE("XRC opcodes: requests carry an XRCETH after the BTH, responses do not") {
    uint8_t packet[64] = {};
    auto* bth = reinterpret_cast<Bth*>(packet);
    bth->set(op::xrc(op::kWriteOnlyImm), false, 0, kDefaultPkey, 5, true, 1);
    reinterpret_cast<Xrceth*>(packet + 12)->set(0xabcdef);
    reinterpret_cast<Reth*>(packet + 16)->set(0x1000, 0x77, 4);
    std::memcpy(packet + 32, "imm!", 4);
    std::memcpy(packet + 36, "data", 4);
    IbPacket p;
    REQUIRE(parse_ib_packet(packet, 40, p) == PacketError::None);
    CHECK(p.info->service == Service::XRC);
    CHECK(p.info->kind == OpKind::Write);
    REQUIRE(p.xrceth);
    CHECK(p.xrceth->srqn() == 0xabcdef);
    REQUIRE(p.reth);
    CHECK(p.reth->rkey() == 0x77);
    CHECK(std::memcmp(p.imm->b, "imm!", 4) == 0);
    CHECK(p.payload_length == 4);
    CHECK(ib_header_bytes(opcode_info(op::xrc(op::kSendOnly))) == 16);
    // Responses go back without one.
    const OpcodeInfo& ack = opcode_info(op::xrc(op::kAck));
    CHECK(ack.valid());
    CHECK_FALSE(ack.has(header_flag::kXrceth));
    CHECK(ib_header_bytes(ack) == 16); // BTH + AETH
    CHECK(opcode_info(op::xrc(op::kReadResponseMiddle)).valid());
    CHECK_FALSE(opcode_info(op::xrc(0x1f)).valid());
}

TEST_CASE("a UD receive's GRH is the IPv6 header, or 20 zero bytes and the IPv4 header") {
    for (bool v4 : {true, false}) {
        INFO((v4 ? "IPv4" : "IPv6"));
        FrameAddressing a = addressing_between_two_gids(v4);
        if (!v4)
            a.flow_label = 0x12345;
        a.hop_limit = 17;
        uint8_t frame[256] = {};
        const size_t front = roce_header_bytes(a);
        auto* bth = reinterpret_cast<Bth*>(frame + front);
        bth->set(op::ud(op::kSendOnly), false, 0, kDefaultPkey, 5, false, 1);
        reinterpret_cast<Deth*>(frame + front + 12)->set(0x1111, 9);
        const size_t n = finish_roce_frame(frame, a, 20);
        ParsedFrame parsed;
        REQUIRE(parse_roce_frame(frame, n, parsed) == FrameError::None);
        uint8_t grh[40];
        std::memset(grh, 0xee, sizeof(grh));
        grh_from_frame(parsed, grh);
        const uint8_t* ip = frame + kEthernetHeaderBytes;
        if (v4) {
            for (int i = 0; i < 20; ++i)
                CHECK(grh[i] == 0);
            CHECK(std::memcmp(grh + 20, ip, kIpv4HeaderBytes) == 0);
            CHECK(grh[20] >> 4 == 4); // what ibv_init_ah_from_wc looks for
        } else {
            CHECK(std::memcmp(grh, ip, kIpv6HeaderBytes) == 0);
            CHECK(std::memcmp(grh + 8, a.src_gid.data(), 16) == 0); // the sender's GID
        }
    }
}

TEST_CASE("CE marking: ECN-capable frames are marked, the IPv4 checksum and ICRC still hold") {
    for (const bool v4 : {true, false}) {
        INFO((v4 ? "IPv4" : "IPv6"));
        FrameAddressing a = addressing_between_two_gids(v4);
        std::vector<uint8_t> frame(256, 0);
        auto* bth = reinterpret_cast<Bth*>(frame.data() + roce_header_bytes(a));
        const size_t ib_length = sizeof(Bth) + 64;
        ParsedFrame parsed;
        // Not-ECT (RFC 3168 5: never marked) stays as it is.
        a.traffic_class = 26 << 2;
        bth->set(op::rc(op::kSendOnly), false, 0, 0xffff, 0x11, true, 7);
        size_t length = finish_roce_frame(frame.data(), a, ib_length, 9);
        CHECK_FALSE(mark_congestion_experienced(frame.data(), length));
        REQUIRE(parse_roce_frame(frame.data(), length, parsed) == FrameError::None);
        CHECK(parsed.addressing.traffic_class == (26 << 2));
        // ECT(0): marked CE, DSCP kept; the frame still parses (IPv4 checksum, ICRC).
        a.traffic_class = (26 << 2) | 2;
        length = finish_roce_frame(frame.data(), a, ib_length, 9);
        CHECK(mark_congestion_experienced(frame.data(), length));
        REQUIRE(parse_roce_frame(frame.data(), length, parsed) == FrameError::None);
        CHECK(parsed.addressing.traffic_class == ((26 << 2) | 3));
        CHECK_FALSE(mark_congestion_experienced(frame.data(), length)); // already CE
        CHECK_FALSE(mark_congestion_experienced(frame.data(), 20));     // too short
    }
}

TEST_CASE("a CNP: opcode 0x81, BECN, the requester's QP, PSN 0, 16 reserved bytes") {
    uint8_t ib[kCnpBytes + 8];
    std::memset(ib, 0xee, sizeof(ib));
    REQUIRE(write_cnp(ib, 0xffff, 0x123456) == kCnpBytes);
    IbPacket packet;
    REQUIRE(parse_ib_packet(ib, kCnpBytes, packet) == PacketError::None);
    CHECK(packet.bth->opcode() == 0x81);
    CHECK(packet.info->kind == OpKind::CongestionNotification);
    CHECK(packet.info->service == Service::CNP);
    CHECK_FALSE(packet.info->request);
    CHECK(packet.bth->becn());
    CHECK_FALSE(packet.bth->fecn());
    CHECK_FALSE(packet.bth->mig_req());
    CHECK(packet.bth->dest_qp() == 0x123456);
    CHECK(packet.bth->psn() == 0);
    CHECK(packet.bth->pkey() == 0xffff);
    CHECK(packet.payload_length == 16);
    for (size_t i = 0; i < 16; ++i)
        CHECK(packet.payload[i] == 0);
    CHECK(ib[kCnpBytes] == 0xee); // nothing written past it
}

TEST_CASE("a priority tag (802.1Q, VID 0) carries the SL, and a VLAN's frame is not ours") {
    for (const bool v4 : {true, false}) {
        INFO((v4 ? "IPv4" : "IPv6"));
        FrameAddressing a = addressing_between_two_gids(v4);
        const size_t untagged = roce_header_bytes(a);
        a.priority = 5;
        CHECK(roce_header_bytes(a) == untagged + kVlanTagBytes);
        std::vector<uint8_t> frame(256, 0);
        auto* bth = reinterpret_cast<Bth*>(frame.data() + roce_header_bytes(a));
        bth->set(op::rc(op::kSendOnly), false, 0, 0xffff, 0x11, true, 7);
        a.traffic_class = (26 << 2) | 2;
        const size_t length = finish_roce_frame(frame.data(), a, sizeof(Bth) + 64, 9);
        CHECK(length == roce_header_bytes(a) + sizeof(Bth) + 64 + kIcrcBytes);
        CHECK(load_be16(frame.data() + 12) == kEtherTypeVlan);
        CHECK(load_be16(frame.data() + 14) == (5 << 13)); // PCP 5, DEI 0, VID 0
        CHECK(load_be16(frame.data() + 16) == (v4 ? kEtherTypeIpv4 : kEtherTypeIpv6));
        ParsedFrame parsed;
        REQUIRE(parse_roce_frame(frame.data(), length, parsed) == FrameError::None);
        CHECK(parsed.addressing.priority == 5);
        CHECK(parsed.addressing.traffic_class == ((26 << 2) | 2));
        CHECK(parsed.ib == frame.data() + roce_header_bytes(a));
        // The congestion point finds the IP header behind the tag.
        CHECK(mark_congestion_experienced(frame.data(), length));
        REQUIRE(parse_roce_frame(frame.data(), length, parsed) == FrameError::None);
        CHECK(parsed.addressing.traffic_class == ((26 << 2) | 3));
        // Cut inside the tag, or tagged for VLAN 7: not a frame of a port on no VLAN.
        CHECK(parse_roce_frame(frame.data(), 16, parsed) != FrameError::None);
        std::vector<uint8_t> vlan = frame;
        vlan[15] = 7;
        CHECK(parse_roce_frame(vlan.data(), length, parsed) == FrameError::NotRoce);
        CHECK_FALSE(mark_congestion_experienced(vlan.data(), length));
        // Untagged frames say -1.
        a.priority = -1;
        const size_t plain = finish_roce_frame(frame.data(), a, sizeof(Bth) + 64, 9);
        REQUIRE(parse_roce_frame(frame.data(), plain, parsed) == FrameError::None);
        CHECK(parsed.addressing.priority == -1);
    }
}
