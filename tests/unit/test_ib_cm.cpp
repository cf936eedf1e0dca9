// The IB CM (transport/ib_cm.hpp) alone: two CMs, each with a consumer that records what
// it is told, exchange their MADs over a simulated wire that drops, duplicates and
// reorders them (deterministic from a seed), in simulated time. No engine, no sockets,
// no clock: what the CM does is a function of the MADs, the commands and the time.
#include "softhca/transport/ib_cm.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <functional>
#include <map>
#include <random>
#include <vector>

using namespace softhca::transport;

namespace {

constexpr uint64_t kServiceId = rdma_cm_service_id(0x0106, 7471); // the TCP port space
constexpr uint64_t kUdServiceId = rdma_cm_service_id(0x0111, 7472);

// Short timers: a response timeout and packet life time of 2^8 * 4.096 µs (1 ms each in
// cm.c's rounding), so a wait for a response is 3 ms, and 4 retries.
CmConfig test_config() {
    CmConfig config;
    config.response_timeout = 8;
    config.packet_life = 8;
    config.max_retries = 4;
    return config;
}

CmAttribute attribute_of(const CmMad& mad) {
    return static_cast<CmAttribute>(mad.header.attribute_id());
}

struct Wire;

// One side: its CM and a consumer that records every event and MAD.
struct Host final : CmConsumer {
    struct Event {
        CmEventType type;
        uint32_t handle;
        uint64_t context;
        CmMad mad;
    };
    Wire& wire;
    int index;
    MadPeer self;
    uint64_t guid;
    IbCm cm;
    std::vector<Event> events;
    std::vector<CmMad> sent;
    // Service ids served: a REQ (or SIDR_REQ) for another is refused.
    std::map<uint64_t, bool /*datagram*/> services;
    uint64_t next_context = 100;
    bool auto_drep = true; // answer a DREQ at once, as a destroyed id does

    Host(Wire& w, int i, uint32_t seed, const CmConfig& config = test_config());
    void send_mad(size_t port, const MadPeer& to, const CmMad& mad, uint64_t now) override;
    CmRequestAnswer connection_request(size_t, const MadPeer&, const CmMad& mad) override {
        CmRequestAnswer answer;
        const bool sidr = attribute_of(mad) == CmAttribute::SidrReq;
        const uint64_t sid = sidr ? mad.as<CmSidrReq>().service_id() : mad.as<CmReq>().service_id();
        auto it = services.find(sid);
        if (it == services.end()) {
            answer.reject_reason = static_cast<uint16_t>(CmRejectReason::InvalidServiceId);
            answer.sidr_status = kSidrUnsupported;
            return answer;
        }
        answer.context = next_context++;
        answer.local_ca_guid = guid;
        answer.datagram = it->second;
        answer.path_mtu = 3; // 1024
        return answer;
    }
    void cm_event(const CmConnection& c, CmEventType type, const CmMad* mad,
                  uint64_t now) override {
        events.push_back({type, c.handle, c.context, mad ? *mad : CmMad{}});
        if (type == CmEventType::DreqReceived && auto_drep)
            cm.send_drep(c.handle, now);
    }
    size_t count(CmEventType type) const {
        return static_cast<size_t>(std::count_if(events.begin(), events.end(),
                                                 [&](const Event& e) { return e.type == type; }));
    }
    const Event* first(CmEventType type) const {
        for (const Event& e : events)
            if (e.type == type)
                return &e;
        return nullptr;
    }
    size_t sent_count(CmAttribute attribute) const {
        return static_cast<size_t>(std::count_if(sent.begin(), sent.end(), [&](const CmMad& m) {
            return attribute_of(m) == attribute;
        }));
    }
    // A REQ to the other host's service.
    uint32_t connect(const Host& to, uint64_t now, uint64_t service_id = kServiceId) {
        CmReqParams p;
        p.peer = to.self;
        p.context = next_context++;
        p.local_ca_guid = guid;
        p.service_id = service_id;
        p.qpn = 0x100 + static_cast<uint32_t>(index);
        p.starting_psn = 0x1000 + static_cast<uint32_t>(index);
        p.responder_resources = 4;
        p.initiator_depth = 2;
        p.path_mtu = 5; // 4096
        p.local_ack_timeout = 18;
        p.local_gid = self.gid;
        const uint8_t hello[] = {'h', 'i'};
        p.private_data = hello;
        p.private_data_bytes = sizeof(hello);
        return cm.send_req(p, now);
    }
    int accept(uint32_t handle, uint64_t now) {
        CmRepParams p;
        p.qpn = 0x200 + static_cast<uint32_t>(index);
        p.starting_psn = 0x2000 + static_cast<uint32_t>(index);
        p.responder_resources = 2;
        p.initiator_depth = 4;
        return cm.send_rep(handle, p, now);
    }
};

// The wire between the two hosts: each MAD arrives after a delay of its own (so they
// may pass each other), or not at all, or twice.
struct Wire {
    struct InFlight {
        uint64_t at;
        int to;
        MadPeer from;
        CmMad mad;
    };
    std::mt19937 random;
    double drop = 0;
    double duplicate = 0;
    uint64_t max_delay_ns = 0;                           // above the 10 µs each MAD takes
    std::function<bool(int from, const CmMad&)> drop_if; // a MAD to lose on purpose
    std::vector<InFlight> in_flight;
    std::vector<Host*> hosts;
    uint64_t now = 1'000'000;

