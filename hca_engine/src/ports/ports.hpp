// The ports room (ports/): the port interface below, its configuration (port_config.hpp),
// each port's GID table, and what sits at a port's transmitter: the shaped link and its
// VL arbitration (link_shaper.hpp), ECN marking (congestion_point.hpp), injected faults
// and capture. Its implementations are rooms of their own: ports/dpdk (the only code
// that uses DPDK), ports/udp (the only code that uses liburing) and ports/fabric. It may
// use support/; the data path above uses it.
//
// The engine's ports as the data path sees them: receive a burst, give frames back,
// allocate, queue and flush transmit frames, one port per device. Three implementations
// in the engine: DpdkPortSet (dpdk_ports.hpp, the only place DPDK appears: the built-in
// wire, whose two ports are DPDK ring ethdevs, and any PMD), UdpPortSet (udp_ports.hpp:
// kernel UDP sockets on io_uring) and FabricPortSet (fabric_ports.hpp: the hosts of a
// fabric inside the engine, --fabric); and a fourth for the unit tests and fuzz targets
// (tests/unit/sim_ports.hpp), a simulated lossy wire that runs the engine's own data
// path (Datapath, EngineQp, ProcessMemory, completions) without I/O.
#pragma once

#include "congestion_point.hpp"
#include "fault_injector.hpp"
#include "pcap_writer.hpp"
#include "port_config.hpp"
#include "softhca/transport/roce_address.hpp"
#include "softhca/transport/service_levels.hpp"

#include <cerrno>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace softhca::engine {

struct PortCounters {
    uint64_t rx_packets = 0;
    uint64_t rx_bytes = 0;
    uint64_t tx_packets = 0;
    uint64_t tx_bytes = 0;
    uint64_t tx_dropped = 0;          // the PMD refused them (queue full)
    uint64_t rx_unhandled = 0;        // not RoCE and not ARP for us
    uint64_t rx_bad_icrc = 0;         // failed the ICRC: dropped
    uint64_t rx_malformed = 0;        // bad lengths, IP checksum, unknown opcode: dropped
    uint64_t rx_no_qp = 0;            // no such destination QP: dropped
    uint64_t rx_wrong_source = 0;     // to a connected QP from another than its peer: dropped
    uint64_t arp_requests = 0;        // sent
    uint64_t arp_replies = 0;         // sent
    uint64_t nd_solicitations = 0;    // IPv6 Neighbor Solicitations sent
    uint64_t nd_advertisements = 0;   // IPv6 Neighbor Advertisements sent
    uint64_t kernel_resolutions = 0;  // destinations the kernel was asked to resolve (af_xdp)
    uint64_t rx_neighbor_dropped = 0; // ARP or ND nobody asked for, or malformed: dropped
    uint64_t rx_mads = 0;             // to QP1, handed to the communication manager
    uint64_t rx_mads_dropped = 0;     // to QP1 but not a GSI datagram (opcode, Q_Key)
    uint64_t tx_mads = 0;
    // Congestion control, when the engine runs it:
    uint64_t rx_ecn_ce = 0;       // requests that arrived marked Congestion Experienced
    uint64_t tx_cnps = 0;         // CNPs sent for them (at most one per QP per interval)
    uint64_t rx_cnps = 0;         // CNPs that arrived for a QP of ours
    uint64_t tx_cnps_dropped = 0; // a CNP not sent: no buffer, no neighbour yet
    // Priority flow control (--pfc):
    uint64_t rx_pfc_frames = 0; // PFC frames from the peer (pauses and resumes)
    uint64_t tx_pfc_frames = 0; // PFC frames we sent (XOFF, renewals, XON)
    uint64_t tx_pfc_waits = 0;  // times a QP's packet waited for its paused priority
};

struct RxFrame {
    const uint8_t* data = nullptr;
    uint32_t length = 0;
    void* handle = nullptr; // give back with PortSet::release()
};

struct TxFrame {
    uint8_t* data = nullptr;
    uint32_t capacity = 0;
    void* handle = nullptr;
    uint8_t vl = 0; // the virtual lane it leaves on (the port's SL-to-VL table of its SL)
};

