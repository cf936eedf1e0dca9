// The data path room (datapath/): the polling round (this file), engine QPs and SRQs,
// doorbells, CQ rings and completion channels, QP numbers and multicast groups, DCQCN per
// QP, QP1 (management_datagrams.hpp) and what the card says about itself
// (device_model.hpp). It may use memory/, neighbors/, ports/ and support/; control/ and
// rdma_cm/ use it. What it needs of them comes through interfaces it declares and they
// implement: QueueDirectory and QueueContext (the control room's tables), MadReceiver
// (rdma_cm).
//
// The engine's data path, one polling round at a time: take new work requests off the
// shared rings of the queues whose doorbells were rung (doorbells.hpp), receive a burst from every
// port (ARP, RoCEv2 frames to their QPs), fire the transport timers that are due, and transmit what
// the active QPs have to send. No allocation and no system call per packet (cross-memory-attach
// copies aside).
//
// Only active QPs are visited to transmit: a QP joins the active list when work is
// posted to it, when a packet arrives for it, when its timer fires and when the
// control path changes it (QpSchedule); it stays while it has something to send
// (QueuePair::wants_transmit: a full window, a link down or an unresolved MAC included)
// and leaves when it has nothing. Timers are a min-heap of (deadline, QP): a QP has at
// most one live entry, the earliest; an entry whose deadline is no longer the QP's is
// dropped when it comes up, and a QP whose deadline moved later is simply visited
// early and pushed again.
#pragma once

#include "arp.hpp"
#include "device_model.hpp"
#include "management_datagrams.hpp"
#include "neighbor_discovery.hpp"
#include "neighbor_table.hpp"
#include "ports.hpp"
#include "qp_congestion.hpp"
#include "queue_directory.hpp"
#include "softhca/transport/congestion_control.hpp"
#include "softhca/transport/ib_packet.hpp"
#include "softhca/transport/roce_frame.hpp"

#include <cstdint>
#include <vector>

namespace softhca::engine {

class Datapath final : public QpSchedule, public MadSender {
  public:
    // Serves `own_ports` (every port when empty) and their devices (device i sits on port
    // i): their doorbell pages, frames and QPs. Several data paths serve disjoint sets of
    // ports from threads of their own (datapath_threads.hpp); nothing one touches in a
    // round is touched by another. The tables are sized for every device
    // (QueueDirectory::set_device_count) before.
    Datapath(PortSet& ports, const std::vector<Device>& devices, QueueDirectory& tables,
             std::vector<size_t> own_ports = {});
    ~Datapath() override;
    Datapath(const Datapath&) = delete;
    Datapath& operator=(const Datapath&) = delete;

    // Ports added and removed at run time (`rdma link add` and `delete`, under the
    // world): this data path serves the port, and its device, from its next round; or
    // serves them no more (the device's queues are gone already).
    void add_port(size_t port);
    void remove_port(size_t port);

    // One round. Returns true when anything happened (the loop keeps spinning then).
    bool poll(uint64_t now);
    bool has_qps() const { return tables_.qps > 0; }
    // The earliest transport timer, or UINT64_MAX.
    uint64_t next_deadline() const;
    // Before sleeping: ask providers to ring the doorbell on their next post.
    void arm_doorbells();

    // QpSchedule
    void activate(EngineQp& qp) override;
    void forget(EngineQp& qp) override;

    // DCQCN (datapath_congestion.cpp): off unless the engine runs it. On, the
    // requests of connected QPs leave ECN-capable, a request that arrives marked makes
    // its QP send a CNP to its peer, and a CNP cuts and paces the rate of the QP it names.
    struct CongestionControl {
        bool enabled = false;
        transport::DcqcnParameters dcqcn;
        uint64_t cnp_interval_ns = 50'000;
    };
    void set_congestion_control(const CongestionControl& control) { congestion_ = control; }

    // QP1: MADs that arrive go to `receiver` (none: dropped and counted as no QP).
    void set_mad_receiver(MadReceiver* receiver) { mad_receiver_ = receiver; }
    // MadSender
    bool send_mad(size_t port, const MadPeer& to, const transport::CmMad& mad,
                  uint64_t now) override;
    bool neighbor_resolved(size_t port, const transport::Gid& peer, uint64_t now) override;

    // QPs visited to transmit, work queues looked at for new requests (their doorbells
    // rung), and timer heap entries, since the start (tests).
    uint64_t qp_visits() const { return qp_visits_; }
    uint64_t queue_pulls() const { return queue_pulls_; }
    size_t timer_entries() const { return timers_.size(); }
    size_t active_qps() const { return active_.size(); }

