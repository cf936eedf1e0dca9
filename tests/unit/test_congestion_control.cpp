// Transport: RoCE congestion control, sans I/O (congestion_control.hpp): the RED marker,
// the CNP limiter, DCQCN's rate machine fed CNPs, bytes and time, and the pacer.
#include "softhca/transport/congestion_control.hpp"

#include <catch2/catch.hpp>
#include <cmath>

using namespace softhca::transport;

TEST_CASE("ECN marking: none below Kmin, all from Kmax, linear to Pmax between") {
    EcnMarker m({1000, 11000, 0.2});
    CHECK(m.probability(999) == 0.0);
    CHECK(m.probability(1000) == 0.0);
    CHECK(m.probability(6000) == Approx(0.1));
    CHECK(m.probability(11000) == 1.0);
    CHECK(m.mark(6000, 0.05));
    CHECK_FALSE(m.mark(6000, 0.15));
    CHECK(m.mark(50000, 0.999));
    CHECK_FALSE(m.mark(10, 0.0));
}

TEST_CASE("CNP limiter: one CNP per QP per interval") {
    CnpLimiter l(50'000);
    CHECK(l.should_send(1'000'000));
    CHECK_FALSE(l.should_send(1'000'001));
    CHECK_FALSE(l.should_send(1'049'999));
    CHECK(l.should_send(1'050'000));
    CHECK(CnpLimiter(50'000).should_send(0)); // the first one, even at time 0
}

TEST_CASE("DCQCN: line rate and nothing to do until the first CNP") {
    DcqcnRate r({}, 10e9);
    CHECK(r.rate_bps() == 10e9);
    CHECK(r.next_deadline() == UINT64_MAX);
    r.on_sent(1'000'000'000, 5);
    r.advance(1'000'000'000);
    CHECK(r.rate_bps() == 10e9);
    CHECK_FALSE(r.limited());
}

TEST_CASE("DCQCN: a CNP cuts by alpha/2, alpha decays without CNPs, fast recovery "
          "halves the distance to the target F times") {
    DcqcnParameters p;
    DcqcnRate r(p, 10e9);
    const uint64_t t0 = 1'000'000;
    r.on_cnp(t0);
    CHECK(r.rate_bps() == Approx(5e9)); // alpha starts at 1
    CHECK(r.target_bps() == Approx(10e9));
    CHECK(r.alpha() == Approx(1.0));
    // A second CNP at once: the target is where the rate was, the cut by alpha/2 again.
    r.on_cnp(t0 + 1000);
    CHECK(r.target_bps() == Approx(5e9));
    CHECK(r.rate_bps() == Approx(2.5e9));
    // Alpha: (1-g) each K without a CNP.
    const double alpha = r.alpha();
    r.advance(t0 + 1000 + 3 * p.alpha_update_ns);
    CHECK(r.alpha() == Approx(alpha * std::pow(1 - p.g, 3)));
    // Those three periods were also three rate-increase timer events (T = K here): fast
    // recovery, each halfway to the target.
    CHECK(r.rate_bps() == Approx(5e9 - 2.5e9 / 8));
    r.advance(t0 + 1000 + 5 * p.rate_increase_ns);
    CHECK(r.rate_bps() == Approx(5e9 - 2.5e9 / 32));
    CHECK(r.target_bps() == Approx(5e9));
}

TEST_CASE("DCQCN: additive increase after F timer events, hyper increase once the byte "
          "counter has passed F too") {
    DcqcnParameters p;
    p.byte_counter = 1'000'000;
    DcqcnRate r(p, 10e9);
    r.on_cnp(0);
    r.on_cnp(1);                           // target 5 Gb/s, rate 2.5 Gb/s
    r.advance(1 + 5 * p.rate_increase_ns); // five timer events: fast recovery
    CHECK(r.target_bps() == Approx(5e9));
    r.advance(1 + 7 * p.rate_increase_ns); // two more: additive
    CHECK(r.target_bps() == Approx(5e9 + 2 * p.additive_increase_bps));
    // Six byte-counter events: the first five raise the timer side's additive increase
    // (timer events 7 > F but byte events <= F), the sixth is past F on both: hyper.
    const double before = r.target_bps();
    r.on_sent(5 * p.byte_counter, 1 + 7 * p.rate_increase_ns);
    CHECK(r.target_bps() == Approx(before + 5 * p.additive_increase_bps));
    r.on_sent(p.byte_counter, 1 + 7 * p.rate_increase_ns);
    CHECK(r.target_bps() == Approx(before + 5 * p.additive_increase_bps + p.hyper_increase_bps));
}

TEST_CASE("DCQCN: never above line rate, never below the minimum, back to rest at line "
          "rate") {
    DcqcnParameters p;
    p.min_rate_bps = 1e9;
    DcqcnRate r(p, 10e9);
    for (uint64_t i = 0; i < 50; ++i)
        r.on_cnp(i); // a storm of CNPs
    CHECK(r.rate_bps() == Approx(1e9));
    uint64_t t = 100;
    for (int i = 0; i < 100000 && r.limited(); ++i) {
        t += p.rate_increase_ns;
        r.on_sent(p.byte_counter, t);
        CHECK(r.rate_bps() <= 10e9);
    }
    CHECK_FALSE(r.limited());
    CHECK(r.rate_bps() == Approx(10e9));
    CHECK(r.next_deadline() == UINT64_MAX);
    // Resting, alpha went on decaying: the next CNP cuts by less than half.
    r.on_cnp(t + 1'000'000'000);
    CHECK(r.rate_bps() > 9e9);
}

TEST_CASE("DCQCN parameters: text form") {
    DcqcnParameters p;
    REQUIRE(DcqcnParameters::parse("g=0.0625,k_us=50,t_us=300,b=32768,f=3,ai_mbps=5,"
                                   "hai_mbps=50,min_mbps=100",
                                   p)
                .empty());
    CHECK(p.g == 0.0625);
    CHECK(p.alpha_update_ns == 50'000);
    CHECK(p.rate_increase_ns == 300'000);
    CHECK(p.byte_counter == 32768);
    CHECK(p.fast_recovery_steps == 3);
    CHECK(p.additive_increase_bps == 5e6);
    CHECK(p.hyper_increase_bps == 50e6);
    CHECK(p.min_rate_bps == 100e6);
    for (const char* bad : {"g=2", "x=1", "g", "k_us=-1"}) {
        INFO(bad);
        CHECK_FALSE(DcqcnParameters::parse(bad, p).empty());
    }
}

TEST_CASE("Pacer: a packet's time at the rate between packets") {
    RatePacer pacer;
    CHECK(pacer.may_send(0));
    pacer.sent(1000, 8e9, 100); // 1000 bytes at 8 Gb/s: 1 us
    CHECK(pacer.next_allowed() == 1100);
    CHECK_FALSE(pacer.may_send(1099));
    pacer.sent(1000, 8e9, 1100);
    CHECK(pacer.next_allowed() == 2100);
    pacer.sent(500, 1e9, 5000); // idle in between: from now
    CHECK(pacer.next_allowed() == 9000);
}
