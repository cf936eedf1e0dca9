#include "datapath.hpp"

#include "doorbells.hpp"
#include "engine_qp.hpp"
#include "engine_srq.hpp"
#include "gid_table.hpp"
#include "process_memory.hpp"
#include "route_hop_limit.hpp"
#include "softhca/transport/ib_packet.hpp"
#include "softhca/transport/priority_flow_control.hpp"
#include "softhca/transport/roce_frame.hpp"
#include "softhca/transport/roce_path.hpp"
#include "softhca/transport/service_levels.hpp"

#include <algorithm>
#include <cstring>

namespace softhca::engine {

namespace tp = transport;

namespace {
constexpr size_t kRxBurst = 32;
constexpr size_t kRxBurstsPerRound = 16;
// Packets one round may send, shared among the QPs that sent in the round before (each
// may send between 4 and 32; idle QPs take nothing from it).
// What a round sends is received the next round, while it is still in the caches: 32
// QPs sending 32 MTU packets each would put 4 MiB in flight per round, and the ICRC
// check and the copy at the receiver would miss on every byte.
constexpr size_t kTxPacketsPerRound = 64;
constexpr size_t kTxMostPerQp = 32;
constexpr size_t kTxLeastPerQp = 4;

} // namespace

tp::Icrc Datapath::sent_icrc(const PortInfo& port) {
    return port.icrc_offload ? tp::Icrc::Offloaded : tp::Icrc::Computed;
}
tp::Icrc Datapath::received_icrc(const PortInfo& port) {
    return port.icrc_offload ? tp::Icrc::Offloaded
           : port.kernel_udp ? tp::Icrc::Ipv4IdUnknown
                             : tp::Icrc::Computed;
}

Datapath::Datapath(PortSet& ports, const std::vector<Device>& devices, QueueDirectory& tables,
                   std::vector<size_t> own_ports)
    : ports_(ports), devices_(devices), tables_(tables), own_ports_(std::move(own_ports)),
      neighbors_(ports.size()), loopback_(16384), gsi_psn_(ports.size()),
      rx_priorities_(ports.size()) {
    if (own_ports_.empty())
        for (size_t port = 0; port < ports_.size(); ++port)
            own_ports_.push_back(port);
    owns_every_port_ = own_ports_.size() == ports_.size();
    for (size_t device = 0; device < devices_.size(); ++device)
        if (std::find(own_ports_.begin(), own_ports_.end(), devices_[device].port_index) !=
            own_ports_.end())
            own_devices_.push_back(device);
    neighbors_.reserve(kMaxPorts);
    gsi_psn_.reserve(kMaxPorts);
    rx_priorities_.reserve(kMaxPorts);
    // Room for a busy engine's lists, so that rounds do not allocate.
    active_.reserve(1024);
    round_.reserve(1024);
    timers_.reserve(1024);
    tables_.schedule = this;
}

void Datapath::add_port(size_t port) {
    neighbors_.resize(ports_.size());
    gsi_psn_.resize(ports_.size());
    rx_priorities_.resize(ports_.size());
    own_ports_.push_back(port);
    for (size_t device = 0; device < devices_.size(); ++device)
        if (devices_[device].port_index == port)
            own_devices_.push_back(device);
    owns_every_port_ = own_ports_.size() == ports_.size();
}

void Datapath::remove_port(size_t port) {
    std::erase(own_ports_, port);
    std::erase_if(own_devices_, [&](size_t device) { return devices_[device].port_index == port; });
    std::erase_if(local_mads_, [&](const LocalMad& m) { return m.port == port; });
    neighbors_[port] = NeighborTable();
    owns_every_port_ = false;
}

Datapath::~Datapath() {
    for (EngineQp* qp : active_)
        qp->scheduling() = {};
    for (const TimerEntry& entry : timers_)
        entry.qp->scheduling() = {};
    if (tables_.schedule == this)
        tables_.schedule = nullptr;
}

void Datapath::activate(EngineQp& qp) {
    if (qp.scheduling().active)
        return;
    qp.scheduling().active = true;
    active_.push_back(&qp);
}

void Datapath::forget(EngineQp& qp) {
    // A QP being destroyed (control path, not per packet): nothing may point at it.
    std::erase(active_, &qp);
    std::erase(round_, &qp);
    if (std::erase_if(timers_, [&](const TimerEntry& e) { return e.qp == &qp; }))
        std::make_heap(timers_.begin(), timers_.end());
    qp.scheduling() = {};
}

void Datapath::schedule_timer(EngineQp& qp) {
    uint64_t deadline = qp.transport().next_deadline();
    if (const auto& cc = qp.congestion())
        deadline = std::min(deadline, cc->wake_at); // held by its pace
    QpScheduling& s = qp.scheduling();
    if (deadline == tp::kNoDeadline || deadline >= s.timer_at)
        return;
    s.timer_at = deadline;
    timers_.push_back({deadline, &qp});
    std::push_heap(timers_.begin(), timers_.end());
}

void Datapath::fire_timers(uint64_t now) {
    while (!timers_.empty() && timers_.front().deadline <= now) {
        std::pop_heap(timers_.begin(), timers_.end());
        const TimerEntry entry = timers_.back();
        timers_.pop_back();
        QpScheduling& s = entry.qp->scheduling();
        if (s.timer_at != entry.deadline)
            continue; // superseded by an earlier deadline that already came up
        s.timer_at = UINT64_MAX;
        activate(*entry.qp); // its turn fires the timer if it is still due
    }
}

bool Datapath::poll(uint64_t now) {
    ClientProcess::next_round(); // clients' liveness is looked at once per round
    bool busy = false;
    if (!local_mads_.empty()) {
        busy = true;
        std::vector<LocalMad> mads;
        mads.swap(local_mads_);
        for (const LocalMad& m : mads)
            handle_frame(m.port, m.frame.data(), static_cast<uint32_t>(m.frame.size()), now,
                         tp::Icrc::Computed);
    }
    // New work requests: only the queues whose doorbells were rung. A queue whose ring
    // still holds requests its transport queue had no room for rings itself again.
    for (size_t device : own_devices_)
        for (Doorbells* doorbells : tables_.doorbell_pages_by_device[device])
            doorbells->take(
                [&](EngineQp& qp, uint32_t slot) {
                    ++queue_pulls_;
                    bool left_in_ring = false;
                    if (qp.pull_work(now, left_in_ring)) {
                        busy = true;
                        activate(qp);
                    }
                    if (left_in_ring)
                        doorbells->ring(slot);
                },
                [&](EngineSrq& srq, uint32_t slot) {
                    ++queue_pulls_;
                    bool left_in_ring = false;
                    busy |= srq.pull_work(left_in_ring);
                    if (left_in_ring)
                        doorbells->ring(slot);
                });
    for (size_t port : own_ports_) {
        const uint64_t before = ports_.info(port).counters.rx_packets;
        // Take in what waits, up to about what a round may send: frames left in a ring
        // from round to round grow past the caches (16 QPs with full windows hold 16 MiB
        // there), and every later touch of them, the ICRC first, misses.
        bool backlogged = true; // every burst came full: more waits
        for (size_t burst = 0; burst < kRxBurstsPerRound && backlogged; ++burst)
            backlogged = receive(port, now) == kRxBurst;
        busy |= ports_.info(port).counters.rx_packets != before;
        if (ports_.info(port).pfc) {
            ports_.after_receive_round(port, backlogged, rx_priorities_[port], now);
            rx_priorities_[port] = 0;
        }
    }
    fire_timers(now);
    const size_t budget =
        std::clamp(kTxPacketsPerRound / std::max<size_t>(senders_, 1), kTxLeastPerQp, kTxMostPerQp);
    senders_ = 0;
    // QPs activated during this round's turns (a loopback frame arriving) go next round.
    round_.swap(active_);
    for (EngineQp* qp : round_)
        qp->scheduling().active = false;
    // Each round starts one QP further along: when what may be sent is short (a full
    // lossless queue's room, a paced port), no QP is always the first to take it.
    const size_t first = round_.empty() ? 0 : rounds_ % round_.size();
    ++rounds_;
    for (size_t k = 0; k < round_.size(); ++k) {
        EngineQp& qp = *round_[(first + k) % round_.size()];
        ++qp_visits_;
        if (qp.transport().next_deadline() <= now)
            qp.transport().on_timer(now);
        if (transmit(qp, now, budget)) {
            busy = true;
            ++senders_;
        }
        if (qp.transport().wants_transmit(now))
            activate(qp);
        schedule_timer(qp);
    }
    round_.clear();
    if (flush_own_ports() > 0) {
        busy = true;
        // What went out on the built-in wire is already in the other port's queue: take it
        // in now, a round earlier (a message's responder and completion, half a round
        // trip's latency), when the other port is ours.
        for (size_t port : own_ports_)
            if (ports_.info(port).in_engine_wire)
                receive(port, now);
    }
    for (size_t device : own_devices_)
        for (auto& [srqn, srq] : tables_.srqs_by_device[device])
            srq->sync();
    // Nothing of this round's stays queued for a process's memory: a QP the control path
    // destroys between rounds is on no thread's write-behind list (process_memory.hpp).
    ProcessMemory::flush_all_writes();
    // Requesters held back by a lossless port: their credits come in the next frames.
    bool awaiting = false;
    for (size_t port : own_ports_)
        awaiting |= ports_.awaiting_credits_on(port, now);
    return busy || awaiting;
}

size_t Datapath::flush_own_ports() {
    if (owns_every_port_)
        return ports_.flush();
    size_t sent = 0;
    for (size_t port : own_ports_)
        sent += ports_.flush_port(port);
    return sent;
}

uint64_t Datapath::next_deadline() const {
    // The heap's top (rarely an entry already superseded: then the engine wakes early).
    // QPs left active are waiting for something that wakes the engine itself: an ACK
    // to open their window, a link, an ARP reply.
    // A shaped link's held frames go out when they have crossed it.
    uint64_t release = UINT64_MAX;
    if (owns_every_port_)
        release = ports_.next_tx_release();
    else
        for (size_t port : own_ports_)
            release = std::min(release, ports_.next_tx_release_on(port));
    return std::min(timers_.empty() ? UINT64_MAX : timers_.front().deadline, release);
}

void Datapath::arm_doorbells() {
    for (size_t device : own_devices_)
        for (Doorbells* doorbells : tables_.doorbell_pages_by_device[device])
            doorbells->arm();
}

size_t Datapath::receive(size_t port, uint64_t now) {
    RxFrame frames[kRxBurst];
    const size_t n = ports_.receive(port, frames, kRxBurst);
    const tp::Icrc icrc = received_icrc(ports_.info(port));
    for (size_t i = 0; i < n; ++i)
        handle_frame(port, frames[i].data, frames[i].length, now, icrc);
    // Writes into applications' memory were queued from the frames: do them (one call
    // per process memory) before the frames go back and before any ACK leaves.
    ProcessMemory::flush_all_writes();
    for (size_t i = 0; i < n; ++i)
        ports_.release(frames[i].handle);
    return n;
}

void Datapath::handle_frame(size_t port, const uint8_t* data, uint32_t length, uint64_t now,
                            tp::Icrc icrc) {
    PortCounters& counters = ports_.counters(port);
    ArpMessage arp;
    if (parse_arp(data, length, arp)) {
        handle_arp(port, arp, now);
        return;
    }
    NdMessage nd;
    switch (parse_neighbor_discovery(data, length, nd)) {
    case NdParse::Ok:
        handle_neighbor_discovery(port, nd, now);
        return;
    case NdParse::Malformed:
        ++counters.rx_neighbor_dropped; // RFC 4861 7.1: silently discarded
        return;
    case NdParse::NotNd:
        break;
    }
    const bool kernel_udp = ports_.info(port).kernel_udp;
    tp::ParsedFrame frame;
    switch (tp::parse_roce_frame(data, length, frame, icrc)) {
    case tp::FrameError::None:
        break;
    case tp::FrameError::BadIcrc:
        ++counters.rx_bad_icrc; // A17.4.2: a packet failing the ICRC is silently dropped
        return;
    case tp::FrameError::NotRoce:
        ++counters.rx_unhandled;
        return;
    default:
        ++counters.rx_malformed;
        return;
    }
    // What a receive round took, by priority (PFC asks the peer to pause those).
    if (ports_.info(port).pfc)
        rx_priorities_[port] |= static_cast<uint8_t>(
            1u << tp::frame_priority(frame.addressing.priority, frame.addressing.traffic_class));
    const tp::Gid& dst_gid = frame.addressing.dst_gid;
    const bool multicast = gid_is_ipv4_multicast(dst_gid);
    if (!multicast && !port_owns(ports_.info(port), dst_gid)) {
        ++counters.rx_unhandled; // not addressed to this port
        return;
    }
    tp::IbPacket packet;
    if (tp::parse_ib_packet(frame.ib, frame.ib_length, packet) != tp::PacketError::None) {
        ++counters.rx_malformed;
        return;
    }
    // A WRITE with immediate whose bytes its initiator placed (single copy) comes only
    // from a requester of this engine, over the built-in wire: elsewhere the mark is a
    // reserved bit, ignored.
    packet.placed = packet.bth->placed_by_initiator() && ports_.info(port).in_engine_wire;
    // RoCEv2 carries the SL only in a priority tag (0 untagged), for the completion.
    if (frame.addressing.priority > 0)
        packet.sl = static_cast<uint8_t>(frame.addressing.priority);
    // The source address teaches us the peer's MAC for the way back (the kernel's
    // business on a UDP socket port), but only from a packet that a QP accepts below: a
    // frame to no QP, or from a source its connection does not name, teaches nothing.
    auto learn_source = [&] {
        if (!kernel_udp)
            neighbors_[port].learn(frame.addressing.src_gid, frame.addressing.src_mac);
    };
    uint8_t grh[tp::kGrhBytes];
    if (packet.deth)
        tp::grh_from_frame(frame, grh);
    if (multicast) {
        // A multicast datagram (destination QP 0xFFFFFF) goes to every QP of
        // this device that joined the group.
        const auto* members = tables_.mcast_by_device[port].members(dst_gid);
        if (!members || packet.bth->dest_qp() != 0xffffff || !packet.deth) {
            ++counters.rx_no_qp;
            return;
        }
        learn_source();
        for (EngineQp* qp : *members) {
            qp->transport().receive(packet, now, grh);
            activate(*qp);
        }
        return;
    }
    if (packet.bth->dest_qp() == tp::kGsiQp) {
        if (packet.deth && packet.deth->qkey() == tp::kGsiQkey)
            learn_source(); // a CM peer is answered on the way it came
        handle_mad(port, frame, packet, now);
        return;
    }
    EngineQp* qp = tables_.qp_numbers_by_device[port].find(packet.bth->dest_qp());
    if (!qp) {
        ++counters.rx_no_qp;
        return;
    }
    // A connected QP takes packets from its peer only (the source must be the GID of its
    // path, as Linux rxe's check_addr requires): anyone else on the network, or on a UDP
    // socket's port, cannot inject into a connection. UD takes any source.
    if (qp->type() != tp::QpType::UD && qp->addressing().dst_gid != frame.addressing.src_gid &&
        qp->addressing().dst_gid != tp::Gid{}) {
        ++counters.rx_wrong_source;
        return;
    }
    learn_source();
    if (packet.info->kind == tp::OpKind::CongestionNotification) {
        react_to_cnp(port, *qp, now);
        return;
    }
    if (congestion_.enabled && packet.info->request &&
        tp::ecn_of(frame.addressing.traffic_class) == tp::Ecn::Ce)
        notify_congestion(port, *qp, now);
    qp->transport().receive(packet, now, packet.deth ? grh : nullptr);
    activate(*qp);
}

void Datapath::handle_mad(size_t port, const tp::ParsedFrame& frame, const tp::IbPacket& packet,
                          uint64_t now) {
    PortCounters& counters = ports_.counters(port);
    // QP1 takes UD SEND-only datagrams (C13-1 ... 13.5.1: GSI packets are UD) carrying
    // the GSI Q_Key (C10-15: a datagram whose Q_Key differs is dropped).
    if (packet.bth->opcode() != tp::op::ud(tp::op::kSendOnly) || !packet.deth ||
        packet.deth->qkey() != tp::kGsiQkey) {
        ++counters.rx_mads_dropped;
        return;
    }
    if (!mad_receiver_) {
        ++counters.rx_no_qp;
        return;
    }
    ++counters.rx_mads;
    MadPeer from;
    from.gid = frame.addressing.src_gid;
    from.ipv4 = tp::gid_is_ipv4_mapped(from.gid) ? tp::load_be32(from.gid.data() + 12) : 0;
    from.local = frame.addressing.dst_gid;
    from.qpn = packet.deth->src_qp();
    from.pkey = packet.bth->pkey();
    mad_receiver_->receive_mad(port, from, packet.payload, packet.payload_length, now);
}

bool Datapath::send_mad(size_t port, const MadPeer& to, const tp::CmMad& mad, uint64_t now) {
    const PortInfo& info = ports_.info(port);
    if (!info.link_up)
        return false;
    tp::FrameAddressing addressing;
    addressing.src_mac = info.mac;
    addressing.dst_gid = to.gid;
    addressing.src_gid = to.local != tp::Gid{} && gid_table_holds(info.gids, to.local)
                             ? to.local
                             : source_gid_or_fallback(info.gids, 0, to.gid);
    addressing.udp_src_port =
        info.kernel_udp ? tp::kRoceV2UdpPort : EngineQp::ud_source_port(tp::kGsiQp);
    addressing.hop_limit = route_hop_limit();
    const bool local = port_owns(info, to.gid);
    if (local)
        addressing.dst_mac = info.mac;
    else if (!mac_for(port, addressing.dst_gid, addressing.src_gid, now, addressing.dst_mac))
        return false;
    auto build = [&](uint8_t* frame_data) {
        uint8_t* ib = frame_data + tp::roce_header_bytes(addressing);
        auto* bth = reinterpret_cast<tp::Bth*>(ib);
        bth->set(tp::op::ud(tp::op::kSendOnly), false, 0, to.pkey, to.qpn, false,
                 gsi_psn_[port]++ & 0xffffff);
        reinterpret_cast<tp::Deth*>(ib + sizeof(tp::Bth))->set(tp::kGsiQkey, tp::kGsiQp);
        std::memcpy(ib + sizeof(tp::Bth) + sizeof(tp::Deth), &mad, sizeof(mad));
        return tp::finish_roce_frame(frame_data, addressing,
                                     sizeof(tp::Bth) + sizeof(tp::Deth) + sizeof(mad),
                                     next_ipv4_id(info));
    };
    ++ports_.counters(port).tx_mads;
    if (local) {
        // To this very port: delivered at the start of the next round, not from inside
        // the CM's own call (its answer would come back into it).
        std::vector<uint8_t> frame(tp::roce_header_bytes(addressing) + sizeof(tp::Bth) +
                                   sizeof(tp::Deth) + sizeof(mad) + tp::kIcrcBytes);
        frame.resize(build(frame.data()));
        local_mads_.push_back({port, std::move(frame)});
        return true;
    }
    TxFrame frame;
    if (!ports_.tx_alloc(port, frame))
        return false;
    frame.vl = info.sl_to_vl.vl(0); // GMPs on SL 0 (their path's; the CM uses no other)
    ports_.tx_queue(port, frame, static_cast<uint32_t>(build(frame.data)));
    return true;
}

bool Datapath::resolve_destination(EngineQp& qp, size_t port, uint64_t now, bool& local) {
    const PortInfo& info = ports_.info(port);
    tp::FrameAddressing& addressing = qp.addressing();
    if (const tp::AddressVector* av = qp.transport().next_destination()) {
        std::copy(av->dgid.begin(), av->dgid.end(), addressing.dst_gid.begin());
        addressing.src_gid = source_gid_or_fallback(info.gids, av->sgid_index, av->dgid);
        addressing.hop_limit = tp::wire_hop_limit(av->dgid, av->hop_limit, route_hop_limit());
        addressing.traffic_class = av->traffic_class;
        addressing.flow_label = av->flow_label & tp::kFlowLabelMask;
        // A UD destination with a flow label takes its entropy (as a ConnectX AH does);
        // without one the QP's own port.
        addressing.udp_src_port = addressing.flow_label
                                      ? tp::udp_source_port_for_flow(addressing.flow_label)
                                      : EngineQp::ud_source_port(qp.qp_num());
    }
    // The port's global traffic class, if it has one, instead of the address vector's (as
    // a ConnectX's "Global tclass"); DCQCN's ECN bits go on top of it.
    if (info.global_traffic_class >= 0)
        addressing.traffic_class = static_cast<uint8_t>(info.global_traffic_class);
    if (info.kernel_udp)
        addressing.udp_src_port = tp::kRoceV2UdpPort; // what the kernel will put there
    local = port_owns(info, addressing.dst_gid);
    if (local) {
        addressing.dst_mac = info.mac;
        return true;
    }
    return mac_for(port, addressing.dst_gid, addressing.src_gid, now, addressing.dst_mac);
}

bool Datapath::transmit(EngineQp& qp, uint64_t now, size_t budget) {
    tp::QueuePair& queue = qp.transport();
    if (!queue.wants_transmit(now))
        return false;
    const size_t port = devices_[qp.device()].port_index;
    const PortInfo& info = ports_.info(port);
    if (!info.link_up)
        return false; // the link is down: requests wait, timers run (and may expire)
    const tp::FrameAddressing& addressing = qp.addressing();
    const bool per_packet = qp.type() == tp::QpType::UD; // each request has its address
    bool local = false;
    if (!per_packet && !resolve_destination(qp, port, now, local))
        return false;
    // DCQCN's reaction point: requests leave ECN-capable, at the QP's rate.
    QpCongestion* cc = per_packet ? nullptr : congestion_of(qp);
    if (cc) {
        cc->wake_at = UINT64_MAX;
        cc->rate.advance(now);
        if (!tp::ecn_capable(addressing.traffic_class))
            qp.addressing().traffic_class = tp::with_ecn(addressing.traffic_class, tp::Ecn::Ect0);
    }
    bool sent = false;
    for (size_t i = 0; i < budget; ++i) {
        if (per_packet &&
            (!queue.wants_transmit(now) || !resolve_destination(qp, port, now, local)))
            break;
        if (cc && !local && !cc->may_send(now)) {
            ++cc->paced;
            cc->wake_at = cc->paced_until();
            break;
        }
        // Its SL: the QP's, or the UD request's. Its VL: the port's SL-to-VL table's for
        // it; with priority tags the SL is also the frame's 802.1Q priority.
        const tp::AddressVector* av = per_packet ? queue.next_destination() : nullptr;
        const uint8_t sl = av ? av->sl : qp.sl();
        const uint8_t vl = info.sl_to_vl.vl(sl);
        if (info.priority_tag)
            qp.addressing().priority = static_cast<int8_t>(sl & 7);
        const size_t front = tp::roce_header_bytes(addressing);
        // Multicast leaves on the wire and reaches this device's own members too.
        const bool multicast = gid_is_ipv4_multicast(addressing.dst_gid);
        if (local || multicast) {
            // A destination on this very port (a QP connected to itself or to another
            // QP of this device): the frame goes straight to our own receive path.
            const size_t n = queue.transmit(loopback_.data() + front,
                                            loopback_.size() - front - tp::kIcrcBytes, now);
            if (!n)
                break;
            // A frame only for this port never leaves the engine: its ICRC is offloaded
            // unless a copy goes on the wire too.
            const tp::Icrc icrc = multicast ? sent_icrc(info) : tp::Icrc::Offloaded;
            const size_t length =
                tp::finish_roce_frame(loopback_.data(), addressing, n, next_ipv4_id(info), icrc);
            if (multicast) {
                TxFrame frame;
                if (ports_.tx_alloc(port, frame)) {
                    frame.vl = vl;
                    std::copy_n(loopback_.data(), length, frame.data);
                    ports_.tx_queue(port, frame, static_cast<uint32_t>(length));
                }
            }
            handle_frame(port, loopback_.data(), static_cast<uint32_t>(length), now, icrc);
            ProcessMemory::flush_all_writes(); // the next packet reuses loopback_
            sent = true;
            continue;
        }
        // A lossless port's full VL holds the requester back (link-level credits), as a
        // fabric NIC's full queue does: the packet is built when there is room again,
        // nothing is dropped.
        if ((info.lossless() || info.holds_senders_back) &&
            !ports_.tx_room(port, vl,
                            info.eth_mtu + static_cast<uint32_t>(tp::kEthernetHeaderBytes)))
            break;
        // A priority the peer paused (PFC) holds it back until the pause ends.
        if (info.pfc &&
            ports_.tx_paused(
                port, tp::frame_priority(addressing.priority, addressing.traffic_class), now)) {
            ++ports_.counters(port).tx_pfc_waits;
            break;
        }
        TxFrame frame;
        if (!ports_.tx_alloc(port, frame))
            break;
        frame.vl = vl;
        const size_t n =
            queue.transmit(frame.data + front, frame.capacity - front - tp::kIcrcBytes, now);
        if (!n) {
            ports_.tx_abort(frame);
            break;
        }
        const size_t length =
            tp::finish_roce_frame(frame.data, addressing, n, next_ipv4_id(info), sent_icrc(info));
        ports_.tx_queue(port, frame, static_cast<uint32_t>(length));
        if (cc)
            cc->sent(static_cast<uint32_t>(length), now);
        sent = true;
    }
    return sent;
}

} // namespace softhca::engine
