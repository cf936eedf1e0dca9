// The fabric's forwarding, sans I/O: frames given by the endpoints (the engine's ports)
// cross links and switches in simulated time and come out at their destination endpoint,
// or are lost on the way. Every direction of every link is an egress port: a FIFO queue
// (drop-tail at its limit; RED marking of ECN CE at switches, RFC 3168 and RoCEv2
// A17.9.1), a wire that serializes one frame at a time at the link's rate, and the link's
// delay. Events run in time order, each frame joining its next queue at the moment it
// arrives, so queues, marks, drops and pauses are those of the modelled fabric however
// late the caller looks. The caller owns the frames: it names each by an index below the
// capacity given here, and hears of each one's fate through FabricSink.
//
// Routing (fabric_topology.hpp's Routing): a switch chooses among the ports on shortest
// paths to the destination whose link is up. The routes are shortest paths over the links
// that were up when they were last computed, so a frame's distance to its destination
// falls at every hop and no frame loops; a switch stops using its own port the moment the
// link goes down (and drops what has no other way), and every switch learns the new
// shortest paths `convergence_ns` later. A link that comes up is routed over at once.
//
// With PFC (FabricSpec::pfc) a switch's queues never drop: each link counts the bytes it
// brought that still wait at its far end, and past XOFF the far end pauses it (the frame
// on the wire finishes; no other starts) until they fall to XON, half of XOFF. Pauses
// spread upstream hop by hop to the NICs, whose senders wait (nic_room).
#pragma once

