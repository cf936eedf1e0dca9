#include "fabric_ports.hpp"

#include "clock.hpp"
#include "gid_table.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace softhca::engine {

namespace {

// Frames the fabric's ports share: enough for every switch queue to fill with full frames
// several times over. Untouched pages of the pool cost no memory.
constexpr uint32_t kFrames = 16384;
// A fabric port's MTU: path MTU 4096 and its headers (the pool's frames are this large).
constexpr uint32_t kFabricMtu = 4200;

} // namespace

FabricPortSet::FabricPortSet(const PortsConfig& config, const fabric::FabricSpec& spec)
    : frame_bytes_(kFabricMtu + 32) {
    fabric::FabricSpec with_faults = spec;
    with_faults.faults = config.faults;
    const fabric::Topology topology = fabric::build_topology(with_faults);
    const uint32_t endpoints = static_cast<uint32_t>(topology.endpoints.size());
    pool_.resize(size_t{kFrames} * frame_bytes_);
    lengths_.assign(kFrames, 0);
    free_.reserve(kFrames);
    for (uint32_t f = kFrames; f-- > 0;)
        free_.push_back(f);
    rx_.resize(endpoints);
    for (RxRing& ring : rx_)
        ring.slots.resize(kFrames);
    for (uint32_t i = 0; i < endpoints; ++i) {
        PortInfo info;
        info.pmd = "fabric";
        // 198.19.0.1 onward, 250 to a /24 (RFC 2544's benchmarking range); 2001:2:0:fab::1
        // onward (RFC 5180's).
        info.ipv4 = (198u << 24) | (19u << 16) | ((i / 250) << 8) | (i % 250 + 1);
        transport::Gid ipv6{0x20, 0x01, 0x00, 0x02, 0x00, 0x00, 0x0f, 0xab};
        ipv6[14] = static_cast<uint8_t>((i + 1) >> 8);
        ipv6[15] = static_cast<uint8_t>(i + 1);
        info.ipv6 = {ipv6};
        info.mac = {0x02, 0x53, 0x46, 0x42, static_cast<uint8_t>(i >> 8), static_cast<uint8_t>(i)};
        info.gids = build_gid_table(info.ipv4, info.ipv6, info.mac);
        info.eth_mtu = info.max_eth_mtu = std::min(config.eth_mtu, kFabricMtu);
        info.link_speed_mbps = static_cast<uint32_t>(spec.link.rate_bps / 1e6);
        info.link_up = true;
        info.holds_senders_back = true;
        info.in_engine_wire = true; // what arrives is in the receive queue at the flush
        info.sl_to_vl = config.sl_to_vl_for(i);
        info.global_traffic_class = config.traffic_class;
        info.capture = config.capture_for(i);
        // The frames cross only this engine, but a fabric may damage them (--faults): the
        // ICRC is computed and checked unless nothing can.
        info.icrc_offload = !config.faults.enabled() && !info.capture;
        ports_.push_back(std::move(info));
    }
    fabric::FabricSink& sink = *this;
    fabric_ = std::make_unique<fabric::Fabric>(topology, with_faults, kFrames, sink);
}

uint32_t FabricPortSet::endpoint_of_mac(const uint8_t* mac) const {
    if (mac[0] != 0x02 || mac[1] != 0x53 || mac[2] != 0x46 || mac[3] != 0x42)
        return UINT32_MAX;
    const uint32_t i = uint32_t{mac[4]} << 8 | mac[5];
    return i < ports_.size() ? i : UINT32_MAX;
}

bool FabricPortSet::set_admin_state(size_t index, bool up) {
    PortInfo& info = ports_[index];
    info.admin_up = up;
    const bool changed = info.link_up != up;
    info.link_up = up;
    const fabric::Topology& t = fabric_->topology();
    const fabric::Link* nic = nullptr;
    for (const fabric::Link& link : t.links)
        if (link.a == t.endpoints[index] || link.b == t.endpoints[index])
            nic = &link;
    if (changed && nic)
        fabric_->set_link(t.nodes[nic->a].name, t.nodes[nic->b].name, up, monotonic_ns());
    return changed;
}

size_t FabricPortSet::receive(size_t index, RxFrame* frames, size_t max) {
    RxRing& ring = rx_[index];
    size_t n = 0;
    while (n < max && ring.count > 0) {
        const uint32_t f = ring.slots[ring.head];
        ring.head = (ring.head + 1) % ring.slots.size();
        --ring.count;
        frames[n++] = {frame_data(f), lengths_[f], handle_of(f)};
        ports_[index].counters.rx_bytes += lengths_[f];
    }
    ports_[index].counters.rx_packets += n;
    return n;
}

void FabricPortSet::release(void* handle) {
    free_.push_back(index_of(handle));
}

bool FabricPortSet::tx_alloc(size_t index, TxFrame& frame) {
    (void)index;
    if (free_.empty())
        return false;
    const uint32_t f = free_.back();
    free_.pop_back();
    frame = {frame_data(f), frame_bytes_, handle_of(f)};
    return true;
}

void FabricPortSet::tx_abort(TxFrame& frame) {
    release(frame.handle);
    frame.handle = nullptr;
}

bool FabricPortSet::tx_room(size_t index, uint8_t vl, uint32_t bytes) {
    (void)vl;
    fabric_->advance(monotonic_ns());
    return fabric_->nic_room(static_cast<uint32_t>(index), bytes);
}

