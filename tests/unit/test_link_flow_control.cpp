// Transport and engine: link-level flow control between two softhca ports
// (transport/link_flow_control.hpp; IBTA 7.9.4) fed packets and time. The flow-control
// frame's codec; two ports that exchange packets grant each other their buffers and
// nothing before; a total that reaches the peer comes back as more credit; a VL waiting
// for credits asks again each refresh; and a shaped link with credits (link_shaper.hpp)
// holds frames for credits instead of dropping, starts none before the credit came, and
// reports its queue full to the senders (room()); a port waiting for credits keeps the
// engine looking for them while its peer answers.
#include "congestion_point.hpp"
#include "link_shaper.hpp"
#include "softhca/transport/link_flow_control.hpp"

#include <catch2/catch.hpp>
#include <vector>

using namespace softhca::engine;
using namespace softhca::transport;

namespace {

constexpr MacAddress kMac = {0x02, 0x53, 0x48, 0, 0, 1};

// Carries `from`'s packets to `to` through the frame codec; whether any went.
bool exchange(LinkCreditPort& from, LinkCreditPort& to, uint64_t now) {
    if (!from.wants_to_send(now))
        return false;
    FlowControlPacket packets[kCreditDataVls];
    uint8_t frame[kLinkFlowControlFrameBytes];
    const size_t length =
        write_flow_control_frame(frame, kMac, packets, from.make_packets(now, packets));
    FlowControlPacket parsed[kCreditDataVls];
    const int n = parse_flow_control_frame(frame, length, parsed);
    REQUIRE(n == kCreditDataVls);
    for (int i = 0; i < n; ++i)
        REQUIRE(to.on_packet(parsed[i]));
    return true;
}

} // namespace

TEST_CASE("link flow control: the frame round-trips and malformed ones are refused") {
    FlowControlPacket p[2];
    p[0].set(FlowControlPacket::kOpInit, 100, 0, 1124);
    p[1].set(FlowControlPacket::kOpNormal, 4095, 14, 7);
    uint8_t frame[kLinkFlowControlFrameBytes];
    const size_t length = write_flow_control_frame(frame, kMac, p, 2);
    CHECK(length == kLinkFlowControlFrameBytes);
    CHECK(length >= 60); // an Ethernet minimum frame
    CHECK(is_flow_control_frame(frame, length));
    CHECK(std::equal(kLinkFlowControlMac.begin(), kLinkFlowControlMac.end(), frame));
    CHECK(frame[12] == 0x88);
    CHECK(frame[13] == 0xb5); // never IPv4 (0x0800) or IPv6 (0x86dd): no RoCE peer takes it
    FlowControlPacket got[kCreditDataVls];
    REQUIRE(parse_flow_control_frame(frame, length, got) == 2);
    CHECK(got[0].op() == FlowControlPacket::kOpInit);
    CHECK(got[0].fctbs() == 100);
    CHECK(got[0].vl() == 0);
    CHECK(got[0].fccl() == 1124);
    CHECK(got[1].fctbs() == 4095);
    CHECK(got[1].vl() == 14);
    CHECK(got[1].crc_ok());

    uint8_t bad[kLinkFlowControlFrameBytes];
    std::copy(frame, frame + length, bad);
    bad[14] ^= 1; // magic
    CHECK(parse_flow_control_frame(bad, length, got) == -1);
    std::copy(frame, frame + length, bad);
    bad[18] = 2; // version
    CHECK(parse_flow_control_frame(bad, length, got) == -1);
    std::copy(frame, frame + length, bad);
    bad[19] = kCreditDataVls + 1; // count
    CHECK(parse_flow_control_frame(bad, length, got) == -1);
    CHECK(parse_flow_control_frame(frame, 20 + 6, got) == -1); // shorter than its 2 packets
    CHECK(parse_flow_control_frame(frame, 13, got) == -1);
    std::copy(frame, frame + length, bad);
    bad[12] = 0x08;
    bad[13] = 0x00; // IPv4
    CHECK_FALSE(is_flow_control_frame(bad, length));

    LinkCreditPort port(64 * 1024, 1'000'000);
    FlowControlPacket corrupt = p[0];
    corrupt.bytes[1] ^= 0x10; // FCTBS changed under its CRC
    CHECK_FALSE(port.on_packet(corrupt));
    CHECK(port.packets_bad() == 1);
    CHECK_FALSE(port.may_send(0, 64)); // the bad packet granted nothing
}

