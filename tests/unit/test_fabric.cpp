// Engine: the fabric inside the engine (ports/fabric), sans I/O: topologies as specified,
// every frame over a shortest path and none looping, ECMP's spread over many flows,
// adaptive routing moving a new flowlet off a loaded port while a flow's packets keep
// their order, a failed link (its switch at once, the others after convergence), switch
// queues dropping and marking, faults on the links between switches only.
#include "fabric.hpp"
#include "fabric_topology.hpp"

#include <catch2/catch.hpp>
#include <map>
#include <set>
#include <vector>

using namespace softhca::engine;
using namespace softhca::engine::fabric;

namespace {

constexpr uint32_t kCapacity = 65536;

// Frames the test owns: bytes, and what became of each.
struct Frames : FabricSink {
    std::vector<std::vector<uint8_t>> data{kCapacity};
    std::vector<std::pair<uint32_t, uint32_t>> delivered; // endpoint, frame
    std::vector<uint32_t> dropped;
    uint32_t next = 0;
    uint32_t copies = 0;
    void deliver(uint32_t endpoint, uint32_t frame) override {
        delivered.emplace_back(endpoint, frame);
    }
    void drop(uint32_t frame) override { dropped.push_back(frame); }
    uint32_t copy(uint32_t frame, uint8_t*& bytes) override {
        data[next] = data[frame];
        bytes = data[next].data();
        ++copies;
        return next++;
    }
    // A RoCEv2 frame of `length` bytes (Ethernet, IPv4 ECT(0), UDP to 4791) from `source`
    // to `destination`, whose UDP source port is `entropy`.
    Packet frame(uint32_t source, uint32_t destination, uint16_t entropy, uint32_t length = 1024) {
        REQUIRE(next < kCapacity);
        std::vector<uint8_t>& f = data[next];
        f.assign(length, 0);
        f[12] = 0x08; // IPv4
        f[14] = 0x45;
        f[15] = 0x02; // ECT(0)
        f[22] = 64;
        f[23] = 17; // UDP
        f[26] = 198, f[27] = 19, f[28] = 0, f[29] = static_cast<uint8_t>(source + 1);
        f[30] = 198, f[31] = 19, f[32] = 0, f[33] = static_cast<uint8_t>(destination + 1);
        f[34] = static_cast<uint8_t>(entropy >> 8), f[35] = static_cast<uint8_t>(entropy);
        f[36] = 0x12, f[37] = 0xb7; // 4791
        Packet p;
        p.frame = next++;
        p.data = f.data();
        p.length = length;
        p.destination = destination;
        p.flow_hash = five_tuple_hash(f.data(), length);
        return p;
    }
};

FabricSpec spec_of(const std::string& text) {
    std::string error;
    auto spec = parse_fabric_spec(text, error);
    INFO(error);
    REQUIRE(spec);
    return *spec;
}

const Fabric::Egress& port_between(const Fabric& f, const std::string& from,
                                   const std::string& to) {
    const uint32_t a = f.topology().node(from), b = f.topology().node(to);
    for (const Fabric::Egress& e : f.egress_ports())
        if (e.from == a && e.to == b)
            return e;
    FAIL("no port " << from << " -> " << to);
    return f.egress_ports().front();
}

// Hosts h0..h6 each send 100 frames of 4 KiB to h7 at once, each host one flow.
void incast_into_h7(Fabric& fabric, Frames& frames) {
    for (uint32_t s = 0; s < 7; ++s)
        for (int i = 0; i < 100; ++i)
            fabric.send(s, frames.frame(s, 7, static_cast<uint16_t>(0xc000 + s), 4096), 0);
}

uint64_t forwarded_total(const Fabric& f) {
    uint64_t total = 0;
    for (uint32_t n = 0; n < f.topology().nodes.size(); ++n)
        total += f.switch_counters(n).forwarded;
    return total;
}

} // namespace