void FabricPortSet::tx_queue(size_t index, TxFrame& frame, uint32_t length) {
    const uint32_t f = index_of(frame.handle);
    frame.handle = nullptr;
    PortInfo& info = ports_[index];
    const uint64_t now = monotonic_ns();
    lengths_[f] = length;
    info.counters.tx_packets++;
    info.counters.tx_bytes += length;
    uint8_t* data = frame_data(f);
    if (info.capture)
        info.capture->write(data, length, now);
    if (!info.link_up || length < 14) {
        ++info.counters.tx_dropped;
        free_.push_back(f);
        return;
    }
    if (data[0] & 1) {
        // A broadcast or multicast: a copy to every other endpoint, at once.
        for (uint32_t to = 0; to < ports_.size(); ++to) {
            if (to == index || !ports_[to].link_up || free_.empty())
                continue;
            const uint32_t c = free_.back();
            free_.pop_back();
            std::memcpy(frame_data(c), data, length);
            lengths_[c] = length;
            deliver(to, c);
        }
        free_.push_back(f);
        return;
    }
    const uint32_t to = endpoint_of_mac(data);
    if (to == UINT32_MAX) {
        ++info.counters.tx_dropped; // no such endpoint on the fabric
        free_.push_back(f);
        return;
    }
    fabric::Packet packet;
    packet.frame = f;
    packet.data = data;
    packet.length = length;
    packet.destination = to;
    packet.flow_hash = fabric::five_tuple_hash(data, length);
    fabric_->advance(now); // what is due happens first (a wire freed, a pause that began)
    fabric_->send(static_cast<uint32_t>(index), packet, now);
}

size_t FabricPortSet::flush() {
    fabric_->advance(monotonic_ns());
    const size_t delivered = delivered_since_flush_;
    delivered_since_flush_ = 0;
    return delivered;
}

void FabricPortSet::deliver(uint32_t endpoint, uint32_t frame) {
    RxRing& ring = rx_[endpoint];
    ring.slots[(ring.head + ring.count) % ring.slots.size()] = frame;
    ++ring.count;
    ++delivered_since_flush_;
}

void FabricPortSet::drop(uint32_t frame) {
    free_.push_back(frame);
}

uint32_t FabricPortSet::copy(uint32_t frame, uint8_t*& data) {
    if (free_.empty())
        return UINT32_MAX;
    const uint32_t c = free_.back();
    free_.pop_back();
    std::memcpy(frame_data(c), frame_data(frame), lengths_[frame]);
    lengths_[c] = lengths_[frame];
    data = frame_data(c);
    return c;
}

size_t FabricPortSet::frames_in_fabric() const {
    size_t waiting = 0;
    for (const RxRing& ring : rx_)
        waiting += ring.count;
    return kFrames - free_.size() - waiting;
}

FabricStatus FabricPortSet::fabric_status() {
    const uint64_t now = monotonic_ns();
    fabric_->advance(now);
    const fabric::Topology& t = fabric_->topology();
    FabricStatus status;
    status.description = fabric::describe(fabric_->spec());
    status.routing = fabric::routing_name(fabric_->spec().routing);
    status.time_ns = now;
    for (uint32_t node : t.endpoints)
        status.endpoints.push_back(t.nodes[node].name);
    status.namespaces = namespaces_;
    for (const fabric::Fabric::Egress& e : fabric_->egress_ports()) {
        FabricStatus::Egress out;
        out.from = t.nodes[e.from].name;
        out.to = t.nodes[e.to].name;
        const fabric::LinkParameters& link = t.links[e.link].parameters;
        out.rate_bps = link.rate_bps;
        out.delay_ns = link.delay_ns;
        out.up = e.up;
        out.frames = e.counters.frames;
        out.bytes = e.counters.bytes;
        out.link_down = e.counters.link_down;
        out.queued = e.counters.queued;
        out.dropped = e.counters.dropped;
        out.marked = e.counters.marked;
        out.pauses = e.counters.pauses;
        out.paused = e.paused;
        out.queue_bytes = e.queue_bytes;
        out.peak_queue_bytes = e.counters.peak_queue_bytes;
        out.queue_limit_bytes = e.queue_limit_bytes;
        status.egress.push_back(out);
    }
    for (uint32_t n = 0; n < t.nodes.size(); ++n) {
        if (!t.nodes[n].is_switch)
            continue;
        const fabric::SwitchCounters& c = fabric_->switch_counters(n);
        status.switches.push_back({t.nodes[n].name, t.nodes[n].tier, c.forwarded, c.no_route});
    }
    return status;
}

int FabricPortSet::set_fabric_link(const std::string& a, const std::string& b, bool up) {
    if (!fabric_->set_link(a, b, up, monotonic_ns()))
        return ENOENT;
    // A NIC's link is its port's link (the control path raises PORT_ERR and PORT_ACTIVE).
    const fabric::Topology& t = fabric_->topology();
    for (size_t i = 0; i < ports_.size(); ++i) {
        const std::string& name = t.nodes[t.endpoints[i]].name;
        if (name == a || name == b)
            ports_[i].link_up = up && ports_[i].admin_up;
    }
    return 0;
}

} // namespace softhca::engine
