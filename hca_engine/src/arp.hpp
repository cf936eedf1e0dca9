// ARP (RFC 826) for a port's IPv4 address, so that peers, a Linux kernel among them,
// can resolve it, and the neighbour table that maps peer addresses to MACs.
#pragma once

#include "softhca/transport/roce_address.hpp"

#include <cstddef>
#include <cstdint>
#include <unordered_map>

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

class NeighborTable {
  public:
    // The MAC for an IPv4 address, or nullptr when not known (yet).
    const transport::MacAddress* lookup(uint32_t ip) const {
        auto it = entries_.find(ip);
        return it == entries_.end() ? nullptr : &it->second;
    }
    void learn(uint32_t ip, const transport::MacAddress& mac) { entries_[ip] = mac; }
    size_t size() const { return entries_.size(); }

    // Rate limit for requests: true when a request for `ip` may go out at `now_ns`.
    bool may_request(uint32_t ip, uint64_t now_ns) {
        uint64_t& last = last_request_[ip];
        if (last && now_ns - last < 100'000'000)
            return false;
        last = now_ns;
        return true;
    }

  private:
    std::unordered_map<uint32_t, transport::MacAddress> entries_;
    std::unordered_map<uint32_t, uint64_t> last_request_;
};

} // namespace softhca::engine
