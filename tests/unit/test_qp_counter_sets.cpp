// Engine: per-QP counters (qp_counter_sets.hpp) as the kernel's rdma_counter keeps them:
// auto mode binds QPs alike to one counter, manual binds and unbinds, a counter counts only
// what its QPs did while bound and goes with its last QP, and the kernel's refusals.
#include "qp_counter_sets.hpp"

#include "softhca/device_interface/control.hpp"

#include <catch2/catch.hpp>
#include <cerrno>
#include <map>

namespace di = softhca::device_interface;
using softhca::engine::QpCounterSets;
using softhca::transport::QpCounters;
using softhca::transport::QpType;
using Mode = QpCounterSets::Mode;

namespace {

struct Qps {
    std::map<uint32_t, QpCounters> live;
    QpCounterSets::Lookup lookup() {
        return [this](uint32_t qpn) -> const QpCounters* {
            const auto it = live.find(qpn);
            return it == live.end() ? nullptr : &it->second;
        };
    }
};

QpCounters sends(uint64_t n) {
    QpCounters c;
    c.sends_completed = n;
    return c;
}

const QpCounterSets::Owner kProcess1{100, 1000, 1, 100, "one"};
const QpCounterSets::Owner kProcess2{200, 1000, 1, 200, "two"};

} // namespace

TEST_CASE("QP counters: auto mode by type binds QPs alike, each counts from its bind") {
    QpCounterSets sets;
    sets.set_device_count(2);
    Qps qps;
    REQUIRE(sets.set_auto(1, di::kCounterMaskQpType) == 0);
    CHECK(sets.mode(1) == Mode::Auto);
    CHECK(sets.mode(0) == Mode::None); // per port
    qps.live[10] = sends(5);           // counted before it was bound: not the counter's
    sets.qp_ready(1, 10, QpType::RC, kProcess1, qps.live[10]);
    sets.qp_ready(1, 11, QpType::RC, kProcess2, qps.live[11] = sends(0));
    sets.qp_ready(1, 12, QpType::UD, kProcess1, qps.live[12] = sends(0));
    REQUIRE(sets.counters(1).size() == 2); // one for RC, one for UD
    const auto& rc = sets.counters(1).begin()->second;
    CHECK(rc.qps.size() == 2);
    CHECK(rc.owner.pid == 100);
    CHECK(rc.mode == Mode::Auto);
    CHECK(rc.mask == di::kCounterMaskQpType);
    qps.live[10] = sends(8);
    qps.live[11] = sends(4);
    CHECK(QpCounterSets::counted(rc, qps.lookup()).sends_completed == 7); // 3 + 4
    // A QP destroyed leaves what it counted behind.
    sets.qp_destroyed(1, 10, qps.live[10]);
    qps.live.erase(10);
    qps.live[11] = sends(6);
    CHECK(QpCounterSets::counted(sets.counters(1).begin()->second, qps.lookup()).sends_completed ==
          9);
    // Manual binds are refused in auto mode; auto mode again while counters exist is EBUSY.
    uint32_t id = 0;
    CHECK(sets.bind(1, 13, QpType::RC, kProcess1, {}, true, 0, id) == EINVAL);
    CHECK(sets.set_auto(1, di::kCounterMaskPid) == EBUSY);
    CHECK(sets.set_auto(1, di::kCounterMaskQpType) == 0); // unchanged: fine
    CHECK(sets.set_auto(1, 4) == EINVAL);                 // no such criterion
    // Off with counters left: manual; their last QPs gone, none.
    CHECK(sets.set_auto(1, 0) == 0);
    CHECK(sets.mode(1) == Mode::Manual);
    sets.qp_ready(1, 14, QpType::RC, kProcess1, {}); // not auto any more: unbound
    sets.qp_destroyed(1, 11, qps.live[11]);
    sets.qp_destroyed(1, 12, qps.live[12]);
    CHECK(sets.counters(1).empty());
    CHECK(sets.mode(1) == Mode::None);
}

TEST_CASE("QP counters: auto mode by process") {
    QpCounterSets sets;
    sets.set_device_count(1);
    REQUIRE(sets.set_auto(0, di::kCounterMaskPid) == 0);
    sets.qp_ready(0, 1, QpType::RC, kProcess1, {});
    sets.qp_ready(0, 2, QpType::UD, kProcess1, {});
    sets.qp_ready(0, 3, QpType::RC, kProcess2, {});
    REQUIRE(sets.counters(0).size() == 2);
    CHECK(sets.counters(0).begin()->second.qps.size() == 2); // process 1's RC and UD
}

