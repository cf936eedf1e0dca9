// Transport: priority flow control (priority_flow_control.hpp, IEEE 802.1Qbb) fed frames
// and time: the frame's codec, a frame's priority from its tag or DSCP, pauses that end
// after their quanta at the line rate (and at once with 0), and when a port asks its
// peer to pause, renews the pause and resumes.
#include "softhca/transport/priority_flow_control.hpp"

#include <catch2/catch.hpp>

using namespace softhca::transport;

namespace {
constexpr MacAddress kMac = {0x02, 0x53, 0x48, 0, 0, 1};
}

TEST_CASE("PFC: the frame round-trips, and other MAC control frames are not PFC") {
    PfcFrame f;
    f.enable = 0x09; // priorities 0 and 3
    f.quanta[0] = 0xffff;
    f.quanta[3] = 100;
    uint8_t frame[kPfcFrameBytes];
    REQUIRE(write_pfc_frame(frame, kMac, f) == 60);
    CHECK(std::equal(kPfcMac.begin(), kPfcMac.end(), frame));
    CHECK(frame[12] == 0x88);
    CHECK(frame[13] == 0x08);
    CHECK(frame[14] == 0x01);
    CHECK(frame[15] == 0x01); // opcode 0x0101
    CHECK(frame[17] == 0x09);
    CHECK(is_mac_control_frame(frame, sizeof(frame)));
    PfcFrame got;
    REQUIRE(parse_pfc_frame(frame, sizeof(frame), got));
    CHECK(got.enable == 0x09);
    CHECK(got.quanta[0] == 0xffff);
    CHECK(got.quanta[3] == 100);
    CHECK(got.quanta[1] == 0);
    frame[15] = 0x01;
    frame[14] = 0x00; // opcode 0x0001: 802.3x PAUSE, not PFC
    CHECK(is_mac_control_frame(frame, sizeof(frame)));
    CHECK_FALSE(parse_pfc_frame(frame, sizeof(frame), got));
    CHECK_FALSE(parse_pfc_frame(frame, 20, got)); // short
}

TEST_CASE("PFC: a frame's priority is its tag's PCP, else its DSCP's top three bits") {
    CHECK(frame_priority(5, 0) == 5);
    CHECK(frame_priority(-1, 0) == 0);
    CHECK(frame_priority(-1, 26 << 2) == 3);       // DSCP 26 (AF31): priority 3
    CHECK(frame_priority(-1, (46 << 2) | 2) == 5); // EF with ECT(0)
    CHECK(frame_priority(1, 46 << 2) == 1);        // the tag wins
}

TEST_CASE("PFC: a pause lasts its quanta at the line rate, and 0 resumes at once") {
    PfcPauses pauses;
    CHECK_FALSE(pauses.paused(0, 0));
    CHECK(pauses.next_resume(0) == UINT64_MAX);
    PfcFrame f;
    f.enable = 0x01;
    f.quanta[0] = 1000; // 512,000 bits: 512 us at 1 Gb/s
    f.quanta[1] = 5000; // not enabled: ignored
    pauses.on_frame(f, 1'000'000, 1e9);
    CHECK(pauses.paused(0, 1'000'000));
    CHECK_FALSE(pauses.paused(1, 1'000'000));
    CHECK(pauses.paused_mask(1'000'000) == 0x01);
    CHECK(pauses.next_resume(1'000'000) == 1'512'000);
    CHECK(pauses.paused(0, 1'511'999));
    CHECK_FALSE(pauses.paused(0, 1'512'000));
    pauses.on_frame(f, 2'000'000, 1e9);
    f.quanta[0] = 0; // XON
    pauses.on_frame(f, 2'100'000, 1e9);
    CHECK_FALSE(pauses.paused(0, 2'100'000));
    CHECK(pauses.next_resume(2'100'000) == UINT64_MAX);
}

TEST_CASE("PFC: a backlog pauses what it holds, renews at half the pause, resumes when gone") {
    PfcRequester r;
    PfcFrame f;
    CHECK_FALSE(r.after_round(false, 0x01, 0, 10e9, f)); // no backlog, nothing paused
    REQUIRE(r.after_round(true, 0x08, 100, 10e9, f));    // XOFF priority 3
    CHECK(f.enable == 0x08);
    CHECK(f.quanta[3] == kPfcMaxQuanta);
    CHECK(r.paused() == 0x08);
    // 0xffff quanta at 10 Gb/s: 3,355,392 ns; renewed after half.
    CHECK_FALSE(r.after_round(true, 0x08, 1'000'000, 10e9, f));
    REQUIRE(r.after_round(true, 0x09, 1'000'100, 10e9, f)); // priority 0 joins
    CHECK(f.enable == 0x09);
    CHECK(f.quanta[0] == kPfcMaxQuanta);
    CHECK_FALSE(r.after_round(true, 0x01, 1'000'200, 10e9, f));
    REQUIRE(r.after_round(true, 0x01, 1'000'100 + 1'677'696, 10e9, f)); // renewal
    CHECK(f.enable == 0x09);
    REQUIRE(r.after_round(false, 0, 3'000'000, 10e9, f)); // XON for both
    CHECK(f.enable == 0x09);
    CHECK(f.quanta[0] == 0);
    CHECK(f.quanta[3] == 0);
    CHECK(r.paused() == 0);
    CHECK_FALSE(r.after_round(false, 0, 3'000'100, 10e9, f));
}

TEST_CASE("PFC: only the priorities PFC is enabled for are honoured and asked for") {
    // Enabled for priority 3 only (as `dcb pfc set dev eth0 prio-pfc all:off 3:on`).
    PfcPauses pauses(0x08);
    PfcFrame f;
    f.enable = 0x09;
    f.quanta[0] = 1000;
    f.quanta[3] = 1000;
    pauses.on_frame(f, 0, 1e9);
    CHECK(pauses.paused_mask(0) == 0x08); // priority 0's pause time ignored
    f.enable = 0x01;
    f.quanta[0] = 0;
    f.quanta[3] = 0;
    pauses.on_frame(f, 100, 1e9); // an XON for priority 0 leaves priority 3 paused
    CHECK(pauses.paused(3, 100));

    PfcRequester r(0x08);
    CHECK_FALSE(r.after_round(true, 0x01, 0, 10e9, f)); // a backlog of priority 0 alone
    CHECK(r.paused() == 0);
    REQUIRE(r.after_round(true, 0x09, 100, 10e9, f)); // priority 3 asked, 0 not
    CHECK(f.enable == 0x08);
    CHECK(f.quanta[0] == 0);
    CHECK(r.paused() == 0x08);
    REQUIRE(r.after_round(false, 0x01, 200, 10e9, f)); // the XON names priority 3 only
    CHECK(f.enable == 0x08);
}