  private:
    // How the ICRC of a frame sent on `port` is made, and of one received there checked.
    static transport::Icrc sent_icrc(const PortInfo& port);
    static transport::Icrc received_icrc(const PortInfo& port);
    size_t receive(size_t port, uint64_t now); // frames taken
    // `icrc`: how the frame's ICRC is checked (offloaded for frames this engine built and
    // handed to itself, PortInfo::icrc_offload).
    void handle_frame(size_t port, const uint8_t* data, uint32_t length, uint64_t now,
                      transport::Icrc icrc);

    // Neighbour resolution (neighbor_resolution.cpp): ARP and ND in, answers out.
    void handle_arp(size_t port, const ArpMessage& arp, uint64_t now);
    void handle_neighbor_discovery(size_t port, const NdMessage& nd, uint64_t now);
    void handle_mad(size_t port, const transport::ParsedFrame& frame,
                    const transport::IbPacket& packet, uint64_t now);
    // Sends up to `budget` packets of the QP; whether it sent any.
    bool transmit(EngineQp& qp, uint64_t now, size_t budget);
    // Where the QP's next packet goes: its path, or for UD the work request's address
    // vector. False (an ARP request or a Neighbor Solicitation sent) while the
    // destination MAC is unknown.
    bool resolve_destination(EngineQp& qp, size_t port, uint64_t now, bool& local);
    // The MAC for `destination` (multicast mapped, unicast from the neighbour table);
    // false after asking for it from `source`, one of the port's GIDs.
    bool mac_for(size_t port, const transport::Gid& destination, const transport::Gid& source,
                 uint64_t now, transport::MacAddress& mac);
    // The IPv4 identification of the next frame: a counter, or 0 on a kernel UDP port
    // (the kernel sends 0 with DF from an unconnected socket, and the ICRC covers it).
    uint16_t next_ipv4_id(const PortInfo& port) { return port.kernel_udp ? 0 : ipv4_id_++; }
    // Congestion control (datapath_congestion.cpp). The QP's DCQCN state, made on first
    // use; null when the engine runs none or for a UD QP.
    QpCongestion* congestion_of(EngineQp& qp);
    // A request for `qp` arrived marked Congestion Experienced: a CNP to its peer.
    void notify_congestion(size_t port, EngineQp& qp, uint64_t now);
    // A CNP for `qp` arrived: its requester's rate is cut.
    void react_to_cnp(size_t port, EngineQp& qp, uint64_t now);
    void fire_timers(uint64_t now);
    // After a QP's turn: its timer's entry, if its deadline moved earlier.
    void schedule_timer(EngineQp& qp);

    struct TimerEntry {
        uint64_t deadline;
        EngineQp* qp;
        // std::push_heap keeps the largest on top: the earliest deadline is "largest".
        bool operator<(const TimerEntry& other) const { return deadline > other.deadline; }
    };

    // Sends what this data path's ports have queued.
    size_t flush_own_ports();

    PortSet& ports_;
    const std::vector<Device>& devices_;
    QueueDirectory& tables_;
    std::vector<size_t> own_ports_;   // the ports this data path serves
    std::vector<size_t> own_devices_; // and the devices on them
    bool owns_every_port_ = true;
    std::vector<NeighborTable> neighbors_;
    std::vector<uint8_t> loopback_; // one frame built for a destination on the same port
    uint16_t ipv4_id_ = 0;
    size_t senders_ = 0; // QPs that sent in the last round: they share the next one's budget
    std::vector<EngineQp*> active_; // to visit next round
    std::vector<EngineQp*> round_;  // being visited
    uint64_t rounds_ = 0;           // rounds run: where the next one starts in round_
    std::vector<TimerEntry> timers_;
    uint64_t qp_visits_ = 0;
    uint64_t queue_pulls_ = 0;
    MadReceiver* mad_receiver_ = nullptr;
    CongestionControl congestion_;
    std::vector<uint32_t> gsi_psn_;      // per port: the PSN of QP1's next packet
    std::vector<uint8_t> rx_priorities_; // per port: the priorities a receive round took
    struct LocalMad {
        size_t port;
        std::vector<uint8_t> frame;
    };
    std::vector<LocalMad> local_mads_; // sent by QP1 to its own port, delivered next round
};

} // namespace softhca::engine
