// The engine's data path and its neighbours: RC over IPv6 GIDs with the peer's MAC found
// by Neighbor Discovery, and ARP/ND answers nobody asked for, over the simulated wire.
#include "arp.hpp"
#include "engine_bench.hpp"
#include "neighbor_discovery.hpp"
#include "softhca/transport/byte_order.hpp"
#include "softhca/transport/roce_frame.hpp"

#include <catch2/catch.hpp>
#include <cstring>
#include <map>

using namespace engine_bench;

namespace {

// Posts `count` RDMA WRITEs of 4 KiB from A to B and runs the wire until they complete;
// every byte is checked.
void write_and_check(Bench& bench, uint64_t first, int count) {
    Host& a = *bench.a;
    Host& b = *bench.b;
    for (int i = 0; i < count; ++i) {
        const uint64_t m = first + static_cast<uint64_t>(i);
        const uint64_t offset = static_cast<uint64_t>(i) * 4096;
        fill(a.buffer.data() + offset, m, 4096);
        std::memset(b.buffer.data() + offset, 0, 4096);
        a.post_send(m, 0, offset, 4096, b.buffer.addr() + offset, b.mr.rkey);
    }
    int done = 0;
    for (int round = 0; round < 100000 && done < count; ++round) {
        bench.round();
        di::CompletionEntry e;
        while (a.poll(e)) {
            REQUIRE(e.status == 0);
            REQUIRE(e.wr_id == first + static_cast<uint64_t>(done));
            ++done;
        }
    }
    REQUIRE(done == count);
    for (int i = 0; i < count; ++i)
        REQUIRE(first_mismatch(b.buffer.data() + i * 4096, first + static_cast<uint64_t>(i),
                               4096) == -1);
}

} // namespace

TEST_CASE("engine data path: RC over IPv6 GIDs, the peer's MAC found by Neighbor Discovery") {
    const uint32_t gid_index = GENERATE(1u, 2u); // link-local, then global
    Bench bench({}, false, gid_index);
    const PortInfo& pa = bench.ports.info(0);
    const PortInfo& pb = bench.ports.info(1);
    std::map<uint16_t, int> ethertypes;
    int roce = 0, wrong_addresses = 0;
    bench.ports.tap = [&](size_t from, const uint8_t* frame, uint32_t length) {
        const uint16_t type = tp::load_be16(frame + 12);
        ++ethertypes[type];
        tp::ParsedFrame parsed;
        if (tp::parse_roce_frame(frame, length, parsed) != tp::FrameError::None)
            return;
        ++roce;
        const PortInfo& self = bench.ports.info(from);
        const PortInfo& peer = bench.ports.info(1 - from);
        if (parsed.addressing.src_gid != self.gids[gid_index] ||
            parsed.addressing.dst_gid != peer.gids[gid_index] ||
            parsed.addressing.dst_mac != peer.mac)
            ++wrong_addresses;
    };
    write_and_check(bench, 1, 16);
    CHECK(roce > 16);
    CHECK(wrong_addresses == 0);
    CHECK(ethertypes.count(tp::kEtherTypeIpv4) == 0);
    CHECK(ethertypes.count(tp::kEtherTypeArp) == 0);
    // A asked once; B answered, and learnt A's MAC from the question (RFC 4861 7.2.3).
    CHECK(pa.counters.nd_solicitations == 1);
    CHECK(pb.counters.nd_advertisements == 1);
    CHECK(pb.counters.nd_solicitations == 0);
    CHECK(pa.counters.rx_neighbor_dropped + pb.counters.rx_neighbor_dropped == 0);
    CHECK(pa.counters.rx_bad_icrc + pb.counters.rx_bad_icrc == 0);
}