TEST_CASE("link flow control: nothing is sent before the peer grants, then its buffer") {
    LinkCreditPort a(64 * 64, 1'000'000), b(64 * 64, 1'000'000); // 64 blocks each
    CHECK(a.buffer_blocks() == 64);
    CHECK_FALSE(a.may_send(0, 64));
    CHECK(a.may_send(15, 4096)); // VL 15, management: not flow controlled
    CHECK(a.wants_to_send(0));   // the first packets go at once, and ask
    REQUIRE(exchange(a, b, 0));
    CHECK(b.wants_to_send(0)); // asked: it answers
    REQUIRE(exchange(b, a, 0));
    // b's first packets ask as well (both ends start alike): a answers once, and then an
    // answer asks nothing back.
    REQUIRE(exchange(a, b, 0));
    CHECK_FALSE(b.wants_to_send(0));
    CHECK_FALSE(a.wants_to_send(0));
    for (uint8_t vl = 0; vl < kCreditDataVls; ++vl) {
        CHECK(a.may_send(vl, 64 * 64));
        CHECK_FALSE(a.may_send(vl, 64 * 64 + 1));
    }
    // 40 blocks start on VL 3; 24 are left until the peer has them.
    a.started(3, 40 * 64);
    CHECK(a.vl_state(3).available == 24);
    CHECK_FALSE(a.may_send(3, 25 * 64));
    CHECK_FALSE(a.wants_to_send(10)); // started is not delivered: nothing to report
    a.delivered(3, 8 * 64);
    CHECK_FALSE(a.wants_to_send(10)); // less than a quarter of the peer's 64 blocks
    a.delivered(3, 8 * 64);
    CHECK(a.wants_to_send(10)); // 16: a quarter
    FlowControlPacket early[kCreditDataVls];
    a.make_packets(10, early);
    a.delivered(3, 24 * 64);
    CHECK(a.wants_to_send(10)); // everything started has been delivered
    REQUIRE(exchange(a, b, 10));
    CHECK(b.vl_state(3).abr == 40);
    CHECK(b.wants_to_send(10)); // its limit moved: 40 + 64
    REQUIRE(exchange(b, a, 10));
    CHECK(a.vl_state(3).fccl == 104);
    CHECK(a.vl_state(3).available == 64);
    CHECK_FALSE(a.wants_to_send(10));
    CHECK_FALSE(b.wants_to_send(10)); // quiet once both agree
}

