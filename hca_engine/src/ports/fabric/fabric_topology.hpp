// A fabric's shape (--fabric): the endpoints (a host's NIC, each one device of the engine),
// the switches, and the links between them, as a datacenter builds them: a leaf-spine with
// a chosen oversubscription, a k-ary fat-tree (Al-Fares et al., SIGCOMM 2008), or a
// rail-optimised layout (NIC i of every host on rail switch i, the rails joined by
// spines). Every link has a rate, a one-way delay and, at each end, an egress queue of a
// limited size; switch ports may mark ECN. Sans I/O: fabric.hpp forwards over it.
#pragma once

#include "fault_injector.hpp"
#include "softhca/transport/congestion_control.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace softhca::engine::fabric {

struct LinkParameters {
    double rate_bps = 10e9;
    uint64_t delay_ns = 1'000;         // one way
    uint64_t queue_bytes = 256 * 1024; // each end's egress queue
};

// How a switch chooses among the equal-cost next hops toward a destination.
enum class Routing {
    Ecmp,     // a hash of the five-tuple (RoCEv2's entropy: the UDP source port)
    Adaptive, // per flowlet: a flow idle for the flowlet gap takes the least-loaded port
    Spray,    // per packet: the least-loaded port (reorders; for study)
};

struct FabricSpec {
    enum class Kind { LeafSpine, FatTree, Rail };
    Kind kind = Kind::LeafSpine;
    uint32_t hosts = 8;
    // leaf-spine: hosts spread over the leaves in order; one link per leaf and spine, at the
    // rate that makes a leaf's host bandwidth `oversubscription` times its uplinks'.
    uint32_t leaves = 2;
    uint32_t spines = 2;
    double oversubscription = 1;
    // fat-tree: k pods of k/2 edge and k/2 aggregation switches, (k/2)^2 cores, every link
    // at the host rate; up to k^3/4 hosts (the first `hosts` of them are populated).
    uint32_t k = 4;
    // rail: NICs per host, each on the rail switch of its number; `spines` join the rails
    // at the host rate times hosts / spines.
    uint32_t rails = 2;
    LinkParameters link; // host links; switch links at the rates above
    // RED marking of ECN CE at every switch egress (and at the hosts' NICs: none).
    std::optional<transport::EcnMarkingParameters> ecn;
    Routing routing = Routing::Ecmp;
    uint64_t flowlet_gap_ns = 50'000;
    // After a link goes down, the switches at its ends stop using it at once; every other
    // switch routes around it this much later. A link that comes up is used at once.
    uint64_t convergence_ns = 5'000'000;
    uint64_t seed = 1;
    // Priority flow control (802.1Qbb) at every switch: the switch's queues never drop; a
    // link whose frames hold more than pfc_xoff_bytes waiting at its far end is paused
    // (it finishes the frame on the wire, then starts none) until they fall to half that,
    // and the pauses spread upstream to the NICs, whose senders then wait. One class.
    bool pfc = false;
    uint64_t pfc_xoff_bytes = 64 * 1024;
    // Injected faults (--faults) on the links between switches: the fabric's core, where
    // a real one loses frames (each direction its own stream). Off by default.
    FaultConfig faults;
    // netns=1: every host gets a network namespace of its own, <prefix>-<host> (as `ip
    // netns` names them), holding its NICs' addresses on interfaces eth0, eth1, ... that
    // a bridge joins (host_namespaces.hpp); `softhca exec --host NAME` runs a program
    // there, seeing only that host's devices.
    bool host_namespaces = false;
    // How much a host's NIC holds before its QPs wait (nic_queue_kb), 0: queue_kb. A real
    // NIC's is shallow, its QPs' scheduler choosing what goes next; the engine's needs to
    // cover the time between its rounds at the link's rate (milliseconds on 2 busy cores).
    uint64_t nic_queue_limit = 0;
    uint64_t nic_queue_bytes() const {
        return nic_queue_limit ? nic_queue_limit : link.queue_bytes;
    }

    uint32_t endpoint_count() const { return kind == Kind::Rail ? hosts * rails : hosts; }
};

// Parses "leaf-spine:hosts=8,leaves=2,spines=2,oversubscription=2,rate_gbps=10,delay_us=1,
// queue_kb=256,routing=adaptive,flowlet_us=50,converge_ms=5,ecn_kmin_kb=..,ecn_kmax_kb=..,
// ecn_pmax=..,pfc=1,pfc_xoff_kb=64,nic_queue_kb=..,seed=N,netns=1", "fat-tree:k=4,..." or
// "rail:hosts=4,rails=2,spines=1,...". On error returns nullopt and says what is wrong in `error`.
std::optional<FabricSpec> parse_fabric_spec(const std::string& text, std::string& error);
std::string describe(const FabricSpec& spec);
const char* routing_name(Routing routing);

struct Node {
    std::string name; // "h3" / "h3n1" (an endpoint), "leaf0", "spine1", "edge2", "core0"
    bool is_switch = false;
    uint32_t tier = 0; // 0: endpoint; 1: leaf, edge or rail; 2: spine or aggregation; 3: core
    std::string host;  // an endpoint's host ("h3"): the NICs of one host share it
};

struct Link {
    uint32_t a = 0, b = 0; // node indices; the link is both directions
    LinkParameters parameters;
};

struct Topology {
    std::vector<Node> nodes;
    std::vector<Link> links;
    std::vector<uint32_t> endpoints;              // node of endpoint (device) i
    uint32_t node(const std::string& name) const; // UINT32_MAX when there is none
};

Topology build_topology(const FabricSpec& spec);

} // namespace softhca::engine::fabric