#include "fabric_topology.hpp"
#include "fault_injector.hpp"
#include "softhca/transport/congestion_control.hpp"

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace softhca::engine::fabric {

// One frame as the fabric sees it: the caller's index for it and its bytes (ECN marking
// rewrites them), where it goes, and its flow's hash (ECMP, flowlets).
struct Packet {
    uint32_t frame = 0;
    uint8_t* data = nullptr;
    uint32_t length = 0;
    uint32_t destination = 0; // endpoint
    uint64_t flow_hash = 0;
};

// The hash of a frame's five-tuple (IPv4 or IPv6 addresses, protocol, UDP ports): what a
// switch's ECMP hashes. RoCEv2 puts a QP's entropy in the UDP source port (A17.5.1.1).
uint64_t five_tuple_hash(const uint8_t* frame, uint32_t length);

class FabricSink {
  public:
    virtual ~FabricSink() = default;
    virtual void deliver(uint32_t endpoint, uint32_t frame) = 0;
    virtual void drop(uint32_t frame) = 0;
    // A copy of `frame` (injected duplication) and its bytes at `data`, or UINT32_MAX when
    // there is no room.
    virtual uint32_t copy(uint32_t frame, uint8_t*& data) = 0;
};

// What one egress port (a direction of a link) did.
struct EgressCounters {
    uint64_t frames = 0; // arrived at the far end (after injected faults)
    uint64_t bytes = 0;
    uint64_t link_down = 0;   // lost with the link
    uint64_t queued = 0;      // joined the queue (at a switch: times routing chose the port)
    uint64_t dropped = 0;     // found the queue full
    uint64_t marked = 0;      // ECN Congestion Experienced set
    uint64_t pauses = 0;      // PFC: times the far end paused the port
    uint64_t queue_bytes = 0; // waiting or on the wire, when last looked at
    uint64_t peak_queue_bytes = 0;
};

struct SwitchCounters {
    uint64_t forwarded = 0;
    uint64_t no_route = 0;  // no port up toward the destination
    uint64_t hop_limit = 0; // more hops than any shortest path (cannot happen; counted)
};

class Fabric {
  public:
    static constexpr uint32_t kMaxHops = 64;
    static constexpr size_t kFlowletSlots = 4096; // per switch

    Fabric(const Topology& topology, const FabricSpec& spec, uint32_t frame_capacity,
           FabricSink& sink);

    const Topology& topology() const { return topology_; }
    const FabricSpec& spec() const { return spec_; }
    uint32_t endpoints() const { return static_cast<uint32_t>(topology_.endpoints.size()); }

    // Endpoint `source` puts a frame on its link at `now` (no earlier than the last time
    // given). The NIC's queue never drops: nic_room() says when its senders should wait.
    // A frame for an endpoint that does not exist, or on a link that is down, is dropped
    // (sink.drop) at once.
    void send(uint32_t source, const Packet& packet, uint64_t now);
    bool nic_room(uint32_t source, uint32_t bytes) const;

    // Runs the fabric up to `now`: the sink hears of every frame delivered or lost by then.
    // Returns how many were delivered.
    size_t advance(uint64_t now);
    // When the next frame reaches a node, leaves a wire, or the routes change; UINT64_MAX
    // when nothing is under way.
    uint64_t next_event() const;

    // Takes the link between nodes `a` and `b` (names as in the topology) down or up at
    // `now`. False when there is no such link.
    bool set_link(const std::string& a, const std::string& b, bool up, uint64_t now);

    struct Egress {
        uint32_t from = 0, to = 0; // nodes
        uint32_t link = 0;
        bool up = true;
        bool nic = false;    // an endpoint's port: never drops, never marks
        double rate_bps = 0; // 0: no limit
        uint64_t delay_ns = 0;
        uint64_t queue_limit_bytes = 0; // 0: none (NICs; switches under PFC)
        // Frames not yet on the wire, and frames on their way to the far end: lists
        // linked through the fabric's per-frame `next_` (a frame is in one at a time).
        uint32_t waiting_first = UINT32_MAX, waiting_last = UINT32_MAX;
        uint32_t flight_first = UINT32_MAX, flight_last = UINT32_MAX;
        uint64_t queue_bytes = 0;      // waiting and on the wire
        uint32_t on_wire = UINT32_MAX; // the frame being serialized
        bool paused = false;           // PFC: the far end asked it to wait
        uint64_t far_end_bytes = 0;    // PFC: bytes it brought that wait at the far end
        FaultInjector faults;          // between switches, when --faults is given
        uint32_t held = UINT32_MAX;    // a frame held back behind the next (reordering)
        EgressCounters counters;
    };
    const std::vector<Egress>& egress_ports() const { return egress_; }
    const SwitchCounters& switch_counters(uint32_t node) const { return switches_[node]; }
    // The ports a switch may choose toward endpoint `destination` now (tests).
    std::vector<uint32_t> next_hops(uint32_t node, uint32_t destination) const;

  private:
    struct Flowlet {
        uint64_t flow = 0; // the flow's hash and destination: whose slot it is
        uint32_t egress = UINT32_MAX;
        uint64_t last_seen = 0;
    };
    enum class EventKind : uint8_t { WireDone, Arrival };
    struct Event {
        uint64_t time;
        uint32_t egress;
        EventKind kind;
        bool operator>(const Event& o) const { return time > o.time; }
    };
    void compute_routes();
    void push_event(uint64_t time, uint32_t egress, EventKind kind);
    void enqueue(uint32_t egress, uint32_t frame, uint64_t now);
    void start_next(uint32_t egress, uint64_t now);
    // The lists of frames a port holds (waiting, in flight), linked through next_.
    void append(uint32_t& first, uint32_t& last, uint32_t frame);
    uint32_t take_first(uint32_t& first, uint32_t& last);
    void wire_done(uint32_t egress, uint64_t now);
    void left_node(uint32_t frame, uint64_t now);
    void cross(uint32_t egress, uint32_t frame, uint64_t now, size_t& delivered);
    void reach(uint32_t node, uint32_t frame, uint64_t now, size_t& delivered);
    void arrive(uint32_t node, uint32_t frame, uint64_t now);
    uint32_t choose(uint32_t node, const Packet& packet, uint64_t now);

    Topology topology_;
    FabricSpec spec_;
    FabricSink& sink_;
    std::vector<Egress> egress_;
    std::vector<std::vector<uint32_t>> out_; // egress ports of each node
    std::vector<uint32_t> endpoint_of_node_; // UINT32_MAX for switches
    // next hops of node n toward endpoint d: hops_[route_first_[n * endpoints + d] ...]
    std::vector<uint32_t> route_first_, route_count_, hops_;
    std::vector<Packet> packets_;     // by frame index
    std::vector<uint8_t> hop_count_;  // by frame index
    std::vector<uint32_t> came_over_; // by frame index: the link it came over (PFC)
    std::vector<uint32_t> next_;      // by frame index: the next in its port's list
    std::vector<SwitchCounters> switches_;
    std::vector<std::vector<Flowlet>> flowlets_; // adaptive routing, per switch
    std::vector<uint32_t> spray_turn_;
    std::vector<Event> events_; // a min-heap
    std::optional<transport::EcnMarker> marker_;
    std::mt19937_64 rng_;
    std::uniform_real_distribution<double> uniform_{0.0, 1.0};
    uint64_t reroute_at_ = UINT64_MAX;
};

} // namespace softhca::engine::fabric
