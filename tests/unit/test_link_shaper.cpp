// Engine: the shaped link (link_shaper.hpp), fed frames and time: frames leave one
// serialization time apart at the rate and arrive a delay later, in order; the queue is
// what has not been serialized, and past its limit frames are dropped and counted. And
// the congestion point on it (congestion_point.hpp): RED marking of ECN-capable frames.
#include "congestion_point.hpp"
#include "link_shaper.hpp"
#include "softhca/transport/headers.hpp"
#include "softhca/transport/opcodes.hpp"
#include "softhca/transport/roce_frame.hpp"
#include "softhca/transport/service_levels.hpp"

#include <catch2/catch.hpp>
#include <vector>

using namespace softhca::engine;

TEST_CASE("link shaper: rate, delay and queue limit") {
    ShaperConfig c;
    c.rate_bps = 8e6;       // 1000 bytes take 1 ms
    c.delay_ns = 5'000'000; // 5 ms one way
    c.queue_limit_bytes = 3000;
    LinkShaper<int> shaper(c);
    REQUIRE(shaper.enabled());
    CHECK(shaper.enqueue(1, 1000, 0));
    CHECK(shaper.enqueue(2, 1000, 0));
    CHECK(shaper.enqueue(3, 1000, 0));
    CHECK_FALSE(shaper.enqueue(4, 1000, 0)); // 3000 bytes queued: no room
    CHECK(shaper.dropped() == 1);
    CHECK(shaper.queue_bytes(0) == 3000);
    CHECK(shaper.queue_bytes(1'000'000) == 2000); // the first is on the wire
    CHECK(shaper.enqueue(5, 1000, 1'000'000));    // room again
    std::vector<int> arrived;
    auto deliver = [&](int f) { arrived.push_back(f); };
    CHECK(shaper.release(3'500'000, deliver) == 0);
    CHECK(shaper.queue_bytes(3'500'000) == 1000); // frame 5: serialized from 3 to 4 ms
    CHECK(shaper.release(5'999'999, deliver) == 0);
    CHECK(shaper.next_release() == 6'000'000);
    CHECK(shaper.release(6'000'000, deliver) == 1); // 1 ms on the wire + 5 ms
    CHECK(shaper.release(8'000'000, deliver) == 2); // 7 and 8 ms
    CHECK(shaper.queue_bytes(8'000'000) == 0);
    CHECK(shaper.release(9'000'000, deliver) == 1);
    CHECK(arrived == std::vector<int>{1, 2, 3, 5});
    CHECK(shaper.held() == 0);
    CHECK(shaper.next_release() == UINT64_MAX);
}

