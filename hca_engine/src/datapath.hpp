// The engine's data path, one polling round at a time: take new work requests off the
// shared rings, receive a burst from every port (ARP, RoCEv2 frames to their QPs),
// transmit what the QPs have to send, and fire transport timers. No allocation and no
// system call per packet (cross-memory-attach copies aside).
#pragma once

#include "arp.hpp"
#include "device_model.hpp"
#include "ports.hpp"
#include "resource_tables.hpp"
#include "softhca/transport/ib_packet.hpp"

#include <cstdint>
#include <vector>

namespace softhca::engine {

class Datapath {
  public:
    Datapath(PortSet& ports, const std::vector<Device>& devices, KeySpace& tables);

    // One round. Returns true when anything happened (the loop keeps spinning then).
    bool poll(uint64_t now);
    bool has_qps() const { return tables_.qps > 0; }
    // The earliest transport timer, or UINT64_MAX.
    uint64_t next_deadline() const;
    // Before sleeping: ask providers to ring the doorbell on their next post.
    void arm_doorbells();

  private:
    size_t receive(size_t port, uint64_t now); // frames taken
    void handle_frame(size_t port, const uint8_t* data, uint32_t length, uint64_t now);
    void handle_arp(size_t port, const ArpMessage& arp);
    // Sends up to `budget` packets of the QP; whether it sent any.
    bool transmit(EngineQp& qp, uint64_t now, size_t budget);
    // Where the QP's next packet goes: its path, or for UD the work request's address
    // vector. False (an ARP request sent) while the destination MAC is unknown.
    bool resolve_destination(EngineQp& qp, size_t port, uint64_t now, bool& local);
    bool mac_for(size_t port, uint32_t ip, uint64_t now, transport::MacAddress& mac);

    PortSet& ports_;
    const std::vector<Device>& devices_;
    KeySpace& tables_;
    std::vector<NeighborTable> neighbors_;
    std::vector<uint8_t> loopback_; // one frame built for a destination on the same port
    uint16_t ipv4_id_ = 0;
    size_t senders_ = 0; // QPs that sent in the last round: they share the next one's budget
};

} // namespace softhca::engine
