// Transport: virtual lane arbitration (vl_arbiter.hpp, IBTA 7.6.9), fed which VLs have a
// packet ready and how long it is: VL15 first, weighted round robin within a table,
// high priority before low up to LimitOfHighPriority, an empty VL never holding up the
// others, and the tables' text form.
#include "softhca/transport/vl_arbiter.hpp"

#include <catch2/catch.hpp>
#include <map>
#include <random>

using namespace softhca::transport;

namespace {

using Heads = std::array<uint32_t, kVlSlots>;

// Bytes each VL sends over `picks` picks with every VL in `backlogged` always holding a
// packet; sizes drawn from 64..4096 when `mixed`, else 1024.
std::map<int, uint64_t> run(VlArbiter& arbiter, const std::vector<int>& backlogged, int picks,
                            bool mixed) {
    std::mt19937 random(7);
    Heads heads{};
    auto refill = [&](int vl) {
        heads[vl] = mixed ? 64 + static_cast<uint32_t>(random() % 4033) : 1024;
    };
    for (int vl : backlogged)
        refill(vl);
    std::map<int, uint64_t> bytes;
    for (int i = 0; i < picks; ++i) {
        const int vl = arbiter.pick(heads);
        REQUIRE(vl != VlArbiter::kNone);
        bytes[vl] += heads[vl];
        refill(vl);
    }
    return bytes;
}

} // namespace

TEST_CASE("VL arbitration: the weights of a table give the byte shares it says") {
    VlArbitrationTables t;
    t.low = {{0, 64}, {1, 128}, {2, 32}, {3, 16}};
    for (bool mixed : {false, true}) {
        VlArbiter arbiter(t);
        const auto bytes = run(arbiter, {0, 1, 2, 3}, 200000, mixed);
        uint64_t total = 0;
        for (auto& [vl, b] : bytes)
            total += b;
        const double weights = 64 + 128 + 32 + 16;
        for (auto [vl, weight] : {std::pair{0, 64}, {1, 128}, {2, 32}, {3, 16}}) {
            const double share = static_cast<double>(bytes.at(vl)) / static_cast<double>(total);
            INFO("VL " << vl << " mixed " << mixed << " share " << share);
            CHECK(share == Approx(weight / weights).epsilon(0.10)); // within 10%
        }
    }
}

TEST_CASE("VL arbitration: a VL with nothing to send holds up no other (no head-of-line "
          "blocking across VLs)") {
    VlArbitrationTables t;
    t.low = {{0, 10}, {1, 200}, {2, 10}};
    VlArbiter arbiter(t);
    const auto bytes = run(arbiter, {0, 2}, 1000, false); // VL1 has the big weight, no data
    CHECK(bytes.count(1) == 0);
    CHECK(bytes.at(0) == bytes.at(2));
    Heads none{};
    CHECK(arbiter.pick(none) == VlArbiter::kNone);
}

TEST_CASE("VL arbitration: VL15 goes first, and weight-0 entries and VL15 entries are skipped") {
    VlArbitrationTables t;
    t.high = {{4, 0}, {15, 100}};
    t.low = {{0, 1}};
    VlArbiter arbiter(t);
    Heads heads{};
    heads[0] = 100;
    heads[4] = 100;
    heads[15] = 256;
    CHECK(arbiter.pick(heads) == 15);
    heads[15] = 0;
    for (int i = 0; i < 10; ++i)
        CHECK(arbiter.pick(heads) == 0); // VL4's only entry has weight 0
}

TEST_CASE("VL arbitration: high priority first, a low-priority packet after "
          "LimitOfHighPriority x 4 KiB") {
    VlArbitrationTables t;
    t.high = {{5, 255}};
    t.low = {{0, 255}};
    auto sequence = [&](uint8_t limit) {
        t.limit_of_high_priority = limit;
        VlArbiter arbiter(t);
        Heads heads{};
        heads[5] = heads[0] = 1024;
        std::string s;
        for (int i = 0; i < 12; ++i)
            s += arbiter.pick(heads) == 5 ? 'H' : 'L';
        return s;
    };
    CHECK(sequence(kUnlimitedHighPriority) == "HHHHHHHHHHHH");
    CHECK(sequence(0) == "HLHLHLHLHLHL"); // one high-priority packet at a time
    CHECK(sequence(1) == "HHHHLHHHHLHH"); // 4 KiB = four 1 KiB packets
    CHECK(sequence(2) == "HHHHHHHHLHHH"); // 8 KiB
    // With nothing of low priority waiting, high priority goes on past its limit.
    t.limit_of_high_priority = 0;
    VlArbiter arbiter(t);
    Heads heads{};
    heads[5] = 1024;
    for (int i = 0; i < 5; ++i)
        CHECK(arbiter.pick(heads) == 5);
    heads[0] = 1024;
    CHECK(arbiter.pick(heads) == 0); // the run is over the limit: low goes at once
}

TEST_CASE("VL arbitration tables: text form, round trip and errors") {
    VlArbitrationTables t;
    REQUIRE(VlArbitrationTables::parse("high=7:16;low=0:64,1:32;limit=4", t).empty());
    CHECK(t.high == std::vector<VlArbitrationEntry>{{7, 16}});
    CHECK(t.low == std::vector<VlArbitrationEntry>{{0, 64}, {1, 32}});
    CHECK(t.limit_of_high_priority == 4);
    CHECK(t.to_string() == "high=7:16;low=0:64,1:32;limit=4");
    VlArbitrationTables back;
    REQUIRE(VlArbitrationTables::parse(t.to_string(), back).empty());
    CHECK(back.to_string() == t.to_string());
    CHECK(VlArbitrationTables::round_robin().to_string() ==
          "high=;low=0:64,1:64,2:64,3:64,4:64,5:64,6:64,7:64;limit=0");
    for (const char* bad : {"high=15:1", "low=0:256", "low=0", "limit=300", "mid=0:1", "low=x:1"}) {
        INFO(bad);
        CHECK_FALSE(VlArbitrationTables::parse(bad, t).empty());
    }
}

TEST_CASE("VL arbitration tables: which VLs they serve") {
    VlArbitrationTables t;
    REQUIRE(VlArbitrationTables::parse("high=1:255;low=0:16,2:0", t).empty());
    CHECK(t.serves(1));
    CHECK(t.serves(0));
    CHECK_FALSE(t.serves(2)); // weight 0: skipped
    CHECK_FALSE(t.serves(3));
    CHECK(VlArbitrationTables::round_robin().serves(7));
    CHECK_FALSE(VlArbitrationTables::round_robin().serves(8));
}