TEST_CASE("QP counters: manual bind and unbind, with the kernel's refusals") {
    QpCounterSets sets;
    sets.set_device_count(1);
    Qps qps;
    uint32_t first = 99, again = 99;
    REQUIRE(sets.bind(0, 7, QpType::RC, kProcess1, qps.live[7] = sends(1), true, 0, first) == 0);
    CHECK(sets.mode(0) == Mode::Manual);
    CHECK(sets.counters(0).at(first).mode == Mode::Manual);
    CHECK(sets.bind(0, 7, QpType::RC, kProcess1, {}, true, 0, again) == EINVAL); // bound already
    CHECK(sets.bind(0, 8, QpType::RC, kProcess1, {}, false, first + 1, again) == ENOENT);
    REQUIRE(sets.bind(0, 8, QpType::RC, kProcess2, qps.live[8] = sends(2), false, first, again) ==
            0);
    CHECK(again == first);
    qps.live[7] = sends(11);
    qps.live[8] = sends(12);
    CHECK(QpCounterSets::counted(sets.counters(0).at(first), qps.lookup()).sends_completed == 20);
    CHECK(sets.unbind(0, 8, first + 1, qps.live[8]) == EINVAL); // not its counter
    CHECK(sets.unbind(0, 9, first, {}) == EINVAL);              // not bound
    REQUIRE(sets.unbind(0, 8, first, qps.live[8]) == 0);
    qps.live[8] = sends(100); // counts after the unbind are not the counter's
    CHECK(QpCounterSets::counted(sets.counters(0).at(first), qps.lookup()).sends_completed == 20);
    CHECK(sets.set_auto(0, di::kCounterMaskQpType) == EBUSY);
    REQUIRE(sets.unbind(0, 7, first, qps.live[7]) == 0);
    CHECK(sets.counters(0).empty()); // went with its last QP
    CHECK(sets.mode(0) == Mode::None);
    uint32_t next = 0;
    REQUIRE(sets.bind(0, 7, QpType::RC, kProcess1, {}, true, 0, next) == 0);
    CHECK(next != first); // ids are not reused at once
}

TEST_CASE("QP counters: a counter never holds two users' QPs") {
    QpCounterSets sets;
    sets.set_device_count(1);
    const QpCounterSets::Owner other_user{300, 2000, 1, 300, "three"};
    const QpCounterSets::Owner other_namespace{400, 1000, 2, 4, "four"};
    REQUIRE(sets.set_auto(0, di::kCounterMaskQpType) == 0);
    sets.qp_ready(0, 1, QpType::RC, kProcess1, {});
    sets.qp_ready(0, 2, QpType::RC, kProcess2, {});       // the same user: shared
    sets.qp_ready(0, 3, QpType::RC, other_user, {});      // another user: its own
    sets.qp_ready(0, 4, QpType::RC, other_namespace, {}); // another PID namespace: too
    REQUIRE(sets.counters(0).size() == 3);
    CHECK(sets.counters(0).begin()->second.qps.size() == 2);
    REQUIRE(sets.set_auto(0, 0) == 0); // manual, the counters left
    uint32_t id = 0;
    const uint32_t first = sets.counters(0).begin()->first;
    CHECK(sets.bind(0, 5, QpType::RC, other_user, {}, false, first, id) == EINVAL);
    CHECK(sets.bind(0, 5, QpType::RC, kProcess2, {}, false, first, id) == 0);
}

TEST_CASE("QP counters: a QP reset keeps what it counted on its counter") {
    QpCounterSets sets;
    sets.set_device_count(1);
    Qps qps;
    uint32_t id = 0;
    REQUIRE(sets.bind(0, 7, QpType::RC, kProcess1, qps.live[7] = sends(100), true, 0, id) == 0);
    qps.live[7] = sends(110);
    sets.qp_reset(0, 7, qps.live[7]); // RESET zeroes the QP's counts
    qps.live[7] = sends(0);
    CHECK(QpCounterSets::counted(sets.counters(0).at(id), qps.lookup()).sends_completed == 10);
    qps.live[7] = sends(5);
    CHECK(QpCounterSets::counted(sets.counters(0).at(id), qps.lookup()).sends_completed == 15);
    sets.qp_destroyed(0, 7, qps.live[7]);
    CHECK(sets.counters(0).empty());
}
