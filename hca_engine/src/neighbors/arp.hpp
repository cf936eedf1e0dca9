// ARP (RFC 826) for a port's IPv4 address, so that peers, a Linux kernel among them,
// can resolve it (the neighbour table that keeps the answers: neighbor_table.hpp).
#pragma once

#include "softhca/transport/roce_address.hpp"

#include <cstddef>
#include <cstdint>

namespace softhca::engine {

constexpr size_t kArpFrameBytes = 60; // 42 bytes of ARP, padded to the Ethernet minimum

struct ArpMessage {
    bool request = false;
    transport::MacAddress sender_mac{};
    uint32_t sender_ip = 0;
    transport::MacAddress target_mac{};
    uint32_t target_ip = 0;
};

// Parses an Ethernet frame carrying IPv4-over-Ethernet ARP. Returns false otherwise.
bool parse_arp(const uint8_t* frame, size_t length, ArpMessage& out);

// Writes a request (broadcast) or a reply (to target_mac) into `frame`; returns its size.
size_t build_arp(uint8_t* frame, const ArpMessage& message);

} // namespace softhca::engine
