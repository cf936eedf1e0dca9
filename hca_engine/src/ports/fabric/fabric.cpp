#include "fabric.hpp"

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
    : topology_(topology), spec_(spec), sink_(sink) {
    const size_t nodes = topology_.nodes.size();
    out_.resize(nodes);
    endpoint_of_node_.assign(nodes, kNone);
    for (uint32_t e = 0; e < topology_.endpoints.size(); ++e)
        endpoint_of_node_[topology_.endpoints[e]] = e;
    egress_.reserve(topology_.links.size() * 2);
    for (uint32_t l = 0; l < topology_.links.size(); ++l) {
        const Link& link = topology_.links[l];
        for (const auto& [from, to] : {std::pair{link.a, link.b}, std::pair{link.b, link.a}}) {
            CongestionPointConfig config;
            config.shaper.rate_bps = link.parameters.rate_bps;
            config.shaper.delay_ns = link.parameters.delay_ns;
            const bool nic = !topology_.nodes[from].is_switch;
            // A NIC's queue holds its senders back (nic_room) instead of dropping; a
            // switch's egress drops what finds it full, and marks ECN when configured.
            config.shaper.queue_limit_bytes = nic ? 0 : link.parameters.queue_bytes;
            if (!nic)
                config.ecn_marking = spec_.ecn;
            Egress egress;
            if (!nic && topology_.nodes[to].is_switch)
                egress.faults = FaultInjector(spec_.faults, egress_.size());
            egress.from = from;
            egress.to = to;
            egress.link = l;
            egress.queue = CongestionPoint<uint32_t>(config, spec_.seed * 1000003 + egress_.size());
            out_[from].push_back(static_cast<uint32_t>(egress_.size()));
            egress_.push_back(std::move(egress));
        }
    }
    packets_.resize(frame_capacity);
    hop_count_.resize(frame_capacity);
    switches_.resize(nodes);
    flowlets_.resize(nodes);
    if (spec_.routing == Routing::Adaptive)
        for (uint32_t n = 0; n < nodes; ++n)
            if (topology_.nodes[n].is_switch)
                flowlets_[n].resize(kFlowletSlots);
    spray_turn_.resize(nodes);
    events_.reserve(egress_.size() * 4 + 64);
    arrivals_.reserve(frame_capacity);
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

bool Fabric::nic_room(uint32_t source, uint32_t bytes, uint64_t now) {
    if (source >= endpoints())
        return true;
    Egress& nic = egress_[out_[topology_.endpoints[source]].front()];
    return nic.queue.queue_bytes(now) + bytes <= spec_.link.queue_bytes;
}

void Fabric::enqueue(uint32_t egress, uint32_t frame, uint64_t now) {
    Egress& port = egress_[egress];
    const Packet& packet = packets_[frame];
    const uint64_t before = port.queue.next_release();
    if (!port.queue.enqueue(frame, packet.data, packet.length, now, packet.vl,
                            port.counters.queue)) {
        sink_.drop(frame);
        return;
    }
    if (port.queue.next_release() != before)
        schedule(egress);
}

void Fabric::schedule(uint32_t egress) {
    const uint64_t at = egress_[egress].queue.next_release();
    if (at == UINT64_MAX)
        return;
    events_.push_back({at, egress});
    std::push_heap(events_.begin(), events_.end(), std::greater<PortEvent>());
}

size_t Fabric::advance(uint64_t now) {
    size_t delivered = 0;
    for (;;) {
        const uint64_t next_port = events_.empty() ? UINT64_MAX : events_.front().time;
        if (reroute_at_ <= now && reroute_at_ <= next_port) {
            compute_routes();
            reroute_at_ = UINT64_MAX;
            continue;
        }
        if (next_port > now)
            break;
        std::pop_heap(events_.begin(), events_.end(), std::greater<PortEvent>());
        const PortEvent event = events_.back();
        events_.pop_back();
        Egress& port = egress_[event.egress];
        if (port.queue.next_release() != event.time)
            continue; // superseded
        arrivals_.clear();
        port.queue.release(event.time, port.counters.queue,
                           [this](uint32_t frame) { arrivals_.push_back(frame); });
        schedule(event.egress);
        for (uint32_t frame : arrivals_)
            cross(port, frame, event.time, delivered);
    }
    return delivered;
}

// A frame at the far end of `port`'s link: lost with the link, or to an injected fault,
// or on to the next node.
void Fabric::cross(Egress& port, uint32_t frame, uint64_t now, size_t& delivered) {
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
        const Packet& packet = packets_[frame];
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
            const uint32_t twin = sink_.copy(frame);
            if (twin != kNone && twin < packets_.size()) {
                packets_[twin] = packet;
                packets_[twin].frame = twin;
                hop_count_[twin] = hop_count_[frame];
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
    reach(port.to, frame, now, delivered);
    if (port.held != kNone && port.held != frame) {
        const uint32_t held = port.held;
        port.held = kNone;
        ++port.counters.frames;
        port.counters.bytes += packets_[held].length;
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

uint64_t Fabric::next_event() const {
    return std::min(events_.empty() ? UINT64_MAX : events_.front().time, reroute_at_);
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
        uint64_t best_bytes = egress_[best].queue.queue_bytes(now);
        for (size_t i = 1; i < n; ++i) {
            const uint32_t e = candidates[(start + i) % n];
            const uint64_t bytes = egress_[e].queue.queue_bytes(now);
            if (bytes < best_bytes)
                best = e, best_bytes = bytes;
        }
        return best;
    };
    switch (spec_.routing) {
    case Routing::Ecmp:
        return candidates[hash % n];
    case Routing::Adaptive: {
        Flowlet& flowlet = flowlets_[node][hash % kFlowletSlots];
        const bool usable = std::find(candidates, candidates + n, flowlet.egress) != candidates + n;
        // A flow idle for longer than the gap may change path without reordering: what it
        // sent before has left the queues by now.
        if (!usable || now - flowlet.last_seen > spec_.flowlet_gap_ns)
            flowlet.egress = least_loaded(static_cast<size_t>(hash >> 32));
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
    if (spec_.convergence_ns == 0)
        compute_routes();
    else
        reroute_at_ = now + spec_.convergence_ns;
    return true;
}

void Fabric::look(uint64_t now) {
    for (Egress& port : egress_) {
        port.counters.queue.queue_bytes = port.queue.queue_bytes(now);
        port.counters.queue.peak_queue_bytes =
            std::max(port.counters.queue.peak_queue_bytes, port.counters.queue.queue_bytes);
    }
}

} // namespace softhca::engine::fabric
