// The engine's ports: DPDK ethdevs, one per device. This file and ports.cpp are the
// only place DPDK appears. The default is a back-to-back pair joined by two rte_rings
// (the built-in wire); any other PMD is named by its device arguments.
#pragma once

#include "engine_config.hpp"
#include "fault_injector.hpp"
#include "pcap_writer.hpp"
#include "softhca/transport/roce_address.hpp"

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
    uint64_t tx_dropped = 0;   // the PMD refused them (queue full)
    uint64_t rx_unhandled = 0; // not RoCE and not ARP for us
    uint64_t rx_bad_icrc = 0;  // failed the ICRC: dropped
    uint64_t rx_malformed = 0; // bad lengths, IP checksum, unknown opcode: dropped
    uint64_t rx_no_qp = 0;     // no such destination QP: dropped
    uint64_t arp_requests = 0; // sent
    uint64_t arp_replies = 0;  // sent
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
};

struct PortInfo {
    uint16_t dpdk_port = 0;
    std::string pmd;     // driver name as DPDK reports it
    std::string devargs; // empty for the built-in wire
    transport::MacAddress mac{};
    uint32_t ipv4 = 0;
    std::string netdev;
    uint32_t eth_mtu = 1500;
    uint32_t max_eth_mtu = 1500;
    uint32_t link_speed_mbps = 0;
    FaultInjector faults;                // off unless configured
    std::shared_ptr<PcapWriter> capture; // null unless --pcap
    bool link_up = false; // the link as DPDK reports it, and the port administratively up
    bool admin_up = true;
    PortCounters counters;
};

class PortSet {
  public:
    // Initialises the DPDK EAL without hugepages and brings every configured port up.
    // Throws std::runtime_error with a readable message on failure.
    explicit PortSet(const EngineConfig& config);
    ~PortSet();
    PortSet(const PortSet&) = delete;
    PortSet& operator=(const PortSet&) = delete;

    size_t size() const { return ports_.size(); }
    const PortInfo& info(size_t index) const { return ports_[index]; }

    // Reads link state without waiting; returns the indices whose state changed.
    std::vector<size_t> refresh_links();

    // Takes a port administratively down or up (the PMD's link is set down or up where
    // it supports that). Returns true when the port's link state changed.
    bool set_admin_state(size_t index, bool up);

    PortCounters& counters(size_t index) { return ports_[index].counters; }

    // Receives up to `max` frames from a port.
    size_t receive(size_t index, RxFrame* frames, size_t max);
    void release(void* handle);

    // A buffer for one outgoing frame of up to the port's frame size; false when the
    // packet pool is exhausted.
    bool tx_alloc(size_t index, TxFrame& frame);
    // Queues a filled frame; queued frames go out in bursts (flush()).
    void tx_queue(size_t index, TxFrame& frame, uint32_t length);
    void tx_abort(TxFrame& frame);
    // Sends everything queued. Returns the number of frames handed to the PMDs.
    size_t flush();

  private:
    struct Dpdk;
    std::unique_ptr<Dpdk> dpdk_;
    std::vector<PortInfo> ports_;
};

} // namespace softhca::engine
