// Engine: the shaped link (link_shaper.hpp), fed frames and time: frames leave one
// serialization time apart at the rate and arrive a delay later, in order; the queue is
// what has not been serialized, and past its limit frames are dropped and counted.
#include "link_shaper.hpp"

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