TEST_CASE("fabric: leaf-spine, fat-tree and rail topologies have the shape asked for") {
    const Topology ls = build_topology(spec_of("leaf-spine:hosts=8,leaves=2,spines=2,"
                                               "oversubscription=2,rate_gbps=10"));
    CHECK(ls.endpoints.size() == 8);
    CHECK(ls.nodes.size() == 12);
    CHECK(ls.links.size() == 8 + 4);
    for (const Link& link : ls.links) {
        const bool uplink = ls.nodes[link.a].is_switch && ls.nodes[link.b].is_switch;
        // 4 hosts of 10 Gb/s per leaf over 2 uplinks at 2:1: 10 Gb/s each.
        CHECK(link.parameters.rate_bps == Approx(uplink ? 10e9 : 10e9));
    }
    const Topology ls4 = build_topology(spec_of("leaf-spine:hosts=8,leaves=2,spines=2,"
                                                "oversubscription=4,rate_gbps=10"));
    CHECK(ls4.links.back().parameters.rate_bps == Approx(5e9));

    const Topology ft = build_topology(spec_of("fat-tree:k=4,hosts=16"));
    CHECK(ft.endpoints.size() == 16);
    CHECK(ft.nodes.size() == 16 + 8 + 8 + 4);
    CHECK(ft.links.size() == 16 + 16 + 16);
    std::map<uint32_t, int> degree;
    for (const Link& link : ft.links)
        ++degree[link.a], ++degree[link.b];
    for (uint32_t n = 0; n < ft.nodes.size(); ++n)
        CHECK(degree[n] == (ft.nodes[n].is_switch ? 4 : 1)); // every switch has k ports

    const Topology rail = build_topology(spec_of("rail:hosts=4,rails=2,spines=1"));
    CHECK(rail.endpoints.size() == 8);
    CHECK(rail.nodes[rail.endpoints[3]].name == "h1n1");
    CHECK(rail.nodes[rail.endpoints[3]].host == "h1");
    // NIC n of every host is on rail switch n.
    for (const Link& link : rail.links)
        if (!rail.nodes[link.a].is_switch)
            CHECK(rail.nodes[link.b].name == "rail" + rail.nodes[link.a].name.substr(3));
}