TEST_CASE("link flow control: a VL waiting for credits asks again every refresh") {
    LinkCreditPort a(4096, 1'000'000), b(4096, 1'000'000);
    // a's first packets are lost: b never answered.
    FlowControlPacket lost[kCreditDataVls];
    a.make_packets(0, lost);
    CHECK(a.next_refresh() == UINT64_MAX); // nothing waits
    a.set_waiting(0, true, 100);
    CHECK(a.vl_state(0).waiting);
    CHECK(a.vl_state(0).waits == 1);
    CHECK(a.next_refresh() == 1'000'000);
    CHECK_FALSE(a.wants_to_send(999'999));
    CHECK(a.wants_to_send(1'000'000));
    REQUIRE(exchange(a, b, 1'000'000)); // an Init: b answers
    REQUIRE(exchange(b, a, 1'000'000));
    CHECK(a.may_send(0, 4096));
    a.set_waiting(0, false, 1'000'000);
    CHECK(a.next_refresh() == UINT64_MAX);
}

TEST_CASE("link shaper with credits: frames wait for credits, never drop, start after them") {
    ShaperConfig c;
    c.rate_bps = 8e6; // 1000 bytes take 1 ms
    c.queue_limit_bytes = 2000;
    LinkShaper<int> shaper(c);
    LinkCreditPort credits(64 * 64, 1'000'000), peer(64 * 64, 1'000'000);
    shaper.use_credits(&credits);
    std::vector<int> arrived;
    auto deliver = [&](int f) { arrived.push_back(f); };
    CHECK(shaper.room(0, 0, 1000));
    CHECK(shaper.enqueue(1, 1000, 0));
    CHECK(shaper.enqueue(2, 1000, 0));
    CHECK_FALSE(shaper.room(0, 0, 1)); // full: the data path holds its senders back
    CHECK(shaper.enqueue(3, 1000, 0)); // but what comes anyway is kept, not dropped
    CHECK(shaper.dropped() == 0);
    CHECK(shaper.release(5'000'000, deliver) == 0); // no credits: nothing started
    CHECK(credits.vl_state(0).waiting);
    // At 5 ms the peer grants 64 blocks (4096 bytes): all three may go, from 5 ms on.
    REQUIRE(exchange(credits, peer, 5'000'000));
    FlowControlPacket grant[kCreditDataVls];
    peer.make_packets(5'000'000, grant);
    shaper.update_credits(5'000'000, [&] {
        for (const FlowControlPacket& p : grant)
            credits.on_packet(p);
    });
    CHECK(shaper.next_release() == 6'000'000);
    CHECK(shaper.release(8'000'000, deliver) == 3);
    CHECK(arrived == std::vector<int>{1, 2, 3});
    CHECK(credits.vl_state(0).fctbs == 48); // 3 x 16 blocks
    CHECK(credits.vl_state(0).available == 16);
    CHECK(credits.wants_to_send(8'000'000)); // the delivered total goes to the peer
    // A fourth and fifth frame: 16 blocks left, so one starts and one waits.
    CHECK(shaper.enqueue(4, 1000, 8'000'000));
    CHECK(shaper.enqueue(5, 1000, 8'000'000));
    CHECK(shaper.release(20'000'000, deliver) == 1);
    CHECK(shaper.held() == 1);
    CHECK(credits.vl_state(0).waiting);
}

TEST_CASE("congestion point with credits: lossless, and flow-control frames both ways") {
    CongestionPointConfig config;
    config.shaper.queue_limit_bytes = 4096;
    config.credit_buffer_bytes = 8192;
    CongestionPoint<int> a(config, 1), b(config, 2);
    CongestionPointCounters ka, kb;
    REQUIRE(a.lossless());
    uint8_t frame[kLinkFlowControlFrameBytes];
    std::vector<uint8_t> data(1000);
    for (int i = 0; i < 10; ++i) // past the queue limit: kept, not dropped
        CHECK(a.enqueue(i, data.data(), 1000, 0, 2, ka));
    CHECK(ka.dropped == 0);
    CHECK_FALSE(a.room(0, 2, 1000));
    CHECK(a.room(0, 1, 1000)); // another VL's queue is its own
    // a asks, b answers; a's frames then flow against b's 8 KiB.
    size_t length = a.flow_control_frame(0, kMac, frame, ka);
    REQUIRE(length == kLinkFlowControlFrameBytes);
    FlowControlPacket packets[kCreditDataVls];
    int n = parse_flow_control_frame(frame, length, packets);
    b.on_flow_control(0, packets, n, kb);
    length = b.flow_control_frame(0, kMac, frame, kb);
    REQUIRE(length);
    n = parse_flow_control_frame(frame, length, packets);
    a.on_flow_control(0, packets, n, ka);
    std::vector<int> out;
    a.release(1, ka, [&](int f) { out.push_back(f); });
    CHECK(out.size() == 8); // 8 x 16 blocks = 8 KiB
    CHECK(ka.credits);
    CHECK(ka.vls[2].credits.waiting);
    CHECK(ka.flow_control_received == kCreditDataVls);
    CHECK(kb.flow_control_sent == kCreditDataVls);
    // A VL waits for credits from a peer that answered at 0: the engine keeps looking for
    // them for 10 ms, then sleeps until the refresh asks again; b waits for nothing.
    CHECK(a.awaiting_credits(5'000'000));
    CHECK_FALSE(a.awaiting_credits(10'000'000));
    CHECK_FALSE(b.awaiting_credits(5'000'000));
    CHECK(a.next_release() == 1'000'000);  // a's refresh: 1 ms after its packets went at 0
    a.on_flow_control(1, packets, -1, ka); // a malformed frame
    CHECK(ka.flow_control_bad == 1);
}