struct PortInfo {
    uint16_t dpdk_port = 0;
    std::string pmd;     // driver name as DPDK reports it
    std::string devargs; // empty for the built-in wire
    transport::MacAddress mac{};
    uint32_t ipv4 = 0;                // 0: the port has no IPv4 address
    std::vector<transport::Gid> ipv6; // its IPv6 addresses (global or unique local)
    std::vector<transport::Gid> gids; // its GID table (gid_table.hpp), fixed once up
    std::string netdev;
    uint32_t eth_mtu = 1500;
    uint32_t max_eth_mtu = 1500;
    uint32_t link_speed_mbps = 0;
    FaultInjector faults;                // off unless configured
    std::shared_ptr<PcapWriter> capture; // null unless --pcap
    // A kernel UDP socket port (udp_ports.hpp): the kernel resolves neighbours, and sends
    // with UDP source port 4791, IPv4 identification 0 and DF, so frames are built so.
    bool kernel_udp = false;
    // The kernel shares the port's interface and owns its ARP and neighbour discovery (an
    // af_xdp port, whose XDP program passes the kernel all but RoCEv2): destinations are
    // resolved in the kernel's neighbour table of interface kernel_ifindex
    // (kernel_neighbors.hpp), and the engine neither asks nor answers on the wire.
    bool kernel_neighbors = false;
    int kernel_ifindex = 0;
    // Frames on this port go from this engine to itself and nothing in between can see or
    // change them (the built-in wire, without a capture or injected faults): their ICRC
    // is neither computed nor checked, as a NIC's loopback with ICRC offload
    // (transport::Icrc::Offloaded). Every other port computes and checks every ICRC.
    bool icrc_offload = false;
    // The port's peer is another port of this engine (the built-in wire): what it sends
    // is in the peer's receive queue as soon as it is flushed.
    bool in_engine_wire = false;
    // The port's transmit queue holds its senders back when full (tx_room), as a NIC's
    // send queue waits for its link: the ports of a fabric (ports/fabric).
    bool holds_senders_back = false;
    bool link_up = false; // the link as DPDK reports it, and the port administratively up
    bool admin_up = true;
    // Removed at run time (`rdma link delete`, PortSet::remove_port): the port sends and
    // receives nothing and its index is never used again; its addresses stay as they were
    // (what still names them finds a port that is down) but no lookup picks it.
    bool removed = false;
    PortCounters counters;
    // The shaped link and ECN marking at this port's transmitter (congestion_point.hpp),
    // as configured, and what they did. Off by default.
    CongestionPointConfig congestion_point;
    CongestionPointCounters congestion_point_counters;
    // Which VL a frame of each SL leaves on (IBTA 7.6.6): SL n on VL n by default.
    transport::SlToVlTable sl_to_vl;
    // The global traffic class every QP's packets carry (--traffic-class), or -1.
    int global_traffic_class = -1;
    // RoCE frames carry a priority tag with the SL as PCP (--priority-tag).
    bool priority_tag = false;
    bool pfc = false;               // priority flow control with the peer (--pfc)
    uint8_t pfc_priorities = 0xff;  // the priorities it is enabled for (--pfc-priorities)
    uint8_t pfc_paused_by_peer = 0; // priorities the peer paused, when last looked at
    uint8_t pfc_asked_peer = 0;     // priorities we asked the peer to pause
    // Link-level credits: the port's queue is lossless, senders wait for room (tx_room).
    bool lossless() const { return congestion_point.credit_buffer_bytes != 0; }
    // The rate the port sends at: the shaped link's, else the link's, else 100 Gb/s.
    double line_rate_bps() const {
        if (congestion_point.shaper.rate_bps > 0)
            return congestion_point.shaper.rate_bps;
        return link_speed_mbps ? link_speed_mbps * 1e6 : 100e9;
    }
};

// A fabric inside the engine (--fabric, ports/fabric): its shape, every egress port of
// every link (a switch's port, or a NIC's) and every switch, as status shows them.
struct FabricStatus {
    struct Egress {
        std::string from, to; // node names
        double rate_bps = 0;
        uint64_t delay_ns = 0;
        bool up = true;
        uint64_t frames = 0, bytes = 0;               // arrived at the far end
        uint64_t link_down = 0;                       // lost with the link
        uint64_t queued = 0, dropped = 0, marked = 0; // joined the queue, found it full, CE
        uint64_t pauses = 0;                          // PFC: times the far end paused it
        bool paused = false;                          // PFC: paused now
        uint64_t queue_bytes = 0, peak_queue_bytes = 0;
        // 0: no limit (a NIC's queue, which holds its senders back; a switch's under PFC)
        uint64_t queue_limit_bytes = 0;
    };
    struct Switch {
        std::string name;
        uint32_t tier = 0;
        uint64_t forwarded = 0, no_route = 0;
    };
    std::string description; // empty: no fabric
    std::string routing;
    uint64_t time_ns = 0;               // when it was looked at (CLOCK_MONOTONIC)
    std::vector<std::string> endpoints; // node name of each device's port
    // Each device's host's network namespace (netns=1), empty without them.
    std::vector<std::string> namespaces;
    std::vector<Egress> egress;
    std::vector<Switch> switches;
};

// The most ports a port set holds, those added at run time included (PortSet::add_port):
// room is kept for them from the start, so what refers to a port's PortInfo stays valid.
constexpr size_t kMaxPorts = 64;

class PortSet {
  public:
    virtual ~PortSet() = default;
    PortSet() { ports_.reserve(kMaxPorts); }
    PortSet(const PortSet&) = delete;
    PortSet& operator=(const PortSet&) = delete;

