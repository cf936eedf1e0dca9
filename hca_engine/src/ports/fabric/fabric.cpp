#include "fabric.hpp"

#include "softhca/transport/roce_frame.hpp"

#include <algorithm>
#include <cstring>
#include <functional>

namespace softhca::engine::fabric {

namespace {

constexpr uint32_t kNone = UINT32_MAX;
constexpr size_t kMostHops = 64; // next hops a switch weighs at once

// splitmix64's finalizer: every bit of the flow's hash and the switch's salt reaches
// every bit of the choice.
uint64_t mix(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

uint64_t load(const uint8_t* p, size_t n) {
    uint64_t v = 0;
    std::memcpy(&v, p, std::min<size_t>(n, 8));
    return v;
}

} // namespace

uint64_t five_tuple_hash(const uint8_t* frame, uint32_t length) {
    if (length < 14)
        return 0;
    size_t at = 12;
    auto type = static_cast<uint16_t>(frame[at] << 8 | frame[at + 1]);
    if (type == 0x8100 && length >= 18) { // a priority tag
        at += 4;
        type = static_cast<uint16_t>(frame[at] << 8 | frame[at + 1]);
    }
    at += 2;
    uint64_t h = type;
    size_t l4 = 0;
    uint8_t protocol = 0;
    if (type == 0x0800 && length >= at + 20) {
        protocol = frame[at + 9];
        h = mix(h ^ load(frame + at + 12, 8)); // source and destination
        l4 = at + size_t{frame[at] & 0x0fu} * 4;
    } else if (type == 0x86dd && length >= at + 40) {
        protocol = frame[at + 6];
        for (size_t i = 8; i < 40; i += 8)
            h = mix(h ^ load(frame + at + i, 8));
        l4 = at + 40;
    }
    if (protocol == 17 && l4 + 4 <= length)
        h = mix(h ^ (uint64_t{protocol} << 32) ^ load(frame + l4, 4)); // the two ports
    return mix(h);
}

Fabric::Fabric(const Topology& topology, const FabricSpec& spec, uint32_t frame_capacity,
               FabricSink& sink)
    : topology_(topology), spec_(spec), sink_(sink), rng_(spec.seed) {
    const size_t nodes = topology_.nodes.size();
    out_.resize(nodes);
    endpoint_of_node_.assign(nodes, kNone);
    for (uint32_t e = 0; e < topology_.endpoints.size(); ++e)
        endpoint_of_node_[topology_.endpoints[e]] = e;
    if (spec_.ecn)
        marker_ = transport::EcnMarker(*spec_.ecn);
    egress_.reserve(topology_.links.size() * 2);
    for (uint32_t l = 0; l < topology_.links.size(); ++l) {
        const Link& link = topology_.links[l];
        for (const auto& [from, to] : {std::pair{link.a, link.b}, std::pair{link.b, link.a}}) {
            Egress egress;
            egress.from = from;
            egress.to = to;
            egress.link = l;
            // A NIC's queue holds its senders back (nic_room) instead of dropping; a
            // switch's drops what finds it full, unless PFC keeps it lossless.
            egress.nic = !topology_.nodes[from].is_switch;
            egress.rate_bps = link.parameters.rate_bps;
            egress.delay_ns = link.parameters.delay_ns;
            egress.queue_limit_bytes = egress.nic || spec_.pfc ? 0 : link.parameters.queue_bytes;
            if (!egress.nic && topology_.nodes[to].is_switch)
                egress.faults = FaultInjector(spec_.faults, egress_.size());
            out_[from].push_back(static_cast<uint32_t>(egress_.size()));
            egress_.push_back(std::move(egress));
        }
    }
    packets_.resize(frame_capacity);
    hop_count_.resize(frame_capacity);
    came_over_.assign(frame_capacity, kNone);
    next_.assign(frame_capacity, kNone);
    switches_.resize(nodes);
    flowlets_.resize(nodes);
    if (spec_.routing == Routing::Adaptive)
        for (uint32_t n = 0; n < nodes; ++n)
            if (topology_.nodes[n].is_switch)
                flowlets_[n].resize(kFlowletSlots);
    spray_turn_.resize(nodes);
    // At most one wire event per port and one arrival per frame are pending.
    events_.reserve(egress_.size() + frame_capacity + 16);
    compute_routes();
}

void Fabric::compute_routes() {
    const size_t nodes = topology_.nodes.size();
    const size_t endpoints = topology_.endpoints.size();
    route_first_.assign(nodes * endpoints, 0);
    route_count_.assign(nodes * endpoints, 0);
    hops_.clear();
    std::vector<uint32_t> distance(nodes), frontier;
    for (uint32_t d = 0; d < endpoints; ++d) {
        // Distances to endpoint d over the links up now; no path crosses another endpoint.
        std::fill(distance.begin(), distance.end(), kNone);
        const uint32_t origin = topology_.endpoints[d];
        distance[origin] = 0;
        frontier.assign(1, origin);
        for (size_t i = 0; i < frontier.size(); ++i) {
            const uint32_t n = frontier[i];
            if (n != origin && endpoint_of_node_[n] != kNone)
                continue;
            for (uint32_t e : out_[n]) {
                const uint32_t to = egress_[e].to;
                if (egress_[e].up && distance[to] == kNone) {
                    distance[to] = distance[n] + 1;
                    frontier.push_back(to);
                }
            }
        }
        for (uint32_t n = 0; n < nodes; ++n) {
            const size_t at = n * endpoints + d;
            route_first_[at] = static_cast<uint32_t>(hops_.size());
            if (distance[n] == kNone || n == origin)
                continue;
            for (uint32_t e : out_[n])
                if (egress_[e].up && distance[egress_[e].to] + 1 == distance[n])
                    hops_.push_back(e);
            route_count_[at] = static_cast<uint32_t>(hops_.size()) - route_first_[at];
        }
    }
}

std::vector<uint32_t> Fabric::next_hops(uint32_t node, uint32_t destination) const {
    const size_t at = node * topology_.endpoints.size() + destination;
    std::vector<uint32_t> hops;
    for (uint32_t i = 0; i < route_count_[at]; ++i)
        if (egress_[hops_[route_first_[at] + i]].up)
            hops.push_back(hops_[route_first_[at] + i]);
    return hops;
}

void Fabric::send(uint32_t source, const Packet& packet, uint64_t now) {
    if (packet.frame >= packets_.size())
        return; // not a frame of ours: nothing to give back
    if (source >= endpoints() || packet.destination >= endpoints()) {
        sink_.drop(packet.frame);
        return;
    }
    packets_[packet.frame] = packet;
    hop_count_[packet.frame] = 0;
    came_over_[packet.frame] = kNone;
    if (packet.destination == source) {
        sink_.deliver(source, packet.frame);
        return;
    }
    const uint32_t nic = out_[topology_.endpoints[source]].front();
    if (!egress_[nic].up) {
        ++egress_[nic].counters.link_down;
        sink_.drop(packet.frame);
        return;
    }
    enqueue(nic, packet.frame, now);
}

bool Fabric::nic_room(uint32_t source, uint32_t bytes) const {
    if (source >= endpoints())
        return true;
    const Egress& nic = egress_[out_[topology_.endpoints[source]].front()];
    return nic.queue_bytes == 0 || nic.queue_bytes + bytes <= spec_.nic_queue_bytes();
}

void Fabric::push_event(uint64_t time, uint32_t egress, EventKind kind) {
    events_.push_back({time, egress, kind});
    std::push_heap(events_.begin(), events_.end(), std::greater<Event>());
}

// A frame joins port `egress`'s queue at `now`: dropped when the queue is full, marked CE
// (when ECN-capable) with the RED probability of the depth it found, and on the wire at
// once when the wire is idle and the port not paused.
void Fabric::enqueue(uint32_t egress, uint32_t frame, uint64_t now) {
    Egress& port = egress_[egress];
    const Packet& packet = packets_[frame];
    if (port.queue_limit_bytes && port.queue_bytes + packet.length > port.queue_limit_bytes) {
        ++port.counters.dropped;
        sink_.drop(frame);
        return;
    }
    if (marker_ && !port.nic && marker_->mark(port.queue_bytes, uniform_(rng_)) &&
        transport::mark_congestion_experienced(packet.data, packet.length))
        ++port.counters.marked;
    ++port.counters.queued;
    port.queue_bytes += packet.length;
    port.counters.peak_queue_bytes = std::max(port.counters.peak_queue_bytes, port.queue_bytes);
    // It waits behind the link it came over: past XOFF that link is paused.
    if (spec_.pfc && came_over_[frame] != kNone) {
        Egress& upstream = egress_[came_over_[frame]];
        upstream.far_end_bytes += packet.length;
        if (!upstream.paused && upstream.far_end_bytes > spec_.pfc_xoff_bytes) {
            upstream.paused = true;
            ++upstream.counters.pauses;
        }
    }
    append(port.waiting_first, port.waiting_last, frame);
    if (port.on_wire == kNone)
        start_next(egress, now);
}

// Puts the port's next waiting frame on the wire at `now`, unless it is paused.
void Fabric::start_next(uint32_t egress, uint64_t now) {
    Egress& port = egress_[egress];
    if (port.paused || port.waiting_first == kNone)
        return;
    const uint32_t frame = take_first(port.waiting_first, port.waiting_last);
    port.on_wire = frame;
    const uint64_t wire_ns =
        port.rate_bps > 0 ? static_cast<uint64_t>(static_cast<double>(packets_[frame].length) *
                                                  8e9 / port.rate_bps)
                          : 0;
    push_event(now + wire_ns, egress, EventKind::WireDone);
}

// The frame on the wire has been serialized at `now`: it leaves the queue (and the node,
// for PFC) and reaches the far end one delay later; the next frame starts.
void Fabric::wire_done(uint32_t egress, uint64_t now) {
    Egress& port = egress_[egress];
    const uint32_t frame = port.on_wire;
    port.on_wire = kNone;
    port.queue_bytes -= packets_[frame].length;
    left_node(frame, now);
    append(port.flight_first, port.flight_last, frame);
    push_event(now + port.delay_ns, egress, EventKind::Arrival);
    start_next(egress, now);
}

void Fabric::append(uint32_t& first, uint32_t& last, uint32_t frame) {
    next_[frame] = kNone;
    if (last == kNone)
        first = frame;
    else
        next_[last] = frame;
    last = frame;
}

uint32_t Fabric::take_first(uint32_t& first, uint32_t& last) {
    const uint32_t frame = first;
    first = next_[frame];
    if (first == kNone)
        last = kNone;
    return frame;
}

// A frame has left the node it waited at: the link it came over may resume (PFC XON).
void Fabric::left_node(uint32_t frame, uint64_t now) {
    const uint32_t over = came_over_[frame];
    came_over_[frame] = kNone;
    if (!spec_.pfc || over == kNone)
        return;
    Egress& upstream = egress_[over];
    upstream.far_end_bytes -= packets_[frame].length;
    if (upstream.paused && upstream.far_end_bytes <= spec_.pfc_xoff_bytes / 2) {
        upstream.paused = false;
        if (upstream.on_wire == kNone)
            start_next(over, now);
    }
}

size_t Fabric::advance(uint64_t now) {
    size_t delivered = 0;
    for (;;) {
        const uint64_t next = events_.empty() ? UINT64_MAX : events_.front().time;
        if (reroute_at_ <= now && reroute_at_ <= next) {
            compute_routes();
            reroute_at_ = UINT64_MAX;
            continue;
        }
        if (next > now)
            break;
        std::pop_heap(events_.begin(), events_.end(), std::greater<Event>());
        const Event event = events_.back();
        events_.pop_back();
        if (event.kind == EventKind::WireDone) {
            wire_done(event.egress, event.time);
            continue;
        }
        // The first frame in flight on the port arrives (they arrive in the order they
        // left, one delay after their serialization ended).
        Egress& port = egress_[event.egress];
        const uint32_t frame = take_first(port.flight_first, port.flight_last);
        cross(event.egress, frame, event.time, delivered);
    }
    return delivered;
}

uint64_t Fabric::next_event() const {
    return std::min(events_.empty() ? UINT64_MAX : events_.front().time, reroute_at_);
}

// A frame at the far end of port `egress`'s link: lost with the link, or to an injected
// fault, or on to the next node.
void Fabric::cross(uint32_t egress, uint32_t frame, uint64_t now, size_t& delivered) {
    Egress& port = egress_[egress];
    if (!port.up) {
        ++port.counters.link_down;
        sink_.drop(frame);
        if (port.held != kNone) {
            ++port.counters.link_down;
            sink_.drop(port.held);
            port.held = kNone;
        }
        return;
    }
    if (port.faults.enabled()) {
        Packet& packet = packets_[frame];
        // Damage only past the UDP header (Ethernet, IPv4, UDP), as on the other ports:
        // the ICRC finds it.
        const FaultDecision d = port.faults.decide(packet.length, 14 + 20 + 8);
        if (d.drop) {
            sink_.drop(frame);
            return;
        }
        if (d.corrupt_at >= 0)
            packet.data[d.corrupt_at] ^= 0x5a;
        if (d.duplicate) {
            uint8_t* twin_data = nullptr;
            const uint32_t twin = sink_.copy(frame, twin_data);
            if (twin != kNone && twin < packets_.size()) {
                packets_[twin] = packet;
                packets_[twin].frame = twin;
                packets_[twin].data = twin_data; // its own bytes: marks and damage are its own
                hop_count_[twin] = hop_count_[frame];
                came_over_[twin] = egress;
                reach(port.to, twin, now, delivered);
            }
        }
        if (d.hold && port.held == kNone) {
            port.held = frame; // goes on after the next frame
            return;
        }
    }
    ++port.counters.frames;
    port.counters.bytes += packets_[frame].length;
    came_over_[frame] = egress; // what waits at the far end holds this link back (PFC)
    reach(port.to, frame, now, delivered);
    if (port.held != kNone && port.held != frame) {
        const uint32_t held = port.held;
        port.held = kNone;
        ++port.counters.frames;
        port.counters.bytes += packets_[held].length;
        came_over_[held] = egress;
        reach(port.to, held, now, delivered);
    }
}

void Fabric::reach(uint32_t node, uint32_t frame, uint64_t now, size_t& delivered) {
    const uint32_t endpoint = endpoint_of_node_[node];
    if (endpoint == kNone) {
        arrive(node, frame, now);
    } else if (endpoint == packets_[frame].destination) {
        sink_.deliver(endpoint, frame);
        ++delivered;
    } else {
        sink_.drop(frame); // cannot happen: no route ends at another endpoint
    }
}

void Fabric::arrive(uint32_t node, uint32_t frame, uint64_t now) {
    SwitchCounters& counters = switches_[node];
    if (++hop_count_[frame] > kMaxHops) {
        ++counters.hop_limit;
        sink_.drop(frame);
        return;
    }
    const uint32_t egress = choose(node, packets_[frame], now);
    if (egress == kNone) {
        ++counters.no_route;
        sink_.drop(frame);
        return;
    }
    ++counters.forwarded;
    enqueue(egress, frame, now);
}

uint32_t Fabric::choose(uint32_t node, const Packet& packet, uint64_t now) {
    const size_t at = node * topology_.endpoints.size() + packet.destination;
    uint32_t candidates[kMostHops];
    size_t n = 0;
    for (uint32_t i = 0; i < route_count_[at] && n < kMostHops; ++i) {
        const uint32_t e = hops_[route_first_[at] + i];
        if (egress_[e].up) // a switch stops using its own port at once
            candidates[n++] = e;
    }
    if (n == 0)
        return kNone;
    const uint64_t hash = mix(packet.flow_hash ^ mix(node + spec_.seed));
    const auto least_loaded = [&](size_t start) {
        uint32_t best = candidates[start % n];
        for (size_t i = 1; i < n; ++i) {
            const uint32_t e = candidates[(start + i) % n];
            if (egress_[e].queue_bytes < egress_[best].queue_bytes)
                best = e;
        }
        return best;
    };
    switch (spec_.routing) {
    case Routing::Ecmp:
        return candidates[hash % n];
    case Routing::Adaptive: {
        Flowlet& flowlet = flowlets_[node][hash % kFlowletSlots];
        const uint64_t flow = mix(packet.flow_hash + packet.destination) | 1;
        const bool idle = now - flowlet.last_seen > spec_.flowlet_gap_ns;
        if (flowlet.flow != flow && flowlet.flow != 0 && !idle)
            return candidates[hash % n]; // another flow's slot, in use: ECMP, which is stable
        const bool usable = std::find(candidates, candidates + n, flowlet.egress) != candidates + n;
        // A flow idle for longer than the gap may change path without reordering when the
        // gap exceeds the difference of the paths' queueing delays (RC's NAKs show it
        // when it does not).
        if (flowlet.flow != flow || !usable || idle)
            flowlet.egress = least_loaded(static_cast<size_t>(hash >> 32));
        flowlet.flow = flow;
        flowlet.last_seen = now;
        return flowlet.egress;
    }
    case Routing::Spray:
        return least_loaded(spray_turn_[node]++);
    }
    return kNone;
}

bool Fabric::set_link(const std::string& a, const std::string& b, bool up, uint64_t now) {
    const uint32_t na = topology_.node(a), nb = topology_.node(b);
    bool found = false;
    advance(now);
    for (Egress& port : egress_)
        if ((port.from == na && port.to == nb) || (port.from == nb && port.to == na)) {
            port.up = up;
            found = true;
        }
    if (!found)
        return false;
    // A link's own switches see it go down at once (choose() skips it); the rest route
    // around it after the convergence delay. A link that comes up is used at once: no
    // frame has been sent toward it yet, and a host back on its link is reachable again.
    if (up || spec_.convergence_ns == 0)
        compute_routes();
    else
        reroute_at_ = std::min(reroute_at_, now + spec_.convergence_ns);
    if (!up)
        for (Egress& port : egress_)
            if (!port.up && port.held != kNone) { // a frame held back for reordering
                ++port.counters.link_down;
                sink_.drop(port.held);
                port.held = kNone;
            }
    return true;
}

} // namespace softhca::engine::fabric