TEST_CASE("fabric: the spec's mistakes are refused with what is wrong") {
    std::string error;
    CHECK_FALSE(parse_fabric_spec("ring:hosts=4", error));
    CHECK(error.find("'ring'") != std::string::npos);
    CHECK_FALSE(parse_fabric_spec("leaf-spine:hosts=8,colour=3", error));
    CHECK(error.find("colour") != std::string::npos);
    CHECK_FALSE(parse_fabric_spec("leaf-spine:routing=random", error));
    CHECK_FALSE(parse_fabric_spec("fat-tree:k=4,hosts=17", error));
    CHECK(error.find("at most 16") != std::string::npos);
    CHECK_FALSE(parse_fabric_spec("fat-tree:k=3", error));
    CHECK_FALSE(parse_fabric_spec("leaf-spine:ecn_kmin_kb=100,ecn_kmax_kb=50", error));
    CHECK_FALSE(parse_fabric_spec("leaf-spine:hosts=1", error));
    auto spec =
        parse_fabric_spec("leaf-spine:routing=adaptive,flowlet_us=20,ecn_kmax_kb=100", error);
    REQUIRE(spec);
    CHECK(spec->routing == Routing::Adaptive);
    CHECK(spec->flowlet_gap_ns == 20'000);
    REQUIRE(spec->ecn);
    CHECK(spec->ecn->kmax_bytes == 100 * 1024);
}

TEST_CASE("fabric: a NIC holds its senders back at nic_queue_kb, else at queue_kb") {
    for (const auto& [spec, limit] :
         {std::pair{"leaf-spine:hosts=2,leaves=1,spines=1,queue_kb=256", 256u * 1024},
          std::pair{"leaf-spine:hosts=2,leaves=1,spines=1,queue_kb=256,nic_queue_kb=32",
                    32u * 1024}}) {
        INFO(spec);
        Frames frames;
        Fabric fabric(build_topology(spec_of(spec)), spec_of(spec), kCapacity, frames);
        uint64_t queued = 0;
        while (fabric.nic_room(0, 4096)) {
            fabric.send(0, frames.frame(0, 1, 0xc000, 4096), 0);
            queued += 4096;
            REQUIRE(queued <= 2 * limit);
        }
        CHECK(queued <= limit);
        CHECK(queued + 4096 > limit);
    }
}

TEST_CASE("fabric: every frame arrives over a shortest path, and none loops") {
    for (const char* routing : {"ecmp", "adaptive", "spray"}) {
        INFO(routing);
        Frames frames;
        Fabric fabric(build_topology(spec_of("fat-tree:k=4,hosts=16")),
                      spec_of(std::string("fat-tree:k=4,hosts=16,routing=") + routing), kCapacity,
                      frames);
        // A host reaches another on its edge switch through 1 switch, in its pod through
        // 3, in another pod through 5.
        uint64_t expected_hops = 0, sent = 0;
        uint64_t now = 0;
        for (uint32_t s = 0; s < 16; ++s)
            for (uint32_t d = 0; d < 16; ++d) {
                if (s == d)
                    continue;
                const uint32_t switches = s / 2 == d / 2 ? 1 : s / 4 == d / 4 ? 3 : 5;
                for (uint16_t flow = 0; flow < 8; ++flow) {
                    fabric.send(s, frames.frame(s, d, static_cast<uint16_t>(0xc000 + flow)), now);
                    expected_hops += switches;
                    ++sent;
                }
                now += 1000;
            }
        fabric.advance(UINT64_MAX / 2);
        CHECK(frames.dropped.empty());
        REQUIRE(frames.delivered.size() == sent);
        for (const auto& [endpoint, frame] : frames.delivered)
            CHECK(frames.data[frame][33] == endpoint + 1); // to its own destination
        CHECK(forwarded_total(fabric) == expected_hops);
        CHECK(fabric.next_event() == UINT64_MAX);
    }
}

TEST_CASE("fabric: ECMP spreads many flows over the spines within 10% of uniform") {
    Frames frames;
    const FabricSpec spec = spec_of("leaf-spine:hosts=8,leaves=2,spines=4,rate_gbps=100");
    Fabric fabric(build_topology(spec), spec, kCapacity, frames);
    // 4000 flows h0 -> h4, one frame each, their RoCE entropy (the UDP source port) in
    // softhca's range; and the same flows always take the same spine.
    std::map<uint16_t, uint32_t> first_choice;
    uint64_t now = 0;
    for (int round = 0; round < 2; ++round)
        for (uint16_t flow = 0; flow < 4000; ++flow) {
            fabric.send(0, frames.frame(0, 4, static_cast<uint16_t>(0xc000 + flow), 64), now);
            now += 100'000; // one at a time: the queues stay empty
            fabric.advance(now);
        }
    REQUIRE(frames.delivered.size() == 8000);
    for (uint32_t s = 0; s < 4; ++s) {
        const uint64_t frames_via =
            port_between(fabric, "leaf0", "spine" + std::to_string(s)).counters.frames;
        INFO("spine" << s);
        CHECK(frames_via >= 0.9 * 2000);
        CHECK(frames_via <= 1.1 * 2000);
    }
    // Each flow's two frames went one way: the spines' downlinks carried as much as the
    // uplinks (a flow never split), checked per spine.
    for (uint32_t s = 0; s < 4; ++s)
        CHECK(port_between(fabric, "spine" + std::to_string(s), "leaf1").counters.frames ==
              port_between(fabric, "leaf0", "spine" + std::to_string(s)).counters.frames);
    CHECK(port_between(fabric, "leaf0", "spine0").counters.frames % 2 == 0);
}

TEST_CASE("fabric: adaptive routing puts a new flowlet on the idle spine, and keeps a flow's "
          "packets in order") {
    // Two flows that ECMP hashes onto the same spine: under ECMP they share it, under
    // adaptive routing the second (a new flowlet) takes the other.
    const std::string base = "leaf-spine:hosts=4,leaves=2,spines=2,rate_gbps=10,queue_kb=1024";
    // Flow A is h0's with entropy 0xc000; flow B the first of h1's that ECMP puts on A's
    // spine.
    std::pair<uint16_t, uint16_t> colliding{0xc000, 0};
    {
        Frames frames;
        const FabricSpec spec = spec_of(base);
        Fabric fabric(build_topology(spec), spec, kCapacity, frames);
        const auto spine_of = [&](uint32_t source, uint16_t entropy, uint64_t at) {
            const uint64_t before = port_between(fabric, "leaf0", "spine0").counters.frames;
            fabric.send(source, frames.frame(source, 2, entropy, 64), at);
            fabric.advance(at + 500'000);
            return port_between(fabric, "leaf0", "spine0").counters.frames > before ? 0 : 1;
        };
        const int a_spine = spine_of(0, colliding.first, 0);
        for (uint16_t flow = 1; flow < 64 && !colliding.second; ++flow)
            if (spine_of(1, static_cast<uint16_t>(0xc000 + flow), uint64_t{flow} * 1'000'000) ==
                a_spine)
                colliding.second = static_cast<uint16_t>(0xc000 + flow);
        REQUIRE(colliding.second != 0);
    }
    for (const char* routing : {"ecmp", "adaptive"}) {
        INFO(routing);
        Frames frames;
        const FabricSpec spec = spec_of(base + ",routing=" + routing + ",flowlet_us=50");
        Fabric fabric(build_topology(spec), spec, kCapacity, frames);
        // Flow A from h0, 200 frames of 4 KiB back to back (its NIC paces them at 10 Gb/s);
        // flow B from h1 starts while A's frames still cross the leaf.
        std::vector<uint32_t> a_frames;
        for (int i = 0; i < 200; ++i) {
            const Packet p = frames.frame(0, 2, colliding.first, 4096);
            a_frames.push_back(p.frame);
            fabric.send(0, p, 0);
        }
        fabric.advance(100'000);
        for (int i = 0; i < 200; ++i)
            fabric.send(1, frames.frame(1, 2, colliding.second, 4096), 100'000);
        fabric.advance(UINT64_MAX / 2);
        const uint64_t via0 = port_between(fabric, "leaf0", "spine0").counters.frames;
        const uint64_t via1 = port_between(fabric, "leaf0", "spine1").counters.frames;
        if (std::string(routing) == "ecmp")
            CHECK((via0 == 400 || via1 == 400)); // both on one spine
        else
            CHECK((via0 == 200 && via1 == 200)); // one each
        // A's frames arrived in the order sent.
        std::vector<uint32_t> a_arrived;
        for (const auto& [endpoint, frame] : frames.delivered)
            if (std::find(a_frames.begin(), a_frames.end(), frame) != a_frames.end())
                a_arrived.push_back(frame);
        CHECK(a_arrived == a_frames);
    }
}

TEST_CASE("fabric: per-packet spraying uses every spine for one flow") {
    Frames frames;
    const FabricSpec spec = spec_of("leaf-spine:hosts=4,leaves=2,spines=2,rate_gbps=10,"
                                    "routing=spray");
    Fabric fabric(build_topology(spec), spec, kCapacity, frames);
    for (int i = 0; i < 100; ++i)
        fabric.send(0, frames.frame(0, 2, 0xc001, 4096), 0);
    fabric.advance(UINT64_MAX / 2);
    CHECK(frames.delivered.size() == 100);
    CHECK(port_between(fabric, "leaf0", "spine0").counters.frames >= 40);
    CHECK(port_between(fabric, "leaf0", "spine1").counters.frames >= 40);
}

TEST_CASE("fabric: a failed link: its switch stops using it at once, the others after the "
          "convergence delay, and it is used again after it comes back") {
    Frames frames;
    const FabricSpec spec = spec_of("leaf-spine:hosts=4,leaves=2,spines=2,rate_gbps=10,"
                                    "converge_ms=5");
    Fabric fabric(build_topology(spec), spec, kCapacity, frames);
    const uint32_t leaf0 = fabric.topology().node("leaf0");
    const uint32_t spine0 = fabric.topology().node("spine0");
    CHECK(fabric.next_hops(leaf0, 2).size() == 2);
    // spine0's link to leaf1 goes down at 1 ms.
    REQUIRE(fabric.set_link("spine0", "leaf1", false, 1'000'000));
    CHECK_FALSE(fabric.set_link("spine0", "h0", false, 1'000'000));
    CHECK(fabric.next_hops(spine0, 2).empty());    // spine0 knows at once
    CHECK(fabric.next_hops(leaf0, 2).size() == 2); // leaf0 has not heard yet
    // Before convergence, flows leaf0 hashes to spine0 are lost there (no route).
    for (uint16_t flow = 0; flow < 64; ++flow)
        fabric.send(0, frames.frame(0, 2, static_cast<uint16_t>(0xc000 + flow), 64), 2'000'000);
    fabric.advance(3'000'000);
    const uint32_t lost = static_cast<uint32_t>(frames.dropped.size());
    CHECK(lost > 0);
    CHECK(fabric.switch_counters(spine0).no_route == lost);
    CHECK(frames.delivered.size() == 64 - lost);
    // After 5 ms every switch routes around it: everything arrives, through spine1.
    CHECK(fabric.next_event() == 6'000'000);
    fabric.advance(6'000'000);
    CHECK(fabric.next_hops(leaf0, 2).size() == 1);
    const size_t delivered = frames.delivered.size();
    for (uint16_t flow = 0; flow < 64; ++flow)
        fabric.send(0, frames.frame(0, 2, static_cast<uint16_t>(0xc000 + flow), 64), 7'000'000);
    fabric.advance(8'000'000);
    CHECK(frames.delivered.size() == delivered + 64);
    CHECK(frames.dropped.size() == lost);
    // Back up: used again at once.
    REQUIRE(fabric.set_link("leaf1", "spine0", true, 9'000'000));
    CHECK(fabric.next_hops(leaf0, 2).size() == 2);
    CHECK(fabric.next_hops(spine0, 2).size() == 1);
    fabric.advance(15'000'000);
    // Frames on a link when it fails are lost with it, and counted.
    for (int i = 0; i < 10; ++i)
        fabric.send(2, frames.frame(2, 0, 0xc000, 4096), 16'000'000);
    REQUIRE(fabric.set_link("h2", "leaf1", false, 16'000'001));
    fabric.advance(20'000'000);
    CHECK(port_between(fabric, "h2", "leaf1").counters.link_down == 10);
}

TEST_CASE("fabric: incast fills the receiver's switch port: drops past its limit, ECN marks "
          "above kmin, and the senders' NICs never drop") {
    Frames frames;
    const FabricSpec spec = spec_of("leaf-spine:hosts=8,leaves=1,spines=1,rate_gbps=10,"
                                    "queue_kb=64,ecn_kmin_kb=8,ecn_kmax_kb=32,ecn_pmax=0.2");
    Fabric fabric(build_topology(spec), spec, kCapacity, frames);
    // 7 hosts send 100 frames of 4 KiB each to h7 at once.
    incast_into_h7(fabric, frames);
    fabric.advance(UINT64_MAX / 2);
    const Fabric::Egress& to_h7 = port_between(fabric, "leaf0", "h7");
    CHECK(to_h7.counters.dropped > 0);
    CHECK(to_h7.counters.marked > 0);
    CHECK(to_h7.counters.peak_queue_bytes <= 64 * 1024);
    CHECK(frames.dropped.size() == to_h7.counters.dropped);
    CHECK(frames.delivered.size() + frames.dropped.size() == 700);
    for (uint32_t s = 0; s < 7; ++s)
        CHECK(port_between(fabric, "h" + std::to_string(s), "leaf0").counters.dropped == 0);
    // Marked frames carry CE in their IP header.
    size_t ce = 0;
    for (const auto& [endpoint, frame] : frames.delivered)
        ce += (frames.data[frame][15] & 3) == 3;
    CHECK(ce == to_h7.counters.marked);
}

TEST_CASE("fabric: injected faults act on the links between switches only") {
    Frames frames;
    FabricSpec spec = spec_of("leaf-spine:hosts=4,leaves=2,spines=1,rate_gbps=10");
    spec.faults.drop = 0.1;
    spec.faults.duplicate = 0.05;
    Fabric fabric(build_topology(spec), spec, kCapacity, frames);
    // Within a leaf: nothing happens to them.
    for (int i = 0; i < 1000; ++i)
        fabric.send(0, frames.frame(0, 1, 0xc000, 256), uint64_t(i) * 1000);
    fabric.advance(UINT64_MAX / 2);
    CHECK(frames.delivered.size() == 1000);
    CHECK(frames.dropped.empty());
    // Across the spine: about a tenth lost on each of the two spine links, some doubled.
    frames.delivered.clear();
    for (int i = 0; i < 1000; ++i)
        fabric.send(0, frames.frame(0, 2, 0xc000, 256), 2'000'000'000 + uint64_t(i) * 1000);
    fabric.advance(UINT64_MAX / 2);
    CHECK(frames.dropped.size() > 100);
    CHECK(frames.dropped.size() < 300);
    CHECK(frames.copies > 0);
    CHECK(frames.delivered.size() + frames.dropped.size() == 1000 + frames.copies);
}

TEST_CASE("fabric: under PFC an incast loses nothing: the receiver's leaf pauses the links "
          "that feed it, and the pauses spread upstream to the senders' NICs") {
    Frames frames;
    // 7 hosts (4 on leaf0, 3 on leaf1) send 100 frames of 4 KiB each to h7 on leaf1.
    const FabricSpec spec = spec_of("leaf-spine:hosts=8,leaves=2,spines=1,rate_gbps=10,"
                                    "queue_kb=64,pfc=1,pfc_xoff_kb=32");
    Fabric fabric(build_topology(spec), spec, kCapacity, frames);
    incast_into_h7(fabric, frames);
    fabric.advance(UINT64_MAX / 2);
    CHECK(frames.dropped.empty());
    CHECK(frames.delivered.size() == 700);
    uint64_t drops = 0;
    for (const Fabric::Egress& e : fabric.egress_ports()) {
        drops += e.counters.dropped;
        CHECK_FALSE(e.paused); // all resumed once drained
    }
    CHECK(drops == 0);
    // leaf1 paused the spine's link and its own hosts' links; the spine paused leaf0's
    // uplink; leaf0 paused its hosts' links.
    CHECK(port_between(fabric, "spine0", "leaf1").counters.pauses > 0);
    CHECK(port_between(fabric, "h4", "leaf1").counters.pauses > 0);
    CHECK(port_between(fabric, "leaf0", "spine0").counters.pauses > 0);
    CHECK(port_between(fabric, "h0", "leaf0").counters.pauses > 0);
    // Paused, the senders' NICs held what their links could not take: the NIC's queue
    // grew past what a free link would leave.
    CHECK(port_between(fabric, "h0", "leaf0").counters.peak_queue_bytes > 64 * 1024);
    // Each switch port held about XOFF and what was on the way when it paused.
    CHECK(port_between(fabric, "leaf1", "h7").counters.peak_queue_bytes < 512 * 1024);
    // h7's link ran at its rate: 700 frames of 4 KiB at 10 Gb/s take 2.3 ms.
    CHECK(port_between(fabric, "leaf1", "h7").counters.frames == 700);
}

TEST_CASE("fabric: a frame duplicated on the way carries its own bytes: marks made on the "
          "copy are the copy's") {
    Frames frames;
    // Uplinks at 20 Gb/s: only leaf1's port to h2 (10 Gb/s, offered 15) builds a queue past
    // 8 KiB, and it marks every frame that finds one there; half the frames are doubled
    // on the spine links before it.
    FabricSpec spec = spec_of("leaf-spine:hosts=4,leaves=2,spines=1,rate_gbps=10,"
                              "queue_kb=4096,ecn_kmin_kb=8,ecn_kmax_kb=9,ecn_pmax=1");
    spec.faults.duplicate = 0.5;
    Fabric fabric(build_topology(spec), spec, kCapacity, frames);
    for (int i = 0; i < 200; ++i)
        fabric.send(0, frames.frame(0, 2, 0xc000, 1024), 0);
    fabric.advance(UINT64_MAX / 2);
    REQUIRE(frames.copies > 20);
    CHECK(frames.delivered.size() == 200 + frames.copies);
    size_t ce = 0;
    for (const auto& [endpoint, frame] : frames.delivered)
        ce += (frames.data[frame][15] & 3) == 3;
    const uint64_t marked = port_between(fabric, "leaf1", "h2").counters.marked;
    CHECK(marked > 50);
    CHECK(port_between(fabric, "leaf0", "spine0").counters.marked == 0);
    CHECK(port_between(fabric, "spine0", "leaf1").counters.marked == 0);
    CHECK(ce == marked);
}
