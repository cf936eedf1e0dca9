// How the engine's ports are made: each port's device and addresses, and what every
// port's transmitter does (faults, capture, the shaped link, ECN, VL arbitration, SL to
// VL, priority tags, PFC). The engine's command line (daemon/engine_config.hpp) fills it.
#pragma once

#include "congestion_point.hpp"
#include "fault_injector.hpp"
#include "pcap_writer.hpp"
#include "softhca/transport/roce_address.hpp"
#include "softhca/transport/service_levels.hpp"
#include "softhca/transport/vl_arbiter.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace softhca::engine {

struct PortConfig {
    // DPDK device arguments (e.g. "net_af_packet0,iface=veth0"); empty for one end
    // of the built-in back-to-back wire; "udp" for a kernel UDP socket port.
    std::string devargs;
    uint32_t ipv4 = 0;                // host order; 0 for a port with IPv6 only
    std::vector<transport::Gid> ipv6; // global or unique-local IPv6 addresses
    std::string netdev;               // kernel interface behind the port, for the GIDs' ndev

    bool is_kernel_udp() const { return devargs == "udp"; }
};

struct PortsConfig {
    std::string prefix = "softhca"; // devices are <prefix>0, <prefix>1, ...
    uint32_t eth_mtu = 9000;
    uint32_t memory_mb = 256;      // DPDK's memory
    std::vector<PortConfig> ports; // empty: the built-in wire with two devices
    FaultConfig faults;            // applied to every port's transmit side
    std::string pcap_prefix;       // nonempty: capture each port's sent frames to
                                   // <pcap_prefix>-<device>.pcap
    // Each off by default: a shaped link and ECN marking at every port's transmitter
    // (--shape, --ecn).
    CongestionPointConfig congestion_point; // its arbitration: --vl-arbitration
    transport::SlToVlTable sl_to_vl;        // --sl-to-vl, every port
    // `--vl-arbitration PORT@TABLES` and `--sl-to-vl PORT@TABLE`: one port's own (PORT is
    // the index of its device, <prefix>PORT), over the every-port value above.
    std::map<size_t, transport::VlArbitrationTables> arbitration_by_port;
    std::map<size_t, transport::SlToVlTable> sl_to_vl_by_port;
    const transport::VlArbitrationTables& arbitration_for(size_t port) const {
        auto it = arbitration_by_port.find(port);
        return it == arbitration_by_port.end() ? congestion_point.arbitration : it->second;
    }
    // Port `port`'s capture (--pcap): <pcap_prefix>-<prefix><port>.pcap opened, or null
    // without one. Throws std::runtime_error when the file cannot be written.
    std::shared_ptr<PcapWriter> capture_for(size_t port) const;
    const transport::SlToVlTable& sl_to_vl_for(size_t port) const {
        auto it = sl_to_vl_by_port.find(port);
        return it == sl_to_vl_by_port.end() ? sl_to_vl : it->second;
    }
    // --traffic-class: the port's global traffic class (a ConnectX's "Global tclass" under
    // MLNX_OFED, /sys/class/infiniband/DEV/tc/PORT/traffic_class): every QP's packets
    // carry it instead of their address vector's. -1: none.
    int traffic_class = -1;
    // --priority-tag: RoCE frames carry an 802.1Q priority tag (VID 0) whose PCP is the
    // SL (as Linux's RoCE maps an address's SL to the VLAN priority), so the SL is on the
    // wire and in the receiver's completions (wc.sl). DPDK ports only.
    bool priority_tag = false;
    // --pfc: priority flow control (802.1Qbb) with a foreign peer: the port pauses a
    // priority its peer's PFC frames pause, and asks its peer to pause what floods its
    // receive queue (transport/priority_flow_control.hpp). DPDK ports only.
    bool pfc = false;
    // --pfc-priorities LIST: the priorities PFC is enabled for (bit p: priority p); --pfc
    // alone enables all eight.
    uint8_t pfc_priorities = 0xff;
};

// True when devargs name a PCI device (DDDD:BB:DD.F or BB:DD.F, optionally followed by
// ",key=value"): those are allowed by the EAL with -a instead of created with --vdev.
bool is_pci_devargs(const std::string& devargs);

} // namespace softhca::engine
