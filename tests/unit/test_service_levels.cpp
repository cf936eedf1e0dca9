// Transport: SL to VL tables and the traffic class's DSCP and ECN bits
// (service_levels.hpp).
#include "softhca/transport/service_levels.hpp"

#include <catch2/catch.hpp>

using namespace softhca::transport;

TEST_CASE("SL to VL: SL n on VL n mod the data VLs by default, set by text") {
    SlToVlTable t;
    for (uint8_t sl = 0; sl < 16; ++sl)
        CHECK(t.vl(sl) == sl % 8);
    CHECK(SlToVlTable(4).vl(6) == 2);
    REQUIRE(SlToVlTable::parse("0:7,3:1,15:14", t).empty());
    CHECK(t.vl(0) == 7);
    CHECK(t.vl(3) == 1);
    CHECK(t.vl(15) == 14);
    CHECK(t.vl(1) == 1);
    CHECK(t.to_string() ==
          "0:7,1:1,2:2,3:1,4:4,5:5,6:6,7:7,8:0,9:1,10:2,11:3,12:4,13:5,14:6,15:14");
    for (const char* bad : {"16:0", "0:15", "0-1", "x:1"}) {
        INFO(bad);
        SlToVlTable before = t;
        CHECK_FALSE(SlToVlTable::parse(bad, t).empty());
        CHECK(t.to_string() == before.to_string()); // a bad table changes nothing
    }
}

TEST_CASE("traffic class: DSCP in the upper six bits, ECN (RFC 3168) in the lower two") {
    const uint8_t tc = 46 << 2 | 2; // EF, ECT(0)
    CHECK(dscp_of(tc) == 46);
    CHECK(ecn_of(tc) == Ecn::Ect0);
    CHECK(ecn_capable(tc));
    CHECK_FALSE(ecn_capable(46 << 2));
    const uint8_t marked = with_ecn(tc, Ecn::Ce);
    CHECK(dscp_of(marked) == 46);
    CHECK(ecn_of(marked) == Ecn::Ce);
    CHECK(marked == 0xbb);
}