TEST_CASE("engine data path: ARP and ND answers nobody asked for are dropped and counted, and "
          "the connection's path stays") {
    const uint32_t gid_index = GENERATE(0u, 2u); // IPv4 (ARP), IPv6 (ND)
    const bool ipv6 = gid_index != 0;
    Bench bench({}, false, gid_index);
    const PortInfo& pa = bench.ports.info(0);
    const PortInfo& pb = bench.ports.info(1);
    write_and_check(bench, 1, 4); // resolved
    const tp::MacAddress bogus{0x02, 0xba, 0xd0, 0xba, 0xd0, 0x01};
    int misdirected = 0;
    bench.ports.tap = [&](size_t from, const uint8_t* frame, uint32_t) {
        if (from == 0 && std::memcmp(frame, pb.mac.data(), 6) != 0)
            ++misdirected;
    };
    const tp::Gid stranger = ipv6 ? tp::Gid{0x20, 0x01, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x77}
                                  : tp::gid_from_ipv4(0xc612004du); // 198.18.0.77
    // An answer claiming the peer's address and one about a stranger, neither asked for.
    for (const tp::Gid& claimed : {pb.gids[gid_index], stranger}) {
        uint8_t frame[kNdFrameBytes];
        size_t length = 0;
        if (ipv6) {
            length = build_neighbor_advertisement(frame, bogus, pa.mac, pa.gids[gid_index], claimed,
                                                  true);
        } else {
            ArpMessage reply;
            reply.sender_mac = bogus;
            reply.sender_ip = tp::load_be32(claimed.data() + 12);
            reply.target_mac = pa.mac;
            reply.target_ip = pa.ipv4;
            length = build_arp(frame, reply);
        }
        bench.ports.deliver(0, frame, static_cast<uint32_t>(length));
    }
    const uint64_t unhandled = pa.counters.rx_unhandled;
    const uint64_t advertised = pa.counters.nd_advertisements;
    if (ipv6) {
        // A solicitation with a broken checksum, and a valid one for someone else.
        uint8_t frame[kNdFrameBytes];
        build_neighbor_solicitation(frame, bogus, stranger, pa.gids[gid_index]);
        frame[57] ^= 0xff;
        bench.ports.deliver(0, frame, kNdFrameBytes);
        build_neighbor_solicitation(frame, bogus, pb.gids[gid_index], stranger);
        bench.ports.deliver(0, frame, kNdFrameBytes);
    }
    bench.round();
    CHECK(pa.counters.rx_neighbor_dropped == (ipv6 ? 3u : 2u));
    CHECK(pa.counters.rx_unhandled == unhandled + (ipv6 ? 1 : 0));
    CHECK(pa.counters.nd_advertisements == advertised); // nothing answered
    // The connection still goes to the peer's real MAC.
    write_and_check(bench, 100, 8);
    CHECK(misdirected == 0);
    CHECK(pb.counters.rx_packets > 0);
}

TEST_CASE("engine data path: a connected QP drops packets from another source than its peer") {
    Bench bench({}, false);
    const PortInfo& pa = bench.ports.info(0);
    // A copy of one of B's packets to A, as a third host (198.18.0.9) would send it.
    std::vector<uint8_t> forged;
    bench.ports.tap = [&](size_t from, const uint8_t* frame, uint32_t length) {
        tp::ParsedFrame parsed;
        if (from == 1 && forged.empty() &&
            tp::parse_roce_frame(frame, length, parsed) == tp::FrameError::None)
            forged.assign(frame, frame + length);
    };
    write_and_check(bench, 1, 2);
    REQUIRE(!forged.empty());
    uint8_t* ip = forged.data() + tp::kEthernetHeaderBytes;
    tp::store_be32(ip + 12, 0xc6120009u);
    tp::store_be16(ip + 10, 0);
    tp::store_be16(ip + 10, tp::ipv4_header_checksum(ip, tp::kIpv4HeaderBytes));
    const size_t ip_length = forged.size() - tp::kEthernetHeaderBytes - tp::kIcrcBytes;
    const uint32_t icrc = tp::compute_icrc(ip, ip_length);
    for (int i = 0; i < 4; ++i)
        forged[forged.size() - 4 + static_cast<size_t>(i)] = static_cast<uint8_t>(icrc >> (8 * i));
    tp::ParsedFrame parsed;
    REQUIRE(tp::parse_roce_frame(forged.data(), forged.size(), parsed) == tp::FrameError::None);
    bench.ports.deliver(0, forged.data(), static_cast<uint32_t>(forged.size()));
    bench.round();
    CHECK(pa.counters.rx_wrong_source == 1);
    CHECK(pa.counters.rx_bad_icrc == 0);
    // The connection goes on as if nothing came.
    write_and_check(bench, 10, 4);
    CHECK(pa.counters.rx_wrong_source == 1);
}