    size_t size() const { return ports_.size(); }
    const PortInfo& info(size_t index) const { return ports_[index]; }
    PortCounters& counters(size_t index) { return ports_[index].counters; }

    // Reads link state without waiting; returns the indices whose state changed.
    virtual std::vector<size_t> refresh_links() = 0;

    // Takes a port administratively down or up (the link is set down or up where the
    // port supports that). Returns true when the port's link state changed.
    virtual bool set_admin_state(size_t index, bool up) = 0;

    // Receives up to `max` frames from a port; each goes back with release().
    virtual size_t receive(size_t index, RxFrame* frames, size_t max) = 0;
    virtual void release(void* handle) = 0;

    // A buffer for one outgoing frame of up to the port's frame size; false when the
    // packet pool is exhausted.
    virtual bool tx_alloc(size_t index, TxFrame& frame) = 0;
    // Queues a filled frame; queued frames go out in bursts (flush()).
    virtual void tx_queue(size_t index, TxFrame& frame, uint32_t length) = 0;
    virtual void tx_abort(TxFrame& frame) = 0;
    // Sends everything queued, and what a shaped link lets out by now. Returns the number
    // of frames handed to the ports.
    virtual size_t flush() = 0;
    // When a shaped link next lets a frame out (flush() sends it), or UINT64_MAX.
    virtual uint64_t next_tx_release() const { return UINT64_MAX; }
    // The same for one port: what a data-path thread that serves only some of the ports
    // asks (datapath_threads.hpp). Port sets that serve one thread only (the udp ports,
    // whose sockets share one io_uring) answer for all their ports.
    virtual size_t flush_port(size_t index) {
        (void)index;
        return flush();
    }
    virtual uint64_t next_tx_release_on(size_t index) const {
        (void)index;
        return next_tx_release();
    }
    virtual bool awaiting_credits_on(size_t index, uint64_t now) const {
        (void)index;
        return awaiting_credits(now);
    }
    // Whether each port may be served by a data-path thread of its own.
    virtual bool ports_serve_threads() const { return false; }
    // Whether a frame of `bytes` on `vl` should be built now: false while a lossless
    // port's queue for the VL is full (link-level credits; the sender waits, as an HCA's
    // send queue waits for its VL's credits). Lossy ports always say yes.
    virtual bool tx_room(size_t index, uint8_t vl, uint32_t bytes) {
        (void)index;
        (void)vl;
        (void)bytes;
        return true;
    }

    // Priority flow control (--pfc; asked of PFC ports only). Whether the peer paused
    // `priority` at `now`.
    virtual bool tx_paused(size_t index, uint8_t priority, uint64_t now) {
        (void)index;
        (void)priority;
        (void)now;
        return false;
    }
    // After a receive round on a port: whether it left frames waiting, and the priorities
    // (bit mask) of what it took; the port may ask its peer to pause or resume.
    virtual void after_receive_round(size_t index, bool backlogged, uint8_t priorities,
                                     uint64_t now) {
        (void)index;
        (void)backlogged;
        (void)priorities;
        (void)now;
    }
    // Whether a lossless port waits for credits its peer is about to send (the engine
    // keeps polling for them instead of sleeping).
    virtual bool awaiting_credits(uint64_t now) const {
        (void)now;
        return false;
    }

    // The fabric the ports are endpoints of (--fabric); its description is empty for
    // every other kind of port.
    virtual FabricStatus fabric_status() { return {}; }
    // Takes the fabric's link between nodes `a` and `b` down or up: 0, ENOENT when there
    // is no such link, EOPNOTSUPP when the engine runs no fabric (softhca up --fabric).
    virtual int set_fabric_link(const std::string& a, const std::string& b, bool up) {
        (void)a;
        (void)b;
        (void)up;
        return EOPNOTSUPP;
    }

    // A port added at run time (`rdma link add`, daemon/device_links.hpp), of this set's
    // kind, on `port.netdev` with the addresses of `port`; the caller holds the world.
    // Returns its index, or a negative errno value (EOPNOTSUPP: this kind of port set
    // takes none; ENOSPC: kMaxPorts reached) with `why` saying it in words.
    virtual long add_port(const PortConfig& port, std::string& why) {
        (void)port;
        why = "this engine's ports cannot be added to";
        return -EOPNOTSUPP;
    }
    // Stops a port for good (`rdma link delete`), under the world: it is marked removed,
    // its link down, and what it holds is freed; nothing is sent or received on it again.
    virtual void remove_port(size_t index) { mark_removed(index); }

    // Descriptors that become readable when a port has received something, for the
    // engine to sleep on (drained by reading 8 bytes); none for polled ports.
    virtual std::vector<int> wakeup_fds() const { return {}; }

  protected:
    void mark_removed(size_t index) {
        PortInfo& port = ports_[index];
        port.removed = true;
        port.link_up = false;
        port.admin_up = false;
    }
    std::vector<PortInfo> ports_;
};

} // namespace softhca::engine