TEST_CASE("link shaper: an idle wire sends at once, a busy one after the frame before") {
    ShaperConfig c;
    c.rate_bps = 1e9; // 125 bytes per microsecond
    LinkShaper<int> shaper(c);
    std::vector<int> arrived;
    auto deliver = [&](int f) { arrived.push_back(f); };
    shaper.enqueue(1, 1250, 100'000); // 10 us
    CHECK(shaper.next_release() == 110'000);
    shaper.enqueue(2, 125, 105'000); // behind the first: 110 us + 1 us
    CHECK(shaper.release(110'999, deliver) == 1);
    CHECK(shaper.release(111'000, deliver) == 1);
    shaper.enqueue(3, 125, 500'000); // the wire is idle again
    CHECK(shaper.next_release() == 501'000);
    CHECK(arrived == std::vector<int>{1, 2});
}

TEST_CASE("link shaper: settings text") {
    std::string error;
    auto c = parse_shaper_config("rate_mbps=100,delay_us=50,queue_kb=64", error);
    REQUIRE(c);
    CHECK(c->rate_bps == 100e6);
    CHECK(c->delay_ns == 50'000);
    CHECK(c->queue_limit_bytes == 65536);
    CHECK(describe(*c) == "rate_mbps=100,delay_us=50,queue_kb=64");
    CHECK_FALSE(ShaperConfig{}.enabled());
    for (const char* bad : {"rate=1", "rate_mbps", "rate_mbps=-1", "delay_us=x"}) {
        INFO(bad);
        CHECK_FALSE(parse_shaper_config(bad, error));
    }
}

TEST_CASE("congestion point: ECN-capable frames are marked once the queue passes kmax, "
          "the full queue drops, the rest arrive in order") {
    using namespace softhca::transport;
    CongestionPointConfig config;
    config.shaper.rate_bps = 8e9; // 1 byte a nanosecond
    config.shaper.queue_limit_bytes = 10'000;
    config.ecn_marking = EcnMarkingParameters{1000, 3000, 0.0}; // below kmax never marked
    CongestionPoint<int> point(config, 7);
    CongestionPointCounters counters;
    FrameAddressing a;
    a.src_gid = gid_from_ipv4(0xc6120001);
    a.dst_gid = gid_from_ipv4(0xc6120002);
    a.traffic_class = 2; // ECT(0)
    std::vector<std::vector<uint8_t>> frames(12, std::vector<uint8_t>(1000));
    for (auto& f : frames) {
        auto* bth = reinterpret_cast<Bth*>(f.data() + roce_header_bytes(a));
        bth->set(op::rc(op::kSendOnly), false, 0, 0xffff, 1, false, 0);
        REQUIRE(finish_roce_frame(f.data(), a, 1000 - 42 - 4, 0) == 1000);
    }
    // Twelve frames of 1000 bytes at once: the queue holds ten; those that find 3000 bytes
    // or more ahead of them (the fourth on) are marked.
    size_t queued = 0;
    for (size_t i = 0; i < frames.size(); ++i)
        queued += point.enqueue(static_cast<int>(i), frames[i].data(), 1000, 0, 0, counters);
    CHECK(queued == 10);
    CHECK(counters.queued == 10);
    CHECK(counters.dropped == 2);
    CHECK(counters.marked == 7);
    CHECK(counters.above_kmax == 7);
    CHECK(counters.peak_queue_bytes == 10'000);
    for (size_t i = 0; i < 10; ++i) {
        ParsedFrame parsed;
        REQUIRE(parse_roce_frame(frames[i].data(), 1000, parsed) == FrameError::None);
        CHECK(ecn_of(parsed.addressing.traffic_class) == (i >= 3 ? Ecn::Ce : Ecn::Ect0));
    }
    // Serialized at the rate: by 5 us the first five have crossed.
    std::vector<int> arrived;
    point.release(5000, counters, [&](int f) { arrived.push_back(f); });
    CHECK(arrived == std::vector<int>{0, 1, 2, 3, 4});
    CHECK(counters.queue_bytes == 5000);
    CHECK(point.next_release() == 6000);
    point.release(UINT64_MAX, counters, [&](int f) { arrived.push_back(f); });
    CHECK(arrived.size() == 10);
    CHECK(point.held() == 0);
}

TEST_CASE("link shaper: a frame on a high-priority VL leaves ahead of a full low-priority "
          "queue, and weights share the wire") {
    using namespace softhca::transport;
    ShaperConfig c;
    c.rate_bps = 8e9; // 1 byte a nanosecond
    VlArbitrationTables tables;
    REQUIRE(VlArbitrationTables::parse("high=1:255;low=0:16,2:48;limit=255", tables).empty());
    LinkShaper<int> shaper(c, tables);
    // 100 frames of 1000 bytes on VL 0 at once: 100 us of wire.
    for (int i = 0; i < 100; ++i)
        REQUIRE(shaper.enqueue(i, 1000, 0, 0));
    CHECK(shaper.queue_bytes(0, 0) == 100'000);
    // A ping on VL 1 at 10.5 us waits only for the frame on the wire (ends at 11 us).
    REQUIRE(shaper.enqueue(1000, 100, 10'500, 1));
    CHECK(shaper.queue_bytes(10'500, 1) == 100);
    std::vector<int> arrived;
    shaper.release(11'100, [&](int f) { arrived.push_back(f); });
    REQUIRE(arrived.size() == 12);
    CHECK(arrived.back() == 1000); // left at 11 us, arrived at 11.1 us
    CHECK(shaper.queue_bytes(11'100, 0) == 89'000);
    // Without the separation the same ping waits behind the whole queue.
    LinkShaper<int> fifo(c, tables);
    for (int i = 0; i < 100; ++i)
        REQUIRE(fifo.enqueue(i, 1000, 0, 0));
    REQUIRE(fifo.enqueue(1000, 100, 10'500, 0));
    arrived.clear();
    fifo.release(100'099, [&](int f) { arrived.push_back(f); });
    CHECK(arrived.size() == 100);
    fifo.release(100'100, [&](int f) { arrived.push_back(f); });
    CHECK(arrived.back() == 1000);
    // Low priority VL 0 (weight 16) and VL 2 (weight 48), both always full: the wire's
    // bytes split 1:3.
    LinkShaper<int> shared(c, tables);
    for (int i = 0; i < 2000; ++i) {
        REQUIRE(shared.enqueue(i, 1000, 0, 0));
        REQUIRE(shared.enqueue(i, 1000, 0, 2));
    }
    shared.release(1'000'000, [](int) {});
    const auto& bytes = shared.sent_bytes();
    REQUIRE(bytes[0] + bytes[2] >= 999'000);
    CHECK(static_cast<double>(bytes[2]) / static_cast<double>(bytes[0]) ==
          Approx(3.0).epsilon(0.1));
}