    explicit Wire(uint32_t seed) : random(seed) {}
    double uniform() { return std::uniform_real_distribution<double>(0, 1)(random); }
    uint64_t delay() { return 10'000 + (max_delay_ns ? random() % max_delay_ns : 0); }
    void carry(int from, const CmMad& mad) {
        if (drop_if && drop_if(from, mad))
            return;
        if (uniform() < drop)
            return;
        const int to = 1 - from;
        in_flight.push_back({now + delay(), to, hosts[static_cast<size_t>(from)]->self, mad});
        if (uniform() < duplicate)
            in_flight.push_back({now + delay(), to, hosts[static_cast<size_t>(from)]->self, mad});
    }
    // Delivers what has arrived and runs the CMs' timers, 100 µs at a time, until `done`
    // holds or `limit_ns` of simulated time has passed. True when `done` held.
    bool run(const std::function<bool()>& done, uint64_t limit_ns = 2'000'000'000) {
        const uint64_t end = now + limit_ns;
        while (now < end) {
            if (done())
                return true;
            now += 100'000;
            step();
        }
        return done();
    }
    void step() {
        std::vector<InFlight> due;
        for (auto it = in_flight.begin(); it != in_flight.end();) {
            if (it->at <= now) {
                due.push_back(*it);
                it = in_flight.erase(it);
            } else {
                ++it;
            }
        }
        for (const InFlight& f : due)
            hosts[static_cast<size_t>(f.to)]->cm.receive_mad(
                0, f.from, reinterpret_cast<const uint8_t*>(&f.mad), sizeof(f.mad), now);
        for (Host* h : hosts)
            h->cm.poll(now);
    }
    // Everything in flight arrives, and the timers run, until nothing more happens.
    void settle(uint64_t ns = 200'000'000) {
        run([] { return false; }, ns);
    }
};

Host::Host(Wire& w, int i, uint32_t seed, const CmConfig& config)
    : wire(w), index(i), guid(0x0253494d00000001ull + static_cast<uint64_t>(i)),
      cm(*this, config, seed) {
    self.ipv4 = 0xc6120001u + static_cast<uint32_t>(i); // 198.18.0.1, .2
    self.gid = gid_from_ipv4(self.ipv4);
    wire.hosts.push_back(this);
}

void Host::send_mad(size_t, const MadPeer&, const CmMad& mad, uint64_t) {
    sent.push_back(mad);
    wire.carry(index, mad);
}

// Two hosts on one wire: a (active, index 0) and b (passive, index 1, serving kServiceId
// over RC and kUdServiceId over UD).
struct Pair {
    Wire wire;
    Host a;
    Host b;
    explicit Pair(uint32_t seed = 1, const CmConfig& config = test_config())
        : wire(seed), a(wire, 0, seed * 2 + 1, config), b(wire, 1, seed * 2, config) {
        b.services[kServiceId] = false;
        b.services[kUdServiceId] = true;
    }
    // REQ, REP, RTU: true once both ends are established.
    bool establish(uint32_t& active, uint32_t& passive) {
        active = a.connect(b, wire.now);
        if (!active || !wire.run([&] { return b.count(CmEventType::ReqReceived) > 0; }))
            return false;
        passive = b.first(CmEventType::ReqReceived)->handle;
        REQUIRE(b.accept(passive, wire.now) == 0);
        if (!wire.run([&] { return a.count(CmEventType::RepReceived) > 0; }))
            return false;
        REQUIRE(a.cm.send_rtu(active, wire.now) == 0);
        return wire.run(
            [&] { return b.cm.connection(passive)->state == CmConnectionState::Established; });
    }
};

} // namespace

TEST_CASE("IB CM: REQ, REP and RTU establish a connection, each side told once, with the "
          "other's QPN, PSN and comm id") {
    Pair p;
    uint32_t active = 0, passive = 0;
    REQUIRE(p.establish(active, passive));
    p.wire.settle();
    const CmConnection& a = *p.a.cm.connection(active);
    const CmConnection& b = *p.b.cm.connection(passive);
    CHECK(a.state == CmConnectionState::Established);
    CHECK(b.state == CmConnectionState::Established);
    CHECK(p.a.count(CmEventType::RepReceived) == 1);
    CHECK(p.b.count(CmEventType::ReqReceived) == 1);
    CHECK(p.b.count(CmEventType::Established) == 1);
    CHECK(p.a.events.size() == 1);
    CHECK(p.b.events.size() == 2);
    // 12.6.5, 12.6.8: each side's comm ids, QPNs and Starting PSNs reach the other.
    CHECK(a.remote_comm_id == b.local_comm_id);
    CHECK(b.remote_comm_id == a.local_comm_id);
    CHECK(b.remote_qpn == 0x100);
    CHECK(a.remote_qpn == 0x201);
    CHECK(b.send_psn == 0x1000);
    CHECK(a.send_psn == 0x2001);
    CHECK(b.remote_ca_guid == p.a.guid);
    CHECK(a.remote_ca_guid == p.b.guid);
    // Responder resources and initiator depth cross over; the path MTU is the smaller.
    CHECK(b.responder_resources == 2);
    CHECK(b.initiator_depth == 4);
    CHECK(b.path_mtu == 3);
    CHECK(b.service_id == kServiceId);
    // The REQ's private data reaches the passive side.
    const CmReq& req = p.b.first(CmEventType::ReqReceived)->mad.as<CmReq>();
    CHECK(req.private_data()[0] == 'h');
    CHECK(req.private_data()[1] == 'i');
    CHECK(p.a.sent_count(CmAttribute::Req) == 1);
    CHECK(p.b.sent_count(CmAttribute::Rep) == 1);
    CHECK(p.a.sent_count(CmAttribute::Rtu) == 1);
    CHECK(p.a.cm.counters().retransmissions == 0);
    CHECK(p.b.cm.counters().retransmissions == 0);
    // Nothing left to time: no retransmission is due.
    CHECK(p.a.cm.next_deadline() == UINT64_MAX);
    CHECK(p.b.cm.next_deadline() == UINT64_MAX);
}

TEST_CASE("IB CM: a REQ for a service nobody serves is rejected with 'invalid service ID'") {
    Pair p;
    const uint32_t active = p.a.connect(p.b, p.wire.now, rdma_cm_service_id(0x0106, 9999));
    REQUIRE(p.wire.run([&] { return p.a.count(CmEventType::Rejected) > 0; }));
    p.wire.settle();
    CHECK(p.a.count(CmEventType::Rejected) == 1);
    const CmRej& rej = p.a.first(CmEventType::Rejected)->mad.as<CmRej>();
    CHECK(rej.reason() == static_cast<uint16_t>(CmRejectReason::InvalidServiceId)); // table 109
    CHECK(rej.message_rejected() == 0);                                             // the REQ
    CHECK(rej.remote_comm_id() == p.a.cm.connection(active)->local_comm_id);
    CHECK(p.a.cm.connection(active)->state == CmConnectionState::Closed);
    CHECK(p.b.events.empty());
    CHECK(p.b.cm.connections() == 0);
    CHECK(p.a.cm.counters().retransmissions == 0);
}

TEST_CASE("IB CM: a REQ lost is sent again each response timeout, and after Max CM Retries the "
          "peer is unreachable") {
    Pair p;
    p.wire.drop = 1; // nothing arrives
    const uint32_t active = p.a.connect(p.b, p.wire.now);
    const uint64_t start = p.wire.now;
    REQUIRE(p.wire.run([&] { return p.a.count(CmEventType::Unreachable) > 0; }));
    const uint64_t took = p.wire.now - start;
    p.wire.settle();
    // 12.7.29: the first REQ and max_retries more, one response timeout (3 ms) apart.
    CHECK(p.a.sent_count(CmAttribute::Req) == 1 + test_config().max_retries);
    CHECK(p.a.cm.counters().retransmissions == test_config().max_retries);
    CHECK(p.a.count(CmEventType::Unreachable) == 1);
    CHECK(p.a.events.size() == 1);
    CHECK(p.a.cm.connection(active)->state == CmConnectionState::Closed);
    CHECK(took >= 5 * 3'000'000);
    CHECK(took < 5 * 3'000'000 + 1'000'000);
    // Each repeat is the same REQ: its transaction id and comm id.
    for (const CmMad& m : p.a.sent)
        CHECK(std::equal(m.header.b, m.header.b + kMadHeaderBytes, p.a.sent[0].header.b));
    CHECK(p.a.cm.next_deadline() == UINT64_MAX);
}

TEST_CASE("IB CM: the first REQ lost, its repeat establishes the connection") {
    Pair p;
    bool lost = false;
    p.wire.drop_if = [&](int from, const CmMad& m) {
        if (from == 0 && attribute_of(m) == CmAttribute::Req && !lost)
            return lost = true;
        return false;
    };
    uint32_t active = 0, passive = 0;
    REQUIRE(p.establish(active, passive));
    p.wire.settle();
    CHECK(p.a.sent_count(CmAttribute::Req) == 2);
    CHECK(p.a.cm.counters().retransmissions == 1);
    CHECK(p.b.count(CmEventType::ReqReceived) == 1);
    CHECK(p.a.count(CmEventType::RepReceived) == 1);
}

TEST_CASE("IB CM: a duplicate REQ gets an MRA while the consumer decides, the REP again once it "
          "has answered, and makes no second connection") {
    Pair p;
    const uint32_t active = p.a.connect(p.b, p.wire.now);
    REQUIRE(p.wire.run([&] { return p.b.count(CmEventType::ReqReceived) > 0; }));
    const uint32_t passive = p.b.first(CmEventType::ReqReceived)->handle;
    const CmMad req = p.a.sent.at(0);
    auto duplicate_req = [&] {
        p.b.cm.receive_mad(0, p.a.self, reinterpret_cast<const uint8_t*>(&req), sizeof(req),
                           p.wire.now);
    };

    // 12.9.8: still with the consumer, an MRA (of the REQ) asks the active side to wait.
    duplicate_req();
    REQUIRE(p.b.sent.size() == 1);
    CHECK(attribute_of(p.b.sent.back()) == CmAttribute::Mra);
    const CmMra& mra = p.b.sent.back().as<CmMra>();
    CHECK(mra.message_mraed() == 0);
    CHECK(mra.remote_comm_id() == p.a.cm.connection(active)->local_comm_id);
    CHECK(p.b.cm.counters().duplicates == 1);
    // 12.6.6: the MRA's service timeout (2^24 * 4.096 µs) holds the REQ's repeat back.
    const uint64_t before = p.a.cm.connection(active)->retry_at;
    p.wire.settle(500'000); // the MRA arrives
    CHECK(p.a.cm.connection(active)->retry_at > before + 1'000'000'000);

    // Answered: a duplicate REQ gets the REP again.
    REQUIRE(p.b.accept(passive, p.wire.now) == 0);
    duplicate_req();
    CHECK(p.b.sent_count(CmAttribute::Rep) == 2);
    CHECK(p.b.cm.counters().duplicates == 2);
    CHECK(p.b.cm.connections() == 1);
    CHECK(p.b.count(CmEventType::ReqReceived) == 1);

    REQUIRE(p.wire.run([&] { return p.a.count(CmEventType::RepReceived) > 0; }));
    REQUIRE(p.a.cm.send_rtu(active, p.wire.now) == 0);
    REQUIRE(p.wire.run([&] { return p.b.count(CmEventType::Established) > 0; }));
    p.wire.settle();
    // The second REP found the active side past ReqSent (or established): the RTU again,
    // never a second CONNECT_RESPONSE.
    CHECK(p.a.count(CmEventType::RepReceived) == 1);
    CHECK(p.b.count(CmEventType::Established) == 1);
}

TEST_CASE("IB CM: DREQ and DREP end the connection from either side, through lost messages, "
          "then time wait") {
    const bool active_disconnects = GENERATE(true, false);
    Pair p;
    uint32_t active = 0, passive = 0;
    REQUIRE(p.establish(active, passive));
    p.wire.settle();
    Host& from = active_disconnects ? p.a : p.b;
    Host& to = active_disconnects ? p.b : p.a;
    const uint32_t mine = active_disconnects ? active : passive;
    const uint32_t theirs = active_disconnects ? passive : active;
    // The first DREQ and the first DREP are lost: the DREQ is sent again, and the peer,
    // in time wait, answers the repeat with its DREP again (12.9.6).
    bool dreq_lost = false, drep_lost = false;
    p.wire.drop_if = [&](int, const CmMad& m) {
        if (attribute_of(m) == CmAttribute::Dreq && !dreq_lost)
            return dreq_lost = true;
        if (attribute_of(m) == CmAttribute::Drep && !drep_lost)
            return drep_lost = true;
        return false;
    };
    REQUIRE(from.cm.send_dreq(mine, p.wire.now) == 0);
    CHECK(from.cm.connection(mine)->state == CmConnectionState::DreqSent);
    REQUIRE(p.wire.run([&] { return from.count(CmEventType::Disconnected) > 0; }));
    CHECK(to.count(CmEventType::DreqReceived) == 1);
    CHECK(from.sent_count(CmAttribute::Dreq) == 3);
    CHECK(to.sent_count(CmAttribute::Drep) == 2);
    CHECK(from.cm.connection(mine)->state == CmConnectionState::TimeWait);
    // The peer's time wait (3 ms here) may be over already.
    CHECK((to.cm.connection(theirs)->state == CmConnectionState::TimeWait ||
           to.cm.connection(theirs)->state == CmConnectionState::Closed));
    // Time wait ends on both sides: the comm ids are free.
    REQUIRE(p.wire.run([&] {
        return from.count(CmEventType::TimewaitExit) > 0 && to.count(CmEventType::TimewaitExit) > 0;
    }));
    p.wire.settle();
    CHECK(from.count(CmEventType::Disconnected) == 1);
    CHECK(to.count(CmEventType::DreqReceived) == 1);
    CHECK(to.count(CmEventType::Disconnected) == 0);
    CHECK(from.cm.connection(mine)->state == CmConnectionState::Closed);
    CHECK(from.cm.connection(mine)->local_comm_id == 0);
    CHECK(to.cm.connection(theirs)->state == CmConnectionState::Closed);
    CHECK(from.cm.next_deadline() == UINT64_MAX);
    CHECK(to.cm.next_deadline() == UINT64_MAX);
    // Released, nothing of them is left.
    from.cm.release(mine);
    to.cm.release(theirs);
    CHECK(p.a.cm.connections() == 0);
    CHECK(p.b.cm.connections() == 0);
}

TEST_CASE("IB CM: a DREQ never answered ends in time wait after the retries, and both ends "
          "disconnecting at once each get a DREP") {
    Pair p;
    uint32_t active = 0, passive = 0;
    REQUIRE(p.establish(active, passive));
    p.wire.settle();
    SECTION("unanswered") {
        p.wire.drop = 1;
        REQUIRE(p.a.cm.send_dreq(active, p.wire.now) == 0);
        REQUIRE(p.wire.run([&] { return p.a.count(CmEventType::Disconnected) > 0; }));
        CHECK(p.a.sent_count(CmAttribute::Dreq) == 1 + test_config().max_retries);
        CHECK(p.a.cm.connection(active)->state == CmConnectionState::TimeWait);
        REQUIRE(p.wire.run([&] { return p.a.count(CmEventType::TimewaitExit) > 0; }));
    }
    SECTION("crossing") {
        p.b.auto_drep = false;
        REQUIRE(p.a.cm.send_dreq(active, p.wire.now) == 0);
        REQUIRE(p.b.cm.send_dreq(passive, p.wire.now) == 0);
        REQUIRE(p.wire.run([&] {
            return p.a.count(CmEventType::Disconnected) > 0 &&
                   p.b.count(CmEventType::Disconnected) > 0;
        }));
        p.wire.settle();
        CHECK(p.a.count(CmEventType::Disconnected) == 1);
        CHECK(p.b.count(CmEventType::Disconnected) == 1);
        CHECK(p.a.sent_count(CmAttribute::Drep) == 1);
        CHECK(p.b.sent_count(CmAttribute::Drep) == 1);
        CHECK(p.a.count(CmEventType::TimewaitExit) == 1);
        CHECK(p.b.count(CmEventType::TimewaitExit) == 1);
    }
}

TEST_CASE("IB CM: over a wire that drops, duplicates and reorders, connections are made and "
          "ended with every event exactly once") {
    for (uint32_t seed = 1; seed <= 30; ++seed) {
        CAPTURE(seed);
        CmConfig config = test_config();
        config.max_retries = 15; // 16 tries: losing every one is unlikely enough
        Pair p(seed, config);
        p.wire.drop = 0.2;
        p.wire.duplicate = 0.3;
        p.wire.max_delay_ns = 2'000'000; // up to 2 ms late: MADs pass each other
        uint32_t active = 0, passive = 0;
        REQUIRE(p.establish(active, passive));
        REQUIRE(p.wire.run(
            [&] { return p.a.cm.connection(active)->state == CmConnectionState::Established; }));
        const bool active_disconnects = seed % 2;
        Host& from = active_disconnects ? p.a : p.b;
        REQUIRE(from.cm.send_dreq(active_disconnects ? active : passive, p.wire.now) == 0);
        REQUIRE(p.wire.run([&] {
            return p.a.count(CmEventType::TimewaitExit) > 0 &&
                   p.b.count(CmEventType::TimewaitExit) > 0;
        }));
        p.wire.settle();
        CHECK(p.b.count(CmEventType::ReqReceived) == 1);
        CHECK(p.a.count(CmEventType::RepReceived) == 1);
        CHECK(p.b.count(CmEventType::Established) == 1);
        CHECK(from.count(CmEventType::Disconnected) == 1);
        Host& to = active_disconnects ? p.b : p.a;
        CHECK(to.count(CmEventType::DreqReceived) == 1);
        CHECK(p.a.count(CmEventType::TimewaitExit) == 1);
        CHECK(p.b.count(CmEventType::TimewaitExit) == 1);
        CHECK(p.a.count(CmEventType::Rejected) + p.b.count(CmEventType::Rejected) == 0);
        CHECK(p.a.count(CmEventType::Unreachable) + p.b.count(CmEventType::Unreachable) == 0);
        CHECK(p.a.cm.connections() == 1);
        CHECK(p.b.cm.connections() == 1);
        CHECK(p.b.cm.connection(passive)->remote_qpn == 0x100);
        CHECK(p.a.cm.connection(active)->remote_qpn == 0x201);
    }
}

TEST_CASE("IB CM: SIDR_REQ finds the UD QP and Q_Key behind a service id, a lost SIDR_REQ is "
          "sent again and its duplicate answered again, and no service gets 'unsupported'") {
    Pair p;
    bool lost = false;
    p.wire.drop_if = [&](int from, const CmMad& m) {
        if (from == 1 && attribute_of(m) == CmAttribute::SidrRep && !lost)
            return lost = true; // the first answer: the SIDR_REQ goes again
        return false;
    };
    CmSidrReqParams req;
    req.peer = p.b.self;
    req.context = 7;
    req.service_id = kUdServiceId;
    req.qpn = 0x77;
    const uint32_t active = p.a.cm.send_sidr_req(req, p.wire.now);
    REQUIRE(active);
    REQUIRE(p.wire.run([&] { return p.b.count(CmEventType::SidrReqReceived) > 0; }));
    const uint32_t passive = p.b.first(CmEventType::SidrReqReceived)->handle;
    CHECK(p.b.cm.connection(passive)->datagram);
    const uint8_t data[] = {1, 2, 3};
    REQUIRE(p.b.cm.send_sidr_rep(passive, kSidrSuccess, 0x99, 0x11223344, data, sizeof(data),
                                 p.wire.now) == 0);
    REQUIRE(p.wire.run([&] { return p.a.count(CmEventType::SidrRepReceived) > 0; }));
    p.wire.settle();
    CHECK(p.a.count(CmEventType::SidrRepReceived) == 1);
    const CmSidrRep& rep = p.a.first(CmEventType::SidrRepReceived)->mad.as<CmSidrRep>();
    CHECK(rep.status() == kSidrSuccess);
    CHECK(rep.qpn() == 0x99);
    CHECK(rep.qkey() == 0x11223344);
    CHECK(rep.service_id() == kUdServiceId);
    CHECK(rep.private_data()[2] == 3);
    CHECK(p.a.cm.connection(active)->state == CmConnectionState::Established);
    CHECK(p.a.cm.connection(active)->remote_qpn == 0x99);
    // The repeated SIDR_REQ was answered from the SIDR_REP already sent, once only told.
    CHECK(p.a.sent_count(CmAttribute::SidrReq) == 2);
    CHECK(p.b.sent_count(CmAttribute::SidrRep) == 2);
    CHECK(p.b.count(CmEventType::SidrReqReceived) == 1);
    CHECK(p.b.cm.connections() == 1);

    // A service id nobody serves: SIDR_REP "unsupported" (12.11.2, table 121).
    req.service_id = rdma_cm_service_id(0x0111, 1);
    const uint32_t refused = p.a.cm.send_sidr_req(req, p.wire.now);
    REQUIRE(p.wire.run([&] { return p.a.count(CmEventType::SidrRepReceived) > 1; }));
    CHECK(p.a.events.back().mad.as<CmSidrRep>().status() == kSidrUnsupported);
    CHECK(p.a.cm.connection(refused)->state == CmConnectionState::Closed);
    CHECK(p.b.cm.connections() == 1);
}

TEST_CASE("IB CM: a consumer that goes away rejects what is pending, ends what is "
          "established, and the timers finish the rest") {
    Pair p;
    SECTION("a REQ not yet answered: REJ, the peer told") {
        const uint32_t active = p.a.connect(p.b, p.wire.now);
        REQUIRE(p.wire.run([&] { return p.b.count(CmEventType::ReqReceived) > 0; }));
        const uint32_t passive = p.b.first(CmEventType::ReqReceived)->handle;
        CHECK_FALSE(p.b.cm.destroy(passive, p.wire.now));
        p.b.cm.release(passive);
        REQUIRE(p.wire.run([&] { return p.a.count(CmEventType::Rejected) > 0; }));
        CHECK(p.a.first(CmEventType::Rejected)->mad.as<CmRej>().reason() ==
              static_cast<uint16_t>(CmRejectReason::ConsumerDefined));
        CHECK(p.a.cm.connection(active)->state == CmConnectionState::Closed);
    }
    SECTION("a REQ of ours not yet answered: REJ 'timeout' with our CA GUID") {
        p.wire.drop_if = [](int from, const CmMad& m) {
            return from == 1 && attribute_of(m) == CmAttribute::Rep; // b's REP never arrives
        };
        const uint32_t active = p.a.connect(p.b, p.wire.now);
        REQUIRE(p.wire.run([&] { return p.b.count(CmEventType::ReqReceived) > 0; }));
        const uint32_t passive = p.b.first(CmEventType::ReqReceived)->handle;
        REQUIRE(p.b.accept(passive, p.wire.now) == 0);
        p.wire.settle(500'000);
        CHECK_FALSE(p.a.cm.destroy(active, p.wire.now));
        p.a.cm.release(active);
        REQUIRE(p.wire.run([&] { return p.b.count(CmEventType::Rejected) > 0; }));
        const CmRej& rej = p.b.first(CmEventType::Rejected)->mad.as<CmRej>();
        CHECK(rej.reason() == static_cast<uint16_t>(CmRejectReason::Timeout));
        CHECK(load_be64(rej.ari()) == p.a.guid);
        CHECK(p.b.cm.connection(passive)->state == CmConnectionState::Closed);
    }
    SECTION("established: a DREQ, kept until time wait ends") {
        uint32_t active = 0, passive = 0;
        REQUIRE(p.establish(active, passive));
        p.wire.settle();
        CHECK(p.a.cm.destroy(active, p.wire.now));
        REQUIRE(p.wire.run([&] { return p.a.count(CmEventType::TimewaitExit) > 0; }));
        CHECK(p.b.count(CmEventType::DreqReceived) == 1);
    }
}

TEST_CASE("IB CM: malformed MADs and messages for no connection are dropped, a DREQ for none "
          "still gets its DREP") {
    Pair p;
    uint8_t garbage[256] = {};
    p.b.cm.receive_mad(0, p.a.self, garbage, sizeof(garbage), p.wire.now);
    p.b.cm.receive_mad(0, p.a.self, garbage, 100, p.wire.now);
    CmMad rtu{};
    rtu.header.set(kMgmtClassCm, kCmClassVersion, kMadMethodSend, 5,
                   static_cast<uint16_t>(CmAttribute::Rtu));
    rtu.as<CmRtu>().set_remote_comm_id(1234);
    p.b.cm.receive_mad(0, p.a.self, reinterpret_cast<const uint8_t*>(&rtu), sizeof(rtu),
                       p.wire.now);
    CHECK(p.b.cm.counters().mads_in == 3);
    CHECK(p.b.cm.counters().mads_dropped == 3);
    CHECK(p.b.sent.empty());
    CmMad dreq{};
    dreq.header.set(kMgmtClassCm, kCmClassVersion, kMadMethodSend, 6,
                    static_cast<uint16_t>(CmAttribute::Dreq));
    dreq.as<CmDreq>().set_local_comm_id(77);
    dreq.as<CmDreq>().set_remote_comm_id(88);
    p.b.cm.receive_mad(0, p.a.self, reinterpret_cast<const uint8_t*>(&dreq), sizeof(dreq),
                       p.wire.now);
    REQUIRE(p.b.sent.size() == 1);
    CHECK(attribute_of(p.b.sent[0]) == CmAttribute::Drep);
    CHECK(p.b.sent[0].as<CmDrep>().local_comm_id() == 88);
    CHECK(p.b.sent[0].as<CmDrep>().remote_comm_id() == 77);
    CHECK(p.b.cm.connections() == 0);
    CHECK(p.b.events.empty());
}
